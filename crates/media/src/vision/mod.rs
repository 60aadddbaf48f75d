//! Vision towers read from llama.cpp's `mmproj` GGUF layout (`clip.vision.*`
//! keys, `v.*` and `mm.*` tensors; Hugging Face checkpoints are converted
//! into the same layout by the `hf` crate): Gemma 3's SigLIP encoder and
//! projector in [`siglip`], Gemma 4's in [`gemma4`]; both run on the
//! shared [`nn`] layer.
//!
//! Gemma 3: the pixels go in as 14-pixel (896 / 64) patches, each projected
//! by the patch embedding and given its learned position; a stack of
//! pre-LayerNorm transformer blocks (full attention among the patches, a
//! tanh-GELU MLP) and a final LayerNorm follow. The projector averages
//! `k × k` squares of patches (4096 → 256), RMS-normalises them and maps them
//! into the text model's width.

mod gemma4;
mod siglip;

use crate::MediaError;
use gguf::GgufFile;
use std::sync::Arc;
use threads::ThreadPool;

/// The vision towers implemented, by `clip.projector_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Projector {
    /// `gemma3`: SigLIP at a fixed square size, a fixed number of tokens.
    Gemma3,
    /// `gemma4v`: Gemma 4's encoder at the picture's own aspect ratio, as
    /// many tokens as its size gives within a budget.
    Gemma4,
}

/// Gemma 4's default budget of soft tokens per image (its processor's
/// `max_soft_tokens`).
pub const GEMMA4_DEFAULT_TOKENS: usize = 280;

/// The largest patch side a Gemma 4 tower may declare.
const MAX_GEMMA4_PATCH: usize = 64;

/// The metadata key of a Gemma 4 tower's default token budget, written when
/// a checkpoint is converted (its `preprocessor_config.json`'s
/// `max_soft_tokens`).
pub const MAX_TOKENS_KEY: &str = "hearth.vision.max_soft_tokens";

/// The budgets Gemma 4 accepts, as llama.cpp bounds them (transformers'
/// processor offers 70, 140, 280, 560 and 1120).
pub const GEMMA4_TOKEN_RANGE: std::ops::RangeInclusive<usize> = 70..=1120;

/// The shape of a vision tower, from the `clip.*` metadata.
#[derive(Debug, Clone, PartialEq)]
pub struct VisionConfig {
    /// The projector family (`clip.projector_type`).
    pub projector: Projector,
    /// Side of the square input in pixels (Gemma 3: 896; unused by Gemma 4,
    /// whose input size follows the picture).
    pub image_size: usize,
    /// Side of a patch in pixels (Gemma 3: 14).
    pub patch_size: usize,
    /// Width of the encoder (Gemma 3: 1152).
    pub hidden: usize,
    /// Width of the MLP (Gemma 3: 4304).
    pub ffn: usize,
    /// Encoder blocks (Gemma 3: 27).
    pub layers: usize,
    /// Attention heads (Gemma 3: 16).
    pub heads: usize,
    /// LayerNorm epsilon, also the projector's RMSNorm epsilon.
    pub eps: f32,
    /// Per-channel mean subtracted after rescaling to `0..1`.
    pub mean: [f32; 3],
    /// Per-channel divisor after the mean.
    pub std: [f32; 3],
    /// Side of the square of patches averaged into one token (Gemma 3: 4).
    pub pool: usize,
    /// Width of the text model the tokens are projected into.
    pub text_hidden: usize,
    /// Gemma 4: the most soft tokens one image may take.
    pub max_tokens: usize,
    /// Gemma 4: the base of the 2-D rotary position embedding.
    pub rope_theta: f32,
}

impl VisionConfig {
    /// Patches per side of the image.
    pub fn patches_per_side(&self) -> usize {
        self.image_size / self.patch_size
    }

    /// Patches per image.
    pub fn patches(&self) -> usize {
        self.patches_per_side() * self.patches_per_side()
    }

    /// Tokens one image becomes in the text model (Gemma 3: 256), or on
    /// Gemma 4 the most it may become.
    pub fn tokens_per_image(&self) -> usize {
        match self.projector {
            Projector::Gemma3 => {
                let side = self.patches_per_side() / self.pool;
                side * side
            }
            Projector::Gemma4 => self.max_tokens,
        }
    }

    /// Read the configuration of an `mmproj` file.
    pub fn from_gguf(file: &GgufFile) -> Result<Self, MediaError> {
        let projector = projector_of(file)?;
        let uint = |key: &str| -> Result<usize, MediaError> {
            file.get_u64(key)
                .and_then(|v| usize::try_from(v).ok())
                .filter(|&v| v > 0 && v <= 1 << 20)
                .ok_or_else(|| {
                    MediaError::Metadata(format!("`{key}` is missing or not a sensible count"))
                })
        };
        let triple = |key: &str| -> Result<[f32; 3], MediaError> {
            match file.get_f32_array(key) {
                None => Ok([0.5; 3]),
                Some(&[a, b, c]) => Ok([a, b, c]),
                Some(v) => Err(MediaError::Metadata(format!(
                    "`{key}` has {} values, expected 3",
                    v.len()
                ))),
            }
        };
        let cfg = Self {
            projector,
            image_size: uint("clip.vision.image_size")?,
            patch_size: uint("clip.vision.patch_size")?,
            hidden: uint("clip.vision.embedding_length")?,
            ffn: uint("clip.vision.feed_forward_length")?,
            layers: uint("clip.vision.block_count")?,
            heads: uint("clip.vision.attention.head_count")?,
            eps: file
                .get_f32("clip.vision.attention.layer_norm_epsilon")
                .unwrap_or(1e-6),
            mean: triple("clip.vision.image_mean")?,
            std: triple("clip.vision.image_std")?,
            // llama.cpp's defaults where the converter writes no key.
            pool: match file.get_u64("clip.vision.projector.scale_factor") {
                None if projector == Projector::Gemma4 => 3,
                None => 4,
                Some(_) => uint("clip.vision.projector.scale_factor")?,
            },
            text_hidden: uint("clip.vision.projection_dim")?,
            // A checkpoint's processor budget travels in this key (`hf`
            // writes it; llama.cpp's files leave the default).
            max_tokens: match file.get_u64(MAX_TOKENS_KEY) {
                Some(t) if GEMMA4_TOKEN_RANGE.contains(&(t as usize)) => t as usize,
                Some(t) => {
                    return Err(MediaError::Metadata(format!(
                        "`{MAX_TOKENS_KEY}` = {t} is outside {GEMMA4_TOKEN_RANGE:?}"
                    )))
                }
                None => GEMMA4_DEFAULT_TOKENS,
            },
            rope_theta: file.get_f32("clip.vision.rope_theta").unwrap_or(100.0),
        };
        cfg.check()?;
        Ok(cfg)
    }

    /// Whether the numbers make a tower: heads that split the width, and
    /// for Gemma 4 rotary halves and bounded patches; for Gemma 3 a grid
    /// that pools evenly and no zero in the pixels' spread.
    fn check(&self) -> Result<(), MediaError> {
        if !self.hidden.is_multiple_of(self.heads) {
            return Err(MediaError::Metadata(format!(
                "width {} does not split into {} heads",
                self.hidden, self.heads
            )));
        }
        if self.projector == Projector::Gemma4 {
            if !(self.hidden / self.heads).is_multiple_of(4) {
                return Err(MediaError::Metadata(format!(
                    "head width {} does not split into the 2-D rotary halves",
                    self.hidden / self.heads
                )));
            }
            // The input's pixel count grows with the patch's area (the
            // budget is in patches): bound it so a bad file cannot ask for
            // gigabytes of pixels. Gemma 4's patches are 16 pixels.
            if self.patch_size > MAX_GEMMA4_PATCH || self.pool > 8 {
                return Err(MediaError::Metadata(format!(
                    "patches of {} pixels pooled {}x{} (at most {MAX_GEMMA4_PATCH} and 8)",
                    self.patch_size, self.pool, self.pool
                )));
            }
            return Ok(());
        }
        let side = self.patches_per_side();
        if !self.image_size.is_multiple_of(self.patch_size)
            || side == 0
            || !side.is_multiple_of(self.pool)
        {
            return Err(MediaError::Metadata(format!(
                "image size {} in patches of {} does not pool by {}",
                self.image_size, self.patch_size, self.pool
            )));
        }
        if self.std.contains(&0.0) {
            return Err(MediaError::Metadata(
                "clip.vision.image_std holds a 0".into(),
            ));
        }
        Ok(())
    }
}

/// The projector an `mmproj` file holds, refusing files that are not one
/// or hold no vision encoder.
fn projector_of(file: &GgufFile) -> Result<Projector, MediaError> {
    if file.architecture() != Some("clip") {
        return Err(MediaError::Metadata(format!(
            "not a projector file: general.architecture is {:?}, expected \"clip\" \
             (an mmproj GGUF as llama.cpp's convert_hf_to_gguf.py --mmproj writes it)",
            file.architecture().unwrap_or("missing")
        )));
    }
    if file.get_bool("clip.has_vision_encoder") == Some(false) {
        return Err(MediaError::Metadata(
            "this projector file has no vision encoder".into(),
        ));
    }
    let name = file
        .get_str("clip.vision.projector_type")
        .or_else(|| file.get_str("clip.projector_type"))
        .unwrap_or("");
    match name {
        "gemma3" => Ok(Projector::Gemma3),
        "gemma4v" => Ok(Projector::Gemma4),
        other => Err(MediaError::Unsupported(format!(
            "projector type `{other}` (supported: gemma3, gemma4v)"
        ))),
    }
}

/// A loaded vision tower with its projector, bound to an `mmproj` file.
pub struct VisionTower {
    config: VisionConfig,
    file: Arc<GgufFile>,
    encoder: Encoder,
}

/// The weights of one family's encoder.
enum Encoder {
    Siglip(siglip::Siglip),
    Gemma4(gemma4::Gemma4),
}

/// Pixels ready for a tower: channel-first floats `[3][height][width]`,
/// resized and normalised as the model's processor does.
#[derive(Debug, Clone, PartialEq)]
pub struct Pixels {
    /// Width in pixels.
    pub width: usize,
    /// Height in pixels.
    pub height: usize,
    /// The values, `3 * width * height` of them.
    pub data: Vec<f32>,
}

impl std::fmt::Debug for VisionTower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VisionTower")
            .field("config", &self.config)
            .finish()
    }
}

impl VisionTower {
    /// Open an `mmproj` GGUF file.
    pub fn load(path: &std::path::Path) -> Result<Self, MediaError> {
        Self::from_gguf(Arc::new(GgufFile::open(path)?))
    }

    /// Bind the tensors of an opened `mmproj` file (or one converted in
    /// memory from a checkpoint directory).
    pub fn from_gguf(file: Arc<GgufFile>) -> Result<Self, MediaError> {
        let config = VisionConfig::from_gguf(&file)?;
        let encoder = match config.projector {
            Projector::Gemma3 => Encoder::Siglip(siglip::Siglip::bind(&file, &config)?),
            Projector::Gemma4 => Encoder::Gemma4(gemma4::Gemma4::bind(&file, &config)?),
        };
        Ok(Self {
            config,
            file,
            encoder,
        })
    }

    /// The tower's configuration.
    pub fn config(&self) -> &VisionConfig {
        &self.config
    }

    /// Set Gemma 4's budget of soft tokens per image (within
    /// [`GEMMA4_TOKEN_RANGE`]); Gemma 3's count is fixed, so asking it for
    /// another is an error.
    pub fn set_max_tokens(&mut self, tokens: usize) -> Result<(), MediaError> {
        match self.config.projector {
            Projector::Gemma4 if GEMMA4_TOKEN_RANGE.contains(&tokens) => {
                self.config.max_tokens = tokens;
                Ok(())
            }
            Projector::Gemma4 => Err(MediaError::Unsupported(format!(
                "{tokens} image tokens (Gemma 4 takes {} to {})",
                GEMMA4_TOKEN_RANGE.start(),
                GEMMA4_TOKEN_RANGE.end()
            ))),
            Projector::Gemma3 => Err(MediaError::Unsupported(format!(
                "{tokens} image tokens: Gemma 3 always gives {}",
                self.config.tokens_per_image()
            ))),
        }
    }

    /// Pixels for [`Self::encode`]: the picture resized as the model's
    /// processor does (Gemma 3: to its square input, bilinear; Gemma 4: to
    /// the largest size of whole pooling cells within the token budget,
    /// aspect kept, bicubic) and normalised.
    pub fn pixels(&self, picture: &crate::Picture) -> Result<Pixels, MediaError> {
        let cfg = &self.config;
        let (w, h, resized) = match cfg.projector {
            Projector::Gemma3 => {
                let s = cfg.image_size as u32;
                (s, s, picture.resize_bilinear(s, s)?)
            }
            Projector::Gemma4 => {
                let (w, h) = gemma4::input_size(cfg, picture.width(), picture.height())?;
                let resized = if (w, h) == (picture.width(), picture.height()) {
                    picture.clone()
                } else {
                    picture.resize_bicubic(w, h)?
                };
                (w, h, resized)
            }
        };
        Ok(Pixels {
            width: w as usize,
            height: h as usize,
            data: resized.normalized(cfg.mean, cfg.std),
        })
    }

    /// The image embeddings of `pixels` (from [`Self::pixels`]): one row of
    /// the text model's width per soft token, ready to stand in for the
    /// image's soft tokens.
    pub fn encode(&self, pool: &ThreadPool, pixels: &Pixels) -> Result<Vec<f32>, MediaError> {
        if pixels.data.len() != 3 * pixels.width * pixels.height {
            return Err(MediaError::Decode(format!(
                "{} pixel values for a {}x{} RGB input",
                pixels.data.len(),
                pixels.width,
                pixels.height
            )));
        }
        match &self.encoder {
            Encoder::Siglip(s) => s.encode(&self.file, &self.config, pool, pixels),
            Encoder::Gemma4(g) => g.encode(&self.file, &self.config, pool, pixels),
        }
    }
}

/// The activations a tower's block works in, reused from block to block.
pub(crate) struct BlockActs {
    /// A normed copy of the patch rows.
    pub(crate) h: Vec<f32>,
    pub(crate) q: Vec<f32>,
    pub(crate) k: Vec<f32>,
    pub(crate) v: Vec<f32>,
    /// Attention's output.
    pub(crate) attn: Vec<f32>,
    /// A block's output before the residual add.
    pub(crate) o: Vec<f32>,
    /// The MLP's gate projection (empty for an MLP without one).
    pub(crate) gate: Vec<f32>,
    /// The MLP's up projection.
    pub(crate) up: Vec<f32>,
}

impl BlockActs {
    /// Buffers for `n` patches of width `d` and an MLP of `ffn`, `gated`
    /// or not.
    pub(crate) fn new(n: usize, d: usize, ffn: usize, gated: bool) -> Self {
        let rows = |w: usize| vec![0.0f32; n * w];
        Self {
            h: rows(d),
            q: rows(d),
            k: rows(d),
            v: rows(d),
            attn: rows(d),
            o: rows(d),
            gate: if gated { rows(ffn) } else { Vec::new() },
            up: rows(ffn),
        }
    }
}

/// The pixels cut into `p × p` patches, one row each in the order of the
/// convolution kernel (channel, y, x), patches row by row: the patch
/// embedding is then one product.
pub(crate) fn patch_rows(pixels: &[f32], width: usize, height: usize, p: usize) -> Vec<f32> {
    let (pw, ph) = (width / p, height / p);
    let pl = 3 * p * p;
    let plane = width * height;
    let mut patches = vec![0.0f32; pw * ph * pl];
    for (i, row) in patches.chunks_exact_mut(pl).enumerate() {
        let (py, px) = (i / pw, i % pw);
        for c in 0..3 {
            for ky in 0..p {
                let src = &pixels[c * plane + (py * p + ky) * width + px * p..][..p];
                row[(c * p + ky) * p..][..p].copy_from_slice(src);
            }
        }
    }
    patches
}
