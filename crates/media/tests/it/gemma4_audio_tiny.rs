//! The tiny random Gemma 4 audio tower against transformers' goldens
//! (`tests/fixtures/tiny/gemma4_audio`, made by `make_tiny_audio4.py` from
//! the clips in `tests/fixtures/audio`; its clamps between steps and on the
//! products are tight enough to cut).

use crate::npy;

use hearth_media::{AudioTower, Clip, Gemma4AudioConfig, LogMel, MelSettings};
use npy::{read_npy_f32, rel_err};
use std::path::PathBuf;
use std::sync::Arc;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

fn tower() -> AudioTower {
    let dir = fixtures().join("tiny/gemma4_audio");
    let gguf = hf::convert_audio_dir(&dir)
        .unwrap()
        .expect("an audio tower");
    let file = gguf::GgufFile::from_bytes(gguf.to_bytes()).unwrap();
    AudioTower::from_gguf(Arc::new(file)).unwrap()
}

/// Speech (3.1 s: 77 tokens) and a sweep (1.3 s: 34 tokens), neither a
/// whole number of hops: one row per token, as transformers gives them
/// after dropping padding, from transformers' features (the encoder alone)
/// and from the WAV files (our features too).
#[test]
fn embeddings_match_transformers() {
    let tower = tower();
    assert!(matches!(tower, AudioTower::Gemma4(_)));
    assert_eq!(tower.max_tokens(), 750);
    assert_eq!(tower.mel_settings(), MelSettings::gemma4());
    let pool = threads::ThreadPool::new(2);
    for (name, tokens) in [("speech", 77), ("sweep", 34)] {
        let (shape, want) =
            read_npy_f32(&fixtures().join(format!("tiny/gemma4_audio/embd_{name}.npy")));
        assert_eq!(shape, [tokens, 64]);
        let bytes = std::fs::read(fixtures().join(format!("audio/{name}.wav"))).unwrap();
        let ours = LogMel::compute(&Clip::decode(&bytes).unwrap(), &MelSettings::gemma4()).unwrap();
        assert_eq!(Gemma4AudioConfig::tokens_for_frames(ours.valid), tokens);
        let (_, data) = read_npy_f32(&fixtures().join(format!("audio/mel4_{name}.npy")));
        let theirs = LogMel {
            data,
            ..ours.clone()
        };
        let encoder_only = tower.encode(&pool, &theirs).unwrap();
        let end_to_end = tower.encode(&pool, &ours).unwrap();
        for e in [&encoder_only, &end_to_end] {
            assert_eq!(e.from_clip, tokens, "{name}");
            assert_eq!(e.rows.len(), tokens * 64, "{name}");
        }
        let (e1, e2) = (
            rel_err(&encoder_only.rows, &want),
            rel_err(&end_to_end.rows, &want),
        );
        eprintln!(
            "{name}: relative error {e1:.2e} from transformers' features, {e2:.2e} from the WAV"
        );
        assert!(e1 < 1e-5, "{name}: {e1}");
        assert!(e2 < 1e-4, "{name}: {e2}");
    }
}

/// The count of tokens is the processor's: the frames inside the clip,
/// halved twice, rounded up.
#[test]
fn token_count_follows_the_processor() {
    for (frames, tokens) in [(1, 1), (2, 1), (4, 1), (5, 2), (8, 2), (9, 3), (3000, 750)] {
        assert_eq!(
            Gemma4AudioConfig::tokens_for_frames(frames),
            tokens,
            "{frames}"
        );
    }
}

/// A clip of no frames, of more tokens than the model takes, or features
/// shorter than they say, is a clear error, not a panic.
#[test]
fn empty_and_overlong_clips_are_refused() {
    let tower = tower();
    let pool = threads::ThreadPool::new(1);
    let empty = LogMel {
        data: Vec::new(),
        frames: 0,
        valid: 0,
        bins: 128,
    };
    assert!(tower.encode(&pool, &empty).is_err());
    let long = LogMel {
        data: vec![0.0; 3004 * 128],
        frames: 3004,
        valid: 3004,
        bins: 128,
    };
    let err = tower.encode(&pool, &long).unwrap_err().to_string();
    assert!(err.contains("751 audio tokens"), "{err}");
    // Features that say more frames than they hold.
    let short = LogMel {
        data: vec![0.0; 5],
        frames: 10,
        valid: 10,
        bins: 128,
    };
    let err = tower.encode(&pool, &short).unwrap_err().to_string();
    assert!(err.contains("holding 5 values"), "{err}");
}

/// The same tower from llama.cpp's `mmproj` file (`make_mmproj_audio4.py`:
/// llama.cpp's converter, with a tiny vision tower beside it) gives
/// transformers' rows. The file keeps no clamp between steps (llama.cpp's
/// graph has none; the released checkpoints' never cuts), so the goldens
/// are transformers' with that clamp lifted; the products' own clamps stay.
#[test]
fn mmproj_tower_matches_the_checkpoint() {
    let mmproj = fixtures().join("tiny/gemma4_audio/mmproj-f32.gguf");
    let from_mmproj = AudioTower::load(&mmproj).unwrap();
    assert!(matches!(from_mmproj, AudioTower::Gemma4(_)));
    assert_eq!(from_mmproj.text_hidden(), 64);
    let pool = threads::ThreadPool::new(2);
    for (name, tokens) in [("speech", 77), ("sweep", 34)] {
        let (_, want) =
            read_npy_f32(&fixtures().join(format!("tiny/gemma4_audio/embd_{name}_unclamped.npy")));
        let bytes = std::fs::read(fixtures().join(format!("audio/{name}.wav"))).unwrap();
        let mel = LogMel::compute(&Clip::decode(&bytes).unwrap(), &MelSettings::gemma4()).unwrap();
        let got = from_mmproj.encode(&pool, &mel).unwrap();
        assert_eq!(got.from_clip, tokens);
        let err = rel_err(&got.rows, &want);
        eprintln!("{name} from the mmproj: relative error {err:.2e}");
        assert!(err < 1e-4, "{name}: {err}");
    }
    // A vision-only projector has no audio tower.
    let vision_only = fixtures().join("tiny/gemma4_vision/mmproj-f32.gguf");
    let err = AudioTower::load(&vision_only).unwrap_err().to_string();
    assert!(err.contains("no audio encoder"), "{err}");
}
