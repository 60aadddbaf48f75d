//! Gemma 4 BPE (`tokenizer.ggml.model = gemma4`) against llama.cpp and
//! Hugging Face `tokenizers` on the repository's tiny Gemma 4 model, and
//! against llama.cpp on a vocabulary-only variant with newline tokens.
//! tests/make_gemma4_fixture.py made the fixtures and the variant GGUF.

use std::path::PathBuf;

use hearth_tokenizer::{StreamDecoder, Tokenizer, TokenizerModel};
use serde::Deserialize;

#[derive(Deserialize)]
struct Fixture {
    llama_eog_ids: Vec<u32>,
    #[serde(default)]
    hf_differs: Vec<String>,
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
    llama_round_trips: bool,
    hf_ids_bos: Option<Vec<u32>>,
    hf_ids_nobos: Option<Vec<u32>>,
}

fn repo_path(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

fn load(rel: &str) -> Tokenizer {
    let path = repo_path(rel);
    let file =
        gguf::GgufFile::open(&path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    Tokenizer::from_gguf(&file).expect("tokenizer from GGUF")
}

fn tiny() -> Tokenizer {
    load("tests/fixtures/tiny/gemma4_e2b/model-f32.gguf")
}

fn newlines() -> Tokenizer {
    load("tests/fixtures/tokenizer/gemma4_newlines.gguf")
}

fn fixture(json: &str) -> Fixture {
    serde_json::from_str(json).expect("fixture parses")
}

/// Compare every case and variant with llama.cpp (and Hugging Face where
/// the fixture has it); returns the number of cases that matched fully.
fn check_ids(tok: &Tokenizer, fx: &Fixture) -> usize {
    let mut failures = Vec::new();
    let mut matched = 0;
    for c in &fx.cases {
        let before = failures.len();
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
        // Hugging Face always matches special tokens in text.
        if !fx.hf_differs.contains(&c.name) {
            for (what, bos, want) in [
                ("hf_ids_bos", true, &c.hf_ids_bos),
                ("hf_ids_nobos", false, &c.hf_ids_nobos),
            ] {
                let Some(want) = want else { continue };
                let got = tok.encode(&c.text, bos, true);
                if &got != want {
                    failures.push(format!("{} / {what}: got {got:?}, HF {want:?}", c.name));
                }
            }
        }
        if failures.len() == before {
            matched += 1;
        }
    }
    eprintln!(
        "{matched}/{} cases match every reference variant",
        fx.cases.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    matched
}

fn check_round_trips(tok: &Tokenizer, fx: &Fixture) {
    let mut checked = 0;
    for c in fx.cases.iter().filter(|c| c.llama_round_trips) {
        let ids = tok.encode(&c.text, false, false);
        assert_eq!(tok.decode(&ids, false), c.text, "{}", c.name);
        let mut d = StreamDecoder::new(false);
        let mut streamed: String = ids.iter().map(|&id| d.push(tok, id)).collect();
        streamed.push_str(&d.finish());
        assert_eq!(streamed, c.text, "{} (streamed)", c.name);
        // With special tokens parsed they come back when rendered.
        let ids = tok.encode(&c.text, false, true);
        assert_eq!(tok.decode(&ids, true), c.text, "{} (special)", c.name);
        checked += 1;
    }
    eprintln!("{checked} cases round-trip as in llama.cpp");
    assert!(checked > 0);
}

#[test]
fn tiny_model_ids_match_references() {
    let tok = tiny();
    assert_eq!(tok.vocab().model, TokenizerModel::Gemma4);
    assert_eq!(tok.vocab_size(), 512);
    assert_eq!(tok.vocab().n_merges(), 178);
    let fx = fixture(include_str!("../fixtures/gemma4_tiny.json"));
    assert!(fx.cases.len() >= 30);
    assert!(fx.cases.iter().all(|c| c.hf_ids_bos.is_some()));
    let matched = check_ids(&tok, &fx);
    assert_eq!(matched, fx.cases.len());
}

#[test]
fn tiny_model_round_trips() {
    let tok = tiny();
    let fx = fixture(include_str!("../fixtures/gemma4_tiny.json"));
    check_round_trips(&tok, &fx);
    // Text that already holds U+2581 decodes to spaces in every reference.
    let c = fx
        .cases
        .iter()
        .find(|c| c.name == "literal_lower_block")
        .unwrap();
    assert!(!c.llama_round_trips);
    let ids = tok.encode(&c.text, false, false);
    assert_eq!(tok.decode(&ids, false), c.text.replace('\u{2581}', " "));
}

#[test]
fn tiny_model_specials() {
    let tok = tiny();
    let fx = fixture(include_str!("../fixtures/gemma4_tiny.json"));
    assert_eq!(tok.eog_ids(), fx.llama_eog_ids);
    assert_eq!(tok.bos_id(), Some(2));
    assert!(tok.add_bos());
    assert!(!tok.vocab().add_space_prefix);
}

#[test]
fn newline_runs_match_llamacpp() {
    let tok = newlines();
    let fx = fixture(include_str!("../fixtures/gemma4_newlines.json"));
    let matched = check_ids(&tok, &fx);
    assert_eq!(matched, fx.cases.len());
    check_round_trips(&tok, &fx);
}

#[test]
fn newline_variant_specials() {
    let tok = newlines();
    let fx = fixture(include_str!("../fixtures/gemma4_newlines.json"));
    // `<turn|>` ends a generation, `<|turn>` does not.
    assert_eq!(tok.eog_ids(), fx.llama_eog_ids);
    assert!(tok.is_eog(tok.token_id("<turn|>").unwrap()));
    assert!(!tok.is_eog(tok.token_id("<|turn>").unwrap()));
    // The file says add_bos_token = false; Gemma 4 overrides it.
    assert!(tok.add_bos());
}
