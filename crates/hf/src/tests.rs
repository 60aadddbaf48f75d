//! The converted checkpoints of the tiny fixtures against the GGUFs llama.cpp's
//! `convert_hf_to_gguf.py` wrote from the same directories.

use super::*;
use gguf::GgufFile;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tiny")
        .join(name)
}

fn converted(name: &str) -> GgufFile {
    let w = convert_dir(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    GgufFile::from_bytes(w.to_bytes()).unwrap()
}

/// Tensors identical in name, shape, type and bytes; every metadata key of
/// the reference present with the same value, except the ones listed.
fn same_as_reference(name: &str, ignored: &[&str]) {
    let ours = converted(name);
    let theirs = GgufFile::open(fixture(name).join("model-f32.gguf")).unwrap();
    let mut diffs = Vec::new();
    for t in theirs.tensors() {
        match ours.tensor(&t.name) {
            None => diffs.push(format!("missing tensor {}", t.name)),
            Some(o) if o.dims != t.dims || o.ty != t.ty => diffs.push(format!(
                "{}: {:?} {} vs {:?} {}",
                t.name, o.dims, o.ty, t.dims, t.ty
            )),
            Some(o) if ours.tensor_data(o) != theirs.tensor_data(t) => {
                diffs.push(format!("{}: data differs", t.name))
            }
            _ => {}
        }
    }
    for t in ours.tensors() {
        if theirs.tensor(&t.name).is_none() {
            diffs.push(format!("extra tensor {}", t.name));
        }
    }
    for (k, v) in theirs.metadata() {
        if ignored.contains(&k.as_str()) {
            continue;
        }
        match ours.get(k) {
            None => diffs.push(format!("missing key {k}")),
            Some(o) if o != v => {
                let show = |m: &MetaValue| format!("{m:?}").chars().take(200).collect::<String>();
                diffs.push(format!("{k}: {} vs {}", show(o), show(v)))
            }
            _ => {}
        }
    }
    assert!(diffs.is_empty(), "{name}:\n{}", diffs.join("\n"));
}

/// Keys that name the file rather than describe the model.
const NAMING: &[&str] = &["general.name", "general.size_label", "general.type"];

#[test]
fn gemma1_checkpoints_convert_like_llama_cpp() {
    same_as_reference("gemma1", NAMING);
    same_as_reference("codegemma", NAMING);
}

#[test]
fn gemma2_checkpoint_converts_like_llama_cpp() {
    same_as_reference("gemma2", NAMING);
}

#[test]
fn gemma3_checkpoint_converts_like_llama_cpp() {
    same_as_reference("gemma3", NAMING);
}

#[test]
fn gemma4_checkpoint_converts_like_llama_cpp() {
    same_as_reference("gemma4_e2b", NAMING);
}

#[test]
fn bad_directories_give_errors() {
    let dir = tempfile::tempdir().unwrap();
    assert!(!is_checkpoint_dir(dir.path()));
    assert!(matches!(convert_dir(dir.path()), Err(HfError::Io { .. })));
    std::fs::write(dir.path().join("config.json"), "{not json").unwrap();
    assert!(matches!(convert_dir(dir.path()), Err(HfError::Json { .. })));
    std::fs::write(dir.path().join("config.json"), r#"{"model_type": "llama"}"#).unwrap();
    let e = convert_dir(dir.path()).unwrap_err();
    assert!(e.to_string().contains("`llama`"), "{e}");
    let cfg = std::fs::read_to_string(fixture("gemma3").join("config.json")).unwrap();
    std::fs::write(dir.path().join("config.json"), cfg).unwrap();
    std::fs::write(
        dir.path().join("model.safetensors"),
        b"\x08\0\0\0\0\0\0\0{}garbage",
    )
    .unwrap();
    assert!(matches!(convert_dir(dir.path()), Err(HfError::Tensor(_))));
}

#[test]
fn gemma_variant_checkpoints_convert_like_llama_cpp() {
    for name in ["gemma3_linear8", "gemma4_31b", "gemma4_moe"] {
        same_as_reference(name, NAMING);
    }
}

/// The activation sparsity's quantile lands on the f32 transformers
/// computes (`Normal(0, 1).icdf(0.95)` = 1.6448535919189453), and the
/// edges are the infinities the converter writes.
#[test]
fn normal_quantile_matches_torch() {
    assert_eq!(crate::normal_quantile(0.95) as f32, 1.644_853_6_f32);
    assert!((crate::normal_quantile(0.5)).abs() < 1e-12);
    assert!((crate::normal_quantile(0.01) + 2.326_347_874_040_841).abs() < 1e-8);
    assert!((crate::normal_quantile(0.999) - 3.090_232_306_167_813_5).abs() < 1e-8);
    assert_eq!(crate::normal_quantile(0.0), f64::NEG_INFINITY);
}
