//! Gemma 3n's log-mel features of two clips (speech from espeak-ng, a sine
//! sweep from sox; neither a whole number of hops) against transformers'
//! `Gemma3nAudioFeatureExtractor` (`tests/fixtures/audio`, made by
//! `make_clips.sh` and `make_mel.py`).

use crate::npy;

use hearth_media::{Clip, LogMel, MelSettings};
use npy::read_npy_f32;
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/audio")
        .join(name)
}

/// Our features of both clips against the goldens `mel{tag}_*.npy`.
fn check_features(settings: &MelSettings, tag: &str) {
    for name in ["speech", "sweep"] {
        let clip = Clip::decode(&std::fs::read(fixture(&format!("{name}.wav"))).unwrap()).unwrap();
        let mel = LogMel::compute(&clip, settings).unwrap();
        let (shape, want) = read_npy_f32(&fixture(&format!("mel{tag}_{name}.npy")));
        let (_, mask) = read_npy_f32(&fixture(&format!("mask{tag}_{name}.npy")));
        assert_eq!(shape, [mel.frames, 128], "{name}");
        assert_eq!(
            mel.valid,
            mask.iter().filter(|&&m| m > 0.5).count(),
            "{name}"
        );
        // In energy, relative to each frame's largest: the spectra agree
        // to f32 rounding. In log energy, where the energy is within 40 dB
        // of the frame's largest (below that, an f32 FFT's rounding noise
        // — the reference's — is a visible share of a sine's leakage).
        let (mut worst_energy, mut worst_log) = (0.0f64, 0.0f32);
        for (g, w) in mel.data.chunks_exact(128).zip(want.chunks_exact(128)) {
            let top = w.iter().fold(f32::MIN, |m, &v| m.max(v));
            for (&gv, &wv) in g.iter().zip(w) {
                let d = (f64::from(gv).exp() - f64::from(wv).exp()).abs() / f64::from(top).exp();
                worst_energy = worst_energy.max(d);
                if wv > top - 9.2 {
                    worst_log = worst_log.max((gv - wv).abs());
                }
            }
        }
        eprintln!(
            "{name}{tag}: {} frames, energy error {worst_energy:.2e} of the frame's peak, log error {worst_log:.2e} within 40 dB",
            mel.frames
        );
        assert!(worst_energy < 1e-5, "{name}: {worst_energy}");
        assert!(worst_log < 1e-3, "{name}: {worst_log}");
    }
}

#[test]
fn gemma3n_log_mel_matches_the_feature_extractor() {
    check_features(&MelSettings::default(), "");
}

/// Gemma 4's extractor: 20 ms frames from half a frame before the clip, no
/// pre-emphasis, `ln(mel + 0.001)`, frames inside the clip by their end.
#[test]
fn gemma4_log_mel_matches_the_feature_extractor() {
    check_features(&MelSettings::gemma4(), "4");
}

/// The sweep as Ogg Vorbis (sox) decodes to the same length (the last
/// packet's padding trimmed) and, lossy as it is, the same loudness.
#[test]
fn ogg_vorbis_decodes_like_the_wav() {
    let wav = Clip::decode(&std::fs::read(fixture("sweep.wav")).unwrap()).unwrap();
    let ogg = Clip::decode(&std::fs::read(fixture("sweep.ogg")).unwrap()).unwrap();
    assert_eq!(ogg.samples.len(), wav.samples.len());
    let rms = |x: &[f32]| (x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32).sqrt();
    let (a, b) = (rms(&wav.samples), rms(&ogg.samples));
    assert!((a - b).abs() < 0.05 * a, "RMS {b} vs {a}");
    let s = MelSettings::default();
    let (a, b) = (
        LogMel::compute(&wav, &s).unwrap(),
        LogMel::compute(&ogg, &s).unwrap(),
    );
    assert_eq!(a.frames, b.frames);
}

/// The speech as an Ogg Opus voice note (opusenc, 24 kb/s): decoded to
/// 16 kHz with its pre-skip and end trimmed, the same length as the WAV
/// and, lossy as it is, the same loudness and nearly the same features.
#[test]
fn ogg_opus_voice_notes_decode() {
    let wav = Clip::decode(&std::fs::read(fixture("speech.wav")).unwrap()).unwrap();
    let opus = Clip::decode(&std::fs::read(fixture("speech.opus")).unwrap()).unwrap();
    assert_eq!(opus.samples.len(), wav.samples.len());
    let rms = |x: &[f32]| (x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32).sqrt();
    let (a, b) = (rms(&wav.samples), rms(&opus.samples));
    assert!((a - b).abs() < 0.1 * a, "RMS {b} vs {a}");
    // Aligned: the two waveforms correlate strongly at lag 0.
    let dot: f32 = wav
        .samples
        .iter()
        .zip(&opus.samples)
        .map(|(x, y)| x * y)
        .sum();
    let corr = dot / (a * b * wav.samples.len() as f32);
    eprintln!("opus vs wav: correlation {corr:.3} at lag 0");
    assert!(corr > 0.95, "correlation {corr}");
    // A truncated note reads as far as it goes.
    let bytes = std::fs::read(fixture("speech.opus")).unwrap();
    let part = Clip::decode(&bytes[..bytes.len() / 2]).unwrap();
    assert!(part.samples.len() < wav.samples.len() && !part.samples.is_empty());
}
