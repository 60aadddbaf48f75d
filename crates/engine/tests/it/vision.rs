//! Images in prompts, end to end on the tiny random Gemma 3 vision model:
//! the prompt ids and the text logits after image prompts agree with
//! transformers (`tests/fixtures/tiny/gemma3_vision`), from the checkpoint
//! directory and from the GGUF pair (text model + mmproj); a cached prefix
//! never carries one picture's tokens into another's prompt.

use crate::npy;

use hearth_engine::{Engine, EngineError, MediaEmbedding, PromptMedia, RunOptions};
use npy::{read_npy_f32, rel_err};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tiny/gemma3_vision")
        .join(name)
}

fn options(mmproj: Option<PathBuf>) -> RunOptions {
    RunOptions {
        threads: Some(2),
        ctx: Some(256),
        mmproj,
        // transformers in f32: an f32 cache, so the tolerance measures the
        // image path.
        kv_cache: Some(hearth_engine::KvType::F32),
        ..RunOptions::default()
    }
}

fn checkpoint() -> Engine {
    Engine::load(fixture(""), &options(None)).unwrap()
}

fn gguf_pair() -> Engine {
    Engine::load(
        fixture("model-f32.gguf"),
        &options(Some(fixture("mmproj-f32.gguf"))),
    )
    .unwrap()
}

fn reference() -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixture("reference.json")).unwrap()).unwrap()
}

fn image(engine: &Engine, name: &str) -> MediaEmbedding {
    engine
        .encode_image(&std::fs::read(fixture(name)).unwrap())
        .unwrap()
}

/// Every position's logits of `ids`.
fn logits(engine: &Engine, ids: &[u32], images: &[PromptMedia]) -> Vec<f32> {
    let mut session = engine.session();
    let mut all = Vec::new();
    session
        .score_images(ids, images, |_, row| all.extend_from_slice(row))
        .unwrap();
    all
}

fn check_prompts(engine: &Engine, golden: &str) {
    let reference = reference();
    for p in reference["prompts"].as_array().unwrap() {
        let images: Vec<MediaEmbedding> = p["images"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| image(engine, n.as_str().unwrap()))
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
            .collect();
        assert_eq!(ids, want_ids, "{}", p["prompt"]);
        let got = logits(engine, &ids, &placed);
        let (shape, want) = read_npy_f32(&fixture(p[golden].as_str().unwrap()));
        assert_eq!(shape, [ids.len(), 512]);
        let err = rel_err(&got, &want);
        eprintln!(
            "{} {:?}: relative error {err:.2e}",
            p["prompt"], p["images"]
        );
        assert!(err < 1e-4, "{}: relative error {err}", p["prompt"]);
    }
}

#[test]
fn image_prompts_match_transformers_from_the_checkpoint() {
    check_prompts(&checkpoint(), "logits");
}

#[test]
fn image_prompts_match_transformers_from_gguf_and_mmproj() {
    check_prompts(&gguf_pair(), "logits_f16proj");
}

#[test]
fn a_cached_prefix_is_not_reused_across_pictures() {
    let engine = gguf_pair();
    let (a, b) = (image(&engine, "img_a.png"), image(&engine, "img_b.png"));
    assert!(!a.cached);
    // The second request for the same file costs no encoder time.
    assert!(image(&engine, "img_a.png").cached);
    let prompt = "Describe <start_of_image> the license";
    let (ids_a, imgs_a) = engine
        .prompt(&hearth_engine::PromptRequest::text(prompt, true).with_media(&[a], &[]))
        .map(|p| (p.ids, p.media))
        .unwrap();
    let (ids_b, imgs_b) = engine
        .prompt(&hearth_engine::PromptRequest::text(prompt, true).with_media(&[b], &[]))
        .map(|p| (p.ids, p.media))
        .unwrap();
    assert_eq!(ids_a, ids_b, "the same ids, different pictures");
    let mut session = engine.session();
    session.feed_images(&ids_a, &imgs_a).unwrap();
    let (evaluated, reused) = session.feed_images(&ids_b, &imgs_b).unwrap();
    assert_eq!(reused, imgs_b[0].pos, "reuse stops at the picture");
    assert_eq!(evaluated, ids_b.len() - reused);
    let after_switch = session.last_logits().unwrap().to_vec();
    let fresh = logits(&engine, &ids_b, &imgs_b);
    let last = &fresh[fresh.len() - 512..];
    // The fresh prefill takes the batched float product and the switched
    // one, a few tokens long, the row-by-row one: equal up to rounding.
    let d = after_switch
        .iter()
        .zip(last)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(
        d < 1e-4,
        "after the switch the logits differ from a fresh prefill by {d}"
    );
    // The same picture again reuses everything but the last token.
    let (evaluated, _) = session.feed_images(&ids_b, &imgs_b).unwrap();
    assert_eq!(evaluated, 1);
}

#[test]
fn image_errors_are_clear() {
    let engine = gguf_pair();
    let a = image(&engine, "img_a.png");
    let err = engine
        .prompt(
            &hearth_engine::PromptRequest::text("no marker here", true)
                .with_media(std::slice::from_ref(&a), &[]),
        )
        .map(|p| (p.ids, p.media))
        .unwrap_err();
    assert!(err.to_string().contains("places 0 image"), "{err}");
    // Anything but an image file.
    for bad in [&b""[..], b"GIF89a not really", &b"\x89PNG\r\n\x1a\n"[..]] {
        let err = engine.encode_image(bad).unwrap_err();
        assert!(matches!(err, EngineError::Media(_)), "{err}");
    }
    // A truncated PNG.
    let png = std::fs::read(fixture("img_a.png")).unwrap();
    assert!(engine.encode_image(&png[..png.len() / 2]).is_err());
    // A text-only model.
    let text_only = Engine::load(fixture("model-f32.gguf"), &options(None)).unwrap();
    let err = text_only.encode_image(&png).unwrap_err();
    assert!(err.to_string().contains("no vision tower"), "{err}");
    // A projector for another width.
    let other = Engine::load(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/tiny/gemma3_h256/model-f32.gguf"),
        &options(Some(fixture("mmproj-f32.gguf"))),
    )
    .unwrap_err();
    assert!(other.to_string().contains("another model"), "{other}");
    // An image longer than a batch.
    let small_batch = Engine::load(
        fixture("model-f32.gguf"),
        &RunOptions {
            batch: Some(8),
            ..options(Some(fixture("mmproj-f32.gguf")))
        },
    )
    .unwrap();
    let a = image(&small_batch, "img_a.png");
    let (ids, imgs) = small_batch
        .prompt(&hearth_engine::PromptRequest::text("<start_of_image>", true).with_media(&[a], &[]))
        .map(|p| (p.ids, p.media))
        .unwrap();
    let err = small_batch.session().feed_images(&ids, &imgs).unwrap_err();
    assert!(err.to_string().contains("raise --batch"), "{err}");
}

/// In a chat only the media markers the message's builder placed place
/// images: the same marker typed in a message's text is text (issue 90).
#[test]
fn only_placed_markers_place_images_in_a_chat() {
    use hearth_engine::{media_message, ChatMessage, IMAGE_MARKER};
    let engine = gguf_pair();
    let begin = engine.tokenizer().token_id(IMAGE_MARKER).unwrap();
    let a = image(&engine, "img_a.png");
    // No image: the typed marker is text.
    let typed = ChatMessage::user("Is <start_of_image> an image?");
    let (ids, placed) = engine
        .prompt(
            &hearth_engine::PromptRequest::chat_with(
                std::slice::from_ref(&typed),
                hearth_engine::ChatOptions::reply(false),
            )
            .with_media(&[], &[]),
        )
        .map(|p| (p.ids, p.media))
        .unwrap();
    assert!(placed.is_empty() && !ids.contains(&begin), "{ids:?}");
    // One image, placed by the builder after the typed marker.
    let mut m = typed.clone();
    m.push_media(IMAGE_MARKER);
    let (ids, placed) = engine
        .prompt(
            &hearth_engine::PromptRequest::chat_with(
                &[m],
                hearth_engine::ChatOptions::reply(false),
            )
            .with_media(std::slice::from_ref(&a), &[]),
        )
        .map(|p| (p.ids, p.media))
        .unwrap();
    assert_eq!(placed.len(), 1);
    assert_eq!(ids.iter().filter(|&&id| id == begin).count(), 1);
    let text = engine.tokenizer().decode(&ids[..placed[0].pos], true);
    assert!(text.contains("Is <start_of_image> an image?"), "{text}");
    // A message built with its media: markers it types itself place them,
    // else they go first; without media its markers are text.
    let placed_here = media_message("user", "Look: <start_of_image>", 1, 0);
    assert_eq!(placed_here.media(), std::slice::from_ref(&(6..22)));
    let first = media_message("user", "Look", 2, 0);
    assert_eq!(first.content, "<start_of_image><start_of_image>Look");
    assert_eq!(first.media().len(), 2);
    assert!(media_message("user", "Look: <start_of_image>", 0, 0)
        .media()
        .is_empty());
}
