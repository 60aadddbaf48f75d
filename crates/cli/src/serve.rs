//! `hearth serve`: flags to a [`server::ServerConfig`].

use crate::{ModelArgs, SampleArgs};
use anyhow::{bail, Context, Result};
use std::process::ExitCode;
use std::time::Duration;

/// `--context-overflow`.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum Overflow {
    /// Drop the oldest turns.
    Truncate,
    /// Refuse with 400.
    Error,
}

/// Flags of `hearth serve`.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Defaults for requests that set no sampling of their own.
    #[command(flatten)]
    sample: SampleArgs,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on (0 picks a free one; the address is printed).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Sequences generated at once (each keeps its own KV cache).
    #[arg(long, default_value_t = 1)]
    parallel: usize,
    /// Requests that may wait for a free sequence (default: 4 per sequence);
    /// more get 429 with Retry-After.
    #[arg(long)]
    queue: Option<usize>,
    /// Require `Authorization: Bearer KEY` on /v1/* (also read from HEARTH_API_KEY).
    #[arg(long, env = "HEARTH_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Let browser pages from these origins call the server (`*` for any;
    /// off by default).
    #[arg(long, num_args = 1..)]
    cors: Vec<String>,
    /// What a chat does when it outgrows the context: `truncate` drops its
    /// oldest turns (keeping the system prompt and the latest turn), `error`
    /// answers 400. Raw completions are never truncated.
    #[arg(long, value_enum, default_value_t = Overflow::Truncate)]
    context_overflow: Overflow,
    /// Largest request body in bytes (default 20 MiB: a phone photo or a
    /// 30 s clip as base64).
    #[arg(long, default_value_t = server::DEFAULT_BODY_LIMIT)]
    body_limit: usize,
    /// Seconds a client has to send its request headers, and again its body.
    #[arg(long, default_value_t = 30.0)]
    read_timeout: f64,
    /// Seconds a non-streaming request may take in all before it gets 504
    /// (a backstop behind --max-request-secs).
    #[arg(long, default_value_t = 600.0)]
    request_timeout: f64,
    /// Seconds any request may take, streamed or not, from its arrival: its
    /// generation then ends with finish_reason "length" (0: no limit).
    #[arg(long, default_value_t = 300.0)]
    max_request_secs: f64,
    /// Seconds in-flight requests may take to finish after SIGTERM/SIGINT.
    #[arg(long, default_value_t = 10.0)]
    shutdown_timeout: f64,
    /// Guardrails for chat requests that do not set Hearth's `guard`
    /// field: `all`, `none`, or a list of calc, logic, verify, persona,
    /// clean, qualifiers.
    #[arg(long, value_name = "GUARDS", default_value = "none")]
    guard: guard::GuardSet,
    /// Exit with status 0 after SECS seconds with no request in flight and
    /// none arriving, counted from when the model is loaded (scale to zero;
    /// 0: never). /health and /metrics do not count as requests, so health
    /// checks do not keep the server awake (see --idle-count-probes).
    #[arg(long, value_name = "SECS", env = "HEARTH_IDLE_EXIT")]
    idle_exit: Option<f64>,
    /// Count /health and /metrics requests as activity for --idle-exit.
    #[arg(long, requires = "idle_exit")]
    idle_count_probes: bool,
    /// Let chat image parts name local files (`file:///...` URLs); without
    /// it only inline `data:` URLs are read.
    #[arg(long)]
    allow_file_images: bool,
}

fn secs(name: &str, v: f64) -> Result<Duration> {
    if !(v.is_finite() && v > 0.0) {
        bail!("--{name} must be a positive number of seconds");
    }
    Ok(Duration::from_secs_f64(v))
}

/// Resolve the model and run the server until a signal stops it.
pub fn run(args: &ServeArgs) -> Result<ExitCode> {
    if args.parallel == 0 {
        bail!("--parallel must be at least 1");
    }
    let path = store::resolve(&args.model.model)?;
    // The id is what -m named (alias or file stem); the others resolve to it.
    let spec = args.model.model.trim().to_string();
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into());
    let mut ids = Vec::new();
    if std::path::Path::new(&spec).exists() {
        ids.push(stem.clone());
    } else {
        ids.push(spec.clone());
        ids.push(stem.clone());
    }
    ids.push(spec);
    if let Some(name) = path.file_name() {
        ids.push(name.to_string_lossy().into_owned());
    }
    ids.push(path.display().to_string());
    ids.dedup();
    let mut config = server::ServerConfig::new(stem);
    config.model_ids = ids;
    config.model_path = Some(path.clone());
    // A seed given to serve is the seed of requests without one; without it
    // each request draws its own.
    config.seed = args.sample.seed;
    let options = args.model.resolved_options(args.sample.params())?;
    options.validate()?;
    config.host = args.host.clone();
    config.port = args.port;
    config.parallel = args.parallel;
    config.queue = args.queue.unwrap_or(4 * args.parallel);
    config.api_key = args.api_key.clone().filter(|k| !k.is_empty());
    config.body_limit = args.body_limit;
    config.cors = args.cors.clone();
    config.context_overflow = match args.context_overflow {
        Overflow::Truncate => server::truncate::Overflow::Truncate,
        Overflow::Error => server::truncate::Overflow::Error,
    };
    config.header_timeout = secs("read-timeout", args.read_timeout)?;
    config.body_timeout = config.header_timeout;
    config.request_timeout = secs("request-timeout", args.request_timeout)?;
    config.max_request_time = if args.max_request_secs == 0.0 {
        None
    } else {
        Some(secs("max-request-secs", args.max_request_secs)?)
    };
    config.shutdown_timeout = secs("shutdown-timeout", args.shutdown_timeout)?;
    config.guard = args.guard;
    config.idle_exit = match args.idle_exit {
        None => None,
        Some(0.0) => None,
        Some(v) => Some(secs("idle-exit", v)?),
    };
    config.idle_counts_probes = args.idle_count_probes;
    config.allow_file_images = args.allow_file_images;
    // The same loader as every other command: --quant, --precise, --ctx
    // and the rest mean what they mean there.
    let loader: server::Loader = Box::new(move || engine::Engine::load(&path, &options));
    server::run(config, loader).context("hearth serve")?;
    Ok(ExitCode::SUCCESS)
}
