//! `hearth serve` is default-safe for browsers: a web page the user visits
//! cannot use a server on their machine (cross-site "simple" POSTs, DNS
//! rebinding), unless the operator opens it with `--cors` or
//! `--allowed-hosts`; the chat page runs only the server's own script.

use crate::serve_common;

use serve_common::{connect, parse_response, Resp, Server, TINY};
use std::io::{Read, Write};

const CHAT: &str =
    r#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"temperature":0}"#;

/// Send one request with exactly these headers (`Host` included).
fn send(s: &Server, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Resp {
    let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    for (name, value) in headers {
        req.push_str(&format!("{name}: {value}\r\n"));
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    let mut c = connect(&s.addr).unwrap();
    c.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    let _ = c.read_to_end(&mut raw);
    parse_response(&raw).unwrap_or_else(|e| panic!("{method} {path}: {e}"))
}

/// The server's own `host:port`, as a browser on the page would name it.
fn own_host(s: &Server) -> String {
    s.addr.clone()
}

#[test]
fn a_page_on_another_site_cannot_use_a_default_server() {
    let mut s = Server::start(TINY, &["--ctx", "128"]);
    let host = own_host(&s);
    cross_site_posts_are_refused_naming_cors(&s, &host);
    other_origins_and_blind_fetches_are_refused_links_followed(&s, &host);
    rebound_names_are_refused_naming_allowed_hosts(&s);
    the_pages_own_requests_are_answered(&s, &host);
    // Three of the refusals above were of /v1/models.
    assert_eq!(
        s.metric("hearth_requests_total{endpoint=\"models\",status=\"403\"}"),
        3.0
    );
    s.assert_alive();
}

/// A POST from another site, to the server at `host`, is refused with a
/// message that names the `--cors` flag, in each API's own error shape.
fn cross_site_posts_are_refused_naming_cors(s: &Server, host: &str) {
    // A form or fetch() with a text/plain body needs no preflight: refused.
    let r = send(
        s,
        "POST",
        "/v1/chat/completions",
        &[
            ("Host", host),
            ("Origin", "http://evil.example"),
            ("Content-Type", "text/plain"),
        ],
        CHAT,
    );
    let msg = r.assert_error(403);
    assert!(
        msg.contains("--cors http://evil.example"),
        "names the flag: {msg}"
    );
    // Declared JSON too, and in each API's own error shape.
    let r = send(
        s,
        "POST",
        "/api/chat",
        &[
            ("Host", host),
            ("Origin", "http://evil.example"),
            ("Content-Type", "application/json"),
        ],
        CHAT,
    );
    assert_eq!(r.status, 403);
    assert!(r.json()["error"].as_str().unwrap().contains("--cors"));
}

/// Another port of the same machine is another origin, and a cross-site
/// fetch without Origin (no-cors) is refused too (two refusals of
/// /v1/models); following a link to the chat page is not.
fn other_origins_and_blind_fetches_are_refused_links_followed(s: &Server, host: &str) {
    let r = send(
        s,
        "GET",
        "/v1/models",
        &[("Host", host), ("Origin", "http://localhost:3000")],
        "",
    );
    r.assert_error(403);
    let r = send(
        s,
        "GET",
        "/v1/models",
        &[("Host", host), ("Sec-Fetch-Site", "cross-site")],
        "",
    );
    r.assert_error(403);
    let r = send(
        s,
        "GET",
        "/",
        &[
            ("Host", host),
            ("Sec-Fetch-Site", "cross-site"),
            ("Sec-Fetch-Mode", "navigate"),
        ],
        "",
    );
    assert_eq!(r.status, 200);
}

/// DNS rebinding: the attacker's name pointed at 127.0.0.1 is refused,
/// the API (one refusal of /v1/models) and the page alike, naming
/// `--allowed-hosts`.
fn rebound_names_are_refused_naming_allowed_hosts(s: &Server) {
    for path in ["/v1/models", "/"] {
        let r = send(s, "GET", path, &[("Host", "evil.example:8080")], "");
        let msg = r.assert_error(403);
        assert!(msg.contains("--allowed-hosts evil.example"), "{msg}");
    }
}

/// The page's own requests, under each local name of `host`: answered.
fn the_pages_own_requests_are_answered(s: &Server, host: &str) {
    for host in [host.to_string(), host.replace("127.0.0.1", "localhost")] {
        let origin = format!("http://{host}");
        let r = send(
            s,
            "POST",
            "/v1/chat/completions",
            &[
                ("Host", &host),
                ("Origin", &origin),
                ("Sec-Fetch-Site", "same-origin"),
                ("Content-Type", "application/json"),
            ],
            CHAT,
        );
        assert_eq!(r.status, 200, "{}", r.text());
    }
}

#[test]
fn cors_and_allowed_hosts_open_only_what_they_name() {
    let mut s = Server::start(
        TINY,
        &[
            "--ctx",
            "128",
            "--cors",
            "http://app.example",
            "--allowed-hosts",
            "box.lan,*.corp.example",
        ],
    );
    let host = own_host(&s);
    let r = send(
        &s,
        "POST",
        "/v1/chat/completions",
        &[
            ("Host", &host),
            ("Origin", "http://app.example"),
            ("Sec-Fetch-Site", "cross-site"),
            ("Content-Type", "application/json"),
        ],
        CHAT,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("http://app.example")
    );
    let r = send(
        &s,
        "POST",
        "/v1/chat/completions",
        &[
            ("Host", &host),
            ("Origin", "http://evil.example"),
            ("Content-Type", "application/json"),
        ],
        CHAT,
    );
    r.assert_error(403);
    for allowed in ["box.lan:8080", "chat.corp.example"] {
        let r = send(&s, "GET", "/v1/models", &[("Host", allowed)], "");
        assert_eq!(r.status, 200, "{allowed}: {}", r.text());
    }
    for refused in ["evil.example", "corp.example"] {
        let r = send(&s, "GET", "/v1/models", &[("Host", refused)], "");
        r.assert_error(403);
    }
    s.assert_alive();
}

#[test]
fn api_bodies_must_be_declared_json() {
    let mut s = Server::start(TINY, &["--ctx", "128"]);
    let host = own_host(&s);
    for kind in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ] {
        let r = send(
            &s,
            "POST",
            "/v1/chat/completions",
            &[("Host", &host), ("Content-Type", kind)],
            CHAT,
        );
        let msg = r.assert_error(415);
        assert!(msg.contains("Content-Type: application/json"), "{msg}");
    }
    let r = send(
        &s,
        "POST",
        "/v1/messages",
        &[("Host", &host), ("Content-Type", "text/plain")],
        CHAT,
    );
    assert_eq!(r.status, 415);
    assert_eq!(r.json()["type"], "error", "Anthropic's shape");
    // No Content-Type from a page (even the server's own): refused; from
    // curl or an SDK, which send no Origin: answered.
    let origin = format!("http://{host}");
    let r = send(
        &s,
        "POST",
        "/v1/chat/completions",
        &[("Host", &host), ("Origin", &origin)],
        CHAT,
    );
    r.assert_error(415);
    let r = send(&s, "POST", "/v1/chat/completions", &[("Host", &host)], CHAT);
    assert_eq!(r.status, 200, "{}", r.text());
    let r = send(
        &s,
        "POST",
        "/v1/chat/completions",
        &[
            ("Host", &host),
            ("Content-Type", "application/json; charset=utf-8"),
        ],
        CHAT,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    s.assert_alive();
}

#[test]
fn the_chat_page_runs_only_the_servers_own_script() {
    let s = Server::start(TINY, &["--ctx", "128"]);
    let page = s.request("GET", "/", &[], b"");
    assert_eq!(page.status, 200);
    let html = page.text();
    // Every <script> loads a file and has no body; no inline styles.
    let mut scripts = 0;
    for tag in html.split("<script").skip(1) {
        scripts += 1;
        let (open, rest) = tag.split_once('>').unwrap();
        assert!(open.contains("src="), "an inline script: <script{open}>");
        assert!(rest.starts_with("</script>"), "a script body: {rest:.80}");
    }
    assert_eq!(scripts, 1);
    assert!(!html.contains("<style") && !html.contains("style="));
    let csp = page.header("content-security-policy").unwrap();
    let script_src = csp
        .split(';')
        .map(str::trim)
        .find(|d| d.starts_with("script-src"))
        .unwrap_or_else(|| panic!("no script-src: {csp}"));
    assert_eq!(script_src, "script-src 'self'");
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    // The files it loads are served with the same policy.
    for (path, kind) in [
        ("/ui/chat.js", "text/javascript"),
        ("/ui/chat.css", "text/css"),
    ] {
        let r = s.request("GET", path, &[], b"");
        assert_eq!(r.status, 200, "{path}");
        assert!(r.header("content-type").unwrap().starts_with(kind));
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
        assert!(html.contains(&format!("\"{}\"", &path[1..])), "{path}");
    }
}
