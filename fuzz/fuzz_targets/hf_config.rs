//! Fuzz `config.json`: the input is the file's text. The harness adds an
//! empty `model.safetensors` and a small `tokenizer.json`, converts the
//! directory with `hearth_hf::convert_dir` (the hyper-parameter keys, the
//! layer pattern, RoPE and KV sharing, the vocabulary padding the config
//! asks for), reads the GGUF back and builds the model's
//! `hearth_model::Config` from it, as loading `-m DIR` does.
//!
//! Invariants: no panic, no runaway allocation or time; a config that
//! converts gives a GGUF our reader reads.

#![no_main]

use hearth_fuzz::{empty_safetensors, reread, tiny_tokenizer_json, Scratch};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    Scratch::with(|s| {
        s.write("config.json", data);
        s.write("model.safetensors", &empty_safetensors());
        s.write("tokenizer.json", &tiny_tokenizer_json());
        let Ok(w) = hearth_hf::convert_dir(s.dir()) else {
            return;
        };
        let file = reread(&w);
        if let Ok(cfg) = hearth_model::Config::from_gguf(&file) {
            let _ = format!("{cfg:?}");
        }
        let _ = hearth_fuzz::tokenizer::Tokenizer::from_gguf(&file);
    });
});
