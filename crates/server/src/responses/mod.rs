//! OpenAI's Responses API (`/v1/responses`), which new OpenAI SDK code
//! calls. The body is translated into the chat request the rest of the
//! server reads; the answer is a `response` object, or its stream of typed
//! events. The server keeps no responses: `previous_response_id` is a 400.

mod stream;

use crate::api;
use crate::body::read_json;
use crate::error::ApiError;
use crate::pipeline::{self, Submitted};
use crate::reply::{Ended, Whole};
use crate::scheduler::Usage;
use crate::{new_id, AppState};
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use engine::tools::ToolCall;
use serde_json::{json, Map, Value};
use std::time::Instant;

/// One input item's content as chat content parts.
fn parts(content: &Value, field: &str) -> Result<Value, ApiError> {
    let Some(list) = content.as_array() else {
        return Ok(json!(content.as_str().unwrap_or("")));
    };
    let mut out = Vec::new();
    for (i, p) in list.iter().enumerate() {
        match p["type"].as_str() {
            Some("input_text" | "output_text" | "text") => {
                out.push(json!({"type": "text", "text": p["text"]}))
            }
            Some("input_image") => {
                out.push(json!({"type": "image_url", "image_url": {"url": p["image_url"]}}))
            }
            other => {
                return Err(ApiError::bad_param(
                    &format!("{field}.content[{i}].type"),
                    format!(
                    "Content of type {other:?} is not supported; use input_text or input_image."
                ),
                ))
            }
        }
    }
    Ok(json!(out))
}

/// `input` (a string or a list of items) as chat messages.
fn messages(input: &Value, out: &mut Vec<Value>) -> Result<(), ApiError> {
    let Some(items) = input.as_array() else {
        let Some(text) = input.as_str() else {
            return Err(ApiError::bad_param(
                "input",
                "`input` is a string or a list of items.",
            ));
        };
        out.push(json!({"role": "user", "content": text}));
        return Ok(());
    };
    for (i, item) in items.iter().enumerate() {
        let field = format!("input[{i}]");
        match (item["type"].as_str(), item["role"].as_str()) {
            (Some("function_call"), _) => out.push(json!({
                "role": "assistant",
                "content": null,
                "tool_calls": [{"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]}}],
            })),
            (Some("function_call_output"), _) => out.push(json!({
                "role": "tool",
                "tool_call_id": item["call_id"],
                "content": item["output"].as_str().map_or_else(|| item["output"].to_string(), str::to_string),
            })),
            (None | Some("message"), Some(role)) => {
                out.push(json!({"role": role, "content": parts(&item["content"], &field)?}))
            }
            (other, _) => {
                return Err(ApiError::bad_param(
                    &field,
                    format!("Input items of type {other:?} are not supported; use message, function_call or function_call_output."),
                ))
            }
        }
    }
    Ok(())
}

/// The chat request for a `/v1/responses` body, and whether to stream.
fn translate(body: Value) -> Result<(Value, bool), ApiError> {
    let Value::Object(b) = body else {
        return Err(ApiError::bad_request(
            "The request body must be a JSON object.",
        ));
    };
    if b.get("previous_response_id").is_some_and(|v| !v.is_null()) {
        return Err(ApiError::bad_param(
            "previous_response_id",
            "This server keeps no responses (it is stateless): send the whole conversation in `input`.",
        ));
    }
    let mut msgs = Vec::new();
    if let Some(text) = b.get("instructions").and_then(Value::as_str) {
        msgs.push(json!({"role": "system", "content": text}));
    }
    messages(b.get("input").unwrap_or(&Value::Null), &mut msgs)?;
    let mut out = Map::new();
    out.insert("messages".into(), json!(msgs));
    for (from, to) in [
        ("model", "model"),
        ("max_output_tokens", "max_tokens"),
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("parallel_tool_calls", "parallel_tool_calls"),
    ] {
        if let Some(v) = b.get(from).filter(|v| !v.is_null()) {
            out.insert(to.into(), v.clone());
        }
    }
    if let Some(effort) = b
        .get("reasoning")
        .and_then(|r| r.get("effort"))
        .filter(|v| !v.is_null())
    {
        out.insert("reasoning_effort".into(), effort.clone());
    }
    if let Some(tools) = b.get("tools").and_then(Value::as_array) {
        let mut list = Vec::new();
        for (i, t) in tools.iter().enumerate() {
            if t["type"] != "function" {
                return Err(ApiError::bad_param(
                    &format!("tools[{i}].type"),
                    format!(
                        "Tools of type {} are not available here; only `function`.",
                        t["type"]
                    ),
                ));
            }
            list.push(json!({"type": "function", "function": {"name": t["name"], "description": t["description"], "parameters": t["parameters"]}}));
        }
        out.insert("tools".into(), json!(list));
    }
    match b.get("tool_choice") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => {
            out.insert("tool_choice".into(), json!(s));
        }
        Some(v) => {
            out.insert(
                "tool_choice".into(),
                json!({"type": "function", "function": {"name": v["name"]}}),
            );
        }
    }
    if let Some(format) = b.get("text").and_then(|t| t.get("format")) {
        let rf = match format["type"].as_str() {
            Some("json_schema") => {
                json!({"type": "json_schema", "json_schema": {"name": format["name"], "schema": format["schema"]}})
            }
            _ => format.clone(),
        };
        out.insert("response_format".into(), rf);
    }
    let stream = b.get("stream").and_then(Value::as_bool).unwrap_or(false);
    Ok((Value::Object(out), stream))
}

/// `POST /v1/responses`.
pub(crate) async fn create(State(st): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    run(st, headers, body)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn run(st: AppState, headers: HeaderMap, body: Body) -> Result<Response, ApiError> {
    let received = Instant::now();
    let defaults = pipeline::sampling_defaults(&st);
    let (req, stream) = read_json(&st, &headers, body, move |b| {
        let (chat, stream) = translate(api::parse_json(b)?)?;
        Ok((
            api::parse_chat_value(chat, &defaults, "text.format")?,
            stream,
        ))
    })
    .await?;
    let Submitted { model, reply, .. } = pipeline::submit(&st, req, received).await?;
    let meta = Meta {
        id: new_id("resp"),
        msg_id: new_id("msg"),
        model,
        created: api::now_secs(),
    };
    if stream {
        return Ok(stream::streamed(meta, reply.streaming_calls()));
    }
    let (whole, ended, usage) =
        crate::reply::within(st.config.request_timeout, crate::reply::collect(reply)).await?;
    Ok(Json(meta.response(&whole, ended, Some(&usage))).into_response())
}

/// What every event of one response shares.
struct Meta {
    id: String,
    msg_id: String,
    model: String,
    created: u64,
}

fn message_item(id: &str, text: &str, done: bool) -> Value {
    json!({
        "type": "message", "id": id, "role": "assistant",
        "status": if done { "completed" } else { "in_progress" },
        "content": if done { json!([{"type": "output_text", "text": text, "annotations": []}]) } else { json!([]) },
    })
}

fn call_item(call: &ToolCall, done: bool) -> Value {
    json!({
        "type": "function_call", "id": new_id("fc"), "call_id": new_id("call"),
        "name": call.name,
        "arguments": if done { call.arguments.to_string() } else { String::new() },
        "status": if done { "completed" } else { "in_progress" },
    })
}

impl Meta {
    /// The `response` object; `usage` once it has ended.
    fn response(&self, whole: &Whole, ended: Ended, usage: Option<&Usage>) -> Value {
        let mut output = Vec::new();
        if !whole.text.is_empty() || whole.calls.is_empty() {
            output.push(message_item(&self.msg_id, &whole.text, true));
        }
        output.extend(whole.calls.iter().map(|c| call_item(c, true)));
        let mut r = self.shell(if ended == Ended::Length {
            "incomplete"
        } else {
            "completed"
        });
        r["output"] = json!(output);
        if ended == Ended::Length {
            r["incomplete_details"] = json!({"reason": "max_output_tokens"});
        }
        if let Some(u) = usage {
            r["usage"] = json!({
                "input_tokens": u.prompt_tokens,
                "input_tokens_details": {"cached_tokens": u.cached_tokens},
                "output_tokens": u.completion_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": u.prompt_tokens + u.completion_tokens,
            });
        }
        r
    }

    fn shell(&self, status: &str) -> Value {
        json!({
            "id": self.id, "object": "response", "created_at": self.created, "status": status,
            "model": self.model, "output": [], "error": null, "incomplete_details": null,
            "previous_response_id": null, "parallel_tool_calls": false, "tool_choice": "auto",
            "tools": [], "store": false, "usage": null,
        })
    }
}
