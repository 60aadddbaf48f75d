//! The SSE answer: chunks of every choice as the scheduler produces them,
//! then the usage (when asked for) and `[DONE]`. Dropping the stream (the
//! client hung up) drops the receivers, which cancels the generations at
//! their next step.

use super::shape::{finish_reason, Kind, Meta};
use crate::reply::{Piece, Reply, TokenLp};
use crate::scheduler::Usage;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, BoxStream, StreamExt};
use serde_json::{json, Value};
use std::convert::Infallible;
use std::time::Duration;

fn data(v: &Value) -> SseEvent {
    SseEvent::default().data(v.to_string())
}

/// The state of one choice's stream.
#[derive(Default)]
struct Choice {
    sent_role: bool,
    /// Log-probabilities not yet sent, for the next chunk with text.
    pending: Vec<TokenLp>,
    /// Bytes of text sent so far (legacy completions' `text_offset`).
    sent: usize,
}

/// The state of one streamed answer.
struct Streaming {
    meta: Meta,
    include_usage: bool,
    choices: Vec<Choice>,
    guard: Option<Value>,
    /// The usage of each choice that has ended.
    ended: Vec<Usage>,
    failed: bool,
}

impl Streaming {
    /// Whether choice `i`'s chunk must carry the role (its first, in a chat).
    fn role(&mut self, i: usize) -> bool {
        let c = &mut self.choices[i];
        let first = self.meta.kind == Kind::Chat && !c.sent_role;
        c.sent_role = true;
        first
    }

    /// Put choice `i`'s pending log-probabilities in `chunk`.
    fn attach_logprobs(&mut self, i: usize, chunk: &mut Value) {
        let c = &mut self.choices[i];
        if !c.pending.is_empty() {
            chunk["choices"][0]["logprobs"] = self.meta.logprobs_json(&c.pending, c.sent);
            c.pending.clear();
        }
    }

    /// The SSE events for one piece of choice `i`.
    fn events(&mut self, i: usize, piece: Piece, out: &mut Vec<SseEvent>) {
        match piece {
            Piece::Started => {
                if self.meta.kind == Kind::Chat && !self.choices[i].sent_role {
                    self.choices[i].sent_role = true;
                    out.push(data(&self.meta.chunk(i, Some(""), true, None)));
                }
            }
            Piece::Guard(trace) => self.guard = Some(trace),
            Piece::Logprobs(l) => self.choices[i].pending.extend(l),
            Piece::Thought(t) => {
                let role = self.role(i);
                let mut chunk = self.meta.chunk(i, None, role, None);
                chunk["choices"][0]["delta"]["reasoning_content"] = json!(t);
                out.push(data(&chunk));
            }
            Piece::Text(t) => {
                let role = self.role(i);
                let mut chunk = self.meta.chunk(i, Some(&t), role, None);
                self.attach_logprobs(i, &mut chunk);
                self.choices[i].sent += t.len();
                out.push(data(&chunk));
            }
            Piece::CallBegin { index, name } => {
                let role = self.role(i);
                out.push(data(&self.meta.call_begin_chunk(i, index, &name, role)));
            }
            Piece::CallArgs { index, fragment } => {
                out.push(data(&self.meta.call_args_chunk(i, index, &fragment)));
            }
            // Already streamed as they were written.
            Piece::Calls(_) => {}
            Piece::Done(ended, usage) => {
                let mut last = self.meta.chunk(i, None, false, Some(finish_reason(ended)));
                self.attach_logprobs(i, &mut last);
                if let Some(trace) = self.guard.take() {
                    last["guard"] = trace;
                }
                out.push(data(&last));
                self.ended.push(usage);
                if self.ended.len() == self.choices.len() {
                    if self.include_usage {
                        let usage = self.meta.usage_json(&self.ended);
                        let mut chunk = self.meta.usage_chunk(usage);
                        chunk["timings"] = super::shape::timings_json(&self.ended);
                        out.push(data(&chunk));
                    }
                    out.push(SseEvent::default().data("[DONE]"));
                }
            }
            Piece::Failed(e) => {
                out.push(data(&e.body()));
                out.push(SseEvent::default().data("[DONE]"));
                self.failed = true;
            }
        }
    }
}

/// The pieces of one choice's reply, tagged with its index.
fn pieces(i: usize, reply: Reply) -> BoxStream<'static, (usize, Vec<Piece>)> {
    stream::unfold(reply, move |mut r| async move {
        let p = r.next().await?;
        Some(((i, p), r))
    })
    .boxed()
}

/// The streamed answer of `replies`, one choice each.
pub(super) fn respond(meta: Meta, include_usage: bool, replies: Vec<Reply>) -> Response {
    let st = Streaming {
        meta,
        include_usage,
        choices: replies.iter().map(|_| Choice::default()).collect(),
        guard: None,
        ended: Vec::new(),
        failed: false,
    };
    let merged = stream::select_all(replies.into_iter().enumerate().map(|(i, r)| pieces(i, r)));
    let events = stream::unfold((st, merged), |(mut st, mut merged)| async move {
        if st.failed {
            return None;
        }
        let (i, pieces) = merged.next().await?;
        let mut out = Vec::new();
        for piece in pieces {
            st.events(i, piece, &mut out);
        }
        Some((
            stream::iter(out.into_iter().map(Ok::<_, Infallible>)),
            (st, merged),
        ))
    })
    .flatten();
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(10)))
        .into_response()
}
