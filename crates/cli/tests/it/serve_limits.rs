//! `hearth serve`'s limits: each refusal names its limit, comes fast, and
//! costs bounded memory — a client over its rate, connections past the
//! cap, too many images, a decompression-bomb PNG, a clip too long, a WAV
//! whose header claims 2^32 samples, and a model whose chat template loops,
//! floods or recurses.

use crate::serve_common;

use base64::Engine as _;
use gguf::{GgufFile, GgufWriter, MetaValue};
use serde_json::json;
use serve_common::{connect, peak_rss_kib, png_claiming, tiny_fixture, Server, TINY};
use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

/// A chat whose user turn carries these content parts after a line of text.
fn chat_with(parts: Vec<serde_json::Value>) -> String {
    let mut content = vec![json!({"type": "text", "text": "what is this?"})];
    content.extend(parts);
    json!({"messages": [{"role": "user", "content": content}], "max_tokens": 2, "temperature": 0})
        .to_string()
}

fn image_part(bytes: &[u8]) -> serde_json::Value {
    let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
    json!({"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{b64}")}})
}

fn audio_part(bytes: &[u8]) -> serde_json::Value {
    let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
    json!({"type": "input_audio", "input_audio": {"data": b64, "format": "wav"}})
}

/// A 16-bit mono WAV at `rate` holding `samples` samples of a tone, whose
/// header claims `claimed_bytes` of data (None: the truth).
fn wav(rate: u32, samples: usize, claimed_bytes: Option<u32>) -> Vec<u8> {
    let data: Vec<u8> = (0..samples)
        .flat_map(|i| (((i as f32 * 0.05).sin() * 8000.0) as i16).to_le_bytes())
        .collect();
    let mut w = b"RIFF".to_vec();
    w.extend_from_slice(&(36 + data.len() as u32).to_le_bytes());
    w.extend_from_slice(b"WAVEfmt ");
    w.extend_from_slice(&16u32.to_le_bytes());
    w.extend_from_slice(&1u16.to_le_bytes());
    w.extend_from_slice(&1u16.to_le_bytes());
    w.extend_from_slice(&rate.to_le_bytes());
    w.extend_from_slice(&(rate * 2).to_le_bytes());
    w.extend_from_slice(&2u16.to_le_bytes());
    w.extend_from_slice(&16u16.to_le_bytes());
    w.extend_from_slice(b"data");
    w.extend_from_slice(&claimed_bytes.unwrap_or(data.len() as u32).to_le_bytes());
    w.extend_from_slice(&data);
    w
}

#[test]
fn a_client_over_its_rate_gets_429_naming_the_limit() {
    let mut s = Server::start(TINY, &["--rate-limit", "3"]);
    for _ in 0..3 {
        assert_eq!(s.request("GET", "/v1/models", &[], b"").status, 200);
    }
    let r = s.request("GET", "/v1/models", &[], b"");
    let msg = r.assert_error(429);
    assert!(msg.contains("--rate-limit"), "{msg}");
    let wait: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=20).contains(&wait), "{wait}");
    // Probes are not counted against the rate.
    for _ in 0..5 {
        assert_eq!(s.request("GET", "/health", &[], b"").status, 200);
    }
    s.assert_alive();
}

#[test]
fn connections_past_the_cap_get_503_and_the_server_recovers() {
    let mut s = Server::start(TINY, &["--max-connections", "2"]);
    // Two idle connections hold both places (the header timeout is 30 s).
    // The start's last health check may still hold a place for a moment
    // (its task has not yet seen the close), which lets one probe in: such
    // a probe gets no answer within its read timeout, and the round is
    // tried again once every connection is closed.
    let mut refusal = None;
    for _ in 0..5 {
        let held: Vec<_> = (0..2).map(|_| connect(&s.addr).unwrap()).collect();
        std::thread::sleep(Duration::from_millis(200));
        let mut third = connect(&s.addr).unwrap();
        third
            .set_read_timeout(Some(Duration::from_secs(3)))
            .unwrap();
        let mut raw = Vec::new();
        let _ = third.read_to_end(&mut raw);
        drop((held, third));
        if let Ok(r) = serve_common::parse_response(&raw) {
            refusal = Some(r);
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let msg = refusal
        .expect("a third connection refused in one of 5 rounds")
        .assert_error(503);
    assert!(msg.contains("--max-connections"), "{msg}");
    // Once the held connections close, their places are free again.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(s.request("GET", "/health", &[], b"").status, 200);
    s.assert_alive();
}

#[test]
fn media_counts_and_sizes_are_refused_by_their_limits() {
    // Counted before anything is decoded, so a model without towers says so.
    let s = Server::start(TINY, &["--max-images", "1", "--max-clips", "1"]);
    let png = png_claiming(2, 2, 8, 2);
    let msg = s
        .post(
            "/v1/chat/completions",
            &chat_with(vec![image_part(&png), image_part(&png)]),
        )
        .assert_error(400);
    assert!(
        msg.contains("--max-images") && msg.contains("2 images"),
        "{msg}"
    );
    let clip = wav(16_000, 1_600, None);
    let msg = s
        .post(
            "/v1/chat/completions",
            &chat_with(vec![audio_part(&clip), audio_part(&clip)]),
        )
        .assert_error(400);
    assert!(msg.contains("--max-clips"), "{msg}");

    // A body over --body-limit is 413 naming the flag.
    let small = Server::start(TINY, &["--body-limit", "1000"]);
    let msg = small
        .post(
            "/v1/chat/completions",
            &chat_with(vec![image_part(&[0u8; 2000])]),
        )
        .assert_error(413);
    assert!(msg.contains("--body-limit"), "{msg}");
}

#[test]
fn a_decompression_bomb_png_is_refused_in_under_a_second() {
    let dir = tiny_fixture("gemma3_vision");
    let mut s = Server::start(dir.to_str().unwrap(), &["--ctx", "128"]);
    let before = peak_rss_kib(s.child.id());
    for (w, h, want) in [
        (100_000, 100_000, "pixels on a side"),
        (10_000, 10_000, "pixels"),
    ] {
        let t0 = Instant::now();
        let msg = s
            .post(
                "/v1/chat/completions",
                &chat_with(vec![image_part(&png_claiming(w, h, 8, 2))]),
            )
            .assert_error(400);
        let took = t0.elapsed();
        assert!(
            msg.contains(want) && msg.contains(&format!("{w}x{h}")),
            "{msg}"
        );
        assert!(took < Duration::from_secs(1), "{w}x{h} took {took:?}");
        eprintln!("{w}x{h} PNG refused in {took:?}: {msg}");
    }
    // --max-image-pixels lowers the bound.
    let low = Server::start(
        dir.to_str().unwrap(),
        &["--ctx", "128", "--max-image-pixels", "1000"],
    );
    let msg = low
        .post(
            "/v1/chat/completions",
            &chat_with(vec![image_part(&png_claiming(40, 40, 8, 2))]),
        )
        .assert_error(400);
    assert!(msg.contains("1000 pixels"), "{msg}");
    let after = peak_rss_kib(s.child.id());
    eprintln!("peak RSS {before} KiB before the bombs, {after} KiB after");
    assert!(
        after < before + 64 * 1024,
        "peak RSS grew {before} -> {after} KiB"
    );
    s.assert_alive();
}

#[test]
fn a_wav_claiming_2_pow_32_samples_is_bounded_and_a_long_clip_is_refused() {
    let dir = tiny_fixture("gemma3n_audio");
    let mut s = Server::start(
        dir.to_str().unwrap(),
        &["--ctx", "256", "--max-clip-seconds", "60"],
    );
    let before = peak_rss_kib(s.child.id());
    // The header says 0xFFFFFFFF bytes (2^31 samples of 16 bits; a streamed
    // WAV's placeholder looks the same): only the second that is there is
    // read.
    let t0 = Instant::now();
    let r = s.post(
        "/v1/chat/completions",
        &chat_with(vec![audio_part(&wav(16_000, 16_000, Some(u32::MAX)))]),
    );
    let took = t0.elapsed();
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(took < Duration::from_secs(1), "took {took:?}");
    // A clip that is really longer than the limit is refused, by its length.
    let t0 = Instant::now();
    let msg = s
        .post(
            "/v1/chat/completions",
            &chat_with(vec![audio_part(&wav(8_000, 61 * 8_000, None))]),
        )
        .assert_error(400);
    let refused = t0.elapsed();
    assert!(msg.contains("61.0 s") && msg.contains("60 s"), "{msg}");
    assert!(refused < Duration::from_secs(1), "took {refused:?}");
    let after = peak_rss_kib(s.child.id());
    eprintln!("lying WAV answered in {took:?}, long clip refused in {refused:?}; peak RSS {before} -> {after} KiB");
    assert!(
        after < before + 64 * 1024,
        "peak RSS grew {before} -> {after} KiB"
    );
    s.assert_alive();
}

/// The tiny model with its chat template replaced by `template`.
fn with_template(template: &str, out: &Path) {
    let src = GgufFile::open(Path::new(TINY)).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in src.metadata() {
        w.set(k.clone(), v.clone());
    }
    w.set(
        "tokenizer.chat_template",
        MetaValue::String(template.into()),
    );
    for t in src.tensors() {
        w.add_tensor(t.name.clone(), &t.dims, t.ty, src.tensor_data(t).to_vec())
            .unwrap();
    }
    std::fs::write(out, w.to_bytes()).unwrap();
}

#[test]
fn hostile_chat_templates_are_stopped_in_under_a_second() {
    let dir = std::env::temp_dir().join(format!("hearth-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [
        (
            "loop",
            "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
            "steps",
        ),
        (
            "flood",
            "{% for a in range(100000) %}{% for b in range(100000) %}{{ messages[0].content }}{% endfor %}{% endfor %}",
            "",
        ),
        (
            "recursion",
            "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
            "",
        ),
        (
            "huge value",
            "{% set one = [1] %}{{ one * 30000000 }}",
            "wrote more than",
        ),
        // Printed by `~` and by `join`, not by `{{ }}` (issue 90).
        (
            "huge concat",
            "{% set one = [1] %}{{ ((one * 100000000) ~ '') | length }}",
            "prints a value of more than",
        ),
        (
            "huge join",
            "{% set mb = ['x' * 1000000] %}{{ (mb * 10000) | join | length }}",
            "prints a value of more than",
        ),
        (
            "huge repetition",
            "{{ (10**12 * messages) + messages }}",
            "too large",
        ),
    ];
    let flood = "x".repeat(100_000);
    for (name, template, want) in cases {
        let path = dir.join(format!("{name}.gguf"));
        with_template(template, &path);
        let mut s = Server::start(path.to_str().unwrap(), &[]);
        let before = peak_rss_kib(s.child.id());
        let body = json!({"messages": [{"role": "user", "content": flood}], "max_tokens": 2});
        let t0 = Instant::now();
        let msg = s
            .post("/v1/chat/completions", &body.to_string())
            .assert_error(400);
        let took = t0.elapsed();
        assert!(
            msg.contains("chat template") && msg.contains(want),
            "{name}: {msg}"
        );
        assert!(took < Duration::from_secs(1), "{name} took {took:?}");
        let after = peak_rss_kib(s.child.id());
        eprintln!("{name}: refused in {took:?}, peak RSS {before} -> {after} KiB: {msg}");
        assert!(
            after < before + 128 * 1024,
            "{name}: peak RSS {before} -> {after} KiB"
        );
        s.assert_alive();
    }
    // A template that stores a namespace in itself would crash the renderer:
    // it is set aside at load, said so, and the model chats in the
    // built-in format.
    let path = dir.join("cycle.gguf");
    with_template(
        "{% set ns = namespace(n=0) %}{% set ns.n = ns %}{{ ns }}",
        &path,
    );
    let mut s = Server::start(path.to_str().unwrap(), &[]);
    let body = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2});
    let reply = s.post("/v1/chat/completions", &body.to_string());
    assert_eq!(reply.status, 200, "{}", reply.text());
    s.assert_alive();
    let log = s.stderr();
    assert!(
        log.contains("chat template is not used") && log.contains("namespace inside a namespace"),
        "{log}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn errors_never_echo_a_file_path() {
    let dir = std::env::temp_dir().join(format!("hearth-noecho-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let secret = dir.join("secret-name.png");
    let s = Server::start(TINY, &["--allow-file-images"]);
    let url = format!("file://{}", secret.display());
    let body = chat_with(vec![
        json!({"type": "image_url", "image_url": {"url": url}}),
    ]);
    let msg = s.post("/v1/chat/completions", &body).assert_error(400);
    assert!(!msg.contains("secret-name"), "{msg}");
    let mut c = connect(&s.addr).unwrap();
    c.write_all(
        b"GET /v1/models/..%2F..%2Fetc%2Fpasswd HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    let mut raw = Vec::new();
    let _ = c.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw);
    assert!(!text.contains(env!("CARGO_MANIFEST_DIR")), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
