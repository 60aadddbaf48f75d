//! OpenAI request bodies: parsing and validation into engine settings, and
//! the response and chunk bodies.

use crate::error::ApiError;
use engine::{ChatMessage, FinishReason, GenerateOptions, SamplingParams};
use serde::Deserialize;
use serde_json::{json, Value};

/// Most stop strings a request may give.
const MAX_STOPS: usize = 16;

/// `stop`: one string or a list.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Stop {
    One(String),
    Many(Vec<String>),
}

/// `stream_options`.
#[derive(Debug, Default, Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

/// The sampling and limit fields both endpoints share.
#[derive(Debug, Default, Deserialize)]
struct Common {
    model: Option<String>,
    stream: Option<bool>,
    stream_options: Option<StreamOptions>,
    temperature: Option<f32>,
    top_p: Option<f32>,
    max_tokens: Option<i64>,
    max_completion_tokens: Option<i64>,
    stop: Option<Stop>,
    seed: Option<i64>,
    frequency_penalty: Option<f32>,
    presence_penalty: Option<f32>,
    n: Option<i64>,
    // Extensions that llama.cpp's server also takes.
    top_k: Option<i64>,
    min_p: Option<f32>,
    repeat_penalty: Option<f32>,
    /// Token id (as a string) to a bias from -100 to 100.
    logit_bias: Option<std::collections::BTreeMap<String, f32>>,
}

/// One part of an array `content`.
#[derive(Debug, Deserialize)]
struct Part {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
}

/// `content`: a string, a list of parts, or null.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Debug, Deserialize)]
struct Message {
    role: String,
    content: Option<Content>,
}

#[derive(Debug, Deserialize)]
struct ChatBody {
    messages: Vec<Message>,
    #[serde(flatten)]
    common: Common,
}

/// `prompt` of the legacy completions endpoint.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Prompt {
    Text(String),
    Texts(Vec<String>),
    Ids(Vec<u32>),
}

#[derive(Debug, Deserialize)]
struct CompletionBody {
    prompt: Prompt,
    #[serde(flatten)]
    common: Common,
}

/// What a request asks for, in the engine's terms, before tokenization.
#[derive(Debug)]
pub struct Request {
    /// The model name asked for, if any.
    pub model: Option<String>,
    /// Stream the answer as server-sent events.
    pub stream: bool,
    /// Send a last chunk with `usage` when streaming.
    pub include_usage: bool,
    /// The prompt.
    pub input: Input,
    /// Sampling settings.
    pub params: SamplingParams,
    /// Whether the request chose its seed (else `params.seed` is fresh).
    pub seed_given: bool,
    /// Tokens asked for at most (None: until the context is full).
    pub max_tokens: Option<usize>,
    /// Stop strings.
    pub stop: Vec<String>,
}

/// The prompt of a request.
#[derive(Debug)]
pub enum Input {
    /// A conversation for the chat template.
    Chat(Vec<ChatMessage>),
    /// Raw text.
    Text(String),
    /// Token ids.
    Ids(Vec<u32>),
}

impl Request {
    /// The engine's generation options, `room` being the context left after
    /// the prompt.
    pub fn generate_options(&self, room: usize) -> GenerateOptions {
        GenerateOptions {
            max_tokens: self.max_tokens.unwrap_or(room).min(room),
            stop: self.stop.clone(),
            stop_on_eog: true,
            render_special: false,
        }
    }
}

fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request(
            "The request body is empty; send a JSON object.",
        ));
    }
    // Check the syntax first so a syntax error is not reported as a schema one.
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("The body is not valid JSON: {e}")))?;
    if !value.is_object() {
        return Err(ApiError::bad_request(
            "The request body must be a JSON object.",
        ));
    }
    T::deserialize(value).map_err(|e| ApiError::bad_request(format!("Invalid request: {e}")))
}

/// Parse and check a `/v1/chat/completions` body.
pub fn parse_chat(body: &[u8], defaults: &SamplingParams) -> Result<Request, ApiError> {
    let b: ChatBody = parse_json(body)?;
    if b.messages.is_empty() {
        return Err(ApiError::bad_param(
            "messages",
            "`messages` must not be empty.",
        ));
    }
    let mut messages = Vec::with_capacity(b.messages.len());
    for (i, m) in b.messages.into_iter().enumerate() {
        let role = match m.role.as_str() {
            "system" | "developer" => "system",
            "user" => "user",
            "assistant" | "model" => "assistant",
            other => {
                return Err(ApiError::bad_param(
                    &format!("messages[{i}].role"),
                    format!(
                        "Unsupported role `{other}`; use system, developer, user or assistant."
                    ),
                ))
            }
        };
        let content = match m.content {
            None => String::new(),
            Some(Content::Text(t)) => t,
            Some(Content::Parts(parts)) => {
                let mut text = String::new();
                for p in parts {
                    if p.kind != "text" {
                        return Err(ApiError::bad_param(
                            &format!("messages[{i}].content"),
                            format!(
                                "Content parts of type `{}` are not supported; only text.",
                                p.kind
                            ),
                        ));
                    }
                    text.push_str(p.text.as_deref().unwrap_or(""));
                }
                text
            }
        };
        messages.push(ChatMessage::new(role, content));
    }
    common(b.common, Input::Chat(messages), None, defaults)
}

/// Parse and check a `/v1/completions` body.
pub fn parse_completion(body: &[u8], defaults: &SamplingParams) -> Result<Request, ApiError> {
    let b: CompletionBody = parse_json(body)?;
    let input = match b.prompt {
        Prompt::Text(t) => Input::Text(t),
        Prompt::Texts(mut ts) if ts.len() == 1 => Input::Text(ts.remove(0)),
        Prompt::Texts(_) => {
            return Err(ApiError::bad_param(
                "prompt",
                "Only one prompt per request is supported.",
            ))
        }
        Prompt::Ids(ids) => Input::Ids(ids),
    };
    // OpenAI's default for the legacy endpoint.
    common(b.common, input, Some(16), defaults)
}

fn common(
    c: Common,
    input: Input,
    default_max: Option<usize>,
    defaults: &SamplingParams,
) -> Result<Request, ApiError> {
    if let Some(n) = c.n {
        if n != 1 {
            return Err(ApiError::bad_param("n", "Only n = 1 is supported."));
        }
    }
    let max = match (c.max_completion_tokens, c.max_tokens) {
        (Some(m), _) => Some(("max_completion_tokens", m)),
        (None, Some(m)) => Some(("max_tokens", m)),
        (None, None) => None,
    };
    let max_tokens = match max {
        Some((name, m)) if m < 1 => {
            return Err(ApiError::bad_param(
                name,
                format!("`{name}` must be at least 1."),
            ))
        }
        Some((_, m)) => Some(usize::try_from(m).unwrap_or(usize::MAX)),
        None => default_max,
    };
    let stop = match c.stop {
        None => Vec::new(),
        Some(Stop::One(s)) => vec![s],
        Some(Stop::Many(v)) => v,
    };
    if stop.len() > MAX_STOPS {
        return Err(ApiError::bad_param(
            "stop",
            format!("At most {MAX_STOPS} stop strings are supported."),
        ));
    }
    if stop.iter().any(String::is_empty) {
        return Err(ApiError::bad_param(
            "stop",
            "Stop strings must not be empty.",
        ));
    }
    let mut logit_bias = Vec::new();
    for (key, &bias) in c.logit_bias.iter().flatten() {
        let id = key.trim().parse::<u32>().map_err(|_| {
            ApiError::bad_param(
                "logit_bias",
                format!("`logit_bias` keys are token ids; `{key}` is not one."),
            )
        })?;
        logit_bias.push((id, bias));
    }
    let defaults = defaults.clone();
    let mut params = SamplingParams {
        temperature: c.temperature.unwrap_or(defaults.temperature),
        top_p: c.top_p.unwrap_or(defaults.top_p),
        min_p: c.min_p.unwrap_or(defaults.min_p),
        repeat_penalty: c.repeat_penalty.unwrap_or(defaults.repeat_penalty),
        frequency_penalty: c.frequency_penalty.unwrap_or(defaults.frequency_penalty),
        presence_penalty: c.presence_penalty.unwrap_or(defaults.presence_penalty),
        seed: c.seed.map(|s| s as u64).unwrap_or_else(fresh_seed),
        logit_bias,
        ..defaults
    };
    if let Some(k) = c.top_k {
        if k < 0 {
            return Err(ApiError::bad_param(
                "top_k",
                "`top_k` must not be negative.",
            ));
        }
        params.top_k = usize::try_from(k).unwrap_or(usize::MAX);
    }
    if let Some(t) = c.temperature {
        if !(0.0..=2.0).contains(&t) {
            return Err(ApiError::bad_param(
                "temperature",
                format!("`temperature` must be between 0 and 2, got {t}."),
            ));
        }
    }
    for (name, v) in [
        ("frequency_penalty", params.frequency_penalty),
        ("presence_penalty", params.presence_penalty),
    ] {
        if !(-2.0..=2.0).contains(&v) {
            return Err(ApiError::bad_param(
                name,
                format!("`{name}` must be between -2 and 2, got {v}."),
            ));
        }
    }
    params.validate().map_err(|e| {
        let param = e.split_whitespace().next().unwrap_or("").to_string();
        ApiError::bad_param(&param, format!("Invalid sampling parameter: {e}."))
    })?;
    Ok(Request {
        seed_given: c.seed.is_some(),
        model: c.model,
        stream: c.stream.unwrap_or(false),
        include_usage: c
            .stream_options
            .and_then(|o| o.include_usage)
            .unwrap_or(false),
        input,
        params,
        max_tokens,
        stop,
    })
}

/// A seed for requests that give none: differs from call to call.
fn fresh_seed() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    nanos
        ^ COUNTER
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// OpenAI's `finish_reason` for ours.
pub fn finish_reason(f: FinishReason) -> &'static str {
    match f {
        FinishReason::Stop | FinishReason::Cancelled => "stop",
        FinishReason::Length => "length",
    }
}

/// `usage`.
pub fn usage_json(prompt: usize, completion: usize, cached: usize) -> Value {
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": { "cached_tokens": cached },
    })
}

/// Seconds since the Unix epoch.
pub fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
