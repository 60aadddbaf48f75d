//! LoRA adapters made by `peft` on the tiny Gemma 3 (tests/fixtures/tiny,
//! `tools/make_tiny_lora.py`) against transformers with the adapter
//! applied: from the PEFT directory and from llama.cpp's converted GGUF,
//! alone, together, at half scale, and chosen per sequence in one batch.

use crate::npy::read_npy_f32;
use hearth_engine::{Engine, KvType, LoraSpec, Precision, RunOptions};
use std::path::PathBuf;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny/gemma3")
}

fn tokens() -> Vec<u32> {
    let text = std::fs::read_to_string(dir().join("reference.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// The f32 model in f32 activations and cache, with `adapters` loaded
/// (`name[:scale]` in the fixture directory).
fn engine(adapters: &[&str], precision: Precision) -> Engine {
    let lora = adapters
        .iter()
        .map(|a| {
            format!("{}/{a}", dir().display())
                .parse::<LoraSpec>()
                .unwrap()
        })
        .collect();
    let kv_cache = Some(match precision {
        Precision::Exact => KvType::F32,
        Precision::Quantized => KvType::F16,
    });
    Engine::load(
        dir().join("model-f32.gguf"),
        &RunOptions {
            threads: Some(2),
            precision,
            kv_cache,
            lora,
            ..RunOptions::default()
        },
    )
    .unwrap()
}

/// Every position's logits of the reference prompt.
fn logits(engine: &Engine) -> Vec<f32> {
    let ids = tokens();
    let mut session = engine.session_with_ctx(ids.len());
    let mut all = Vec::new();
    session
        .score_images(&ids, &[], |_, row| all.extend_from_slice(row))
        .unwrap();
    all
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn golden(name: &str) -> Vec<f32> {
    read_npy_f32(&dir().join(name)).1
}

/// The logits, and the adapter's effect (logits with it less logits
/// without), equal transformers' within 1e-5.
fn check(adapters: &[&str], golden_name: &str) {
    let base = logits(&engine(&[], Precision::Exact));
    let got = logits(&engine(adapters, Precision::Exact));
    let (want_base, want) = (golden("logits.npy"), golden(golden_name));
    let effect: Vec<f32> = got.iter().zip(&base).map(|(g, b)| g - b).collect();
    let want_effect: Vec<f32> = want.iter().zip(&want_base).map(|(g, b)| g - b).collect();
    let (d_effect, d_logits, d_base) = (
        max_diff(&effect, &want_effect),
        max_diff(&got, &want),
        max_diff(&base, &want_base),
    );
    let moved = max_diff(&want, &want_base);
    eprintln!(
        "{adapters:?}: effect {d_effect:.2e}, logits {d_logits:.2e} (base {d_base:.2e}), the adapter moves logits {moved:.2}"
    );
    assert!(moved > 0.5, "the golden adapter changes too little to test");
    assert!(d_effect <= 1e-5, "{adapters:?}: effect off by {d_effect}");
    assert!(d_logits <= 1e-5, "{adapters:?}: logits off by {d_logits}");
}

#[test]
fn peft_directory_matches_transformers() {
    check(&["lora_a"], "logits_lora_a.npy");
    check(&["lora_b"], "logits_lora_b.npy");
}

#[test]
fn converted_gguf_matches_transformers() {
    check(&["lora_a-f32.gguf"], "logits_lora_a.npy");
    check(&["lora_b-f32.gguf"], "logits_lora_b.npy");
}

#[test]
fn two_adapters_and_a_scale_match_transformers() {
    check(&["lora_a", "lora_b-f32.gguf"], "logits_lora_ab.npy");
    check(&["lora_a-f32.gguf:0.5"], "logits_lora_a_half.npy");
}

/// An f16 GGUF adapter is the f32 one rounded: near, not equal.
#[test]
fn f16_gguf_adapter_is_near_the_f32_one() {
    let f32 = logits(&engine(&["lora_a-f32.gguf"], Precision::Exact));
    let f16 = logits(&engine(&["lora_a-f16.gguf"], Precision::Exact));
    let d = max_diff(&f32, &f16);
    assert!(d > 0.0 && d < 1e-2, "f16 adapter differs by {d}");
}

/// A request's `lora` list picks the adapters (the others off); the
/// default scales are the engine's until changed; a session whose
/// adapters change forgets what it held.
#[test]
fn adapters_are_chosen_per_request() {
    let engine = engine(&["lora_a", "lora_b"], Precision::Exact);
    let both = engine.adapters_for(None).unwrap();
    let only_b = engine.adapters_for(Some(&[(1, 1.0)])).unwrap();
    let none = engine.adapters_for(Some(&[])).unwrap();
    assert!(none.is_empty() && !only_b.is_empty() && both != only_b);
    assert_eq!(
        engine.adapters_for(Some(&[(0, 0.0), (1, 1.0)])).unwrap(),
        only_b
    );
    assert!(engine.adapters_for(Some(&[(2, 1.0)])).is_err());
    assert!(engine.adapters_for(Some(&[(0, f32::NAN)])).is_err());
    assert!(engine.adapters_for(Some(&[(0, 1e9)])).is_err());
    let ids = tokens();
    let mut session = engine.session_with_ctx(ids.len());
    assert_eq!(session.adapters(), &both);
    session.feed(&ids[..5]).unwrap();
    session.use_adapters(&both);
    assert_eq!(
        session.tokens().len(),
        5,
        "the same adapters keep the cache"
    );
    session.use_adapters(&only_b);
    assert!(session.tokens().is_empty(), "other adapters forget it");
    engine.set_lora_scales(&[(1, 1.0)]).unwrap();
    assert_eq!(engine.adapters_for(None).unwrap(), only_b);
    assert_eq!(engine.lora_adapters()[0].scale, 0.0);
    assert!(engine.set_lora_scales(&[(7, 1.0)]).is_err());
}

/// Files that are not adapters of this model are refused with what is
/// wrong, never applied in part.
#[test]
fn foreign_adapters_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let load = |model: &str, path: PathBuf| {
        let model = dir().join("..").join(model).join("model-f32.gguf");
        let lora = vec![LoraSpec { path, scale: 1.0 }];
        let opts = RunOptions {
            threads: Some(1),
            lora,
            ..RunOptions::default()
        };
        Engine::load(model, &opts)
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };
    let said = |model: &str, path: PathBuf, what: &str| {
        let e = load(model, path);
        assert!(e.contains(what), "{e}");
    };
    said("gemma3", dir().join("model-f32.gguf"), "not an adapter");
    said("gemma2", dir().join("lora_a-f32.gguf"), "for `gemma3`");
    said("gemma3", tmp.path().join("nope.gguf"), "nope.gguf");
    // A PEFT directory of what a GGUF adapter cannot say.
    let peft = tmp.path().join("dora");
    std::fs::create_dir(&peft).unwrap();
    let config = std::fs::read_to_string(dir().join("lora_a/adapter_config.json")).unwrap();
    let dora = config.replace("\"use_dora\": false", "\"use_dora\": true");
    std::fs::write(peft.join("adapter_config.json"), dora).unwrap();
    let weights = "adapter_model.safetensors";
    std::fs::copy(dir().join("lora_a").join(weights), peft.join(weights)).unwrap();
    said("gemma3", peft, "DoRA");
}

/// `hearth quantize --lora`'s merge: the merged model run without
/// adapters is the model run with them, to transformers' within 1e-5.
#[test]
fn a_merged_model_matches_the_adapter_applied() {
    let base = gguf::GgufFile::open(dir().join("model-f32.gguf")).unwrap();
    let specs: Vec<LoraSpec> = ["lora_a", "lora_b-f32.gguf"]
        .iter()
        .map(|a| format!("{}/{a}", dir().display()).parse().unwrap())
        .collect();
    let merged = hearth_engine::merge_adapters(&base, &specs).unwrap();
    let opts = RunOptions {
        threads: Some(2),
        precision: Precision::Exact,
        kv_cache: Some(KvType::F32),
        ..RunOptions::default()
    };
    let engine = Engine::from_file(std::sync::Arc::new(merged), &opts).unwrap();
    let d = max_diff(&logits(&engine), &golden("logits_lora_ab.npy"));
    assert!(d <= 1e-5, "merged: off by {d}");
    // An adapter of another model is refused, naming it.
    let other = gguf::GgufFile::open(dir().join("../gemma2/model-f32.gguf")).unwrap();
    let e = hearth_engine::merge_adapters(&other, &specs[1..]).unwrap_err();
    assert!(e.to_string().contains("lora_b-f32.gguf"), "{e}");
}
