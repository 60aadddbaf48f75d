//! Fuzz grammar compilation as a request's `response_format` / `grammar`
//! reaches it: `Grammars::compile` over a small Gemma-style vocabulary,
//! with the default size limit. The input's first line names the kind
//! (`json`, `regex`, `lark`, `gbnf`; anything else: a JSON Schema whose text
//! starts on that line); the rest is the source. A JSON Schema goes through
//! Hearth's own passes first (closing objects, expanding `uniqueItems`),
//! GBNF through the GBNF reader; then llguidance compiles it and computes
//! the first token mask.
//!
//! Invariants: no panic (llguidance's own panics are caught by `compile`
//! and tolerated here), no hang, no runaway memory.

#![no_main]

use hearth_engine::{Grammar, Grammars, MAX_GRAMMAR_BYTES};
use libfuzzer_sys::fuzz_target;
use std::sync::{Arc, OnceLock};

fn grammars() -> &'static Grammars {
    static G: OnceLock<Grammars> = OnceLock::new();
    G.get_or_init(|| {
        let tok = Arc::new(hearth_fuzz::tiny_tokenizer());
        let n = tok.vocab_size();
        Grammars::new(tok, n).expect("grammars over the tiny vocabulary")
    })
}

fuzz_target!(
    init: {
        hearth_fuzz::tolerate_caught_panics_in(&["llguidance", "derivre", "toktrie"]);
        let _ = grammars();
    },
    |data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (kind, rest) = text.split_once('\n').unwrap_or((text, ""));
    let grammar = match kind.trim() {
        "json" | "schema" => match serde_json::from_str(rest) {
            Ok(v) => Grammar::JsonSchema(v),
            Err(_) => return,
        },
        "json_object" => Grammar::JsonObject,
        "regex" => Grammar::Regex(rest.to_string()),
        "lark" => Grammar::Lark(rest.to_string()),
        "gbnf" => Grammar::Gbnf(rest.to_string()),
        _ => match serde_json::from_str(text) {
            Ok(v) => Grammar::JsonSchema(v),
            Err(_) => return,
        },
    };
    let _ = grammars().compile(&grammar, MAX_GRAMMAR_BYTES);
});
