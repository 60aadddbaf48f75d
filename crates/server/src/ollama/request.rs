//! Ollama's `/api/chat` and `/api/generate` bodies, translated into the
//! OpenAI chat (or raw completion) request the rest of the server reads.

use crate::api::{self, Request};
use crate::error::ApiError;
use serde::Deserialize;
use serde_json::{json, Map, Value};

/// `options` of a request: the ones that map onto ours; the rest of
/// Ollama's (`num_thread`, `mirostat`, ...) are accepted and ignored.
#[derive(Debug, Default, Deserialize)]
struct Options {
    num_ctx: Option<i64>,
    num_predict: Option<i64>,
    temperature: Option<f32>,
    top_k: Option<i64>,
    top_p: Option<f32>,
    min_p: Option<f32>,
    seed: Option<i64>,
    stop: Option<Vec<String>>,
    repeat_penalty: Option<f32>,
    repeat_last_n: Option<i64>,
    presence_penalty: Option<f32>,
    frequency_penalty: Option<f32>,
    /// llama.cpp's samplers, under the same names.
    #[serde(flatten)]
    samplers: api::LlamaSamplers,
}

/// A tool call in an assistant message: arguments as an object.
#[derive(Debug, Deserialize)]
struct ToolCall {
    function: Function,
}

#[derive(Debug, Deserialize)]
struct Function {
    name: String,
    #[serde(default)]
    arguments: Value,
}

#[derive(Debug, Deserialize)]
pub(super) struct Message {
    role: String,
    #[serde(default)]
    content: String,
    #[serde(default)]
    images: Vec<String>,
    #[serde(default)]
    tool_calls: Vec<ToolCall>,
    tool_name: Option<String>,
}

/// What `/api/chat` and `/api/generate` share.
#[derive(Debug, Deserialize)]
pub(super) struct Common {
    pub model: Option<String>,
    format: Option<Value>,
    options: Option<Options>,
    pub stream: Option<bool>,
    /// How long the model stays loaded after this request: seconds, a
    /// duration (`"5m"`), or negative for ever.
    pub keep_alive: Option<Value>,
    think: Option<Value>,
    /// Each token's log-probability, with `top_logprobs` alternatives.
    logprobs: Option<bool>,
    top_logprobs: Option<i64>,
}

#[derive(Debug, Deserialize)]
pub(super) struct ChatBody {
    #[serde(default)]
    pub messages: Vec<Message>,
    tools: Option<Value>,
    #[serde(flatten)]
    pub common: Common,
}

#[derive(Debug, Deserialize)]
pub(super) struct GenerateBody {
    #[serde(default)]
    pub prompt: String,
    system: Option<String>,
    #[serde(default)]
    pub images: Vec<String>,
    #[serde(default)]
    raw: bool,
    suffix: Option<String>,
    template: Option<String>,
    context: Option<Vec<u32>>,
    #[serde(flatten)]
    pub common: Common,
}

/// `options`' sampling fields under their OpenAI names.
fn sampling_fields(o: Options) -> [(&'static str, Option<Value>); 10] {
    [
        ("temperature", o.temperature.map(|v| json!(v))),
        ("top_k", o.top_k.map(|v| json!(v))),
        ("top_p", o.top_p.map(|v| json!(v))),
        ("min_p", o.min_p.map(|v| json!(v))),
        ("seed", o.seed.map(|v| json!(v))),
        ("stop", o.stop.map(|v| json!(v))),
        ("repeat_penalty", o.repeat_penalty.map(|v| json!(v))),
        ("repeat_last_n", o.repeat_last_n.map(|v| json!(v))),
        ("presence_penalty", o.presence_penalty.map(|v| json!(v))),
        ("frequency_penalty", o.frequency_penalty.map(|v| json!(v))),
    ]
}

/// The OpenAI fields for `common` (sampling, limits, format, thinking).
fn common_fields(c: Common, out: &mut Map<String, Value>) -> Result<(), ApiError> {
    if let Some(on) = c.logprobs {
        out.insert("logprobs".into(), json!(on));
    }
    if let Some(top) = c.top_logprobs {
        out.insert("top_logprobs".into(), json!(top));
    }
    out.insert("model".into(), json!(c.model));
    let o = c.options.unwrap_or_default();
    match o.num_predict {
        None | Some(-1 | -2) => {}
        Some(n) if n >= 1 => {
            out.insert("max_tokens".into(), json!(n));
        }
        Some(n) => {
            return Err(ApiError::bad_param(
                "options.num_predict",
                format!(
                    "`num_predict` is -1 (no limit), -2 (fill the context) or at least 1, not {n}."
                ),
            ))
        }
    }
    if let Some(n) = o.num_ctx {
        if n < 1 {
            return Err(ApiError::bad_param(
                "options.num_ctx",
                "`num_ctx` must be at least 1.",
            ));
        }
    }
    if let Ok(Value::Object(samplers)) = serde_json::to_value(&o.samplers) {
        out.extend(samplers);
    }
    for (name, value) in sampling_fields(o) {
        if let Some(v) = value {
            out.insert(name.into(), v);
        }
    }
    match c.format {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s.is_empty() => {}
        Some(Value::String(s)) if s == "json" => {
            out.insert("response_format".into(), json!({"type": "json_object"}));
        }
        Some(schema @ Value::Object(_)) => {
            out.insert(
                "response_format".into(),
                json!({"type": "json_schema", "json_schema": {"name": "format", "schema": schema}}),
            );
        }
        Some(other) => {
            return Err(ApiError::bad_param(
                "format",
                format!("`format` is \"json\" or a JSON Schema object, not {other}."),
            ))
        }
    }
    match c.think {
        None | Some(Value::Null) => {}
        Some(Value::Bool(b)) => {
            out.insert("think".into(), json!(b));
        }
        // gpt-oss's levels: any level turns thinking on.
        Some(Value::String(s)) if matches!(s.as_str(), "low" | "medium" | "high") => {
            out.insert("think".into(), json!(true));
        }
        Some(other) => {
            return Err(ApiError::bad_param(
                "think",
                format!("`think` is true, false, \"low\", \"medium\" or \"high\", not {other}."),
            ))
        }
    }
    Ok(())
}

/// OpenAI content for a message's text and base64 images.
fn content(text: String, images: Vec<String>) -> Value {
    if images.is_empty() {
        return json!(text);
    }
    let mut parts: Vec<Value> = images
        .into_iter()
        .map(|b64| json!({"type": "image_url", "image_url": {"url": format!("data:image/*;base64,{b64}")}}))
        .collect();
    parts.push(json!({"type": "text", "text": text}));
    json!(parts)
}

/// What translating a body takes: its text and images copied into an
/// OpenAI body, the images' base64 decoded after.
fn copy_bytes<'a>(texts: impl Iterator<Item = &'a String>) -> u64 {
    3 * texts.map(|t| t.len() as u64).sum::<u64>()
}

impl ChatBody {
    /// What [`chat_request`] takes, for the prep pool's memory.
    pub(super) fn copy_bytes(&self) -> u64 {
        copy_bytes(
            self.messages
                .iter()
                .flat_map(|m| std::iter::once(&m.content).chain(&m.images)),
        )
    }
}

impl GenerateBody {
    /// What [`generate_request`] takes, for the prep pool's memory.
    pub(super) fn copy_bytes(&self) -> u64 {
        copy_bytes(std::iter::once(&self.prompt).chain(&self.images))
    }
}

pub(super) fn chat_request(
    b: ChatBody,
    defaults: &engine::SamplingParams,
) -> Result<Request, ApiError> {
    let mut out = Map::new();
    let messages: Vec<Value> = b
        .messages
        .into_iter()
        .map(|m| {
            let mut v = json!({"role": m.role, "content": content(m.content, m.images)});
            if !m.tool_calls.is_empty() {
                let calls: Vec<Value> = m
                    .tool_calls
                    .into_iter()
                    .map(|c| json!({"type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments.to_string()}}))
                    .collect();
                v["tool_calls"] = json!(calls);
            }
            if let Some(name) = m.tool_name {
                v["name"] = json!(name);
            }
            v
        })
        .collect();
    out.insert("messages".into(), json!(messages));
    if let Some(tools) = b.tools {
        out.insert("tools".into(), tools);
    }
    common_fields(b.common, &mut out)?;
    api::parse_chat_value(Value::Object(out), defaults, "format")
}

pub(super) fn generate_request(
    b: GenerateBody,
    defaults: &engine::SamplingParams,
) -> Result<Request, ApiError> {
    let unsupported = [
        ("suffix", b.suffix.as_deref().is_some_and(|s| !s.is_empty())),
        (
            "template",
            b.template.as_deref().is_some_and(|s| !s.is_empty()),
        ),
        ("context", b.context.as_ref().is_some_and(|c| !c.is_empty())),
    ];
    if let Some((field, _)) = unsupported.iter().find(|(_, given)| *given) {
        return Err(ApiError::bad_param(
            field,
            format!("`{field}` is not supported by this server; send the conversation to /api/chat instead."),
        ));
    }
    let mut out = Map::new();
    if b.raw {
        if !b.images.is_empty() {
            return Err(ApiError::bad_param(
                "images",
                "Images need the chat template; they cannot be sent with `raw`.",
            ));
        }
        out.insert("prompt".into(), json!(b.prompt));
        common_fields(b.common, &mut out)?;
        out.remove("think");
        // The legacy body's `logprobs` is the count of alternatives.
        if let (Some(Value::Bool(on)), top) = (out.remove("logprobs"), out.remove("top_logprobs")) {
            if on {
                out.insert("logprobs".into(), top.unwrap_or(json!(0)));
            }
        }
        // No limit unless asked: the legacy endpoint's 16 is OpenAI's default.
        let mut req = api::parse_completion_value(Value::Object(out), None, defaults)?;
        api::name_format(&mut req, "format");
        return Ok(req);
    }
    let mut messages = Vec::new();
    if let Some(system) = b.system.filter(|s| !s.is_empty()) {
        messages.push(json!({"role": "system", "content": system}));
    }
    messages.push(json!({"role": "user", "content": content(b.prompt, b.images)}));
    out.insert("messages".into(), json!(messages));
    common_fields(b.common, &mut out)?;
    api::parse_chat_value(Value::Object(out), defaults, "format")
}

/// Ollama's `keep_alive`: a number of seconds or a Go duration (`"10m"`,
/// `"1h30m"`, `"500ms"`); negative keeps the model for ever (`None`).
pub(crate) fn keep_alive(v: &Value) -> Result<Option<std::time::Duration>, ApiError> {
    let parsed = match v {
        Value::Number(n) => n.as_f64().and_then(crate::models::keep_alive_of_secs),
        Value::String(s) => crate::models::parse_keep_alive(s),
        _ => None,
    };
    parsed.ok_or_else(|| {
        ApiError::bad_param(
            "keep_alive",
            "`keep_alive` must be seconds or a duration such as \"5m\", \"30s\" or \"-1\".",
        )
    })
}

#[cfg(test)]
mod keep_alive_tests {
    use super::*;

    #[test]
    fn reads_numbers_and_go_durations() {
        let secs = |v: Value| keep_alive(&v).unwrap().map(|d| d.as_secs_f64());
        assert_eq!(secs(json!(30)), Some(30.0));
        assert_eq!(secs(json!("5m")), Some(300.0));
        assert_eq!(secs(json!("1h30m")), Some(5400.0));
        assert_eq!(secs(json!("250ms")), Some(0.25));
        assert_eq!(secs(json!("0")), Some(0.0));
        assert_eq!(secs(json!(-1)), None);
        assert_eq!(secs(json!("-1m")), None);
        assert!(keep_alive(&json!("soon")).is_err());
        assert!(keep_alive(&json!([1])).is_err());
        assert!(keep_alive(&json!("5x")).is_err());
    }
}
