//! Audio in prompts on the tiny random Gemma 4 model
//! (`tests/fixtures/tiny/gemma4_audio`, made by `make_tiny_audio4.py`):
//! the text logits after prompts around one clip (speech; a tone sweep)
//! and two clips agree with transformers', loaded from the checkpoint
//! directory; a marker expands as the processor expands it, one token per
//! 40 ms of the clip.

use crate::npy;

use hearth_engine::{Engine, RunOptions, AUDIO_MARKER, GEMMA4_AUDIO_MARKER};
use npy::{read_npy_f32, rel_err};
use serde_json::Value;
use std::path::{Path, PathBuf};

const BOA: u32 = 512;
const EOA: u32 = 513;
const AUDIO: u32 = 514;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

fn engine() -> Engine {
    let opts = RunOptions {
        threads: Some(2),
        ctx: Some(256),
        precision: hearth_engine::Precision::Exact,
        ..RunOptions::default()
    };
    Engine::load(fixtures().join("tiny/gemma4_audio"), &opts).unwrap()
}

fn reference() -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("tiny/gemma4_audio/reference.json")).unwrap(),
    )
    .unwrap()
}

/// Score the reference prompt `key` with its clips encoded by `engine`;
/// the relative error of the logits against `golden`.
fn prompt_error(engine: &Engine, key: &str, golden: &str) -> f32 {
    let reference = reference();
    let p = &reference["prompts"][key];
    let ids: Vec<u32> = p["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    let clips: Vec<&str> = p["clips"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    let encoded: Vec<_> = clips
        .iter()
        .map(|c| {
            let bytes = std::fs::read(fixtures().join(format!("audio/{c}.wav"))).unwrap();
            engine.encode_audio(&bytes).unwrap()
        })
        .collect();
    for (c, e) in clips.iter().zip(&encoded) {
        assert_eq!(
            e.tokens as u64,
            reference["clips"][c]["tokens"].as_u64().unwrap(),
            "{c}"
        );
    }
    // The prompt with each clip's tokens taken out: the pairs of
    // `<|audio>` `<audio|>` mark the places.
    let marker_ids: Vec<u32> = ids.iter().copied().filter(|&t| t != AUDIO).collect();
    let (expanded, placed) = engine.audio_prompt_ids(&marker_ids, &encoded).unwrap();
    assert_eq!(expanded.len(), ids.len());
    assert_eq!(placed.len(), clips.len(), "no spans besides the clips");
    for (i, (&ours, &theirs)) in expanded.iter().zip(&ids).enumerate() {
        let in_clip = placed.iter().any(|p| p.pos <= i && i < p.end());
        // A clip's tokens are the audio token in transformers' prompt,
        // the pad token here (what its per-layer embeddings see).
        if in_clip {
            assert_eq!((theirs, ours), (AUDIO, 0), "position {i}");
        } else {
            assert_eq!(ours, theirs, "position {i}");
        }
    }
    let mut session = engine.session();
    let mut got = Vec::new();
    session
        .score_images(&expanded, &placed, |_, row| got.extend_from_slice(row))
        .unwrap();
    let (shape, want) = read_npy_f32(&fixtures().join(format!("tiny/gemma4_audio/{golden}")));
    assert_eq!(shape, [ids.len(), 518]);
    rel_err(&got, &want)
}

#[test]
fn audio_prompts_match_transformers() {
    let engine = engine();
    assert!(engine.has_audio());
    assert_eq!(engine.audio_tokens(), Some(750));
    // Our features of the pure sweep differ most from the extractor's (its
    // silent mel bins sit at the FFT's rounding noise; see the media
    // tests), and the text model carries that into the logits: prompts
    // with the sweep are held to 5e-4, the speech to 1e-4.
    for (key, tol) in [("speech", 1e-4), ("sweep", 5e-4), ("both", 5e-4)] {
        let err = prompt_error(&engine, key, &format!("logits_{key}.npy"));
        eprintln!("{key}: relative error {err:.2e}");
        assert!(err < tol, "{key}: relative error {err}");
    }
}

/// llama.cpp's files: the text model's GGUF with the `mmproj` that holds
/// the audio tower (and a vision tower), as `-m … --mmproj …` loads them.
/// The projector keeps no clamp between steps, so the goldens are
/// transformers' with it lifted.
#[test]
fn llamacpp_files_match_transformers() {
    let dir = fixtures().join("tiny/gemma4_audio");
    let opts = RunOptions {
        threads: Some(2),
        ctx: Some(256),
        precision: hearth_engine::Precision::Exact,
        mmproj: Some(dir.join("mmproj-f32.gguf")),
        ..RunOptions::default()
    };
    let engine = Engine::load(dir.join("model-f32.gguf"), &opts).unwrap();
    assert!(engine.has_audio() && engine.has_vision());
    // Both clips, the sweep among them: held as the sweep's prompts above.
    let err = prompt_error(&engine, "both", "logits_both_unclamped.npy");
    eprintln!("both, from llama.cpp's files: relative error {err:.2e}");
    assert!(err < 5e-4, "relative error {err}");
}

#[test]
fn markers_expand_as_the_processor_does() {
    let engine = engine();
    let bytes = std::fs::read(fixtures().join("audio/sweep.wav")).unwrap();
    let clip = engine.encode_audio(&bytes).unwrap();
    assert_eq!(clip.tokens, 34);
    assert!(engine.encode_audio(&bytes).unwrap().cached);
    // Gemma 4's own marker and the generic one place a clip alike.
    for marker in [GEMMA4_AUDIO_MARKER, AUDIO_MARKER] {
        let text = format!("Listen:{marker}What is it?");
        let (ids, placed) = engine
            .prompt(
                &hearth_engine::PromptRequest::text(&text, true)
                    .with_media(&[], std::slice::from_ref(&clip)),
            )
            .map(|p| (p.ids, p.media))
            .unwrap();
        assert_eq!(placed.len(), 1);
        let p = placed[0].pos;
        assert_eq!(ids[p - 1], BOA, "<|audio> before the clip");
        assert_eq!(ids[p + 34], EOA, "<audio|> after it");
        assert_eq!(placed[0].end(), p + 34);
    }
    let text = format!("Listen:{GEMMA4_AUDIO_MARKER}What is it?");
    let err = engine
        .prompt(
            &hearth_engine::PromptRequest::text(&text, true).with_media(&[], &[clip.clone(), clip]),
        )
        .map(|p| (p.ids, p.media))
        .unwrap_err();
    assert!(err.to_string().contains("places 1 clip"), "{err}");
}

/// One prompt with an image and a clip (Gemma 4 reads and hears), from
/// llama.cpp's files: the projector holds a tiny vision tower beside the
/// audio one (`make_mmproj_audio4.py`). The markers place both, the ids
/// come out as transformers' prompt (the media's tokens as the pad token),
/// and the logits agree with transformers' for the whole prompt.
#[test]
fn a_prompt_with_an_image_and_a_clip_matches_transformers() {
    let dir = fixtures().join("tiny/gemma4_audio");
    let mixed: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("mixed.json")).unwrap()).unwrap();
    let opts = RunOptions {
        threads: Some(2),
        ctx: Some(256),
        precision: hearth_engine::Precision::Exact,
        mmproj: Some(dir.join("mmproj-f32.gguf")),
        image_tokens: Some(mixed["max_soft_tokens"].as_u64().unwrap() as usize),
        ..RunOptions::default()
    };
    let engine = Engine::load(dir.join("model-f32.gguf"), &opts).unwrap();
    let read = |key: &str| std::fs::read(fixtures().join(mixed[key].as_str().unwrap())).unwrap();
    let image = engine.encode_image(&read("image")).unwrap();
    let clip = engine.encode_audio(&read("clip")).unwrap();
    assert_eq!(image.tokens as u64, mixed["image_tokens"].as_u64().unwrap());
    assert_eq!(clip.tokens as u64, mixed["clip_tokens"].as_u64().unwrap());
    let want_ids: Vec<u32> = mixed["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    // "Look at<|image|> and hear<|audio|> now": the markers in order.
    let text = mixed["prompt"].as_str().unwrap();
    let (ids, placed) = engine
        .prompt(
            &hearth_engine::PromptRequest::text(text, true)
                .with_media(std::slice::from_ref(&image), std::slice::from_ref(&clip)),
        )
        .map(|p| (p.ids, p.media))
        .unwrap();
    assert_eq!(ids.len(), want_ids.len(), "{ids:?}");
    assert_eq!(placed.len(), 2);
    for (i, (&ours, &theirs)) in ids.iter().zip(&want_ids).enumerate() {
        let in_media = placed.iter().any(|p| p.pos <= i && i < p.end());
        if in_media {
            assert!(theirs == 517 || theirs == 514, "position {i}: {theirs}");
            assert_eq!(ours, 0, "position {i}");
        } else {
            assert_eq!(ours, theirs, "position {i}");
        }
    }
    let mut session = engine.session();
    let mut got = Vec::new();
    session
        .score_images(&ids, &placed, |_, row| got.extend_from_slice(row))
        .unwrap();
    let (shape, want) = read_npy_f32(&dir.join("logits_mixed.npy"));
    assert_eq!(shape, [ids.len(), 518]);
    let err = rel_err(&got, &want);
    eprintln!("image and clip in one prompt: relative error {err:.2e}");
    assert!(err < 1e-4, "relative error {err}");
}
