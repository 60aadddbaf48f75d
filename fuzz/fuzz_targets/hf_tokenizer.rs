//! Fuzz a checkpoint's tokenizer files through
//! `hearth_hf::convert_tokenizer`: `tokenizer.json`, `tokenizer.model`,
//! `tokenizer_config.json` (added tokens, chat template, `add_eos_token`),
//! `added_tokens.json`, `chat_template.jinja` and the ids `config.json`
//! names. The input is the directory as named sections (`--- NAME` lines);
//! a Gemma 3 `config.json` is supplied unless the input has one (a Gemma 4
//! one selects the BPE path).
//!
//! Then the converted vocabulary is built into a `Tokenizer`, which encodes
//! and decodes a few texts and renders its chat template.
//!
//! Invariants: no panic; what converts reads back as a GGUF; every id the
//! tokenizer produces is inside its vocabulary.

#![no_main]

use hearth_fuzz::tokenizer::{ChatMessage, Tokenizer};
use hearth_fuzz::{reread, write_checkpoint, Scratch};
use libfuzzer_sys::fuzz_target;

const CONFIG: &[u8] = br#"{"model_type": "gemma3_text", "bos_token_id": 2, "eos_token_id": 1}"#;

fuzz_target!(|data: &[u8]| {
    Scratch::with(|s| {
        write_checkpoint(s, data, &[("config.json", CONFIG)]);
        let Ok(w) = hearth_hf::convert_tokenizer(s.dir()) else {
            return;
        };
        let file = reread(&w);
        let Ok(tok) = Tokenizer::from_gguf(&file) else {
            return;
        };
        let n = tok.vocab_size() as u32;
        for text in [
            "",
            "ab a\nb",
            "héllo <bos> wörld <end_of_turn>",
            "\u{2581}\u{0}\u{10ffff}",
        ] {
            for special in [false, true] {
                let ids = tok.encode(text, true, special);
                assert!(ids.iter().all(|&id| id < n), "id outside the vocabulary");
                let _ = tok.decode(&ids, special);
            }
        }
        let template = tok.chat_template();
        let _ = tok.encode_chat(&template, &[ChatMessage::user("hi")], true);
    });
});
