//! Token ids identical to llama.cpp's `llama-tokenize` on the real Gemma 3
//! vocabulary (fixture from llama.cpp b11312, see tests/fixtures/tokenize.json).

use std::path::PathBuf;
use std::time::Instant;

use hearth_tokenizer::{ChatMessage, StreamDecoder, Tokenizer};
use serde::Deserialize;

#[derive(Deserialize)]
struct Fixture {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    name: String,
    text: String,
    ids_bos_special: Vec<u32>,
    ids_nobos_special: Vec<u32>,
    ids_bos_nospecial: Vec<u32>,
    ids_nobos_nospecial: Vec<u32>,
    pieces_nobos_special: Vec<String>,
}

fn model_path() -> PathBuf {
    if let Some(p) = std::env::var_os("HEARTH_MODEL") {
        return PathBuf::from(p);
    }
    let home = std::env::var_os("HEARTH_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/hearth")
        });
    home.join("models/gemma-3-270m-q4_k_m.gguf")
}

/// Load the real model's tokenizer, failing loudly (never skipping) when the
/// model has not been downloaded.
fn load() -> Tokenizer {
    let path = model_path();
    assert!(
        path.is_file(),
        "model file {} not found: run scripts/fetch-model.sh (or set HEARTH_MODEL)",
        path.display()
    );
    let t0 = Instant::now();
    let file = gguf::GgufFile::open(&path).expect("open GGUF");
    let t1 = Instant::now();
    let tok = Tokenizer::from_gguf(&file).expect("tokenizer from GGUF");
    let t2 = Instant::now();
    eprintln!(
        "GGUF open {:.1} ms, tokenizer construction {:.1} ms ({} tokens)",
        (t1 - t0).as_secs_f64() * 1e3,
        (t2 - t1).as_secs_f64() * 1e3,
        tok.vocab_size()
    );
    tok
}

fn fixture() -> Fixture {
    serde_json::from_str(include_str!("../fixtures/tokenize.json")).expect("fixture parses")
}

#[test]
fn ids_match_llamacpp() {
    let tok = load();
    let fx = fixture();
    assert!(!fx.cases.is_empty());
    let mut failures = Vec::new();
    for c in &fx.cases {
        let variants = [
            ("ids_bos_special", true, true, &c.ids_bos_special),
            ("ids_nobos_special", false, true, &c.ids_nobos_special),
            ("ids_bos_nospecial", true, false, &c.ids_bos_nospecial),
            ("ids_nobos_nospecial", false, false, &c.ids_nobos_nospecial),
        ];
        for (what, bos, special, want) in variants {
            let got = tok.encode(&c.text, bos, special);
            if &got != want {
                failures.push(format!(
                    "{} / {what}: got {got:?}, llama.cpp {want:?}",
                    c.name
                ));
            }
        }
        let pieces: Vec<&str> = c
            .ids_nobos_special
            .iter()
            .map(|&id| tok.token_text(id).unwrap_or("<invalid>"))
            .collect();
        if pieces != c.pieces_nobos_special {
            failures.push(format!("{}: vocab pieces differ: {pieces:?}", c.name));
        }
    }
    eprintln!(
        "{} cases x 4 variants checked, {} mismatches",
        fx.cases.len(),
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // A throughput note for the log (never asserted: tests do not time).
    let long: String = fx
        .cases
        .iter()
        .map(|c| c.text.as_str())
        .collect::<Vec<_>>()
        .join("\n")
        .repeat(50);
    let t0 = Instant::now();
    let n = tok.encode(&long, true, true).len();
    let dt = t0.elapsed().as_secs_f64();
    eprintln!(
        "encoded {} bytes -> {n} tokens in {:.1} ms ({:.2} MB/s)",
        long.len(),
        dt * 1e3,
        long.len() as f64 / dt / 1e6
    );
}

#[test]
fn decode_round_trips() {
    let tok = load();
    for c in fixture().cases {
        let text = tok.decode(&c.ids_nobos_nospecial, false);
        assert_eq!(text, c.text, "{}", c.name);
        // Streaming one id at a time gives the same text.
        let mut d = StreamDecoder::new(false);
        let mut streamed = String::new();
        for &id in &c.ids_nobos_nospecial {
            let piece = d.push(&tok, id);
            streamed.push_str(&piece);
        }
        streamed.push_str(&d.finish());
        assert_eq!(streamed, c.text, "{} (streamed)", c.name);
    }
}

#[test]
fn gemma_ids_and_chat() {
    let tok = load();
    assert_eq!(tok.vocab_size(), 262_144);
    assert_eq!(tok.bos_id(), Some(2));
    assert_eq!(tok.eos_id(), Some(1));
    assert_eq!(tok.token_id("<end_of_turn>"), Some(106));
    assert!(tok.is_eog(1) && tok.is_eog(106));
    assert!(!tok.is_eog(105));

    let tmpl = tok.chat_template();
    let ids = tok
        .encode_chat(&tmpl, &[ChatMessage::user("Hi")], true)
        .unwrap();
    // The same ids llama.cpp gives for the rendered text with BOS.
    let fx = fixture();
    let case = fx.cases.iter().find(|c| c.name == "chat_template").unwrap();
    assert_eq!(
        case.text,
        "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"
    );
    assert_eq!(ids, case.ids_bos_special);
}
