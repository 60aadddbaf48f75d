//! Sound in prompts: a Gemma 3n or Gemma 4 audio tower beside the text
//! model, the form a clip takes in a prompt, and clip embeddings kept by
//! content.
//!
//! A prompt places each clip with a marker, one per clip, in order:
//! `<audio_soft_token>` (what Gemma 3n's chat template writes for an audio
//! part) on either family, and on Gemma 4 also its own `<|audio|>`. Each
//! marker becomes what the model's processor makes of it. Gemma 3n:
//! `\n\n<start_of_audio>`, the model's fixed number of audio tokens (188 for
//! the released checkpoints; the clip's own tokens first, then padding),
//! `<end_of_audio>\n\n`. Gemma 4: `<|audio>`, one token per 40 ms of the clip
//! (at most 750), `<audio|>`. A clip's embeddings share [`MediaEmbedding`]
//! with images (rows for soft tokens, by content), so prompts, sessions and
//! prefix reuse treat both alike.

use crate::images::{MediaForm, MediaKind, SoftTokens};
use crate::{Engine, EngineError, MediaEmbedding, PromptMedia};
use media::{content_key, AudioTower, Clip, EmbeddingCache, LogMel};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The marker that places a clip in a prompt, on every model that hears.
pub const AUDIO_MARKER: &str = "<audio_soft_token>";

/// Gemma 4's own audio marker (its chat template's audio token).
pub const GEMMA4_AUDIO_MARKER: &str = "<|audio|>";

const GEMMA3N_FORM: MediaForm = MediaForm {
    markers: &[AUDIO_MARKER],
    before: "\n\n<start_of_audio>",
    after: "<end_of_audio>\n\n",
    begin: "<start_of_audio>",
    end: "<end_of_audio>",
};

const GEMMA4_FORM: MediaForm = MediaForm {
    markers: &[GEMMA4_AUDIO_MARKER, AUDIO_MARKER],
    before: "<|audio>",
    after: "<audio|>",
    begin: "<|audio>",
    end: "<audio|>",
};

/// Clips an audio engine keeps the embeddings of.
const CACHED_CLIPS: usize = 16;

/// The audio tower and its embedding cache.
pub(crate) struct Hearing {
    pub(crate) tower: AudioTower,
    cache: EmbeddingCache,
}

/// Convert the audio tower of the checkpoint directory at `path`.
pub(crate) fn convert_audio_dir(path: &Path) -> Result<AudioTower, EngineError> {
    let writer = hf::convert_audio_dir(path)?.ok_or_else(|| {
        EngineError::InvalidOptions(format!(
            "{} has no audio tower (config.json has no audio_config)",
            path.display()
        ))
    })?;
    let file = gguf::GgufFile::from_bytes(writer.to_bytes())?;
    Ok(AudioTower::from_gguf(Arc::new(file))?)
}

impl Engine {
    /// Whether this engine hears (an audio tower is loaded).
    pub fn has_audio(&self) -> bool {
        self.audio.is_some()
    }

    /// Audio tokens a clip takes in a prompt, when the engine hears: on
    /// Gemma 3n exactly this many, on Gemma 4 at most this many (30 s).
    pub fn audio_tokens(&self) -> Option<usize> {
        self.audio.as_ref().map(|a| a.tower.max_tokens())
    }

    /// Hear with `tower`, whose embedder must map into this model's width.
    pub(crate) fn attach_audio(&mut self, tower: AudioTower) -> Result<(), EngineError> {
        let hearing = Hearing {
            tower,
            cache: EmbeddingCache::new(CACHED_CLIPS),
        };
        let (width, hidden) = (hearing.tower.text_hidden(), self.model.config().hidden);
        if width != hidden {
            return Err(EngineError::InvalidOptions(format!(
                "the audio embedder maps into width {width}, but the model's is {hidden}"
            )));
        }
        self.audio = Some(Arc::new(hearing));
        Ok(())
    }

    /// Decode the audio file `bytes` (WAV, MP3, Ogg Vorbis; cut at 30 s),
    /// compute its features and encode it, or take its embeddings from the
    /// cache when the same file was encoded before.
    pub fn encode_audio(&self, bytes: &[u8]) -> Result<MediaEmbedding, EngineError> {
        let hearing = self.audio.as_deref().ok_or_else(|| {
            EngineError::InvalidRequest(
                "this model has no audio tower, so it cannot hear \
                 (load a Gemma 3n or Gemma 4 checkpoint directory that has one, \
                 or give Gemma 4's projector file with its audio encoder with --mmproj)"
                    .into(),
            )
        })?;
        let key = content_key(bytes);
        let start = Instant::now();
        let (rows, cached) = hearing.cache.get_or_encode(key, || {
            let limits = &self.options().limits;
            let clip = Clip::decode_within(bytes, limits.clip_seconds, limits.decode_bytes)?;
            let mel = LogMel::compute(&clip, &hearing.tower.mel_settings())?;
            Ok::<_, media::MediaError>(hearing.tower.encode(self.model.pool(), &mel)?.rows)
        })?;
        Ok(MediaEmbedding {
            key,
            tokens: rows.len() / self.model.config().hidden.max(1),
            rows,
            bidirectional: false,
            cached,
            time: if cached {
                Duration::ZERO
            } else {
                start.elapsed()
            },
        })
    }

    /// The ids of `prompt`, whose media markers place `images` and
    /// `clips`, and every item's place.
    pub(crate) fn place_mixed(
        &self,
        prompt: tokenizer::PromptText,
        images: &[MediaEmbedding],
        clips: &[MediaEmbedding],
    ) -> Result<(Vec<u32>, Vec<PromptMedia>), EngineError> {
        let (image_form, image_soft) = self.image_form();
        let mut kinds = vec![MediaKind::new(image_form, image_soft, images, "image")];
        let tower = match (&self.audio, clips.is_empty()) {
            (Some(a), _) => Some(&a.tower),
            (None, true) => None,
            (None, false) => return Err(no_tower()),
        };
        if let Some(t) = tower {
            kinds.push(MediaKind::new(
                form(t),
                self.audio_soft_id(t)?,
                clips,
                "clip",
            ));
        }
        let (ids, placed) = self.media_prompt(prompt, &kinds)?;
        Ok(match tower {
            Some(t) => self.with_audio_vocabulary(t, ids, placed),
            None => (ids, placed),
        })
    }

    /// Prompt ids whose begin/end-of-audio pairs mark where `clips` go, with
    /// the clips' audio tokens put in, and every span of embedded rows: the
    /// clips', and on Gemma 3n one row for each token of the audio
    /// vocabulary outside them.
    pub fn audio_prompt_ids(
        &self,
        plain: &[u32],
        clips: &[MediaEmbedding],
    ) -> Result<(Vec<u32>, Vec<PromptMedia>), EngineError> {
        let tower = self.tower()?;
        let f = form(tower);
        let tok = &self.tokenizer;
        let (Some(begin), Some(end)) = (tok.token_id(f.begin), tok.token_id(f.end)) else {
            return Err(EngineError::InvalidRequest(format!(
                "this model's vocabulary has no {}/{} tokens",
                f.begin, f.end
            )));
        };
        let (ids, placed) = crate::images::fill_soft_tokens(
            plain,
            &[SoftTokens {
                pair: (begin, end),
                soft: self.audio_soft_id(tower)?,
                items: clips,
                what: "clip",
            }],
        )?;
        Ok(self.with_audio_vocabulary(tower, ids, placed))
    }

    fn tower(&self) -> Result<&AudioTower, EngineError> {
        Ok(&self.audio.as_deref().ok_or_else(no_tower)?.tower)
    }

    /// The id a clip's tokens take in the prompt: Gemma 3n's audio token
    /// (what transformers' prompt holds; the text model takes the pad
    /// row's per-layer input for it), Gemma 4's pad token (what its
    /// per-layer embeddings see, as transformers replaces them).
    fn audio_soft_id(&self, tower: &AudioTower) -> Result<u32, EngineError> {
        let tok = &self.tokenizer;
        let id = match tower {
            AudioTower::Gemma3n(_) => tok.token_id(AUDIO_MARKER),
            AudioTower::Gemma4(_) => Some(tok.vocab().pad_id.unwrap_or(0)),
        };
        id.ok_or_else(|| {
            EngineError::InvalidRequest(format!(
                "this model's vocabulary has no {AUDIO_MARKER} token"
            ))
        })
    }

    /// `placed` and, on Gemma 3n, a one-row span for each token of the
    /// audio vocabulary outside the clips (`<end_of_audio>`): Gemma 3n
    /// embeds those with the audio embedder, not the text table.
    fn with_audio_vocabulary(
        &self,
        tower: &AudioTower,
        ids: Vec<u32>,
        mut placed: Vec<PromptMedia>,
    ) -> (Vec<u32>, Vec<PromptMedia>) {
        let inside = |i: usize| placed.iter().any(|p| p.pos <= i && i < p.end());
        let mut extra = Vec::new();
        for (i, &id) in ids.iter().enumerate() {
            if inside(i) {
                continue;
            }
            if let Some(row) = tower.token_embedding(id) {
                let mut tag = b"gemma3n audio token ".to_vec();
                tag.extend_from_slice(&id.to_le_bytes());
                extra.push(PromptMedia {
                    pos: i,
                    item: MediaEmbedding {
                        key: content_key(&tag),
                        rows: Arc::new(row.to_vec()),
                        tokens: 1,
                        bidirectional: false,
                        cached: true,
                        time: Duration::ZERO,
                    },
                });
            }
        }
        placed.extend(extra);
        placed.sort_by_key(|p| p.pos);
        (ids, placed)
    }
}

fn no_tower() -> EngineError {
    EngineError::InvalidRequest("this model has no audio tower".into())
}

/// What the tower's family makes of an audio marker.
fn form(tower: &AudioTower) -> &'static MediaForm {
    match tower {
        AudioTower::Gemma3n(_) => &GEMMA3N_FORM,
        AudioTower::Gemma4(_) => &GEMMA4_FORM,
    }
}

/// `text` with one audio marker per clip at its start when it places none
/// itself.
pub fn place_audio(text: &str, clips: usize) -> String {
    if clips == 0 || text.contains(AUDIO_MARKER) || text.contains(GEMMA4_AUDIO_MARKER) {
        return text.to_string();
    }
    let mut out = AUDIO_MARKER.repeat(clips);
    out.push_str(text);
    out
}
