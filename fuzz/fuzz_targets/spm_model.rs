//! Fuzz SentencePiece `tokenizer.model` (a protobuf `ModelProto`): the
//! input is the file. The harness adds a Gemma 3 `config.json`, converts
//! the tokenizer with `hearth_hf::convert_tokenizer` (which parses the
//! protobuf, see crates/hf/src/spm.rs), and builds and runs a `Tokenizer`.
//!
//! Invariants: no panic; what converts reads back; ids stay in range.

#![no_main]

use hearth_fuzz::tokenizer::Tokenizer;
use hearth_fuzz::{reread, Scratch};
use libfuzzer_sys::fuzz_target;

const CONFIG: &[u8] = br#"{"model_type": "gemma3_text"}"#;

fuzz_target!(|data: &[u8]| {
    Scratch::with(|s| {
        s.write("config.json", CONFIG);
        s.write("tokenizer.model", data);
        let Ok(w) = hearth_hf::convert_tokenizer(s.dir()) else {
            return;
        };
        let file = reread(&w);
        let Ok(tok) = Tokenizer::from_gguf(&file) else {
            return;
        };
        let n = tok.vocab_size() as u32;
        let ids = tok.encode("Hello, wörld!\n\tab <bos>", true, true);
        assert!(ids.iter().all(|&id| id < n), "id outside the vocabulary");
        let _ = tok.decode(&ids, true);
    });
});
