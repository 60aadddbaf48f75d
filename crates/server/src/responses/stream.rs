//! The Responses API's stream: `response.created`, each output item's
//! events as the reply is written, then `response.completed` (or
//! `response.incomplete`).

use super::{call_item, message_item, Meta};
use crate::reply::{Ended, Piece, Reply, Whole};
use crate::scheduler::Usage;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use engine::tools::ToolCall;
use futures_util::StreamExt;
use serde_json::{json, Value};
use std::time::Duration;

/// The state of one streamed response.
struct Streaming {
    meta: Meta,
    seq: u64,
    text: String,
    whole: Whole,
    opened: bool,
    /// The call being streamed: its item and its arguments so far.
    call: Option<(Value, String)>,
    /// The items of the calls streamed and done.
    items: Vec<Value>,
}

impl Streaming {
    fn event(&mut self, kind: &str, mut data: Value, out: &mut Vec<SseEvent>) {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.seq);
        self.seq += 1;
        out.push(SseEvent::default().event(kind).data(data.to_string()));
    }

    fn open_message(&mut self, out: &mut Vec<SseEvent>) {
        if !self.opened {
            self.opened = true;
            let item = message_item(&self.meta.msg_id, "", false);
            self.event(
                "response.output_item.added",
                json!({"output_index": 0, "item": item}),
                out,
            );
            let part = json!({"type": "output_text", "text": "", "annotations": []});
            self.event("response.content_part.added", json!({"item_id": self.meta.msg_id, "output_index": 0, "content_index": 0, "part": part}), out);
        }
    }

    /// The output index of the next item.
    fn next_index(&self) -> usize {
        usize::from(self.opened) + self.items.len()
    }

    /// End the call being streamed: its arguments whole, its item done.
    fn end_call(&mut self, out: &mut Vec<SseEvent>) {
        let Some((mut item, args)) = self.call.take() else {
            return;
        };
        let index = self.next_index();
        let id = item["id"].clone();
        self.event(
            "response.function_call_arguments.done",
            json!({"item_id": id, "output_index": index, "arguments": args}),
            out,
        );
        item["arguments"] = json!(args);
        item["status"] = json!("completed");
        self.event(
            "response.output_item.done",
            json!({"output_index": index, "item": item.clone()}),
            out,
        );
        self.items.push(item);
    }

    /// The message's closing events (when it was opened, or nothing else
    /// was said), then `response.completed` or `response.incomplete` with
    /// the whole response, the calls as they were streamed.
    fn finish(&mut self, ended: Ended, usage: &Usage, out: &mut Vec<SseEvent>) {
        self.end_call(out);
        if self.opened || self.items.is_empty() {
            self.open_message(out);
            let (id, text) = (self.meta.msg_id.clone(), self.text.clone());
            self.event(
                "response.output_text.done",
                json!({"item_id": id, "output_index": 0, "content_index": 0, "text": text}),
                out,
            );
            let part = json!({"type": "output_text", "text": text, "annotations": []});
            self.event(
                "response.content_part.done",
                json!({"item_id": id, "output_index": 0, "content_index": 0, "part": part}),
                out,
            );
            let item = message_item(&id, &text, true);
            self.event(
                "response.output_item.done",
                json!({"output_index": 0, "item": item}),
                out,
            );
        }
        self.whole.text = std::mem::take(&mut self.text);
        let kind = if ended == Ended::Length {
            "response.incomplete"
        } else {
            "response.completed"
        };
        let mut response = self.meta.response(&self.whole, ended, Some(usage));
        if !self.items.is_empty() {
            // The calls as they were streamed, with their ids.
            let mut output: Vec<Value> = response["output"]
                .as_array()
                .map(|o| {
                    o.iter()
                        .filter(|i| i["type"] == "message")
                        .cloned()
                        .collect()
                })
                .unwrap_or_default();
            output.extend(self.items.iter().cloned());
            response["output"] = json!(output);
        }
        self.meta.keep(&response);
        self.event(kind, json!({"response": response}), out);
    }

    fn events(&mut self, piece: Piece, out: &mut Vec<SseEvent>) {
        match piece {
            Piece::Started | Piece::Guard(_) | Piece::Logprobs(_) | Piece::Thought(_) => {}
            Piece::CallBegin { name, .. } => {
                self.end_call(out);
                let item = call_item(
                    &ToolCall {
                        name,
                        arguments: json!({}),
                    },
                    false,
                );
                let index = self.next_index();
                self.event(
                    "response.output_item.added",
                    json!({"output_index": index, "item": item.clone()}),
                    out,
                );
                self.call = Some((item, String::new()));
            }
            Piece::CallArgs { fragment, .. } => {
                let index = self.next_index();
                if let Some((item, args)) = self.call.as_mut() {
                    args.push_str(&fragment);
                    let id = item["id"].clone();
                    self.event(
                        "response.function_call_arguments.delta",
                        json!({"item_id": id, "output_index": index, "delta": fragment}),
                        out,
                    );
                }
            }
            Piece::Calls(calls) => {
                self.end_call(out);
                self.whole.calls = calls;
            }
            Piece::Text(t) => {
                self.open_message(out);
                self.text.push_str(&t);
                let id = self.meta.msg_id.clone();
                self.event(
                    "response.output_text.delta",
                    json!({"item_id": id, "output_index": 0, "content_index": 0, "delta": t}),
                    out,
                );
            }
            Piece::Done(ended, usage) => self.finish(ended, &usage, out),
            Piece::Failed(e) => {
                self.event(
                    "error",
                    json!({"code": e.code, "message": e.message, "param": e.param}),
                    out,
                );
            }
        }
    }
}

/// The streamed response: `response.created`, the output items' events,
/// then `response.completed` (or `response.incomplete`). Dropping it (the
/// client hung up) cancels the generation.
pub(super) fn streamed(meta: Meta, reply: Reply) -> Response {
    let mut st = Streaming {
        meta,
        seq: 0,
        text: String::new(),
        whole: Whole::default(),
        opened: false,
        call: None,
        items: Vec::new(),
    };
    let mut first = Vec::new();
    let shell = st.meta.shell("in_progress");
    st.event(
        "response.created",
        json!({"response": shell.clone()}),
        &mut first,
    );
    st.event(
        "response.in_progress",
        json!({"response": shell}),
        &mut first,
    );
    let rest = futures_util::stream::unfold((st, reply), |(mut st, mut reply)| async move {
        let pieces = reply.next().await?;
        let mut out = Vec::new();
        for p in pieces {
            st.events(p, &mut out);
        }
        Some((futures_util::stream::iter(out), (st, reply)))
    })
    .flatten();
    let events = futures_util::stream::iter(first)
        .chain(rest)
        .map(Ok::<_, std::convert::Infallible>);
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(10)))
        .into_response()
}
