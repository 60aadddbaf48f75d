//! `hearth serve`: an OpenAI-compatible HTTP server over the engine.
//!
//! The HTTP side (axum on tokio) parses, validates and tokenizes requests,
//! then hands them to the [`scheduler`], which runs the model on its own OS
//! thread and streams text back through channels. Nothing here blocks the
//! async runtime on the model.

pub mod api;
pub mod error;
pub mod metrics;
pub mod scheduler;

use api::{Input, Request};
use axum::body::Body;
use axum::extract::{Path as UrlPath, Request as HttpRequest, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use engine::{Engine, EngineOptions};
use error::ApiError;
use futures_util::StreamExt;
use metrics::Metrics;
use scheduler::{Event, Job, Rejected, Scheduler};
use serde_json::{json, Value};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// How the server is set up.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The GGUF file.
    pub model_path: PathBuf,
    /// Names the model answers to; the first is the id `/v1/models` reports.
    pub model_ids: Vec<String>,
    /// Engine settings (threads, precision).
    pub engine: EngineOptions,
    /// Address to listen on.
    pub host: String,
    /// Port (0 picks a free one; the bound address is printed).
    pub port: u16,
    /// Sequences generated at once.
    pub parallel: usize,
    /// Context size of each slot (0: the model's default).
    pub ctx: usize,
    /// Requests that may wait for a slot.
    pub queue: usize,
    /// Required bearer key for `/v1/*`, if any.
    pub api_key: Option<String>,
    /// Largest request body in bytes.
    pub body_limit: usize,
    /// Time a client has to send its whole request body.
    pub body_timeout: Duration,
    /// Time a client has to send its request line and headers.
    pub header_timeout: Duration,
    /// Longest a non-streaming request may take before it is answered 504
    /// (a backstop; `max_request_time` normally ends it first).
    pub request_timeout: Duration,
    /// Longest any request may generate, streamed or not, counted from its
    /// arrival: the generation then ends with finish_reason `length`.
    /// `None`: no limit.
    pub max_request_time: Option<Duration>,
    /// On SIGTERM/SIGINT, how long in-flight requests may finish before they
    /// are cancelled.
    pub shutdown_timeout: Duration,
}

impl ServerConfig {
    /// Defaults for a model file; the id is its file stem.
    pub fn new(model_path: PathBuf) -> Self {
        let stem = model_path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".into());
        Self {
            model_path,
            model_ids: vec![stem],
            engine: EngineOptions::default(),
            host: "127.0.0.1".into(),
            port: 8080,
            parallel: 1,
            ctx: 0,
            queue: 4,
            api_key: None,
            body_limit: 1 << 20,
            body_timeout: Duration::from_secs(30),
            header_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(600),
            max_request_time: Some(Duration::from_secs(300)),
            shutdown_timeout: Duration::from_secs(10),
        }
    }
}

/// Why the server stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Binding or serving failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The model could not be loaded.
    #[error("cannot load {path}")]
    Load {
        /// The model file.
        path: String,
        /// Why.
        source: engine::EngineError,
    },
}

/// What the handlers need once the model is loaded.
struct Backend {
    engine: Arc<Engine>,
    scheduler: Scheduler,
    n_ctx: usize,
}

/// Shared state of the handlers.
#[derive(Clone)]
struct AppState {
    config: Arc<ServerConfig>,
    backend: Arc<OnceLock<Backend>>,
    metrics: Arc<Metrics>,
    created: u64,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn new_id(prefix: &str) -> String {
    format!(
        "{prefix}-{:x}{:06x}",
        api::now_secs(),
        NEXT_ID.fetch_add(1, Ordering::Relaxed)
    )
}

/// Run the server until SIGTERM or SIGINT; blocks the calling thread.
/// The bound address is printed to stderr as `listening on http://ADDR`.
pub fn run(config: ServerConfig) -> Result<(), ServeError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("hearth-http")
        .build()?;
    let result = runtime.block_on(serve(config));
    runtime.shutdown_timeout(Duration::from_secs(2));
    result
}

async fn serve(config: ServerConfig) -> Result<(), ServeError> {
    let config = Arc::new(config);
    let metrics = Arc::new(Metrics::default());
    metrics
        .queue_capacity
        .store(config.queue as u64, Ordering::Relaxed);
    metrics
        .slots_total
        .store(config.parallel as u64, Ordering::Relaxed);
    let state = AppState {
        config: Arc::clone(&config),
        backend: Arc::new(OnceLock::new()),
        metrics: Arc::clone(&metrics),
        created: api::now_secs(),
    };

    let listener = tokio::net::TcpListener::bind((config.host.as_str(), config.port)).await?;
    let addr: SocketAddr = listener.local_addr()?;
    eprintln!("hearth serve: listening on http://{addr}");

    // Load the model on its own thread; /health says 503 until it is done.
    let (loaded_tx, loaded_rx) = tokio::sync::oneshot::channel::<Result<(), ServeError>>();
    {
        let state = state.clone();
        std::thread::Builder::new()
            .name("hearth-load".into())
            .spawn(move || {
                let _ = loaded_tx.send(load(&state));
            })?;
    }

    let app = router(state.clone());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut load_failed: Option<ServeError> = None;
    let server = tokio::spawn(accept_loop(listener, app, stop_rx, config.header_timeout));

    // Wait for a signal, or for the model load to fail.
    tokio::select! {
        () = shutdown_signal() => {
            eprintln!("hearth serve: shutting down; waiting up to {:?} for requests in flight", config.shutdown_timeout);
        }
        res = loaded_rx => {
            match res {
                Ok(Ok(())) => {
                    shutdown_signal().await;
                    eprintln!("hearth serve: shutting down; waiting up to {:?} for requests in flight", config.shutdown_timeout);
                }
                Ok(Err(e)) => load_failed = Some(e),
                Err(_) => load_failed = None,
            }
        }
    }
    let _ = stop_tx.send(true);
    if let Some(b) = state.backend.get() {
        // No new jobs; running ones go on for now.
        b.scheduler.shutdown(false);
    }
    let mut server = server;
    match tokio::time::timeout(config.shutdown_timeout, &mut server).await {
        Ok(res) => {
            res.map_err(|e| std::io::Error::other(e.to_string()))?;
        }
        Err(_) => {
            eprintln!("hearth serve: requests still running after the timeout; cancelling them");
            if let Some(b) = state.backend.get() {
                b.scheduler.shutdown(true);
            }
            // Cancelled streams end at once; give them a moment to close.
            let _ = tokio::time::timeout(Duration::from_secs(2), &mut server).await;
        }
    }
    if let Some(b) = state.backend.get() {
        b.scheduler.join();
    }
    match load_failed {
        Some(e) => Err(e),
        None => {
            eprintln!("hearth serve: stopped");
            Ok(())
        }
    }
}

/// Accept connections until `stop`, serving each with hyper's HTTP/1 and a
/// header-read timeout; then ask every connection to close once its
/// in-flight request is answered and wait for them all.
async fn accept_loop(
    listener: tokio::net::TcpListener,
    app: Router,
    mut stop: tokio::sync::watch::Receiver<bool>,
    header_timeout: Duration,
) {
    // Each connection task holds a receiver; `closed()` tells when all ended.
    let (alive_tx, alive_rx) = tokio::sync::watch::channel(());
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = async { stop.wait_for(|s| *s).await.is_ok() } => break,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(_) => {
                // Out of file descriptors and the like: back off a little.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        let mut stop = stop.clone();
        let alive = alive_rx.clone();
        tokio::spawn(async move {
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(header_timeout)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = async { stop.wait_for(|s| *s).await.is_ok() } => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
            drop(alive);
        });
    }
    drop(listener);
    drop(alive_rx);
    alive_tx.closed().await;
}

fn load(state: &AppState) -> Result<(), ServeError> {
    let cfg = &state.config;
    let engine = Engine::load(&cfg.model_path, &cfg.engine).map_err(|source| ServeError::Load {
        path: cfg.model_path.display().to_string(),
        source,
    })?;
    let engine = Arc::new(engine);
    let n_ctx = if cfg.ctx == 0 {
        engine.default_ctx()
    } else {
        cfg.ctx
    };
    let scheduler = Scheduler::start(
        Arc::clone(&engine),
        cfg.parallel,
        n_ctx,
        cfg.queue,
        Arc::clone(&state.metrics),
    )?;
    eprintln!(
        "hearth serve: model {} loaded in {:.2?}; {} slot(s) of {} tokens ({:.1} MiB each), queue {}",
        cfg.model_ids.first().map(String::as_str).unwrap_or("?"),
        engine.load_time(),
        cfg.parallel,
        n_ctx,
        engine.session_bytes(n_ctx) as f64 / (1024.0 * 1024.0),
        cfg.queue
    );
    let _ = state.backend.set(Backend {
        engine,
        scheduler,
        n_ctx,
    });
    state.metrics.loaded.store(true, Ordering::Relaxed);
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}

fn router(state: AppState) -> Router {
    let v1 = Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(list_models))
        .route("/v1/models/{id}", get(get_model))
        .route_layer(middleware::from_fn_with_state(state.clone(), auth));
    Router::new()
        .merge(v1)
        .route("/health", get(health))
        .route("/metrics", get(metrics_text))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(
            state.clone(),
            count_requests,
        ))
        .with_state(state)
}

async fn count_requests(State(st): State<AppState>, req: HttpRequest, next: Next) -> Response {
    let endpoint = match req.uri().path() {
        "/v1/chat/completions" => "chat_completions",
        "/v1/completions" => "completions",
        "/v1/models" => "models",
        p if p.starts_with("/v1/models/") => "models",
        "/health" => "health",
        "/metrics" => "metrics",
        _ => "other",
    };
    let resp = next.run(req).await;
    st.metrics.record_request(endpoint, resp.status().as_u16());
    resp
}

/// Compare without an early exit, so timing does not leak the key.
fn same_key(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn auth(State(st): State<AppState>, req: HttpRequest, next: Next) -> Response {
    if let Some(key) = &st.config.api_key {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::trim);
        match given {
            None => {
                return ApiError::unauthorized("Missing API key: send `Authorization: Bearer KEY`.")
                    .into_response()
            }
            Some(g) if !same_key(g.as_bytes(), key.as_bytes()) => {
                return ApiError::unauthorized("Incorrect API key provided.").into_response()
            }
            Some(_) => {}
        }
    }
    next.run(req).await
}

async fn not_found(req: HttpRequest) -> ApiError {
    ApiError::not_found(format!(
        "Unknown route: {} {}",
        req.method(),
        req.uri().path()
    ))
}

async fn method_not_allowed() -> ApiError {
    ApiError::method_not_allowed()
}

async fn health(State(st): State<AppState>) -> Response {
    if st.backend.get().is_some() {
        Json(json!({"status": "ok"})).into_response()
    } else {
        ApiError::unavailable("The model is loading.", 1).into_response()
    }
}

async fn metrics_text(State(st): State<AppState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        )],
        st.metrics.render(),
    )
        .into_response()
}

fn model_json(st: &AppState, id: &str) -> Value {
    json!({
        "id": id,
        "object": "model",
        "created": st.created,
        "owned_by": "hearth",
    })
}

async fn list_models(State(st): State<AppState>) -> Json<Value> {
    let id = st.config.model_ids.first().cloned().unwrap_or_default();
    Json(json!({"object": "list", "data": [model_json(&st, &id)]}))
}

async fn get_model(State(st): State<AppState>, UrlPath(id): UrlPath<String>) -> Response {
    match resolve_model(&st, Some(&id)) {
        Ok(served) => Json(model_json(&st, &served)).into_response(),
        Err(e) => e.into_response(),
    }
}

/// The served id if `asked` names this model (or names none).
fn resolve_model(st: &AppState, asked: Option<&str>) -> Result<String, ApiError> {
    let served = st.config.model_ids.first().cloned().unwrap_or_default();
    match asked.map(str::trim) {
        None | Some("") => Ok(served),
        Some(a)
            if st
                .config
                .model_ids
                .iter()
                .any(|id| id.eq_ignore_ascii_case(a)) =>
        {
            Ok(served)
        }
        Some(a) => Err(ApiError::model_not_found(a, &served)),
    }
}

/// Read the whole body within the size limit and the time limit.
async fn read_body(st: &AppState, headers: &HeaderMap, body: Body) -> Result<Vec<u8>, ApiError> {
    let limit = st.config.body_limit;
    if let Some(len) = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
    {
        if len > limit as u64 {
            return Err(ApiError::too_large(limit));
        }
    }
    let read = async {
        let mut out = Vec::new();
        let mut stream = body.into_data_stream();
        while let Some(chunk) = stream.next().await {
            let chunk =
                chunk.map_err(|e| ApiError::bad_request(format!("Cannot read the body: {e}")))?;
            if out.len() + chunk.len() > limit {
                return Err(ApiError::too_large(limit));
            }
            out.extend_from_slice(&chunk);
        }
        Ok(out)
    };
    match tokio::time::timeout(st.config.body_timeout, read).await {
        Ok(r) => r,
        Err(_) => Err(ApiError::request_timeout(format!(
            "The request body did not arrive within {} s.",
            st.config.body_timeout.as_secs_f64()
        ))),
    }
}

/// Which endpoint a generation came from (shapes the response).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Chat,
    Completion,
}

async fn chat_completions(State(st): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    generate(st, headers, body, Kind::Chat).await
}

async fn completions(State(st): State<AppState>, headers: HeaderMap, body: Body) -> Response {
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
    let req = match kind {
        Kind::Chat => api::parse_chat(&bytes)?,
        Kind::Completion => api::parse_completion(&bytes)?,
    };
    let model = resolve_model(&st, req.model.as_deref())?;
    let Some(backend) = st.backend.get() else {
        return Err(ApiError::unavailable("The model is loading.", 1));
    };
    let engine = Arc::clone(&backend.engine);
    let n_ctx = backend.n_ctx;

    // Templating and tokenizing can take a while on a large prompt.
    let (req, prompt) = tokio::task::spawn_blocking(move || {
        let prompt = tokenize(&engine, &req.input)?;
        Ok::<_, ApiError>((req, prompt))
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
    let job = Job {
        prompt,
        params: req.params.clone(),
        opts,
        events: tx,
        deadline: st
            .config
            .max_request_time
            .and_then(|limit| received.checked_add(limit)),
    };
    match backend.scheduler.submit(job) {
        Ok(()) => {}
        Err(Rejected::QueueFull) => return Err(ApiError::queue_full(2)),
        Err(Rejected::ShuttingDown) => {
            return Err(ApiError::unavailable("The server is shutting down.", 5))
        }
    }
    let meta = Meta {
        id: new_id(if kind == Kind::Chat {
            "chatcmpl"
        } else {
            "cmpl"
        }),
        created: api::now_secs(),
        model,
        kind,
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

fn tokenize(engine: &Engine, input: &Input) -> Result<Vec<u32>, ApiError> {
    match input {
        Input::Chat(messages) => engine.encode_chat(messages).map_err(|e| {
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
}

async fn collect(meta: Meta, mut rx: mpsc::UnboundedReceiver<Event>) -> Result<Response, ApiError> {
    let mut text = String::new();
    loop {
        match rx.recv().await {
            Some(Event::Started) => {}
            Some(Event::Text(t)) => text.push_str(&t),
            Some(Event::Done(u)) => {
                let reason = api::finish_reason(u.finish);
                let usage = api::usage_json(u.prompt_tokens, u.completion_tokens, u.cached_tokens);
                let body = match meta.kind {
                    Kind::Chat => json!({
                        "id": meta.id,
                        "object": "chat.completion",
                        "created": meta.created,
                        "model": meta.model,
                        "system_fingerprint": null,
                        "choices": [{
                            "index": 0,
                            "message": {"role": "assistant", "content": text},
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
    struct St {
        meta: Meta,
        rx: mpsc::UnboundedReceiver<Event>,
        include_usage: bool,
        sent_role: bool,
        done: bool,
    }
    let st = St {
        meta,
        rx,
        include_usage: req.include_usage,
        sent_role: false,
        done: false,
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
            Some(Event::Text(t)) => {
                let role = st.meta.kind == Kind::Chat && !st.sent_role;
                st.sent_role = true;
                out.push(data(&st.meta.chunk(Some(&t), role, None)));
            }
            Some(Event::Done(u)) => {
                let reason = api::finish_reason(u.finish);
                out.push(data(&st.meta.chunk(None, false, Some(reason))));
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
