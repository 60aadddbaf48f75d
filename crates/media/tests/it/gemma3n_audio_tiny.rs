//! The tiny random Gemma 3n audio tower against transformers' goldens
//! (`tests/fixtures/tiny/gemma3n_audio`, made by `make_tiny_audio3n.py`
//! from the clips in `tests/fixtures/audio`).

use crate::npy;

use hearth_media::{AudioTower, Clip, LogMel, MelSettings};
use npy::{read_npy_f32, rel_err};
use std::path::PathBuf;
use std::sync::Arc;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

fn tower() -> AudioTower {
    let dir = fixtures().join("tiny/gemma3n_audio");
    let gguf = hf::convert_audio_dir(&dir)
        .unwrap()
        .expect("an audio tower");
    let file = gguf::GgufFile::from_bytes(gguf.to_bytes()).unwrap();
    AudioTower::from_gguf(Arc::new(file)).unwrap()
}

/// Speech (3.1 s: 20 tokens) and a sweep (1.3 s: 9 tokens, then padding):
/// the 24 rows the text model receives agree with transformers', from
/// transformers' own features (the encoder alone) and from the WAV files
/// (our features too: a pure sweep leaves most mel bins at the FFT's
/// rounding noise, where log energies differ most).
#[test]
fn embeddings_match_transformers() {
    let tower = tower();
    let pool = threads::ThreadPool::new(2);
    for (name, from_clip, end_to_end_tol) in [("speech", 20, 1e-5), ("sweep", 9, 5e-4)] {
        let (shape, want) =
            read_npy_f32(&fixtures().join(format!("tiny/gemma3n_audio/embd_{name}.npy")));
        assert_eq!(shape, [24, 64]);
        let bytes = std::fs::read(fixtures().join(format!("audio/{name}.wav"))).unwrap();
        let ours =
            LogMel::compute(&Clip::decode(&bytes).unwrap(), &MelSettings::default()).unwrap();
        let (_, data) = read_npy_f32(&fixtures().join(format!("audio/mel_{name}.npy")));
        let theirs = LogMel {
            data,
            ..ours.clone()
        };
        let encoder_only = tower.encode(&pool, &theirs).unwrap();
        let end_to_end = tower.encode(&pool, &ours).unwrap();
        assert_eq!(encoder_only.from_clip, from_clip, "{name}");
        assert_eq!(end_to_end.from_clip, from_clip, "{name}");
        let (e1, e2) = (
            rel_err(&encoder_only.rows, &want),
            rel_err(&end_to_end.rows, &want),
        );
        eprintln!(
            "{name}: relative error {e1:.2e} from transformers' features, {e2:.2e} from the WAV"
        );
        assert!(e1 < 1e-5, "{name}: {e1}");
        assert!(e2 < end_to_end_tol, "{name}: {e2}");
    }
}
