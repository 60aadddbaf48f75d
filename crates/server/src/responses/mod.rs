//! OpenAI's Responses API (`/v1/responses`), which new OpenAI SDK code
//! calls. The body is translated into the chat request the rest of the
//! server reads; the answer is a `response` object, or its stream of typed
//! events. Responses are stored unless a request says `store: false`
//! ([`store`]): a later request names one with `previous_response_id`
//! instead of sending the conversation again, and `GET`/`DELETE
//! /v1/responses/{id}` read or forget one.

mod store;
mod stream;

pub(crate) use store::ResponseStore;
use store::{owner_of, Stored};

use crate::api;
use crate::body::read_json;
use crate::error::ApiError;
use crate::pipeline::{self, Submitted};
use crate::reply::{Ended, Whole};
use crate::scheduler::Usage;
use crate::{new_id, AppState};
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use engine::tools::ToolCall;
use serde_json::{json, Map, Value};
use std::sync::Arc;
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

/// A `/v1/responses` body read: the chat request it makes, and what the
/// response needs to be answered and stored.
struct Translated {
    chat: Value,
    stream: bool,
    /// Whether to store the response (`store`, on unless false).
    store: bool,
    previous: Option<String>,
    /// The conversation so far: the previous response's, then this input
    /// (not the instructions, which do not carry over, as OpenAI's do not).
    conversation: Vec<Value>,
}

/// The chat request for a `/v1/responses` body, the conversation of
/// `previous_response_id` (looked up by `history`) first.
fn translate(
    body: Value,
    history: impl FnOnce(&str) -> Option<Stored>,
) -> Result<Translated, ApiError> {
    let Value::Object(b) = body else {
        return Err(ApiError::bad_request(
            "The request body must be a JSON object.",
        ));
    };
    let previous = match b.get("previous_response_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(id)) => Some(id.clone()),
        Some(_) => {
            return Err(ApiError::bad_param(
                "previous_response_id",
                "`previous_response_id` is a response's id.",
            ))
        }
    };
    let mut conversation = match &previous {
        None => Vec::new(),
        Some(id) => {
            history(id)
                .ok_or_else(|| {
                    ApiError::bad_param(
                        "previous_response_id",
                        format!("Previous response with id '{id}' not found."),
                    )
                })?
                .messages
        }
    };
    messages(b.get("input").unwrap_or(&Value::Null), &mut conversation)?;
    let mut msgs = Vec::new();
    if let Some(text) = b.get("instructions").and_then(Value::as_str) {
        msgs.push(json!({"role": "system", "content": text}));
    }
    msgs.extend(conversation.iter().cloned());
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
    tools_and_format(&b, &mut out)?;
    Ok(Translated {
        chat: Value::Object(out),
        stream: b.get("stream").and_then(Value::as_bool).unwrap_or(false),
        store: b.get("store").and_then(Value::as_bool).unwrap_or(true),
        previous,
        conversation,
    })
}

/// A body's `tools`, `tool_choice` and `text.format` as the chat request's
/// fields.
fn tools_and_format(b: &Map<String, Value>, out: &mut Map<String, Value>) -> Result<(), ApiError> {
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
    Ok(())
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
    let owner = owner_of(api_key(&headers));
    let (store, who) = (Arc::clone(&st.responses), owner.clone());
    let (req, t) = read_json(&st, &headers, body, move |b| {
        let mut t = translate(api::parse_json(b)?, |id| store.get(id, &who))?;
        let chat = std::mem::take(&mut t.chat);
        Ok((api::parse_chat_value(chat, &defaults, "text.format")?, t))
    })
    .await?;
    let Submitted { model, reply, .. } = pipeline::submit(&st, req, received).await?;
    let meta = Meta {
        id: new_id("resp"),
        msg_id: new_id("msg"),
        model,
        created: api::now_secs(),
        previous: t.previous,
        keep: t.store.then(|| Keep {
            store: Arc::clone(&st.responses),
            owner,
            conversation: t.conversation,
        }),
    };
    if t.stream {
        return Ok(stream::streamed(meta, reply.streaming_calls()));
    }
    let (whole, ended, usage) =
        crate::reply::within(st.config.request_timeout, crate::reply::collect(reply)).await?;
    let response = meta.response(&whole, ended, Some(&usage));
    meta.keep(&response);
    Ok(Json(response).into_response())
}

/// The key a request came with (`Authorization: Bearer`, or `x-api-key`).
fn api_key(headers: &HeaderMap) -> Option<&str> {
    let bearer = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    bearer.or_else(|| headers.get("x-api-key").and_then(|v| v.to_str().ok()))
}

/// `GET /v1/responses/{id}`: a stored response, to the key that made it.
pub(crate) async fn retrieve(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    match st.responses.get(&id, &owner_of(api_key(&headers))) {
        Some(stored) => Ok(Json(stored.response).into_response()),
        None => Err(not_found(&id)),
    }
}

/// `DELETE /v1/responses/{id}`.
pub(crate) async fn delete(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    if !st.responses.delete(&id, &owner_of(api_key(&headers))) {
        return Err(not_found(&id));
    }
    Ok(Json(json!({"id": id, "object": "response.deleted", "deleted": true})).into_response())
}

fn not_found(id: &str) -> ApiError {
    ApiError {
        status: axum::http::StatusCode::NOT_FOUND,
        ..ApiError::bad_request(format!("Response with id '{id}' not found."))
    }
}

/// Where a finished response is stored, and the conversation it ends.
struct Keep {
    store: Arc<ResponseStore>,
    owner: String,
    conversation: Vec<Value>,
}

/// What every event of one response shares.
struct Meta {
    id: String,
    msg_id: String,
    model: String,
    created: u64,
    previous: Option<String>,
    /// Set when the response is to be stored.
    keep: Option<Keep>,
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

/// A response's output items as the chat messages that continue its
/// conversation: its text, then its calls in one assistant turn.
fn output_messages(output: &Value) -> Vec<Value> {
    let items = output.as_array().map_or(&[][..], Vec::as_slice);
    let mut out = Vec::new();
    for item in items.iter().filter(|i| i["type"] == "message") {
        let text: String = item["content"]
            .as_array()
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect();
        out.push(json!({"role": "assistant", "content": text}));
    }
    let calls: Vec<Value> = items
        .iter()
        .filter(|i| i["type"] == "function_call")
        .map(|i| json!({"id": i["call_id"], "type": "function", "function": {"name": i["name"], "arguments": i["arguments"]}}))
        .collect();
    if !calls.is_empty() {
        out.push(json!({"role": "assistant", "content": null, "tool_calls": calls}));
    }
    out
}

impl Meta {
    /// Store `response` with its conversation, when asked.
    fn keep(&self, response: &Value) {
        let Some(keep) = &self.keep else {
            return;
        };
        let mut messages = keep.conversation.clone();
        messages.extend(output_messages(&response["output"]));
        let stored = Stored {
            owner: keep.owner.clone(),
            messages,
            response: response.clone(),
        };
        keep.store.put(&self.id, stored);
    }

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
            "previous_response_id": self.previous, "parallel_tool_calls": false,
            "tool_choice": "auto", "tools": [], "store": self.keep.is_some(), "usage": null,
        })
    }
}
