//! Checkpoint directories the fuzz targets found or confirmed
//! (fuzz/fuzz_targets/hf_*.rs; docs/fuzz.md), kept as tests so the bugs
//! stay fixed: each must convert or fail with an error, quickly and
//! without allocating gigabytes.

use serde_json::{json, Value};
use std::path::Path;

/// A safetensors file of F32 tensors `(name, shape)`, values 0.
fn safetensors(tensors: &[(&str, &[u64])]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut offset = 0u64;
    for (name, shape) in tensors {
        let bytes = shape.iter().product::<u64>() * 4;
        header.insert(
            name.to_string(),
            json!({"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + bytes]}),
        );
        offset += bytes;
    }
    let header = serde_json::to_vec(&Value::Object(header)).unwrap();
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&header);
    out.resize(out.len() + offset as usize, 0);
    out
}

/// A small BPE `tokenizer.json`.
fn tokenizer_json() -> Value {
    json!({
        "added_tokens": [
            {"id": 0, "content": "<pad>", "special": true},
            {"id": 1, "content": "<eos>", "special": true},
            {"id": 2, "content": "<bos>", "special": true},
        ],
        "model": {"type": "BPE", "vocab": {"<pad>": 0, "<eos>": 1, "<bos>": 2, "a": 3}, "merges": []},
    })
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    std::fs::write(dir.join(name), bytes).unwrap();
}

fn convert(files: &[(&str, Vec<u8>)]) -> Result<gguf::GgufWriter, hearth_hf::HfError> {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "tokenizer.json",
        tokenizer_json().to_string().as_bytes(),
    );
    for (name, bytes) in files {
        write(dir.path(), name, bytes);
    }
    hearth_hf::convert_dir(dir.path())
}

fn gemma3_config() -> Value {
    json!({
        "model_type": "gemma3_text", "hidden_size": 8, "intermediate_size": 16,
        "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
        "head_dim": 4, "vocab_size": 4, "layer_types": ["full_attention"],
    })
}

/// One tensor named in two shards (or under two prefixes) became two GGUF
/// tensors of one name: a file our own reader then refuses ("appears
/// twice"). Found by `hf_safetensors` (a mutated sharded checkpoint).
#[test]
fn fuzz_one_tensor_in_two_shards_is_refused() {
    let norm: &[(&str, &[u64])] = &[("model.layers.0.self_attn.q_norm.weight", &[4])];
    let index = json!({"weight_map": {
        "model.layers.0.self_attn.q_norm.weight": "model-00001-of-00002.safetensors",
        "model.layers.0.self_attn.k_norm.weight": "model-00002-of-00002.safetensors",
    }});
    let err = convert(&[
        ("config.json", gemma3_config().to_string().into_bytes()),
        (
            "model.safetensors.index.json",
            index.to_string().into_bytes(),
        ),
        ("model-00001-of-00002.safetensors", safetensors(norm)),
        ("model-00002-of-00002.safetensors", safetensors(norm)),
    ])
    .expect_err("two tensors named blk.0.attn_q_norm.weight");
    assert!(
        err.to_string().contains("blk.0.attn_q_norm.weight"),
        "{err}"
    );
    // Two prefixes of one name in one file: the same.
    let err = convert(&[
        ("config.json", gemma3_config().to_string().into_bytes()),
        (
            "model.safetensors",
            safetensors(&[
                ("model.norm.weight", &[8]),
                ("model.language_model.norm.weight", &[8]),
            ]),
        ),
    ])
    .expect_err("two tensors named output_norm.weight");
    assert!(err.to_string().contains("output_norm.weight"), "{err}");
}

/// Gemma 4's `rope_freqs` has one value per rotated pair of the global head
/// dimension, and `global_head_dim: 2000000000` asked for a 4 GB vector.
/// Confirmed with `hf_config` (out of memory at -rss_limit_mb=2048).
#[test]
fn fuzz_huge_global_head_dim_is_refused() {
    let config = json!({
        "model_type": "gemma4_text", "hidden_size": 8, "intermediate_size": 16,
        "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
        "head_dim": 4, "global_head_dim": 2_000_000_000u64, "vocab_size": 4,
        "layer_types": ["sliding_attention", "full_attention"],
    });
    let err = convert(&[
        ("config.json", config.to_string().into_bytes()),
        ("model.safetensors", safetensors(&[])),
    ])
    .expect_err("an implausible head dimension");
    assert!(err.to_string().contains("global_head_dim"), "{err}");
}

/// Gemma 3n's per-layer table is padded with copies of its first row up to
/// `vocab_size`; a `vocab_size` of 10^12 asked for terabytes. Confirmed
/// with `hf_safetensors` (out of memory at -rss_limit_mb=2048).
#[test]
fn fuzz_per_layer_padding_past_the_table_is_refused() {
    let config = json!({
        "model_type": "gemma3n_text", "hidden_size": 8, "intermediate_size": [16, 16],
        "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
        "head_dim": 4, "vocab_size": 1_000_000_000_000u64, "vocab_size_per_layer_input": 11,
        "hidden_size_per_layer_input": 2, "layer_types": ["sliding_attention", "full_attention"],
        "num_kv_shared_layers": 1, "altup_num_inputs": 4, "laurel_rank": 2,
        "activation_sparsity_pattern": [0.95, 0.0],
    });
    let err = convert(&[
        ("config.json", config.to_string().into_bytes()),
        (
            "model.safetensors",
            safetensors(&[(
                "model.language_model.embed_tokens_per_layer.weight",
                &[11, 4],
            )]),
        ),
    ])
    .expect_err("padding far past the table");
    assert!(err.to_string().contains("vocab_size"), "{err}");
}
