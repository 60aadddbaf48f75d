//! Anthropic's answer shapes: one `message` object, or the stream of
//! events (`message_start`, `ping`, `content_block_start` / `_delta` /
//! `_stop` per block, `message_delta`, `message_stop`).

use crate::new_id;
use crate::reply::{Ended, Piece, Reply, Whole};
use crate::scheduler::Usage;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use engine::tools::ToolCall;
use futures_util::StreamExt;
use serde_json::{json, Value};
use std::time::Duration;

/// What every event of one answer shares.
pub(crate) struct Meta {
    id: String,
    model: String,
    prompt_tokens: usize,
}

impl Meta {
    /// An answer of `model` to a prompt of `prompt_tokens`.
    pub(crate) fn new(model: String, prompt_tokens: usize) -> Self {
        Self {
            id: new_id("msg"),
            model,
            prompt_tokens,
        }
    }

    /// The message object, `content` empty for the stream's start.
    fn message(&self, content: Vec<Value>, output_tokens: usize) -> Value {
        json!({
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": null,
            "stop_sequence": null,
            "usage": {"input_tokens": self.prompt_tokens, "output_tokens": output_tokens},
        })
    }

    /// The one-body answer.
    pub(crate) fn whole(&self, whole: Whole, ended: Ended, usage: &Usage) -> Value {
        let mut content = Vec::new();
        if !whole.thought.is_empty() {
            content.push(json!({"type": "thinking", "thinking": whole.thought, "signature": ""}));
        }
        if !whole.text.is_empty() || whole.calls.is_empty() {
            content.push(json!({"type": "text", "text": whole.text}));
        }
        content.extend(whole.calls.iter().map(tool_use));
        let mut m = self.message(content, usage.completion_tokens);
        m["stop_reason"] = json!(stop_reason(ended, usage));
        m["stop_sequence"] = json!(usage.stop_string);
        m["usage"]["cache_read_input_tokens"] = json!(usage.cached_tokens);
        m
    }
}

/// Anthropic's `stop_reason`.
fn stop_reason(ended: Ended, usage: &Usage) -> &'static str {
    match ended {
        Ended::ToolCalls => "tool_use",
        Ended::Length => "max_tokens",
        Ended::Stop if usage.stop_string.is_some() => "stop_sequence",
        Ended::Stop => "end_turn",
    }
}

fn tool_use(call: &ToolCall) -> Value {
    json!({"type": "tool_use", "id": new_id("toolu"), "name": call.name, "input": call.arguments})
}

fn event(name: &str, data: Value) -> SseEvent {
    SseEvent::default().event(name).data(data.to_string())
}

/// Which block is open in the stream.
#[derive(PartialEq, Clone, Copy)]
enum Open {
    None,
    Text,
    Thinking,
    Tool,
}

/// The state of one streamed answer.
struct Streaming {
    meta: Meta,
    started: bool,
    open: Open,
    /// Index of the next block.
    next: usize,
}

impl Streaming {
    fn close(&mut self, out: &mut Vec<SseEvent>) {
        if self.open != Open::None {
            out.push(event(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": self.next - 1}),
            ));
            self.open = Open::None;
        }
    }

    /// Open a block of `kind` unless one is open; its index.
    fn open(&mut self, kind: Open, block: Value, out: &mut Vec<SseEvent>) -> usize {
        if self.open != kind {
            self.close(out);
            out.push(event(
                "content_block_start",
                json!({"type": "content_block_start", "index": self.next, "content_block": block}),
            ));
            self.next += 1;
            self.open = kind;
        }
        self.next - 1
    }

    fn start(&mut self, out: &mut Vec<SseEvent>) {
        if !self.started {
            self.started = true;
            out.push(event(
                "message_start",
                json!({"type": "message_start", "message": self.meta.message(Vec::new(), 0)}),
            ));
            out.push(event("ping", json!({"type": "ping"})));
        }
    }

    fn events(&mut self, piece: Piece, out: &mut Vec<SseEvent>) {
        self.start(out);
        match piece {
            Piece::Started | Piece::Guard(_) | Piece::Logprobs(_) => {}
            Piece::Text(t) => {
                let i = self.open(Open::Text, json!({"type": "text", "text": ""}), out);
                out.push(event("content_block_delta", json!({"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": t}})));
            }
            Piece::Thought(t) => {
                let i = self.open(
                    Open::Thinking,
                    json!({"type": "thinking", "thinking": ""}),
                    out,
                );
                out.push(event("content_block_delta", json!({"type": "content_block_delta", "index": i, "delta": {"type": "thinking_delta", "thinking": t}})));
            }
            Piece::CallBegin { name, .. } => {
                self.close(out);
                let block =
                    json!({"type": "tool_use", "id": new_id("toolu"), "name": name, "input": {}});
                self.open(Open::Tool, block, out);
            }
            Piece::CallArgs { fragment, .. } => {
                let i = self.next.saturating_sub(1);
                out.push(event("content_block_delta", json!({"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": fragment}})));
            }
            // Already streamed as they were written.
            Piece::Calls(_) => self.close(out),
            Piece::Done(ended, usage) => {
                self.close(out);
                out.push(event("message_delta", json!({
                    "type": "message_delta",
                    "delta": {"stop_reason": stop_reason(ended, &usage), "stop_sequence": usage.stop_string},
                    "usage": {"output_tokens": usage.completion_tokens},
                })));
                out.push(event("message_stop", json!({"type": "message_stop"})));
            }
            Piece::Failed(e) => {
                out.push(event("error", e.body_for(crate::error::Dialect::Anthropic)));
            }
        }
    }
}

/// The streamed answer. Dropping it (the client hung up) cancels the
/// generation.
pub(crate) fn stream(meta: Meta, reply: Reply) -> Response {
    let st = Streaming {
        meta,
        started: false,
        open: Open::None,
        next: 0,
    };
    let stream = futures_util::stream::unfold((st, reply), |(mut st, mut reply)| async move {
        let pieces = reply.next().await?;
        let mut out = Vec::new();
        for p in pieces {
            st.events(p, &mut out);
        }
        Some((
            futures_util::stream::iter(out.into_iter().map(Ok::<_, std::convert::Infallible>)),
            (st, reply),
        ))
    })
    .flatten();
    Sse::new(stream)
        .keep_alive(
            KeepAlive::new().interval(Duration::from_secs(10)).event(
                SseEvent::default()
                    .event("ping")
                    .data(r#"{"type": "ping"}"#),
            ),
        )
        .into_response()
}
