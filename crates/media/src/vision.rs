//! Vision towers read from llama.cpp's `mmproj` GGUF layout (`clip.vision.*`
//! keys, `v.*` and `mm.*` tensors; Hugging Face checkpoints are converted
//! into the same layout by the `hf` crate): Gemma 3's SigLIP encoder and
//! projector here, Gemma 4's in [`crate::gemma4`].
//!
//! Gemma 3: the pixels go in as 14-pixel (896 / 64) patches, each projected
//! by the patch embedding and given its learned position; a stack of
//! pre-LayerNorm transformer blocks (full attention among the patches, a
//! tanh-GELU MLP) and a final LayerNorm follow. The projector averages
//! `k × k` squares of patches (4096 → 256), RMS-normalises them and maps them
//! into the text model's width.

use crate::MediaError;
use gguf::{GgmlType, GgufFile, TensorInfo};
use model::ops;
use quant::vector::{PackedB, PANEL};
use quant::{FirstError, Matrix, ThreadPool};
use std::sync::Arc;

/// Query rows per attention task: each task holds one block's scores for
/// one head at a time (`BLOCK × patches` floats).
const ATTENTION_BLOCK: usize = 64;

/// Activation rows per task of a float product.
pub(crate) const PRODUCT_BLOCK: usize = 64;

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
        let projector = match name {
            "gemma3" => Projector::Gemma3,
            "gemma4v" => Projector::Gemma4,
            other => {
                return Err(MediaError::Unsupported(format!(
                    "projector type `{other}` (supported: gemma3, gemma4v)"
                )))
            }
        };
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
        if !cfg.hidden.is_multiple_of(cfg.heads) {
            return Err(MediaError::Metadata(format!(
                "width {} does not split into {} heads",
                cfg.hidden, cfg.heads
            )));
        }
        if projector == Projector::Gemma4 {
            if !(cfg.hidden / cfg.heads).is_multiple_of(4) {
                return Err(MediaError::Metadata(format!(
                    "head width {} does not split into the 2-D rotary halves",
                    cfg.hidden / cfg.heads
                )));
            }
            // The input's pixel count grows with the patch's area (the
            // budget is in patches): bound it so a bad file cannot ask for
            // gigabytes of pixels. Gemma 4's patches are 16 pixels.
            if cfg.patch_size > MAX_GEMMA4_PATCH || cfg.pool > 8 {
                return Err(MediaError::Metadata(format!(
                    "patches of {} pixels pooled {}x{} (at most {MAX_GEMMA4_PATCH} and 8)",
                    cfg.patch_size, cfg.pool, cfg.pool
                )));
            }
            return Ok(cfg);
        }
        let side = cfg.patches_per_side();
        if !cfg.image_size.is_multiple_of(cfg.patch_size)
            || side == 0
            || !side.is_multiple_of(cfg.pool)
        {
            return Err(MediaError::Metadata(format!(
                "image size {} in patches of {} does not pool by {}",
                cfg.image_size, cfg.patch_size, cfg.pool
            )));
        }
        if cfg.std.contains(&0.0) {
            return Err(MediaError::Metadata(
                "clip.vision.image_std holds a 0".into(),
            ));
        }
        Ok(cfg)
    }
}

/// Bounds a product's input and output are clamped to (Gemma 4's
/// `ClippableLinear`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Clamp {
    pub(crate) input: (f32, f32),
    pub(crate) output: (f32, f32),
}

/// A weight matrix, its bias and its clamps.
#[derive(Debug, Clone)]
pub(crate) struct Linear {
    info: TensorInfo,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    bias: Option<Vec<f32>>,
    clamp: Option<Clamp>,
}

impl Linear {
    /// `{name}.weight` of `rows` outputs by `cols` inputs and `{name}.bias`.
    pub(crate) fn bind(
        file: &GgufFile,
        name: &str,
        rows: usize,
        cols: usize,
    ) -> Result<Self, MediaError> {
        let mut w = Self::bind_weight(file, name, rows, cols)?;
        w.bias = Some(vector(file, &format!("{name}.bias"), rows)?);
        Ok(w)
    }

    /// `{name}.weight` with no bias, and the clamps `{name}.input_min` (and
    /// `input_max`, `output_min`, `output_max`) where the file has them
    /// (a missing one does not clamp, as llama.cpp reads them).
    pub(crate) fn bind_clamped(
        file: &GgufFile,
        name: &str,
        rows: usize,
        cols: usize,
    ) -> Result<Self, MediaError> {
        let mut w = Self::bind_weight(file, name, rows, cols)?;
        let bound = |suffix: &str, default: f32| -> Result<Option<f32>, MediaError> {
            let key = format!("{name}.{suffix}");
            if file.tensor(&key).is_none() {
                return Ok(None);
            }
            let v = vector(file, &key, 1)?[0];
            Ok(Some(if v.is_nan() { default } else { v }))
        };
        let (a, b, c, d) = (
            bound("input_min", f32::NEG_INFINITY)?,
            bound("input_max", f32::INFINITY)?,
            bound("output_min", f32::NEG_INFINITY)?,
            bound("output_max", f32::INFINITY)?,
        );
        if [a, b, c, d].iter().any(Option::is_some) {
            w.clamp = Some(Clamp {
                input: (a.unwrap_or(f32::NEG_INFINITY), b.unwrap_or(f32::INFINITY)),
                output: (c.unwrap_or(f32::NEG_INFINITY), d.unwrap_or(f32::INFINITY)),
            });
        }
        Ok(w)
    }

    /// `{name}.weight` of `rows` outputs by `cols` inputs, no bias.
    pub(crate) fn bind_plain(
        file: &GgufFile,
        name: &str,
        rows: usize,
        cols: usize,
    ) -> Result<Self, MediaError> {
        Self::bind_weight(file, name, rows, cols)
    }

    fn bind_weight(
        file: &GgufFile,
        name: &str,
        rows: usize,
        cols: usize,
    ) -> Result<Self, MediaError> {
        let info = tensor(file, &format!("{name}.weight"))?;
        // A convolution kernel (`[P, P, 3, d]`) is a matrix of d rows of
        // 3·P·P; rows of a quantized type must be whole ggml rows.
        let whole_rows = info.dims.first() == Some(&(cols as u64))
            || matches!(info.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16);
        if info.n_elements() != (rows * cols) as u64
            || info.dims.last() != Some(&(rows as u64))
            || !whole_rows
        {
            return Err(MediaError::TensorShape {
                name: info.name.clone(),
                found: info.dims.clone(),
                expected: vec![cols as u64, rows as u64],
            });
        }
        if !quant::is_supported(info.ty) {
            return Err(MediaError::Unsupported(format!(
                "tensor `{}` is {}, which has no kernels",
                info.name,
                info.ty.name()
            )));
        }
        Ok(Self {
            info,
            rows,
            cols,
            bias: None,
            clamp: None,
        })
    }

    fn matrix<'f>(&self, file: &'f GgufFile) -> Result<Matrix<'f>, MediaError> {
        Ok(Matrix::new(
            self.info.ty,
            self.rows,
            self.cols,
            file.tensor_data(&self.info),
        )?)
    }
}

/// A LayerNorm's weight and bias.
#[derive(Debug, Clone)]
struct LayerNorm {
    weight: Vec<f32>,
    bias: Vec<f32>,
}

impl LayerNorm {
    fn bind(file: &GgufFile, name: &str, width: usize) -> Result<Self, MediaError> {
        Ok(Self {
            weight: vector(file, &format!("{name}.weight"), width)?,
            bias: vector(file, &format!("{name}.bias"), width)?,
        })
    }

    /// `(x - mean) / sqrt(var + eps) * w + b` over one row, statistics in
    /// f64 (the row is short; the reference computes in f32 with a
    /// two-pass variance, which this matches to rounding).
    fn apply(&self, x: &[f32], out: &mut [f32], eps: f32) {
        let n = x.len() as f64;
        let mean = x.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
        let var = x
            .iter()
            .map(|&v| (f64::from(v) - mean).powi(2))
            .sum::<f64>()
            / n;
        let inv = (1.0 / (var + f64::from(eps)).sqrt()) as f32;
        let mean = mean as f32;
        for (((o, &v), &w), &b) in out.iter_mut().zip(x).zip(&self.weight).zip(&self.bias) {
            *o = (v - mean) * inv * w + b;
        }
    }
}

/// One encoder block.
#[derive(Debug, Clone)]
struct Block {
    ln1: LayerNorm,
    q: Linear,
    k: Linear,
    v: Linear,
    out: Linear,
    ln2: LayerNorm,
    up: Linear,
    down: Linear,
}

/// A loaded vision tower with its projector, bound to an `mmproj` file.
pub struct VisionTower {
    config: VisionConfig,
    file: Arc<GgufFile>,
    encoder: Encoder,
}

/// The weights of one family's encoder.
enum Encoder {
    Siglip(Siglip),
    Gemma4(crate::gemma4::Gemma4),
}

/// Gemma 3's SigLIP encoder and projector.
struct Siglip {
    patch: Linear,
    positions: Vec<f32>,
    blocks: Vec<Block>,
    post_ln: LayerNorm,
    soft_norm: Vec<f32>,
    /// `[vision width][text width]`, the projection as the reference
    /// multiplies it (`x · P`).
    projection: Vec<f32>,
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
            Projector::Gemma3 => Encoder::Siglip(Siglip::bind(&file, &config)?),
            Projector::Gemma4 => Encoder::Gemma4(crate::gemma4::Gemma4::bind(&file, &config)?),
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
                let (w, h) = crate::gemma4::input_size(cfg, picture.width(), picture.height())?;
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

impl Siglip {
    fn bind(file: &GgufFile, cfg: &VisionConfig) -> Result<Self, MediaError> {
        let (d, p) = (cfg.hidden, cfg.patch_size);
        let patch = Linear::bind(file, "v.patch_embd", d, 3 * p * p)?;
        let positions = vector(file, "v.position_embd.weight", cfg.patches() * d)?;
        let blocks = (0..cfg.layers)
            .map(|i| {
                let b = |n: &str| format!("v.blk.{i}.{n}");
                Ok(Block {
                    ln1: LayerNorm::bind(file, &b("ln1"), d)?,
                    q: Linear::bind(file, &b("attn_q"), d, d)?,
                    k: Linear::bind(file, &b("attn_k"), d, d)?,
                    v: Linear::bind(file, &b("attn_v"), d, d)?,
                    out: Linear::bind(file, &b("attn_out"), d, d)?,
                    ln2: LayerNorm::bind(file, &b("ln2"), d)?,
                    up: Linear::bind(file, &b("ffn_up"), cfg.ffn, d)?,
                    down: Linear::bind(file, &b("ffn_down"), d, cfg.ffn)?,
                })
            })
            .collect::<Result<Vec<_>, MediaError>>()?;
        let post_ln = LayerNorm::bind(file, "v.post_ln", d)?;
        let soft_norm = vector(file, "mm.soft_emb_norm.weight", d)?;
        let proj = tensor(file, "mm.input_projection.weight")?;
        if proj.dims != [cfg.text_hidden as u64, d as u64] {
            return Err(MediaError::TensorShape {
                name: proj.name.clone(),
                found: proj.dims.clone(),
                expected: vec![cfg.text_hidden as u64, d as u64],
            });
        }
        let projection = vector(file, "mm.input_projection.weight", d * cfg.text_hidden)?;
        Ok(Self {
            patch,
            positions,
            blocks,
            post_ln,
            soft_norm,
            projection,
        })
    }

    fn encode(
        &self,
        file: &GgufFile,
        cfg: &VisionConfig,
        pool: &ThreadPool,
        pixels: &Pixels,
    ) -> Result<Vec<f32>, MediaError> {
        let (s, p, d) = (cfg.image_size, cfg.patch_size, cfg.hidden);
        if (pixels.width, pixels.height) != (s, s) {
            return Err(MediaError::Decode(format!(
                "a {}x{} input for a {s}x{s} tower",
                pixels.width, pixels.height
            )));
        }
        let n = cfg.patches();
        let mut bufs = Buffers::default();
        let patches = patch_rows(&pixels.data, s, s, p);
        let mut x = vec![0.0f32; n * d];
        product(pool, file, &self.patch, &patches, n, &mut x, &mut bufs)?;
        drop(patches);
        x.iter_mut()
            .zip(&self.positions)
            .for_each(|(v, &pe)| *v += pe);

        let mut h = vec![0.0f32; n * d];
        let (mut q, mut k, mut v) = (vec![0.0; n * d], vec![0.0; n * d], vec![0.0; n * d]);
        let mut attn = vec![0.0f32; n * d];
        let mut o = vec![0.0f32; n * d];
        let mut up = vec![0.0f32; n * cfg.ffn];
        let dh = d / cfg.heads;
        let scale = 1.0 / (dh as f32).sqrt();
        for blk in &self.blocks {
            layer_norm_rows(pool, &blk.ln1, &x, &mut h, cfg.eps);
            product(pool, file, &blk.q, &h, n, &mut q, &mut bufs)?;
            product(pool, file, &blk.k, &h, n, &mut k, &mut bufs)?;
            product(pool, file, &blk.v, &h, n, &mut v, &mut bufs)?;
            attention(
                pool,
                cfg.heads,
                dh,
                scale,
                &q,
                &k,
                &v,
                &mut attn,
                &mut bufs.heads,
            )?;
            product(pool, file, &blk.out, &attn, n, &mut o, &mut bufs)?;
            x.iter_mut().zip(&o).for_each(|(a, &b)| *a += b);
            layer_norm_rows(pool, &blk.ln2, &x, &mut h, cfg.eps);
            product(pool, file, &blk.up, &h, n, &mut up, &mut bufs)?;
            let ffn = cfg.ffn;
            pool.for_each_chunk_mut(&mut up, ffn * PRODUCT_BLOCK, |_, chunk| {
                quant::activation::gelu(chunk);
            });
            product(pool, file, &blk.down, &up, n, &mut o, &mut bufs)?;
            x.iter_mut().zip(&o).for_each(|(a, &b)| *a += b);
        }
        layer_norm_rows(pool, &self.post_ln, &x, &mut h, cfg.eps);
        self.project(cfg, &h)
    }

    /// The projector: `pool × pool` averages of the patch grid, RMSNorm
    /// with the (already `1 + w`) weight, then `x · P`.
    fn project(&self, cfg: &VisionConfig, x: &[f32]) -> Result<Vec<f32>, MediaError> {
        let (d, side, k) = (cfg.hidden, cfg.patches_per_side(), cfg.pool);
        let out_side = side / k;
        let tokens = out_side * out_side;
        let mut pooled = vec![0.0f32; tokens * d];
        let inv = 1.0 / (k * k) as f32;
        for (t, row) in pooled.chunks_exact_mut(d).enumerate() {
            let (ty, tx) = (t / out_side, t % out_side);
            for i in 0..k {
                for j in 0..k {
                    let patch = (ty * k + i) * side + tx * k + j;
                    row.iter_mut()
                        .zip(&x[patch * d..(patch + 1) * d])
                        .for_each(|(a, &b)| *a += b);
                }
            }
            row.iter_mut().for_each(|a| *a *= inv);
            ops::rms_norm(row, &self.soft_norm, cfg.eps);
        }
        let th = cfg.text_hidden;
        let mut out = vec![0.0f32; tokens * th];
        quant::vector::sgemm(
            tokens,
            th,
            d,
            &pooled,
            d,
            &self.projection,
            th,
            &mut out,
            th,
        )?;
        Ok(out)
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

/// `out = x Wᵀ + b` for `n` rows (clamped before and after where the
/// weight says so). Float weights (F32, F16, BF16) are dequantized once per
/// product, transposed, and multiplied through the f32 GEMM in blocks of
/// rows, so the activations stay exact; quantized weights take the integer
/// kernels.
pub(crate) fn product(
    pool: &ThreadPool,
    file: &GgufFile,
    w: &Linear,
    x: &[f32],
    n: usize,
    out: &mut [f32],
    bufs: &mut Buffers,
) -> Result<(), MediaError> {
    let m = w.matrix(file)?;
    let (rows, cols) = (w.rows, w.cols);
    let mut clamped = std::mem::take(&mut bufs.clamped);
    let x = match w.clamp {
        Some(Clamp {
            input: (lo, hi), ..
        }) => {
            clamped.clear();
            clamped.extend(x[..n * cols].iter().map(|&v| v.clamp(lo, hi)));
            &clamped[..]
        }
        None => x,
    };
    let float = matches!(m.ty(), GgmlType::F32 | GgmlType::F16 | GgmlType::BF16);
    let result = if float && n >= 8 {
        float_product(pool, &m, x, &mut out[..n * rows], bufs)
    } else {
        let ws = [&m];
        let product = quant::Product::new(&ws, x, n);
        quant::matmul(pool, product, &mut [out], &mut bufs.quant).map_err(MediaError::from)
    };
    bufs.clamped = clamped;
    result?;
    let out = &mut out[..n * rows];
    if let Some(bias) = &w.bias {
        for r in out.chunks_exact_mut(rows) {
            r.iter_mut().zip(bias).for_each(|(o, &b)| *o += b);
        }
    }
    if let Some(Clamp {
        output: (lo, hi), ..
    }) = w.clamp
    {
        out.iter_mut().for_each(|v| *v = v.clamp(lo, hi));
    }
    Ok(())
}

/// A float weight's product: Wᵀ packed into panels of PANEL output columns,
/// dequantized in parallel (each task fills whole panels), then the packed
/// GEMM over blocks of activation rows.
fn float_product(
    pool: &ThreadPool,
    m: &Matrix<'_>,
    x: &[f32],
    out: &mut [f32],
    bufs: &mut Buffers,
) -> Result<(), MediaError> {
    let (rows, cols) = (m.rows(), m.cols());
    bufs.packed.reset(cols, rows);
    let failure = FirstError::new();
    let panels_per_task = rows.div_ceil(PANEL).div_ceil(pool.threads()).max(1);
    let panel_len = cols * PANEL;
    pool.for_each_chunk_mut(
        bufs.packed.panels_mut(),
        panels_per_task * panel_len,
        |t, chunk| {
            let mut row = vec![0.0f32; cols];
            for (pi, panel) in chunk.chunks_exact_mut(panel_len).enumerate() {
                let j0 = (t * panels_per_task + pi) * PANEL;
                for jj in 0..PANEL.min(rows.saturating_sub(j0)) {
                    if let Err(e) = m.dequantize_row(j0 + jj, &mut row) {
                        failure.set(e);
                        return;
                    }
                    for (p, &v) in row.iter().enumerate() {
                        panel[p * PANEL + jj] = v;
                    }
                }
            }
        },
    );
    failure.into_result()?;
    let packed = &bufs.packed;
    let failure = FirstError::new();
    pool.for_each_chunk_mut(out, PRODUCT_BLOCK * rows, |b, chunk| {
        let m_rows = chunk.len() / rows;
        let xs = &x[b * PRODUCT_BLOCK * cols..][..m_rows * cols];
        if let Err(e) = quant::vector::sgemm_packed(m_rows, xs, cols, packed, chunk, rows) {
            failure.set(e);
        }
    });
    Ok(failure.into_result()?)
}

/// Buffers reused across the products and attention of one encoding.
#[derive(Default)]
pub(crate) struct Buffers {
    /// Activations clamped for a clipped product.
    clamped: Vec<f32>,
    /// A float weight, dequantized and packed (transposed, in panels).
    packed: PackedB,
    /// Quantized activations.
    quant: Vec<u8>,
    /// Each head's keys and transposed values, laid out for [`attention`].
    pub(crate) heads: Vec<HeadOperands>,
}

/// `out = LayerNorm(x)` row by row.
fn layer_norm_rows(pool: &ThreadPool, ln: &LayerNorm, x: &[f32], out: &mut [f32], eps: f32) {
    let d = ln.weight.len();
    pool.for_each_chunk_mut(out, d * PRODUCT_BLOCK, |b, chunk| {
        let src = &x[b * d * PRODUCT_BLOCK..][..chunk.len()];
        for (o, r) in chunk.chunks_exact_mut(d).zip(src.chunks_exact(d)) {
            ln.apply(r, o, eps);
        }
    });
}

/// Full (bidirectional) multi-head attention among all patches:
/// `out[:, head] = softmax(scale · q_h k_hᵀ) v_h`, computed transposed so
/// that every product runs on whole register tiles and the softmax runs down
/// columns with no horizontal sums:
///
/// - each head's keys (`n × dh`, contiguous) and values transposed
///   (`dh × n`) are laid out once;
/// - each task takes a block of query rows through every head: the scaled
///   queries packed as `q_hᵀ` (`dh × rows`), the scores `k_h · q_hᵀ`
///   (`n × rows`) written straight into packed panels of 16 queries, a
///   softmax down each query's column (16 queries a vector), `v_hᵀ · P`
///   (`dh × rows`), and each query's output divided by its sum of
///   exponentials.
///
/// A block's scores take `64 × n` floats (1 MiB at 4096 patches), so they
/// stay in L2 between the two products.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention(
    pool: &ThreadPool,
    heads: usize,
    dh: usize,
    scale: f32,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    out: &mut [f32],
    packs: &mut Vec<HeadOperands>,
) -> Result<(), MediaError> {
    let d = heads * dh;
    let n = q.len() / d;
    // A value row's stride: a multiple of 4 KiB would put the twelve rows
    // a tile reads in one L1 set.
    let ldv = n + 16;
    packs.resize_with(heads, Default::default);
    pool.for_each_chunk_mut(&mut packs[..], 1, |h, slot| {
        let HeadOperands { keys, values_t } = &mut slot[0];
        keys.clear();
        for row in k.chunks_exact(d) {
            keys.extend_from_slice(&row[h * dh..(h + 1) * dh]);
        }
        values_t.clear();
        values_t.resize(dh * ldv, 0.0);
        for (j, row) in v.chunks_exact(d).enumerate() {
            for (c, &val) in row[h * dh..(h + 1) * dh].iter().enumerate() {
                values_t[c * ldv + j] = val;
            }
        }
    });
    let packs = &packs[..];
    let failure = FirstError::new();
    pool.for_each_chunk_mut(out, ATTENTION_BLOCK * d, |b, chunk| {
        SCRATCH
            .with_borrow_mut(|scratch| {
                attend_block(
                    packs,
                    b * ATTENTION_BLOCK,
                    chunk,
                    q,
                    (dh, n, ldv, scale),
                    scratch,
                )
            })
            .unwrap_or_else(|e| failure.set(e));
    });
    Ok(failure.into_result()?)
}

thread_local! {
    /// Each pool thread's attention scratch, kept between blocks and
    /// encodings: the scores alone are 1 MiB a block, and allocating them
    /// afresh cost page faults on every block.
    static SCRATCH: std::cell::RefCell<AttentionScratch> = Default::default();
}

/// One thread's buffers for [`attend_block`].
#[derive(Default)]
struct AttentionScratch {
    /// The block's scaled queries, transposed and packed.
    qt: PackedB,
    /// The block's scores, then exponentials (keys × queries, packed).
    scores: PackedB,
    /// `Vᵀ · P` (head width × queries).
    ot: Vec<f32>,
    /// Each query's sum of exponentials.
    sums: Vec<f32>,
}

/// The query rows from `r0` (`chunk`'s rows) through every head, for
/// [`attention`]; `shape` is (head width, patches, value row stride, scale).
fn attend_block(
    packs: &[HeadOperands],
    r0: usize,
    chunk: &mut [f32],
    q: &[f32],
    shape: (usize, usize, usize, f32),
    scratch: &mut AttentionScratch,
) -> Result<(), quant::QuantError> {
    let (dh, n, ldv, scale) = shape;
    let d = packs.len() * dh;
    let rows = chunk.len() / d;
    let AttentionScratch {
        qt,
        scores,
        ot,
        sums,
    } = scratch;
    ot.resize(dh * rows, 0.0);
    sums.resize(rows.div_ceil(PANEL) * PANEL, 0.0);
    for (h, ops) in packs.iter().enumerate() {
        qt.reset(dh, rows);
        let qd = qt.panels_mut();
        for i in 0..rows {
            let src = &q[(r0 + i) * d + h * dh..][..dh];
            let base = (i / PANEL) * dh * PANEL + i % PANEL;
            for (c, &val) in src.iter().enumerate() {
                qd[base + c * PANEL] = val * scale;
            }
        }
        quant::vector::sgemm_packed_to_panels(n, &ops.keys, dh, qt, scores)?;
        softmax_columns(scores.panels_mut(), n, sums);
        quant::vector::sgemm_packed(dh, &ops.values_t, ldv, scores, ot, rows)?;
        for (i, orow) in chunk.chunks_exact_mut(d).enumerate() {
            let inv = 1.0 / sums[i];
            for (c, o) in orow[h * dh..(h + 1) * dh].iter_mut().enumerate() {
                *o = ot[c * rows + i] * inv;
            }
        }
    }
    Ok(())
}

/// One head's keys and transposed values, laid out for [`attention`].
#[derive(Default)]
pub(crate) struct HeadOperands {
    /// `n × dh`, row-major.
    keys: Vec<f32>,
    /// `dh × n`, rows `n + 16` apart.
    values_t: Vec<f32>,
}

/// Softmax down the columns of packed scores (panels of `n` rows × 16
/// queries): each query's scores become `exp_neg(s − max)`, and its sum of
/// them goes to `sums`. Every element and every sum (in row order) has
/// the same bits at every vector width.
fn softmax_columns(panels: &mut [f32], n: usize, sums: &mut [f32]) {
    let lanes = lanes();
    for (panel, sum) in panels
        .chunks_exact_mut(n * PANEL)
        .zip(sums.chunks_exact_mut(PANEL))
    {
        match lanes {
            // SAFETY: `lanes` checked the CPU has AVX-512 F.
            #[cfg(target_arch = "x86_64")]
            Lanes::Sixteen => unsafe { x86::softmax_panel_avx512(panel, sum) },
            // SAFETY: `lanes` checked the CPU has AVX2 and FMA.
            #[cfg(target_arch = "x86_64")]
            Lanes::Eight => unsafe { x86::softmax_panel_avx2(panel, sum) },
            Lanes::One => softmax_panel_scalar(panel, sum),
        }
    }
}

/// The scalar reference of one panel of [`softmax_columns`].
fn softmax_panel_scalar(panel: &mut [f32], sum: &mut [f32]) {
    let mut max = [f32::NEG_INFINITY; PANEL];
    for row in panel.chunks_exact(PANEL) {
        max.iter_mut().zip(row).for_each(|(m, &v)| *m = m.max(v));
    }
    sum.fill(0.0);
    for row in panel.chunks_exact_mut(PANEL) {
        for ((v, &m), s) in row.iter_mut().zip(&max).zip(sum.iter_mut()) {
            *v = exp_neg(*v - m);
            *s += *v;
        }
    }
}

/// The vector width the softmax runs at: the kernel set in use
/// (`HEARTH_CPU` included), where the CPU has it.
#[derive(Clone, Copy, PartialEq)]
enum Lanes {
    One,
    #[cfg(target_arch = "x86_64")]
    Eight,
    #[cfg(target_arch = "x86_64")]
    Sixteen,
}

fn lanes() -> Lanes {
    #[cfg(target_arch = "x86_64")]
    {
        let lanes = quant::f32_lanes();
        if lanes >= 16 && std::arch::is_x86_feature_detected!("avx512f") {
            return Lanes::Sixteen;
        }
        if lanes >= 8
            && std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
        {
            return Lanes::Eight;
        }
    }
    Lanes::One
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{EXP_COEF, LN2_HI, LN2_LO, LOG2E, PANEL, ROUND};
    use std::arch::x86_64::*;

    /// [`super::exp_neg`] on 16 lanes: the same operations in the same
    /// order, so the same bits.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn exp_neg16(v: __m512) -> __m512 {
        let c = |v: f32| _mm512_set1_ps(v);
        let floor = c(-87.0);
        let keep = _mm512_cmp_ps_mask::<_CMP_NLT_UQ>(v, floor);
        let v = _mm512_max_ps(v, floor);
        let round = c(ROUND);
        let n = _mm512_sub_ps(_mm512_fmadd_ps(v, c(LOG2E), round), round);
        let r = _mm512_fnmadd_ps(n, c(LN2_HI), v);
        let r = _mm512_fnmadd_ps(n, c(LN2_LO), r);
        let mut p = c(EXP_COEF[0]);
        for &k in &EXP_COEF[1..] {
            p = _mm512_fmadd_ps(p, r, c(k));
        }
        let bits = _mm512_slli_epi32::<23>(_mm512_add_epi32(
            _mm512_cvtps_epi32(n),
            _mm512_set1_epi32(127),
        ));
        _mm512_maskz_mul_ps(keep, p, _mm512_castsi512_ps(bits))
    }

    /// [`super::exp_neg`] on eight lanes, as [`exp_neg16`].
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn exp_neg8(v: __m256) -> __m256 {
        let c = |v: f32| _mm256_set1_ps(v);
        let floor = c(-87.0);
        let below = _mm256_cmp_ps::<_CMP_LT_OQ>(v, floor);
        let v = _mm256_max_ps(v, floor);
        let round = c(ROUND);
        let n = _mm256_sub_ps(_mm256_fmadd_ps(v, c(LOG2E), round), round);
        let r = _mm256_fnmadd_ps(n, c(LN2_HI), v);
        let r = _mm256_fnmadd_ps(n, c(LN2_LO), r);
        let mut p = c(EXP_COEF[0]);
        for &k in &EXP_COEF[1..] {
            p = _mm256_fmadd_ps(p, r, c(k));
        }
        let bits = _mm256_slli_epi32::<23>(_mm256_add_epi32(
            _mm256_cvtps_epi32(n),
            _mm256_set1_epi32(127),
        ));
        _mm256_andnot_ps(below, _mm256_mul_ps(p, _mm256_castsi256_ps(bits)))
    }

    /// One panel of [`super::softmax_columns`], a row (16 queries) a
    /// register.
    ///
    /// # Safety
    /// AVX-512 F present.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn softmax_panel_avx512(panel: &mut [f32], sum: &mut [f32]) {
        assert!(sum.len() >= PANEL);
        let mut max = _mm512_set1_ps(f32::NEG_INFINITY);
        for row in panel.chunks_exact(PANEL) {
            // SAFETY: 16 floats of this row.
            max = _mm512_max_ps(max, unsafe { _mm512_loadu_ps(row.as_ptr()) });
        }
        let mut acc = _mm512_setzero_ps();
        for row in panel.chunks_exact_mut(PANEL) {
            // SAFETY: 16 floats of this row.
            let e = exp_neg16(_mm512_sub_ps(unsafe { _mm512_loadu_ps(row.as_ptr()) }, max));
            // SAFETY: as above.
            unsafe { _mm512_storeu_ps(row.as_mut_ptr(), e) };
            acc = _mm512_add_ps(acc, e);
        }
        // SAFETY: `sum` holds 16 floats (asserted).
        unsafe { _mm512_storeu_ps(sum.as_mut_ptr(), acc) };
    }

    /// One panel of [`super::softmax_columns`], a row in two registers.
    ///
    /// # Safety
    /// AVX2 present.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn softmax_panel_avx2(panel: &mut [f32], sum: &mut [f32]) {
        assert!(sum.len() >= PANEL);
        let mut max = [_mm256_set1_ps(f32::NEG_INFINITY); 2];
        for row in panel.chunks_exact(PANEL) {
            for (h, m) in max.iter_mut().enumerate() {
                // SAFETY: 8 of this row's 16 floats.
                *m = _mm256_max_ps(*m, unsafe { _mm256_loadu_ps(row.as_ptr().add(8 * h)) });
            }
        }
        let mut acc = [_mm256_setzero_ps(); 2];
        for row in panel.chunks_exact_mut(PANEL) {
            for h in 0..2 {
                // SAFETY: 8 of this row's 16 floats.
                unsafe {
                    let at = row.as_mut_ptr().add(8 * h);
                    let e = exp_neg8(_mm256_sub_ps(_mm256_loadu_ps(at), max[h]));
                    _mm256_storeu_ps(at, e);
                    acc[h] = _mm256_add_ps(acc[h], e);
                }
            }
        }
        for (h, a) in acc.iter().enumerate() {
            // SAFETY: `sum` holds 16 floats (asserted).
            unsafe { _mm256_storeu_ps(sum.as_mut_ptr().add(8 * h), *a) };
        }
    }
}

/// `e^x` for `x <= 0` (softmax's shifted scores): `x = n ln2 + r` with
/// `|r| <= ln2 / 2`, a degree-7 Taylor polynomial for `e^r` by Horner's rule
/// (error below 2 ulp), and `2^n` put into the exponent bits. Inputs below
/// -87 give 0 (as `expf` nearly does). Every step that can is a fused
/// multiply-add, as the vector kernels compute it (so they give these bits,
/// in about two thirds of the instructions of separate products and sums).
#[inline]
fn exp_neg(x: f32) -> f32 {
    let below = x < -87.0;
    let x = x.max(-87.0);
    let n = x.mul_add(LOG2E, ROUND) - ROUND;
    let r = n.mul_add(-LN2_HI, x);
    let r = n.mul_add(-LN2_LO, r);
    let p = EXP_COEF[1..]
        .iter()
        .fold(EXP_COEF[0], |p, &k| p.mul_add(r, k));
    let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
    if below {
        0.0
    } else {
        p * scale
    }
}

/// log2(e), for [`exp_neg`]'s reduction.
const LOG2E: f32 = std::f32::consts::LOG2_E;
/// ln 2 in two parts, the first with trailing zero bits so `n · LN2_HI` is
/// exact.
const LN2_HI: f32 = 0.693_145_75;
const LN2_LO: f32 = 1.428_606_8e-6;
/// Adding 1.5 · 2²³ rounds to an integer in the low mantissa bits.
const ROUND: f32 = 12_582_912.0;
/// The degree-7 Taylor coefficients of `e^r`, innermost first.
const EXP_COEF: [f32; 8] = [
    1.0 / 5040.0,
    1.0 / 720.0,
    1.0 / 120.0,
    1.0 / 24.0,
    1.0 / 6.0,
    0.5,
    1.0,
    1.0,
];

/// The tensor `name`, required.
pub(crate) fn tensor(file: &GgufFile, name: &str) -> Result<TensorInfo, MediaError> {
    file.tensor(name)
        .cloned()
        .ok_or_else(|| MediaError::MissingTensor(name.to_string()))
}

/// A tensor of `len` elements, dequantized to f32.
pub(crate) fn vector(file: &GgufFile, name: &str, len: usize) -> Result<Vec<f32>, MediaError> {
    let info = tensor(file, name)?;
    if info.n_elements() != len as u64 {
        return Err(MediaError::TensorShape {
            name: info.name.clone(),
            found: info.dims.clone(),
            expected: vec![len as u64],
        });
    }
    let mut out = vec![0.0f32; len];
    quant::dequantize(info.ty, file.tensor_data(&info), &mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_neg_is_within_two_ulp_of_exp() {
        let mut x = 0.0f32;
        while x > -87.0 {
            let (got, want) = (exp_neg(x), x.exp());
            let ulp = (want.to_bits() as i64 - got.to_bits() as i64).abs();
            assert!(ulp <= 2, "exp({x}) = {want}, got {got} ({ulp} ulp)");
            x -= 0.000_731;
        }
        assert_eq!(exp_neg(0.0), 1.0);
        assert_eq!(exp_neg(-100.0), 0.0);
        assert_eq!(exp_neg(f32::NEG_INFINITY), 0.0);
    }

    /// Packed scores: `n` rows × 16 queries, exponents spread wide enough
    /// to reach the floor of -87.
    fn scores(n: usize) -> Vec<f32> {
        (0..n * PANEL)
            .map(|i| (i as f32 * 0.731).sin() * 60.0 - (i % 7) as f32 * 9.0)
            .collect()
    }

    #[test]
    fn the_vector_softmax_panels_match_the_scalar_ones() {
        for n in [1, 2, 7, 300] {
            let base = scores(n);
            let mut want = base.clone();
            let mut want_sum = [0.0f32; PANEL];
            softmax_panel_scalar(&mut want, &mut want_sum);
            let mut got = base.clone();
            let mut sum = [0.0f32; PANEL];
            softmax_columns(&mut got, n, &mut sum);
            assert_eq!(got, want, "{n} rows, kernel set in use");
            assert_eq!(sum, want_sum);
            // Every width this CPU has, whichever the kernel set in use picks.
            #[cfg(target_arch = "x86_64")]
            {
                if std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                {
                    let (mut got, mut sum) = (base.clone(), [0.0f32; PANEL]);
                    // SAFETY: AVX2 and FMA were detected just above.
                    unsafe { x86::softmax_panel_avx2(&mut got, &mut sum) };
                    assert_eq!((got, sum), (want.clone(), want_sum), "avx2, {n} rows");
                }
                if std::arch::is_x86_feature_detected!("avx512f") {
                    let (mut got, mut sum) = (base.clone(), [0.0f32; PANEL]);
                    // SAFETY: AVX-512 F was detected just above.
                    unsafe { x86::softmax_panel_avx512(&mut got, &mut sum) };
                    assert_eq!((got, sum), (want.clone(), want_sum), "avx512, {n} rows");
                }
            }
        }
    }

    /// Down each column, the scaled exponentials are the text model's
    /// softmax of that query's scores.
    #[test]
    fn column_softmax_is_the_softmax() {
        let n = 100;
        let mut panel = scores(n);
        for (i, v) in panel.iter_mut().enumerate() {
            *v /= 7.0 + (i % PANEL) as f32;
        }
        let base = panel.clone();
        let mut sum = [0.0f32; PANEL];
        softmax_columns(&mut panel, n, &mut sum);
        for lane in 0..PANEL {
            let mut want: Vec<f32> = (0..n).map(|p| base[p * PANEL + lane]).collect();
            ops::softmax(&mut want);
            for (p, w) in want.iter().enumerate() {
                let got = panel[p * PANEL + lane] / sum[lane];
                assert!((got - w).abs() <= 1e-6 * w + 1e-12, "{got} vs {w}");
            }
        }
    }

    /// The transposed, blocked attention is the textbook one.
    #[test]
    fn attention_matches_the_textbook_form() {
        let (heads, dh, n) = (3, 20, 150);
        let d = heads * dh;
        let gen = |seed: usize, len: usize| -> Vec<f32> {
            (0..len)
                .map(|i| ((i * 7 + seed * 13) as f32 * 0.173).sin() * 1.5)
                .collect()
        };
        let (q, k, v) = (gen(1, n * d), gen(2, n * d), gen(3, n * d));
        let scale = 0.3;
        let pool = ThreadPool::new(2);
        let mut out = vec![0.0f32; n * d];
        let mut packs = Vec::new();
        attention(&pool, heads, dh, scale, &q, &k, &v, &mut out, &mut packs).unwrap();
        for h in 0..heads {
            for i in 0..n {
                let mut w: Vec<f32> = (0..n)
                    .map(|j| {
                        (0..dh)
                            .map(|c| q[i * d + h * dh + c] * k[j * d + h * dh + c])
                            .sum::<f32>()
                            * scale
                    })
                    .collect();
                ops::softmax(&mut w);
                for c in 0..dh {
                    let want: f32 = (0..n).map(|j| w[j] * v[j * d + h * dh + c]).sum();
                    let got = out[i * d + h * dh + c];
                    assert!(
                        (got - want).abs() < 1e-5,
                        "head {h} row {i} col {c}: {got} vs {want}"
                    );
                }
            }
        }
    }
}
