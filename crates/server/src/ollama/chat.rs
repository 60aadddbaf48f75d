//! Ollama's `/api/chat` and `/api/generate`: the body is translated (in
//! [`super::request`]) into the OpenAI request the rest of the server reads
//! (one parser, one set of checks), and the reply is answered as Ollama's
//! NDJSON lines or one object, with its timing fields measured.

use super::request::{self, chat_request, generate_request, ChatBody, Common, GenerateBody};
use super::{created_at, model_name};
use crate::api;
use crate::body::read_json;
use crate::error::{ApiError, Dialect};
use crate::models::Lease;
use crate::pipeline::{self, Submitted};
use crate::reply::{Ended, Piece, Reply, TokenLp, TokenText};
use crate::scheduler::Usage;
use crate::AppState;
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::StreamExt;
use serde_json::{json, Value};
use std::time::Instant;

/// Which endpoint: shapes each line.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Chat,
    Generate,
}

pub(crate) async fn chat(State(st): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    run(st, headers, body, Kind::Chat)
        .await
        .unwrap_or_else(|e| e.respond(Dialect::Ollama))
}

pub(crate) async fn generate(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    run(st, headers, body, Kind::Generate)
        .await
        .unwrap_or_else(|e| e.respond(Dialect::Ollama))
}

/// A generating body as read, by endpoint.
enum Parsed {
    Chat(ChatBody),
    Generate(GenerateBody),
}

async fn run(
    st: AppState,
    headers: HeaderMap,
    body: Body,
    kind: Kind,
) -> Result<Response, ApiError> {
    let received = Instant::now();
    let parsed = read_json(&st, &headers, body, move |b| match kind {
        Kind::Chat => api::parse_json(b).map(Parsed::Chat),
        Kind::Generate => api::parse_json(b).map(Parsed::Generate),
    })
    .await?;
    let defaults = pipeline::sampling_defaults(&st);
    // Translating the body (its images copied into data URLs and decoded)
    // runs on the prep pool too.
    let (req, stream) = match parsed {
        Parsed::Chat(b) => {
            let stream = b.common.stream.unwrap_or(true);
            let hold = hold_model(&st, &b.common).await?;
            if b.messages.is_empty() {
                // Ollama's way to load (or, with keep_alive 0, unload) a
                // model: answer that it is done.
                return Ok(loaded(kind, &hold, &b.common));
            }
            let memory = b.copy_bytes();
            let req = st
                .work
                .run(memory, move || chat_request(b, &defaults))
                .await??;
            (req, stream)
        }
        Parsed::Generate(b) => {
            let stream = b.common.stream.unwrap_or(true);
            let hold = hold_model(&st, &b.common).await?;
            if b.prompt.is_empty() && b.images.is_empty() {
                return Ok(loaded(kind, &hold, &b.common));
            }
            let req = st
                .work
                .run(b.copy_bytes(), move || generate_request(b, &defaults))
                .await??;
            (req, stream)
        }
    };
    let Submitted {
        model,
        reply,
        dropped_turns,
        ..
    } = pipeline::submit(&st, req, received).await?;
    let line = Line {
        model: model_name(&model),
        kind,
        received,
        pending: Vec::new(),
    };
    if stream {
        return Ok(pipeline::mark_dropped(ndjson(line, reply), dropped_turns));
    }
    let (whole, ended, usage) =
        crate::reply::within(st.config.request_timeout, crate::reply::collect(reply)).await?;
    let mut v = line.part(&whole.text, &whole.thought, &whole.calls);
    add_logprobs(&mut v, &whole.logprobs);
    line.finish(&mut v, ended, &usage);
    Ok(pipeline::mark_dropped(
        Json(v).into_response(),
        dropped_turns,
    ))
}

/// The model a request names, loaded, with the request's `keep_alive`
/// applied (Ollama's per-request residency).
async fn hold_model(st: &AppState, common: &Common) -> Result<Lease, ApiError> {
    let lease = st.models.lease(common.model.as_deref()).await?;
    if let Some(k) = &common.keep_alive {
        lease.set_keep_alive(request::keep_alive(k)?);
    }
    Ok(lease)
}

/// The answer to a request with nothing to generate: the model is loaded
/// (or will be unloaded at once, with `keep_alive` 0).
fn loaded(kind: Kind, lease: &Lease, common: &Common) -> Response {
    let unload = common
        .keep_alive
        .as_ref()
        .and_then(|k| request::keep_alive(k).ok())
        .is_some_and(|k| k == Some(std::time::Duration::ZERO));
    let line = Line {
        model: model_name(&lease.0.id),
        kind,
        received: Instant::now(),
        pending: Vec::new(),
    };
    let mut v = line.part("", "", &[]);
    v["done"] = json!(true);
    v["done_reason"] = json!(if unload { "unload" } else { "load" });
    Json(v).into_response()
}

/// What every line of one answer shares.
struct Line {
    model: String,
    kind: Kind,
    received: Instant,
    /// Log-probabilities not yet sent, for the next line with text.
    pending: Vec<TokenLp>,
}

impl Line {
    /// A line holding text, thought or calls, not done.
    fn part(&self, text: &str, thought: &str, calls: &[engine::tools::ToolCall]) -> Value {
        let mut v = json!({"model": self.model, "created_at": created_at(), "done": false});
        match self.kind {
            Kind::Chat => {
                let mut m = json!({"role": "assistant", "content": text});
                if !thought.is_empty() {
                    m["thinking"] = json!(thought);
                }
                if !calls.is_empty() {
                    let calls: Vec<Value> = calls
                        .iter()
                        .enumerate()
                        .map(|(i, c)| json!({"function": {"index": i, "name": c.name, "arguments": c.arguments}}))
                        .collect();
                    m["tool_calls"] = json!(calls);
                }
                v["message"] = m;
            }
            Kind::Generate => {
                v["response"] = json!(text);
                if !thought.is_empty() {
                    v["thinking"] = json!(thought);
                }
            }
        }
        v
    }

    /// Mark `v` as the last line: why it ended and the measured timings.
    fn finish(&self, v: &mut Value, ended: Ended, u: &Usage) {
        v["done"] = json!(true);
        v["done_reason"] = json!(match ended {
            Ended::Length => "length",
            Ended::Stop | Ended::ToolCalls => "stop",
        });
        v["total_duration"] = json!(self.received.elapsed().as_nanos() as u64);
        v["load_duration"] = json!(0);
        v["prompt_eval_count"] = json!(u.prompt_tokens);
        v["prompt_eval_duration"] = json!(u.prompt_time.as_nanos() as u64);
        v["eval_count"] = json!(u.completion_tokens);
        v["eval_duration"] = json!(u.gen_time.as_nanos() as u64);
    }

    /// The NDJSON lines for one piece.
    fn lines(&mut self, piece: Piece, out: &mut Vec<String>) {
        let v = match piece {
            Piece::Started | Piece::Guard(_) | Piece::CallBegin { .. } | Piece::CallArgs { .. } => {
                return
            }
            Piece::Logprobs(l) => {
                self.pending.extend(l);
                return;
            }
            Piece::Text(t) => {
                let mut v = self.part(&t, "", &[]);
                add_logprobs(&mut v, &std::mem::take(&mut self.pending));
                v
            }
            Piece::Thought(t) => self.part("", &t, &[]),
            Piece::Calls(c) => self.part("", "", &c),
            Piece::Done(ended, usage) => {
                let mut v = self.part("", "", &[]);
                self.finish(&mut v, ended, &usage);
                v
            }
            Piece::Failed(e) => e.body_for(Dialect::Ollama),
        };
        out.push(format!("{v}\n"));
    }
}

/// Ollama's `logprobs` in `v`, when there are any.
fn add_logprobs(v: &mut Value, lps: &[TokenLp]) {
    if lps.is_empty() {
        return;
    }
    let entry = |t: &TokenText, lp: f32| json!({"token": t.text, "logprob": lp, "bytes": t.bytes});
    let list: Vec<Value> = lps
        .iter()
        .map(|l| {
            let mut e = entry(&l.token, l.logprob);
            e["top_logprobs"] = l.top.iter().map(|(t, lp)| entry(t, *lp)).collect();
            e
        })
        .collect();
    v["logprobs"] = json!(list);
}

/// The streamed answer: one JSON object per line as the reply comes.
/// Dropping the body (the client hung up) cancels the generation.
fn ndjson(line: Line, reply: Reply) -> Response {
    let stream = futures_util::stream::unfold((line, reply), |(mut line, mut reply)| async move {
        let pieces = reply.next().await?;
        let mut out = Vec::new();
        for p in pieces {
            line.lines(p, &mut out);
        }
        Some((
            futures_util::stream::iter(out.into_iter().map(Ok::<_, std::convert::Infallible>)),
            (line, reply),
        ))
    })
    .flatten();
    let mut resp = Body::from_stream(stream).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    resp
}
