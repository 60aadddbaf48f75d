//! Pulling `hf:OWNER/REPO[@REVISION]/FILE` from the Hugging Face Hub through `hf-hub`.
//!
//! Files go into hf-hub's own cache layout under `models/hf/` (`models--OWNER--REPO/blobs`,
//! `snapshots/COMMIT/FILE`, `refs/REVISION`), so a cached file is found again without the
//! network and the layout is the one Hub tooling knows.

use std::path::{Path, PathBuf};

use hf_hub::api::sync::{ApiBuilder, ApiError};
use hf_hub::{Cache, Repo, RepoType};
use indicatif::{ProgressBar, ProgressStyle};

use crate::{verify, PullOptions, StoreError};

/// The prefix that marks a Hub spec.
pub(crate) const PREFIX: &str = "hf:";

/// A file on the Hub: `OWNER/REPO`, a revision (branch, tag or commit) and a path in the repo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubSpec {
    /// `OWNER/REPO`.
    pub repo: String,
    /// Branch, tag or commit; `main` unless given with `@`.
    pub revision: String,
    /// Path of the file inside the repo.
    pub file: String,
}

impl HubSpec {
    /// Parses the text after `hf:`: `OWNER/REPO/FILE` or `OWNER/REPO@REVISION/FILE`.
    pub fn parse(rest: &str) -> Result<Self, StoreError> {
        let bad = |reason: &str| StoreError::BadHubSpec {
            spec: rest.to_string(),
            reason: reason.to_string(),
        };
        let mut parts = rest.splitn(3, '/');
        let (Some(owner), Some(repo_rev), Some(file)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(bad("it needs an owner, a repo and a file"));
        };
        let (repo, revision) = match repo_rev.split_once('@') {
            Some((r, rev)) => (r, rev),
            None => (repo_rev, "main"),
        };
        if owner.is_empty() || repo.is_empty() {
            return Err(bad("owner and repo must not be empty"));
        }
        if revision.is_empty() || revision.contains('@') {
            return Err(bad("the revision after @ must be one non-empty name"));
        }
        // The file name becomes a path in our cache: refuse anything that could climb out of it.
        if file.is_empty()
            || file.starts_with('/')
            || file.ends_with('/')
            || file
                .split('/')
                .any(|c| c.is_empty() || c == "." || c == "..")
        {
            return Err(bad("the file must be a plain path inside the repo"));
        }
        let valid = |s: &str| {
            s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        };
        if !valid(owner) || !valid(repo) || !valid(revision) {
            return Err(bad(
                "owner, repo and revision may hold only letters, digits, '-', '_' and '.'",
            ));
        }
        Ok(Self {
            repo: format!("{owner}/{repo}"),
            revision: revision.to_string(),
            file: file.to_string(),
        })
    }

    fn hf_repo(&self) -> Repo {
        Repo::with_revision(self.repo.clone(), RepoType::Model, self.revision.clone())
    }
}

impl std::fmt::Display for HubSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.revision == "main" {
            write!(f, "{PREFIX}{}/{}", self.repo, self.file)
        } else {
            write!(f, "{PREFIX}{}@{}/{}", self.repo, self.revision, self.file)
        }
    }
}

/// The cached copy of `spec`, if a previous pull left one.
pub(crate) fn cached(cache_dir: &Path, spec: &HubSpec) -> Option<PathBuf> {
    Cache::new(cache_dir.to_path_buf())
        .repo(spec.hf_repo())
        .get(&spec.file)
        .filter(|p| p.is_file())
}

/// Downloads `spec` into `cache_dir` unless it is already there.
pub(crate) fn pull(
    cache_dir: &Path,
    spec: &HubSpec,
    opts: &PullOptions,
) -> Result<PathBuf, StoreError> {
    // Checked before building a client so that a cached file costs no network at all
    // (hf-hub's `download` would ask the Hub for metadata every time).
    if let Some(p) = cached(cache_dir, spec) {
        return Ok(p);
    }
    let endpoint = opts.hub_endpoint();
    let api = ApiBuilder::from_cache(Cache::new(cache_dir.to_path_buf()))
        .with_endpoint(endpoint.clone())
        // Always set, so a stray token file in our cache folder is never sent.
        .with_token(opts.hub_token())
        .with_progress(false)
        // Retries resume with a Range request, so a flaky link does not restart a big file.
        .with_retries(3)
        .with_user_agent("hearth", env!("CARGO_PKG_VERSION"))
        .build()
        .map_err(|e| map_error(e, spec, &endpoint, cache_dir))?;
    let bar = Bar {
        bar: if opts.progress {
            ProgressBar::new(0)
        } else {
            ProgressBar::hidden()
        },
        opts: opts.clone(),
        file: String::new(),
        done: 0,
        total: 0,
    };
    let path = api
        .repo(spec.hf_repo())
        .download_with_progress(&spec.file, bar)
        .map_err(|e| map_error(e, spec, &endpoint, cache_dir))?;
    opts.observe("verifying", &spec.file, 0, 0);
    check_lfs_hash(&path, spec)?;
    Ok(path)
}

/// hf-hub does not check what it downloaded. For LFS files (every model file) the blob is
/// named by its etag, which is the file's sha256, so we can: a corrupt blob is removed.
fn check_lfs_hash(pointer: &Path, spec: &HubSpec) -> Result<(), StoreError> {
    let blob =
        std::fs::canonicalize(pointer).map_err(|e| StoreError::io("cannot open", pointer, e))?;
    let etag = blob
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let is_sha256 = etag.len() == 64 && etag.chars().all(|c| c.is_ascii_hexdigit());
    if !is_sha256 {
        return Ok(()); // a small git-stored file: its etag is a git object id, not a sha256
    }
    let actual = verify::sha256_file(&blob)?;
    if actual.eq_ignore_ascii_case(&etag) {
        return Ok(());
    }
    // Remove both, so the next resolve does not find the damaged file and the next pull retries.
    let _ = std::fs::remove_file(pointer);
    let _ = std::fs::remove_file(&blob);
    Err(StoreError::HashMismatch {
        name: spec.to_string(),
        expected: etag.to_ascii_lowercase(),
        actual,
    })
}

/// Turns hf-hub's errors into ours, with a hint where we have one.
fn map_error(e: ApiError, spec: &HubSpec, endpoint: &str, cache_dir: &Path) -> StoreError {
    match e {
        ApiError::RequestError(err) => match *err {
            ureq::Error::Status(status, resp) => {
                let hint = match status {
                    401 | 403 => {
                        "; the repo may be private or gated: accept its terms on the Hub and set HF_TOKEN"
                    }
                    404 => "; check the owner, repo, revision and file name",
                    _ => "",
                };
                StoreError::HubStatus {
                    status,
                    url: resp.get_url().to_string(),
                    hint: hint.to_string(),
                }
            }
            ureq::Error::Transport(t) => StoreError::Network {
                endpoint: endpoint.to_string(),
                message: t.to_string(),
            },
        },
        ApiError::TooManyRetries(inner) => map_error(*inner, spec, endpoint, cache_dir),
        ApiError::IoError(source) => StoreError::io("cannot write into", cache_dir, source),
        other => StoreError::Hub {
            spec: spec.to_string(),
            message: other.to_string(),
        },
    }
}

/// An indicatif bar (on stderr) and the pull's observer, driven by hf-hub's progress
/// callbacks.
struct Bar {
    bar: ProgressBar,
    opts: PullOptions,
    file: String,
    done: u64,
    total: u64,
}

impl hf_hub::api::Progress for Bar {
    fn init(&mut self, size: usize, filename: &str) {
        self.file = filename.to_string();
        self.total = size as u64;
        self.done = 0;
        self.opts.observe("downloading", &self.file, 0, self.total);
        self.bar.set_length(size as u64);
        self.bar.set_position(0);
        self.bar.set_style(
            ProgressStyle::with_template(
                "{msg} [{elapsed_precise}] [{wide_bar}] {bytes}/{total_bytes} {bytes_per_sec} ({eta})",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        self.bar.set_message(filename.to_string());
    }

    fn update(&mut self, size: usize) {
        self.done += size as u64;
        self.opts
            .observe("downloading", &self.file, self.done, self.total);
        self.bar.inc(size as u64);
    }

    fn finish(&mut self) {
        self.bar.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Registry, Store};
    use std::io::{BufRead, BufReader, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    /// A commit id per revision, as on the real Hub (hf-hub files snapshots by commit).
    fn commit_for(path: &str) -> String {
        let revision = path
            .split("/resolve/")
            .nth(1)
            .unwrap_or("")
            .split('/')
            .next();
        verify::sha256_hex(revision.unwrap_or("").as_bytes())[..40].to_string()
    }

    /// A stand-in for the Hub on 127.0.0.1: serves `files` (URL path -> bytes, etag) at
    /// `/{repo}/resolve/{revision}/{file}`, honours `Range`, and logs every request.
    struct FakeHub {
        port: u16,
        log: Arc<Mutex<Vec<String>>>,
        stop: Arc<AtomicBool>,
        thread: Option<std::thread::JoinHandle<()>>,
    }

    impl FakeHub {
        fn start(files: Vec<(String, Vec<u8>, String)>) -> Self {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            listener.set_nonblocking(true).unwrap();
            let port = listener.local_addr().unwrap().port();
            let log = Arc::new(Mutex::new(Vec::new()));
            let stop = Arc::new(AtomicBool::new(false));
            let (log2, stop2) = (log.clone(), stop.clone());
            let thread = std::thread::spawn(move || {
                // Bounded: the server gives up after a minute even if the test forgets to stop it.
                let deadline = Instant::now() + Duration::from_secs(60);
                while !stop2.load(Ordering::SeqCst) && Instant::now() < deadline {
                    match listener.accept() {
                        Ok((s, _)) => serve(s, &files, &log2),
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
            });
            Self {
                port,
                log,
                stop,
                thread: Some(thread),
            }
        }

        fn endpoint(&self) -> String {
            format!("http://127.0.0.1:{}", self.port)
        }

        fn requests(&self) -> Vec<String> {
            self.log.lock().unwrap().clone()
        }
    }

    impl Drop for FakeHub {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::SeqCst);
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }

    /// Answers one request and closes the connection (so keep-alive never blocks the loop).
    fn serve(stream: TcpStream, files: &[(String, Vec<u8>, String)], log: &Mutex<Vec<String>>) {
        let _ = stream.set_nonblocking(false);
        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
        let mut reader = BufReader::new(stream);
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).is_err() {
            return;
        }
        let mut range = None;
        let mut auth = None;
        for _ in 0..100 {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                match k.trim().to_ascii_lowercase().as_str() {
                    "range" => range = Some(v.trim().to_string()),
                    "authorization" => auth = Some(v.trim().to_string()),
                    _ => {}
                }
            }
        }
        let mut it = request_line.split_whitespace();
        let (method, path) = (it.next().unwrap_or(""), it.next().unwrap_or(""));
        let entry = format!("{method} {path} range={range:?} auth={auth:?}");
        eprintln!("fake hub: {entry}");
        log.lock().unwrap().push(entry);

        let mut stream = reader.into_inner();
        let Some((_, body, etag)) = files.iter().find(|(p, _, _)| p == path) else {
            let _ = stream.write_all(
                b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
            return;
        };
        let len = body.len();
        let (start, end) = match range.as_deref().and_then(|r| r.strip_prefix("bytes=")) {
            Some(r) => {
                let (a, b) = r.split_once('-').unwrap_or((r, ""));
                let a: usize = a.parse().unwrap_or(0);
                let b: usize = b.parse().map(|b: usize| b + 1).unwrap_or(len);
                (a.min(len), b.min(len))
            }
            None => (0, len),
        };
        let status = if range.is_some() {
            "206 Partial Content"
        } else {
            "200 OK"
        };
        let head = format!(
            "HTTP/1.1 {status}\r\nContent-Length: {}\r\nContent-Range: bytes {start}-{}/{len}\r\n\
             ETag: \"{etag}\"\r\nX-Repo-Commit: {}\r\nAccept-Ranges: bytes\r\nConnection: close\r\n\r\n",
            end - start,
            end.saturating_sub(1),
            commit_for(path),
        );
        let _ = stream.write_all(head.as_bytes());
        if method != "HEAD" {
            let _ = stream.write_all(&body[start..end]);
        }
        let _ = stream.flush();
    }

    fn payload() -> Vec<u8> {
        (0..300_001u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 24) as u8)
            .collect()
    }

    fn opts(hub: &FakeHub) -> PullOptions {
        PullOptions {
            endpoint: Some(hub.endpoint()),
            token: Some("test-token".into()),
            ..Default::default()
        }
    }

    /// ureq 2 ignores NO_PROXY, so a proxy in the environment would swallow loopback requests.
    fn proxy_in_env() -> bool {
        let set = ["http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"]
            .iter()
            .any(|k| std::env::var_os(k).is_some_and(|v| !v.is_empty()));
        if set {
            eprintln!(
                "skipping: a proxy is set in the environment and ureq would use it for 127.0.0.1"
            );
        }
        set
    }

    /// The real Hub (or $HF_ENDPOINT): a small git-stored file from a public repo.
    #[test]
    #[ignore = "talks to the Hugging Face Hub; run with --ignored"]
    fn real_hub_pull() {
        let home = tempfile::tempdir().unwrap();
        let store = Store::new(home.path(), Registry::default());
        let path = store
            .pull(
                "hf:openai-community/gpt2/config.json",
                &PullOptions::default(),
            )
            .unwrap();
        assert!(std::fs::read_to_string(&path).unwrap().contains("n_layer"));
    }

    #[test]
    fn parse_specs() {
        let s = HubSpec::parse("owner/repo/sub/model.gguf").unwrap();
        assert_eq!(
            (s.repo.as_str(), s.revision.as_str(), s.file.as_str()),
            ("owner/repo", "main", "sub/model.gguf")
        );
        let s = HubSpec::parse("owner/repo@v1.0/model.gguf").unwrap();
        assert_eq!(s.revision, "v1.0");
        assert_eq!(s.to_string(), "hf:owner/repo@v1.0/model.gguf");
        for bad in [
            "owner/repo",
            "owner//f.gguf",
            "/repo/f.gguf",
            "owner/repo/../x",
            "owner/repo@/f",
            "owner/repo/",
            "ow ner/repo/f",
        ] {
            assert!(HubSpec::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn pull_from_fake_hub_then_cached() {
        if proxy_in_env() {
            return;
        }
        let body = payload();
        let etag = verify::sha256_hex(&body);
        let hub = FakeHub::start(vec![
            (
                "/owner/repo/resolve/main/model.gguf".into(),
                body.clone(),
                etag.clone(),
            ),
            (
                "/owner/repo/resolve/v2/model.gguf".into(),
                b"v2 bytes".to_vec(),
                verify::sha256_hex(b"v2 bytes"),
            ),
        ]);
        let home = tempfile::tempdir().unwrap();
        let store = Store::new(home.path(), Registry::default());

        let seen = Arc::new(Mutex::new(Vec::new()));
        let observer = {
            let seen = Arc::clone(&seen);
            crate::Observer(Arc::new(move |p: &crate::PullProgress| {
                seen.lock().unwrap().push(p.clone())
            }))
        };
        let watched = PullOptions {
            observer: Some(observer),
            ..opts(&hub)
        };
        let path = store.pull("hf:owner/repo/model.gguf", &watched).unwrap();
        // The observer saw the bytes arrive, in order, to the whole file, then the check.
        let seen = seen.lock().unwrap().clone();
        let bytes: Vec<u64> = seen
            .iter()
            .filter(|p| p.stage == "downloading")
            .map(|p| p.completed)
            .collect();
        assert!(bytes.windows(2).all(|w| w[0] <= w[1]), "{bytes:?}");
        assert_eq!(bytes.last().copied(), Some(body.len() as u64));
        assert!(seen.iter().all(|p| p.file == "model.gguf"), "{seen:?}");
        assert_eq!(seen.last().map(|p| p.stage), Some("verifying"));
        // assert! rather than assert_eq!: a failure should not print 300 kB of bytes.
        assert!(std::fs::read(&path).unwrap() == body);
        assert!(
            path.starts_with(store.models_dir().join("hf")),
            "{}",
            path.display()
        );
        let reqs = hub.requests();
        assert!(!reqs.is_empty());
        assert!(
            reqs.iter()
                .all(|r| r.contains("/owner/repo/resolve/main/model.gguf")),
            "{reqs:?}"
        );
        assert!(
            reqs.iter().all(|r| r.contains("Bearer test-token")),
            "{reqs:?}"
        );

        // Second pull and resolve: served from the cache, the Hub hears nothing.
        let n = reqs.len();
        assert_eq!(
            store.pull("hf:owner/repo/model.gguf", &opts(&hub)).unwrap(),
            path
        );
        assert_eq!(store.resolve("hf:owner/repo/model.gguf").unwrap(), path);
        assert_eq!(hub.requests().len(), n);

        // A revision goes into the URL and is cached on its own.
        let p2 = store
            .pull("hf:owner/repo@v2/model.gguf", &opts(&hub))
            .unwrap();
        assert_eq!(std::fs::read(&p2).unwrap(), b"v2 bytes");
        assert_eq!(store.resolve("hf:owner/repo@v2/model.gguf").unwrap(), p2);
        assert!(hub.requests()[n..]
            .iter()
            .all(|r| r.contains("/resolve/v2/")));
    }

    #[test]
    fn hub_errors_are_explained() {
        if proxy_in_env() {
            return;
        }
        let body = payload();
        let hub = FakeHub::start(vec![(
            "/owner/repo/resolve/main/bad.gguf".into(),
            body,
            // A sha256-shaped etag that is not the body's hash: an LFS file damaged in transit.
            verify::sha256_hex(b"not the body"),
        )]);
        let home = tempfile::tempdir().unwrap();
        let store = Store::new(home.path(), Registry::default());

        let err = store
            .pull("hf:owner/repo/missing.gguf", &opts(&hub))
            .unwrap_err();
        assert!(
            matches!(err, StoreError::HubStatus { status: 404, .. }),
            "{err}"
        );

        let err = store
            .pull("hf:owner/repo/bad.gguf", &opts(&hub))
            .unwrap_err();
        assert!(matches!(err, StoreError::HashMismatch { .. }), "{err}");
        assert!(store.resolve("hf:owner/repo/bad.gguf").is_err());

        // Nothing listens on this port any more once the server is gone.
        let port = hub.port;
        drop(hub);
        let o = PullOptions {
            endpoint: Some(format!("http://127.0.0.1:{port}")),
            ..Default::default()
        };
        let err = store.pull("hf:owner/repo/other.gguf", &o).unwrap_err();
        assert!(matches!(err, StoreError::Network { .. }), "{err}");
    }
}
