//! What a server serves: the models, how each is loaded, how the folders
//! are searched again, and how long models stay in memory.

use engine::{Engine, EngineError, SamplingParams};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// One model the server can serve.
#[derive(Debug, Clone)]
pub struct ServedModel {
    /// The names requests may give it; the first is its id.
    pub names: Vec<String>,
    /// Its GGUF file or checkpoint folder.
    pub path: PathBuf,
    /// The projector with its vision (and audio) towers, if any.
    pub mmproj: Option<PathBuf>,
    /// What it can take besides text, as its files say before it is loaded.
    pub towers: engine::Towers,
}

impl ServedModel {
    /// The id listings report.
    pub fn id(&self) -> &str {
        self.names.first().map_or("model", String::as_str)
    }

    /// Bytes on disk: the file (or the folder's files) and the projector.
    pub fn disk_bytes(&self) -> u64 {
        let size = |p: &std::path::Path| match std::fs::read_dir(p) {
            Ok(entries) => entries
                .flatten()
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum(),
            Err(_) => std::fs::metadata(p).map_or(0, |m| m.len()),
        };
        size(&self.path) + self.mmproj.as_deref().map_or(0, size)
    }
}

/// Loads a served model's engine (on a blocking thread).
pub type LoadFn = Arc<dyn Fn(&ServedModel) -> Result<Engine, EngineError> + Send + Sync>;

/// What a server serves and how it loads each model.
#[derive(Clone)]
pub struct Lineup {
    /// The models, in listing order.
    pub models: Vec<ServedModel>,
    /// How one is loaded (the same options for all: threads, context, …).
    pub load: LoadFn,
    /// One model given with `-m`: loaded at start and never unloaded.
    pub pinned: bool,
    /// The sampling defaults of requests that set none.
    pub sampling: SamplingParams,
    /// Speculative decoding for requests that do not turn it off
    /// (`speculative.n_max: 0`); `None`: only for requests that ask. A draft
    /// model drafts for the models whose vocabulary it shares.
    pub speculation: Option<engine::Speculation>,
    /// Looks for models again (`--models` folders): what it finds that is
    /// not listed yet is added, so a model pulled while the server runs is
    /// served without a restart.
    pub rescan: Option<RescanFn>,
}

/// Lists the models of the server's folders again (on a blocking thread).
pub type RescanFn = Arc<dyn Fn() -> Vec<ServedModel> + Send + Sync>;

/// How many models stay in memory, and for how long.
#[derive(Debug, Clone, Copy)]
pub struct Residency {
    /// Most models in memory at once.
    pub max_loaded: usize,
    /// Most bytes the loaded models may take (files and caches), if set.
    pub max_memory: Option<u64>,
    /// How long an idle model stays (`None`: for ever).
    pub keep_alive: Option<Duration>,
}

impl Default for Residency {
    fn default() -> Self {
        Self {
            max_loaded: 3,
            max_memory: None,
            keep_alive: Some(Duration::from_secs(300)),
        }
    }
}

/// A keep-alive as Ollama and `--keep-alive` write it: seconds or a Go
/// duration (`"10m"`, `"1h30m"`, `"250ms"`); negative keeps the model for
/// ever (`Some(None)`). `None` when the text is neither.
pub fn parse_keep_alive(s: &str) -> Option<Option<Duration>> {
    go_duration(s.trim()).and_then(keep_alive_of_secs)
}

/// A keep-alive of `secs` seconds: negative is for ever (`Some(None)`);
/// not finite is no keep-alive at all (`None`).
pub(crate) fn keep_alive_of_secs(secs: f64) -> Option<Option<Duration>> {
    if !secs.is_finite() {
        return None;
    }
    Some((secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(1e9))))
}

/// Seconds in a Go duration string (`"1h30m"`, `"-1"`, `"250ms"`); a bare
/// number is seconds.
fn go_duration(s: &str) -> Option<f64> {
    if let Ok(n) = s.parse::<f64>() {
        return Some(n);
    }
    let (sign, mut rest) = match s.strip_prefix('-') {
        Some(r) => (-1.0, r),
        None => (1.0, s),
    };
    let mut total = 0.0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let n: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        total += n * scale;
        rest = &rest[unit_len..];
    }
    Some(sign * total)
}
