//! Sound in: decoding a clip to mono samples at the encoder's rate
//! ([`Clip`]), and Gemma 3n's log-mel features ([`LogMel`]), computed as
//! transformers' `Gemma3nAudioFeatureExtractor` computes them.

use crate::MediaError;
use realfft::RealFftPlanner;
use rubato::{FftFixedIn, Resampler};
use symphonia::core::audio::SampleBuffer;
use symphonia::core::codecs::{CodecParameters, Decoder, DecoderOptions, CODEC_TYPE_NULL};
use symphonia::core::errors::Error as SymphoniaError;
use symphonia::core::formats::{FormatOptions, FormatReader};
use symphonia::core::io::MediaSourceStream;
use symphonia::core::meta::MetadataOptions;
use symphonia::core::probe::Hint;

/// The rate the audio encoders take.
pub const SAMPLE_RATE: u32 = 16_000;
/// The longest clip kept, in seconds: the feature extractor's default
/// (480,000 samples at 16 kHz). Longer clips are cut here, as transformers
/// truncates them, and [`Clip::truncated`] says so.
pub const MAX_SECONDS: u32 = 30;
/// The default bound on a clip's length: a ten-minute voice memo is read
/// (the encoders hear its first [`MAX_SECONDS`]); a longer one is refused.
pub const DEFAULT_MAX_CLIP_SECONDS: u32 = 600;
/// Sample rates accepted from a file (telephone audio to studio audio).
const RATES: std::ops::RangeInclusive<u32> = 4_000..=384_000;

/// A mono clip at [`SAMPLE_RATE`], samples in `[-1, 1]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Clip {
    /// The samples.
    pub samples: Vec<f32>,
    /// The rate the file had before resampling.
    pub source_rate: u32,
    /// Whether the file was longer than [`MAX_SECONDS`] and was cut.
    pub truncated: bool,
}

impl Clip {
    /// Decode a clip of at most [`DEFAULT_MAX_CLIP_SECONDS`] (and
    /// [`crate::DEFAULT_MAX_DECODE_BYTES`] of memory).
    pub fn decode(bytes: &[u8]) -> Result<Self, MediaError> {
        Self::decode_within(
            bytes,
            DEFAULT_MAX_CLIP_SECONDS,
            crate::DEFAULT_MAX_DECODE_BYTES,
        )
    }

    /// Decode a WAV, MP3, Ogg Vorbis or Ogg Opus file: channels averaged to
    /// mono, resampled to 16 kHz, cut at [`MAX_SECONDS`]. A clip whose
    /// container says it lasts longer than `max_seconds` is refused before
    /// it is decoded; decoding stops at the cut, so a long file costs no
    /// more memory than 30 seconds of it. What that takes at the file's
    /// sample rate ([`clip_memory`]) is checked against `max_bytes` before
    /// the first packet is decoded.
    pub fn decode_within(
        bytes: &[u8],
        max_seconds: u32,
        max_bytes: u64,
    ) -> Result<Self, MediaError> {
        Self::decode_kept(bytes, max_seconds, MAX_SECONDS, max_bytes)
    }

    /// Decode a file as [`Clip::decode_within`] does, but whole: up to
    /// `max_seconds` are kept (a transcription hears them a window at a
    /// time, see [`Clip::windows`]), and the memory they take at the
    /// file's rate is what is checked against `max_bytes`.
    pub fn decode_whole(
        bytes: &[u8],
        max_seconds: u32,
        max_bytes: u64,
    ) -> Result<Self, MediaError> {
        Self::decode_kept(bytes, max_seconds, max_seconds, max_bytes)
    }

    /// Decode at most `max_seconds` of a file, keeping its first `keep`.
    fn decode_kept(
        bytes: &[u8],
        max_seconds: u32,
        keep: u32,
        max_bytes: u64,
    ) -> Result<Self, MediaError> {
        if bytes.is_empty() {
            return Err(MediaError::Audio("the audio file is empty".into()));
        }
        if is_ogg_opus(bytes) {
            let stated = opus_seconds(bytes);
            if let Some(seconds) = stated.filter(|&s| s > f64::from(max_seconds)) {
                return Err(MediaError::TooLong {
                    seconds,
                    max: max_seconds,
                });
            }
            let decoded = stated_bound(keep, stated);
            check_clip_memory(bytes.len(), OPUS_RATE, decoded, max_bytes)?;
            let (samples, cut) = decode_opus(bytes, decoded)?;
            return Self::from_decoded(samples, OPUS_RATE, cut && decoded == keep, keep);
        }
        let mut bytes = bytes.to_vec();
        repair_wav_lengths(&mut bytes);
        let (samples, rate, truncated) = decode_mono(bytes, max_seconds, keep, max_bytes)?;
        Self::from_decoded(samples, rate, truncated, keep)
    }

    /// A clip of mono `samples` decoded at `source_rate` (`truncated` if
    /// decoding stopped at the cut): resampled to [`SAMPLE_RATE`] and cut
    /// at `keep` seconds. No samples at all is an error.
    fn from_decoded(
        samples: Vec<f32>,
        source_rate: u32,
        truncated: bool,
        keep: u32,
    ) -> Result<Self, MediaError> {
        if samples.is_empty() {
            return Err(MediaError::Audio("the audio clip has no samples".into()));
        }
        let mut samples = resample(samples, source_rate, SAMPLE_RATE)?;
        samples.truncate(SAMPLE_RATE as usize * keep as usize);
        Ok(Self {
            samples,
            source_rate,
            truncated,
        })
    }

    /// A clip of samples already at 16 kHz (cut at [`MAX_SECONDS`]).
    pub fn from_samples(mut samples: Vec<f32>) -> Self {
        let max = (SAMPLE_RATE * MAX_SECONDS) as usize;
        let truncated = samples.len() > max;
        samples.truncate(max);
        Self {
            samples,
            source_rate: SAMPLE_RATE,
            truncated,
        }
    }

    /// The most decoding a file of `file_bytes` with
    /// [`Clip::decode_within`] can take: at the highest sample rate it
    /// accepts, whatever the file's.
    pub fn decode_memory_bound(file_bytes: usize) -> u64 {
        clip_memory(file_bytes, *RATES.end(), MAX_SECONDS)
    }

    /// The most decoding a file of `file_bytes` with [`Clip::decode_whole`]
    /// up to `max_seconds` can take, at the highest rate it accepts.
    pub fn whole_memory_bound(file_bytes: usize, max_seconds: u32) -> u64 {
        clip_memory(file_bytes, *RATES.end(), max_seconds)
    }

    /// Its length in seconds.
    pub fn seconds(&self) -> f32 {
        self.samples.len() as f32 / SAMPLE_RATE as f32
    }
}

/// What decoding a clip of `file_bytes` at `rate`, keeping its first
/// `keep` seconds, takes at most: the file's copy, those seconds as mono
/// floats at its rate and resampled (each vector up to twice its length as
/// it grows), and a packet's buffers.
pub(crate) fn clip_memory(file_bytes: usize, rate: u32, keep: u32) -> u64 {
    let floats = |rate: u32| 2 * 4 * u64::from(rate) * u64::from(keep);
    file_bytes as u64 + floats(rate) + floats(SAMPLE_RATE) + (1 << 20)
}

/// The seconds a stream is decoded to: `keep`, or a second past its
/// stated length when that is shorter (the last packet may decode past
/// it). A header that understates the length so bounds the decoding too,
/// which is what its memory is priced at.
fn stated_bound(keep: u32, stated_seconds: Option<f64>) -> u32 {
    stated_seconds.map_or(keep, |s| keep.min(s.max(0.0).ceil() as u32 + 1))
}

/// Refuse a clip whose decoding ([`clip_memory`]) would pass `max_bytes`.
fn check_clip_memory(
    file_bytes: usize,
    rate: u32,
    keep: u32,
    max_bytes: u64,
) -> Result<(), MediaError> {
    let needed = clip_memory(file_bytes, rate, keep);
    if needed > max_bytes {
        return Err(MediaError::TooMuchMemory {
            needed,
            max: max_bytes,
        });
    }
    Ok(())
}

/// Append the interleaved `frames` of `channels` to `mono`, averaged, up
/// to `limit` samples; whether the limit cut them.
fn push_mono(mono: &mut Vec<f32>, frames: &[f32], channels: usize, limit: usize) -> bool {
    for frame in frames.chunks_exact(channels) {
        if mono.len() == limit {
            return true;
        }
        let v = frame.iter().sum::<f32>() / channels as f32;
        // A float WAV may hold NaN, infinities or values near f32::MAX,
        // which overflow the resampler's FFT (it panics on the NaN that
        // follows; found by fuzzing): silence for the first, full scale
        // for the rest.
        let v = if v.is_finite() {
            v.clamp(-1.0, 1.0)
        } else {
            0.0
        };
        mono.push(v);
    }
    false
}

/// Whether `bytes` are an Ogg stream whose first packet is an Opus header.
fn is_ogg_opus(bytes: &[u8]) -> bool {
    // The first page's header is 27 bytes plus its segment table; the
    // OpusHead packet starts right after.
    if bytes.len() < 28 || &bytes[..4] != b"OggS" {
        return false;
    }
    let segments = bytes[26] as usize;
    bytes.get(27 + segments..27 + segments + 8) == Some(b"OpusHead")
}

/// Opus's own rate: pre-skip and granule positions count its samples.
const OPUS_RATE: u32 = 48_000;

/// An Ogg Opus stream's length from its last page's granule position
/// (48 kHz samples, the pre-skip included), if a page says.
fn opus_seconds(bytes: &[u8]) -> Option<f64> {
    let at = bytes.windows(4).rposition(|w| w == b"OggS")?;
    let granule = u64::from_le_bytes(bytes.get(at + 6..at + 14)?.try_into().ok()?);
    // -1: no packet ends on this page.
    (granule != u64::MAX).then(|| granule as f64 / f64::from(OPUS_RATE))
}

/// An Ogg Opus stream (a voice note) decoded to mono at 48 kHz, where its
/// header's pre-skip and the last page's granule position are exact
/// (decoding at 16 kHz directly shifts the clip by the decoder's own
/// delay), cut at `keep` seconds; and whether it was cut.
fn decode_opus(bytes: &[u8], keep: u32) -> Result<(Vec<f32>, bool), MediaError> {
    let bad = |m: String| MediaError::Audio(format!("cannot decode the Opus audio: {m}"));
    let mut reader = ogg::PacketReader::new(std::io::Cursor::new(bytes));
    let head = reader
        .read_packet()
        .map_err(|e| bad(e.to_string()))?
        .ok_or_else(|| bad("no header".into()))?;
    if head.data.len() < 19 || &head.data[..8] != b"OpusHead" {
        return Err(bad("no OpusHead packet".into()));
    }
    let channels = usize::from(head.data[9]);
    if !(1..=2).contains(&channels) || head.data[18] != 0 {
        return Err(MediaError::Audio(format!(
            "unsupported Opus stream: {channels} channels, mapping family {}",
            head.data[18]
        )));
    }
    let pre_skip = u64::from(u16::from_le_bytes([head.data[10], head.data[11]]));
    let mut decoder =
        opus_decoder::OpusDecoder::new(OPUS_RATE, channels).map_err(|e| bad(format!("{e:?}")))?;
    // The largest Opus packet holds 120 ms.
    let mut pcm = vec![0.0f32; OPUS_RATE as usize * 120 / 1000 * channels];
    let limit = OPUS_RATE as usize * keep as usize;
    let (mut mono, mut end, mut skipped) = (Vec::new(), None, 0u64);
    let mut truncated = false;
    let mut first = true;
    loop {
        let packet = match reader.read_packet() {
            Ok(Some(p)) => p,
            Ok(None) => break,
            // A note cut short (an upload that stopped): keep what came.
            Err(_) if !mono.is_empty() => break,
            Err(e) => return Err(bad(e.to_string())),
        };
        if first {
            // The OpusTags packet.
            first = false;
            continue;
        }
        if packet.last_in_stream() {
            end = Some(packet.absgp_page());
        }
        let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            decoder.decode_float(&packet.data, &mut pcm, false)
        }));
        let n = match decoded {
            Ok(Ok(n)) => n,
            // A damaged packet: skip it, as players do.
            Ok(Err(_)) => continue,
            // opus-decoder 0.1 overflows a shift on some damaged packets, a
            // panic where overflow checks are on (found by fuzzing); its
            // state is then suspect, so the clip is refused.
            Err(_) => return Err(bad("the decoder failed on a damaged packet".into())),
        };
        // The first `pre_skip` samples are the encoder's warm-up.
        let skip = (pre_skip - skipped).min(n as u64);
        skipped += skip;
        if push_mono(
            &mut mono,
            &pcm[skip as usize * channels..n * channels],
            channels,
            limit,
        ) {
            truncated = true;
            break;
        }
    }
    if let Some(end) = end {
        mono.truncate(end.saturating_sub(pre_skip) as usize);
    }
    Ok((mono, truncated))
}

/// A WAV whose header lies about its lengths (a recorder that never went
/// back to write them, leaving 0 or 0xFFFFFFFF, or a file cut short) gets
/// the lengths of what is actually there, so it reads as far as it goes.
fn repair_wav_lengths(bytes: &mut [u8]) {
    if bytes.len() < 12 || &bytes[..4] != b"RIFF" || &bytes[8..12] != b"WAVE" {
        return;
    }
    let len = bytes.len();
    let riff = u32::try_from(len - 8).unwrap_or(u32::MAX);
    bytes[4..8].copy_from_slice(&riff.to_le_bytes());
    let mut at = 12;
    while at + 8 <= len {
        let size = u32::from_le_bytes([bytes[at + 4], bytes[at + 5], bytes[at + 6], bytes[at + 7]]);
        let room = len - at - 8;
        if &bytes[at..at + 4] == b"data" {
            let room = u32::try_from(room).unwrap_or(u32::MAX);
            let actual = if size == 0 || size > room { room } else { size };
            bytes[at + 4..at + 8].copy_from_slice(&actual.to_le_bytes());
            return;
        }
        // Chunks are padded to an even length.
        let next = at + 8 + size as usize + (size as usize & 1);
        if next <= at || next > len {
            return;
        }
        at = next;
    }
}

/// The first audio track of `bytes`, channels averaged, at its own rate;
/// and whether it went on past `keep` seconds.
fn decode_mono(
    bytes: Vec<u8>,
    max_seconds: u32,
    keep: u32,
    max_bytes: u64,
) -> Result<(Vec<f32>, u32, bool), MediaError> {
    let file_bytes = bytes.len();
    let mut track = AudioTrack::open(bytes)?;
    track.check_stated_length(max_seconds)?;
    let stated_seconds = track.stated.map(|n| n as f64 / f64::from(track.rate));
    let decoded = stated_bound(keep, stated_seconds);
    check_clip_memory(file_bytes, track.rate, decoded, max_bytes)?;
    let mut decoder = track.decoder()?;
    let limit = track.rate as usize * decoded as usize;
    let (mut mono, cut) = track.decode_packets(&mut *decoder, limit)?;
    let truncated = cut && decoded == keep;
    if let Some(n) = track.stated {
        mono.truncate(n);
    }
    Ok((mono, track.rate, truncated))
}

/// A symphonia error as a decoding error.
fn symphonia_error(e: SymphoniaError) -> MediaError {
    MediaError::Audio(format!("cannot decode the audio: {e}"))
}

/// The first audio track of a probed container, with what its header says
/// about it.
struct AudioTrack {
    /// The container, read packet by packet.
    format: Box<dyn FormatReader>,
    /// The track's id among the container's packets.
    track_id: u32,
    /// What the decoder is made from.
    params: CodecParameters,
    /// The track's sample rate, within [`RATES`].
    rate: u32,
    /// The stream's own length in frames, where the container states it:
    /// the last packet of an Ogg stream decodes past it.
    stated: Option<usize>,
}

impl AudioTrack {
    /// Probe `bytes` for a container symphonia reads and take its first
    /// track with a codec; refuse one without a sample rate or with a rate
    /// outside [`RATES`].
    fn open(bytes: Vec<u8>) -> Result<Self, MediaError> {
        let stream =
            MediaSourceStream::new(Box::new(std::io::Cursor::new(bytes)), Default::default());
        let probed = symphonia::default::get_probe()
            .format(
                &Hint::new(),
                stream,
                &FormatOptions {
                    // Trim the padding of the last packet (Ogg, MP3 with a LAME
                    // header) so a clip decodes to its own length.
                    enable_gapless: true,
                    ..FormatOptions::default()
                },
                &MetadataOptions::default(),
            )
            .map_err(|e| match e {
                SymphoniaError::Unsupported(_) => MediaError::Audio(
                    "not an audio format we decode (WAV, MP3, Ogg Vorbis and Ogg Opus are)".into(),
                ),
                e => symphonia_error(e),
            })?;
        let format = probed.format;
        let track = format
            .tracks()
            .iter()
            .find(|t| t.codec_params.codec != CODEC_TYPE_NULL)
            .ok_or_else(|| MediaError::Audio("the file has no audio track".into()))?;
        let track_id = track.id;
        let params = track.codec_params.clone();
        let stated = params.n_frames.and_then(|n| usize::try_from(n).ok());
        let rate = params
            .sample_rate
            .ok_or_else(|| MediaError::Audio("the audio track has no sample rate".into()))?;
        if !RATES.contains(&rate) {
            return Err(MediaError::Audio(format!(
                "a sample rate of {rate} Hz is outside {}..={} Hz",
                RATES.start(),
                RATES.end()
            )));
        }
        Ok(Self {
            format,
            track_id,
            params,
            rate,
            stated,
        })
    }

    /// Refuse a track whose stated length passes `max_seconds`, before any
    /// of it is decoded.
    fn check_stated_length(&self, max_seconds: u32) -> Result<(), MediaError> {
        if let Some(frames) = self.stated {
            let seconds = frames as f64 / f64::from(self.rate);
            if seconds > f64::from(max_seconds) {
                return Err(MediaError::TooLong {
                    seconds,
                    max: max_seconds,
                });
            }
        }
        Ok(())
    }

    /// A decoder for the track's codec.
    fn decoder(&self) -> Result<Box<dyn Decoder>, MediaError> {
        symphonia::default::get_codecs()
            .make(&self.params, &DecoderOptions::default())
            .map_err(|e| match e {
                SymphoniaError::Unsupported(what) => {
                    MediaError::Audio(format!("unsupported audio codec ({what})"))
                }
                e => symphonia_error(e),
            })
    }

    /// Decode the track's packets with `decoder` into mono samples, up to
    /// `limit` of them; and whether the limit cut the stream. Packets of
    /// other tracks are passed over, damaged ones skipped, and a stream
    /// that stops early keeps what was decoded.
    fn decode_packets(
        &mut self,
        decoder: &mut dyn Decoder,
        limit: usize,
    ) -> Result<(Vec<f32>, bool), MediaError> {
        // A stated length bounds `limit` (see `stated_bound`): room for it
        // all at once, rather than doubling up to twice the clip.
        let mut mono = Vec::with_capacity(if self.stated.is_some() { limit } else { 0 });
        let mut buffer: Option<SampleBuffer<f32>> = None;
        loop {
            let packet = match self.format.next_packet() {
                Ok(p) => p,
                // The end of the stream, or a file that stops early (a header
                // that promised more): keep what was decoded.
                Err(SymphoniaError::IoError(e))
                    if e.kind() == std::io::ErrorKind::UnexpectedEof =>
                {
                    break
                }
                Err(SymphoniaError::ResetRequired) => break,
                Err(e) => return Err(symphonia_error(e)),
            };
            if packet.track_id() != self.track_id {
                continue;
            }
            let decoded = match decoder.decode(&packet) {
                Ok(d) => d,
                // A damaged packet: skip it, as players do.
                Err(SymphoniaError::DecodeError(_)) => continue,
                Err(e) => return Err(symphonia_error(e)),
            };
            let spec = *decoded.spec();
            let channels = spec.channels.count().max(1);
            let buf = match &mut buffer {
                Some(b) if b.capacity() >= decoded.capacity() * channels => b,
                _ => buffer.insert(SampleBuffer::new(decoded.capacity() as u64, spec)),
            };
            buf.copy_interleaved_ref(decoded);
            if push_mono(&mut mono, buf.samples(), channels, limit) {
                return Ok((mono, true));
            }
        }
        Ok((mono, false))
    }
}

/// `samples` at `from` Hz resampled to `to` Hz (band-limited, by FFT), of
/// length `len * to / from`, aligned with the input (the resampler's delay
/// removed).
fn resample(samples: Vec<f32>, from: u32, to: u32) -> Result<Vec<f32>, MediaError> {
    if from == to {
        return Ok(samples);
    }
    let failed = |e: String| MediaError::Audio(format!("resampling failed: {e}"));
    const CHUNK: usize = 1024;
    let mut r = FftFixedIn::<f32>::new(from as usize, to as usize, CHUNK, 2, 1)
        .map_err(|e| failed(e.to_string()))?;
    let delay = r.output_delay();
    let want = (samples.len() as u64 * u64::from(to) / u64::from(from)) as usize;
    let mut out = Vec::with_capacity(want + delay + CHUNK);
    let mut pos = 0;
    while pos < samples.len() {
        let need = r.input_frames_next();
        let end = (pos + need).min(samples.len());
        let chunk = &samples[pos..end];
        let produced = if chunk.len() == need {
            r.process(&[chunk], None)
        } else {
            r.process_partial(Some(&[chunk]), None)
        }
        .map_err(|e| failed(e.to_string()))?;
        out.extend_from_slice(&produced[0]);
        pos = end;
    }
    // Flush what the delay holds back.
    while out.len() < want + delay {
        let produced = r
            .process_partial::<&[f32]>(None, None)
            .map_err(|e| failed(e.to_string()))?;
        if produced[0].is_empty() {
            break;
        }
        out.extend_from_slice(&produced[0]);
    }
    let end = (delay + want).min(out.len());
    Ok(out.get(delay..end).unwrap_or_default().to_vec())
}

/// How the log is kept off zero: `ln(max(mel, floor))` (Gemma 3n) or
/// `ln(mel + floor)` (Gemma 4).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MelFloor {
    /// `ln(max(mel, floor))`.
    Max(f64),
    /// `ln(mel + floor)`.
    Add(f64),
}

/// The settings of a feature extractor: Gemma 3n's by default,
/// [`MelSettings::gemma4`] for Gemma 4's.
#[derive(Debug, Clone, PartialEq)]
pub struct MelSettings {
    /// Mel bins.
    pub bins: usize,
    /// Samples per frame (Gemma 3n: 32 ms; Gemma 4: 20 ms).
    pub frame: usize,
    /// Samples between frame starts (10 ms).
    pub hop: usize,
    /// FFT size: the frame's next power of two (doubled on Gemma 3n,
    /// "overdrive").
    pub fft: usize,
    /// Lowest and highest filter frequencies, Hz.
    pub f_min: f64,
    /// See `f_min`.
    pub f_max: f64,
    /// Pre-emphasis coefficient, 0 for none (HTK flavour: the first sample
    /// of a frame is scaled by `1 - p`).
    pub preemphasis: f32,
    /// Floor under the mel energies before the log.
    pub floor: MelFloor,
    /// The waveform is padded to a multiple of this many samples.
    pub pad_to: usize,
    /// Zeros before the waveform (Gemma 4: half a frame).
    pub pad_left: usize,
    /// A frame counts as inside the clip when its last sample is (Gemma 4)
    /// rather than its first (Gemma 3n); Gemma 4 also zeroes the frames
    /// outside.
    pub mask_by_end: bool,
}

impl Default for MelSettings {
    fn default() -> Self {
        Self {
            bins: 128,
            frame: 512,
            hop: 160,
            fft: 1024,
            f_min: 125.0,
            f_max: 7600.0,
            preemphasis: 0.97,
            floor: MelFloor::Max(1e-5),
            pad_to: 128,
            pad_left: 0,
            mask_by_end: false,
        }
    }
}

impl MelSettings {
    /// Gemma 4's extractor: 20 ms frames every 10 ms from half a frame
    /// before the clip, a 512-point FFT, no pre-emphasis, 128 HTK mel
    /// filters from 0 to 8000 Hz, `ln(mel + 0.001)`.
    pub fn gemma4() -> Self {
        Self {
            frame: 320,
            fft: 512,
            f_min: 0.0,
            f_max: 8000.0,
            preemphasis: 0.0,
            floor: MelFloor::Add(1e-3),
            pad_left: 160,
            mask_by_end: true,
            ..Self::default()
        }
    }
}

/// Log-mel features of a clip: `frames` rows of `bins`.
#[derive(Debug, Clone, PartialEq)]
pub struct LogMel {
    /// Rows of `bins` values.
    pub data: Vec<f32>,
    /// Frames computed (over the padded waveform).
    pub frames: usize,
    /// Frames that start inside the clip, not in its padding (the
    /// extractor's mask); the rest are masked out by the encoder.
    pub valid: usize,
    /// Values per frame.
    pub bins: usize,
}

/// HTK mel filters, `n_freqs` rows of `bins`, as transformers'
/// `create_fb_matrix` builds them (no area normalisation).
fn mel_filters(s: &MelSettings) -> Vec<f64> {
    let n_freqs = s.fft / 2 + 1;
    let mel = |f: f64| 2595.0 * (1.0 + f / 700.0).log10();
    let (m_min, m_max) = (mel(s.f_min), mel(s.f_max));
    let points: Vec<f64> = (0..s.bins + 2)
        .map(|i| {
            let m = m_min + (m_max - m_min) * i as f64 / (s.bins + 1) as f64;
            700.0 * (10f64.powf(m / 2595.0) - 1.0)
        })
        .collect();
    let bin_hz = (SAMPLE_RATE as f64 / s.fft as f64) as f32;
    let mut fb = vec![0.0; n_freqs * s.bins];
    for (k, row) in fb.chunks_exact_mut(s.bins).enumerate() {
        // The frequencies are f32 in transformers (`arange(..., float32)`).
        let f = f64::from(k as f32 * bin_hz);
        for (m, v) in row.iter_mut().enumerate() {
            let down = (f - points[m]) / (points[m + 1] - points[m]);
            let up = (points[m + 2] - f) / (points[m + 2] - points[m + 1]);
            *v = down.min(up).max(0.0);
        }
    }
    fb
}

impl LogMel {
    /// The features of `clip`: the waveform padded with zeros to a
    /// multiple of `pad_to`, frames of `frame + 1` samples every `hop`,
    /// HTK pre-emphasis, a periodic Hann window, the magnitude of a
    /// zero-padded real FFT, HTK mel filters and `ln(max(mel, floor))`.
    /// A clip too short for one frame (32 ms) is refused.
    pub fn compute(clip: &Clip, s: &MelSettings) -> Result<Self, MediaError> {
        let len = clip.samples.len();
        // Padded on the right to `pad_to`, then on the left by `pad_left`.
        let padded = len.div_ceil(s.pad_to.max(1)) * s.pad_to.max(1) + s.pad_left;
        let span = s.frame + 1;
        if padded < span || s.fft < s.frame || s.hop == 0 {
            return Err(MediaError::Audio(format!(
                "the audio clip is {:.1} ms long; at least {:.1} ms is needed",
                len as f64 * 1000.0 / SAMPLE_RATE as f64,
                span as f64 * 1000.0 / SAMPLE_RATE as f64
            )));
        }
        let frames = (padded - span) / s.hop + 1;
        let real = s.pad_left..s.pad_left + len;
        let valid = (0..frames)
            .filter(|&j| real.contains(&(j * s.hop + if s.mask_by_end { span - 1 } else { 0 })))
            .count();
        let window: Vec<f32> = (0..s.frame)
            .map(|n| {
                let c = (2.0 * std::f32::consts::PI * n as f32 / s.frame as f32).cos();
                0.5 * (1.0 - c)
            })
            .collect();
        let fb = mel_filters(s);
        let n_freqs = s.fft / 2 + 1;
        // An f64 FFT of the f32 frames: transformers' numpy FFT runs in f32,
        // so what differs from it is its rounding, not ours.
        let fft = RealFftPlanner::<f64>::new().plan_fft_forward(s.fft);
        let mut input = fft.make_input_vec();
        let mut spectrum = fft.make_output_vec();
        let mut magnitude = vec![0.0f64; n_freqs];
        let sample = |i: usize| {
            i.checked_sub(s.pad_left)
                .and_then(|i| clip.samples.get(i))
                .copied()
                .unwrap_or(0.0)
        };
        let p = s.preemphasis;
        let mut data = vec![0.0f32; frames * s.bins];
        for (j, out) in data.chunks_exact_mut(s.bins).enumerate() {
            let start = j * s.hop;
            input.iter_mut().for_each(|v| *v = 0.0);
            for (i, v) in input[..s.frame].iter_mut().enumerate() {
                let x = if p == 0.0 {
                    sample(start + i)
                } else if i == 0 {
                    sample(start) * (1.0 - p)
                } else {
                    sample(start + i) - p * sample(start + i - 1)
                };
                *v = f64::from(x * window[i]);
            }
            fft.process(&mut input, &mut spectrum)
                .map_err(|e| MediaError::Audio(format!("FFT failed: {e}")))?;
            for (m, c) in magnitude.iter_mut().zip(&spectrum) {
                *m = c.norm();
            }
            for (b, o) in out.iter_mut().enumerate() {
                let e: f64 = magnitude
                    .iter()
                    .enumerate()
                    .map(|(k, &m)| m * fb[k * s.bins + b])
                    .sum();
                *o = match s.floor {
                    MelFloor::Max(f) => e.max(f),
                    MelFloor::Add(f) => e + f,
                }
                .ln() as f32;
            }
        }
        if s.mask_by_end {
            // Frames past the clip are the trailing ones; Gemma 4's
            // extractor zeroes them.
            data[valid * s.bins..].fill(0.0);
        }
        Ok(Self {
            data,
            frames,
            valid,
            bins: s.bins,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 16-bit PCM WAV of `samples` at `rate` Hz with `channels` channels
    /// (the same samples on each), the data chunk claiming `claimed` bytes.
    pub(crate) fn wav(samples: &[f32], rate: u32, channels: u16, claimed: Option<u32>) -> Vec<u8> {
        let data_len = samples.len() as u32 * 2 * u32::from(channels);
        let mut out = Vec::new();
        out.extend_from_slice(b"RIFF");
        out.extend_from_slice(&(36 + data_len).to_le_bytes());
        out.extend_from_slice(b"WAVEfmt ");
        out.extend_from_slice(&16u32.to_le_bytes());
        out.extend_from_slice(&1u16.to_le_bytes());
        out.extend_from_slice(&channels.to_le_bytes());
        out.extend_from_slice(&rate.to_le_bytes());
        out.extend_from_slice(&(rate * 2 * u32::from(channels)).to_le_bytes());
        out.extend_from_slice(&(2 * channels).to_le_bytes());
        out.extend_from_slice(&16u16.to_le_bytes());
        out.extend_from_slice(b"data");
        out.extend_from_slice(&claimed.unwrap_or(data_len).to_le_bytes());
        for &s in samples {
            let v = (s.clamp(-1.0, 1.0) * 32767.0).round() as i16;
            for _ in 0..channels {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        out
    }

    #[test]
    fn a_clip_whose_rate_needs_more_than_the_memory_bound_is_refused() {
        let clip = wav(&tone(440.0, 384_000, 0.1), 384_000, 1, None);
        // Priced at its stated 0.1 s, rounded up and a second past it.
        let seconds = stated_bound(MAX_SECONDS, Some(0.1));
        assert_eq!(seconds, 2);
        let needed = clip_memory(clip.len(), 384_000, seconds);
        // 2 s of 384 kHz floats, as they grow, and 2 s at 16 kHz.
        assert!(needed > 2 * 4 * 384_000 * 2, "{needed}");
        let err = Clip::decode_within(&clip, 60, needed - 1).unwrap_err();
        assert!(
            matches!(err, MediaError::TooMuchMemory { max, .. } if max == needed - 1),
            "{err}"
        );
        assert!(Clip::decode_within(&clip, 60, needed).is_ok());
    }

    fn tone(hz: f32, rate: u32, seconds: f32) -> Vec<f32> {
        let n = (rate as f32 * seconds) as usize;
        (0..n)
            .map(|i| 0.5 * (2.0 * std::f32::consts::PI * hz * i as f32 / rate as f32).sin())
            .collect()
    }

    #[test]
    fn wav_at_16k_decodes_to_its_samples() {
        let t = tone(440.0, 16_000, 0.5);
        let clip = Clip::decode(&wav(&t, 16_000, 1, None)).unwrap();
        assert_eq!(clip.samples.len(), t.len());
        let worst = clip
            .samples
            .iter()
            .zip(&t)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        assert!(worst < 1e-4, "{worst}");
        assert!(!clip.truncated);
    }

    /// Stereo at 8 kHz: averaged to mono and resampled to twice as many
    /// samples, the tone's frequency kept (zero crossings per second).
    #[test]
    fn stereo_8k_is_averaged_and_resampled() {
        let t = tone(300.0, 8_000, 1.0);
        let clip = Clip::decode(&wav(&t, 8_000, 2, None)).unwrap();
        assert_eq!(clip.source_rate, 8_000);
        assert_eq!(clip.samples.len(), 16_000);
        let crossings = clip.samples[100..15_900]
            .windows(2)
            .filter(|w| (w[0] < 0.0) != (w[1] < 0.0))
            .count();
        // 300 Hz: 600 crossings a second, over 0.9875 s.
        assert!((585..=600).contains(&crossings), "{crossings}");
        let peak = clip.samples[100..15_900]
            .iter()
            .fold(0.0f32, |m, v| m.max(v.abs()));
        assert!((0.47..0.53).contains(&peak), "{peak}");
    }

    #[test]
    fn a_long_clip_is_cut_at_thirty_seconds() {
        let t = vec![0.1f32; 16_000 * 31];
        let clip = Clip::decode(&wav(&t, 16_000, 1, None)).unwrap();
        assert!(clip.truncated);
        assert_eq!(clip.samples.len(), 16_000 * 30);
    }

    #[test]
    fn bad_files_are_refused_or_read_as_far_as_they_go() {
        assert!(Clip::decode(&[]).is_err());
        assert!(Clip::decode(b"not audio at all, just text").is_err());
        // A header with no samples.
        assert!(Clip::decode(&wav(&[], 16_000, 1, None)).is_err());
        // A header that claims far more data than follows: what is there.
        let t = tone(440.0, 16_000, 0.25);
        let clip = Clip::decode(&wav(&t, 16_000, 1, Some(10_000_000))).unwrap();
        assert_eq!(clip.samples.len(), t.len());
        // 2^32 - 1 bytes claimed (a streamed WAV's placeholder): the same.
        let clip = Clip::decode(&wav(&t, 16_000, 1, Some(u32::MAX))).unwrap();
        assert_eq!(clip.samples.len(), t.len());
        // Longer than the bound: refused by its length, before decoding.
        let long = tone(440.0, 8_000, 3.0);
        let err = Clip::decode_within(
            &wav(&long, 8_000, 1, None),
            2,
            crate::DEFAULT_MAX_DECODE_BYTES,
        )
        .unwrap_err();
        assert!(matches!(err, MediaError::TooLong { max: 2, .. }), "{err}");
        assert!(err.to_string().contains("3.0 s"), "{err}");
        // Truncated in the middle of the header.
        assert!(Clip::decode(&wav(&t, 16_000, 1, None)[..30]).is_err());
        // A codec we do not decode (WMA in a WAV header): named as such.
        let mut wma = wav(&t, 16_000, 1, None);
        wma[20..22].copy_from_slice(&0x0161u16.to_le_bytes());
        let err = Clip::decode(&wma).unwrap_err().to_string();
        assert!(
            err.contains("unsupported") || err.contains("not an audio format"),
            "{err}"
        );
    }

    #[test]
    fn features_refuse_a_clip_shorter_than_a_frame() {
        let s = MelSettings::default();
        let short = Clip::from_samples(vec![0.1; 300]);
        assert!(LogMel::compute(&short, &s).is_err());
        let ok = Clip::from_samples(vec![0.1; 600]);
        let mel = LogMel::compute(&ok, &s).unwrap();
        // 600 samples pad to 640: (640 - 513) / 160 + 1 frames.
        assert_eq!((mel.frames, mel.valid, mel.bins), (1, 1, 128));
    }
}
