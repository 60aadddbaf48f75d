//! Shared by the crash tests (crash_kill.rs): seeded kill instants, a
//! spawn-then-SIGKILL runner, the append-only-log ledger, the tallies the
//! tests print (and docs/crash-consistency.md quotes), and small local
//! stand-ins (a Hub, a judge) on plain sockets.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The tiny random Gemma 3 model.
pub const TINY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/fixtures/tiny/gemma3/model-f32.gguf"
);

/// A file of the tiny fixtures: `tests/fixtures/tiny/REL`.
pub fn tiny_fixture(rel: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tiny")
        .join(rel)
}

/// The hearth binary with the environment a crash test wants: no proxy (ureq
/// 2 ignores NO_PROXY, so a proxy would swallow loopback requests), no token.
pub fn hearth() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_hearth"));
    for k in [
        "http_proxy",
        "HTTP_PROXY",
        "https_proxy",
        "HTTPS_PROXY",
        "all_proxy",
        "ALL_PROXY",
        "HF_TOKEN",
    ] {
        c.env_remove(k);
    }
    c
}

/// Kills per store: `$HEARTH_CRASH_KILLS`, else `default`.
pub fn kills(default: usize) -> usize {
    std::env::var("HEARTH_CRASH_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// splitmix64: the kill instants of a run follow from its seed.
pub struct Rng(u64);

impl Rng {
    /// `$HEARTH_CRASH_SEED`, else the clock; `salt` gives each store its own stream.
    pub fn new(salt: u64) -> (Self, u64) {
        let seed = std::env::var("HEARTH_CRASH_SEED")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        (Self(seed ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15)), seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
    }

    /// A kill instant in `lo..hi`, to the microsecond.
    pub fn instant(&mut self, lo: Duration, hi: Duration) -> Duration {
        let span = hi.saturating_sub(lo).as_micros().max(1) as u64;
        lo + Duration::from_micros(self.below(span))
    }
}

/// One run of a command that may have been killed.
pub struct Run {
    /// SIGKILLed (rather than exited by itself).
    pub killed: bool,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub wall: Duration,
}

impl Run {
    pub fn ok(&self) -> bool {
        !self.killed && self.status.success()
    }
}

/// Output files of a child, read back once it is gone.
pub struct Captured {
    out: std::fs::File,
    err: std::fs::File,
}

impl Captured {
    pub fn new() -> Self {
        Self {
            out: tempfile::tempfile().unwrap(),
            err: tempfile::tempfile().unwrap(),
        }
    }

    pub fn attach(&self, cmd: &mut Command) {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(self.out.try_clone().unwrap()))
            .stderr(Stdio::from(self.err.try_clone().unwrap()));
    }

    /// Reads with `pread`: the child shares the file's offset, so moving it
    /// would make the child write over its own output.
    fn read(f: &std::fs::File) -> String {
        use std::os::unix::fs::FileExt;
        let mut out = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            match f.read_at(&mut buf, out.len() as u64) {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    pub fn stdout(&self) -> String {
        Self::read(&self.out)
    }

    pub fn stderr(&self) -> String {
        Self::read(&self.err)
    }
}

impl Default for Captured {
    fn default() -> Self {
        Self::new()
    }
}

/// Waits for `child` until `deadline`, then SIGKILLs it; true when killed.
pub fn kill_at(child: &mut Child, deadline: Instant) -> bool {
    loop {
        if child.try_wait().unwrap().is_some() {
            return false;
        }
        let now = Instant::now();
        if now >= deadline {
            // Child::kill is SIGKILL on Unix: no handler, no drop, no flush.
            let _ = child.kill();
            let _ = child.wait();
            return true;
        }
        std::thread::sleep((deadline - now).min(Duration::from_millis(2)));
    }
}

/// Runs `cmd` and SIGKILLs it `after` its start, unless it ended first.
pub fn run_killed(cmd: &mut Command, after: Duration) -> Run {
    let cap = Captured::new();
    cap.attach(cmd);
    let start = Instant::now();
    let mut child = cmd.spawn().expect("hearth starts");
    let killed = kill_at(&mut child, start + after);
    let status = child.wait().unwrap();
    Run {
        killed,
        status,
        stdout: cap.stdout(),
        stderr: cap.stderr(),
        wall: start.elapsed(),
    }
}

/// Runs `cmd` and SIGKILLs it `extra` after `ready()` first holds (polled
/// every 50 µs), or at `limit` after its start, unless it ended first: for
/// kills aimed at a short phase (a file being written).
pub fn run_killed_when(
    cmd: &mut Command,
    limit: Duration,
    mut ready: impl FnMut() -> bool,
    extra: Duration,
) -> Run {
    let cap = Captured::new();
    cap.attach(cmd);
    let start = Instant::now();
    let mut child = cmd.spawn().expect("hearth starts");
    let mut deadline = start + limit;
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if ready() {
            deadline = deadline.min(Instant::now() + extra);
            break;
        }
        if Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_micros(50));
    }
    let killed = kill_at(&mut child, deadline);
    let status = child.wait().unwrap();
    Run {
        killed,
        status,
        stdout: cap.stdout(),
        stderr: cap.stderr(),
        wall: start.elapsed(),
    }
}

/// What a store's kill loop measured; printed as one line, the line the
/// document quotes.
#[derive(Default)]
pub struct Tally {
    pub store: &'static str,
    pub seed: u64,
    /// SIGKILLs that landed while the tool was running.
    pub kills: usize,
    /// Runs that ended by themselves (the work finished).
    pub completed: usize,
    /// Records found committed after a kill and checked (summed over kills).
    pub committed_checked: usize,
    /// Committed records that were damaged.
    pub corrupt: usize,
    /// Committed records that went missing.
    pub lost: usize,
    /// Work in flight at a kill that was not kept (and was redone).
    pub in_flight_lost: usize,
    /// Lines a restart said about what the last run lost or left.
    pub said: usize,
    /// Store-specific counts.
    pub notes: Vec<String>,
    pub started: Option<Instant>,
}

impl Tally {
    pub fn new(store: &'static str, seed: u64) -> Self {
        eprintln!(
            "crash[{store}]: seed {seed} (HEARTH_CRASH_SEED={seed} replays these kill instants)"
        );
        Self {
            store,
            seed,
            started: Some(Instant::now()),
            ..Self::default()
        }
    }

    /// Fails the test, naming the store and the seed.
    #[track_caller]
    pub fn fail(&self, what: impl std::fmt::Display) -> ! {
        panic!(
            "crash[{}] seed {} (rerun with HEARTH_CRASH_SEED={}): {what}",
            self.store, self.seed, self.seed
        )
    }

    #[track_caller]
    pub fn check(&self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            self.fail(what());
        }
    }

    pub fn note(&mut self, n: impl Into<String>) {
        self.notes.push(n.into());
    }

    /// Prints the result line (and appends it to `$HEARTH_CRASH_REPORT`).
    pub fn report(&self) {
        let secs = self.started.map_or(0.0, |s| s.elapsed().as_secs_f64());
        let line = format!(
            "crash[{}] seed={} kills={} completed_runs={} committed_checked={} corrupt={} lost_committed={} in_flight_lost={} restart_notices={} {} ({secs:.1} s)",
            self.store,
            self.seed,
            self.kills,
            self.completed,
            self.committed_checked,
            self.corrupt,
            self.lost,
            self.in_flight_lost,
            self.said,
            self.notes.join(" "),
        );
        eprintln!("{line}");
        if let Ok(p) = std::env::var("HEARTH_CRASH_REPORT") {
            if let Ok(mut f) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
            {
                let _ = writeln!(f, "{line}");
            }
        }
    }
}

/// Whole lines (each with its newline) and the bytes after the last one.
pub fn split_lines(bytes: &[u8]) -> (Vec<Vec<u8>>, Vec<u8>) {
    let keep = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let lines = bytes[..keep]
        .split_inclusive(|&b| b == b'\n')
        .map(<[u8]>::to_vec)
        .collect();
    (lines, bytes[keep..].to_vec())
}

/// The committed lines of an append-only JSON-lines file: every whole line
/// seen after a kill must still be there, unchanged and in place, after every
/// later kill and restart.
#[derive(Default)]
pub struct Ledger {
    pub committed: Vec<Vec<u8>>,
}

impl Ledger {
    /// Checks `bytes` (the file now) against what was committed before, and
    /// takes its whole lines as committed. Every whole line must be JSON.
    pub fn check(&mut self, t: &mut Tally, bytes: &[u8]) -> Vec<serde_json::Value> {
        let (lines, _tail) = split_lines(bytes);
        for (i, c) in self.committed.iter().enumerate() {
            match lines.get(i) {
                None => {
                    t.lost += 1;
                    t.fail(format!(
                        "committed line {} is gone: {}",
                        i + 1,
                        String::from_utf8_lossy(c)
                    ))
                }
                Some(l) if l != c => {
                    t.corrupt += 1;
                    t.fail(format!(
                        "committed line {} changed:\n was {}\n now {}",
                        i + 1,
                        String::from_utf8_lossy(c),
                        String::from_utf8_lossy(l)
                    ))
                }
                Some(_) => {}
            }
        }
        let mut rows = Vec::with_capacity(lines.len());
        for (i, l) in lines.iter().enumerate() {
            match serde_json::from_slice::<serde_json::Value>(l) {
                Ok(v) => rows.push(v),
                Err(e) => {
                    t.corrupt += 1;
                    t.fail(format!(
                        "line {} is not JSON ({e}): {}",
                        i + 1,
                        String::from_utf8_lossy(l)
                    ))
                }
            }
        }
        t.committed_checked += lines.len();
        self.committed = lines;
        rows
    }
}

/// Cuts the file's last whole line short (what a power cut in the middle of
/// its write leaves), as if it had never been committed; returns the bytes
/// left after the last newline, or `None` when there was no line to cut.
pub fn tear_last_line(path: &Path, rng: &mut Rng) -> Option<Vec<u8>> {
    let bytes = std::fs::read(path).ok()?;
    let (lines, tail) = split_lines(&bytes);
    if !tail.is_empty() {
        return None;
    }
    let last = lines.last()?;
    let start = bytes.len() - last.len();
    // Keep 1 ..= len-1 bytes of it: at most everything but the newline.
    let keep = 1 + rng.below(last.len() as u64 - 1) as usize;
    let f = std::fs::OpenOptions::new().write(true).open(path).ok()?;
    f.set_len((start + keep) as u64).ok()?;
    Some(bytes[start..start + keep].to_vec())
}

/// A minimal HTTP/1.1 server on 127.0.0.1 for stand-ins: each connection on
/// its own thread, one request per connection (`Connection: close`).
pub struct Http {
    pub port: u16,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    pub requests: Arc<AtomicU64>,
}

/// A request as a stand-in sees it.
pub struct Request {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

type Handler = dyn Fn(&Request, &mut TcpStream) + Send + Sync;

impl Http {
    pub fn start(handler: impl Fn(&Request, &mut TcpStream) + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(AtomicU64::new(0));
        let handler: Arc<Handler> = Arc::new(handler);
        let (stop2, requests2) = (stop.clone(), requests.clone());
        let thread = std::thread::spawn(move || {
            // Bounded, so a forgotten server never outlives the test by much.
            let deadline = Instant::now() + Duration::from_secs(600);
            while !stop2.load(Ordering::SeqCst) && Instant::now() < deadline {
                match listener.accept() {
                    Ok((s, _)) => {
                        let h = handler.clone();
                        let n = requests2.clone();
                        std::thread::spawn(move || {
                            if let Some(req) = read_request(&s) {
                                n.fetch_add(1, Ordering::SeqCst);
                                let mut s = s;
                                h(&req, &mut s);
                                let _ = s.flush();
                            }
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(1)),
                }
            }
        });
        Self {
            port,
            stop,
            thread: Some(thread),
            requests,
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Http {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn read_request(s: &TcpStream) -> Option<Request> {
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let mut it = line.split_whitespace();
    let (method, path) = (it.next()?.to_string(), it.next()?.to_string());
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).ok()? == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let len: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).ok()?;
    Some(Request {
        method,
        path,
        headers,
        body,
    })
}

/// Writes a whole response with `Connection: close`.
pub fn respond(s: &mut TcpStream, status: &str, headers: &[(&str, String)], body: &[u8]) {
    let mut head = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let _ = s.write_all(head.as_bytes());
    let _ = s.write_all(body);
}

/// One HTTP/1.1 request to 127.0.0.1:`port`; the status and body, or `None`
/// when the connection fails (the server was killed).
pub fn request(port: u16, method: &str, path: &str, body: Option<&str>) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let body = body.unwrap_or("");
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).ok()?;
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).ok()?;
    let text = String::from_utf8_lossy(&resp).into_owned();
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let (_, body) = text.split_once("\r\n\r\n")?;
    Some((status, body.to_string()))
}

/// Something shared between a test and its stand-in threads.
pub type Shared<T> = Arc<Mutex<T>>;
