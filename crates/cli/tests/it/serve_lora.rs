//! Two LoRA adapters on one server (the tiny Gemma 3 with `peft`'s
//! adapters, one as its PEFT directory and one as llama.cpp's converted
//! GGUF), chosen per request by `lora`, and set for every request by
//! `POST /lora-adapters`: each request's log-probabilities match
//! transformers with that request's adapters, however the slots and the
//! prompt cache held earlier requests' states.

use crate::npy::read_npy_f32;
use crate::serve_common::{tiny_fixture, Server};
use serde_json::{json, Value};

fn tokens() -> Vec<u32> {
    let text = std::fs::read_to_string(tiny_fixture("gemma3/reference.json")).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    let ids = v["tokens"].as_array().unwrap();
    ids.iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

/// The 20 largest log-probabilities of the golden's last position, largest
/// first.
fn golden_top(name: &str) -> Vec<f32> {
    let (shape, logits) = read_npy_f32(&tiny_fixture(&format!("gemma3/{name}")));
    let last = &logits[(shape[0] - 1) * shape[1]..];
    let max = last.iter().copied().fold(f32::MIN, f32::max);
    let lse = max + last.iter().map(|v| (v - max).exp()).sum::<f32>().ln();
    let mut lps: Vec<f32> = last.iter().map(|v| v - lse).collect();
    lps.sort_by(|a, b| b.total_cmp(a));
    lps.truncate(20);
    lps
}

/// The greedy token's log-probability, then the first token's 20 most
/// likely ones by text, largest first, for the reference prompt with
/// `extra` fields; and the prompt tokens the server took from a cache.
fn top(server: &Server, extra: Value) -> (Vec<f32>, u64) {
    let mut body = json!({"prompt": tokens(), "max_tokens": 1, "temperature": 0, "logprobs": 20});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    let r = server.post("/v1/completions", &body.to_string());
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let tops = v["choices"][0]["logprobs"]["top_logprobs"][0]
        .as_object()
        .unwrap()
        .clone();
    // The greedy token's first: the most likely, whatever its text.
    let chosen = v["choices"][0]["logprobs"]["token_logprobs"][0]
        .as_f64()
        .unwrap() as f32;
    let mut lps: Vec<f32> = tops.values().map(|x| x.as_f64().unwrap() as f32).collect();
    lps.sort_by(|a, b| b.total_cmp(a));
    lps.insert(0, chosen);
    let cached = v["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0);
    (lps, cached)
}

/// Every value of `got` is one of the golden's 20 largest (the answer maps
/// texts to values, and some of the tiny vocabulary's tokens share a text,
/// so some values are missing from it, never wrong).
fn matches(got: &[f32], golden: &str) {
    let want = golden_top(golden);
    assert!(got.len() >= 10, "{got:?}");
    assert!(
        (got[0] - want[0]).abs() < 1e-4,
        "{golden}: {got:?} vs {want:?}"
    );
    for g in got {
        let found = want.iter().any(|w| (g - w).abs() < 1e-4);
        assert!(found, "{golden}: {g} in {got:?} is not in {want:?}");
    }
}

#[test]
fn two_adapters_are_chosen_per_request_and_each_matches_its_golden() {
    let a = tiny_fixture("gemma3/lora_a");
    let b = tiny_fixture("gemma3/lora_b-f32.gguf");
    let server = Server::start(
        tiny_fixture("gemma3/model-f32.gguf").to_str().unwrap(),
        &[
            "--precise",
            "--kv-cache",
            "f32",
            "--parallel",
            "1",
            "--lora",
            a.to_str().unwrap(),
            "--lora",
            &format!("{}:0", b.display()),
        ],
    );
    let listed = server.probe("/lora-adapters").json();
    assert_eq!(listed[0]["id"], 0);
    assert_eq!(listed[0]["scale"], 1.0);
    assert_eq!(listed[1]["scale"], 0.0);
    assert!(listed[1]["path"]
        .as_str()
        .unwrap()
        .ends_with("lora_b-f32.gguf"));
    // The default: adapter 0 on, 1 off.
    let (got, _) = top(&server, json!({}));
    matches(&got, "logits_lora_a.npy");
    // The same prompt again reuses the slot's cache and still matches.
    let (got, cached) = top(&server, json!({}));
    assert!(cached > 0, "the same adapters reuse the cache");
    matches(&got, "logits_lora_a.npy");
    // Another adapter set never reuses the state of another.
    let (got, cached) = top(&server, json!({"lora": [{"id": 1, "scale": 1.0}]}));
    assert_eq!(cached, 0, "another adapter set reused a cache");
    matches(&got, "logits_lora_b.npy");
    let (got, _) = top(&server, json!({"lora": []}));
    matches(&got, "logits.npy");
    let both = json!({"lora": [{"id": 0, "scale": 1.0}, {"id": 1, "scale": 1.0}]});
    matches(&top(&server, both).0, "logits_lora_ab.npy");
    states_stay_with_their_adapters(&server);
    // The scales every request runs at, changed for the server.
    let r = server.post("/lora-adapters", r#"[{"id": 0, "scale": 0.5}]"#);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["success"], true);
    assert_eq!(server.probe("/lora-adapters").json()[1]["scale"], 0.0);
    matches(&top(&server, json!({})).0, "logits_lora_a_half.npy");
    // Chat completions carry the field too.
    let chat = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
                      "lora": [{"id": 1, "scale": 1}]});
    assert_eq!(
        server
            .post("/v1/chat/completions", &chat.to_string())
            .status,
        200
    );
    refusals_say_why(&server);
}

/// A prompt long enough for the prompt cache: adapter 0's state comes back
/// from it after adapter 1 and none held the slot, and gives what adapter 0
/// gave before; adapter 1 never starts from it.
fn states_stay_with_their_adapters(server: &Server) {
    let long: Vec<u32> = tokens().repeat(3);
    let asked = |lora: Value| {
        let body = json!({"prompt": long, "max_tokens": 1, "temperature": 0, "logprobs": 20, "lora": lora});
        let r = server.post("/v1/completions", &body.to_string());
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        let cached = v["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64();
        (v["choices"][0]["logprobs"].clone(), cached.unwrap_or(0))
    };
    let (first, _) = asked(json!([{"id": 0, "scale": 1}]));
    let (other, cached) = asked(json!([{"id": 1, "scale": 1}]));
    assert_eq!(cached, 0, "another adapter set reused a stored state");
    assert_ne!(first, other);
    asked(json!([]));
    let (again, cached) = asked(json!([{"id": 0, "scale": 1}]));
    assert!(cached >= 32, "adapter 0's state was not kept: {cached}");
    assert_eq!(again, first);
}

/// Unknown ids, bad scales and bodies are 400s that say why.
fn refusals_say_why(server: &Server) {
    for (path, body) in [
        (
            "/v1/completions",
            json!({"prompt": "x", "lora": [{"id": 5, "scale": 1}]}),
        ),
        (
            "/v1/completions",
            json!({"prompt": "x", "lora": [{"id": -1, "scale": 1}]}),
        ),
        (
            "/v1/completions",
            json!({"prompt": "x", "lora": [{"id": 0, "scale": 1e9}]}),
        ),
        ("/v1/completions", json!({"prompt": "x", "lora": {"id": 0}})),
        ("/lora-adapters", json!([{"id": 9, "scale": 1}])),
        ("/lora-adapters", json!({"id": 0, "scale": 1})),
    ] {
        let r = server.post(path, &body.to_string());
        let message = r.assert_error(400);
        assert!(!message.is_empty(), "{path} {body}");
    }
}

/// Scales set by `POST /lora-adapters` outlive an unload: the model loaded
/// again runs at them, not at its `--lora` scales.
#[test]
fn set_scales_outlive_an_unload() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        tiny_fixture("gemma3/model-f32.gguf"),
        dir.path().join("tiny.gguf"),
    )
    .unwrap();
    let a = tiny_fixture("gemma3/lora_a");
    let server = crate::serve_common::serve_models(dir.path(), &["--lora", a.to_str().unwrap()]);
    let scale = |s: &Server| s.probe("/lora-adapters?model=tiny").json()[0]["scale"].clone();
    assert_eq!(scale(&server), 1.0);
    let r = server.post("/lora-adapters?model=tiny", r#"[{"id": 0, "scale": 0.5}]"#);
    assert_eq!(r.status, 200, "{}", r.text());
    let unload = server.post("/api/generate", r#"{"model":"tiny","keep_alive":0}"#);
    assert_eq!(unload.json()["done_reason"], "unload", "{}", unload.text());
    let asked = std::time::Instant::now();
    while server.probe("/api/ps").json()["models"]
        .as_array()
        .is_some_and(|m| !m.is_empty())
    {
        assert!(asked.elapsed().as_secs() < 5, "keep_alive 0 did not unload");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(scale(&server), 0.5, "the reloaded model lost the set scale");
}
