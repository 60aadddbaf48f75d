//! `/api/pull` is the operator's act: off unless the server was started with
//! `--allow-pull` (403 naming the flag, the body never read); with it, a
//! client names a known alias or `hf:OWNER/REPO/FILE.gguf` and nothing else:
//! a local path is refused by its text (the same answer whether or not it
//! exists), and a `..` never reaches a Hub URL (a stand-in Hub on loopback
//! hears only the well-formed request).

use crate::serve_common;

use serve_common::{Server, TINY};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A stand-in Hub on loopback: logs each request's head, answers 404.
struct FakeHub {
    url: String,
    heads: Arc<Mutex<Vec<String>>>,
}

impl FakeHub {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let heads = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&heads);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                let mut reader = BufReader::new(&stream);
                let mut head = String::new();
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                    head.push_str(&line);
                    line.clear();
                }
                log.lock().unwrap().push(head);
                let _ = (&stream).write_all(
                    b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                );
            }
        });
        Self { url, heads }
    }

    fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

fn serve(extra: &[&str], hub: &FakeHub, home: &std::path::Path) -> Server {
    let mut args = vec![
        "serve",
        "-m",
        TINY,
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "-t",
        "1",
    ];
    args.extend(extra);
    Server::start_command(
        &args,
        &[
            ("HEARTH_HOME", home.to_str().unwrap()),
            ("HF_ENDPOINT", &hub.url),
            ("HF_TOKEN", "the-operators-token"),
            // An alias pull that got as far as pip would fail here, not download.
            ("HEARTH_PIP", "/nonexistent/hearth-pip"),
        ],
    )
}

fn pull(server: &Server, model: &str) -> (u16, String) {
    let body = serde_json::json!({ "model": model, "stream": false }).to_string();
    let r = server.post("/api/pull", &body);
    let message = r.json()["error"].as_str().unwrap_or_default().to_string();
    (r.status, message)
}

#[test]
fn pull_is_off_without_allow_pull() {
    let hub = FakeHub::start();
    let home = tempfile::tempdir().unwrap();
    let mut server = serve(&[], &hub, home.path());
    for model in ["/etc/passwd", "gemma3-270m", "hf:owner/repo/model.gguf"] {
        let (status, message) = pull(&server, model);
        assert_eq!(status, 403, "{model}: {message}");
        assert!(message.contains("--allow-pull"), "{message}");
    }
    // Refused before the body is read: even a body that is not JSON.
    let r = server.request(
        "POST",
        "/api/pull",
        &[("Content-Type", "application/json")],
        b"{not json",
    );
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(hub.heads().is_empty(), "{:?}", hub.heads());
    server.assert_alive();
}

#[test]
fn with_allow_pull_only_aliases_and_hub_gguf_files_are_pulled() {
    let hub = FakeHub::start();
    let home = tempfile::tempdir().unwrap();
    let mut server = serve(&["--allow-pull"], &hub, home.path());
    // A path, there or not, gets the same answer: no existence oracle.
    let there = pull(&server, "/etc/passwd");
    let missing = pull(&server, "/etc/no-such-file-for-hearth");
    assert_eq!(there.0, 400, "{}", there.1);
    assert_eq!(there, missing);
    assert!(
        there.1.contains("local paths are never looked at"),
        "{}",
        there.1
    );
    assert_eq!(pull(&server, TINY), missing);
    // `..`, hidden segments, other files: refused by the grammar.
    for spec in [
        "hf:a/../b/x.gguf",
        "hf:owner/repo/../../x.gguf",
        "hf:owner/repo@../x.gguf",
        "hf:owner/.repo/x.gguf",
        "hf:owner/repo/config.json",
    ] {
        let (status, message) = pull(&server, spec);
        assert_eq!(status, 400, "{spec}: {message}");
    }
    assert!(hub.heads().is_empty(), "{:?}", hub.heads());
    // A well-formed Hub spec reaches the Hub (with the operator's token: the
    // operator allowed pulls), and its 404 comes back as a failed pull.
    let (status, message) = pull(&server, "hf:owner/repo/model.gguf");
    assert_eq!(status, 502, "{message}");
    let heads = hub.heads();
    assert!(!heads.is_empty());
    for head in &heads {
        assert!(
            head.contains("/owner/repo/resolve/main/model.gguf") && !head.contains(".."),
            "{head}"
        );
        assert!(head.contains("Bearer the-operators-token"), "{head}");
    }
    // The alias gets as far as pip (which is missing here).
    let (status, message) = pull(&server, "gemma3-270m");
    assert_eq!(status, 502, "{message}");
    assert!(message.contains("HEARTH_PIP"), "{message}");
    server.assert_alive();
}
