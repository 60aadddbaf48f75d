//! Sound in prompts: Gemma 3n's audio tower beside the text model, the form
//! a clip takes in a prompt, and clip embeddings kept by content.
//!
//! A prompt places each clip with the marker `<audio_soft_token>` (the
//! token Gemma 3n's chat template writes for an audio part), one per clip,
//! in order. Each marker becomes what the model's processor makes of it:
//! `\n\n<start_of_audio>`, the model's fixed number of audio tokens (188 for
//! the released checkpoints; the clip's own tokens first, then padding),
//! `<end_of_audio>\n\n`. A clip's embeddings share [`ImageEmbedding`] with
//! images (rows for soft tokens, by content), so prompts, sessions and
//! prefix reuse treat both alike.

use crate::{Engine, EngineError, ImageEmbedding, PromptImage};
use media::{content_key, AudioTower, Clip, EmbeddingCache, LogMel, MelSettings};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The marker that places a clip in a prompt.
pub const AUDIO_MARKER: &str = "<audio_soft_token>";

const BEFORE: &str = "\n\n<start_of_audio>";
const AFTER: &str = "<end_of_audio>\n\n";
const BEGIN: &str = "<start_of_audio>";
const END: &str = "<end_of_audio>";

/// Clips an audio engine keeps the embeddings of.
const CACHED_CLIPS: usize = 16;

/// The audio tower and its embedding cache.
pub(crate) struct Hearing {
    pub(crate) tower: AudioTower,
    cache: EmbeddingCache,
}

impl Hearing {
    /// Convert the audio tower of the checkpoint directory at `path`.
    pub(crate) fn open(path: &Path) -> Result<Self, EngineError> {
        let writer = hf::convert_audio_dir(path)?.ok_or_else(|| {
            EngineError::InvalidOptions(format!(
                "{} has no audio tower (config.json has no audio_config)",
                path.display()
            ))
        })?;
        let file = gguf::GgufFile::from_bytes(writer.to_bytes())?;
        Ok(Self {
            tower: AudioTower::from_gguf(Arc::new(file))?,
            cache: EmbeddingCache::new(CACHED_CLIPS),
        })
    }
}

impl Engine {
    /// Whether this engine hears (an audio tower is loaded).
    pub fn has_audio(&self) -> bool {
        self.audio.is_some()
    }

    /// Audio tokens a clip takes in a prompt, when the engine hears.
    pub fn audio_tokens(&self) -> Option<usize> {
        self.audio.as_ref().map(|a| a.tower.config().soft_tokens)
    }

    /// Hear with the audio tower of the checkpoint at `dir`.
    pub(crate) fn attach_audio(&mut self, dir: &Path) -> Result<(), EngineError> {
        let hearing = Hearing::open(dir)?;
        let (width, hidden) = (
            hearing.tower.config().text_hidden,
            self.model.config().hidden,
        );
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
    pub fn encode_audio(&self, bytes: &[u8]) -> Result<ImageEmbedding, EngineError> {
        let hearing = self.audio.as_deref().ok_or_else(|| {
            EngineError::InvalidRequest(
                "this model has no audio tower, so it cannot hear \
                 (load a Gemma 3n checkpoint directory that has one)"
                    .into(),
            )
        })?;
        let key = content_key(bytes);
        let start = Instant::now();
        let (rows, cached) = hearing.cache.get_or_encode(key, || {
            let clip = Clip::decode(bytes)?;
            let mel = LogMel::compute(&clip, &MelSettings::default())?;
            Ok::<_, media::MediaError>(hearing.tower.encode(self.model.pool(), &mel)?.rows)
        })?;
        Ok(ImageEmbedding {
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

    /// Tokenize `text`, whose [`AUDIO_MARKER`]s place `clips` in order,
    /// into the prompt ids (with the clips' audio tokens) and their places.
    pub fn audio_prompt(
        &self,
        text: &str,
        add_bos: bool,
        clips: &[ImageEmbedding],
    ) -> Result<(Vec<u32>, Vec<PromptImage>), EngineError> {
        let markers = text.matches(AUDIO_MARKER).count();
        if markers != clips.len() {
            return Err(EngineError::InvalidRequest(format!(
                "the prompt places {markers} clip(s) (with {AUDIO_MARKER}) but {} were given",
                clips.len()
            )));
        }
        let tok = &self.tokenizer;
        if clips.is_empty() {
            return Ok((tok.encode(text, add_bos, true), Vec::new()));
        }
        // Encode the expanded text without the audio tokens (the markers
        // are control tokens, so the text around them encodes the same),
        // then insert them. Their id is what transformers' prompt holds;
        // the text model takes the per-layer input of the pad row for it.
        let plain = tok.encode(
            &text.replace(AUDIO_MARKER, &format!("{BEFORE}{AFTER}")),
            add_bos,
            true,
        );
        self.audio_prompt_ids(&plain, clips)
    }

    /// Prompt ids whose `<start_of_audio><end_of_audio>` pairs mark where
    /// `clips` go, with the clips' audio tokens put in, and every span of
    /// embedded rows: the clips', and one row for each token of the audio
    /// vocabulary outside them.
    pub fn audio_prompt_ids(
        &self,
        plain: &[u32],
        clips: &[ImageEmbedding],
    ) -> Result<(Vec<u32>, Vec<PromptImage>), EngineError> {
        let tok = &self.tokenizer;
        let (Some(boa), Some(eoa), Some(soft)) = (
            tok.token_id(BEGIN),
            tok.token_id(END),
            tok.token_id(AUDIO_MARKER),
        ) else {
            return Err(EngineError::InvalidRequest(format!(
                "this model's vocabulary has no {BEGIN}/{AUDIO_MARKER}/{END} tokens"
            )));
        };
        let (ids, mut placed) =
            crate::images::fill_soft_tokens(plain, (boa, eoa), soft, clips, "audio")?;
        // Gemma 3n embeds the audio vocabulary's tokens (`<end_of_audio>`)
        // with the audio embedder, not the text table: each such token
        // outside a clip becomes a one-row span.
        let tower = &self
            .audio
            .as_deref()
            .ok_or_else(|| EngineError::InvalidRequest("this model has no audio tower".into()))?
            .tower;
        let inside = |i: usize| placed.iter().any(|p| p.pos <= i && i < p.end());
        let mut extra = Vec::new();
        for (i, &id) in ids.iter().enumerate() {
            if inside(i) {
                continue;
            }
            if let Some(row) = tower.token_embedding(id) {
                let mut tag = b"gemma3n audio token ".to_vec();
                tag.extend_from_slice(&id.to_le_bytes());
                extra.push(PromptImage {
                    pos: i,
                    image: ImageEmbedding {
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
        Ok((ids, placed))
    }
}

impl Engine {
    /// [`Engine::encode_chat_thinking`] for messages whose text places
    /// `clips` with [`AUDIO_MARKER`]s.
    pub fn encode_chat_audio(
        &self,
        messages: &[tokenizer::ChatMessage],
        clips: &[ImageEmbedding],
        thinking: bool,
    ) -> Result<(Vec<u32>, Vec<PromptImage>), EngineError> {
        let (text, add_bos) = self.render_for_media(messages, thinking)?;
        self.audio_prompt(&text, add_bos, clips)
    }
}

/// `text` with one audio marker per clip at its start when it places none
/// itself.
pub fn place_audio(text: &str, clips: usize) -> String {
    if clips == 0 || text.contains(AUDIO_MARKER) {
        return text.to_string();
    }
    let mut out = AUDIO_MARKER.repeat(clips);
    out.push_str(text);
    out
}
