//! Fuzz the GBNF reader: the input is a llama.cpp grammar as a request's
//! `grammar` field carries it, converted to llguidance's Lark syntax with
//! `hearth_engine::gbnf_to_lark` (the lexer, rule splitting, escapes,
//! character classes, repetition bounds). Fast, so it runs far more inputs
//! than `grammar`, which also compiles the result.
//!
//! Invariants: no panic; the Lark text of a grammar that converts names a
//! `start` rule first.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(lark) = hearth_engine::gbnf_to_lark(src) {
        assert!(lark.starts_with("start: "), "no start rule in {lark:?}");
    }
});
