//! `hearth telegram`: flags to a [`bot::BotConfig`], the model loaded and
//! shared by every chat.

use crate::commands::{load_engine, report_session};
use crate::{ModelArgs, SampleArgs};
use anyhow::{bail, Context, Result};
use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// Flags of `hearth telegram`.
#[derive(clap::Args, Debug)]
pub struct TelegramArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    sample: SampleArgs,
    /// The environment variable holding the bot token (from @BotFather).
    #[arg(long, value_name = "VAR", default_value = "TELEGRAM_BOT_TOKEN")]
    token_env: String,
    /// The Bot API's base URL (a local Bot API server, or a test stand-in).
    #[arg(long, value_name = "URL")]
    api_url: Option<String>,
    /// Only these chat ids may talk to the bot (comma-separated); others get
    /// one polite line. Default: everyone.
    #[arg(
        long,
        value_name = "CHAT_ID,...",
        value_delimiter = ',',
        allow_hyphen_values = true
    )]
    allow: Vec<i64>,
    /// Where the bot keeps its memory, inbox and outbox (default:
    /// $XDG_STATE_HOME/hearth/telegram or ~/.local/state/hearth/telegram).
    #[arg(long, value_name = "DIR")]
    state: Option<PathBuf>,
    /// Guardrails: `all`, `none`, or a list (calc, logic, verify, persona,
    /// clean, qualifiers). Other than `none`, they are on in every chat
    /// until it says /guard off; with `none`, /guard on runs them all.
    #[arg(long, value_name = "GUARDS", default_value = "none")]
    guard: guard::GuardSet,
    /// Chats answered at once (decoded together in one batch).
    #[arg(long, default_value_t = 4)]
    parallel: usize,
    /// Most tokens of a reply.
    #[arg(short = 'n', long, default_value_t = 512)]
    max_tokens: usize,
    /// Messages a chat may send per minute (0: no limit); past it the chat
    /// is told once and the rest go unanswered.
    #[arg(long, default_value_t = 10)]
    rate_limit: usize,
    /// Webhook mode: the public HTTPS URL Telegram posts updates to (its
    /// path is the route served on --listen). Default: long polling.
    #[arg(long, value_name = "URL")]
    webhook_url: Option<String>,
    /// Where the webhook server listens (it also answers GET /health).
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:8080")]
    listen: SocketAddr,
    /// The environment variable holding the webhook's secret token (1–256
    /// of A-Z a-z 0-9 _ -); unset: a random one per start. A post without
    /// it is refused before its body is read.
    #[arg(long, value_name = "VAR", default_value = "TELEGRAM_WEBHOOK_SECRET")]
    webhook_secret_env: String,
    /// Webhook: largest update body in bytes (past it 413).
    #[arg(long, value_name = "BYTES", default_value_t = bot::webhook::DEFAULT_BODY_LIMIT)]
    body_limit: usize,
    /// Webhook: seconds a client has to send its request headers, and
    /// again its body (past them the connection is closed, or 408).
    #[arg(long, value_name = "SECS", default_value_t = 30.0)]
    read_timeout: f64,
    /// Webhook: connections open at once; past it a new one gets 503.
    #[arg(long, value_name = "N", default_value_t = bot::webhook::DEFAULT_CONNECTIONS)]
    max_connections: usize,
    /// Seconds a Bot API call may take before it is retried.
    #[arg(long, default_value_t = 20.0)]
    request_timeout: f64,
    /// Seconds after SIGTERM/SIGINT that answers in progress may take.
    #[arg(long, default_value_t = 20.0)]
    shutdown_timeout: f64,
}

fn secs(name: &str, v: f64) -> Result<Duration> {
    if !(v.is_finite() && v > 0.0 && v < 1e6) {
        bail!("--{name} must be a positive number of seconds");
    }
    Ok(Duration::from_secs_f64(v))
}

fn default_state_dir() -> Result<PathBuf> {
    if let Some(d) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(d).join("hearth/telegram"));
    }
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .context("cannot find a state directory: set --state DIR (or HOME)")?;
    Ok(PathBuf::from(home).join(".local/state/hearth/telegram"))
}

/// The webhook's secret from `$var`, or a random one when it is unset. A
/// variable set but empty (a blank line in a deployment's environment) is
/// refused, like an empty API key, rather than quietly replaced.
fn webhook_secret(var: &str) -> Result<String> {
    let secret = match std::env::var_os(var) {
        None => return Ok(bot::webhook::random_secret()),
        Some(v) => v.to_string_lossy().into_owned(),
    };
    let valid = (1..=256).contains(&secret.len())
        && secret
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !valid {
        bail!("${var} must be 1 to 256 characters of A-Z, a-z, 0-9, _ and - (unset it for a random secret per start)");
    }
    Ok(secret)
}

/// The webhook listener's bounds: `hearth serve`'s limits, from the flags
/// of the same names.
fn webhook_limits(args: &TelegramArgs) -> Result<server::Limits> {
    if args.body_limit == 0 || args.max_connections == 0 {
        bail!("--body-limit and --max-connections must be at least 1");
    }
    let read = secs("read-timeout", args.read_timeout)?;
    Ok(server::Limits {
        body_bytes: args.body_limit,
        header_time: read,
        body_time: read,
        connections: args.max_connections,
        ..server::Limits::default()
    })
}

/// Load the model and run the bot until a signal stops it.
pub fn run(args: &TelegramArgs) -> Result<ExitCode> {
    let token = std::env::var(&args.token_env).unwrap_or_default();
    if token.trim().is_empty() {
        bail!(
            "no bot token: ${} is unset or empty; put the token @BotFather gave you in it (or name another variable with --token-env)",
            args.token_env
        );
    }
    if args.parallel == 0 {
        bail!("--parallel must be at least 1");
    }
    if args.max_tokens == 0 {
        bail!("--max-tokens must be at least 1");
    }
    let state = match &args.state {
        Some(d) => d.clone(),
        None => default_state_dir()?,
    };
    let mode = match &args.webhook_url {
        None => bot::Mode::Polling,
        Some(url) => bot::Mode::Webhook {
            url: url.clone(),
            listen: args.listen,
            secret: webhook_secret(&args.webhook_secret_env)?,
            limits: webhook_limits(args)?,
        },
    };
    let path = store::resolve(&args.model.model)?;
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into());
    let engine = Arc::new(load_engine(&args.model, args.sample.params())?);
    report_session(&engine);
    let on_by_default = !args.guard.is_empty();
    let guards = if on_by_default {
        args.guard
    } else {
        guard::GuardSet::all()
    };
    let states = prompt_states(&engine, &path, &state);
    let brain = bot::EngineBrain::new(
        engine,
        args.parallel,
        states.clone(),
        args.max_tokens,
        guards,
        name,
    )
    .context("cannot start the decoding thread")?;
    let mut cfg = bot::BotConfig::new(token.trim().to_owned(), state);
    cfg.api_url = args.api_url.clone();
    cfg.allow =
        (!args.allow.is_empty()).then(|| args.allow.iter().copied().collect::<HashSet<_>>());
    cfg.behaviour.guard_default = on_by_default;
    cfg.rate_limit = args.rate_limit;
    cfg.mode = mode;
    cfg.request_timeout = secs("request-timeout", args.request_timeout)?;
    cfg.drain = secs("shutdown-timeout", args.shutdown_timeout)?;
    cfg.concurrency = args.parallel;
    bot::run_until_signal(cfg, Arc::new(brain))?;
    // The last answers' prompt states reach their files before exit.
    if let Some(states) = states {
        states.flush();
    }
    Ok(ExitCode::SUCCESS)
}

/// The chats' prompt states, kept in `prompt-cache` in the bot's state
/// folder (RAM and disk at `serve`'s defaults), so a chat's next message is
/// not prefilled again after a restart; `None`, said, when the folder
/// cannot be used.
fn prompt_states(
    engine: &engine::Engine,
    model: &std::path::Path,
    state: &std::path::Path,
) -> Option<Arc<dyn engine::PromptStore>> {
    let dir = state.join("prompt-cache");
    let opened = prompt_cache::PromptCache::open(&prompt_cache::CacheConfig {
        ram_bytes: prompt_cache::default_ram_bytes(),
        dir: Some(dir.clone()),
        disk_bytes: prompt_cache::DEFAULT_DISK_BYTES,
    })
    .and_then(|cache| {
        let ns = prompt_cache::model_namespace(engine, model, engine.options().mmproj.as_deref())?;
        Ok(prompt_cache::ScopedCache {
            cache: Arc::new(cache),
            ns,
        })
    });
    match opened {
        Ok(scoped) => Some(Arc::new(scoped)),
        Err(e) => {
            eprintln!(
                "hearth telegram: chats' prompt states not kept in {} ({e})",
                dir.display()
            );
            None
        }
    }
}
