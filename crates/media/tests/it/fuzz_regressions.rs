//! Inputs the fuzz targets found (fuzz/fuzz_targets/audio_decode.rs;
//! docs/fuzz.md), kept as tests so the bugs stay fixed.

use hearth_media::{Clip, LogMel, MelSettings};

/// A float WAV (format 3) of `samples` at `rate` Hz, mono.
fn float_wav(samples: &[f32], rate: u32) -> Vec<u8> {
    let data: Vec<u8> = samples.iter().flat_map(|s| s.to_le_bytes()).collect();
    let mut w = b"RIFF".to_vec();
    w.extend_from_slice(&(36 + data.len() as u32).to_le_bytes());
    w.extend_from_slice(b"WAVEfmt ");
    w.extend_from_slice(&16u32.to_le_bytes());
    w.extend_from_slice(&3u16.to_le_bytes()); // IEEE float
    w.extend_from_slice(&1u16.to_le_bytes());
    w.extend_from_slice(&rate.to_le_bytes());
    w.extend_from_slice(&(rate * 4).to_le_bytes());
    w.extend_from_slice(&4u16.to_le_bytes());
    w.extend_from_slice(&32u16.to_le_bytes());
    w.extend_from_slice(b"data");
    w.extend_from_slice(&(data.len() as u32).to_le_bytes());
    w.extend_from_slice(&data);
    w
}

/// A float WAV holding NaN, infinities or values near f32::MAX made the
/// resampler's FFT panic ("Imaginary part of first value was non-zero").
/// Found by `audio_decode` (22050 Hz float clips with corrupted samples);
/// non-finite samples now decode as silence, the rest clamp to [-1, 1].
#[test]
fn fuzz_non_finite_float_samples_decode_as_silence() {
    let mut samples: Vec<f32> = (0..4000).map(|i| (i as f32 * 0.05).sin() * 0.5).collect();
    samples[100] = f32::NAN;
    samples[2000] = f32::INFINITY;
    samples[3000] = f32::NEG_INFINITY;
    // Finite but near f32::MAX: the FFT overflows to NaN just the same.
    samples[3500] = 1.9e38;
    samples[3501] = -3.0e38;
    for rate in [22_050, 16_000] {
        let clip = Clip::decode(&float_wav(&samples, rate)).expect("decodes");
        assert!(clip.samples.iter().all(|s| s.is_finite()), "{rate} Hz");
        if rate == 16_000 {
            assert!(clip.samples.iter().all(|s| s.abs() <= 1.0));
        }
        for s in [MelSettings::default(), MelSettings::gemma4()] {
            let mel = LogMel::compute(&clip, &s).expect("features");
            assert!(mel.data.iter().all(|v| v.is_finite()));
        }
    }
}

/// opus-decoder 0.1 overflows a shift (`celt/vq.rs`) on a damaged packet of
/// this voice note, a panic in builds with overflow checks. Found by
/// `audio_decode` (a mutated `speech.opus`, page CRCs repaired as the
/// target does); the clip is now refused with an error.
#[test]
fn fuzz_damaged_opus_packet_does_not_panic() {
    let bytes = include_bytes!("../fuzz/opus-shift-overflow.opus");
    if let Ok(clip) = Clip::decode(bytes) {
        assert!(clip.samples.iter().all(|s| s.is_finite()));
    }
}
