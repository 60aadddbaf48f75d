//! `hearth serve` hears: OpenAI `input_audio` content parts (the official
//! `openai` client, streamed and not) on the tiny Gemma 3n audio model, and
//! every bad clip a 400 that leaves the server serving.

use crate::serve_common;

use base64::Engine as _;
use serve_common::{python_with, Server};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

fn fixture(name: &str) -> String {
    format!("{ROOT}/tests/fixtures/{name}")
}

fn chat_with_audio(data: &str, format: &str) -> String {
    serde_json::json!({
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "Transcribe"},
            {"type": "input_audio", "input_audio": {"data": data, "format": format}},
        ]}],
        "max_tokens": 4,
        "temperature": 0,
    })
    .to_string()
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[test]
fn audio_parts_are_heard_and_bad_ones_refused() {
    let mut s = Server::start(&fixture("tiny/gemma3n_audio"), &["--ctx", "128", "-t", "2"]);
    let wav = std::fs::read(fixture("audio/sweep.wav")).unwrap();
    let ok = s.post("/v1/chat/completions", &chat_with_audio(&b64(&wav), "wav"));
    assert_eq!(ok.status, 200, "{}", ok.text());
    // The text, the clip's framing and its 24 audio tokens.
    assert!(ok.json()["usage"]["prompt_tokens"].as_u64().unwrap() > 24);

    let bad = [
        (b64(&wav[..30]), "wav", "decode"),
        (b64(b"RIFF but not really audio"), "wav", "decode"),
        (String::new(), "wav", "empty"),
        ("@@@".to_string(), "wav", "base64"),
        (b64(&wav), "flac", "not supported"),
        // 10 ms: shorter than one 32 ms frame.
        (b64(&wav[..44 + 320]), "wav", "at least"),
    ];
    for (data, format, says) in bad {
        let r = s.post("/v1/chat/completions", &chat_with_audio(&data, format));
        let msg = r.assert_error(400);
        assert!(msg.contains(says), "{format} {}: {msg}", data.len());
    }
    let no_field = r#"{"messages":[{"role":"user","content":[{"type":"input_audio"}]}]}"#;
    s.post("/v1/chat/completions", no_field).assert_error(400);
    s.assert_alive();

    let python = python_with(&[("openai", "openai>=1.40,<3")]);
    let out = Command::new(&python)
        .arg(Path::new(ROOT).join("crates/server/tests/openai_audio.py"))
        .env("HEARTH_BASE_URL", format!("http://{}/v1", s.addr))
        .env("HEARTH_AUDIO", fixture("audio/speech.wav"))
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_API_KEY")
        .output()
        .expect("run openai_audio.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "openai_audio.py failed\nstdout:\n{stdout}\nstderr:\n{}\nserver:\n{}",
        String::from_utf8_lossy(&out.stderr),
        s.stderr()
    );
    assert!(stdout.contains("all openai audio checks passed"));
    s.sigterm();
    assert!(s.wait_exit(Duration::from_secs(30)).success());
}

/// Gemma 4 hears through llama.cpp's files (the text model's GGUF and the
/// `mmproj` that holds its audio encoder): a clip's part takes one token
/// per 40 ms of it (the speech: 77), within `<|audio>` … `<audio|>`.
#[test]
fn gemma4_hears_through_its_mmproj() {
    let dir = fixture("tiny/gemma4_audio");
    let mmproj = format!("{dir}/mmproj-f32.gguf");
    let mut s = Server::start(
        &format!("{dir}/model-f32.gguf"),
        &["--mmproj", &mmproj, "--ctx", "256", "-t", "2"],
    );
    let wav = std::fs::read(fixture("audio/speech.wav")).unwrap();
    let ok = s.post("/v1/chat/completions", &chat_with_audio(&b64(&wav), "wav"));
    assert_eq!(ok.status, 200, "{}", ok.text());
    let prompt = ok.json()["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(prompt >= 77 + 2, "{prompt} prompt tokens");
    // The same request without the clip: exactly its 77 tokens and the two
    // around them fewer.
    let text_only = serde_json::json!({
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Transcribe"}]}],
        "max_tokens": 4,
        "temperature": 0,
    })
    .to_string();
    let plain = s.post("/v1/chat/completions", &text_only);
    assert_eq!(plain.status, 200, "{}", plain.text());
    let without = plain.json()["usage"]["prompt_tokens"].as_u64().unwrap();
    assert_eq!(prompt - without, 77 + 2, "{prompt} vs {without}");
    s.assert_alive();
    s.sigterm();
    assert!(s.wait_exit(Duration::from_secs(30)).success());
}
