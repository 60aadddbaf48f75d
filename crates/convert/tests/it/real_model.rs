//! Type planning against the real Gemma 3 270M Q4_K_M file (made by
//! llama-quantize): its hidden size of 640 is not a multiple of 256, so this is
//! where the fallbacks (Q4_K → Q5_0, Q6_K → Q8_0) show.
//!
//! The file comes from `scripts/fetch-model.sh` (or `hearth pull gemma3-270m`);
//! `HEARTH_MODEL` may point at it instead. A missing file fails the tests:
//! they never pass by skipping.

use gguf::GgufFile;
use hearth_convert::plan::plan_types;
use hearth_convert::{quantize_gguf, FileType, ModelShape, Preset, TensorSpec};
use sha2::{Digest, Sha256};
use std::path::PathBuf;

fn real_model() -> GgufFile {
    let path = match std::env::var_os("HEARTH_MODEL") {
        Some(p) => PathBuf::from(p),
        None => std::env::var_os("HEARTH_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/hearth")
            })
            .join("models/gemma-3-270m-q4_k_m.gguf"),
    };
    assert!(
        path.is_file(),
        "the real model is missing at {}: run scripts/fetch-model.sh (or set HEARTH_MODEL)",
        path.display()
    );
    GgufFile::open(&path).unwrap()
}

fn specs(file: &GgufFile) -> Vec<TensorSpec> {
    file.tensors()
        .iter()
        .map(|t| TensorSpec {
            name: t.name.clone(),
            dims: t.dims.clone(),
            ty: t.ty,
        })
        .collect()
}

#[test]
fn q4_k_m_plan_reproduces_the_real_files_types() {
    let file = real_model();
    let specs = specs(&file);
    let planned = plan_types(&specs, FileType::Q4_K_M, &ModelShape::from_gguf(&file));
    let mut mismatches = Vec::new();
    for (s, ty) in specs.iter().zip(&planned) {
        if s.ty != *ty {
            mismatches.push(format!("{}: file {} planned {ty}", s.name, s.ty));
        }
    }
    assert!(mismatches.is_empty(), "{mismatches:#?}");
    // The mix really has every case: fallbacks, more-bits layers, Q8_0 embedding.
    for ty in ["Q4_K", "Q5_0", "Q6_K", "Q8_0", "F32"] {
        assert!(planned.iter().any(|t| t.name() == ty), "no {ty} tensor");
    }
}

#[test]
fn the_270m_preset_has_the_real_files_tensors_and_types() {
    let file = real_model();
    let mut real = specs(&file);
    let preset = Preset::gemma3_270m();
    let mut synth = preset.tensor_specs(262144);
    let shape = ModelShape {
        arch: "gemma3".into(),
        n_layer: preset.layers,
        n_head: preset.heads,
        n_head_kv: preset.kv_heads,
    };
    let types = plan_types(&synth, FileType::Q4_K_M, &shape);
    for (s, ty) in synth.iter_mut().zip(types) {
        s.ty = ty;
    }
    real.sort_by(|a, b| a.name.cmp(&b.name));
    synth.sort_by(|a, b| a.name.cmp(&b.name));
    assert_eq!(synth, real);
    for key in [
        "gemma3.embedding_length",
        "gemma3.block_count",
        "gemma3.feed_forward_length",
        "gemma3.attention.head_count",
        "gemma3.attention.head_count_kv",
        "gemma3.context_length",
        "gemma3.attention.sliding_window",
    ] {
        assert!(file.get_u64(key).is_some(), "{key}");
    }
    assert_eq!(
        file.get_u64("gemma3.embedding_length"),
        Some(preset.hidden as u64)
    );
    assert_eq!(
        file.get_u64("gemma3.context_length"),
        Some(preset.context_length as u64)
    );
    assert_eq!(
        file.get_u64("gemma3.attention.sliding_window"),
        Some(preset.sliding_window as u64)
    );
}

/// Requantizing the real file to Q5_K_M decodes Q4_K, Q5_0, Q6_K and Q8_0 and
/// encodes Q5_K, Q5_1, Q6_K and Q8_0: the result is llama.cpp's file, byte for
/// byte (its sha256 from `tests/fixtures/make_llama_quantize_hashes.py --real`).
#[test]
fn requantizing_the_real_model_matches_llama_cpp() {
    let bytes = quantize_gguf(&real_model(), FileType::Q5_K_M)
        .unwrap()
        .to_bytes();
    let sha: String = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        sha,
        "de0ca6e0d6daf8ca15f25a000dd7c1d4d6e05ad136029d9403ec0ff913682d1c"
    );
}
