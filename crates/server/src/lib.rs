//! `hearth serve`: an OpenAI-compatible HTTP server over the engine.
//!
//! The HTTP side (axum on tokio) parses, validates and tokenizes requests,
//! then hands them to the [`scheduler`], which runs the model on its own OS
//! thread and streams text back through channels. Nothing here blocks the
//! async runtime on the model.

mod allocator;
mod anthropic;
pub mod api;
mod audio;
mod body;
mod browser;
mod budget;
mod completions;
mod embeddings;
pub mod error;
mod guarded;
pub mod idle;
mod limits;
mod lora;
mod media;
pub mod metrics;
pub mod models;
mod native;
mod ollama;
mod panics;
mod pipeline;
mod reply;
mod responses;
mod routes;
pub mod scheduler;
mod slots;
pub mod tls;
pub mod truncate;
mod ui;
mod utility;
mod work;

// The other APIs' bodies, parsed into an [`api::Request`] as their handlers
// do (public for the fuzz targets; here, not in `api`, which those APIs use).
pub use anthropic::parse_messages as parse_anthropic_messages;
pub use ollama::{parse_chat as parse_ollama_chat, parse_generate as parse_ollama_generate};

use axum::Router;
use engine::EngineError;
use idle::Activity;
use metrics::Metrics;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use body::read_body_within;
pub use budget::{json_memory, DEFAULT_REQUEST_MEMORY};
pub use limits::{default_prep_threads, Limits, RateLimiter, DEFAULT_BODY_LIMIT};

/// How the server is set up. The models come from the [`models::Lineup`]
/// given to [`run`], which loads each with the same [`engine::RunOptions`]
/// (context, threads, precision, quantization, sampling defaults).
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Address to listen on.
    pub host: String,
    /// Port (0 picks a free one; the bound address is printed).
    pub port: u16,
    /// Sequences generated at once.
    pub parallel: usize,
    /// Seed of requests that give none (`None`: a fresh one each).
    pub seed: Option<u64>,
    /// Requests that may wait for a slot.
    pub queue: usize,
    /// Bearer keys the APIs accept (and `/health`, `/metrics` unless
    /// `public_health`); none: no key is asked for.
    pub api_keys: Vec<String>,
    /// Whether `/health` and `/metrics` answer without the key (for a
    /// platform's probes, which cannot send one).
    pub public_health: bool,
    /// Origins a browser page may call from (`--cors`; `*` for any; none
    /// by default).
    pub cors: Vec<String>,
    /// Host names the server answers to besides `localhost`, `*.localhost`
    /// and IP literals (`--allowed-hosts`; `*.NAME` for subdomains, `*` for
    /// any). Empty: those alone on a loopback bind, any name on another.
    pub allowed_hosts: Vec<String>,
    /// What one client may ask: body size and time, connections, rate,
    /// media per request.
    pub limits: Limits,
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
    /// Guardrails for chat requests that name none (their `guard` field).
    pub guard: guard::GuardSet,
    /// What a chat endpoint does with a conversation longer than the
    /// context: drop its oldest turns (the default) or refuse it.
    pub context_overflow: truncate::Overflow,
    /// Whether image parts may name local files (`file://` URLs); off, only
    /// inline `data:` URLs are read.
    pub allow_file_images: bool,
    /// How `/infill` and `suffix` lay out a fill-in-the-middle prompt
    /// (llama.cpp's `--spm-infill`: the suffix part first).
    pub infill_layout: engine::InfillLayout,
    /// Whether clients may pull models (`/api/pull`, `--allow-pull`): a
    /// known alias or an `hf:` GGUF file, fetched with the operator's
    /// network and `HF_TOKEN` into the cache. Off: 403.
    pub allow_pull: bool,
    /// Exit (cleanly, status 0) once the model is loaded and no request has
    /// been in flight for this long: scale to zero. `None`: never.
    pub idle_exit: Option<Duration>,
    /// Whether `/health` and `/metrics` requests count as activity for
    /// `idle_exit`. Off by default, so a platform's health checker or a
    /// metrics scraper does not keep an idle server awake.
    pub idle_counts_probes: bool,
    /// How many models stay loaded, and for how long (models loaded on
    /// demand; a pinned `-m` model stays).
    pub residency: models::Residency,
    /// Whether `/` serves the chat page (`--no-ui` turns it off).
    pub ui: bool,
    /// Serve HTTPS with this certificate and key instead of plain HTTP.
    pub tls: Option<tls::TlsFiles>,
    /// The log that keeps stored responses across restarts; `None` keeps
    /// them in memory only.
    pub responses_log: Option<std::path::PathBuf>,
    /// Where finished prompts' states are kept for later turns (RAM, and a
    /// folder that outlives the process); `None`: each slot keeps its own
    /// conversation only.
    pub prompt_cache: Option<prompt_cache::CacheConfig>,
    /// Whether every API key may reuse every key's prompt states (off: a
    /// state serves only the key whose request left it).
    pub cache_shared: bool,
    /// The folder `/slots/{id}?action=save|restore` writes and reads
    /// (`--slot-save-path`); `None`: those actions answer 501.
    pub slot_save_path: Option<std::path::PathBuf>,
    /// Bytes of files that folder may hold (`--slot-save-disk`): a save
    /// that would pass it answers 507.
    pub slot_save_bytes: u64,
}

impl ServerConfig {
    /// The defaults.
    pub fn new() -> Self {
        Self {
            host: "127.0.0.1".into(),
            port: 8080,
            parallel: 1,
            seed: None,
            queue: 4,
            api_keys: Vec::new(),
            public_health: false,
            cors: Vec::new(),
            allowed_hosts: Vec::new(),
            limits: Limits::default(),
            request_timeout: Duration::from_secs(600),
            max_request_time: Some(Duration::from_secs(300)),
            shutdown_timeout: Duration::from_secs(10),
            guard: guard::GuardSet::none(),
            allow_file_images: false,
            infill_layout: engine::InfillLayout::default(),
            allow_pull: false,
            context_overflow: truncate::Overflow::Truncate,
            idle_exit: None,
            idle_counts_probes: false,
            residency: models::Residency::default(),
            ui: true,
            tls: None,
            responses_log: None,
            prompt_cache: None,
            cache_shared: false,
            slot_save_path: None,
            slot_save_bytes: 4 << 30,
        }
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self::new()
    }
}

/// Why the server stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Binding or serving failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The certificate or key given for HTTPS cannot be used.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// The model could not be loaded.
    #[error("cannot load {model}")]
    Load {
        /// The model's id.
        model: String,
        /// Why.
        source: EngineError,
    },
}

/// Shared state of the handlers.
#[derive(Clone)]
struct AppState {
    config: Arc<ServerConfig>,
    models: Arc<models::Models>,
    metrics: Arc<Metrics>,
    /// Requests in flight and the last end of one, for `idle_exit`.
    activity: Arc<Activity>,
    /// Requests per minute per client, when `--rate-limit` is set.
    rate: Option<Arc<RateLimiter>>,
    /// The threads that parse, tokenize, compile and decode, off the
    /// runtime.
    work: Arc<work::WorkPool>,
    /// The bytes of bodies read and not yet parsed, a permit a byte
    /// ([`body::BODIES_AT_ONCE`] bodies of `--body-limit`).
    bodies: Arc<tokio::sync::Semaphore>,
    /// Responses kept for `previous_response_id` and `GET /v1/responses`.
    responses: Arc<responses::ResponseStore>,
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
/// The bound address is printed to stderr as `listening on http://ADDR`
/// (`https://` with TLS).
pub fn run(config: ServerConfig, lineup: models::Lineup) -> Result<(), ServeError> {
    allocator::return_large_blocks();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("hearth-http")
        .build()?;
    let result = runtime.block_on(serve(config, lineup));
    runtime.shutdown_timeout(Duration::from_secs(2));
    result
}

/// The response store at `log`, or in memory when there is none or it
/// cannot be read (said once: the server still serves).
fn open_responses(log: Option<&std::path::Path>) -> responses::ResponseStore {
    let Some(path) = log else {
        return responses::ResponseStore::in_memory();
    };
    responses::ResponseStore::open(path).unwrap_or_else(|e| {
        eprintln!(
            "hearth serve: stored responses kept in memory only ({}: {e})",
            path.display()
        );
        responses::ResponseStore::in_memory()
    })
}

/// The prompt-state store of `config`, said on stderr: its bounds and,
/// with a folder, the states found there. A folder that cannot be used (not
/// writable, not a folder) is said, and the states kept in RAM only: the
/// server still serves.
fn open_prompt_cache(config: &prompt_cache::CacheConfig) -> prompt_cache::PromptCache {
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    if let Some(dir) = &config.dir {
        match prompt_cache::PromptCache::open(config) {
            Ok(cache) => {
                eprintln!(
                    "hearth serve: prompt states kept in {:.0} MiB of RAM and {:.0} MiB in {} ({} found there)",
                    mib(config.ram_bytes),
                    mib(config.disk_bytes),
                    dir.display(),
                    cache.entries().len()
                );
                return cache;
            }
            Err(e) => eprintln!(
                "hearth serve: prompt states not kept in {} ({e}); kept in RAM only",
                dir.display()
            ),
        }
    }
    eprintln!(
        "hearth serve: prompt states kept in {:.0} MiB of RAM",
        mib(config.ram_bytes)
    );
    prompt_cache::PromptCache::in_ram(config.ram_bytes)
}

/// Start the server: load the lineup, bind, serve until a signal, the model
/// load failing or the idle limit, then drain the requests in flight and
/// flush what the last ones stored.
async fn serve(config: ServerConfig, lineup: models::Lineup) -> Result<(), ServeError> {
    let config = Arc::new(config);
    let metrics = Arc::new(Metrics::default());
    metrics
        .queue_capacity
        .store(config.queue as u64, Ordering::Relaxed);
    metrics
        .slots_total
        .store(config.parallel as u64, Ordering::Relaxed);
    let pinned = lineup.pinned;
    let cache = config
        .prompt_cache
        .as_ref()
        .map(|c| Arc::new(open_prompt_cache(c)));
    let models = Arc::new(models::Models::new(
        lineup,
        config.residency,
        config.parallel,
        config.queue,
        Arc::clone(&metrics),
        cache.clone(),
    ));
    let state = app_state(&config, &models, &metrics)?;

    // A certificate that cannot be used stops the server before it binds.
    let acceptor = config.tls.as_ref().map(tls::acceptor).transpose()?;
    let listener = tokio::net::TcpListener::bind((config.host.as_str(), config.port)).await?;
    let addr: SocketAddr = listener.local_addr()?;
    let scheme = if acceptor.is_some() { "https" } else { "http" };
    eprintln!("hearth serve: listening on {scheme}://{addr}");

    let loaded_rx = start_loading(&models, pinned)?;
    let app = routes::router(state.clone(), addr);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let server = tokio::spawn(accept_loop(listener, app, stop_rx, config.limits, acceptor));
    let load_failed = wait_for_stop(&state, loaded_rx).await;
    let _ = stop_tx.send(true);
    // No new jobs; running ones go on for now.
    models.shutdown(false);
    finish_requests(&models, server, config.shutdown_timeout).await?;
    models.join();
    // The responses the last requests stored reach the log, and their
    // prompts' states their files, before exit.
    state.responses.flush();
    if let Some(cache) = &cache {
        cache.flush();
    }
    match load_failed {
        Some(e) => Err(e),
        None => {
            eprintln!("hearth serve: stopped");
            Ok(())
        }
    }
}

/// The handlers' shared state: the limits' rate limiter, work pool and body
/// permits, and the response store (said on stderr when it cannot be read).
fn app_state(
    config: &Arc<ServerConfig>,
    models: &Arc<models::Models>,
    metrics: &Arc<Metrics>,
) -> Result<AppState, ServeError> {
    Ok(AppState {
        config: Arc::clone(config),
        models: Arc::clone(models),
        metrics: Arc::clone(metrics),
        activity: Arc::new(Activity::new(Instant::now())),
        rate: config
            .limits
            .per_minute
            .map(|n| Arc::new(RateLimiter::new(n))),
        work: Arc::new(work::WorkPool::new(
            config.limits.prep_threads,
            config.limits.prep_queue,
            config.limits.request_memory,
        )?),
        bodies: Arc::new(tokio::sync::Semaphore::new(
            body::BODIES_AT_ONCE
                .saturating_mul(config.limits.body_bytes)
                .min(tokio::sync::Semaphore::MAX_PERMITS),
        )),
        responses: Arc::new(open_responses(config.responses_log.as_deref())),
        created: api::now_secs(),
    })
}

/// Start loading the lineup: a pinned model loads on its own thread
/// (/health says 503 until it is done); models served on demand load on
/// their first request, and an idle check unloads them past their
/// keep-alive. The receiver hears how the pinned load ended (at once when
/// there is none).
fn start_loading(
    models: &Arc<models::Models>,
    pinned: bool,
) -> Result<tokio::sync::oneshot::Receiver<Result<(), ServeError>>, ServeError> {
    let (loaded_tx, loaded_rx) = tokio::sync::oneshot::channel::<Result<(), ServeError>>();
    if pinned {
        let models = Arc::clone(models);
        std::thread::Builder::new()
            .name("hearth-load".into())
            .spawn(move || {
                let loaded = models.load_pinned().map_err(|source| ServeError::Load {
                    model: models.first_id(),
                    source,
                });
                let _ = loaded_tx.send(loaded);
            })?;
    } else {
        let _ = loaded_tx.send(Ok(()));
        let models = Arc::clone(models);
        tokio::spawn(async move {
            let period = models.reap_period();
            loop {
                tokio::time::sleep(period).await;
                models.reap(Instant::now()).await;
            }
        });
    }
    Ok(loaded_rx)
}

/// Wait for a signal, for the model load to fail, or (once loaded) for the
/// idle limit; the load's error, if that is what ended the wait. Loading is
/// never idle time: the quiet period starts when the model is ready.
async fn wait_for_stop(
    state: &AppState,
    loaded_rx: tokio::sync::oneshot::Receiver<Result<(), ServeError>>,
) -> Option<ServeError> {
    let config = &state.config;
    let draining = || {
        eprintln!(
            "hearth serve: shutting down; waiting up to {:?} for requests in flight",
            config.shutdown_timeout
        )
    };
    tokio::select! {
        () = shutdown_signal() => {
            draining();
            None
        }
        res = loaded_rx => match res {
            Ok(Ok(())) => {
                state.activity.touch(Instant::now());
                tokio::select! {
                    () = shutdown_signal() => draining(),
                    idle = idle_exit(&state.activity, config.idle_exit) => {
                        eprintln!(
                            "hearth serve: idle for {:.1} s with no request in flight (--idle-exit {}); exiting",
                            idle.as_secs_f64(),
                            config.idle_exit.map_or(0.0, |d| d.as_secs_f64())
                        );
                    }
                }
                None
            }
            Ok(Err(e)) => Some(e),
            Err(_) => None,
        },
    }
}

/// Give the requests in flight `timeout` to finish as the accept loop
/// (`server`) winds down, then cancel the ones still running.
async fn finish_requests(
    models: &models::Models,
    mut server: tokio::task::JoinHandle<()>,
    timeout: Duration,
) -> Result<(), ServeError> {
    match tokio::time::timeout(timeout, &mut server).await {
        Ok(res) => {
            res.map_err(|e| std::io::Error::other(e.to_string()))?;
        }
        Err(_) => {
            eprintln!("hearth serve: requests still running after the timeout; cancelling them");
            models.shutdown(true);
            // Cancelled streams end at once; give them a moment to close.
            let _ = tokio::time::timeout(Duration::from_secs(2), &mut server).await;
        }
    }
    Ok(())
}

/// Accept connections until `stop`, serving each (over TLS when `tls` is
/// set) with hyper's HTTP/1 and a header-read timeout, at most
/// `limits.connections` at once; then ask every connection to close once
/// its in-flight request is answered and wait for them all. Every listener
/// Hearth opens goes through it (the server's, the Telegram webhook's); a
/// handler reads its body with [`read_body_within`].
pub async fn accept_loop(
    listener: tokio::net::TcpListener,
    app: Router,
    stop: tokio::sync::watch::Receiver<bool>,
    limits: Limits,
    tls: Option<tokio_rustls::TlsAcceptor>,
) {
    let header_timeout = limits.header_time;
    let open = Arc::new(tokio::sync::Semaphore::new(limits.connections.max(1)));
    // Each connection task holds a receiver; `closed()` tells when all ended.
    let (alive_tx, alive_rx) = tokio::sync::watch::channel(());
    let mut stopping = stop.clone();
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = async { stopping.wait_for(|s| *s).await.is_ok() } => break,
        };
        let (stream, peer) = match accepted {
            Ok(pair) => pair,
            Err(_) => {
                // Out of file descriptors and the like: back off a little.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let Ok(permit) = Arc::clone(&open).try_acquire_owned() else {
            tokio::spawn(refuse_connection(stream, limits.connections, tls.is_none()));
            continue;
        };
        let (app, stop, alive, tls) = (app.clone(), stop.clone(), alive_rx.clone(), tls.clone());
        tokio::spawn(async move {
            match tls {
                None => serve_connection(stream, app, peer, stop, header_timeout).await,
                Some(acceptor) => {
                    if let Some(secure) = tls::accept(&acceptor, stream, header_timeout).await {
                        serve_connection(secure, app, peer, stop, header_timeout).await;
                    }
                }
            }
            drop((alive, permit));
        });
    }
    drop(listener);
    drop(alive_rx);
    alive_tx.closed().await;
}

/// A connection past `--max-connections`: a 503 naming the limit (plain
/// HTTP only; a TLS client is simply closed), then close.
async fn refuse_connection(mut stream: tokio::net::TcpStream, limit: usize, plain: bool) {
    use tokio::io::AsyncWriteExt;
    if plain {
        let answer = limits::too_many_connections(limit);
        let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(&answer)).await;
        let _ = stream.shutdown().await;
    }
}

/// Serve one connection from `peer` until it ends, or until `stop`, when it
/// closes once its in-flight request is answered.
async fn serve_connection<I>(
    io: I,
    app: Router,
    peer: SocketAddr,
    mut stop: tokio::sync::watch::Receiver<bool>,
    header_timeout: Duration,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    use tower::ServiceExt as _;
    let app = app.map_request(move |req| limits::with_client(req, peer));
    let service = hyper_util::service::TowerToHyperService::new(app);
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_timeout)
        .serve_connection(hyper_util::rt::TokioIo::new(io), service);
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        _ = async { stop.wait_for(|s| *s).await.is_ok() } => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

/// Resolve after `limit` of idleness; never when `limit` is `None`.
async fn idle_exit(activity: &Activity, limit: Option<Duration>) -> Duration {
    match limit {
        Some(limit) => activity.wait_idle(limit).await,
        None => std::future::pending().await,
    }
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
