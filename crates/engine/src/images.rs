//! Images in prompts: the vision tower beside the text model, the form an
//! image takes in a prompt, and image embeddings kept by content.
//!
//! A prompt names where each image goes with a marker, one per image, in
//! order: `<start_of_image>` (Gemma 3's image token) or llama.cpp's
//! `<__media__>` for any model, and on Gemma 4 also its own `<|image|>`.
//! Each marker becomes what the model's processor makes of it — Gemma 3:
//! `\n\n<start_of_image>`, 256 soft tokens, `<end_of_image>\n\n`; Gemma 4:
//! `<|image>`, the image's soft tokens (as many as its size gives within the
//! budget), `<image|>` — and the soft tokens' embeddings are the vision
//! tower's output.

use crate::{Engine, EngineError};
use media::{content_key, EmbeddingCache, Picture, VisionTower};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokenizer::{ChatMessage, PromptText};

/// The marker that places an image in a prompt (Gemma's image token text).
pub const IMAGE_MARKER: &str = "<start_of_image>";

/// llama.cpp's media marker, accepted as [`IMAGE_MARKER`].
pub const MEDIA_MARKER: &str = "<__media__>";

/// Gemma 4's image token, accepted as [`IMAGE_MARKER`] by Gemma 4 models.
pub const GEMMA4_IMAGE_MARKER: &str = "<|image|>";

/// Images a vision engine keeps the embeddings of, most recent first out.
const CACHED_IMAGES: usize = 16;

/// The vision tower and its embedding cache.
pub(crate) struct Vision {
    pub(crate) tower: VisionTower,
    cache: EmbeddingCache,
    /// Whether an image's tokens see each other both ways in the text
    /// model (see [`model::Embedded::bidirectional`]).
    pub(crate) bidirectional: bool,
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
            bidirectional: true,
        })
    }
}

/// What one model family's prompts make of a marker that places an image
/// or a clip.
pub(crate) struct MediaForm {
    /// The markers that place an item (the first is the family's own).
    pub(crate) markers: &'static [&'static str],
    /// The text a marker becomes, around the item's soft tokens.
    pub(crate) before: &'static str,
    pub(crate) after: &'static str,
    /// The tokens the soft tokens go between.
    pub(crate) begin: &'static str,
    pub(crate) end: &'static str,
}

const GEMMA3_FORM: MediaForm = MediaForm {
    markers: &[IMAGE_MARKER, MEDIA_MARKER],
    before: "\n\n<start_of_image>",
    after: "<end_of_image>\n\n",
    begin: "<start_of_image>",
    end: "<end_of_image>",
};

const GEMMA4_FORM: MediaForm = MediaForm {
    markers: &[GEMMA4_IMAGE_MARKER, IMAGE_MARKER, MEDIA_MARKER],
    before: "<|image>",
    after: "<image|>",
    begin: "<|image>",
    end: "<image|>",
};

/// An encoded media item (an image or an audio clip): the rows a tower
/// made of it for the text model.
#[derive(Debug, Clone)]
pub struct MediaEmbedding {
    /// The SHA-256 of the file it came from.
    pub key: [u8; 32],
    /// Its rows in the text model's width, one per soft token.
    pub rows: Arc<Vec<f32>>,
    /// How many soft tokens it takes.
    pub tokens: usize,
    /// Whether its tokens see each other both ways in the text model.
    pub bidirectional: bool,
    /// Whether it came from the cache (no encoder time spent).
    pub cached: bool,
    /// Decoding, preprocessing and encoding time (zero when cached).
    pub time: Duration,
}

/// A media item placed in a prompt: its soft tokens start at `pos`.
#[derive(Debug, Clone)]
pub struct PromptMedia {
    /// Index of the first soft token in the prompt's ids.
    pub pos: usize,
    /// The item and its embeddings.
    pub item: MediaEmbedding,
}

impl PromptMedia {
    /// Index one past the last soft token.
    pub fn end(&self) -> usize {
        self.pos + self.item.tokens
    }

    /// The part of the item within the prompt positions `batch`, as the
    /// rows of that batch replace (positions counted from its start); the
    /// caller passes only items that overlap the batch.
    pub(crate) fn part_in(&self, batch: std::ops::Range<usize>) -> model::Embedded<'_> {
        let whole = model::Embedded {
            start: self.pos,
            len: self.item.tokens,
            rows: &self.item.rows,
            bidirectional: self.item.bidirectional,
        };
        whole.within(batch).unwrap_or(model::Embedded {
            start: 0,
            len: 0,
            rows: &[],
            bidirectional: self.item.bidirectional,
        })
    }
}

impl Engine {
    /// Whether this engine reads images (a vision tower is loaded).
    pub fn has_vision(&self) -> bool {
        self.vision.is_some()
    }

    /// The image settings in force (read from the projector file or the
    /// checkpoint's processor files, or set by `--image-tokens`), for the
    /// load line and the server's model metadata: tokens per image (on
    /// Gemma 4 the most), input size (Gemma 3), patch size, mean and std.
    pub fn image_settings(&self) -> Option<serde_json::Value> {
        let c = self.vision.as_ref()?.tower.config();
        // Gemma 4's input size follows each picture.
        let fixed_size = (c.projector == media::Projector::Gemma3).then_some(c.image_size);
        Some(serde_json::json!({
            "projector": format!("{:?}", c.projector).to_lowercase(),
            "max_tokens_per_image": c.tokens_per_image(),
            "image_size": fixed_size,
            "patch_size": c.patch_size,
            "mean": c.mean,
            "std": c.std,
        }))
    }

    /// Soft tokens per image (on Gemma 4 the most one may take), when the
    /// engine reads images.
    pub fn image_tokens(&self) -> Option<usize> {
        self.vision
            .as_ref()
            .map(|v| v.tower.config().tokens_per_image())
    }

    fn vision(&self) -> Result<&Vision, EngineError> {
        self.vision.as_deref().ok_or_else(|| {
            EngineError::InvalidRequest(
                "this model has no vision tower, so it cannot read images \
                 (give its vision projector with --mmproj, or load a checkpoint \
                 directory that has one)"
                    .into(),
            )
        })
    }

    /// Decode, preprocess and encode the image file `bytes` (PNG, JPEG,
    /// WebP), or take its embeddings from the cache when the same file was
    /// encoded before.
    pub fn encode_image(&self, bytes: &[u8]) -> Result<MediaEmbedding, EngineError> {
        let vision = self.vision()?;
        let key = content_key(bytes);
        let start = Instant::now();
        let (rows, cached) = vision.cache.get_or_encode(key, || {
            let limits = &self.options().limits;
            let picture = Picture::decode_within(bytes, limits.image_pixels, limits.decode_bytes)?;
            let pixels = vision.tower.pixels(&picture)?;
            vision.tower.encode(self.model.pool(), &pixels)
        })?;
        Ok(MediaEmbedding {
            key,
            tokens: rows.len() / self.model.config().hidden.max(1),
            rows,
            bidirectional: vision.bidirectional,
            cached,
            time: if cached {
                Duration::ZERO
            } else {
                start.elapsed()
            },
        })
    }

    /// What this model's prompts make of an image marker, and the id its
    /// soft tokens take. The soft tokens' ids reach no embedding table on
    /// Gemma 3 (its own id keeps the prompt's ids what transformers sees);
    /// on Gemma 4 they feed the per-layer embeddings, which transformers
    /// takes from the pad token.
    pub(crate) fn image_form(&self) -> (&'static MediaForm, u32) {
        let tok = &self.tokenizer;
        match self.model.config().arch {
            model::Arch::Gemma4 => (&GEMMA4_FORM, tok.vocab().pad_id.unwrap_or(0)),
            _ => (
                &GEMMA3_FORM,
                tok.token_id("<image_soft_token>")
                    .or(tok.vocab().pad_id)
                    .unwrap_or(0),
            ),
        }
    }

    /// Tokenize `prompt`, whose media markers place the items of each of
    /// `kinds` (images, clips) in order, into the prompt ids, each marker
    /// expanded as its kind's form says with its item's soft tokens inside,
    /// and the items' places.
    pub(crate) fn media_prompt(
        &self,
        mut prompt: PromptText,
        kinds: &[MediaKind<'_>],
    ) -> Result<(Vec<u32>, Vec<PromptMedia>), EngineError> {
        let tok = &self.tokenizer;
        let mut pairs = Vec::with_capacity(kinds.len());
        for kind in kinds {
            let form = kind.form;
            let markers = prompt
                .media_markers()
                .filter(|m| form.markers.contains(m))
                .count();
            if markers != kind.items.len() {
                return Err(EngineError::InvalidRequest(format!(
                    "the prompt places {markers} {}(s) (with {}) but {} were given",
                    kind.what,
                    form.markers.join(" or "),
                    kind.items.len()
                )));
            }
            if kind.items.is_empty() {
                continue;
            }
            match (tok.token_id(form.begin), tok.token_id(form.end)) {
                (Some(b), Some(e)) => pairs.push((b, e)),
                _ => {
                    return Err(EngineError::InvalidRequest(format!(
                        "this model's vocabulary has no {}/{} tokens",
                        form.begin, form.end
                    )))
                }
            }
        }
        if pairs.is_empty() {
            return Ok((tok.encode_prompt(&prompt), Vec::new()));
        }
        // The begin/end tokens are control tokens, so the text between them
        // encodes the same with or without the soft tokens in between:
        // encode the expanded text without them, then insert them.
        let placing: Vec<&MediaKind<'_>> = kinds.iter().filter(|k| !k.items.is_empty()).collect();
        prompt.expand_media(|marker| {
            let f = placing
                .iter()
                .find(|k| k.form.markers.contains(&marker))?
                .form;
            Some(format!("{}{}", f.before, f.after))
        });
        let plain = tok.encode_prompt(&prompt);
        let specs: Vec<SoftTokens<'_>> = placing
            .into_iter()
            .zip(pairs)
            .map(|(k, pair)| SoftTokens {
                pair,
                soft: k.soft,
                items: k.items,
                what: k.what,
            })
            .collect();
        fill_soft_tokens(&plain, &specs)
    }
}

/// A raw prompt (its caller wrote all of it), whose markers place media.
/// A marker of a kind the model does not take stays in the text as it is.
pub(crate) fn raw_prompt(text: &str, add_bos: bool) -> PromptText {
    let markers = [
        IMAGE_MARKER,
        MEDIA_MARKER,
        GEMMA4_IMAGE_MARKER,
        crate::AUDIO_MARKER,
        crate::GEMMA4_AUDIO_MARKER,
    ];
    PromptText::raw(text, add_bos, &markers)
}

/// One kind of item a prompt places (images, or audio clips): how its
/// markers expand, the id of its soft tokens, the items in order, and its
/// name for errors.
pub(crate) struct MediaKind<'a> {
    pub(crate) form: &'static MediaForm,
    pub(crate) soft: u32,
    pub(crate) items: &'a [MediaEmbedding],
    pub(crate) what: &'static str,
}

impl<'a> MediaKind<'a> {
    pub(crate) fn new(
        form: &'static MediaForm,
        soft: u32,
        items: &'a [MediaEmbedding],
        what: &'static str,
    ) -> Self {
        Self {
            form,
            soft,
            items,
            what,
        }
    }
}

/// The soft tokens of one kind of item: the begin/end pair that marks an
/// item's place, the id its tokens take, the items in order.
pub(crate) struct SoftTokens<'a> {
    pub(crate) pair: (u32, u32),
    pub(crate) soft: u32,
    pub(crate) items: &'a [MediaEmbedding],
    pub(crate) what: &'static str,
}

/// `plain` with the soft tokens of each item of every kind put between the
/// begin/end pairs that mark their places (the items of a kind in order),
/// and where each item's tokens start. An item whose pair did not survive
/// tokenization is an error.
pub(crate) fn fill_soft_tokens(
    plain: &[u32],
    kinds: &[SoftTokens<'_>],
) -> Result<(Vec<u32>, Vec<PromptMedia>), EngineError> {
    let total: usize = kinds
        .iter()
        .flat_map(|k| k.items.iter())
        .map(|i| i.tokens)
        .sum();
    let mut ids = Vec::with_capacity(plain.len() + total);
    let mut placed = Vec::new();
    let mut next: Vec<_> = kinds.iter().map(|k| k.items.iter()).collect();
    let mut iter = plain.iter().peekable();
    while let Some(&id) = iter.next() {
        ids.push(id);
        let Some(&&following) = iter.peek() else {
            continue;
        };
        let Some(k) = kinds.iter().position(|k| k.pair == (id, following)) else {
            continue;
        };
        let Some(item) = next[k].next() else {
            continue;
        };
        placed.push(PromptMedia {
            pos: ids.len(),
            item: item.clone(),
        });
        ids.extend(std::iter::repeat_n(kinds[k].soft, item.tokens));
    }
    for (k, rest) in kinds.iter().zip(next) {
        let left = rest.len();
        if left > 0 {
            return Err(EngineError::InvalidRequest(format!(
                "{} of {} {} markers survived tokenization",
                k.items.len() - left,
                k.items.len(),
                k.what
            )));
        }
    }
    Ok((ids, placed))
}

/// A chat message of `role` saying `text` that brings `images` images and
/// `clips` audio clips: their markers go where the text places them itself
/// (as [`place_images`] and [`crate::place_audio`] read it), else before it,
/// and only those are media (see [`ChatMessage::push_media`]). Marker text
/// in a message that brings no media of its kind is text.
pub fn media_message(role: &str, text: &str, images: usize, clips: usize) -> ChatMessage {
    let mut markers = Vec::new();
    if images > 0 {
        markers.extend([IMAGE_MARKER, MEDIA_MARKER, GEMMA4_IMAGE_MARKER]);
    }
    if clips > 0 {
        markers.extend([crate::AUDIO_MARKER, crate::GEMMA4_AUDIO_MARKER]);
    }
    let placed = place_images(&crate::place_audio(text, clips), images);
    let prompt = PromptText::raw(placed.as_str(), false, &markers);
    let mut message = ChatMessage::new(role, "");
    let mut at = 0;
    for marker in prompt.media() {
        message.content.push_str(&placed[at..marker.start]);
        message.push_media(&placed[marker.clone()]);
        at = marker.end;
    }
    message.content.push_str(&placed[at..]);
    message
}

/// `text` with one image marker per image at its start when it places none
/// itself (as llama.cpp's tools put media before the prompt).
pub fn place_images(text: &str, images: usize) -> String {
    let placed = [IMAGE_MARKER, MEDIA_MARKER, GEMMA4_IMAGE_MARKER]
        .iter()
        .any(|m| text.contains(m));
    if images == 0 || placed {
        return text.to_string();
    }
    let mut out = IMAGE_MARKER.repeat(images);
    out.push_str(text);
    out
}
