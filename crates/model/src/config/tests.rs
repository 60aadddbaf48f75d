//! Configs read from hand-made metadata: defaults and per-variant scales.

use super::*;
use gguf::{GgmlType, GgufWriter, MetaArray, MetaValue};

/// A metadata-only model file: `keys` under `arch.`, and a token
/// embedding of `vocab` rows (the vocabulary size comes from it).
fn file(arch: &str, hidden: u32, keys: &[(&str, MetaValue)]) -> GgufFile {
    let mut w = GgufWriter::new();
    w.set("general.architecture", MetaValue::String(arch.into()));
    for (k, v) in keys {
        w.set(format!("{arch}.{k}"), v.clone());
    }
    let vocab = 2u64;
    w.add_tensor(
        "token_embd.weight",
        &[hidden as u64, vocab],
        GgmlType::F32,
        vec![0; 4 * hidden as usize * vocab as usize],
    )
    .unwrap();
    GgufFile::from_bytes(w.to_bytes()).unwrap()
}

fn common(layers: u32, heads: u32, head_dim: u32) -> Vec<(&'static str, MetaValue)> {
    vec![
        ("embedding_length", MetaValue::U32(heads * 42)),
        ("block_count", MetaValue::U32(layers)),
        ("attention.head_count", MetaValue::U32(heads)),
        ("attention.head_count_kv", MetaValue::U32(heads / 2)),
        ("attention.key_length", MetaValue::U32(head_dim)),
        ("feed_forward_length", MetaValue::U32(64)),
        ("context_length", MetaValue::U32(4096)),
    ]
}

#[test]
fn gemma2_defaults_and_27b_scale() {
    let cfg = Config::from_gguf(&file("gemma2", 4 * 42, &common(4, 4, 32))).unwrap();
    assert_eq!(cfg.attn_softcap, Some(50.0));
    assert_eq!(cfg.final_softcap, Some(30.0));
    assert_eq!(cfg.layers[0].window, Some(4096));
    assert_eq!(cfg.layers[1].window, None);
    assert!((cfg.attn_scale - 32f32.powf(-0.5)).abs() < 1e-7);
    // 27B: 46 layers, queries scaled by (hidden / heads)^-1/2.
    let cfg = Config::from_gguf(&file("gemma2", 4 * 42, &common(46, 4, 32))).unwrap();
    assert!((cfg.attn_scale - 42f32.powf(-0.5)).abs() < 1e-7);
}

#[test]
fn gemma3_27b_scale_and_linear_rope() {
    let mut keys = common(62, 4, 32);
    keys.push(("attention.sliding_window", MetaValue::U32(1024)));
    keys.push(("rope.scaling.type", MetaValue::String("linear".into())));
    keys.push(("rope.scaling.factor", MetaValue::F32(8.0)));
    let cfg = Config::from_gguf(&file("gemma3", 4 * 42, &keys)).unwrap();
    assert!((cfg.attn_scale - 42f32.powf(-0.5)).abs() < 1e-7);
    assert_eq!(cfg.layers[5].window, None);
    assert_eq!(cfg.layers[5].rope_scale, 0.125);
    assert_eq!(cfg.layers[4].rope_scale, 1.0);
    assert_eq!(cfg.layers[4].rope_base, 10_000.0);
}

#[test]
fn gemma4_shared_layers_reuse_the_last_of_their_kind() {
    let mut keys = common(6, 4, 64);
    keys.extend([
        ("attention.sliding_window", MetaValue::U32(512)),
        ("attention.key_length_swa", MetaValue::U32(32)),
        ("attention.shared_kv_layers", MetaValue::U32(3)),
        (
            "attention.sliding_window_pattern",
            MetaValue::Array(MetaArray::Bool(vec![true, true, false, true, true, false])),
        ),
    ]);
    let cfg = Config::from_gguf(&file("gemma4", 4 * 42, &keys)).unwrap();
    let sources: Vec<_> = cfg.layers.iter().map(|l| l.kv_source).collect();
    assert_eq!(sources, [None, None, None, Some(1), Some(1), Some(2)]);
    assert_eq!(cfg.layers[0].head_dim, 32);
    assert_eq!(cfg.layers[2].head_dim, 64);
    assert_eq!(cfg.attn_scale, 1.0);
    assert!(cfg.is_kv_source(1) && cfg.is_kv_source(2) && !cfg.is_kv_source(0));

    // Every layer shared: nothing computes KV, a clear error.
    keys.retain(|(k, _)| *k != "attention.shared_kv_layers");
    keys.push(("attention.shared_kv_layers", MetaValue::U32(6)));
    let err = Config::from_gguf(&file("gemma4", 4 * 42, &keys)).unwrap_err();
    assert!(err.to_string().contains("shares KV"), "{err}");
}

/// A Gemma 3n metadata file: `keys` under `gemma3n.`, with the LAuReL
/// tensor its rank is read from.
fn gemma3n_file(keys: &[(&str, MetaValue)]) -> GgufFile {
    let mut w = GgufWriter::new();
    w.set("general.architecture", MetaValue::String("gemma3n".into()));
    for (k, v) in keys {
        w.set(format!("gemma3n.{k}"), v.clone());
    }
    let hidden = 4 * 42u64;
    w.add_tensor(
        "token_embd.weight",
        &[hidden, 2],
        GgmlType::F32,
        vec![0; 4 * 2 * hidden as usize],
    )
    .unwrap();
    w.add_tensor(
        "blk.0.laurel_l.weight",
        &[hidden, 8],
        GgmlType::F32,
        vec![0; 4 * 8 * hidden as usize],
    )
    .unwrap();
    GgufFile::from_bytes(w.to_bytes()).unwrap()
}

fn gemma3n_keys(layers: u32) -> Vec<(&'static str, MetaValue)> {
    let mut keys = common(layers, 4, 64);
    keys.extend([
        ("attention.sliding_window", MetaValue::U32(512)),
        ("embedding_length_per_layer_input", MetaValue::U32(16)),
        ("altup.num_inputs", MetaValue::U32(4)),
        ("attention.shared_kv_layers", MetaValue::U32(1)),
    ]);
    keys
}

#[test]
fn gemma3n_sparsity_pattern_and_altup_are_read_and_checked() {
    let mut keys = gemma3n_keys(6);
    let scale = vec![
        1.6448536,
        1.0,
        f32::NEG_INFINITY,
        f32::NEG_INFINITY,
        f32::NEG_INFINITY,
        f32::NEG_INFINITY,
    ];
    keys.push((
        "activation_sparsity_scale",
        MetaValue::Array(MetaArray::F32(scale)),
    ));
    let cfg = Config::from_gguf(&gemma3n_file(&keys)).unwrap();
    let sparsity: Vec<_> = cfg.layers.iter().map(|l| l.sparsity).collect();
    assert_eq!(
        sparsity,
        [Some(1.6448536), Some(1.0), None, None, None, None]
    );
    // No pattern key: four sliding layers, then a global one.
    let windows: Vec<_> = cfg.layers.iter().map(|l| l.window.is_some()).collect();
    assert_eq!(windows, [true, true, true, true, false, true]);
    assert_eq!(
        (cfg.altup_streams, cfg.laurel_rank, cfg.attn_scale),
        (4, 8, 1.0)
    );
    let sources: Vec<_> = cfg.layers.iter().map(|l| l.kv_source).collect();
    assert_eq!(sources, [None, None, None, None, None, Some(3)]);

    // Without the key: llama.cpp's first ten layers at the 95% quantile.
    let cfg = Config::from_gguf(&gemma3n_file(&gemma3n_keys(12))).unwrap();
    let sparse = cfg.layers.iter().filter(|l| l.sparsity.is_some()).count();
    assert_eq!(sparse, 10);

    // NaN, a wrong length and an absurd stream count are refused.
    for (key, value) in [
        (
            "activation_sparsity_scale",
            MetaValue::Array(MetaArray::F32(vec![f32::NAN; 6])),
        ),
        (
            "activation_sparsity_scale",
            MetaValue::Array(MetaArray::F32(vec![1.0; 5])),
        ),
        ("altup.num_inputs", MetaValue::U32(1000)),
    ] {
        let mut keys = gemma3n_keys(6);
        keys.retain(|(k, _)| *k != key);
        keys.push((key, value));
        assert!(Config::from_gguf(&gemma3n_file(&keys)).is_err(), "{key}");
    }
}
