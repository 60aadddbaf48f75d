//! Fuzz a checkpoint's safetensors files and `model.safetensors.index.json`
//! through `hearth_hf::convert_dir`, the only way they are read.
//!
//! The input is a checkpoint directory written as named sections
//! (`--- NAME` lines, see `hearth_fuzz::sections`). A `*.safetensors`
//! section whose text starts with `{` is a JSON header that the harness
//! frames (length prefix, a data section exactly as long as the offsets
//! say), so mutations of names, dtypes, shapes and offsets reach the
//! tensor mapping instead of failing the length check; other sections are
//! written as they are (raw safetensors bytes, the index, a config). A
//! small `config.json` (Gemma 3) and `tokenizer.json` are supplied unless
//! the input has its own.
//!
//! Invariants: no panic; a checkpoint that converts is a GGUF our reader
//! reads, every tensor inside the file, and its model config and tokenizer
//! load or fail with an error.

#![no_main]

use hearth_fuzz::{reread, tiny_tokenizer_json, write_checkpoint, Scratch};
use libfuzzer_sys::fuzz_target;

const CONFIG: &[u8] = br#"{"model_type": "gemma3_text", "hidden_size": 8, "intermediate_size": 16,
"num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4,
"max_position_embeddings": 64, "rms_norm_eps": 1e-6, "sliding_window": 8, "vocab_size": 13,
"layer_types": ["sliding_attention", "full_attention"], "rope_theta": 1000000.0,
"rope_local_base_freq": 10000.0, "query_pre_attn_scalar": 4}"#;

fuzz_target!(|data: &[u8]| {
    let tok = tiny_tokenizer_json();
    Scratch::with(|s| {
        write_checkpoint(
            s,
            data,
            &[("config.json", CONFIG), ("tokenizer.json", &tok)],
        );
        let Ok(w) = hearth_hf::convert_dir(s.dir()) else {
            return;
        };
        let file = reread(&w);
        for t in file.tensors() {
            assert_eq!(file.tensor_data(t).len() as u64, t.n_bytes, "{}", t.name);
        }
        let _ = hearth_model::Config::from_gguf(&file);
        let _ = hearth_fuzz::tokenizer::Tokenizer::from_gguf(&file);
    });
});
