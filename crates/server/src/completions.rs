//! `/v1/chat/completions` and `/v1/completions`: parse, tokenize, submit to
//! the scheduler, and answer as one JSON object or as a stream of chunks.

use crate::api::{self, Input, Request, ToolMode};
use crate::error::ApiError;
use crate::routes::{read_body, resolve_model};
use crate::scheduler::{Event, Job, Rejected};
use crate::{new_id, AppState};
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use engine::tools::ToolCall;
use engine::{Engine, EngineError, FinishReason, SamplingParams};
use futures_util::StreamExt;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

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
    generate(st, headers, body, Kind::Chat).await
}

pub(crate) async fn completions(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    generate(st, headers, body, Kind::Completion).await
}

async fn generate(st: AppState, headers: HeaderMap, body: Body, kind: Kind) -> Response {
    match generate_inner(st, headers, body, kind).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn generate_inner(
    st: AppState,
    headers: HeaderMap,
    body: Body,
    kind: Kind,
) -> Result<Response, ApiError> {
    let received = Instant::now();
    let bytes = read_body(&st, &headers, body).await?;
    // The server's sampling defaults (its RunOptions) fill what a request
    // leaves out.
    let fallback = SamplingParams::default();
    let defaults = st
        .backend
        .get()
        .map_or(&fallback, |b| &b.engine.options().sampling);
    let mut req = match kind {
        Kind::Chat => api::parse_chat(&bytes, defaults)?,
        Kind::Completion => api::parse_completion(&bytes, defaults)?,
    };
    if let (false, Some(seed)) = (req.seed_given, st.config.seed) {
        req.params.seed = seed;
    }
    let model = resolve_model(&st, req.model.as_deref())?;
    let Some(backend) = st.backend.get() else {
        return Err(ApiError::unavailable("The model is loading.", 1));
    };
    let engine = Arc::clone(&backend.engine);
    let n_ctx = engine.n_ctx();
    let vocab = engine.model().config().vocab;
    if let Some((id, _)) = req
        .params
        .logit_bias
        .iter()
        .find(|(id, _)| *id as usize >= vocab)
    {
        return Err(ApiError::bad_param(
            "logit_bias",
            format!("Token id {id} in `logit_bias` is out of the vocabulary of {vocab}."),
        ));
    }

    let allow_files = st.config.allow_file_images;
    // Templating, tokenizing, encoding images and compiling a grammar can
    // take a while.
    let (req, (prompt, images), constraint, thinking) = tokio::task::spawn_blocking(move || {
        // A model that does not think ignores the switch.
        let thinking = match (&req.input, req.thinking) {
            (Input::Chat(_), true) => engine.thinking(req.thinking_budget),
            _ => None,
        };
        let prompt = if req.images.is_empty() && req.audio.is_empty() {
            (
                tokenize(&engine, &req.input, thinking.is_some())?,
                Vec::new(),
            )
        } else {
            media_prompt(&engine, &req, allow_files, thinking.is_some())?
        };
        let constraint = match &req.grammar {
            None => None,
            Some((grammar, field)) => Some(
                engine
                    .constraint(grammar)
                    .map_err(|e| grammar_error(field, e))?,
            ),
        };
        Ok::<_, ApiError>((req, prompt, constraint, thinking))
    })
    .await
    .map_err(|e| ApiError::internal(format!("tokenizer task failed: {e}")))??;
    if prompt.is_empty() {
        return Err(ApiError::bad_param("prompt", "The prompt is empty."));
    }
    if prompt.len() >= n_ctx {
        return Err(ApiError {
            code: Some("context_length_exceeded"),
            ..ApiError::bad_param(
                if kind == Kind::Chat { "messages" } else { "prompt" },
                format!(
                    "The prompt is {} tokens but the context is {} tokens (it must leave room for at least one generated token). Shorten the prompt or start the server with a larger --ctx.",
                    prompt.len(),
                    n_ctx
                ),
            )
        });
    }
    let room = n_ctx - prompt.len();
    let opts = req.generate_options(room);
    let (tx, rx) = mpsc::unbounded_channel();
    let deadline = st
        .config
        .max_request_time
        .and_then(|limit| received.checked_add(limit));
    let guards = guards_for(&st, &req, kind)?;
    if let (false, Input::Chat(messages)) = (guards.is_empty(), &req.input) {
        let cfg = guard::GuardConfig {
            guards,
            max_tokens: opts.max_tokens,
            ..guard::GuardConfig::default()
        };
        let messages = messages.clone();
        let params = req.params.clone();
        let state = st.clone();
        let client = tx;
        tokio::task::spawn_blocking(move || {
            let Some(backend) = state.backend.get() else {
                return;
            };
            let mut chat = crate::guarded::SchedulerChat {
                engine: &backend.engine,
                scheduler: &backend.scheduler,
                params,
                deadline,
                client: &client,
            };
            crate::guarded::run(&mut chat, &messages, &cfg, &state.metrics);
        });
        return respond(&st, kind, model, req, rx).await;
    }
    let job = Job {
        prompt,
        images,
        params: req.params.clone(),
        opts,
        constraint,
        thinking,
        events: tx,
        deadline,
    };
    match backend.scheduler.submit(job) {
        Ok(()) => {}
        Err(Rejected::QueueFull) => return Err(ApiError::queue_full(2)),
        Err(Rejected::ShuttingDown) => {
            return Err(ApiError::unavailable("The server is shutting down.", 5))
        }
    }
    respond(&st, kind, model, req, rx).await
}

/// The guards a request runs: its own `guard` field, else the server's
/// default. A request that asks for guards and also for a grammar, tools or
/// thinking is refused (the guards rewrite text those would hold); the
/// server's default simply does not apply to such a request.
fn guards_for(st: &AppState, req: &Request, kind: Kind) -> Result<guard::GuardSet, ApiError> {
    let special = req.grammar.is_some()
        || req.tools.is_some()
        || req.thinking
        || !req.images.is_empty()
        || !req.audio.is_empty();
    match req.guard {
        Some(g) if !g.is_empty() && special => Err(ApiError::bad_param(
            "guard",
            "`guard` cannot be combined with a grammar, a response format, tools, thinking, images or audio.",
        )),
        Some(g) => Ok(g),
        None if special || kind != Kind::Chat => Ok(guard::GuardSet::none()),
        None => Ok(st.config.guard),
    }
}

/// Answer from the events on `rx`: one JSON object, or a stream.
async fn respond(
    st: &AppState,
    kind: Kind,
    model: String,
    req: Request,
    rx: mpsc::UnboundedReceiver<Event>,
) -> Result<Response, ApiError> {
    let meta = Meta {
        id: new_id(if kind == Kind::Chat {
            "chatcmpl"
        } else {
            "cmpl"
        }),
        created: api::now_secs(),
        model,
        kind,
        tools: req.tools.clone(),
    };
    if req.stream {
        Ok(stream_response(meta, req, rx))
    } else {
        let timeout = st.config.request_timeout;
        match tokio::time::timeout(timeout, collect(meta, rx)).await {
            Ok(r) => r,
            Err(_) => Err(ApiError::timed_out(format!(
                "The request did not finish within {} s; ask for fewer tokens or stream.",
                timeout.as_secs()
            ))),
        }
    }
}

/// A grammar that does not compile is the client's fault: 400, naming the
/// field it came from and the problem.
fn grammar_error(field: &str, e: EngineError) -> ApiError {
    match e {
        EngineError::InvalidGrammar(msg) => ApiError {
            code: Some("invalid_grammar"),
            ..ApiError::bad_param(field, format!("`{field}` cannot be used: invalid {msg}"))
        },
        other => ApiError::internal(other.to_string()),
    }
}

/// The ids of a chat with images and audio clips, each decoded and encoded
/// (or taken from the cache): a bad image or clip, or media for a model
/// without the tower for it, is the client's error.
fn media_prompt(
    engine: &Engine,
    req: &Request,
    allow_files: bool,
    thinking: bool,
) -> Result<(Vec<u32>, Vec<engine::PromptImage>), ApiError> {
    let Input::Chat(messages) = &req.input else {
        return Err(ApiError::bad_param(
            "prompt",
            "Images and audio are read in chats only.",
        ));
    };
    let mut images = Vec::with_capacity(req.images.len());
    for (i, source) in req.images.iter().enumerate() {
        let field = format!("image {}", i + 1);
        let bytes = match source {
            api::ImageSource::Data(b) => std::borrow::Cow::Borrowed(b.as_slice()),
            api::ImageSource::File(_) if !allow_files => {
                return Err(ApiError::bad_param(
                    "messages",
                    "File URLs are off on this server (start it with --allow-file-images); send the image as a data URL.",
                ))
            }
            api::ImageSource::File(path) => std::borrow::Cow::Owned(std::fs::read(path).map_err(
                |e| ApiError::bad_param("messages", format!("Cannot read {}: {e}.", path.display())),
            )?),
        };
        let e = engine
            .encode_image(&bytes)
            .map_err(|e| ApiError::bad_param("messages", format!("{field}: {e}.")))?;
        images.push(e);
    }
    let clips = req
        .audio
        .iter()
        .enumerate()
        .map(|(i, bytes)| {
            engine
                .encode_audio(bytes)
                .map_err(|e| ApiError::bad_param("messages", format!("audio clip {}: {e}.", i + 1)))
        })
        .collect::<Result<Vec<_>, _>>()?;
    engine
        .encode_chat_media(messages, &images, &clips, thinking)
        .map_err(|e| ApiError::bad_param("messages", format!("{e}.")))
}

fn tokenize(engine: &Engine, input: &Input, thinking: bool) -> Result<Vec<u32>, ApiError> {
    match input {
        Input::Chat(messages) => engine
            .encode_chat_thinking(messages, thinking)
            .map_err(|e| {
                ApiError::bad_param("messages", format!("Cannot apply the chat template: {e}"))
            }),
        Input::Text(text) => {
            let tok = engine.tokenizer();
            Ok(tok.encode(text, tok.add_bos(), true))
        }
        Input::Ids(ids) => {
            let vocab = engine.model().config().vocab;
            if let Some(bad) = ids.iter().find(|&&id| id as usize >= vocab) {
                return Err(ApiError::bad_param(
                    "prompt",
                    format!("Token id {bad} is out of the vocabulary of {vocab}."),
                ));
            }
            Ok(ids.clone())
        }
    }
}

/// What every response of one request shares.
struct Meta {
    id: String,
    created: u64,
    model: String,
    kind: Kind,
    /// Tool calling, when the reply may be a call.
    tools: Option<ToolMode>,
}

impl Meta {
    /// The reply as a tool call: only when tools are on and the reply ended
    /// on its own (a cut-off call is not claimed complete).
    fn tool_call(&self, text: &str, finish: FinishReason) -> Option<ToolCall> {
        if finish != FinishReason::Stop {
            return None;
        }
        self.tools.as_ref()?.parse(text)
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

async fn collect(meta: Meta, mut rx: mpsc::UnboundedReceiver<Event>) -> Result<Response, ApiError> {
    let mut text = String::new();
    let mut thought = String::new();
    let mut guard = None;
    loop {
        match rx.recv().await {
            Some(Event::Started) => {}
            Some(Event::Guard(trace)) => guard = Some(trace),
            Some(Event::Text(t)) => text.push_str(&t),
            Some(Event::Thought(t)) => thought.push_str(&t),
            Some(Event::Done(u)) => {
                let mut reason = api::finish_reason(u.finish);
                let usage = api::usage_json(u.prompt_tokens, u.completion_tokens, u.cached_tokens);
                let mut message = json!({"role": "assistant", "content": text});
                if let Some(call) = meta.tool_call(&text, u.finish) {
                    message = json!({
                        "role": "assistant",
                        "content": null,
                        "tool_calls": [tool_call_json(&call, None)],
                    });
                    reason = "tool_calls";
                }
                if !thought.is_empty() {
                    // The convention llama.cpp and DeepSeek's clients read.
                    message["reasoning_content"] = json!(thought);
                }
                let body = match meta.kind {
                    Kind::Chat => json!({
                        "id": meta.id,
                        "object": "chat.completion",
                        "created": meta.created,
                        "model": meta.model,
                        "system_fingerprint": null,
                        "choices": [{
                            "index": 0,
                            "message": message,
                            "logprobs": null,
                            "finish_reason": reason,
                        }],
                        "usage": usage,
                    }),
                    Kind::Completion => json!({
                        "id": meta.id,
                        "object": "text_completion",
                        "created": meta.created,
                        "model": meta.model,
                        "system_fingerprint": null,
                        "choices": [{
                            "index": 0,
                            "text": text,
                            "logprobs": null,
                            "finish_reason": reason,
                        }],
                        "usage": usage,
                    }),
                };
                let mut body = body;
                if let Some(trace) = guard {
                    // Hearth's extension: what the guardrails did.
                    body["guard"] = trace;
                }
                return Ok(Json(body).into_response());
            }
            Some(Event::Failed(msg)) => return Err(failed(&msg)),
            None => return Err(ApiError::internal("The generation ended without a result.")),
        }
    }
}

/// A failure reported by the scheduler: shutdown is 503, the rest are bugs.
fn failed(msg: &str) -> ApiError {
    if msg.contains("shutting down") {
        ApiError::unavailable(msg.to_string(), 5)
    } else {
        ApiError::internal(msg.to_string())
    }
}

impl Meta {
    /// One streamed chunk with `delta` (chat) or `text` (completions).
    fn chunk(&self, content: Option<&str>, role: bool, finish: Option<&str>) -> Value {
        match self.kind {
            Kind::Chat => {
                let mut delta = serde_json::Map::new();
                if role {
                    delta.insert("role".into(), json!("assistant"));
                }
                if let Some(c) = content {
                    delta.insert("content".into(), json!(c));
                }
                json!({
                    "id": self.id,
                    "object": "chat.completion.chunk",
                    "created": self.created,
                    "model": self.model,
                    "system_fingerprint": null,
                    "choices": [{
                        "index": 0,
                        "delta": delta,
                        "logprobs": null,
                        "finish_reason": finish,
                    }],
                })
            }
            Kind::Completion => json!({
                "id": self.id,
                "object": "text_completion",
                "created": self.created,
                "model": self.model,
                "system_fingerprint": null,
                "choices": [{
                    "index": 0,
                    "text": content.unwrap_or(""),
                    "logprobs": null,
                    "finish_reason": finish,
                }],
            }),
        }
    }

    /// A chat chunk whose delta is the whole tool call.
    fn tool_chunk(&self, call: &ToolCall, role: bool) -> Value {
        let mut chunk = self.chunk(None, role, None);
        let delta = &mut chunk["choices"][0]["delta"];
        delta["tool_calls"] = json!([tool_call_json(call, Some(0))]);
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

/// The SSE response: chunks as the scheduler produces them, then `[DONE]`.
/// Dropping the stream (the client hung up) drops the receiver, which
/// cancels the generation at its next step.
fn stream_response(meta: Meta, req: Request, rx: mpsc::UnboundedReceiver<Event>) -> Response {
    /// Whether text streams as it comes, or is held because the reply may
    /// be (or must be) a tool call, which streams whole at the end.
    #[derive(PartialEq)]
    enum Mode {
        Text,
        Undecided,
        Call,
    }
    struct St {
        meta: Meta,
        rx: mpsc::UnboundedReceiver<Event>,
        include_usage: bool,
        sent_role: bool,
        done: bool,
        mode: Mode,
        held: String,
        guard: Option<Value>,
    }
    let mode = match &meta.tools {
        None => Mode::Text,
        Some(t) if t.call_required() => Mode::Call,
        Some(_) => Mode::Undecided,
    };
    let st = St {
        meta,
        rx,
        include_usage: req.include_usage,
        sent_role: false,
        done: false,
        mode,
        held: String::new(),
        guard: None,
    };
    let stream = futures_util::stream::unfold(st, |mut st| async move {
        if st.done {
            return None;
        }
        let mut out: Vec<SseEvent> = Vec::new();
        match st.rx.recv().await {
            Some(Event::Started) => {
                if st.meta.kind == Kind::Chat && !st.sent_role {
                    st.sent_role = true;
                    out.push(data(&st.meta.chunk(Some(""), true, None)));
                }
            }
            Some(Event::Guard(trace)) => st.guard = Some(trace),
            Some(Event::Thought(t)) => {
                let role = st.meta.kind == Kind::Chat && !st.sent_role;
                st.sent_role = true;
                let mut chunk = st.meta.chunk(None, role, None);
                chunk["choices"][0]["delta"]["reasoning_content"] = json!(t);
                out.push(data(&chunk));
            }
            Some(Event::Text(t)) => {
                let text = match st.mode {
                    Mode::Text => t,
                    Mode::Call => {
                        st.held.push_str(&t);
                        String::new()
                    }
                    Mode::Undecided => {
                        // Under `auto` a call is a reply that begins with `{`.
                        st.held.push_str(&t);
                        match st.held.chars().next() {
                            None => String::new(),
                            Some('{') => {
                                st.mode = Mode::Call;
                                String::new()
                            }
                            Some(_) => {
                                st.mode = Mode::Text;
                                std::mem::take(&mut st.held)
                            }
                        }
                    }
                };
                if !text.is_empty() {
                    let role = st.meta.kind == Kind::Chat && !st.sent_role;
                    st.sent_role = true;
                    out.push(data(&st.meta.chunk(Some(&text), role, None)));
                }
            }
            Some(Event::Done(u)) => {
                let mut reason = api::finish_reason(u.finish);
                if st.mode != Mode::Text {
                    let role = !st.sent_role;
                    st.sent_role = true;
                    let held = std::mem::take(&mut st.held);
                    match st.meta.tool_call(&held, u.finish) {
                        Some(call) => {
                            out.push(data(&st.meta.tool_chunk(&call, role)));
                            reason = "tool_calls";
                        }
                        // Not a call after all (or cut off): it is text.
                        None if !held.is_empty() => {
                            out.push(data(&st.meta.chunk(Some(&held), role, None)));
                        }
                        None => {}
                    }
                }
                let mut last = st.meta.chunk(None, false, Some(reason));
                if let Some(trace) = st.guard.take() {
                    last["guard"] = trace;
                }
                out.push(data(&last));
                if st.include_usage {
                    let usage =
                        api::usage_json(u.prompt_tokens, u.completion_tokens, u.cached_tokens);
                    out.push(data(&st.meta.usage_chunk(usage)));
                }
                out.push(SseEvent::default().data("[DONE]"));
                st.done = true;
            }
            Some(Event::Failed(msg)) => {
                out.push(data(&failed(&msg).body()));
                out.push(SseEvent::default().data("[DONE]"));
                st.done = true;
            }
            None => {
                out.push(data(
                    &ApiError::internal("The generation ended without a result.").body(),
                ));
                out.push(SseEvent::default().data("[DONE]"));
                st.done = true;
            }
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
