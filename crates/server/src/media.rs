//! The media parts of a chat message as OpenAI sends them (`image_url`
//! and `input_audio`), read into image sources and clip bytes; the other
//! APIs translate their own image blocks into these.

use crate::error::ApiError;
use serde::Deserialize;

/// One part of an array `content`.
#[derive(Debug, Deserialize)]
pub(crate) struct Part {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
    image_url: Option<ImageUrl>,
    input_audio: Option<InputAudio>,
}

/// An audio part's `input_audio`: base64 bytes and their format.
#[derive(Debug, Deserialize)]
pub(crate) struct InputAudio {
    data: String,
    format: Option<String>,
}

/// The bytes of an `input_audio` part: its base64 `data`, in a format the
/// decoder reads (`wav`, `mp3`, `ogg`; OpenAI names `wav` and `mp3`).
fn audio_bytes(a: &InputAudio, field: &str) -> Result<Vec<u8>, ApiError> {
    use base64::Engine as _;
    match a.format.as_deref() {
        None | Some("wav" | "mp3" | "ogg") => {}
        Some(other) => {
            return Err(ApiError::bad_param(
                &format!("{field}.format"),
                format!("Audio format `{other}` is not supported; send wav, mp3 or ogg."),
            ))
        }
    }
    let cleaned: String = a
        .data
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(cleaned.as_bytes())
        .map_err(|e| {
            ApiError::bad_param(&format!("{field}.data"), format!("Not valid base64: {e}."))
        })?;
    if bytes.is_empty() {
        return Err(ApiError::bad_param(
            &format!("{field}.data"),
            "The audio is empty.",
        ));
    }
    Ok(bytes)
}

/// An image part's `image_url`: `{"url": ...}` as OpenAI sends it, or the
/// bare URL some clients send.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum ImageUrl {
    Object { url: String },
    Bare(String),
}

/// Where an image of a request comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum ImageSource {
    /// The bytes of a `data:` URL.
    Data(Vec<u8>),
    /// A local file (`file://` URL), read only when the server allows it.
    File(std::path::PathBuf),
}

/// An image part's URL as a source: `data:image/...;base64,...` or
/// `file:///path`. Network URLs are refused: the server never fetches.
fn image_source(url: &str, field: &str) -> Result<ImageSource, ApiError> {
    use base64::Engine as _;
    if let Some(rest) = url.strip_prefix("data:") {
        let Some((meta, payload)) = rest.split_once(',') else {
            return Err(ApiError::bad_param(
                field,
                "The data URL has no `,` before its payload.",
            ));
        };
        if !meta.ends_with(";base64") {
            return Err(ApiError::bad_param(
                field,
                "Only base64 data URLs are supported (`data:image/png;base64,...`).",
            ));
        }
        let cleaned: String = payload
            .chars()
            .filter(|c| !c.is_ascii_whitespace())
            .collect();
        return base64::engine::general_purpose::STANDARD
            .decode(cleaned.as_bytes())
            .map(ImageSource::Data)
            .map_err(|e| {
                ApiError::bad_param(field, format!("The data URL is not valid base64: {e}."))
            });
    }
    if let Some(path) = url.strip_prefix("file://") {
        if !path.starts_with('/') {
            return Err(ApiError::bad_param(
                field,
                "A file URL must hold an absolute path (`file:///...`).",
            ));
        }
        return Ok(ImageSource::File(std::path::PathBuf::from(path)));
    }
    Err(ApiError::bad_param(
        field,
        "Images must be sent inline as `data:` URLs (the server does not fetch from the network).",
    ))
}

/// The refusal of `what` (`image 2`, `audio clip 1`) the engine could not
/// read: a 400, naming the flag of the bound it passed; 413 when decoding
/// it would pass the request's memory budget.
pub(crate) fn refusal(what: &str, e: engine::EngineError) -> ApiError {
    use ::media::MediaError;
    let flag = match &e {
        engine::EngineError::Media(MediaError::TooMuchMemory { needed, max }) => {
            return crate::budget::over_budget(&format!("Decoding {what}"), *needed, *max)
        }
        engine::EngineError::Media(MediaError::TooManyPixels { .. }) => {
            " (start the server with --max-image-pixels N to raise it)"
        }
        engine::EngineError::Media(MediaError::TooLong { .. }) => {
            " (start the server with --max-clip-seconds SECS to raise it)"
        }
        _ => "",
    };
    ApiError::bad_param("messages", format!("{what}: {e}{flag}."))
}

/// Why a `file://` image cannot be read: said without its path, as a
/// message never echoes a file path.
#[derive(Debug)]
pub(crate) enum FileRefusal {
    /// Not a regular file (a directory, a FIFO, a device such as
    /// `/dev/zero`).
    NotAFile,
    /// Larger than `--body-limit`, the most an inline image could be.
    TooLarge(usize),
    /// The file system's error.
    Io(std::io::ErrorKind),
}

impl std::fmt::Display for FileRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotAFile => f.write_str("it is not a regular file"),
            Self::TooLarge(limit) => write!(
                f,
                "it is larger than {limit} bytes, the body limit (--body-limit)"
            ),
            Self::Io(kind) => write!(f, "{kind}"),
        }
    }
}

/// The bytes of a `file://` image: only a regular file, checked before it
/// is opened (a FIFO would wait for a writer, `/dev/zero` never ends) and
/// again once open (it may have been swapped), opened non-blocking, and
/// read to at most `limit` bytes.
pub(crate) fn read_image_file(
    path: &std::path::Path,
    limit: usize,
) -> Result<Vec<u8>, FileRefusal> {
    use std::io::Read;
    let io = |e: std::io::Error| FileRefusal::Io(e.kind());
    let regular = |meta: std::fs::Metadata| {
        if !meta.is_file() {
            return Err(FileRefusal::NotAFile);
        }
        if meta.len() > limit as u64 {
            return Err(FileRefusal::TooLarge(limit));
        }
        Ok(meta.len() as usize)
    };
    regular(std::fs::metadata(path).map_err(io)?)?;
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32);
    }
    let file = options.open(path).map_err(io)?;
    let len = regular(file.metadata().map_err(io)?)?;
    let mut bytes = Vec::with_capacity(len);
    file.take(limit as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() > limit {
        return Err(FileRefusal::TooLarge(limit));
    }
    Ok(bytes)
}

/// Message `i` of `role` made of its parts, a media marker where each image
/// or clip goes (the only markers in it: marker text in a text part is
/// text); the images and clips are appended to `images` and `audio`.
pub(crate) fn parts_message(
    role: &str,
    parts: Vec<Part>,
    i: usize,
    images: &mut Vec<ImageSource>,
    audio: &mut Vec<Vec<u8>>,
) -> Result<engine::ChatMessage, ApiError> {
    let mut text = engine::ChatMessage::new(role, "");
    for (j, p) in parts.into_iter().enumerate() {
        if p.kind == "input_audio" {
            let field = format!("messages[{i}].content[{j}].input_audio");
            let Some(a) = &p.input_audio else {
                return Err(ApiError::bad_param(
                    &format!("messages[{i}].content[{j}]"),
                    "An `input_audio` part needs its `input_audio` field.",
                ));
            };
            audio.push(audio_bytes(a, &field)?);
            text.push_media(engine::AUDIO_MARKER);
            continue;
        }
        match (p.kind.as_str(), p.image_url) {
                ("text", _) => text.content.push_str(p.text.as_deref().unwrap_or("")),
                ("image_url", Some(u)) => {
                    let field = format!("messages[{i}].content[{j}].image_url");
                    let url = match u {
                        ImageUrl::Object { url } | ImageUrl::Bare(url) => url,
                    };
                    images.push(image_source(&url, &field)?);
                    // Where the image goes in the prompt.
                    text.push_media(engine::IMAGE_MARKER);
                }
                ("image_url", None) => {
                    return Err(ApiError::bad_param(
                        &format!("messages[{i}].content[{j}]"),
                        "An `image_url` part needs its `image_url` field.",
                    ))
                }
                (other, _) => {
                    return Err(ApiError::bad_param(
                        &format!("messages[{i}].content"),
                        format!(
                            "Content parts of type `{other}` are not supported; only text, image_url and input_audio."
                        ),
                    ))
                }
            }
    }
    Ok(text)
}
