//! Audio in prompts on the tiny random Gemma 3n model
//! (`tests/fixtures/tiny/gemma3n_audio`): the text logits after a prompt
//! around a clip (speech, and a tone sweep shorter than the model's 24
//! audio tokens) agree with transformers', loaded from the checkpoint
//! directory; a marker in text expands as the processor expands it.

use crate::npy;

use hearth_engine::{Engine, RunOptions, AUDIO_MARKER};
use npy::{read_npy_f32, rel_err};
use serde_json::Value;
use std::path::{Path, PathBuf};

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
    Engine::load(fixtures().join("tiny/gemma3n_audio"), &opts).unwrap()
}

#[test]
fn audio_prompts_match_transformers() {
    let engine = engine();
    assert_eq!(engine.audio_tokens(), Some(24));
    let reference: Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("tiny/gemma3n_audio/reference.json")).unwrap(),
    )
    .unwrap();
    for name in ["speech", "sweep"] {
        let ids: Vec<u32> = reference["prompts"][name]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let bytes = std::fs::read(fixtures().join(format!("audio/{name}.wav"))).unwrap();
        let clip = engine.encode_audio(&bytes).unwrap();
        assert_eq!(clip.tokens, 24);
        // The clip's tokens follow `<start_of_audio>` (id 530). Built
        // through a marker, the prompt must give these very ids and places.
        let pos = ids.iter().position(|&t| t == 530).unwrap() + 1;
        let (before, after) = (&ids[..pos - 1], &ids[pos + 25..]);
        let marker_ids = [before, &[530, 528], after].concat();
        let (expanded, placed) = engine
            .audio_prompt_ids(&marker_ids, std::slice::from_ref(&clip))
            .unwrap();
        assert_eq!(expanded, ids);
        // The clip, and one row for each audio-vocabulary token around it
        // (`<start_of_audio>` and `<end_of_audio>` are 530 and 528 here).
        let clip_at: Vec<usize> = placed
            .iter()
            .filter(|p| p.item.tokens == 24)
            .map(|p| p.pos)
            .collect();
        assert_eq!(clip_at, [pos]);
        assert_eq!(placed.len(), 3);
        let mut session = engine.session();
        let mut got = Vec::new();
        session
            .score_images(&ids, &placed, |_, row| got.extend_from_slice(row))
            .unwrap();
        let (shape, want) =
            read_npy_f32(&fixtures().join(format!("tiny/gemma3n_audio/logits_{name}.npy")));
        assert_eq!(shape, [ids.len(), 544]);
        let err = rel_err(&got, &want);
        eprintln!("{name}: relative error {err:.2e}");
        // Our features of a pure sweep differ most from numpy's (see the
        // media tests); the speech goes through to 1e-5.
        let tol = if name == "speech" { 1e-4 } else { 1e-3 };
        assert!(err < tol, "{name}: relative error {err}");
        // A second encoding of the same file comes from the cache.
        assert!(engine.encode_audio(&bytes).unwrap().cached);
    }
}

#[test]
fn the_marker_expands_as_the_processor_does() {
    let engine = engine();
    let bytes = std::fs::read(fixtures().join("audio/sweep.wav")).unwrap();
    let clip = engine.encode_audio(&bytes).unwrap();
    let text = format!("Listen:{AUDIO_MARKER}What is it?");
    let (ids, placed) = engine
        .prompt(
            &hearth_engine::PromptRequest::text(&text, true)
                .with_media(&[], std::slice::from_ref(&clip)),
        )
        .map(|p| (p.ids, p.media))
        .unwrap();
    let clips: Vec<usize> = placed
        .iter()
        .filter(|p| p.item.tokens == 24)
        .map(|p| p.pos)
        .collect();
    assert_eq!(clips.len(), 1);
    let p = clips[0];
    assert_eq!(ids[p - 1], 530, "<start_of_audio> before the clip");
    assert!(ids[p..p + 24].iter().all(|&t| t == 529));
    assert_eq!(ids[p + 24], 528, "<end_of_audio> after it");
    // One marker, two clips: refused with a clear error.
    let err = engine
        .prompt(
            &hearth_engine::PromptRequest::text(&text, true).with_media(&[], &[clip.clone(), clip]),
        )
        .map(|p| (p.ids, p.media))
        .unwrap_err();
    assert!(err.to_string().contains("1 clip"), "{err}");
}

#[test]
fn text_only_models_refuse_audio() {
    let opts = RunOptions {
        threads: Some(1),
        ..RunOptions::default()
    };
    let engine = Engine::load(fixtures().join("tiny/gemma3n/model-f32.gguf"), &opts).unwrap();
    assert!(!engine.has_audio());
    let bytes = std::fs::read(fixtures().join("audio/sweep.wav")).unwrap();
    let err = engine.encode_audio(&bytes).unwrap_err();
    assert!(err.to_string().contains("no audio tower"), "{err}");
}
