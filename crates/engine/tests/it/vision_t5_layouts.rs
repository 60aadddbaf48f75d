//! Vision checkpoints laid out the way transformers 5 saves them, loaded
//! from the directory with default flags (only the cache in f32, as
//! transformers computes): a Gemma 3 whose image tokens are tokens added in
//! `tokenizer.json` past the SentencePiece pieces (no `tokenizer.model`,
//! no `added_tokens_decoder`, the image processor nested in
//! `processor_config.json`), and the tiny Gemma 4 with its processor file
//! nested (budget 70, no `preprocessor_config.json`). Goldens from
//! `tests/fixtures/tiny/tools/make_t5_layouts.py`.

use crate::npy;

use hearth_engine::{Engine, MediaEmbedding, RunOptions};
use npy::{read_npy_f32, rel_err};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn tiny(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tiny")
        .join(name)
}

fn options() -> RunOptions {
    RunOptions {
        threads: Some(2),
        ctx: Some(512),
        kv_cache: Some(hearth_engine::KvType::F32),
        ..RunOptions::default()
    }
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Places `images` (files under `image_dir`) in `prompt`, checks the ids
/// against transformers' (its soft token swapped for our pad where the
/// model family does that) and the logits of every position.
fn check(engine: &Engine, image_dir: &Path, p: &Value, golden: &Path, soft_to_pad: Option<u32>) {
    let images: Vec<MediaEmbedding> = p["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            let bytes = std::fs::read(image_dir.join(n.as_str().unwrap())).unwrap();
            engine.encode_image(&bytes).unwrap()
        })
        .collect();
    let (ids, placed) = engine
        .prompt(
            &hearth_engine::PromptRequest::text(p["prompt"].as_str().unwrap(), true)
                .with_media(&images, &[]),
        )
        .map(|p| (p.ids, p.media))
        .unwrap();
    let want_ids: Vec<u32> = p["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .map(|id| if Some(id) == soft_to_pad { 0 } else { id })
        .collect();
    assert_eq!(ids, want_ids, "{}", p["prompt"]);
    let mut session = engine.session();
    let mut got = Vec::new();
    session
        .score_images(&ids, &placed, |_, row| got.extend_from_slice(row))
        .unwrap();
    let (shape, want) = read_npy_f32(golden);
    assert_eq!(shape[0], ids.len());
    let err = rel_err(&got, &want);
    let abs = got
        .iter()
        .zip(&want)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    eprintln!(
        "{} {:?}: relative {err:.2e}, max |d| {abs:.2e}",
        p["prompt"], p["images"]
    );
    assert!(err < 1e-4, "{}: relative error {err}", p["prompt"]);
}

#[test]
fn gemma3_added_image_tokens_from_a_transformers5_directory() {
    let dir = tiny("gemma3_vision_t5");
    assert!(
        !dir.join("tokenizer.model").exists() && !dir.join("preprocessor_config.json").exists()
    );
    let engine = Engine::load(&dir, &options()).unwrap();
    assert_eq!(engine.image_tokens(), Some(16));
    let reference = json(&dir.join("reference.json"));
    for p in reference["prompts"].as_array().unwrap() {
        check(
            &engine,
            &dir,
            p,
            &dir.join(p["logits"].as_str().unwrap()),
            None,
        );
    }
    // The case: the base model's `tokenizer.model` kept beside the
    // `tokenizer.json` that adds the image tokens past its pieces.
    let with_spm = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, with_spm.path().join(path.file_name().unwrap())).unwrap();
    }
    std::fs::copy(
        tiny("gemma3").join("tokenizer.model"),
        with_spm.path().join("tokenizer.model"),
    )
    .unwrap();
    let engine = Engine::load(with_spm.path(), &options()).unwrap();
    let p = &reference["prompts"][1];
    check(
        &engine,
        &dir,
        p,
        &dir.join(p["logits"].as_str().unwrap()),
        None,
    );
}

#[test]
fn gemma4_budget_from_the_nested_processor_file() {
    let src = tiny("gemma4_vision");
    let t5 = tiny("gemma4_vision_t5");
    let dir = tempfile::tempdir().unwrap();
    for f in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ] {
        std::fs::copy(src.join(f), dir.path().join(f)).unwrap();
    }
    std::fs::copy(
        t5.join("processor_config.json"),
        dir.path().join("processor_config.json"),
    )
    .unwrap();
    let engine = Engine::load(dir.path(), &options()).unwrap();
    // 70 from the nested image processor, not the default 280.
    assert_eq!(engine.image_tokens(), Some(70));
    let reference = json(&t5.join("reference.json"));
    let soft = json(&src.join("reference.json"))["image_token"]
        .as_u64()
        .unwrap() as u32;
    check(
        &engine,
        &src,
        &reference,
        &t5.join("logits_0.npy"),
        Some(soft),
    );
}
