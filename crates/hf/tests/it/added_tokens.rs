//! Tokenizers saved the way transformers 5 saves them (`tokenizer.json` with
//! the added tokens, `tokenizer_config.json` without `added_tokens_decoder`),
//! for Gemma 2, 3, 3n and 4: the ids of 50 strings holding added and special
//! tokens equal `AutoTokenizer`'s (`tests/fixtures/tokenizer/t5`, made by
//! `tests/fixtures/tiny/tools/make_t5_layouts.py`), with and without the
//! original `tokenizer.model` beside them.

use gguf::GgufFile;
use serde_json::Value;
use std::path::{Path, PathBuf};
use tokenizer::Tokenizer;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

fn tokenizer_of(dir: &Path) -> Tokenizer {
    let w = hearth_hf::convert_tokenizer(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    Tokenizer::from_gguf(&GgufFile::from_bytes(w.to_bytes()).unwrap()).unwrap()
}

/// Every case's ids, or the list of cases that differ.
fn check(dir: &Path, golden: &Path) {
    let tok = tokenizer_of(dir);
    let cases: Value =
        serde_json::from_slice(&std::fs::read(golden.join("ids.json")).unwrap()).unwrap();
    let cases = cases["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 50);
    let mut wrong = Vec::new();
    let mut added_seen = 0;
    for c in cases {
        let text = c["text"].as_str().unwrap();
        let want: Vec<u32> = c["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        added_seen += want.iter().filter(|&&i| i >= 512).count();
        let got = tok.encode(text, true, true);
        if got != want {
            wrong.push(format!("{text:?}: ours {got:?}, transformers {want:?}"));
        }
    }
    assert!(added_seen > 20, "the cases hold too few added tokens");
    assert!(wrong.is_empty(), "{}:\n{}", dir.display(), wrong.join("\n"));
}

#[test]
fn added_tokens_of_tokenizer_json_match_transformers() {
    for family in ["gemma2", "gemma3", "gemma3n", "gemma4"] {
        let dir = fixtures().join("tokenizer/t5").join(family);
        check(&dir, &dir);
    }
}

/// The same directories with the base model's SentencePiece file beside
/// them (a fine-tune's repository keeps the original `tokenizer.model`).
#[test]
fn added_tokens_over_a_sentencepiece_model_match_transformers() {
    for (family, base) in [
        ("gemma2", "gemma2"),
        ("gemma3", "gemma3"),
        ("gemma3n", "gemma3n"),
    ] {
        let golden = fixtures().join("tokenizer/t5").join(family);
        let tmp = tempfile::tempdir().unwrap();
        for f in ["config.json", "tokenizer.json", "tokenizer_config.json"] {
            std::fs::copy(golden.join(f), tmp.path().join(f)).unwrap();
        }
        let spm = fixtures().join("tiny").join(base).join("tokenizer.model");
        std::fs::copy(spm, tmp.path().join("tokenizer.model")).unwrap();
        check(tmp.path(), &golden);
    }
}

/// The tokens' kinds as llama.cpp's converter gives them: special added
/// tokens are control tokens, the others user-defined; ids past the
/// SentencePiece pieces up to `vocab_size` are padding.
#[test]
fn added_tokens_take_their_kinds() {
    let dir = fixtures().join("tokenizer/t5/gemma3");
    let tok = tokenizer_of(&dir);
    use tokenizer::TokenType;
    assert_eq!(tok.token_id("<my_tag>"), Some(512));
    assert_eq!(tok.token_type(512), Some(TokenType::UserDefined));
    assert_eq!(tok.token_id("<|ctrl_a|>"), Some(514));
    assert_eq!(tok.token_type(514), Some(TokenType::Control));
    // Control tokens are text unless parsed as special.
    assert_ne!(tok.encode("<|ctrl_a|>", false, false), vec![514]);
    assert_eq!(tok.encode("<my_tag>", false, false), vec![512]);
}
