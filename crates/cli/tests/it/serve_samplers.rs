//! DRY, XTC and top-nσ through the server, on the real model: a loop-prone
//! prompt that loops without DRY and does not with it, every API that
//! carries the fields, and their refusals. (The samplers' choices against
//! llama.cpp's, on the same logits: `scripts/samplers-replay.sh`.)

use crate::serve_common;

use serde_json::{json, Value};
use serve_common::{real_model, Server};
use std::time::{Duration, Instant};

fn server() -> Server {
    let model = real_model();
    Server::start(
        model.to_str().unwrap(),
        &["--kv-cache", "f32", "--ctx", "2048", "--parallel", "1"],
    )
}

fn complete(server: &Server, prompt: &str, extra: &Value, max_tokens: u64) -> String {
    let mut body = json!({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    let r = server.post("/v1/completions", &body.to_string());
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["choices"][0]["text"].as_str().unwrap().to_string()
}

/// Word trigrams (split at ", ") that occur more than once.
fn repeated_trigrams(text: &str) -> usize {
    let words: Vec<&str> = text.split(", ").map(str::trim).collect();
    let grams: Vec<_> = words.windows(3).collect();
    grams
        .iter()
        .enumerate()
        .filter(|(i, g)| grams[..*i].contains(g))
        .count()
}

#[test]
fn dry_stops_a_loop_that_greedy_decoding_falls_into() {
    let server = server();
    let prompt = "The list of colors: red, blue, green, red, blue, green, red, blue,";
    let plain = complete(&server, prompt, &json!({}), 48);
    let dry = complete(&server, prompt, &json!({"dry_multiplier": 0.8}), 48);
    let (looped, broken) = (repeated_trigrams(&plain), repeated_trigrams(&dry));
    assert!(looped >= 10, "{looped}: {plain:?}");
    assert!(broken <= 2, "{broken}: {dry:?}");
    // Ollama's options carry the same fields to the same sampler.
    let r = server.post(
        "/api/generate",
        &json!({"prompt": prompt, "raw": true, "stream": false,
                "options": {"temperature": 0, "num_predict": 48, "dry_multiplier": 0.8}})
        .to_string(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["response"], dry.as_str());
    // And `hearth complete`'s flags.
    let model = real_model();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args([
            "complete",
            "-m",
            model.to_str().unwrap(),
            "-p",
            prompt,
            "-n",
            "48",
        ])
        .args([
            "--temp",
            "0",
            "--kv-cache",
            "f32",
            "--ctx",
            "2048",
            "--dry-multiplier",
            "0.8",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim_end_matches('\n'),
        dry
    );
    // So do chat completions (a different prompt, the same field).
    let chat = |extra: Value| {
        let mut body = json!({"messages": [{"role": "user", "content": prompt}],
                              "max_tokens": 24, "temperature": 0});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let r = server.post("/v1/chat/completions", &body.to_string());
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["choices"][0]["message"]["content"].clone()
    };
    assert_ne!(
        chat(json!({})),
        chat(json!({"dry_multiplier": 3.0, "dry_allowed_length": 0}))
    );
}

#[test]
fn bad_settings_are_refused_by_name_and_many_breakers_cost_little() {
    let server = server();
    let long = "e".repeat(39) + "\u{e9}";
    for (body, name) in [
        (json!({"xtc_probability": 2.0}), "xtc_probability"),
        (json!({"dry_multiplier": -1.0}), "dry_multiplier"),
        (json!({"dry_penalty_last_n": -5}), "dry_penalty_last_n"),
        (json!({"dry_allowed_length": -1}), "dry_allowed_length"),
        (
            json!({"dry_sequence_breakers": []}),
            "dry_sequence_breakers",
        ),
        (
            json!({"dry_multiplier": 1.0, "dry_sequence_breakers": vec!["x"; 65]}),
            "dry_sequence_breakers",
        ),
        (json!({"top_n_sigma": "many"}), ""),
    ] {
        let mut b = json!({"prompt": "Hi", "max_tokens": 2});
        for (k, v) in body.as_object().unwrap() {
            b[k] = v.clone();
        }
        let r = server.post("/v1/completions", &b.to_string());
        let msg = r.assert_error(400);
        assert!(msg.contains(name), "{name}: {msg}");
    }
    // The most breakers a request may give, each as long as llama.cpp
    // keeps and starting with a letter most tokens hold: each is a pass
    // over the vocabulary, made on the request's preparation thread.
    let breakers: Vec<String> = (0..64).map(|i| format!("{long}{i}")).collect();
    let t = Instant::now();
    let text = complete(
        &server,
        "The the the the the the the",
        &json!({"dry_multiplier": 1.0, "dry_sequence_breakers": breakers}),
        8,
    );
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    assert!(!text.is_empty());
    let props = server.request("GET", "/props", &[], b"").json();
    let p = &props["default_generation_settings"]["params"];
    assert_eq!(p["dry_multiplier"], 0.0);
    assert_eq!(p["dry_sequence_breakers"], json!(["\n", ":", "\"", "*"]));
    assert_eq!(p["xtc_threshold"], 0.1);
}
