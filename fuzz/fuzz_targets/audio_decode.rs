//! Fuzz audio decoding and the log-mel front end: the input is a sound
//! file (WAV, MP3, Ogg Vorbis, Ogg Opus) as a chat request carries it,
//! decoded with `Clip::decode` (mono, resampled to 16 kHz, cut at 30 s,
//! refused past the default length limit), then turned into Gemma 3n's and
//! Gemma 4's log-mel features with `LogMel::compute`.
//!
//! Structure-aware: Ogg inputs have every page CRC recomputed before
//! decoding, so mutated pages reach the demuxers and codecs; WAV headers
//! need no checksum (the decoder repairs lying lengths itself).
//!
//! Invariants: no panic; a WAV claiming 2^32 samples costs no more than
//! what is there; a clip is at most `MAX_SECONDS` at 16 kHz; the features
//! are `frames x bins` values with at most `frames` valid.

#![no_main]

use hearth_media::{Clip, LogMel, MelSettings, MAX_SECONDS, SAMPLE_RATE};
use libfuzzer_sys::fuzz_target;

fuzz_target!(
    init: {
        // `Clip::decode` catches opus-decoder's own panics (a shift that
        // overflows on a damaged packet) and refuses the clip.
        hearth_fuzz::tolerate_caught_panics_in(&["opus-decoder"]);
    },
    |data: &[u8]| {
    let mut bytes = data.to_vec();
    hearth_fuzz::fix_ogg_crcs(&mut bytes);
    let Ok(clip) = Clip::decode(&bytes) else {
        return;
    };
    assert!(!clip.samples.is_empty());
    assert!(clip.samples.iter().all(|s| s.is_finite()), "a sample that is not finite");
    assert!(clip.samples.len() <= (SAMPLE_RATE * MAX_SECONDS) as usize);
    for settings in [MelSettings::default(), MelSettings::gemma4()] {
        if let Ok(mel) = LogMel::compute(&clip, &settings) {
            assert_eq!(mel.data.len(), mel.frames * mel.bins);
            assert_eq!(mel.bins, settings.bins);
            assert!(mel.valid <= mel.frames);
        }
    }
});
