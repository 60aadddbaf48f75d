//! Gemma 4's audio encoder and its embedder, as transformers'
//! `Gemma4AudioModel` and `Gemma4MultimodalEmbedder` compute them.
//!
//! Log-mel frames (10 ms apart) go through two stride-2 3×3 convolutions
//! over time and frequency (padded by one on every side), each followed by
//! a LayerNorm over its channels and a ReLU, and a projection to the
//! encoder's width; then the conformer blocks Gemma 3n also uses (with a
//! key scale and clamped products); then an output projection. Every frame
//! left after sub-sampling is a token: 25 a second, as many as the clip
//! gives (the processor's count), at most 750 (30 s). The embedder norms
//! them without a weight and projects them into the text model's width.
//!
//! transformers runs the encoder over a batch padded to its longest clip
//! and masks the padding (features, convolution inputs, attention keys) and
//! then drops the padded frames. Nothing reaches a frame inside the clip
//! from one after it (the convolutions see zeros there, attention and the
//! light convolution look only back), so the encoder here runs over the
//! clip's frames alone and gives the same rows.
//!
//! Weights come from a checkpoint directory, converted in memory by the
//! `hf` crate (the tower's tensors under `a.`, a clamped product's
//! `.linear.weight` as `.weight`, the embedder's under `mm.a.`, the
//! hyper-parameters under `hearth.audio.`), or from llama.cpp's `mmproj`
//! GGUF (`clip.audio.projector_type` `gemma4a`: `a.blk.N.*`, `mm.a.*`; the
//! constants llama.cpp fixes, such as the attention's reach and soft-cap,
//! are taken as it takes them).

use super::conformer::{conv_stride2, Acts, AudioKeys, Block, Grid, Layout, Shape, HF_LCONV};
use super::gemma3n::AudioEmbedding;
use super::input::LogMel;
use crate::weights;
use crate::weights::{product, vector};
use crate::MediaError;
use gguf::GgufFile;
use nn::Linear;
use std::sync::Arc;
use threads::ThreadPool;

/// The converter's `general.architecture` for a Gemma 4 audio tower.
pub const GEMMA4_AUDIO_ARCH: &str = "gemma4_audio";

/// Gemma 4's audio encoder shape and the prompt's limit.
#[derive(Debug, Clone, PartialEq)]
pub struct Gemma4AudioConfig {
    /// Encoder width.
    pub hidden: usize,
    /// Attention heads.
    pub heads: usize,
    /// Conformer blocks.
    pub layers: usize,
    /// Mel bins in.
    pub mel_bins: usize,
    /// Channels of the two sub-sampling convolutions.
    pub channels: [usize; 2],
    /// Past frames a query sees, itself included.
    pub context_left: usize,
    /// Future frames a query sees.
    pub context_right: usize,
    /// Soft-cap of the attention logits.
    pub logit_cap: f32,
    /// Weight of the half-step feed-forward blocks.
    pub residual_weight: f32,
    /// Kernel of the depthwise convolution.
    pub conv_kernel: usize,
    /// Epsilon of the norms.
    pub eps: f32,
    /// Activations are clamped to ±this between steps.
    pub clip: f32,
    /// Width of the encoder's output projection (the embedder's input).
    pub output_dims: usize,
    /// The text model's width.
    pub text_hidden: usize,
    /// The most tokens a clip may give (the processor's
    /// `audio_seq_length`).
    pub max_tokens: usize,
}

impl Gemma4AudioConfig {
    /// Read the `hearth.audio.*` keys.
    pub fn from_gguf(file: &GgufFile) -> Result<Self, MediaError> {
        let keys = AudioKeys(file);
        let (uint, float) = (|k| keys.uint(k), |k| keys.float(k));
        let cfg = Self {
            hidden: uint("hidden")?,
            heads: uint("heads")?,
            layers: uint("layers")?,
            mel_bins: uint("mel_bins")?,
            channels: [uint("channels0")?, uint("channels1")?],
            context_left: uint("context_left")?,
            context_right: uint("context_right")?,
            logit_cap: float("logit_cap")?,
            residual_weight: float("residual_weight")?,
            conv_kernel: uint("conv_kernel")?,
            eps: float("eps")?,
            clip: float("clip")?,
            output_dims: uint("output_dims")?,
            text_hidden: uint("text_hidden")?,
            max_tokens: uint("max_tokens")?,
        };
        cfg.check()
    }

    /// Read an `mmproj` file's `clip.audio.*` keys; the channels, the
    /// convolution's kernel and the output projection's width come from
    /// the tensors, the rest is what llama.cpp fixes for `gemma4a`.
    pub fn from_mmproj(file: &GgufFile) -> Result<Self, MediaError> {
        let uint = |k: &str| -> Result<usize, MediaError> {
            file.get_u64(k)
                .and_then(|v| usize::try_from(v).ok())
                .ok_or_else(|| MediaError::Metadata(format!("`{k}` is missing")))
        };
        let dim = |name: &str, i: usize| -> Result<usize, MediaError> {
            let t = crate::weights::tensor(file, name)?;
            t.dims
                .get(i)
                .and_then(|&v| usize::try_from(v).ok())
                .ok_or_else(|| MediaError::TensorShape {
                    name: name.into(),
                    found: t.dims.clone(),
                    expected: vec![],
                })
        };
        let cfg = Self {
            hidden: uint("clip.audio.embedding_length")?,
            heads: uint("clip.audio.attention.head_count")?,
            layers: uint("clip.audio.block_count")?,
            mel_bins: uint("clip.audio.num_mel_bins")?,
            channels: [dim("a.conv1d.0.weight", 3)?, dim("a.conv1d.1.weight", 3)?],
            context_left: 13,
            context_right: 0,
            logit_cap: 50.0,
            residual_weight: 0.5,
            conv_kernel: dim("a.blk.0.conv_dw.weight", 0)?,
            eps: file
                .get_f32("clip.audio.attention.layer_norm_epsilon")
                .unwrap_or(1e-6),
            clip: 1e10,
            output_dims: dim("a.pre_encode.out.weight", 1)?,
            text_hidden: uint("clip.audio.projection_dim")?,
            max_tokens: 750,
        };
        cfg.check()
    }

    fn check(self) -> Result<Self, MediaError> {
        let ok = self.shape().plausible()
            && self.channels.iter().all(|&c| c > 0)
            && self.mel_bins >= 3
            && self.output_dims > 0
            && self.text_hidden > 0
            && (1..=4096).contains(&self.max_tokens)
            && self.layers <= 256;
        if ok {
            Ok(self)
        } else {
            Err(MediaError::Metadata(format!(
                "implausible audio encoder: {self:?}"
            )))
        }
    }

    /// The conformer blocks' shape.
    fn shape(&self) -> Shape {
        Shape {
            hidden: self.hidden,
            heads: self.heads,
            context_left: self.context_left,
            left_keys: self.context_left.saturating_sub(1),
            context_right: self.context_right,
            logit_cap: self.logit_cap,
            residual_weight: self.residual_weight,
            conv_kernel: self.conv_kernel,
            eps: self.eps,
            clip: self.clip,
            // transformers: `k_scale = ln(1 + e) / ln 2`.
            key_scale: (1.0 + std::f32::consts::E).ln() / std::f32::consts::LN_2,
        }
    }

    /// Tokens `frames` mel frames give: two halvings, each rounded up.
    pub fn tokens_for_frames(frames: usize) -> usize {
        frames.div_ceil(2).div_ceil(2)
    }
}

/// Where one file layout keeps the tower's tensors.
struct Names {
    /// The two sub-sampling convolutions and their norms.
    conv: [&'static str; 2],
    conv_norm: [&'static str; 2],
    /// The projection after them.
    input_proj: &'static str,
    /// Block `i`'s prefix is this, `i`, and a dot.
    block: &'static str,
    layout: Layout,
    /// The output projection (with a bias) and the embedder's projection.
    output_proj: &'static str,
    projection: &'static str,
}

/// A checkpoint directory's names, as the `hf` crate converts them.
const HF_NAMES: Names = Names {
    conv: [
        "a.subsample_conv_projection.layer0.conv",
        "a.subsample_conv_projection.layer1.conv",
    ],
    conv_norm: [
        "a.subsample_conv_projection.layer0.norm",
        "a.subsample_conv_projection.layer1.norm",
    ],
    input_proj: "a.subsample_conv_projection.input_proj_linear",
    block: "a.layers.",
    layout: Layout {
        ffw: [
            [
                "feed_forward1.pre_layer_norm",
                "feed_forward1.ffw_layer_1",
                "feed_forward1.ffw_layer_2",
                "feed_forward1.post_layer_norm",
            ],
            [
                "feed_forward2.pre_layer_norm",
                "feed_forward2.ffw_layer_1",
                "feed_forward2.ffw_layer_2",
                "feed_forward2.post_layer_norm",
            ],
        ],
        attn_norm: "norm_pre_attn",
        qkv: ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"],
        per_dim_scale: ("self_attn.per_dim_scale", false),
        pos_proj: "self_attn.relative_k_proj",
        post: "self_attn.post",
        post_norm: "norm_post_attn",
        lconv: HF_LCONV,
        norm: "norm_out",
    },
    output_proj: "a.output_proj",
    projection: "mm.a.embedding_projection",
};

/// llama.cpp's `mmproj` names (`convert_hf_to_gguf.py --mmproj`).
const MMPROJ_NAMES: Names = Names {
    conv: ["a.conv1d.0", "a.conv1d.1"],
    conv_norm: ["a.conv1d.0.norm", "a.conv1d.1.norm"],
    input_proj: "a.input_projection",
    block: "a.blk.",
    layout: Layout {
        ffw: [
            ["ffn_norm", "ffn_up", "ffn_down", "ffn_post_norm"],
            ["ffn_norm_1", "ffn_up_1", "ffn_down_1", "ffn_post_norm_1"],
        ],
        attn_norm: "attn_pre_norm",
        qkv: ["attn_q", "attn_k", "attn_v"],
        per_dim_scale: ("per_dim_scale.weight", true),
        pos_proj: "attn_k_rel",
        post: "attn_out",
        post_norm: "attn_post_norm",
        // llama.cpp swaps the two norms' names for this tower: `conv_norm` is the
        // one before the GLU, `norm_conv` the one after the convolution.
        lconv: ["conv_norm", "conv_pw1", "conv_dw", "norm_conv", "conv_pw2"],
        norm: "ln2",
    },
    output_proj: "a.pre_encode.out",
    projection: "mm.a.input_projection",
};

/// Gemma 4's audio tower and embedder.
pub struct Gemma4AudioTower {
    cfg: Gemma4AudioConfig,
    file: Arc<GgufFile>,
    conv: [Linear; 2],
    conv_norm: [Vec<f32>; 2],
    input_proj: Linear,
    blocks: Vec<Block>,
    output_proj: Linear,
    projection: Linear,
}

impl std::fmt::Debug for Gemma4AudioTower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gemma4AudioTower")
            .field("cfg", &self.cfg)
            .finish()
    }
}

impl Gemma4AudioTower {
    /// Bind the tensors of a converted checkpoint (`general.architecture`
    /// [`GEMMA4_AUDIO_ARCH`]) or of an `mmproj` file (`clip`).
    pub fn from_gguf(file: Arc<GgufFile>) -> Result<Self, MediaError> {
        let (cfg, names) = if file.architecture() == Some("clip") {
            (Gemma4AudioConfig::from_mmproj(&file)?, &MMPROJ_NAMES)
        } else {
            (Gemma4AudioConfig::from_gguf(&file)?, &HF_NAMES)
        };
        let f = &file;
        let d = cfg.hidden;
        let [c0, c1] = cfg.channels;
        let conv = [
            weights::bind_plain(f, names.conv[0], c0, 9)?,
            weights::bind_plain(f, names.conv[1], c1, c0 * 9)?,
        ];
        let conv_norm = [
            vector(f, &format!("{}.weight", names.conv_norm[0]), c0)?,
            vector(f, &format!("{}.weight", names.conv_norm[1]), c1)?,
        ];
        let freq = (0..2).fold(cfg.mel_bins, |f, _| (f + 2 - 3) / 2 + 1);
        let input_proj = weights::bind_plain(f, names.input_proj, d, c1 * freq)?;
        // The position tables are small: computed on one thread at load.
        let pool = ThreadPool::new(1);
        let shape = cfg.shape();
        let blocks = (0..cfg.layers)
            .map(|i| {
                let prefix = format!("{}{i}.", names.block);
                Block::bind(&pool, f, &shape, &names.layout, &prefix)
            })
            .collect::<Result<Vec<_>, MediaError>>()?;
        let output_proj = weights::bind(f, names.output_proj, cfg.output_dims, d)?;
        let projection =
            weights::bind_plain(f, names.projection, cfg.text_hidden, cfg.output_dims)?;
        Ok(Self {
            cfg,
            file,
            conv,
            conv_norm,
            input_proj,
            blocks,
            output_proj,
            projection,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &Gemma4AudioConfig {
        &self.cfg
    }

    /// The prompt rows for a clip's features: one per token the clip gives
    /// (see [`Gemma4AudioConfig::tokens_for_frames`]), no padding. An empty
    /// clip, or one with more tokens than the model takes, is refused.
    pub fn encode(&self, pool: &ThreadPool, mel: &LogMel) -> Result<AudioEmbedding, MediaError> {
        let cfg = &self.cfg;
        if mel.bins != cfg.mel_bins || mel.valid == 0 || mel.valid > mel.frames {
            return Err(MediaError::Audio(format!(
                "{} frames ({} inside the clip) of {} mel bins for an encoder of {} bins",
                mel.frames, mel.valid, mel.bins, cfg.mel_bins
            )));
        }
        let tokens = Gemma4AudioConfig::tokens_for_frames(mel.valid);
        if tokens > cfg.max_tokens {
            return Err(MediaError::Unsupported(format!(
                "the clip gives {tokens} audio tokens; the model takes at most {}",
                cfg.max_tokens
            )));
        }
        let mut acts = Acts::default();
        // The clip's frames alone (see the module's note on padding).
        let mut x = Grid::mel(mel, mel.valid)?;
        for i in 0..2 {
            x = conv_stride2(pool, &self.file, &self.conv[i], &x, 1, &mut acts.products)?;
            for row in x.data.chunks_exact_mut(x.c) {
                nn::layer_norm(row, &self.conv_norm[i], None, cfg.eps);
            }
            x.data.iter_mut().for_each(|v| *v = v.max(0.0));
        }
        let (t, d) = (x.t, cfg.hidden);
        debug_assert_eq!(t, tokens);
        let mut h = vec![0.0f32; t * d];
        product(
            pool,
            &self.file,
            &self.input_proj,
            &x.data,
            t,
            &mut h,
            &mut acts.products,
        )?;
        let valid = vec![true; t];
        let shape = cfg.shape();
        for b in &self.blocks {
            b.run(pool, &self.file, &shape, &mut h, &valid, &mut acts)?;
        }
        let od = cfg.output_dims;
        let mut o = vec![0.0f32; t * od];
        product(
            pool,
            &self.file,
            &self.output_proj,
            &h,
            t,
            &mut o,
            &mut acts.products,
        )?;
        nn::rms_norm_rows(pool, &mut o, od, None, cfg.eps);
        let mut rows = vec![0.0f32; t * cfg.text_hidden];
        product(
            pool,
            &self.file,
            &self.projection,
            &o,
            t,
            &mut rows,
            &mut acts.products,
        )?;
        Ok(AudioEmbedding { rows, from_clip: t })
    }
}
