//! `/v1/chat/completions` and `/v1/completions`: parse, submit through the
//! [`pipeline`](crate::pipeline), and answer as one JSON object or as a
//! stream of chunks in OpenAI's shapes.

use crate::api::{self, Request};
use crate::error::ApiError;
use crate::pipeline::{self, Submitted};
use crate::reply::{self, Ended, Piece, Reply};
use crate::routes::read_body;
use crate::scheduler::Usage;
use crate::{new_id, AppState};
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use engine::tools::ToolCall;
use futures_util::StreamExt;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::time::{Duration, Instant};

/// Which endpoint a generation came from (shapes the response).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Chat,
    Completion,
}

pub(crate) async fn chat_completions(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    generate(st, headers, body, Kind::Chat)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

pub(crate) async fn completions(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    generate(st, headers, body, Kind::Completion)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn generate(
    st: AppState,
    headers: HeaderMap,
    body: Body,
    kind: Kind,
) -> Result<Response, ApiError> {
    let received = Instant::now();
    let bytes = read_body(&st, &headers, body).await?;
    let defaults = pipeline::sampling_defaults(&st);
    let req = match kind {
        Kind::Chat => api::parse_chat(&bytes, &defaults)?,
        Kind::Completion => api::parse_completion(&bytes, &defaults)?,
    };
    let Submitted {
        model,
        req,
        reply,
        dropped_turns,
        ..
    } = pipeline::submit(&st, req, received).await?;
    let meta = Meta {
        id: new_id(match kind {
            Kind::Chat => "chatcmpl",
            Kind::Completion => "cmpl",
        }),
        created: api::now_secs(),
        model,
        kind,
        dropped_turns,
    };
    if req.stream {
        let resp = stream_response(meta, &req, reply);
        return Ok(pipeline::mark_dropped(resp, dropped_turns));
    }
    let timeout = st.config.request_timeout;
    let (whole, ended, usage) = tokio::time::timeout(timeout, reply::collect(reply))
        .await
        .map_err(|_| {
            ApiError::timed_out(format!(
                "The request did not finish within {} s; ask for fewer tokens or stream.",
                timeout.as_secs()
            ))
        })??;
    let resp = Json(meta.whole(whole, ended, usage)).into_response();
    Ok(pipeline::mark_dropped(resp, dropped_turns))
}

/// What every response of one request shares.
struct Meta {
    id: String,
    created: u64,
    model: String,
    kind: Kind,
    /// Turns dropped to fit the context (told in `usage`).
    dropped_turns: usize,
}

/// OpenAI's `finish_reason`.
fn finish_reason(ended: Ended) -> &'static str {
    match ended {
        Ended::Stop => "stop",
        Ended::Length => "length",
        Ended::ToolCalls => "tool_calls",
    }
}

impl Meta {
    /// `usage`, with Hearth's `dropped_turns` when the chat was truncated.
    fn usage_json(&self, u: &Usage) -> Value {
        let mut v = api::usage_json(u.prompt_tokens, u.completion_tokens, u.cached_tokens);
        if self.dropped_turns > 0 {
            v["dropped_turns"] = json!(self.dropped_turns);
        }
        v
    }
}

/// OpenAI's `tool_calls` entry for `call`.
fn tool_call_json(call: &ToolCall, index: Option<usize>) -> Value {
    let mut v = json!({
        "id": new_id("call"),
        "type": "function",
        "function": {
            "name": call.name,
            "arguments": call.arguments.to_string(),
        },
    });
    if let Some(i) = index {
        v["index"] = json!(i);
    }
    v
}

impl Meta {
    /// The one-body answer.
    fn whole(&self, whole: reply::Whole, ended: Ended, usage: Usage) -> Value {
        let (object, choice) = match self.kind {
            Kind::Chat => {
                let mut message = json!({"role": "assistant", "content": whole.text});
                if !whole.calls.is_empty() {
                    let calls: Vec<Value> = whole
                        .calls
                        .iter()
                        .map(|c| tool_call_json(c, None))
                        .collect();
                    message["content"] = Value::Null;
                    message["tool_calls"] = json!(calls);
                }
                if !whole.thought.is_empty() {
                    // The convention llama.cpp and DeepSeek's clients read.
                    message["reasoning_content"] = json!(whole.thought);
                }
                ("chat.completion", json!({"message": message}))
            }
            Kind::Completion => ("text_completion", json!({"text": whole.text})),
        };
        let mut choice = choice;
        choice["index"] = json!(0);
        choice["logprobs"] = Value::Null;
        choice["finish_reason"] = json!(finish_reason(ended));
        let mut body = json!({
            "id": self.id,
            "object": object,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": null,
            "choices": [choice],
            "usage": self.usage_json(&usage),
        });
        if let Some(trace) = whole.guard {
            // Hearth's extension: what the guardrails did.
            body["guard"] = trace;
        }
        body
    }

    /// One streamed chunk with `delta` (chat) or `text` (completions).
    fn chunk(&self, content: Option<&str>, role: bool, finish: Option<&str>) -> Value {
        let (object, mut choice) = match self.kind {
            Kind::Chat => {
                let mut delta = serde_json::Map::new();
                if role {
                    delta.insert("role".into(), json!("assistant"));
                }
                if let Some(c) = content {
                    delta.insert("content".into(), json!(c));
                }
                ("chat.completion.chunk", json!({"delta": delta}))
            }
            Kind::Completion => ("text_completion", json!({"text": content.unwrap_or("")})),
        };
        choice["index"] = json!(0);
        choice["logprobs"] = Value::Null;
        choice["finish_reason"] = json!(finish);
        json!({
            "id": self.id,
            "object": object,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": null,
            "choices": [choice],
        })
    }

    /// A chat chunk whose delta holds the tool calls.
    fn calls_chunk(&self, calls: &[ToolCall], role: bool) -> Value {
        let mut chunk = self.chunk(None, role, None);
        let delta = &mut chunk["choices"][0]["delta"];
        let calls: Vec<Value> = calls
            .iter()
            .enumerate()
            .map(|(i, c)| tool_call_json(c, Some(i)))
            .collect();
        delta["tool_calls"] = json!(calls);
        if role {
            delta["content"] = Value::Null;
        }
        chunk
    }

    fn usage_chunk(&self, usage: Value) -> Value {
        json!({
            "id": self.id,
            "object": if self.kind == Kind::Chat { "chat.completion.chunk" } else { "text_completion" },
            "created": self.created,
            "model": self.model,
            "system_fingerprint": null,
            "choices": [],
            "usage": usage,
        })
    }
}

fn data(v: &Value) -> SseEvent {
    SseEvent::default().data(v.to_string())
}

/// The state of one streamed answer.
struct Streaming {
    meta: Meta,
    reply: Reply,
    include_usage: bool,
    sent_role: bool,
    guard: Option<Value>,
}

impl Streaming {
    /// Whether this chunk must carry the role (the first of a chat).
    fn role(&mut self) -> bool {
        let first = self.meta.kind == Kind::Chat && !self.sent_role;
        self.sent_role = true;
        first
    }

    /// The SSE events for one piece.
    fn events(&mut self, piece: Piece, out: &mut Vec<SseEvent>) {
        match piece {
            Piece::Started => {
                if self.meta.kind == Kind::Chat && !self.sent_role {
                    self.sent_role = true;
                    out.push(data(&self.meta.chunk(Some(""), true, None)));
                }
            }
            Piece::Guard(trace) => self.guard = Some(trace),
            Piece::Thought(t) => {
                let role = self.role();
                let mut chunk = self.meta.chunk(None, role, None);
                chunk["choices"][0]["delta"]["reasoning_content"] = json!(t);
                out.push(data(&chunk));
            }
            Piece::Text(t) => {
                let role = self.role();
                out.push(data(&self.meta.chunk(Some(&t), role, None)));
            }
            Piece::Calls(calls) => {
                let role = self.role();
                out.push(data(&self.meta.calls_chunk(&calls, role)));
            }
            Piece::Done(ended, usage) => {
                let mut last = self.meta.chunk(None, false, Some(finish_reason(ended)));
                if let Some(trace) = self.guard.take() {
                    last["guard"] = trace;
                }
                out.push(data(&last));
                if self.include_usage {
                    out.push(data(&self.meta.usage_chunk(self.meta.usage_json(&usage))));
                }
                out.push(SseEvent::default().data("[DONE]"));
            }
            Piece::Failed(e) => {
                out.push(data(&e.body()));
                out.push(SseEvent::default().data("[DONE]"));
            }
        }
    }
}

/// The SSE response: chunks as the scheduler produces them, then `[DONE]`.
/// Dropping the stream (the client hung up) drops the receiver, which
/// cancels the generation at its next step.
fn stream_response(meta: Meta, req: &Request, reply: Reply) -> Response {
    let st = Streaming {
        meta,
        reply,
        include_usage: req.include_usage,
        sent_role: false,
        guard: None,
    };
    let stream = futures_util::stream::unfold(st, |mut st| async move {
        let pieces = st.reply.next().await?;
        let mut out = Vec::new();
        for piece in pieces {
            st.events(piece, &mut out);
        }
        Some((
            futures_util::stream::iter(out.into_iter().map(Ok::<_, Infallible>)),
            st,
        ))
    })
    .flatten();
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(10)))
        .into_response()
}
