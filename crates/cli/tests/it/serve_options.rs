//! `hearth serve` loads through the same loader as the other commands: its
//! load options (`--quant`, `--precise`) do what they do in `complete`, and
//! every end-of-generation token ends a generation (forced here with
//! OpenAI's `logit_bias`). On the real model.

use crate::serve_common;

use serde_json::Value;
use serve_common::{real_model, Server};
use std::process::Command;

/// `hearth complete` greedy text for `prompt`, with `extra` flags.
fn complete(model: &str, prompt: &str, extra: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args([
            "complete", "-m", model, "-p", prompt, "-n", "32", "--temp", "0",
        ])
        .args(["-t", "1", "--json"])
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last = String::from_utf8(out.stdout).unwrap();
    let v: Value = serde_json::from_str(last.lines().last().unwrap()).unwrap();
    v["text"].as_str().unwrap().to_string()
}

/// The server's greedy text for `prompt`.
fn served(server: &Server, prompt: &str) -> String {
    let body = serde_json::json!({"prompt": prompt, "max_tokens": 32, "temperature": 0});
    let r = server.post("/v1/completions", &body.to_string());
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["choices"][0]["text"].as_str().unwrap().to_string()
}

fn meta(server: &Server) -> Value {
    let r = server.request("GET", "/v1/models", &[], b"");
    assert_eq!(r.status, 200);
    r.json()["data"][0]["meta"].clone()
}

const PROMPTS: [&str; 4] = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    "English: Good morning\nFrench:",
    "Here is a list of five fruits:\n1.",
];

#[test]
fn precise_changes_the_served_logits_as_it_does_in_complete() {
    let model = real_model();
    let m = model.to_str().unwrap();
    let mut differs = 0;
    let default_server = Server::start(m, &[]);
    assert_eq!(meta(&default_server)["precision"], "quantized");
    assert_eq!(meta(&default_server)["kv_cache"], "f16");
    let default_texts: Vec<String> = PROMPTS.iter().map(|p| served(&default_server, p)).collect();
    drop(default_server);
    let precise_server = Server::start(m, &["--precise"]);
    assert_eq!(meta(&precise_server)["precision"], "exact");
    assert_eq!(meta(&precise_server)["kv_cache"], "f32");
    for (p, default_text) in PROMPTS.iter().zip(&default_texts) {
        let precise_text = served(&precise_server, p);
        assert_eq!(
            &precise_text,
            &complete(m, p, &["--precise"]),
            "{p:?} with --precise"
        );
        assert_eq!(default_text, &complete(m, p, &[]), "{p:?} by default");
        if &precise_text != default_text {
            differs += 1;
        }
    }
    eprintln!(
        "--precise changed the greedy text of {differs} of {} prompts",
        PROMPTS.len()
    );
    assert!(differs > 0, "--precise made no difference to any prompt");
}

#[test]
fn serve_quant_serves_the_requantized_model() {
    let model = real_model();
    let server = Server::start(model.to_str().unwrap(), &["--quant", "q8_0"]);
    let meta = meta(&server);
    assert_eq!(meta["weights"], "Q8_0", "{meta}");
    assert_eq!(meta["requantized_to"], "q8_0", "{meta}");
    assert!(server.stderr().contains("Q8_0"), "{}", server.stderr());
    // And it answers.
    assert!(!served(&server, PROMPTS[0]).is_empty());
    let plain = Server::start(model.to_str().unwrap(), &[]);
    assert_eq!(self::meta(&plain)["weights"], "Q4_K_M");
}

#[test]
fn every_end_of_generation_token_ends_a_generation() {
    let model = real_model();
    let server = Server::start(model.to_str().unwrap(), &[]);
    let forced = |id: u32| {
        let body = format!(
            r#"{{"prompt":"Hello","max_tokens":8,"temperature":0,"logit_bias":{{"{id}":100}}}}"#
        );
        let r = server.post("/v1/completions", &body);
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()
    };
    // Gemma 3's `</s>` (212) and `<end_of_turn>` (106), and `<eos>` (1).
    for id in [212, 106, 1] {
        let v = forced(id);
        assert_eq!(v["choices"][0]["finish_reason"], "stop", "token {id}: {v}");
        assert_eq!(v["choices"][0]["text"], "", "token {id}: {v}");
        assert_eq!(v["usage"]["completion_tokens"], 1, "token {id}: {v}");
    }
    // An ordinary token forced runs to the limit.
    let v = forced(818);
    assert_eq!(v["choices"][0]["finish_reason"], "length", "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 8, "{v}");
    // A bias for a token outside the vocabulary is the client's mistake.
    let r = server.post(
        "/v1/completions",
        r#"{"prompt":"Hello","logit_bias":{"999999999":5}}"#,
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("logit_bias"), "{}", r.text());
}

/// `serve --draft`: the 270M Q4_K_M drafts for itself requantized to Q8_0
/// (as `complete --quant q8_0 --draft` does); greedy text is the same as the
/// plain server's at any per-request `speculative.p_min`, and llama.cpp's
/// `timings` count drafts that were kept. A draft of another vocabulary for
/// the one model served stops the start with the reason.
#[test]
fn serve_drafts_with_a_draft_model_and_refuses_another_vocabulary() {
    let model = real_model();
    let m = model.to_str().unwrap();
    let plain = Server::start(m, &["--quant", "q8_0"]);
    let spec = Server::start(m, &["--quant", "q8_0", "--draft", m, "--draft-max", "4"]);
    let (mut accepted, mut drafted_all, mut drafted_sure) = (0, 0, 0);
    for p in PROMPTS {
        let expected = served(&plain, p);
        assert_eq!(served(&spec, p), expected, "{p:?}");
        // llama.cpp's per-request least probability: 0 drafts every guess,
        // 1 only certain ones; the text stays the plain server's.
        for (p_min, drafted) in [(0.0, &mut drafted_all), (1.0, &mut drafted_sure)] {
            let body = serde_json::json!({"prompt": p, "max_tokens": 32, "temperature": 0,
                "speculative.p_min": p_min});
            let v = spec.post("/v1/completions", &body.to_string()).json();
            assert_eq!(
                v["choices"][0]["text"],
                expected.as_str(),
                "{p:?} at {p_min}"
            );
            *drafted += v["timings"]["draft_n"].as_u64().unwrap();
            accepted += v["timings"]["draft_n_accepted"].as_u64().unwrap();
        }
    }
    assert!(accepted > 0, "no draft was kept on four prompts");
    assert!(
        drafted_sure < drafted_all,
        "speculative.p_min 1 drafted {drafted_sure} tokens, 0 drafted {drafted_all}"
    );
    let r = spec.post("/v1/completions", r#"{"prompt":"a","speculative.p_min":2}"#);
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("speculative.p_min"), "{}", r.text());
    drop((plain, spec));

    let tiny = serve_common::TINY;
    let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["serve", "-m", tiny, "--draft", m, "--port", "0", "-t", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("vocabulary is not the model's: it has 262144 tokens and the model 512"),
        "{err}"
    );
}
