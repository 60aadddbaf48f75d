//! A long clip in windows the encoders hear whole: at most
//! [`MAX_SECONDS`] each, cut where the sound is quietest near each
//! window's end so a word is seldom split, and a window as a file again.

use super::input::{Clip, MAX_SECONDS, SAMPLE_RATE};
use std::ops::Range;

/// The span before a window's end searched for its quietest moment.
const SEARCH_SECONDS: u32 = 5;
/// The stretch whose energy is compared: 20 ms, shorter than a syllable.
const FRAME: usize = (SAMPLE_RATE / 50) as usize;

impl Clip {
    /// The clip's windows, in order, covering every sample once: the whole
    /// clip when it fits one window, else windows of at most
    /// [`MAX_SECONDS`], each cut at the start of the quietest 20 ms in the
    /// last five seconds it could hold (the latest such when several are
    /// equally quiet).
    pub fn windows(&self) -> Vec<Range<usize>> {
        let window = (SAMPLE_RATE * MAX_SECONDS) as usize;
        let search = (SAMPLE_RATE * SEARCH_SECONDS) as usize;
        let len = self.samples.len();
        let mut out = Vec::with_capacity(len / (window - search) + 1);
        let mut start = 0;
        while len - start > window {
            let cut = quietest_frame(&self.samples, start + window - search, start + window);
            out.push(start..cut);
            start = cut;
        }
        out.push(start..len);
        out
    }

    /// The samples of `range` as a clip of their own (already cut, so
    /// never truncated).
    pub fn window(&self, range: Range<usize>) -> Self {
        Self {
            samples: self.samples[range].to_vec(),
            source_rate: SAMPLE_RATE,
            truncated: false,
        }
    }

    /// The clip as a WAV file of 32-bit float samples at [`SAMPLE_RATE`]:
    /// decoded again, it gives these samples exactly.
    pub fn to_wav(&self) -> Vec<u8> {
        const FLOAT_FORMAT: u16 = 3;
        let data_len = u32::try_from(self.samples.len() * 4).unwrap_or(u32::MAX);
        let mut out = Vec::with_capacity(44 + self.samples.len() * 4);
        out.extend_from_slice(b"RIFF");
        out.extend_from_slice(&data_len.saturating_add(36).to_le_bytes());
        out.extend_from_slice(b"WAVEfmt ");
        out.extend_from_slice(&16u32.to_le_bytes());
        out.extend_from_slice(&FLOAT_FORMAT.to_le_bytes());
        out.extend_from_slice(&1u16.to_le_bytes());
        out.extend_from_slice(&SAMPLE_RATE.to_le_bytes());
        out.extend_from_slice(&(SAMPLE_RATE * 4).to_le_bytes());
        out.extend_from_slice(&4u16.to_le_bytes());
        out.extend_from_slice(&32u16.to_le_bytes());
        out.extend_from_slice(b"data");
        out.extend_from_slice(&data_len.to_le_bytes());
        for s in &self.samples {
            out.extend_from_slice(&s.to_le_bytes());
        }
        out
    }
}

/// The start of the quietest [`FRAME`] of `samples` that starts in
/// `from..to` (frames a step apart, the last that fits ending at `to`).
fn quietest_frame(samples: &[f32], from: usize, to: usize) -> usize {
    let energy = |at: usize| -> f64 {
        samples[at..at + FRAME]
            .iter()
            .map(|&s| f64::from(s) * f64::from(s))
            .sum()
    };
    let mut best = (f64::INFINITY, to);
    let mut at = from;
    while at + FRAME <= to {
        let e = energy(at);
        if e <= best.0 {
            best = (e, at);
        }
        at += FRAME;
    }
    best.1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clip(samples: Vec<f32>) -> Clip {
        Clip {
            samples,
            source_rate: SAMPLE_RATE,
            truncated: false,
        }
    }

    fn tone(seconds: f32) -> Vec<f32> {
        let n = (seconds * SAMPLE_RATE as f32) as usize;
        (0..n).map(|i| (i as f32 * 0.05).sin() * 0.5).collect()
    }

    #[test]
    fn a_clip_within_one_window_is_one_window() {
        let c = clip(tone(30.0));
        assert_eq!(c.windows(), vec![0..c.samples.len()]);
        assert_eq!(clip(Vec::new()).windows(), vec![0..0]);
    }

    #[test]
    fn a_long_clip_is_cut_at_its_quiet_moment_and_covered_once() {
        // 28 s of tone, 0.2 s of silence, 20 s of tone: the cut falls in
        // the silence, not at 30 s.
        let mut samples = tone(28.0);
        let silence_at = samples.len();
        samples.extend(std::iter::repeat_n(0.0, (SAMPLE_RATE / 5) as usize));
        samples.extend(tone(20.0));
        let c = clip(samples);
        let w = c.windows();
        assert_eq!(w.len(), 2, "{w:?}");
        assert_eq!(w[0].start, 0);
        assert_eq!(w[0].end, w[1].start);
        assert_eq!(w[1].end, c.samples.len());
        let silence = silence_at..silence_at + (SAMPLE_RATE / 5) as usize;
        assert!(silence.contains(&w[0].end), "{w:?} vs {silence:?}");
    }

    #[test]
    fn every_window_fits_and_long_clips_make_progress() {
        let c = clip(tone(181.3));
        let w = c.windows();
        let max = (SAMPLE_RATE * MAX_SECONDS) as usize;
        assert!(w.iter().all(|r| r.len() <= max && !r.is_empty()), "{w:?}");
        assert!(w.windows(2).all(|p| p[0].end == p[1].start));
        assert_eq!(w.last().map(|r| r.end), Some(c.samples.len()));
        assert!(w.len() <= 8, "{}", w.len());
    }

    #[test]
    fn a_window_written_as_wav_decodes_to_the_same_samples() {
        let c = clip(tone(2.5));
        let part = c.window(4_000..30_001);
        let again = Clip::decode(&part.to_wav()).unwrap();
        assert_eq!(again.samples, part.samples);
        assert!(!again.truncated);
    }
}
