//! Sound in: clips decoded and resampled and their log-mel features
//! ([`input`]), and the audio towers — Gemma 3n's ([`gemma3n`]) and Gemma
//! 4's ([`gemma4`]), two conformers sharing their blocks ([`conformer`]) —
//! behind one type, [`AudioTower`]: what the engine needs to turn a clip
//! into prompt rows whichever family the checkpoint is.

mod conformer;
mod gemma3n;
mod gemma4;
mod input;
mod windows;

pub use conformer::AUDIO_KEY_PREFIX;
pub use gemma3n::{AudioEmbedding, Gemma3nAudioConfig, Gemma3nAudioTower};
pub use gemma4::{Gemma4AudioConfig, Gemma4AudioTower, GEMMA4_AUDIO_ARCH};
pub use input::{
    Clip, LogMel, MelFloor, MelSettings, DEFAULT_MAX_CLIP_SECONDS, MAX_SECONDS, SAMPLE_RATE,
};

use crate::MediaError;
use gguf::GgufFile;
use std::sync::Arc;
use threads::ThreadPool;

/// The converter's `general.architecture` for a Gemma 3n audio tower.
pub const GEMMA3N_AUDIO_ARCH: &str = "gemma3n_audio";

/// An audio tower of one of the families that hear.
#[derive(Debug)]
pub enum AudioTower {
    /// Gemma 3n (E2B, E4B): a fixed number of tokens per clip, padded.
    Gemma3n(Gemma3nAudioTower),
    /// Gemma 4 (E2B, E4B): as many tokens as the clip gives (25 a second).
    Gemma4(Gemma4AudioTower),
}

impl AudioTower {
    /// Open an `mmproj` GGUF file's audio tower.
    pub fn load(path: &std::path::Path) -> Result<Self, MediaError> {
        Self::from_gguf(Arc::new(GgufFile::open(path)?))
    }

    /// Whether `file` (an `mmproj` GGUF) holds an audio tower.
    pub fn in_mmproj(file: &GgufFile) -> bool {
        file.architecture() == Some("clip") && file.get_bool("clip.has_audio_encoder") == Some(true)
    }

    /// Bind a converted tower, by its `general.architecture`, or the audio
    /// tower of an `mmproj` file (`clip.audio.projector_type` `gemma4a`).
    pub fn from_gguf(file: Arc<GgufFile>) -> Result<Self, MediaError> {
        match file.architecture() {
            Some(GEMMA3N_AUDIO_ARCH) => Ok(Self::Gemma3n(Gemma3nAudioTower::from_gguf(file)?)),
            Some(GEMMA4_AUDIO_ARCH) => Ok(Self::Gemma4(Gemma4AudioTower::from_gguf(file)?)),
            Some("clip") => {
                if !Self::in_mmproj(&file) {
                    return Err(MediaError::Metadata(
                        "this projector file has no audio encoder".into(),
                    ));
                }
                match file.get_str("clip.audio.projector_type") {
                    Some("gemma4a") => Ok(Self::Gemma4(Gemma4AudioTower::from_gguf(file)?)),
                    other => Err(MediaError::Unsupported(format!(
                        "audio projector type {other:?} (supported: gemma4a)"
                    ))),
                }
            }
            other => Err(MediaError::Unsupported(format!(
                "audio tower {other:?} (implemented: {GEMMA3N_AUDIO_ARCH}, {GEMMA4_AUDIO_ARCH})"
            ))),
        }
    }

    /// How the model's feature extractor computes log-mel frames.
    pub fn mel_settings(&self) -> MelSettings {
        match self {
            Self::Gemma3n(_) => MelSettings::default(),
            Self::Gemma4(_) => MelSettings::gemma4(),
        }
    }

    /// The text model's width the rows are in.
    pub fn text_hidden(&self) -> usize {
        match self {
            Self::Gemma3n(t) => t.config().text_hidden,
            Self::Gemma4(t) => t.config().text_hidden,
        }
    }

    /// Audio tokens a clip takes in a prompt: exactly this many on Gemma
    /// 3n, at most this many on Gemma 4.
    pub fn max_tokens(&self) -> usize {
        match self {
            Self::Gemma3n(t) => t.config().soft_tokens,
            Self::Gemma4(t) => t.config().max_tokens,
        }
    }

    /// Encode a clip's features into prompt rows.
    pub fn encode(&self, pool: &ThreadPool, mel: &LogMel) -> Result<AudioEmbedding, MediaError> {
        match self {
            Self::Gemma3n(t) => t.encode(pool, mel),
            Self::Gemma4(t) => t.encode(pool, mel),
        }
    }

    /// The embedding of a token the audio embedder (not the text table)
    /// embeds, where the family has such tokens (Gemma 3n's audio
    /// vocabulary); `None` otherwise.
    pub fn token_embedding(&self, id: u32) -> Option<&[f32]> {
        match self {
            Self::Gemma3n(t) => t.token_embedding(id),
            Self::Gemma4(_) => None,
        }
    }
}
