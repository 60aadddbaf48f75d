//! Shared by the `serve_*` tests: start the real `hearth serve` on a free
//! loopback port, speak plain HTTP/1.1 to it over a socket, stop it.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The tiny random Gemma 3 model: fast enough for many requests.
pub const TINY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/fixtures/tiny/gemma3/model-f32.gguf"
);

/// A file of the tiny fixtures: `tests/fixtures/tiny/REL`.
pub fn tiny_fixture(rel: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tiny")
        .join(rel)
}

/// `src` with `names` given to token ids (as control tokens) and, when
/// given, `template` as its chat template, written to `out`.
pub fn with_tokens(
    src: &gguf::GgufFile,
    names: &[(usize, &str)],
    template: Option<&str>,
    out: &std::path::Path,
) {
    use gguf::{MetaArray, MetaValue};
    let mut w = gguf::GgufWriter::new();
    for (k, v) in src.metadata() {
        let v = match (k.as_str(), v) {
            ("tokenizer.ggml.tokens", MetaValue::Array(MetaArray::String(t))) => {
                let mut t = t.to_vec();
                for &(id, name) in names {
                    t[id] = name.to_string();
                }
                MetaValue::Array(MetaArray::String(t.into()))
            }
            ("tokenizer.ggml.token_type", MetaValue::Array(MetaArray::I32(t))) => {
                let mut t = t.clone();
                for &(id, _) in names {
                    t[id] = 3;
                }
                MetaValue::Array(MetaArray::I32(t))
            }
            _ => v.clone(),
        };
        w.set(k.clone(), v);
    }
    if let Some(template) = template {
        w.set(
            "tokenizer.chat_template".to_string(),
            MetaValue::String(template.to_string()),
        );
    }
    for t in src.tensors() {
        w.add_tensor(t.name.clone(), &t.dims, t.ty, src.tensor_data(t).to_vec())
            .unwrap();
    }
    std::fs::write(out, w.to_bytes()).unwrap();
}

/// Start `hearth serve --models DIR` on a free loopback port with one
/// thread and `extra` flags.
pub fn serve_models(dir: &std::path::Path, extra: &[&str]) -> Server {
    let dir = dir.to_str().expect("a UTF-8 path");
    let mut args = vec![
        "serve",
        "--models",
        dir,
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "-t",
        "1",
    ];
    args.extend(extra);
    Server::start_command(&args, &[])
}

/// The peak resident memory of a process so far, in KiB (Linux's VmHWM).
pub fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/PID/status")
}

/// CRC-32 (IEEE), as PNG chunks carry it.
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// A PNG whose header claims `width` x `height` pixels of `depth` bits and
/// colour type `color` (2 RGB, 6 RGBA), with one small stored block of
/// zeros for its data: a whole picture when tiny, a decompression bomb's
/// header when large.
pub fn png_claiming(width: u32, height: u32, depth: u8, color: u8) -> Vec<u8> {
    let chunk = |kind: &[u8], data: &[u8]| {
        let mut c = (data.len() as u32).to_be_bytes().to_vec();
        let mut body = kind.to_vec();
        body.extend_from_slice(data);
        c.extend_from_slice(&body);
        c.extend_from_slice(&crc32(&body).to_be_bytes());
        c
    };
    let mut ihdr = width.to_be_bytes().to_vec();
    ihdr.extend_from_slice(&height.to_be_bytes());
    ihdr.extend_from_slice(&[depth, color, 0, 0, 0]);
    // zlib: a stored block of 16 zero bytes (filter bytes and pixels).
    let mut idat = vec![0x78, 0x01, 0x01, 16, 0, !16, 0xFF];
    idat.extend_from_slice(&[0u8; 16]);
    idat.extend_from_slice(&[0, 0, 0, 1]);
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    png.extend(chunk(b"IHDR", &ihdr));
    png.extend(chunk(b"IDAT", &idat));
    png.extend(chunk(b"IEND", &[]));
    png
}

/// The real model: $HEARTH_MODEL, else the cache ($HEARTH_HOME or
/// ~/.cache/hearth). Missing is a failure, never a silent pass.
pub fn real_model() -> std::path::PathBuf {
    use std::path::{Path, PathBuf};
    let path = match std::env::var_os("HEARTH_MODEL") {
        Some(p) => PathBuf::from(p),
        None => {
            let cache = match std::env::var_os("HEARTH_HOME") {
                Some(h) => PathBuf::from(h),
                None => {
                    Path::new(&std::env::var_os("HOME").expect("HOME is set")).join(".cache/hearth")
                }
            };
            cache.join("models/gemma-3-270m-q4_k_m.gguf")
        }
    };
    assert!(
        path.is_file(),
        "the real model is missing at {}: run `sh scripts/fetch-model.sh` or set HEARTH_MODEL",
        path.display()
    );
    path
}

/// A running `hearth serve`.
pub struct Server {
    /// The process.
    pub child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// Everything it wrote to stderr so far.
    pub stderr: Arc<Mutex<String>>,
    /// The API key it was started with: the probes below send it, as
    /// /health and /metrics sit behind it.
    pub key: Option<String>,
}

impl Server {
    /// Start `hearth serve -m MODEL --port 0 ARGS` and wait until it listens
    /// and, when `wait_ready`, until /health says 200.
    pub fn start(model: &str, args: &[&str]) -> Server {
        let mut full = vec!["serve", "-m", model, "--host", "127.0.0.1", "--port", "0"];
        if !args.contains(&"-t") {
            full.extend(["-t", "1"]);
        }
        full.extend(args);
        Self::start_command(&full, &[])
    }

    /// Start `hearth ARGS` (a whole command line that serves, e.g. a
    /// container's entry point) with extra environment variables, and wait
    /// as `start` does (over HTTPS, only until it listens).
    pub fn start_command(args: &[&str], envs: &[(&str, &str)]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_hearth"))
            .args(args)
            .env("RUST_BACKTRACE", "0")
            // The caller's `envs` alone decide these.
            .env_remove("HEARTH_API_KEY")
            .env_remove("HEARTH_IDLE_EXIT")
            .env_remove("HEARTH_CACHE_DIR")
            .envs(envs.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn hearth serve");
        let stderr = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        {
            let pipe = child.stderr.take().expect("stderr");
            let stderr = Arc::clone(&stderr);
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    if let Some(addr) = line.split("listening on http://").nth(1) {
                        let _ = tx.send((addr.trim().to_string(), false));
                    }
                    if let Some(addr) = line.split("listening on https://").nth(1) {
                        let _ = tx.send((addr.trim().to_string(), true));
                    }
                    let mut s = stderr.lock().unwrap();
                    s.push_str(&line);
                    s.push('\n');
                }
            });
        }
        let (addr, tls) = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(a) => a,
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "hearth serve did not start; stderr:\n{}",
                    stderr.lock().unwrap()
                );
            }
        };
        let key = args
            .iter()
            .position(|a| *a == "--api-key")
            .and_then(|i| args.get(i + 1))
            .or_else(|| {
                envs.iter()
                    .find(|(k, _)| *k == "HEARTH_API_KEY")
                    .map(|(_, v)| v)
            })
            // The first of several keys.
            .map(|k| k.split(',').next().unwrap_or_default().to_string());
        let server = Server {
            child,
            addr,
            stderr,
            key,
        };
        // Over TLS the plain-HTTP probe cannot see /health: the caller's
        // HTTPS client waits instead.
        if !tls {
            server.wait_healthy(Duration::from_secs(120));
        }
        server
    }

    /// Poll /health until 200.
    pub fn wait_healthy(&self, limit: Duration) {
        let t0 = Instant::now();
        let auth = self.auth();
        let headers: Vec<(&str, &str)> = auth.iter().map(|(k, v)| (*k, v.as_str())).collect();
        while t0.elapsed() < limit {
            if let Ok(r) = try_request(&self.addr, "GET", "/health", &headers, b"") {
                if r.status == 200 {
                    return;
                }
                assert_eq!(r.status, 503, "health while loading: {}", r.text());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("server not healthy after {limit:?}");
    }

    /// A request that must get a response.
    pub fn request(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Resp {
        try_request(&self.addr, method, path, headers, body)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}; stderr:\n{}", self.stderr()))
    }

    /// POST a JSON body.
    pub fn post(&self, path: &str, body: &str) -> Resp {
        self.request(
            "POST",
            path,
            &[("Content-Type", "application/json")],
            body.as_bytes(),
        )
    }

    /// Its stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Send SIGTERM.
    pub fn sigterm(&self) {
        let ok = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(ok.success());
    }

    /// Wait for the process to exit, at most `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        let t0 = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                return st;
            }
            if t0.elapsed() > limit {
                let _ = self.child.kill();
                panic!(
                    "server did not exit within {limit:?}; stderr:\n{}",
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Assert it is still alive and never panicked.
    pub fn assert_alive(&mut self) {
        assert!(
            self.child.try_wait().expect("try_wait").is_none(),
            "server exited; stderr:\n{}",
            self.stderr()
        );
        assert!(!self.stderr().contains("panicked"), "{}", self.stderr());
        assert_eq!(self.probe("/health").status, 200);
    }

    /// The header that carries the key, if the server has one.
    pub fn auth(&self) -> Vec<(&str, String)> {
        self.key
            .iter()
            .map(|k| ("Authorization", format!("Bearer {k}")))
            .collect()
    }

    /// GET a probe (/health, /metrics) with the key when there is one.
    pub fn probe(&self, path: &str) -> Resp {
        let auth = self.auth();
        let headers: Vec<(&str, &str)> = auth.iter().map(|(k, v)| (*k, v.as_str())).collect();
        self.request("GET", path, &headers, b"")
    }

    /// One metric's value from /metrics.
    pub fn metric(&self, name: &str) -> f64 {
        let m = self.probe("/metrics").text();
        m.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(' ')))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no metric {name} in:\n{m}"))
    }

    /// A gauge's value once it reaches `want`, or its last value after ten
    /// seconds: the scheduler updates gauges each round, so a response can
    /// reach the client a round before the gauge that counted it moves.
    pub fn settled_metric(&self, name: &str, want: f64) -> f64 {
        let start = std::time::Instant::now();
        loop {
            let value = self.metric(name);
            if value == want || start.elapsed() > std::time::Duration::from_secs(10) {
                return value;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A response.
#[derive(Debug)]
pub struct Resp {
    /// Status code.
    pub status: u16,
    /// Header lines, lower-cased names.
    pub headers: Vec<(String, String)>,
    /// The body (de-chunked).
    pub body: Vec<u8>,
}

impl Resp {
    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }

    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Assert an OpenAI-shaped error with this status; returns the message.
    #[track_caller]
    pub fn assert_error(&self, status: u16) -> String {
        assert_eq!(self.status, status, "body: {}", self.text());
        let v = self.json();
        let e = &v["error"];
        assert!(e["message"].is_string(), "{v}");
        assert!(e["type"].is_string(), "{v}");
        assert!(e.get("param").is_some() && e.get("code").is_some(), "{v}");
        e["message"].as_str().unwrap_or_default().to_string()
    }

    /// The `data:` payloads of an SSE body.
    pub fn sse_data(&self) -> Vec<String> {
        self.text()
            .lines()
            .filter_map(|l| l.strip_prefix("data: ").map(str::to_string))
            .collect()
    }
}

/// Connect with a timeout.
pub fn connect(addr: &str) -> std::io::Result<TcpStream> {
    let sock = addr
        .parse()
        .map_err(|e| std::io::Error::other(format!("{addr}: {e}")))?;
    let s = TcpStream::connect_timeout(&sock, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    s.set_write_timeout(Some(Duration::from_secs(60)))?;
    Ok(s)
}

/// Format a request with `Connection: close`.
pub fn raw_request(method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// Send one request and read the whole response.
pub fn try_request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<Resp> {
    let mut s = connect(addr)?;
    // The server may answer (413) and close before the whole body is sent:
    // read its answer all the same.
    let written = s.write_all(&raw_request(method, path, headers, body));
    let mut raw = Vec::new();
    let read = s.read_to_end(&mut raw);
    match parse_response(&raw) {
        Ok(r) => Ok(r),
        Err(e) => {
            written?;
            read?;
            Err(e)
        }
    }
}

/// Split a raw response into status, headers and (de-chunked) body.
pub fn parse_response(raw: &[u8]) -> std::io::Result<Resp> {
    let bad = |m: &str| std::io::Error::other(format!("{m}: {}", String::from_utf8_lossy(raw)));
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| bad("no header end"))?;
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| bad("no status"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = raw[end + 4..].to_vec();
    if headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"))
    {
        body = dechunk(&body);
    }
    Ok(Resp {
        status,
        headers,
        body,
    })
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(nl) = b.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(String::from_utf8_lossy(&b[..nl]).trim(), 16).unwrap_or(0);
        if size == 0 || b.len() < nl + 2 + size {
            break;
        }
        out.extend_from_slice(&b[nl + 2..nl + 2 + size]);
        b = &b[(nl + 2 + size + 2).min(b.len())..];
    }
    out
}

/// A venv under target/pyenv with `packages` (import name, pip spec)
/// installed; made once, then reused and topped up.
pub fn python_with(packages: &[(&str, &str)]) -> std::path::PathBuf {
    use std::path::Path;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let venv = root.join("target/pyenv");
    let python = venv.join("bin/python");
    let imports = |py: &Path| {
        let code: String = packages
            .iter()
            .map(|(m, _)| format!("import {m}\n"))
            .collect();
        Command::new(py)
            .args(["-c", &code])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if python.is_file() && imports(&python) {
        return python;
    }
    if !python.is_file() {
        let st = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .expect("run python3 -m venv");
        assert!(st.success(), "python3 -m venv failed");
    }
    let st = Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(packages.iter().map(|(_, spec)| *spec))
        .status()
        .expect("run pip");
    assert!(st.success(), "pip install {packages:?} failed");
    assert!(imports(&python), "{packages:?} do not import after install");
    python
}
