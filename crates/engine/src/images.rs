//! Images in prompts: the vision tower beside the text model, the form an
//! image takes in a prompt, and image embeddings kept by content.
//!
//! A prompt names where each image goes with Gemma's own marker,
//! `<start_of_image>` (llama.cpp's `<__media__>` is read the same way), one
//! per image, in order. Each marker becomes what Gemma 3's processor makes
//! of it: `\n\n<start_of_image>`, the image's soft tokens, `<end_of_image>\n\n`;
//! the soft tokens' embeddings are the vision tower's output.

use crate::{Engine, EngineError};
use media::{content_key, EmbeddingCache, Picture, VisionTower};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The marker that places an image in a prompt (Gemma's image token text).
pub const IMAGE_MARKER: &str = "<start_of_image>";

/// llama.cpp's media marker, accepted as [`IMAGE_MARKER`].
pub const MEDIA_MARKER: &str = "<__media__>";

/// Images a vision engine keeps the embeddings of, most recent first out.
const CACHED_IMAGES: usize = 16;

/// The vision tower and its embedding cache.
pub(crate) struct Vision {
    pub(crate) tower: VisionTower,
    cache: EmbeddingCache,
}

impl Vision {
    /// Open the `mmproj` file at `path`, or convert the vision tower of the
    /// checkpoint directory at `path`.
    pub(crate) fn open(path: &Path) -> Result<Self, EngineError> {
        let tower = if path.is_dir() {
            let writer = hf::convert_vision_dir(path)?.ok_or_else(|| {
                EngineError::InvalidOptions(format!(
                    "{} has no vision tower (config.json has no vision_config)",
                    path.display()
                ))
            })?;
            VisionTower::from_gguf(Arc::new(gguf::GgufFile::from_bytes(writer.to_bytes())?))?
        } else {
            VisionTower::load(path)?
        };
        Ok(Self {
            tower,
            cache: EmbeddingCache::new(CACHED_IMAGES),
        })
    }
}

/// An encoded picture.
#[derive(Debug, Clone)]
pub struct ImageEmbedding {
    /// The SHA-256 of the file it came from.
    pub key: [u8; 32],
    /// Its rows in the text model's width, one per soft token.
    pub rows: Arc<Vec<f32>>,
    /// How many soft tokens it takes.
    pub tokens: usize,
    /// Whether it came from the cache (no encoder time spent).
    pub cached: bool,
    /// Decoding, preprocessing and encoding time (zero when cached).
    pub time: Duration,
}

/// An image placed in a prompt: its soft tokens start at `pos`.
#[derive(Debug, Clone)]
pub struct PromptImage {
    /// Index of the first soft token in the prompt's ids.
    pub pos: usize,
    /// The image and its embeddings.
    pub image: ImageEmbedding,
}

impl PromptImage {
    /// Index one past the last soft token.
    pub fn end(&self) -> usize {
        self.pos + self.image.tokens
    }
}

impl Engine {
    /// Whether this engine reads images (a vision tower is loaded).
    pub fn has_vision(&self) -> bool {
        self.vision.is_some()
    }

    /// Soft tokens per image, when the engine reads images.
    pub fn image_tokens(&self) -> Option<usize> {
        self.vision
            .as_ref()
            .map(|v| v.tower.config().tokens_per_image())
    }

    fn vision(&self) -> Result<&Vision, EngineError> {
        self.vision.as_deref().ok_or_else(|| {
            EngineError::InvalidRequest(
                "this model has no vision tower, so it cannot read images \
                 (give a Gemma 3 vision projector with --mmproj, or load a checkpoint \
                 directory that has one)"
                    .into(),
            )
        })
    }

    /// Decode, preprocess and encode the image file `bytes` (PNG, JPEG,
    /// WebP), or take its embeddings from the cache when the same file was
    /// encoded before.
    pub fn encode_image(&self, bytes: &[u8]) -> Result<ImageEmbedding, EngineError> {
        let vision = self.vision()?;
        let key = content_key(bytes);
        let start = Instant::now();
        let (rows, cached) = vision.cache.get_or_encode(key, || {
            let picture = Picture::decode(bytes)?;
            let pixels = vision.tower.pixels(&picture)?;
            vision.tower.encode(self.model.pool(), &pixels)
        })?;
        Ok(ImageEmbedding {
            key,
            tokens: rows.len() / self.model.config().hidden.max(1),
            rows,
            cached,
            time: if cached {
                Duration::ZERO
            } else {
                start.elapsed()
            },
        })
    }

    /// Tokenize `text`, whose image markers place `images` in order, into
    /// the prompt ids (with the images' soft tokens) and the images'
    /// places. The number of markers must equal the number of images.
    pub fn image_prompt(
        &self,
        text: &str,
        add_bos: bool,
        images: &[ImageEmbedding],
    ) -> Result<(Vec<u32>, Vec<PromptImage>), EngineError> {
        let text = text.replace(MEDIA_MARKER, IMAGE_MARKER);
        let markers = text.matches(IMAGE_MARKER).count();
        if markers != images.len() {
            return Err(EngineError::InvalidRequest(format!(
                "the prompt places {markers} image(s) (with {IMAGE_MARKER}) but {} were given",
                images.len()
            )));
        }
        if images.is_empty() {
            return Ok((self.tokenizer.encode(&text, add_bos, true), Vec::new()));
        }
        let tok = &self.tokenizer;
        let (boi, eoi) = match (tok.token_id(IMAGE_MARKER), tok.token_id("<end_of_image>")) {
            (Some(b), Some(e)) => (b, e),
            _ => {
                return Err(EngineError::InvalidRequest(
                    "this model's vocabulary has no <start_of_image>/<end_of_image> tokens".into(),
                ))
            }
        };
        // The soft tokens' ids never reach the embedding table; Gemma 3's own
        // id keeps the prompt's ids what transformers sees.
        let soft = tok
            .token_id("<image_soft_token>")
            .or(tok.vocab().pad_id)
            .unwrap_or(0);
        // The markers are control tokens, so the text between them encodes
        // the same with or without the soft tokens in between: encode the
        // expanded text without them, then insert them.
        let expanded = text.replace(IMAGE_MARKER, "\n\n<start_of_image><end_of_image>\n\n");
        let plain = tok.encode(&expanded, add_bos, true);
        let total: usize = images.iter().map(|i| i.tokens).sum();
        let mut ids = Vec::with_capacity(plain.len() + total);
        let mut placed = Vec::with_capacity(images.len());
        let mut next = images.iter();
        let mut iter = plain.iter().peekable();
        while let Some(&id) = iter.next() {
            ids.push(id);
            if id == boi && iter.peek() == Some(&&eoi) {
                let Some(image) = next.next() else {
                    break;
                };
                placed.push(PromptImage {
                    pos: ids.len(),
                    image: image.clone(),
                });
                ids.extend(std::iter::repeat_n(soft, image.tokens));
            }
        }
        if placed.len() != images.len() {
            return Err(EngineError::InvalidRequest(format!(
                "{} of {} image markers survived tokenization",
                placed.len(),
                images.len()
            )));
        }
        Ok((ids, placed))
    }

    /// [`Engine::encode_chat_thinking`] for messages whose text places
    /// `images` with image markers.
    pub fn encode_chat_images(
        &self,
        messages: &[tokenizer::ChatMessage],
        images: &[ImageEmbedding],
        thinking: bool,
    ) -> Result<(Vec<u32>, Vec<PromptImage>), EngineError> {
        let text = self.template.render_thinking(messages, true, thinking)?;
        let bos_text = self
            .tokenizer
            .bos_id()
            .and_then(|id| self.tokenizer.token_text(id));
        let starts_with_bos = bos_text.is_some_and(|b| !b.is_empty() && text.starts_with(b));
        self.image_prompt(&text, self.tokenizer.add_bos() && !starts_with_bos, images)
    }
}

/// `text` with one image marker per image at its start when it places none
/// itself (as llama.cpp's tools put media before the prompt).
pub fn place_images(text: &str, images: usize) -> String {
    if images == 0 || text.contains(IMAGE_MARKER) || text.contains(MEDIA_MARKER) {
        return text.to_string();
    }
    let mut out = IMAGE_MARKER.repeat(images);
    out.push_str(text);
    out
}
