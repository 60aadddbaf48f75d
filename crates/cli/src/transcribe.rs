//! `hearth transcribe`: an audio file to text on a model that hears, a
//! window of at most 30 s at a time (see [`engine::transcribe`]), printed
//! as it comes or in one of OpenAI's transcript formats.

use crate::commands::load_engine;
use crate::ModelArgs;
use anyhow::{bail, Context, Result};
use engine::transcribe::{AudioTask, TranscriptFormat, Transcription};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

/// Flags of `hearth transcribe`.
#[derive(clap::Args, Debug)]
pub struct TranscribeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The audio file (WAV, MP3, Ogg Vorbis or Opus), of any length up to
    /// ten minutes.
    pub file: PathBuf,
    /// The language spoken: an ISO-639-1 code (`en`) or its name.
    #[arg(long)]
    pub language: Option<String>,
    /// Text the speech follows, for its spelling and style.
    #[arg(long)]
    pub prompt: Option<String>,
    /// Translate into English instead.
    #[arg(long)]
    pub translate: bool,
    /// Print the transcript as json, text, srt, verbose_json or vtt at the
    /// end, instead of the text as it comes.
    #[arg(long, value_name = "FORMAT")]
    pub format: Option<String>,
    /// Sampling temperature (0: the likeliest text).
    #[arg(long, default_value_t = 0.0)]
    pub temp: f32,
}

/// Transcribe the file and print the text (or the transcript in `--format`).
pub fn run(args: &TranscribeArgs) -> Result<ExitCode> {
    let format: Option<TranscriptFormat> = args
        .format
        .as_deref()
        .map(str::parse)
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let bytes = std::fs::read(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    let sampling = engine::SamplingParams {
        temperature: args.temp,
        ..Default::default()
    };
    let engine = load_engine(&args.model, sampling.clone())?;
    if !engine.has_audio() {
        bail!(
            "{} does not hear (no audio tower): give a Gemma 3n or Gemma 4 model with its \
             audio encoder (--mmproj for Gemma 4's projector file)",
            args.model.model
        );
    }
    let clip = engine
        .decode_long_clip(&bytes)
        .with_context(|| format!("cannot decode {}", args.file.display()))?;
    let request = Transcription {
        task: if args.translate {
            AudioTask::Translate
        } else {
            AudioTask::Transcribe
        },
        language: args.language.clone(),
        prompt: args.prompt.clone(),
    };
    let start = Instant::now();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let (mut written, mut printed) = (0, false);
    let transcript = engine.transcribe(&clip, &request, &sampling, |segment, windows| {
        written += 1;
        eprintln!(
            "hearth: window {written} of {windows} ({:.1}-{:.1} s) done",
            segment.start, segment.end
        );
        // The text as each window ends (joined as the transcript joins it).
        if format.is_none() && !segment.text.is_empty() {
            let space = if printed { " " } else { "" };
            let _ = write!(out, "{space}{}", segment.text).and_then(|()| out.flush());
            printed = true;
        }
    })?;
    let secs = start.elapsed().as_secs_f64();
    match format {
        Some(f) => write!(out, "{}", transcript.render(f, &serde_json::Value::Null))?,
        None => writeln!(out)?,
    }
    eprintln!(
        "hearth: {:.1} s of audio in {} windows transcribed in {secs:.1} s ({:.1}x real time)",
        transcript.duration,
        transcript.segments.len(),
        transcript.duration / secs.max(1e-9)
    );
    Ok(ExitCode::SUCCESS)
}
