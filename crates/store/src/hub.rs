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

/// The longest `hf:` spec accepted, in bytes (the Hub's own names are far shorter).
pub const MAX_SPEC_BYTES: usize = 512;

/// One segment of a Hub spec: letters, digits, `-`, `_` and `.`, not starting with `.`
/// (so never `.` or `..`, nor a hidden file) and not empty. Owner, repo, revision and
/// every folder and file name of the path obey it, so a spec cannot climb out of the
/// repo in the Hub's URL nor out of the cache on disk.
fn is_segment(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with('.')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

impl HubSpec {
    /// Parses the text after `hf:`: `OWNER/REPO/FILE` or `OWNER/REPO@REVISION/FILE`,
    /// FILE a path of one or more segments; every segment as [`is_segment`] says, the
    /// whole at most [`MAX_SPEC_BYTES`].
    pub fn parse(rest: &str) -> Result<Self, StoreError> {
        let bad = |reason: &str| StoreError::BadHubSpec {
            spec: rest.chars().take(MAX_SPEC_BYTES).collect(),
            reason: reason.to_string(),
        };
        if rest.len() > MAX_SPEC_BYTES {
            return Err(bad(&format!("it is longer than {MAX_SPEC_BYTES} bytes")));
        }
        let mut parts = rest.splitn(3, '/');
        let (Some(owner), Some(repo_rev), Some(file)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(bad("it needs an owner, a repo and a file"));
        };
        let (repo, revision) = match repo_rev.split_once('@') {
            Some((r, rev)) => (r, rev),
            None => (repo_rev, "main"),
        };
        let plain = "each of owner, repo, revision and the file's path segments must be \
                     letters, digits, '-', '_' and '.', not empty and not starting with '.'";
        if ![owner, repo, revision].into_iter().all(is_segment) || !file.split('/').all(is_segment)
        {
            return Err(bad(plain));
        }
        Ok(Self {
            repo: format!("{owner}/{repo}"),
            revision: revision.to_string(),
            file: file.to_string(),
        })
    }

    /// Whether the file is a GGUF model (what a server may pull for its clients).
    pub fn is_gguf(&self) -> bool {
        self.file.to_ascii_lowercase().ends_with(".gguf")
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

/// What a look in the Hub cache found for a spec.
#[derive(Debug)]
pub(crate) enum Cached {
    /// There, and (for an LFS file) its bytes hash to its name.
    Verified(PathBuf),
    /// Not there (or only partly: no ref, no snapshot entry).
    Missing,
    /// There, with other bytes than its name says (a power cut before the
    /// download reached the disk, a damaged disk).
    Damaged {
        path: PathBuf,
        expected: String,
        actual: String,
    },
}

/// The cached copy of `spec`, checked: an LFS file (every model file) is
/// named by its sha256, and must still hash to it. The hash is taken once
/// per change of the file (a `.verified` marker beside the blob spares the
/// next ones); a small git-stored file has nothing to check against.
pub(crate) fn cached(cache_dir: &Path, spec: &HubSpec) -> Result<Cached, StoreError> {
    let Some(pointer) = Cache::new(cache_dir.to_path_buf())
        .repo(spec.hf_repo())
        .get(&spec.file)
        .filter(|p| p.is_file())
    else {
        return Ok(Cached::Missing);
    };
    let Some((blob, etag)) = lfs_blob(&pointer)? else {
        return Ok(Cached::Verified(pointer));
    };
    Ok(match verify::check_cached(&blob, &etag)? {
        verify::Cached::Verified => Cached::Verified(pointer),
        verify::Cached::Missing => Cached::Missing,
        verify::Cached::Mismatch { actual } => Cached::Damaged {
            path: pointer,
            expected: etag,
            actual,
        },
    })
}

/// The blob behind a snapshot entry and its sha256 (its name), when it is an
/// LFS file; `None` for a git-stored file, whose etag is a git object id.
fn lfs_blob(pointer: &Path) -> Result<Option<(PathBuf, String)>, StoreError> {
    let blob =
        std::fs::canonicalize(pointer).map_err(|e| StoreError::io("cannot open", pointer, e))?;
    let etag = blob
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let is_sha256 = etag.len() == 64 && etag.chars().all(|c| c.is_ascii_hexdigit());
    Ok(is_sha256.then(|| (blob, etag.to_ascii_lowercase())))
}

/// Removes a damaged cached file (its snapshot entry, blob and marker), so the
/// next resolve does not find it and the next pull fetches it again.
fn forget(pointer: &Path) {
    if let Ok(blob) = std::fs::canonicalize(pointer) {
        let _ = std::fs::remove_file(verify::marker_path(&blob));
        let _ = std::fs::remove_file(&blob);
    }
    let _ = std::fs::remove_file(pointer);
}

/// Says what an interrupted earlier pull of `spec`'s repo left: hf-hub
/// resumes a `blobs/ETAG.part` file from where it stopped.
fn report_partial(cache_dir: &Path, spec: &HubSpec, opts: &PullOptions) {
    let blobs = cache_dir.join(spec.hf_repo().folder_name()).join("blobs");
    let Ok(entries) = std::fs::read_dir(&blobs) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.extension().is_some_and(|x| x == "part") {
            let bytes = e.metadata().map_or(0, |m| m.len());
            opts.say(&format!(
                "an interrupted pull left {bytes} bytes of a download in {}: resuming from there (nothing at the model's own name was touched)",
                path.display()
            ));
        }
    }
}

/// Downloads `spec` into `cache_dir` unless it is already there.
pub(crate) fn pull(
    cache_dir: &Path,
    spec: &HubSpec,
    opts: &PullOptions,
) -> Result<PathBuf, StoreError> {
    // Checked before building a client so that a cached file costs no network at all
    // (hf-hub's `download` would ask the Hub for metadata every time).
    match cached(cache_dir, spec)? {
        Cached::Verified(p) => return Ok(p),
        Cached::Missing => {}
        Cached::Damaged {
            path,
            expected,
            actual,
        } => {
            opts.say(&format!(
                "the cached {} is damaged (sha256 {actual}, expected {expected}): fetching it again",
                path.display()
            ));
            forget(&path);
        }
    }
    report_partial(cache_dir, spec, opts);
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
    make_durable(&path, spec)?;
    opts.observe("verifying", &spec.file, 0, 0);
    check_lfs_hash(&path, spec)?;
    Ok(path)
}

/// hf-hub renames its finished `.part` file to the blob without an fsync and
/// writes `refs/REVISION` in place. Once it returns: the blob's bytes and the
/// folder entries are made durable, and the ref is written again whole (a
/// temporary name, fsync, rename), so a power cut cannot leave a resolvable
/// name on missing bytes. (The check in [`cached`] catches the window before.)
fn make_durable(pointer: &Path, spec: &HubSpec) -> Result<(), StoreError> {
    let blob =
        std::fs::canonicalize(pointer).map_err(|e| StoreError::io("cannot open", pointer, e))?;
    let sync = |p: &Path| {
        std::fs::File::open(p)
            .and_then(|f| f.sync_all())
            .map_err(|e| StoreError::io("cannot write", p, e))
    };
    sync(&blob)?;
    for dir in [blob.parent(), pointer.parent()].into_iter().flatten() {
        let _ = durable::sync_dir(dir);
    }
    // models--OWNER--REPO/blobs/ETAG -> models--OWNER--REPO/refs/REVISION
    if let Some(repo_dir) = blob.parent().and_then(Path::parent) {
        let ref_path = repo_dir.join("refs").join(&spec.revision);
        if let Ok(commit) = std::fs::read(&ref_path) {
            durable::write_atomic(&ref_path, &commit)
                .map_err(|e| StoreError::io("cannot write", &ref_path, e))?;
        }
    }
    Ok(())
}

/// hf-hub does not check what it downloaded. For LFS files (every model file) the blob is
/// named by its etag, which is the file's sha256, so we can: a corrupt blob is removed, a
/// good one gets its `.verified` marker.
fn check_lfs_hash(pointer: &Path, spec: &HubSpec) -> Result<(), StoreError> {
    let Some((blob, etag)) = lfs_blob(pointer)? else {
        return Ok(()); // a small git-stored file: its etag is a git object id, not a sha256
    };
    let actual = verify::sha256_file(&blob)?;
    if actual.eq_ignore_ascii_case(&etag) {
        verify::write_marker(&blob, &etag);
        return Ok(());
    }
    forget(pointer);
    Err(StoreError::HashMismatch {
        name: spec.to_string(),
        expected: etag,
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
        let long = format!("owner/repo/{}.gguf", "a".repeat(MAX_SPEC_BYTES));
        for bad in [
            "owner/repo",
            "owner//f.gguf",
            "/repo/f.gguf",
            "owner/repo/../x",
            "owner/repo@/f",
            "owner/repo/",
            "ow ner/repo/f",
            // `..` and hidden names anywhere: owner, repo, revision, path.
            "a/../b/x.gguf",
            "../repo/x.gguf",
            "owner/..@main/x.gguf",
            "owner/repo@../x.gguf",
            "owner/repo/sub/../../x.gguf",
            "owner/repo/./x.gguf",
            "owner/repo/.hidden.gguf",
            "owner/.repo/x.gguf",
            // Characters a URL or a path would read as more than a name.
            "owner/repo/x.gguf?download=1",
            "owner/repo/x%2f..%2fy.gguf",
            "owner/repo/a\\b.gguf",
            "owner/repo@a@b/x.gguf",
            "owner/repo/x.gguf#frag",
            &long,
        ] {
            assert!(
                matches!(HubSpec::parse(bad), Err(StoreError::BadHubSpec { .. })),
                "{bad}"
            );
        }
        assert!(HubSpec::parse("owner/repo/model.Q4_K_M.gguf")
            .unwrap()
            .is_gguf());
        assert!(!HubSpec::parse("owner/repo/config.json").unwrap().is_gguf());
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
    fn a_partial_download_resumes_and_a_damaged_file_is_fetched_again() {
        if proxy_in_env() {
            return;
        }
        let body = payload();
        let etag = verify::sha256_hex(&body);
        let hub = FakeHub::start(vec![(
            "/owner/repo/resolve/main/model.gguf".into(),
            body.clone(),
            etag.clone(),
        )]);
        let home = tempfile::tempdir().unwrap();
        let store = Store::new(home.path(), Registry::default());
        let said = Arc::new(Mutex::new(Vec::<String>::new()));
        let o = PullOptions {
            notice: Some(crate::Notice({
                let said = said.clone();
                Arc::new(move |l: &str| said.lock().unwrap().push(l.to_string()))
            })),
            ..opts(&hub)
        };
        // What a pull killed mid-download leaves: the first 1000 bytes in ETAG.part.
        let blobs = store.models_dir().join("hf/models--owner--repo/blobs");
        std::fs::create_dir_all(&blobs).unwrap();
        std::fs::write(blobs.join(format!("{etag}.part")), &body[..1000]).unwrap();
        let path = store.pull("hf:owner/repo/model.gguf", &o).unwrap();
        assert!(std::fs::read(&path).unwrap() == body);
        assert!(
            hub.requests()
                .iter()
                .any(|r| r.starts_with("GET") && r.contains("bytes=1000-")),
            "{:?}",
            hub.requests()
        );
        let lines = std::mem::take(&mut *said.lock().unwrap());
        assert!(
            lines.len() == 1 && lines[0].contains("1000 bytes") && lines[0].contains("resuming"),
            "{lines:?}"
        );
        // Verified once: the marker sits beside the blob.
        let blob = blobs.join(&etag);
        assert!(verify::marker_path(&blob).is_file());

        // Bytes that no longer hash to the blob's name (what a power cut before the
        // download reached the disk leaves): resolve refuses them, pull fetches again.
        std::fs::write(&blob, b"torn").unwrap();
        let err = store.resolve("hf:owner/repo/model.gguf").unwrap_err();
        assert!(matches!(err, StoreError::CorruptCache { .. }), "{err}");
        assert!(
            err.to_string()
                .contains("hearth pull hf:owner/repo/model.gguf"),
            "{err}"
        );
        let again = store.pull("hf:owner/repo/model.gguf", &o).unwrap();
        assert!(std::fs::read(&again).unwrap() == body);
        let lines = said.lock().unwrap().clone();
        assert!(
            lines.len() == 1 && lines[0].contains("damaged"),
            "{lines:?}"
        );
        assert_eq!(store.resolve("hf:owner/repo/model.gguf").unwrap(), again);
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
