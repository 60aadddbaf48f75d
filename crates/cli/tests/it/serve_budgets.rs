//! `hearth serve`'s per-request memory budget (`--request-memory`) and its
//! prep pool (`--prep-threads`, `--prep-queue`): each input that used to
//! become gigabytes (a token list with its pieces, a body of tiny JSON
//! values, a flat 16-bit PNG, megabytes of stop strings, a thousand
//! alternatives a token) is refused with the limit and its flag, or
//! answered within the budget; `file://` images that are not regular files
//! are refused without being opened; a full pool answers 503.

use crate::serve_common;

use base64::Engine as _;
use serde_json::json;
use serve_common::{peak_rss_kib, png_claiming, tiny_fixture, Server, TINY};
use std::time::Duration;

/// `n` digits: one token each, the most tokens a byte of text makes.
fn digits(n: usize) -> String {
    "0123456789".chars().cycle().take(n).collect()
}

/// `n` letters in a scrambled order, without a space.
fn letters(n: usize) -> String {
    (0..n)
        .map(|i| char::from(b'a' + ((i * 7 + i / 26) % 26) as u8))
        .collect()
}

/// A chat whose user turn shows the image at `url`.
fn chat_with_image(url: &str) -> String {
    json!({
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": url}},
        ]}],
        "max_tokens": 2,
    })
    .to_string()
}

#[test]
fn tokenize_with_pieces_is_refused_or_answered_within_the_budget() {
    let mut s = Server::start(TINY, &["--ctx", "64"]);
    let before = peak_rss_kib(s.child.id()) / 1024;
    // 4 MiB of text used to take 4.3 GiB as a JSON value per token.
    let big = json!({"content": digits(4 << 20), "with_pieces": true}).to_string();
    let r = s.post("/tokenize", &big);
    let head: String = r.text().chars().take(300).collect();
    assert_eq!(r.status, 413, "{head}");
    let msg = r.assert_error(413);
    assert!(
        msg.contains("--request-memory") && msg.contains("256.0 MiB"),
        "{msg}"
    );
    // 1 MiB is answered: a million tokens with their pieces, written
    // straight out.
    let n = 1 << 20;
    let r = s.post(
        "/tokenize",
        &json!({"content": digits(n), "with_pieces": true}).to_string(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let tokens = r.json()["tokens"].as_array().unwrap().len();
    assert_eq!(tokens, n);
    assert!(r.body.len() < 32 << 20, "{} bytes", r.body.len());
    let grew = peak_rss_kib(s.child.id()) / 1024 - before;
    eprintln!(
        "peak RSS grew {grew} MiB for a {n}-token answer of {} bytes",
        r.body.len()
    );
    assert!(grew < 256, "peak RSS grew {grew} MiB");
    s.assert_alive();
}

#[test]
fn a_body_of_tiny_json_values_is_refused_before_it_is_parsed() {
    let mut s = Server::start(TINY, &["--ctx", "64"]);
    let before = peak_rss_kib(s.child.id()) / 1024;
    // 4 MiB of `{"a":0}`: a quarter of a gigabyte as JSON values.
    let body = format!(
        r#"{{"messages":[{}]}}"#,
        vec![r#"{"a":0}"#; 500_000].join(",")
    );
    let msg = s.post("/v1/chat/completions", &body).assert_error(413);
    assert!(
        msg.contains("JSON") && msg.contains("--request-memory"),
        "{msg}"
    );
    let grew = peak_rss_kib(s.child.id()) / 1024 - before;
    assert!(grew < 64, "peak RSS grew {grew} MiB");
    s.assert_alive();
}

#[test]
fn stop_strings_and_alternatives_past_their_caps_are_refused() {
    let mut s = Server::start(TINY, &["--ctx", "4096"]);
    let chat = |extra: serde_json::Value| {
        let mut body = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body.to_string()
    };
    let many: Vec<String> = (0..1000).map(|i| format!("stop{i}")).collect();
    let msg = s
        .post("/v1/chat/completions", &chat(json!({"stop": many})))
        .assert_error(400);
    assert!(msg.contains("At most 16 stop strings"), "{msg}");
    let long = "x".repeat(1 << 20);
    let msg = s
        .post("/v1/chat/completions", &chat(json!({"stop": [long]})))
        .assert_error(400);
    assert!(msg.contains("at most 1024"), "{msg}");
    let msg = s
        .post(
            "/v1/chat/completions",
            &chat(json!({"logprobs": true, "top_logprobs": 1000})),
        )
        .assert_error(400);
    assert!(msg.contains("between 0 and 20"), "{msg}");
    // Each within its cap, together past the budget: 128 choices of the
    // whole context, each token with 20 alternatives.
    let msg = s
        .post(
            "/v1/chat/completions",
            &chat(json!({"n": 128, "logprobs": true, "top_logprobs": 20, "max_tokens": 4000})),
        )
        .assert_error(413);
    assert!(
        msg.contains("128 choice(s)") && msg.contains("--request-memory"),
        "{msg}"
    );
    let tools: Vec<_> = (0..129)
        .map(|i| json!({"type": "function", "function": {"name": format!("f{i}")}}))
        .collect();
    let msg = s
        .post("/v1/chat/completions", &chat(json!({"tools": tools})))
        .assert_error(400);
    assert!(msg.contains("at most 128"), "{msg}");
    s.assert_alive();
}

#[test]
fn a_picture_that_would_decode_past_the_budget_is_refused_from_its_header() {
    let dir = tiny_fixture("gemma3_vision");
    let mut s = Server::start(dir.to_str().unwrap(), &["--ctx", "128"]);
    let before = peak_rss_kib(s.child.id()) / 1024;
    // 7071 x 7071 is within the 50-megapixel bound; at 8 bytes a pixel its
    // decoding needs 400 MB before any conversion (16-bit RGBA; a flat
    // one compresses a thousandfold).
    let png = png_claiming(7071, 7071, 16, 6);
    let url = format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(&png)
    );
    let msg = s
        .post("/v1/chat/completions", &chat_with_image(&url))
        .assert_error(413);
    assert!(
        msg.contains("Decoding image 1") && msg.contains("--request-memory"),
        "{msg}"
    );
    let grew = peak_rss_kib(s.child.id()) / 1024 - before;
    assert!(grew < 64, "peak RSS grew {grew} MiB");
    // A larger budget lets the header through to the decoder (whose tiny
    // body then fails to decode: a 400, not a 413).
    let roomy = Server::start(
        dir.to_str().unwrap(),
        &["--ctx", "128", "--request-memory", "2G"],
    );
    let msg = roomy
        .post("/v1/chat/completions", &chat_with_image(&url))
        .assert_error(400);
    assert!(msg.contains("cannot decode"), "{msg}");
    s.assert_alive();
}

#[test]
fn file_images_that_are_not_regular_files_are_refused_without_blocking() {
    let dir = tiny_fixture("gemma3_vision");
    let mut s = Server::start(
        dir.to_str().unwrap(),
        &[
            "--ctx",
            "128",
            "--allow-file-images",
            "--body-limit",
            "1000000",
        ],
    );
    let tmp = std::env::temp_dir().join(format!("hearth-budgets-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let fifo = tmp.join("pipe.png");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let large = tmp.join("large.png");
    std::fs::write(&large, vec![0u8; 2_000_000]).unwrap();
    for (path, want) in [
        ("/dev/zero".into(), "not a regular file"),
        (fifo.display().to_string(), "not a regular file"),
        (tmp.display().to_string(), "not a regular file"),
        (large.display().to_string(), "--body-limit"),
    ] {
        let msg = s
            .post(
                "/v1/chat/completions",
                &chat_with_image(&format!("file://{path}")),
            )
            .assert_error(400);
        assert!(msg.contains(want), "{path}: {msg}");
        assert!(!msg.contains(&path), "the message echoes the path: {msg}");
    }
    std::fs::remove_dir_all(&tmp).unwrap();
    s.assert_alive();
}

#[test]
fn a_full_prep_pool_answers_503_and_health_still_answers() {
    // The real model's tokenizer: seconds for two megabytes of letters
    // without a space, whose pairs keep merging.
    let model = serve_common::real_model();
    let s = Server::start(
        model.to_str().unwrap(),
        &[
            "--ctx",
            "64",
            "--prep-threads",
            "1",
            "--prep-queue",
            "0",
            "--request-memory",
            "2G",
        ],
    );
    let addr = s.addr.clone();
    // Seconds of tokenizing on the one prep thread.
    let t0 = std::time::Instant::now();
    let slow = std::thread::spawn(move || {
        let body = json!({"content": letters(2 << 20)}).to_string();
        serve_common::try_request(
            &addr,
            "POST",
            "/tokenize",
            &[("Content-Type", "application/json")],
            body.as_bytes(),
        )
        .map(|r| r.status)
    });
    std::thread::sleep(Duration::from_millis(1000));
    let r = s.post("/tokenize", r#"{"content": "hello"}"#);
    let msg = r.assert_error(503);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert!(
        msg.contains("--prep-threads") && msg.contains("--prep-queue"),
        "{msg}"
    );
    assert_eq!(s.probe("/health").status, 200);
    assert_eq!(slow.join().unwrap().unwrap(), 200);
    eprintln!("the slow request took {:?}", t0.elapsed());
    // Free again.
    assert_eq!(s.post("/tokenize", r#"{"content": "hello"}"#).status, 200);
}
