//! Scale to zero: `hearth serve --idle-exit` exits 0 after a quiet period
//! that health probes do not break, a streamed answer holds it open until it
//! has been sent, SIGTERM mid-stream still drains; and `hearth health`, the
//! probe a `FROM scratch` image runs. The streaming tests need a stream that
//! lasts seconds, so they run the real model (the tiny one streams its whole
//! context in milliseconds) and let `--max-request-secs` end it.

use crate::serve_common;

use serve_common::{connect, raw_request, real_model, Server, TINY};
use std::io::{Read, Write};
use std::process::Command;
use std::time::{Duration, Instant};

const CHAT: &str = r#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":8}"#;

/// A streamed raw completion that never ends on its own: end-of-text (1) and
/// end-of-turn (106) are banned, so only the time limit stops it.
const ENDLESS: &str = r#"{"prompt":"Once upon a time","max_tokens":100000,"stream":true,"temperature":1.0,"logit_bias":{"1":-100,"106":-100}}"#;

#[test]
fn idle_exit_after_the_quiet_period_and_health_does_not_count() {
    let mut s = Server::start(TINY, &["--idle-exit", "2"]);
    assert_eq!(s.post("/v1/chat/completions", CHAT).status, 200);
    // Probe health and metrics as a platform would, faster than the idle
    // limit: they must not keep the server awake.
    let mut probes_ok = 0;
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = s.child.try_wait().expect("try_wait") {
            break st;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "still running after 60 s of probes; stderr:\n{}",
            s.stderr()
        );
        if let Ok(r) = serve_common::try_request(&s.addr, "GET", "/health", &[], b"") {
            if r.status == 200 {
                probes_ok += 1;
            }
        }
        let _ = serve_common::try_request(&s.addr, "GET", "/metrics", &[], b"");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "exit {status:?}; stderr:\n{}", s.stderr());
    assert!(probes_ok > 0, "no probe was answered");
    let err = s.stderr();
    assert!(err.contains("--idle-exit 2"), "{err}");
    assert!(err.contains("hearth serve: stopped"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    // The server measured at least the limit before it gave up.
    let idle: f64 = err
        .split("idle for ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no idle line in:\n{err}"));
    assert!(idle >= 2.0, "{err}");
    assert!(connect(&s.addr).is_err(), "still listening");
}

#[test]
fn bad_idle_exit_values_are_refused() {
    for bad in ["-1", "nan", "inf", "soon"] {
        let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
            .args(["serve", "-m", TINY, "--port", "0"])
            .arg(format!("--idle-exit={bad}"))
            .output()
            .expect("run hearth");
        assert!(!out.status.success(), "--idle-exit {bad} accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("idle-exit"), "{bad}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

/// Read an SSE response to its end; returns the whole text.
fn read_stream(c: &mut std::net::TcpStream) -> String {
    let mut raw = Vec::new();
    let _ = c.read_to_end(&mut raw);
    String::from_utf8_lossy(&raw).into_owned()
}

#[test]
fn a_stream_in_flight_holds_the_server_open() {
    let model = real_model();
    // The stream runs for 5 s (its time limit), well past the 2 s idle
    // limit; the quiet period only starts once it has been sent.
    let mut s = Server::start(
        model.to_str().unwrap(),
        &["--idle-exit", "2", "--max-request-secs", "5"],
    );
    let mut c = connect(&s.addr).unwrap();
    c.write_all(&raw_request(
        "POST",
        "/v1/completions",
        &[("Content-Type", "application/json")],
        ENDLESS.as_bytes(),
    ))
    .unwrap();
    let text = read_stream(&mut c);
    // Right after the stream: no idle exit was started while it ran.
    let during = s.stderr();
    assert!(
        text.contains("\"finish_reason\":\"length\"") && text.contains("data: [DONE]"),
        "stream: ...{}",
        &text[text.len().saturating_sub(400)..]
    );
    assert!(
        !during.contains("idle for") && !during.contains("shutting down"),
        "the server gave up during a stream:\n{during}"
    );
    assert_eq!(s.request("GET", "/health", &[], b"").status, 200);
    // Then, with nothing in flight, it exits on its own.
    let st = s.wait_exit(Duration::from_secs(60));
    assert!(st.success(), "exit {st:?}; stderr:\n{}", s.stderr());
    assert!(s.stderr().contains("idle for"), "{}", s.stderr());
}

#[test]
fn sigterm_mid_stream_drains_with_idle_exit_on() {
    let model = real_model();
    let mut s = Server::start(
        model.to_str().unwrap(),
        &[
            "--idle-exit",
            "60",
            "--max-request-secs",
            "4",
            "--shutdown-timeout",
            "30",
        ],
    );
    let mut c = connect(&s.addr).unwrap();
    c.write_all(&raw_request(
        "POST",
        "/v1/completions",
        &[("Content-Type", "application/json")],
        ENDLESS.as_bytes(),
    ))
    .unwrap();
    // Wait for the first bytes of the stream, then ask the server to stop.
    let mut first = [0u8; 256];
    let n = c.read(&mut first).unwrap();
    assert!(n > 0);
    s.sigterm();
    let mut text = String::from_utf8_lossy(&first[..n]).into_owned();
    text.push_str(&read_stream(&mut c));
    assert!(
        text.contains("\"finish_reason\":\"length\"") && text.contains("data: [DONE]"),
        "stream cut: ...{}",
        &text[text.len().saturating_sub(400)..]
    );
    let st = s.wait_exit(Duration::from_secs(60));
    assert!(st.success(), "exit {st:?}; stderr:\n{}", s.stderr());
    let err = s.stderr();
    assert!(err.contains("shutting down"), "{err}");
    assert!(!err.contains("idle for"), "{err}");
    assert!(!err.contains("cancelling"), "{err}");
}

/// `hearth health ARGS`: (exit success, stdout, stderr).
fn health(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .arg("health")
        .args(args)
        .output()
        .expect("run hearth health");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_health_probe_passes_on_200_and_fails_otherwise() {
    let mut s = Server::start(TINY, &[]);
    let url = format!("http://{}/health", s.addr);
    let (ok, out, _) = health(&["--url", &url]);
    assert!(ok);
    assert!(out.contains("200"), "{out}");
    let (ok, out, _) = health(&["--url", &url, "--quiet"]);
    assert!(ok && out.is_empty(), "{out}");
    let (ok, _, err) = health(&["--url", &url, "--wait", "30"]);
    assert!(ok, "{err}");
    // Any other status fails.
    let (ok, _, err) = health(&["--url", &format!("http://{}/nope", s.addr)]);
    assert!(!ok);
    assert!(err.contains("404"), "{err}");
    s.sigterm();
    assert!(s.wait_exit(Duration::from_secs(30)).success());
    // Nothing listening, a bad URL, a bad timeout: failure with a reason.
    for args in [
        vec!["--url", url.as_str(), "--timeout", "2"],
        vec!["--url", "https://127.0.0.1:1/health"],
        vec!["--url", "http://127.0.0.1:1/health", "--timeout", "0"],
        vec!["--url", url.as_str(), "--wait", "0.5", "--timeout", "1"],
        vec!["--url", url.as_str(), "--wait", "-1"],
    ] {
        let (ok, _, err) = health(&args);
        assert!(!ok, "{args:?}");
        assert!(err.starts_with("error:"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}
