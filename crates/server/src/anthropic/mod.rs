//! Anthropic's Messages API (`/v1/messages`, `/v1/messages/count_tokens`)
//! for Claude Code and the Anthropic SDKs. The body is translated into the
//! OpenAI chat request the rest of the server reads (one parser, one set of
//! checks); the answer is shaped in [`answer`]. Errors are Anthropic's
//! `{"type": "error", "error": {type, message}}`.

mod answer;

use crate::api::{self, Request};
use crate::body::read_json;
use crate::error::{ApiError, Dialect};
use crate::pipeline::{self, Submitted};
use crate::AppState;
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::time::Instant;

/// `content`: a string or a list of blocks.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Blocks(Vec<Value>),
}

#[derive(Debug, Deserialize)]
struct Message {
    role: String,
    content: Content,
}

#[derive(Debug, Deserialize)]
struct Tool {
    name: String,
    description: Option<String>,
    input_schema: Option<Value>,
    #[serde(rename = "type")]
    kind: Option<String>,
}

#[derive(Debug, Deserialize)]
struct MessagesBody {
    model: Option<String>,
    max_tokens: Option<i64>,
    messages: Vec<Message>,
    system: Option<Content>,
    stop_sequences: Option<Vec<String>>,
    temperature: Option<f32>,
    top_p: Option<f32>,
    top_k: Option<i64>,
    #[serde(default)]
    stream: bool,
    tools: Option<Vec<Tool>>,
    tool_choice: Option<Value>,
    thinking: Option<Value>,
    /// Structured outputs: `{"format": {"type": "json_schema", "schema"}}`.
    output_config: Option<Value>,
    /// The beta's spelling of the same format.
    output_format: Option<Value>,
}

/// The text of a block list that may hold only text (a system prompt, a
/// tool's result).
fn blocks_text(content: Content, field: &str) -> Result<String, ApiError> {
    match content {
        Content::Text(t) => Ok(t),
        Content::Blocks(blocks) => {
            let mut out = Vec::new();
            for (i, b) in blocks.iter().enumerate() {
                match (b["type"].as_str(), b["text"].as_str()) {
                    (Some("text"), Some(t)) => out.push(t.to_string()),
                    _ => {
                        return Err(ApiError::bad_param(
                            &format!("{field}.{i}"),
                            format!("{field}.{i}: only text blocks are read here."),
                        ))
                    }
                }
            }
            Ok(out.join("\n"))
        }
    }
}

/// An `image` block as an OpenAI image part.
fn image_part(b: &Value, field: &str) -> Result<Value, ApiError> {
    let src = &b["source"];
    match src["type"].as_str() {
        Some("base64") => {
            let media = src["media_type"].as_str().unwrap_or("image/*");
            let data = src["data"].as_str().ok_or_else(|| {
                ApiError::bad_param(field, format!("{field}.source.data: a base64 string is required."))
            })?;
            Ok(json!({"type": "image_url", "image_url": {"url": format!("data:{media};base64,{data}")}}))
        }
        _ => Err(ApiError::bad_param(
            field,
            format!("{field}.source: only base64 image sources are read (the server does not fetch URLs)."),
        )),
    }
}

/// One Anthropic message as OpenAI messages: tool results become `tool`
/// messages, tool uses an assistant's `tool_calls`, thinking is dropped.
fn translate(m: Message, i: usize, out: &mut Vec<Value>) -> Result<(), ApiError> {
    if !matches!(m.role.as_str(), "user" | "assistant") {
        return Err(ApiError::bad_param(
            &format!("messages.{i}.role"),
            format!("messages.{i}.role: `{}` is not user or assistant.", m.role),
        ));
    }
    let blocks = match m.content {
        Content::Text(t) => {
            out.push(json!({"role": m.role, "content": t}));
            return Ok(());
        }
        Content::Blocks(b) => b,
    };
    let mut parts = Vec::new();
    let mut calls = Vec::new();
    for (j, b) in blocks.into_iter().enumerate() {
        let field = format!("messages.{i}.content.{j}");
        match b["type"].as_str() {
            Some("text") => parts.push(json!({"type": "text", "text": b["text"].as_str().unwrap_or("")})),
            Some("image") => parts.push(image_part(&b, &field)?),
            Some("tool_use") => calls.push(json!({
                "id": b["id"],
                "type": "function",
                "function": {"name": b["name"], "arguments": b["input"].to_string()},
            })),
            Some("tool_result") => {
                let content = match serde_json::from_value::<Option<Content>>(b["content"].clone()) {
                    Ok(Some(c)) => blocks_text(c, &format!("{field}.content"))?,
                    Ok(None) => String::new(),
                    Err(_) => return Err(ApiError::bad_param(&field, format!("{field}.content: a string or text blocks."))),
                };
                out.push(json!({"role": "tool", "tool_call_id": b["tool_use_id"], "content": content}));
            }
            Some("thinking" | "redacted_thinking") => {}
            other => {
                return Err(ApiError::bad_param(
                    &field,
                    format!("{field}.type: content blocks of type {} are not supported; use text, image, tool_use, tool_result or thinking.", other.map_or("(none)".into(), |o| format!("`{o}`"))),
                ))
            }
        }
    }
    if parts.is_empty() && calls.is_empty() {
        return Ok(());
    }
    let mut msg = json!({"role": m.role, "content": if parts.is_empty() { Value::Null } else { json!(parts) }});
    if !calls.is_empty() {
        msg["tool_calls"] = json!(calls);
    }
    out.push(msg);
    Ok(())
}

/// The OpenAI `tool_choice` for Anthropic's.
fn tool_choice(v: Value) -> Result<Value, ApiError> {
    match v["type"].as_str() {
        Some("auto") => Ok(json!("auto")),
        Some("any") => Ok(json!("required")),
        Some("none") => Ok(json!("none")),
        Some("tool") => Ok(json!({"type": "function", "function": {"name": v["name"]}})),
        _ => Err(ApiError::bad_param(
            "tool_choice",
            "tool_choice.type: auto, any, tool or none.",
        )),
    }
}

/// Translate and check a `/v1/messages` body; `counting` skips the checks
/// that only generation needs (`max_tokens`).
fn request(
    bytes: &[u8],
    defaults: &engine::SamplingParams,
    counting: bool,
) -> Result<(Request, bool), ApiError> {
    let b: MessagesBody = api::parse_json(bytes)?;
    let mut out = Map::new();
    match b.max_tokens {
        None if !counting => {
            return Err(ApiError::bad_param(
                "max_tokens",
                "max_tokens: Field required",
            ))
        }
        Some(n) if n < 1 => {
            return Err(ApiError::bad_param(
                "max_tokens",
                "max_tokens: must be at least 1",
            ))
        }
        n => {
            out.insert("max_tokens".into(), json!(n));
        }
    }
    if let Some(t) = b.temperature {
        if !(0.0..=1.0).contains(&t) {
            return Err(ApiError::bad_param(
                "temperature",
                format!("temperature: must be between 0 and 1, got {t}"),
            ));
        }
    }
    let mut messages = Vec::new();
    if let Some(system) = b.system {
        messages.push(json!({"role": "system", "content": blocks_text(system, "system")?}));
    }
    if b.messages.is_empty() {
        return Err(ApiError::bad_param(
            "messages",
            "messages: at least one message is required",
        ));
    }
    for (i, m) in b.messages.into_iter().enumerate() {
        translate(m, i, &mut messages)?;
    }
    out.insert("messages".into(), json!(messages));
    for (k, v) in [
        ("model", b.model.map(|v| json!(v))),
        ("stop", b.stop_sequences.map(|v| json!(v))),
        ("temperature", b.temperature.map(|v| json!(v))),
        ("top_p", b.top_p.map(|v| json!(v))),
        ("top_k", b.top_k.map(|v| json!(v))),
    ] {
        if let Some(v) = v {
            out.insert(k.into(), v);
        }
    }
    if let Some(tools) = b.tools {
        out.insert("tools".into(), functions(tools)?);
    }
    if let Some(tc) = b.tool_choice {
        if tc["disable_parallel_tool_use"] == true {
            out.insert("parallel_tool_calls".into(), json!(false));
        }
        out.insert("tool_choice".into(), tool_choice(tc)?);
    }
    let format_field = answer_format(b.output_config.as_ref(), b.output_format.as_ref(), &mut out)?;
    thinking(b.thinking.as_ref(), &mut out)?;
    Ok((
        api::parse_chat_value(Value::Object(out), defaults, format_field)?,
        b.stream,
    ))
}

/// Anthropic's custom tools as OpenAI's functions; server tools are
/// refused.
fn functions(tools: Vec<Tool>) -> Result<Value, ApiError> {
    let mut list = Vec::new();
    for (i, t) in tools.into_iter().enumerate() {
        if t.kind.as_deref().is_some_and(|k| k != "custom") {
            return Err(ApiError::bad_param(&format!("tools.{i}.type"), format!("tools.{i}: server tools such as `{}` are not available here; define a custom tool.", t.kind.unwrap_or_default())));
        }
        list.push(json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.input_schema}}));
    }
    Ok(json!(list))
}

/// `thinking` (`enabled` with its `budget_tokens`, or `disabled`) as our
/// `think` and `thinking_budget` in `out`.
fn thinking(thinking: Option<&Value>, out: &mut Map<String, Value>) -> Result<(), ApiError> {
    match thinking.and_then(|t| t["type"].as_str()) {
        None | Some("disabled") => {}
        Some("enabled") => {
            out.insert("think".into(), json!(true));
            if let Some(budget) = thinking.and_then(|t| t["budget_tokens"].as_i64()) {
                out.insert("thinking_budget".into(), json!(budget));
            }
        }
        Some(other) => {
            return Err(ApiError::bad_param(
                "thinking",
                format!("thinking.type: `{other}` is not enabled or disabled."),
            ))
        }
    }
    Ok(())
}

/// The answer's format (`output_config.format`, or the beta's
/// `output_format`) as `response_format` in `out`; the field it came from.
fn answer_format(
    output_config: Option<&Value>,
    output_format: Option<&Value>,
    out: &mut Map<String, Value>,
) -> Result<&'static str, ApiError> {
    let given = match (output_config, output_format) {
        (Some(config), _) if !config["format"].is_null() => {
            Some((&config["format"], "output_config.format"))
        }
        (_, Some(format)) if !format.is_null() => Some((format, "output_format")),
        _ => None,
    };
    let Some((format, field)) = given else {
        return Ok("output_config.format");
    };
    match (format["type"].as_str(), format.get("schema")) {
        (Some("json_schema"), Some(schema)) if schema.is_object() => {
            out.insert(
                "response_format".into(),
                json!({"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}),
            );
            Ok(field)
        }
        (Some("json_schema"), _) => Err(ApiError::bad_param(
            &format!("{field}.schema"),
            format!("{field}.schema: a JSON Schema object is required"),
        )),
        (other, _) => Err(ApiError::bad_param(
            &format!("{field}.type"),
            format!("{field}.type: only `json_schema` is supported, got {other:?}"),
        )),
    }
}

/// `POST /v1/messages`.
pub(crate) async fn messages(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    messages_inner(st, headers, body)
        .await
        .unwrap_or_else(|e| e.respond(Dialect::Anthropic))
}

async fn messages_inner(
    st: AppState,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let received = Instant::now();
    let defaults = pipeline::sampling_defaults(&st);
    let (req, stream) =
        read_json(&st, &headers, body, move |b| request(b, &defaults, false)).await?;
    let Submitted {
        model,
        reply,
        prompt_tokens,
        dropped_turns,
        ..
    } = pipeline::submit(&st, req, received).await?;
    let meta = answer::Meta::new(model, prompt_tokens);
    if stream {
        return Ok(pipeline::mark_dropped(
            answer::stream(meta, reply.streaming_calls()),
            dropped_turns,
        ));
    }
    let (whole, ended, usage) =
        crate::reply::within(st.config.request_timeout, crate::reply::collect(reply)).await?;
    let resp = Json(meta.whole(whole, ended, &usage)).into_response();
    Ok(pipeline::mark_dropped(resp, dropped_turns))
}

/// `POST /v1/messages/count_tokens`: the prompt's length as the model
/// would read it (template, tools and images included).
pub(crate) async fn count_tokens(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let counted = async {
        let defaults = pipeline::sampling_defaults(&st);
        let (req, _) = read_json(&st, &headers, body, move |b| request(b, &defaults, true)).await?;
        pipeline::count_tokens(&st, req).await
    };
    match counted.await {
        Ok(n) => Json(json!({ "input_tokens": n })).into_response(),
        Err(e) => e.respond(Dialect::Anthropic),
    }
}

/// Parse and check a `/v1/messages` body into the chat request the server
/// runs, and whether to stream it: what the handlers do before a model is
/// involved (`counting`: a `/v1/messages/count_tokens` body, which needs
/// no `max_tokens`). Public for the fuzz targets.
pub fn parse_messages(
    body: &[u8],
    defaults: &engine::SamplingParams,
    counting: bool,
) -> Result<(Request, bool), ApiError> {
    request(body, defaults, counting)
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::Grammar;

    fn parse(extra: &str) -> Result<Request, ApiError> {
        let body = format!(
            r#"{{"model":"m","max_tokens":8,"messages":[{{"role":"user","content":"hi"}}]{extra}}}"#
        );
        request(body.as_bytes(), &engine::SamplingParams::default(), false).map(|(r, _)| r)
    }

    #[test]
    fn structured_outputs_hold_the_answer_to_their_schema() {
        let schema = r#"{"type":"json_schema","schema":{"type":"object","properties":{"n":{"type":"integer"}}}}"#;
        for (extra, field) in [
            (
                format!(r#","output_config":{{"format":{schema}}}"#),
                "output_config.format",
            ),
            (format!(r#","output_format":{schema}"#), "output_format"),
        ] {
            let r = parse(&extra).unwrap();
            let Some((Grammar::JsonSchema(s), named)) = &r.grammar else {
                panic!("{:?}", r.grammar);
            };
            assert_eq!(*named, field);
            assert!(s["properties"]["n"].is_object(), "{s}");
        }
        // No format: no grammar.
        assert!(parse("").unwrap().grammar.is_none());
        // Errors name the field as Anthropic spells it.
        let err = parse(r#","output_config":{"format":{"type":"json_schema"}}"#).unwrap_err();
        assert_eq!(err.param.as_deref(), Some("output_config.format.schema"));
        let err = parse(r#","output_format":{"type":"text"}"#).unwrap_err();
        assert_eq!(err.param.as_deref(), Some("output_format.type"));
    }
}
