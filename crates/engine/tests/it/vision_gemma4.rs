//! Images in prompts on the tiny random Gemma 4 vision model (per-layer
//! embeddings, KV sharing, `use_bidirectional_attention = "vision"`): the
//! prompt ids and the text logits after prompts with one and two images of
//! different sizes agree with transformers
//! (`tests/fixtures/tiny/gemma4_vision`), from the checkpoint directory and
//! from the GGUF pair.

use crate::npy;

use hearth_engine::{Engine, MediaEmbedding, RunOptions};
use npy::{read_npy_f32, rel_err};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tiny/gemma4_vision")
        .join(name)
}

fn options(mmproj: Option<PathBuf>, image_tokens: Option<usize>) -> RunOptions {
    RunOptions {
        threads: Some(2),
        ctx: Some(512),
        mmproj,
        // transformers in f32: an f32 cache, so the tolerance measures the
        // image path.
        kv_cache: Some(hearth_engine::KvType::F32),
        image_tokens,
        ..RunOptions::default()
    }
}

fn reference() -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixture("reference.json")).unwrap()).unwrap()
}

fn check_prompts(engine: &Engine, golden: &str, tol: f32) {
    let reference = reference();
    let soft = reference["image_token"].as_u64().unwrap() as u32;
    for p in reference["prompts"].as_array().unwrap() {
        let images: Vec<MediaEmbedding> = p["images"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| {
                let bytes = std::fs::read(fixture(n.as_str().unwrap())).unwrap();
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
        // transformers swaps the image token for the pad (0) before the text
        // model; our prompts carry the pad from the start.
        let want_ids: Vec<u32> = p["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .map(|id| if id == soft { 0 } else { id })
            .collect();
        assert_eq!(ids, want_ids, "{}", p["prompt"]);
        let mut session = engine.session();
        let mut got = Vec::new();
        session
            .score_images(&ids, &placed, |_, row| got.extend_from_slice(row))
            .unwrap();
        let (shape, want) = read_npy_f32(&fixture(p[golden].as_str().unwrap()));
        assert_eq!(shape, [ids.len(), 515]);
        let err = rel_err(&got, &want);
        eprintln!(
            "{} {:?}: relative error {err:.2e}",
            p["prompt"], p["images"]
        );
        assert!(err < tol, "{}: relative error {err}", p["prompt"]);
    }
}

#[test]
fn image_prompts_match_transformers_from_the_checkpoint() {
    let engine = Engine::load(fixture(""), &options(None, None)).unwrap();
    // The checkpoint's processor sets the budget.
    assert_eq!(engine.image_tokens(), Some(70));
    check_prompts(&engine, "logits", 1e-4);
}

#[test]
fn image_prompts_match_transformers_from_gguf_and_mmproj() {
    let engine = Engine::load(
        fixture("model-f32.gguf"),
        &options(Some(fixture("mmproj-f32.gguf")), Some(70)),
    )
    .unwrap();
    check_prompts(&engine, "logits", 1e-4);
    let engine = Engine::load(
        fixture("model-f32.gguf"),
        &options(Some(fixture("mmproj-f16.gguf")), Some(70)),
    )
    .unwrap();
    check_prompts(&engine, "logits_f16proj", 1e-4);
}

#[test]
fn markers_and_mismatches() {
    let engine = Engine::load(
        fixture("model-f32.gguf"),
        &options(Some(fixture("mmproj-f32.gguf")), Some(70)),
    )
    .unwrap();
    let a = engine
        .encode_image(&std::fs::read(fixture("img_a.png")).unwrap())
        .unwrap();
    assert_eq!(a.tokens, 64);
    // Gemma 4's own marker, Gemma 3's and llama.cpp's place an image alike.
    let one = std::slice::from_ref(&a);
    let (ids, _) = engine
        .prompt(
            &hearth_engine::PromptRequest::text("Describe <|image|> it", true).with_media(one, &[]),
        )
        .map(|p| (p.ids, p.media))
        .unwrap();
    for m in ["<start_of_image>", "<__media__>"] {
        let p = format!("Describe {m} it");
        assert_eq!(
            engine
                .prompt(&hearth_engine::PromptRequest::text(&p, true).with_media(one, &[]))
                .map(|p| (p.ids, p.media))
                .unwrap()
                .0,
            ids,
            "{m}"
        );
    }
    // Another family's projector is refused.
    let gemma3 = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tiny/gemma3_vision/mmproj-f32.gguf");
    let err = Engine::load(fixture("model-f32.gguf"), &options(Some(gemma3), None)).unwrap_err();
    assert!(err.to_string().contains("another model"), "{err}");
    // A budget out of range.
    let err = Engine::load(
        fixture("model-f32.gguf"),
        &options(Some(fixture("mmproj-f32.gguf")), Some(10)),
    )
    .unwrap_err();
    assert!(err.to_string().contains("70 to 1120"), "{err}");
}
