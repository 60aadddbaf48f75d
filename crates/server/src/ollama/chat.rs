//! Ollama's `/api/chat` and `/api/generate`: the body is translated into
//! the OpenAI request the rest of the server reads (one parser, one set of
//! checks), and the reply is answered as Ollama's NDJSON lines or one
//! object, with its timing fields measured.

use super::{created_at, model_name};
use crate::api::{self, Request};
use crate::error::{ApiError, Dialect};
use crate::pipeline::{self, Submitted};
use crate::reply::{Ended, Piece, Reply};
use crate::routes::read_body;
use crate::scheduler::Usage;
use crate::AppState;
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::time::Instant;

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
struct Message {
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
struct Common {
    model: Option<String>,
    format: Option<Value>,
    options: Option<Options>,
    stream: Option<bool>,
    /// Accepted: one model stays loaded for the server's life.
    #[allow(dead_code)]
    keep_alive: Option<Value>,
    think: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct ChatBody {
    #[serde(default)]
    messages: Vec<Message>,
    tools: Option<Value>,
    #[serde(flatten)]
    common: Common,
}

#[derive(Debug, Deserialize)]
struct GenerateBody {
    #[serde(default)]
    prompt: String,
    system: Option<String>,
    #[serde(default)]
    images: Vec<String>,
    #[serde(default)]
    raw: bool,
    suffix: Option<String>,
    template: Option<String>,
    context: Option<Vec<u32>>,
    #[serde(flatten)]
    common: Common,
}

/// The OpenAI fields for `common` (sampling, limits, format, thinking).
fn common_fields(c: Common, out: &mut Map<String, Value>) -> Result<(), ApiError> {
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
    let fields = [
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
    ];
    for (name, value) in fields {
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

fn chat_request(b: ChatBody, defaults: &engine::SamplingParams) -> Result<Request, ApiError> {
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
    api::parse_chat_value(Value::Object(out), defaults)
}

fn generate_request(
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
        // No limit unless asked: the legacy endpoint's 16 is OpenAI's default.
        return api::parse_completion_value(Value::Object(out), None, defaults);
    }
    let mut messages = Vec::new();
    if let Some(system) = b.system.filter(|s| !s.is_empty()) {
        messages.push(json!({"role": "system", "content": system}));
    }
    messages.push(json!({"role": "user", "content": content(b.prompt, b.images)}));
    out.insert("messages".into(), json!(messages));
    common_fields(b.common, &mut out)?;
    api::parse_chat_value(Value::Object(out), defaults)
}

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

async fn run(
    st: AppState,
    headers: HeaderMap,
    body: Body,
    kind: Kind,
) -> Result<Response, ApiError> {
    let received = Instant::now();
    let bytes = read_body(&st, &headers, body).await?;
    let value: Value = api::parse_json(&bytes)?;
    let defaults = pipeline::sampling_defaults(&st);
    let (req, stream) = match kind {
        Kind::Chat => {
            let b: ChatBody = api::from_value(value)?;
            let stream = b.common.stream.unwrap_or(true);
            if b.messages.is_empty() {
                // Ollama's way to load a model: answer that it is loaded.
                return Ok(loaded(&st, kind, b.common.model.as_deref()));
            }
            (chat_request(b, &defaults)?, stream)
        }
        Kind::Generate => {
            let b: GenerateBody = api::from_value(value)?;
            let stream = b.common.stream.unwrap_or(true);
            if b.prompt.is_empty() && b.images.is_empty() {
                return Ok(loaded(&st, kind, b.common.model.as_deref()));
            }
            (generate_request(b, &defaults)?, stream)
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
    };
    if stream {
        return Ok(pipeline::mark_dropped(ndjson(line, reply), dropped_turns));
    }
    let timeout = st.config.request_timeout;
    let (whole, ended, usage) = tokio::time::timeout(timeout, crate::reply::collect(reply))
        .await
        .map_err(|_| {
            ApiError::timed_out(format!(
                "The request did not finish within {} s; stream it instead.",
                timeout.as_secs()
            ))
        })??;
    let mut v = line.part(&whole.text, &whole.thought, &whole.calls);
    line.finish(&mut v, ended, &usage);
    Ok(pipeline::mark_dropped(
        Json(v).into_response(),
        dropped_turns,
    ))
}

/// The answer to a request with nothing to generate: the model is loaded.
fn loaded(st: &AppState, kind: Kind, model: Option<&str>) -> Response {
    match crate::routes::resolve_model(st, model) {
        Err(e) => e.respond(Dialect::Ollama),
        Ok(m) => {
            let line = Line {
                model: model_name(&m),
                kind,
                received: Instant::now(),
            };
            let mut v = line.part("", "", &[]);
            v["done"] = json!(true);
            v["done_reason"] = json!("load");
            Json(v).into_response()
        }
    }
}

/// What every line of one answer shares.
struct Line {
    model: String,
    kind: Kind,
    received: Instant,
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
    fn lines(&self, piece: Piece, out: &mut Vec<String>) {
        let v = match piece {
            Piece::Started
            | Piece::Guard(_)
            | Piece::Logprobs(_)
            | Piece::CallBegin { .. }
            | Piece::CallArgs { .. } => return,
            Piece::Text(t) => self.part(&t, "", &[]),
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

/// The streamed answer: one JSON object per line as the reply comes.
/// Dropping the body (the client hung up) cancels the generation.
fn ndjson(line: Line, reply: Reply) -> Response {
    let stream = futures_util::stream::unfold((line, reply), |(line, mut reply)| async move {
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
