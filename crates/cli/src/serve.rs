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
    /// Require `Authorization: Bearer KEY` on /v1/* (also read from
    /// HEARTH_API_KEY); several keys separated by commas, each a caller of
    /// its own (its prompt states reused by it alone, see --cache-shared).
    #[arg(
        long,
        value_name = "KEY[,KEY]",
        env = "HEARTH_API_KEY",
        hide_env_values = true
    )]
    api_key: Option<String>,
    /// Bytes of prompt states kept in RAM beyond the slots, so a
    /// conversation's next turn is not prefilled again after another took
    /// its slot (or its model was unloaded): bytes or 512M, 8G; 0 turns the
    /// store off. Default: an eighth of the memory available, at most 2G.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    cache_ram: Option<u64>,
    /// Also keep prompt states in files in DIR, written after each turn, so
    /// they outlive a restart or a scale to zero (also HEARTH_CACHE_DIR;
    /// with no DIR, prompt-cache in the Hearth home, where `hearth cache`
    /// looks).
    #[arg(long, value_name = "DIR", env = "HEARTH_CACHE_DIR", num_args = 0..=1)]
    cache_dir: Option<Option<std::path::PathBuf>>,
    /// Bytes of state files --cache-dir keeps (the least recently used go).
    #[arg(long, value_name = "SIZE", default_value = "4G", value_parser = parse_size)]
    cache_disk: u64,
    /// Let every API key reuse every key's prompt states (by default a state
    /// serves only requests with the key that left it).
    #[arg(long)]
    cache_shared: bool,
    /// Folder where `POST /slots/{id}?action=save|restore` (llama.cpp's slot
    /// files) write and read a slot's prompt state by name; created if
    /// missing. Without it those actions answer 501.
    #[arg(long, value_name = "DIR")]
    slot_save_path: Option<std::path::PathBuf>,
    /// Bytes of files --slot-save-path may hold: a save that would pass it
    /// is refused (507).
    #[arg(long, value_name = "SIZE", default_value = "4G", value_parser = parse_size)]
    slot_save_disk: u64,
    /// Let browser pages from these origins call the server (`*` for any;
    /// off by default: a request from another origin gets 403).
    #[arg(long, num_args = 1..)]
    cors: Vec<String>,
    /// Host names the server answers to, besides localhost, *.localhost and
    /// IP addresses (`*.NAME` for subdomains, `*` for any). Bound to
    /// loopback, other names get 403 (DNS rebinding); bound elsewhere, every
    /// name is answered unless this lists them.
    #[arg(long, value_name = "NAME[,NAME]", num_args = 1.., value_delimiter = ',')]
    allowed_hosts: Vec<String>,
    /// What a chat does when it outgrows the context: `truncate` drops its
    /// oldest turns (keeping the system prompt and the latest turn), `error`
    /// answers 400. Raw completions are never truncated.
    #[arg(long, value_enum, default_value_t = Overflow::Truncate)]
    context_overflow: Overflow,
    /// What one client and one request may ask of the server.
    #[command(flatten)]
    limits: LimitArgs,
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
    /// Lay out /infill's fill-in-the-middle prompts suffix first (the
    /// suffix part before the prefix part), as llama.cpp's --spm-infill,
    /// for models trained that way.
    #[arg(long)]
    spm_infill: bool,
    /// Let clients pull models with POST /api/pull (off: 403). A client may
    /// name a known alias or hf:OWNER/REPO/FILE.gguf, never a local path;
    /// the download runs as this server's user, with its network, pip and
    /// HF_TOKEN (so clients reach the gated or private files the token
    /// does), into the model cache that --models serves.
    #[arg(long)]
    allow_pull: bool,
    /// Serve many models, each loaded on its first request: folders (every
    /// GGUF and checkpoint in them; a projector `mmproj*.gguf` pairs with
    /// the models beside it), files or aliases. With no value: the model
    /// cache. Without --models, the one model of -m is loaded at start.
    #[arg(long, value_name = "DIR|MODEL", num_args = 0.., conflicts_with_all = ["model", "mmproj"])]
    models: Option<Vec<String>>,
    /// With --models: most models in memory at once; the least recently
    /// used is unloaded to make room.
    #[arg(long, value_name = "N", default_value_t = 3, requires = "models")]
    max_loaded: usize,
    /// With --models: most memory the loaded models may take (files and
    /// caches), as bytes or with a unit: 512M, 8G.
    #[arg(long, value_name = "SIZE", requires = "models", value_parser = parse_size)]
    max_memory: Option<u64>,
    /// With --models: how long a model stays loaded after its last request
    /// (seconds or 30s, 5m, 1h; negative: for ever). A request's own
    /// `keep_alive` (Ollama's) overrides it.
    #[arg(
        long,
        value_name = "TIME",
        default_value = "5m",
        requires = "models",
        allow_hyphen_values = true
    )]
    keep_alive: String,
    /// Do not serve the chat page at `/`.
    #[arg(long)]
    no_ui: bool,
    /// Answer /health and /metrics without the API key (for a platform's
    /// probes, which cannot send one; also HEARTH_PUBLIC_HEALTH=1).
    #[arg(long, env = "HEARTH_PUBLIC_HEALTH")]
    public_health: bool,
    /// Serve HTTPS with this certificate chain (PEM), for a port exposed
    /// without a proxy; needs --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
}

/// The bounds on a client's requests; each refusal names its flag.
#[derive(clap::Args, Debug, Clone)]
pub struct LimitArgs {
    /// Largest request body in bytes (default 32 MiB: a 2048x2048 PNG and
    /// a 30 s clip, as base64, in one request).
    #[arg(long, value_name = "BYTES", default_value_t = server::DEFAULT_BODY_LIMIT)]
    body_limit: usize,
    /// Seconds a client has to send its request headers, and again its body.
    #[arg(long, value_name = "SECS", default_value_t = 30.0)]
    read_timeout: f64,
    /// Connections open at once; past it a new connection gets 503.
    #[arg(long, value_name = "N", default_value_t = server::Limits::default().connections)]
    max_connections: usize,
    /// Requests a minute from one client address; past it 429 with
    /// Retry-After (off by default).
    #[arg(long, value_name = "N")]
    rate_limit: Option<u32>,
    /// Images one request may carry.
    #[arg(long, value_name = "N", default_value_t = server::Limits::default().images)]
    max_images: usize,
    /// Audio clips one request may carry.
    #[arg(long, value_name = "N", default_value_t = server::Limits::default().clips)]
    max_clips: usize,
    /// Most pixels of one image (width x height), read from its header
    /// before it is decoded (default: 50 million, a 48-megapixel photo).
    #[arg(long, value_name = "N", default_value_t = engine::InputLimits::default().image_pixels)]
    max_image_pixels: u64,
    /// Longest audio clip in seconds (the model hears its first 30 s).
    #[arg(long, value_name = "SECS", default_value_t = engine::InputLimits::default().clip_seconds)]
    max_clip_seconds: u32,
    /// Largest grammar, regex or JSON Schema in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = engine::InputLimits::default().grammar_bytes)]
    max_grammar_bytes: usize,
    /// Most steps a model's chat template may take to render one request.
    #[arg(long, value_name = "N", default_value_t = engine::InputLimits::default().template_steps)]
    max_template_steps: u64,
    /// Memory one request may take to be read: its JSON parsed, its prompt
    /// tokenized, its images and clips decoded (worked out from their
    /// headers first), its answer written; as bytes or with a unit: 256M,
    /// 1G. Past it a request gets 413.
    #[arg(long, value_name = "SIZE", default_value = "256M", value_parser = parse_size)]
    request_memory: u64,
    /// Threads that parse large bodies, render templates, tokenize,
    /// compile grammars and decode media, off the HTTP threads (default:
    /// one per core, at least 2).
    #[arg(long, value_name = "N")]
    prep_threads: Option<usize>,
    /// Requests that may wait for those threads (default: 4 per thread);
    /// past it a request gets 503 with Retry-After.
    #[arg(long, value_name = "N")]
    prep_queue: Option<usize>,
}

impl LimitArgs {
    /// The server's limits and the engine's, refusing zeros.
    fn resolve(&self) -> Result<(server::Limits, engine::InputLimits)> {
        for (name, v) in [
            ("body-limit", self.body_limit as u64),
            ("max-connections", self.max_connections as u64),
            ("rate-limit", self.rate_limit.map_or(1, u64::from)),
            ("max-image-pixels", self.max_image_pixels),
            ("max-clip-seconds", u64::from(self.max_clip_seconds)),
            ("max-grammar-bytes", self.max_grammar_bytes as u64),
            ("max-template-steps", self.max_template_steps),
            ("request-memory", self.request_memory),
            ("prep-threads", self.prep_threads.map_or(1, |n| n as u64)),
        ] {
            if v == 0 {
                bail!("--{name} must be at least 1");
            }
        }
        let read = secs("read-timeout", self.read_timeout)?;
        let prep_threads = self
            .prep_threads
            .unwrap_or_else(server::default_prep_threads);
        let server = server::Limits {
            body_bytes: self.body_limit,
            header_time: read,
            body_time: read,
            connections: self.max_connections,
            per_minute: self.rate_limit,
            images: self.max_images,
            clips: self.max_clips,
            request_memory: usize::try_from(self.request_memory).unwrap_or(usize::MAX),
            prep_threads,
            prep_queue: self.prep_queue.unwrap_or(4 * prep_threads),
        };
        let engine = engine::InputLimits {
            grammar_bytes: self.max_grammar_bytes,
            template_steps: self.max_template_steps,
            image_pixels: self.max_image_pixels,
            clip_seconds: self.max_clip_seconds,
            decode_bytes: self.request_memory,
        };
        Ok((server, engine))
    }
}

/// `512M`, `8G`, `1.5GiB` or plain bytes.
fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let n: f64 = t[..split]
        .parse()
        .map_err(|_| format!("`{s}` is not a size (try 512M or 8G)"))?;
    let scale = match t[split..].trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1u64,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        other => return Err(format!("unknown size unit `{other}` (use K, M, G or T)")),
    };
    Ok((n * scale as f64) as u64)
}

fn secs(name: &str, v: f64) -> Result<Duration> {
    if !(v.is_finite() && v > 0.0) {
        bail!("--{name} must be a positive number of seconds");
    }
    Ok(Duration::from_secs_f64(v))
}

/// The keys of `--api-key` or `HEARTH_API_KEY` (comma-separated). A blank
/// one (a blank variable in a deployment's environment, a stray comma) is
/// refused rather than taken to mean "no key", which would open a server
/// its operator meant to lock.
fn api_keys(flag: Option<&str>) -> Result<Vec<String>> {
    // clap may take a blank variable for "not given": look at it here too.
    let given = flag
        .map(str::to_owned)
        .or_else(|| std::env::var_os("HEARTH_API_KEY").map(|v| v.to_string_lossy().into_owned()));
    let Some(given) = given else {
        return Ok(Vec::new());
    };
    let keys: Vec<String> = given.split(',').map(|k| k.trim().to_owned()).collect();
    if keys.iter().any(String::is_empty) {
        bail!(
            "an API key is empty (--api-key or HEARTH_API_KEY): give keys, or leave both unset to serve without one"
        );
    }
    Ok(keys)
}

/// The prompt-state store `--cache-ram`, `--cache-dir` and `--cache-disk`
/// ask for (`None` with `--cache-ram 0` and no folder).
fn prompt_cache(args: &ServeArgs) -> Option<prompt_cache::CacheConfig> {
    let ram_bytes = args
        .cache_ram
        .unwrap_or_else(prompt_cache::default_ram_bytes);
    let dir = args.cache_dir.as_ref().map(|d| {
        d.clone()
            .unwrap_or_else(|| store::home().join("prompt-cache"))
    });
    if ram_bytes == 0 && dir.is_none() {
        return None;
    }
    Some(prompt_cache::CacheConfig {
        ram_bytes,
        dir,
        disk_bytes: args.cache_disk,
    })
}

/// Resolve the model and run the server until a signal stops it.
pub fn run(args: &ServeArgs) -> Result<ExitCode> {
    if args.parallel == 0 {
        bail!("--parallel must be at least 1");
    }
    let mut config = server::ServerConfig::new();
    // A seed given to serve is the seed of requests without one; without it
    // each request draws its own.
    config.seed = args.sample.seed;
    let mut options = args.model.resolved_options(args.sample.params())?;
    options.validate()?;
    // A request (or the server's start) waits for each load: the decode
    // layout is made after it, in the background.
    options.layout = engine::LayoutTiming::AfterLoad;
    (config.limits, options.limits) = args.limits.resolve()?;
    configure(&mut config, args)?;
    let lineup = models_to_serve(&mut config, args, options)?;
    server::run(config, lineup).context("hearth serve")?;
    Ok(ExitCode::SUCCESS)
}

/// Sets what the flags say about serving: where and to whom, the caches,
/// the time limits and the optional features.
fn configure(config: &mut server::ServerConfig, args: &ServeArgs) -> Result<()> {
    config.public_health = args.public_health;
    config.host = args.host.clone();
    config.port = args.port;
    config.parallel = args.parallel;
    config.queue = args.queue.unwrap_or(4 * args.parallel);
    config.api_keys = api_keys(args.api_key.as_deref())?;
    config.prompt_cache = prompt_cache(args);
    config.cache_shared = args.cache_shared;
    if let Some(dir) = &args.slot_save_path {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("--slot-save-path {}", dir.display()))?;
        config.slot_save_path = Some(dir.clone());
        config.slot_save_bytes = args.slot_save_disk;
    }
    config.cors = args.cors.clone();
    config.allowed_hosts = args.allowed_hosts.clone();
    config.context_overflow = match args.context_overflow {
        Overflow::Truncate => server::truncate::Overflow::Truncate,
        Overflow::Error => server::truncate::Overflow::Error,
    };
    configure_times(config, args)?;
    config.guard = args.guard;
    config.allow_file_images = args.allow_file_images;
    config.infill_layout.suffix_first = args.spm_infill;
    config.allow_pull = args.allow_pull;
    // Stored responses live beside the models, so they survive a restart.
    config.responses_log = Some(store::home().join("responses.jsonl"));
    config.ui = !args.no_ui;
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        config.tls = Some(server::tls::TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
        });
    }
    Ok(())
}

/// The time limits: of a request, of the shutdown, and of idleness.
fn configure_times(config: &mut server::ServerConfig, args: &ServeArgs) -> Result<()> {
    config.request_timeout = secs("request-timeout", args.request_timeout)?;
    config.max_request_time = if args.max_request_secs == 0.0 {
        None
    } else {
        Some(secs("max-request-secs", args.max_request_secs)?)
    };
    config.shutdown_timeout = secs("shutdown-timeout", args.shutdown_timeout)?;
    config.idle_exit = match args.idle_exit {
        None => None,
        Some(0.0) => None,
        Some(v) => Some(secs("idle-exit", v)?),
    };
    config.idle_counts_probes = args.idle_count_probes;
    Ok(())
}

/// The models served and how they load: the one of `-m`, pinned, or those
/// of `--models` (rescanned on request, loaded and unloaded as the
/// residency limits set here allow).
fn models_to_serve(
    config: &mut server::ServerConfig,
    args: &ServeArgs,
    options: engine::RunOptions,
) -> Result<server::models::Lineup> {
    let pinned = args.models.is_none();
    let mut rescan: Option<server::models::RescanFn> = None;
    let models = match &args.models {
        Some(specs) => {
            config.residency = server::models::Residency {
                max_loaded: args.max_loaded.max(1),
                max_memory: args.max_memory,
                keep_alive: keep_alive(&args.keep_alive)?,
            };
            let again = specs.clone();
            rescan = Some(std::sync::Arc::new(move || {
                lineup(&again).unwrap_or_default()
            }));
            lineup(specs)?
        }
        None => vec![single(&args.model.model, options.mmproj.clone())?],
    };
    let sampling = options.sampling.clone();
    let speculation = args
        .sample
        .unpaired_speculation(options.threads, options.ctx)?;
    // The same loader as every other command: --quant, --precise, --ctx
    // and the rest mean what they mean there; a projector found beside a
    // model is its --mmproj.
    let load: server::models::LoadFn =
        std::sync::Arc::new(move |m: &server::models::ServedModel| {
            let mut o = options.clone();
            if m.mmproj.is_some() {
                o.mmproj = m.mmproj.clone();
            }
            engine::Engine::load(&m.path, &o)
        });
    Ok(server::models::Lineup {
        models,
        load,
        pinned,
        sampling,
        speculation,
        rescan,
    })
}

/// The one model of `-m`, with the names it answers to: what -m named
/// (alias or file stem), the file's stem and name, and its path.
fn single(spec: &str, mmproj: Option<std::path::PathBuf>) -> Result<server::models::ServedModel> {
    let path = store::resolve(spec)?;
    let spec = spec.trim().to_string();
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into());
    let mut names = Vec::new();
    if !std::path::Path::new(&spec).exists() {
        names.push(spec.clone());
    }
    names.push(stem);
    names.push(spec);
    if let Some(name) = path.file_name() {
        names.push(name.to_string_lossy().into_owned());
    }
    names.push(path.display().to_string());
    let mut seen = std::collections::HashSet::new();
    names.retain(|n| seen.insert(n.clone()));
    Ok(server::models::ServedModel {
        towers: engine::towers(&path, mmproj.as_deref()),
        names,
        path,
        mmproj,
    })
}

/// The models of `--models`: each folder scanned (a checkpoint folder is one
/// model), each file or alias resolved; the cache when none is given.
fn lineup(specs: &[String]) -> Result<Vec<server::models::ServedModel>> {
    let store = store::Store::open_default();
    let default = [store.models_dir().display().to_string()];
    let specs = if specs.is_empty() {
        &default[..]
    } else {
        specs
    };
    let mut models: Vec<server::models::ServedModel> = Vec::new();
    for spec in specs {
        let dir = std::path::Path::new(spec);
        if dir.is_dir() && !store::catalog::is_checkpoint(dir) {
            let found = store::catalog::scan(dir, store.registry())
                .with_context(|| format!("cannot read {}", dir.display()))?;
            models.extend(found.into_iter().map(|f| server::models::ServedModel {
                towers: engine::towers(&f.path, f.mmproj.as_deref()),
                names: f.names,
                path: f.path,
                mmproj: f.mmproj,
            }));
        } else {
            models.push(single(spec, None)?);
        }
    }
    let mut paths = std::collections::HashSet::new();
    models.retain(|m| paths.insert(m.path.clone()));
    if models.is_empty() {
        bail!(
            "no models found in {}: pull one (`hearth pull gemma3-270m`) or name files and folders after --models",
            specs.join(", ")
        );
    }
    Ok(models)
}

/// `--keep-alive`: seconds or a duration (30s, 5m, 1h30m); negative for
/// ever (`None`), read as Ollama's per-request `keep_alive` is.
fn keep_alive(s: &str) -> Result<Option<Duration>> {
    match server::models::parse_keep_alive(s) {
        Some(keep) => Ok(keep),
        None => bail!("--keep-alive must be seconds or a time such as 30s, 5m or 1h, not `{s}`"),
    }
}
