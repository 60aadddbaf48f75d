//! `/v1/audio/transcriptions` and `/v1/audio/translations`, OpenAI's
//! speech-to-text API on a model that hears: the form read ([`form`]), the
//! whole clip decoded on the work pool, each window of it
//! ([`media::Clip::windows`]) a chat request through the
//! [`pipeline`](crate::pipeline) with Gemma's instruction, and the texts
//! joined into a transcript in the format asked for, or streamed as
//! OpenAI's `transcript.text.*` events.

mod form;

use crate::api::{Input, Request, SpeculationChoice};
use crate::body::read_body;
use crate::error::ApiError;
use crate::pipeline::{self, Submitted};
use crate::reply::{self, Piece, Reply};
use crate::AppState;
use ::media::Clip;
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use engine::transcribe::{AudioTask, Segment, Transcript, WINDOW_MAX_TOKENS};
use form::AudioForm;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// `POST /v1/audio/transcriptions`.
pub(crate) async fn transcriptions(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    answer(st, headers, body, AudioTask::Transcribe)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// `POST /v1/audio/translations`.
pub(crate) async fn translations(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    answer(st, headers, body, AudioTask::Translate)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn answer(
    st: AppState,
    headers: HeaderMap,
    body: Body,
    task: AudioTask,
) -> Result<Response, ApiError> {
    let received = Instant::now();
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = read_body(&st, &headers, body).await?;
    let mut form = form::parse(body.bytes, content_type.as_deref(), task).await?;
    let clip = decode_clip(&st, &mut form).await?;
    if form.stream {
        return Ok(stream(st, form, clip, received));
    }
    let timeout = st.config.request_timeout;
    let transcript = reply::within(timeout, transcribe(&st, &form, &clip, received, None)).await?;
    let (transcript, usage) = transcript;
    let body = transcript.render(form.format, &usage);
    Ok(([(header::CONTENT_TYPE, form.format.content_type())], body).into_response())
}

/// The whole clip at 16 kHz, decoded on the work pool within the model's
/// clip limits (the file's bytes are let go once decoded); a model that
/// does not hear is refused first.
async fn decode_clip(st: &AppState, form: &mut AudioForm) -> Result<Clip, ApiError> {
    let lease = st.models.lease(form.model.as_deref()).await?;
    if !lease.engine.has_audio() {
        return Err(ApiError::bad_param(
            "model",
            format!(
                "The model `{}` does not hear (it has no audio tower); serve a Gemma 3n or \
                 Gemma 4 model with its audio encoder to transcribe.",
                lease.0.id
            ),
        ));
    }
    let limits = &lease.engine.options().limits;
    // The decoding refuses a clip that would take more than its bound.
    let memory =
        Clip::whole_memory_bound(form.file.len(), limits.clip_seconds).min(limits.decode_bytes);
    let (engine, file) = (
        std::sync::Arc::clone(&lease.engine),
        std::mem::take(&mut form.file),
    );
    let decoded = st
        .work
        .run(memory, move || engine.decode_long_clip(&file))
        .await?;
    decoded.map_err(|e| ApiError::bad_param("file", format!("The audio file cannot be read: {e}.")))
}

/// The transcript of `clip`, a window at a time; each window's text pieces
/// are sent to `deltas` as they come, when given. Returns the transcript
/// and its usage in OpenAI's token shape.
async fn transcribe(
    st: &AppState,
    form: &AudioForm,
    clip: &Clip,
    received: Instant,
    deltas: Option<&mpsc::Sender<Value>>,
) -> Result<(Transcript, Value), ApiError> {
    let rate = f64::from(::media::SAMPLE_RATE);
    let (mut input, mut output) = (0, 0);
    let mut segments = Vec::new();
    for (i, range) in clip.windows().into_iter().enumerate() {
        let (start, end) = (range.start as f64 / rate, range.end as f64 / rate);
        let request = window_request(st, form, clip.window(range));
        let Submitted { reply, .. } = pipeline::submit(st, request, received).await?;
        let (text, tokens, logprobs, usage) = read_window(reply, i, deltas).await?;
        input += usage.prompt_tokens;
        output += usage.completion_tokens;
        segments.push(Segment {
            start,
            end,
            text: form.transcription.answer_text(&text),
            avg_logprob: (!logprobs.is_empty()).then(|| {
                logprobs.iter().map(|&l| f64::from(l)).sum::<f64>() / logprobs.len() as f64
            }),
            tokens,
            temperature: form.temperature,
        });
    }
    let transcript = form.transcription.transcript(clip, segments);
    let usage = json!({
        "type": "tokens",
        "input_tokens": input,
        "output_tokens": output,
        "total_tokens": input + output,
    });
    Ok((transcript, usage))
}

/// One window as a chat request: the user turn with the window (as a WAV
/// file of its samples, which decodes to them exactly) and the
/// instruction; the server's sampling settings at the form's temperature;
/// no guard, no tools, the chosen token's log-probability.
fn window_request(st: &AppState, form: &AudioForm, window: Clip) -> Request {
    let params = engine::SamplingParams {
        temperature: form.temperature,
        ..pipeline::sampling_defaults(st)
    };
    Request {
        model: form.model.clone(),
        stream: false,
        include_usage: false,
        input: Input::Chat(vec![form.transcription.message()]),
        params,
        seed_given: false,
        max_tokens: Some(WINDOW_MAX_TOKENS),
        stop: Vec::new(),
        grammar: None,
        tools: None,
        thinking: false,
        thinking_budget: None,
        guard: None,
        images: Vec::new(),
        audio: vec![window.to_wav()],
        logprobs: Some(0),
        n: 1,
        speculation: SpeculationChoice::default(),
        lora: None,
    }
}

/// A window's reply read whole: its text (sent on as it comes, after a
/// space when it is not the first window), token ids, their
/// log-probabilities and the usage.
async fn read_window(
    mut reply: Reply,
    index: usize,
    deltas: Option<&mpsc::Sender<Value>>,
) -> Result<(String, Vec<u32>, Vec<f32>, crate::scheduler::Usage), ApiError> {
    let (mut text, mut tokens, mut logprobs) = (String::new(), Vec::new(), Vec::new());
    while let Some(pieces) = reply.next().await {
        for piece in pieces {
            match piece {
                Piece::Text(t) => {
                    if let Some(tx) = deltas {
                        let delta = if index > 0 && text.is_empty() {
                            format!(" {t}")
                        } else {
                            t.clone()
                        };
                        let event = json!({"type": "transcript.text.delta", "delta": delta});
                        // A client that hung up ends the transcription here.
                        tx.send(event)
                            .await
                            .map_err(|_| ApiError::bad_request("The client went away."))?;
                    }
                    text.push_str(&t);
                }
                Piece::Logprobs(l) => {
                    tokens.extend(l.iter().map(|t| t.token.id));
                    logprobs.extend(l.iter().map(|t| t.logprob));
                }
                Piece::Done(_, usage) => return Ok((text, tokens, logprobs, usage)),
                Piece::Failed(e) => return Err(e),
                _ => {}
            }
        }
    }
    Err(ApiError::internal("The generation ended without a result."))
}

/// The transcript as server-sent events: `transcript.text.delta` as each
/// window's text comes, then `transcript.text.done` with the whole text
/// and usage (or an `error` event). Hanging up ends the work.
fn stream(st: AppState, form: AudioForm, clip: Clip, received: Instant) -> Response {
    let (tx, rx) = mpsc::channel::<Value>(64);
    tokio::spawn(async move {
        let last = match transcribe(&st, &form, &clip, received, Some(&tx)).await {
            Ok((transcript, usage)) => json!({
                "type": "transcript.text.done",
                "text": transcript.text(),
                "usage": usage,
            }),
            Err(e) => json!({"type": "error", "error": e.body()["error"]}),
        };
        let _ = tx.send(last).await;
    });
    let events = futures_util::stream::unfold(rx, |mut rx| async move {
        let event = rx.recv().await?;
        Some((
            Ok::<_, Infallible>(SseEvent::default().data(event.to_string())),
            rx,
        ))
    });
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}
