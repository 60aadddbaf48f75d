//! The multipart form of OpenAI's audio API, read from a body already
//! held within the server's limits: the clip and the fields that say what
//! to make of it.

use crate::error::ApiError;
use engine::transcribe::{AudioTask, TranscriptFormat, Transcription};

/// The longest `language` taken: a code or a language's name.
const MAX_LANGUAGE_BYTES: usize = 64;
/// The longest `prompt` taken: it goes into every window's prompt (OpenAI
/// reads 224 tokens of it).
const MAX_PROMPT_BYTES: usize = 4096;

/// A transcription or translation request.
pub(super) struct AudioForm {
    /// The audio file's bytes (a part of the body's buffer, not a copy).
    pub(super) file: bytes::Bytes,
    /// The model asked for, if any (OpenAI's own speech models' names ask
    /// for the default).
    pub(super) model: Option<String>,
    /// What to make of the speech.
    pub(super) transcription: Transcription,
    /// How to answer.
    pub(super) format: TranscriptFormat,
    /// Sampling temperature (OpenAI's default, 0: the likeliest text).
    pub(super) temperature: f32,
    /// Answer as server-sent events.
    pub(super) stream: bool,
}

/// Parse `body`, sent as `content_type` (`multipart/form-data` with its
/// boundary), into a request for `task`.
pub(super) async fn parse(
    body: Vec<u8>,
    content_type: Option<&str>,
    task: AudioTask,
) -> Result<AudioForm, ApiError> {
    let boundary = content_type
        .and_then(|t| multer::parse_boundary(t).ok())
        .ok_or_else(|| {
            ApiError::unsupported_media_type(
                "The audio API takes a `multipart/form-data` body (a `file` field and the \
                 request's fields), as OpenAI's clients send it.",
            )
        })?;
    let chunk = bytes::Bytes::from(body);
    let stream = futures_util::stream::once(async move { Ok::<_, std::io::Error>(chunk) });
    let mut parts = multer::Multipart::new(stream, boundary);
    let mut fields = Fields::default();
    while let Some(field) = parts.next_field().await.map_err(malformed)? {
        let name = field.name().unwrap_or("").to_string();
        let value = field.bytes().await.map_err(malformed)?;
        fields.take(&name, value)?;
    }
    fields.into_form(task)
}

fn malformed(e: multer::Error) -> ApiError {
    ApiError::bad_request(format!("The multipart body is malformed: {e}."))
}

/// The fields as they arrive.
#[derive(Default)]
struct Fields {
    file: Option<bytes::Bytes>,
    model: Option<String>,
    language: Option<String>,
    prompt: Option<String>,
    format: Option<String>,
    temperature: Option<String>,
    stream: Option<String>,
}

impl Fields {
    /// Keep field `name`; refuse what Hearth cannot honour (word
    /// timestamps, log-probabilities, server-side voice detection), and
    /// pass over fields other APIs send.
    fn take(&mut self, name: &str, value: bytes::Bytes) -> Result<(), ApiError> {
        let text = || {
            std::str::from_utf8(&value)
                .map(str::to_string)
                .map_err(|_| ApiError::bad_param(name, "The field is not UTF-8 text."))
        };
        match name {
            "file" => self.file = Some(value.clone()),
            "model" => self.model = Some(text()?),
            "language" => self.language = Some(bounded(name, text()?, MAX_LANGUAGE_BYTES)?),
            "prompt" => self.prompt = Some(bounded(name, text()?, MAX_PROMPT_BYTES)?),
            "response_format" => self.format = Some(text()?),
            "temperature" => self.temperature = Some(text()?),
            "stream" => self.stream = Some(text()?),
            "timestamp_granularities[]" | "timestamp_granularities" if text()? != "segment" => {
                return Err(ApiError::bad_param(
                    name,
                    "Only `segment` timestamps are given (a segment per window of the clip); \
                     word timestamps are not.",
                ))
            }
            "include[]" | "include" => {
                return Err(ApiError::bad_param(
                    name,
                    "`include` (token log-probabilities) is not supported; verbose_json gives \
                     each segment's mean log-probability.",
                ))
            }
            "chunking_strategy" if text()? != "auto" => {
                return Err(ApiError::bad_param(
                    name,
                    "Only `auto` chunking: long clips are cut at quiet moments into windows of \
                     at most 30 s.",
                ))
            }
            _ => {}
        }
        Ok(())
    }

    fn into_form(self, task: AudioTask) -> Result<AudioForm, ApiError> {
        let file = self.file.filter(|f| !f.is_empty()).ok_or_else(|| {
            ApiError::bad_param("file", "The audio `file` field is missing or empty.")
        })?;
        let format = match self.format.as_deref() {
            None => TranscriptFormat::Json,
            Some(f) => f
                .parse()
                .map_err(|e: String| ApiError::bad_param("response_format", e))?,
        };
        let temperature = match self.temperature.as_deref().map(str::trim) {
            None | Some("") => 0.0,
            Some(t) => t
                .parse::<f32>()
                .ok()
                .filter(|t| (0.0..=2.0).contains(t))
                .ok_or_else(|| {
                    ApiError::bad_param(
                        "temperature",
                        "`temperature` must be a number from 0 to 2.",
                    )
                })?,
        };
        let stream = match self.stream.as_deref().map(str::trim) {
            None | Some("false" | "False" | "0" | "") => false,
            Some("true" | "True" | "1") if task == AudioTask::Transcribe => true,
            Some("true" | "True" | "1") => {
                return Err(ApiError::bad_param(
                    "stream",
                    "Translations are not streamed (the translation follows the transcription \
                     in the model's answer).",
                ))
            }
            Some(_) => {
                return Err(ApiError::bad_param(
                    "stream",
                    "`stream` must be true or false.",
                ))
            }
        };
        if stream && !matches!(format, TranscriptFormat::Json | TranscriptFormat::Text) {
            return Err(ApiError::bad_param(
                "stream",
                "A stream gives text events; ask for `json` or `text` with it.",
            ));
        }
        Ok(AudioForm {
            file,
            model: self
                .model
                .filter(|m| !m.is_empty() && !is_openai_speech_model(m)),
            transcription: Transcription {
                task,
                language: self.language,
                prompt: self.prompt,
            },
            format,
            temperature,
            stream,
        })
    }
}

/// OpenAI's speech-to-text model names (`whisper-1`,
/// `gpt-4o-transcribe`...), which clients send fixed: they ask for the
/// server's default model.
fn is_openai_speech_model(name: &str) -> bool {
    name.starts_with("whisper") || name.contains("transcribe")
}

fn bounded(name: &str, text: String, max: usize) -> Result<String, ApiError> {
    if text.len() > max {
        return Err(ApiError::bad_param(
            name,
            format!("`{name}` is {} bytes; at most {max} are taken.", text.len()),
        ));
    }
    Ok(text)
}
