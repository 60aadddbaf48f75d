//! Speech to text, as OpenAI's audio API and `hearth transcribe` ask for
//! it: the instruction a model that hears is given for each window of a
//! clip (Gemma's own speech-recognition and speech-translation prompts),
//! what is kept of its answer, and the transcript in each format the API
//! answers in.
//!
//! A clip longer than one window ([`media::Clip::windows`]) is heard a
//! window at a time, each with the same instruction and nothing of the
//! windows before it, and the windows' texts are joined with a space; each
//! window is one segment of the verbose, SRT and WebVTT formats.

use crate::{
    ChatMessage, Engine, EngineError, GenerateOptions, GenerationRequest, PromptRequest, Sampler,
    SamplingParams,
};
use media::Clip;
use serde_json::{json, Value};
use std::fmt::Write as _;

/// Most tokens generated for one window: 30 s of fast speech is about 100
/// words; this leaves room for scripts that take more tokens a word
/// (Whisper's decoder stops at 448 too).
pub const WINDOW_MAX_TOKENS: usize = 448;

/// What to make of the speech.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AudioTask {
    /// Text in the language spoken (`/v1/audio/transcriptions`).
    Transcribe,
    /// Text in English (`/v1/audio/translations`).
    Translate,
}

/// A transcription's settings.
#[derive(Debug, Clone)]
pub struct Transcription {
    /// Transcribe or translate.
    pub task: AudioTask,
    /// The language spoken, as an ISO-639-1 code (`en`) or a name; `None`
    /// leaves it to the model.
    pub language: Option<String>,
    /// Text the speech follows (OpenAI's `prompt`): its spelling and style.
    pub prompt: Option<String>,
}

impl Transcription {
    /// The language spoken, by name: a known code's English name, else the
    /// text as given.
    pub fn language_name(&self) -> Option<String> {
        let given = self.language.as_deref()?.trim();
        if given.is_empty() {
            return None;
        }
        Some(language_name(given).map_or_else(|| given.to_string(), str::to_string))
    }

    /// The instruction for one window: Gemma's speech-recognition prompt,
    /// or its speech-translation prompt into English.
    pub fn instruction(&self) -> String {
        let spoken = self.language_name();
        let source = spoken.as_deref().unwrap_or("its original language");
        let mut text = match self.task {
            AudioTask::Transcribe => {
                let into = spoken.as_deref().map_or_else(
                    || "text in that language".to_string(),
                    |l| format!("{l} text"),
                );
                format!(
                    "Transcribe the following speech segment in {source} into {into}.\n\n\
                     Follow these specific instructions for formatting the answer:\n\
                     * Only output the transcription, with no newlines.\n\
                     * When transcribing numbers, write the digits, i.e. write 1.7 and not \
                     one point seven, and write 3 instead of three."
                )
            }
            AudioTask::Translate => format!(
                "Transcribe the following speech segment in {source}, then translate it into \
                 English.\nWhen formatting the answer, first output the transcription in \
                 {source}, then one newline, then output the string 'English: ', then the \
                 translation in English."
            ),
        };
        if let Some(p) = self
            .prompt
            .as_deref()
            .map(str::trim)
            .filter(|p| !p.is_empty())
        {
            let _ = write!(
                text,
                "\n\nThe speech follows this text; keep to its spelling and style: {p}"
            );
        }
        text
    }

    /// The transcript of `clip` made of its windows' `segments`, in the
    /// language the request named (lower-case) or `unknown`.
    pub fn transcript(&self, clip: &Clip, segments: Vec<Segment>) -> Transcript {
        Transcript {
            task: self.task,
            language: self
                .language_name()
                .map_or_else(|| "unknown".into(), |l| l.to_lowercase()),
            duration: clip.samples.len() as f64 / f64::from(media::SAMPLE_RATE),
            segments,
        }
    }

    /// The user turn for one window: the clip's marker, then the
    /// instruction (the order of Gemma's audio examples).
    pub fn message(&self) -> ChatMessage {
        let mut m = ChatMessage::user("");
        m.push_media(crate::AUDIO_MARKER);
        m.content.push_str(&self.instruction());
        m
    }

    /// What is kept of a window's answer: the text, trimmed; when
    /// translating, what follows the last `English:` the answer wrote
    /// (the whole answer when it wrote none).
    pub fn answer_text(&self, answer: &str) -> String {
        let answer = answer.trim();
        let kept = match self.task {
            AudioTask::Transcribe => answer,
            AudioTask::Translate => answer
                .rfind("English:")
                .map_or(answer, |at| &answer[at + "English:".len()..]),
        };
        kept.split_whitespace().collect::<Vec<_>>().join(" ")
    }
}

impl Engine {
    /// Decode the audio file `bytes` whole (not cut at one window), within
    /// this engine's clip limits.
    pub fn decode_long_clip(&self, bytes: &[u8]) -> Result<Clip, EngineError> {
        let limits = &self.options().limits;
        Ok(Clip::decode_whole(
            bytes,
            limits.clip_seconds,
            limits.decode_bytes,
        )?)
    }

    /// Transcribe `clip` a window at a time on this engine, each window's
    /// segment passed to `on_segment` (with the number of windows) as it
    /// ends; the transcript with a segment per window.
    pub fn transcribe(
        &self,
        clip: &Clip,
        request: &Transcription,
        sampling: &SamplingParams,
        mut on_segment: impl FnMut(&Segment, usize),
    ) -> Result<Transcript, EngineError> {
        let rate = f64::from(media::SAMPLE_RATE);
        let windows = clip.windows();
        let count = windows.len();
        let mut segments = Vec::with_capacity(count);
        for range in windows {
            let (start, end) = (range.start as f64 / rate, range.end as f64 / rate);
            let clips = [self.encode_audio(&clip.window(range).to_wav())?];
            let messages = [request.message()];
            let prompt = self.prompt(&PromptRequest::chat(&messages).with_media(&[], &clips))?;
            let opts = GenerateOptions {
                max_tokens: WINDOW_MAX_TOKENS,
                stop: Vec::new(),
                stop_on_eog: true,
                render_special: false,
                speculation: None,
            };
            let mut sampler = Sampler::new(sampling.clone());
            let mut session = self.session();
            let generation = GenerationRequest {
                media: &prompt.media,
                ..GenerationRequest::new(&prompt.ids, &opts)
            };
            let decoding = session.begin(generation, &sampler)?;
            let done = session.run(decoding, &mut sampler, |_| true)?;
            let segment = Segment {
                start,
                end,
                text: request.answer_text(&done.text),
                tokens: done.ids,
                avg_logprob: None,
                temperature: sampling.temperature,
            };
            on_segment(&segment, count);
            segments.push(segment);
        }
        Ok(request.transcript(clip, segments))
    }
}

/// The English name of the language of an ISO-639-1 code Whisper and
/// Gemma both know, case aside.
pub fn language_name(code: &str) -> Option<&'static str> {
    const NAMES: &[(&str, &str)] = &[
        ("ar", "Arabic"),
        ("bg", "Bulgarian"),
        ("bn", "Bengali"),
        ("ca", "Catalan"),
        ("cs", "Czech"),
        ("da", "Danish"),
        ("de", "German"),
        ("el", "Greek"),
        ("en", "English"),
        ("es", "Spanish"),
        ("et", "Estonian"),
        ("fa", "Persian"),
        ("fi", "Finnish"),
        ("fr", "French"),
        ("he", "Hebrew"),
        ("hi", "Hindi"),
        ("hr", "Croatian"),
        ("hu", "Hungarian"),
        ("id", "Indonesian"),
        ("it", "Italian"),
        ("ja", "Japanese"),
        ("ko", "Korean"),
        ("lt", "Lithuanian"),
        ("lv", "Latvian"),
        ("ms", "Malay"),
        ("nl", "Dutch"),
        ("no", "Norwegian"),
        ("pl", "Polish"),
        ("pt", "Portuguese"),
        ("ro", "Romanian"),
        ("ru", "Russian"),
        ("sk", "Slovak"),
        ("sl", "Slovenian"),
        ("sr", "Serbian"),
        ("sv", "Swedish"),
        ("sw", "Swahili"),
        ("ta", "Tamil"),
        ("th", "Thai"),
        ("tr", "Turkish"),
        ("uk", "Ukrainian"),
        ("ur", "Urdu"),
        ("vi", "Vietnamese"),
        ("zh", "Chinese"),
    ];
    NAMES
        .iter()
        .find(|(c, _)| c.eq_ignore_ascii_case(code))
        .map(|(_, name)| *name)
}

/// One window's text and where it lies in the clip.
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    /// Seconds from the clip's start.
    pub start: f64,
    /// Seconds from the clip's start.
    pub end: f64,
    /// What was kept of the window's answer.
    pub text: String,
    /// The generated token ids.
    pub tokens: Vec<u32>,
    /// The mean log-probability of the generated tokens, when known.
    pub avg_logprob: Option<f64>,
    /// The temperature the window was sampled at.
    pub temperature: f32,
}

/// A clip's transcript.
#[derive(Debug, Clone, PartialEq)]
pub struct Transcript {
    /// Transcribed or translated.
    pub task: AudioTask,
    /// The language named in the request, lower-case, or `unknown` (the
    /// model is not asked to name it).
    pub language: String,
    /// The clip's length in seconds.
    pub duration: f64,
    /// The windows' texts, in order.
    pub segments: Vec<Segment>,
}

/// The formats a transcript is answered in (OpenAI's `response_format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TranscriptFormat {
    /// `{"text": ...}` (and usage).
    Json,
    /// The text alone.
    Text,
    /// SubRip subtitles, a cue per segment.
    Srt,
    /// Text, language, duration and segments.
    VerboseJson,
    /// WebVTT subtitles, a cue per segment.
    Vtt,
}

impl std::str::FromStr for TranscriptFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "json" => Ok(Self::Json),
            "text" => Ok(Self::Text),
            "srt" => Ok(Self::Srt),
            "verbose_json" => Ok(Self::VerboseJson),
            "vtt" => Ok(Self::Vtt),
            other => Err(format!(
                "`{other}` is not a transcript format; use json, text, srt, verbose_json or vtt"
            )),
        }
    }
}

impl TranscriptFormat {
    /// The media type its body is sent as.
    pub fn content_type(self) -> &'static str {
        match self {
            Self::Json | Self::VerboseJson => "application/json",
            Self::Text | Self::Srt => "text/plain; charset=utf-8",
            Self::Vtt => "text/vtt; charset=utf-8",
        }
    }
}

impl Transcript {
    /// The whole text: the segments' texts joined by a space.
    pub fn text(&self) -> String {
        let texts: Vec<&str> = self
            .segments
            .iter()
            .map(|s| s.text.as_str())
            .filter(|t| !t.is_empty())
            .collect();
        texts.join(" ")
    }

    /// The transcript in `format`; `usage` joins the JSON formats (OpenAI
    /// sends it with `json` and `verbose_json`).
    pub fn render(&self, format: TranscriptFormat, usage: &Value) -> String {
        match format {
            TranscriptFormat::Json => json!({"text": self.text(), "usage": usage}).to_string(),
            TranscriptFormat::Text => format!("{}\n", self.text()),
            TranscriptFormat::Srt => self.cues(CueStyle::Srt),
            TranscriptFormat::Vtt => self.cues(CueStyle::Vtt),
            TranscriptFormat::VerboseJson => self.verbose(usage).to_string(),
        }
    }

    fn verbose(&self, usage: &Value) -> Value {
        let segments: Vec<Value> = self
            .segments
            .iter()
            .enumerate()
            .map(|(id, s)| {
                let mut v = json!({
                    "id": id,
                    "seek": (s.start * 100.0).round() as u64,
                    "start": s.start,
                    "end": s.end,
                    "text": s.text,
                    "tokens": s.tokens,
                    "temperature": s.temperature,
                });
                if let Some(lp) = s.avg_logprob {
                    v["avg_logprob"] = json!(lp);
                }
                v
            })
            .collect();
        json!({
            "task": match self.task {
                AudioTask::Transcribe => "transcribe",
                AudioTask::Translate => "translate",
            },
            "language": self.language,
            "duration": self.duration,
            "text": self.text(),
            "segments": segments,
            "usage": usage,
        })
    }

    /// Subtitles: a numbered cue per segment (SRT) or the WebVTT header
    /// and a cue per segment.
    fn cues(&self, style: CueStyle) -> String {
        let mut out = String::new();
        if style == CueStyle::Vtt {
            out.push_str("WEBVTT\n\n");
        }
        for (i, s) in self.segments.iter().enumerate() {
            if style == CueStyle::Srt {
                let _ = writeln!(out, "{}", i + 1);
            }
            let _ = writeln!(
                out,
                "{} --> {}\n{}\n",
                timestamp(s.start, style),
                timestamp(s.end, style),
                s.text
            );
        }
        out
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CueStyle {
    Srt,
    Vtt,
}

/// `HH:MM:SS,mmm` (SRT) or `HH:MM:SS.mmm` (WebVTT).
fn timestamp(seconds: f64, style: CueStyle) -> String {
    let ms = (seconds.max(0.0) * 1000.0).round() as u64;
    let (h, m, s, ms) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
    let sep = if style == CueStyle::Srt { ',' } else { '.' };
    format!("{h:02}:{m:02}:{s:02}{sep}{ms:03}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transcript() -> Transcript {
        let seg = |start, end, text: &str| Segment {
            start,
            end,
            text: text.into(),
            tokens: vec![1, 2],
            avg_logprob: Some(-0.25),
            temperature: 0.0,
        };
        Transcript {
            task: AudioTask::Transcribe,
            language: "english".into(),
            duration: 3725.5,
            segments: vec![
                seg(0.0, 28.34, "Hello there."),
                seg(28.34, 3725.5, "General Kenobi."),
            ],
        }
    }

    #[test]
    fn subtitles_have_numbered_cues_and_their_timestamps() {
        let t = transcript();
        let usage = json!(null);
        assert_eq!(
            t.render(TranscriptFormat::Srt, &usage),
            "1\n00:00:00,000 --> 00:00:28,340\nHello there.\n\n\
             2\n00:00:28,340 --> 01:02:05,500\nGeneral Kenobi.\n\n"
        );
        assert_eq!(
            t.render(TranscriptFormat::Vtt, &usage),
            "WEBVTT\n\n00:00:00.000 --> 00:00:28.340\nHello there.\n\n\
             00:00:28.340 --> 01:02:05.500\nGeneral Kenobi.\n\n"
        );
        assert_eq!(
            t.render(TranscriptFormat::Text, &usage),
            "Hello there. General Kenobi.\n"
        );
    }

    #[test]
    fn verbose_json_has_openais_fields() {
        let usage = json!({"type": "duration", "seconds": 3726});
        let v: Value =
            serde_json::from_str(&transcript().render(TranscriptFormat::VerboseJson, &usage))
                .unwrap();
        assert_eq!(v["text"], "Hello there. General Kenobi.");
        assert_eq!(v["duration"], 3725.5);
        assert_eq!(v["language"], "english");
        assert_eq!(v["segments"][1]["id"], 1);
        assert_eq!(v["segments"][1]["seek"], 2834);
        assert_eq!(v["segments"][1]["avg_logprob"], -0.25);
        assert_eq!(v["usage"], usage);
    }

    #[test]
    fn the_instruction_names_the_language_and_the_prompt() {
        let t = Transcription {
            task: AudioTask::Transcribe,
            language: Some("FR".into()),
            prompt: Some("Ouagadougou".into()),
        };
        let text = t.instruction();
        assert!(
            text.starts_with("Transcribe the following speech segment in French into French text.")
        );
        assert!(text.ends_with("style: Ouagadougou"));
        let m = t.message();
        assert_eq!(m.media().len(), 1);
        assert_eq!(m.media()[0], 0..crate::AUDIO_MARKER.len());
        let unknown = Transcription {
            language: Some("Klingon".into()),
            prompt: None,
            ..t
        };
        assert!(unknown
            .instruction()
            .contains("in Klingon into Klingon text"));
    }

    #[test]
    fn a_translation_keeps_what_follows_english() {
        let t = Transcription {
            task: AudioTask::Translate,
            language: None,
            prompt: None,
        };
        assert_eq!(
            t.answer_text("Bonjour à tous\nEnglish: Hello  everyone\n"),
            "Hello everyone"
        );
        assert_eq!(t.answer_text(" Hello "), "Hello");
        let plain = Transcription {
            task: AudioTask::Transcribe,
            ..t
        };
        assert_eq!(plain.answer_text("a\nb  c "), "a b c");
    }

    #[test]
    fn formats_parse_by_openais_names() {
        assert_eq!("verbose_json".parse(), Ok(TranscriptFormat::VerboseJson));
        assert!("xml"
            .parse::<TranscriptFormat>()
            .unwrap_err()
            .contains("srt"));
    }
}
