//! llama.cpp's own completion endpoints, answered in its shape (whole, or
//! as a stream of `{"content", "tokens", "stop"}` objects):
//! - `/completion` (and `/completions`): a prompt as text or token ids,
//!   `n_predict`, with `return_tokens` the generated ids (so a client that
//!   keeps a conversation as ids sends back exactly what was made), and
//!   with `n_probs` each token's log-probability and the likeliest others
//!   (`completion_probabilities`);
//! - `/infill`, the endpoint editor plugins (llama.vim, llama.vscode)
//!   complete code with: the code around the gap (`input_prefix`,
//!   `input_suffix`), files of the project (`input_extra`), the start of
//!   the middle (`prompt`), laid out with the model's fill-in-the-middle
//!   tokens ([`engine::Infill`]).

use crate::api::NativeExtras;
use crate::body::read_json;
use crate::error::ApiError;
use crate::pipeline::{self, Submitted};
use crate::reply::{self, Ended, Piece, Reply, TokenLp};
use crate::scheduler::Usage;
use crate::{api, AppState};
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::stream::{self, StreamExt};
use serde_json::{json, Value};
use std::convert::Infallible;
use std::time::{Duration, Instant};

/// `POST /completion` and `POST /completions`.
pub(crate) async fn completion(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    run(st, headers, body, api::parse_native_completion)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// `POST /infill`.
pub(crate) async fn infill(State(st): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    let parse = |b: &[u8], d: &engine::SamplingParams| {
        Ok((api::parse_infill(b, d)?, NativeExtras::default()))
    };
    run(st, headers, body, parse)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// A parser of one endpoint's body: the request, and what the answer
/// carries beside the text.
type Parse = fn(&[u8], &engine::SamplingParams) -> Result<(api::Request, NativeExtras), ApiError>;

async fn run(
    st: AppState,
    headers: HeaderMap,
    body: Body,
    parse: Parse,
) -> Result<Response, ApiError> {
    let received = Instant::now();
    let defaults = pipeline::sampling_defaults(&st);
    let (req, extras) = read_json(&st, &headers, body, move |b| parse(b, &defaults)).await?;
    let Submitted {
        model, req, reply, ..
    } = pipeline::submit(&st, req, received).await?;
    if req.stream {
        return Ok(stream(model, reply, extras));
    }
    let (whole, ended, usage) =
        reply::within(st.config.request_timeout, reply::collect(reply)).await?;
    let mut v = last(&model, &whole.text, ended, &usage);
    add_tokens(&mut v, &whole.logprobs, extras);
    Ok(Json(v).into_response())
}

/// `tokens` (the ids, when asked for; else empty, as llama.cpp's) and
/// `completion_probabilities` (when asked for) of the tokens `lps`.
fn add_tokens(v: &mut Value, lps: &[TokenLp], extras: NativeExtras) {
    let ids: Vec<u32> = match extras.ids {
        true => lps.iter().map(|lp| lp.token.id).collect(),
        false => Vec::new(),
    };
    v["tokens"] = json!(ids);
    if extras.probs {
        v["completion_probabilities"] = lps.iter().map(TokenLp::json).collect();
    }
}

/// The answer's last object: the text (all of it, or what is left to
/// stream), why it stopped, the counts and timings.
fn last(model: &str, content: &str, ended: Ended, u: &Usage) -> Value {
    let stop_type = match (ended, &u.stop_string) {
        (Ended::Length, _) => "limit",
        (_, Some(_)) => "word",
        _ => "eos",
    };
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let per_second = |n: usize, d: Duration| n as f64 / d.as_secs_f64().max(1e-9);
    let evaluated = u.prompt_tokens.saturating_sub(u.cached_tokens);
    json!({
        "index": 0,
        "content": content,
        "stop": true,
        "model": model,
        "tokens_predicted": u.completion_tokens,
        "tokens_evaluated": u.prompt_tokens,
        "tokens_cached": u.cached_tokens,
        "stop_type": stop_type,
        "stopping_word": u.stop_string.clone().unwrap_or_default(),
        "truncated": false,
        "timings": {
            "prompt_n": evaluated,
            "prompt_ms": ms(u.prompt_time),
            "prompt_per_second": per_second(evaluated, u.prompt_time),
            "predicted_n": u.completion_tokens,
            "predicted_ms": ms(u.gen_time),
            "predicted_per_second": per_second(u.completion_tokens, u.gen_time),
        },
    })
}

/// The streamed answer: `{"content", "tokens", "stop": false}` per piece
/// of text (the ids and probabilities of the tokens sampled since the last
/// piece, when asked for), then the last object. Dropping it (the client
/// hung up) cancels the generation.
fn stream(model: String, reply: Reply, extras: NativeExtras) -> Response {
    let events = stream::unfold(
        (reply, false, Vec::new()),
        move |(mut reply, done, mut held)| {
            let model = model.clone();
            async move {
                if done {
                    return None;
                }
                let pieces = reply.next().await?;
                let mut out = Vec::new();
                let mut ended = false;
                for piece in pieces {
                    let v = match piece {
                        // A token comes before the text it makes.
                        Piece::Logprobs(lps) => {
                            held.extend(lps);
                            continue;
                        }
                        Piece::Text(t) => {
                            let mut v = json!({"index": 0, "content": t, "stop": false});
                            add_tokens(&mut v, &std::mem::take(&mut held), extras);
                            v
                        }
                        Piece::Done(e, u) => {
                            let mut v = last(&model, "", e, &u);
                            add_tokens(&mut v, &std::mem::take(&mut held), extras);
                            v
                        }
                        Piece::Failed(e) => e.body(),
                        _ => continue,
                    };
                    ended |= v.get("stop") == Some(&json!(true)) || v.get("error").is_some();
                    out.push(Ok::<_, Infallible>(SseEvent::default().data(v.to_string())));
                }
                Some((stream::iter(out), (reply, ended, held)))
            }
        },
    )
    .flatten();
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(10)))
        .into_response()
}
