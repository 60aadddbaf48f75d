//! Gemma 3n's audio encoder (a USM-style conformer) and its embedder, as
//! transformers' `Gemma3nAudioEncoder` and `Gemma3nMultimodalEmbedder`
//! compute them.
//!
//! Log-mel frames (10 ms apart) go through two stride-2 convolutions over
//! time and frequency, each followed by a group norm whose statistics
//! accumulate over time and a ReLU, and a projection to the encoder's
//! width; then conformer blocks (half-step feed-forward, local attention
//! with relative positions, a causal depthwise convolution, half-step
//! feed-forward, norm); then every fourth frame is kept. That gives 6.25
//! tokens a second. The embedder norms and projects them into the text
//! model's width. A prompt always holds [`Gemma3nAudioConfig::soft_tokens`] audio
//! tokens; those past the clip (and frames of padding) take the embedding
//! of the audio vocabulary's last token.
//!
//! Weights come from a checkpoint directory, converted in memory by the
//! `hf` crate: the tower's tensors under `a.`, the embedder's under `mm.a.`,
//! with the hyper-parameters under `hearth.audio.`.

use super::conformer::{conv_stride2, Acts, AudioKeys, Block, Grid, Layout, Shape, HF_LCONV};
use super::input::LogMel;
use crate::weights;
use crate::weights::{product, vector, Buffers};
use crate::MediaError;
use gguf::GgufFile;
use nn::Linear;
use std::sync::Arc;
use threads::ThreadPool;

/// The audio encoder's shape and the prompt's size.
#[derive(Debug, Clone, PartialEq)]
pub struct Gemma3nAudioConfig {
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
    /// Frames kept after the blocks: one in this many.
    pub reduction: usize,
    /// Weight of the half-step feed-forward blocks.
    pub residual_weight: f32,
    /// Kernel of the depthwise convolution.
    pub conv_kernel: usize,
    /// Epsilon of the sub-sampling group norms.
    pub group_norm_eps: f32,
    /// Epsilon of the RMS norms.
    pub eps: f32,
    /// Activations are clamped to ±this between steps.
    pub clip: f32,
    /// The text model's width.
    pub text_hidden: usize,
    /// Audio tokens a prompt holds per clip.
    pub soft_tokens: usize,
    /// Rows of the audio vocabulary (its last one embeds padding).
    pub vocab: usize,
    /// The text vocabulary's id of the audio vocabulary's first row: ids
    /// from here on (`<end_of_audio>`, the audio token) are embedded by the
    /// audio embedder, not the text model's table.
    pub vocab_offset: usize,
}

impl Gemma3nAudioConfig {
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
            reduction: uint("reduction")?,
            residual_weight: float("residual_weight")?,
            conv_kernel: uint("conv_kernel")?,
            group_norm_eps: float("group_norm_eps")?,
            eps: float("eps")?,
            clip: float("clip")?,
            text_hidden: uint("text_hidden")?,
            soft_tokens: uint("soft_tokens")?,
            vocab: uint("vocab")?,
            vocab_offset: uint("vocab_offset")?,
        };
        let ok = cfg.shape().plausible()
            && cfg.reduction > 0
            && cfg.channels.iter().all(|&c| c > 0)
            && cfg.mel_bins >= 3
            && cfg.vocab > 0
            && (1..=4096).contains(&cfg.soft_tokens)
            && cfg.layers <= 256;
        if !ok {
            return Err(MediaError::Metadata(format!(
                "implausible audio encoder: {cfg:?}"
            )));
        }
        Ok(cfg)
    }

    /// The conformer blocks' shape.
    fn shape(&self) -> Shape {
        Shape {
            hidden: self.hidden,
            heads: self.heads,
            context_left: self.context_left,
            left_keys: self.context_left,
            context_right: self.context_right,
            logit_cap: self.logit_cap,
            residual_weight: self.residual_weight,
            conv_kernel: self.conv_kernel,
            eps: self.eps,
            clip: self.clip,
            key_scale: 1.0,
        }
    }

    /// Frequency bins after the `i`-th sub-sampling convolution.
    fn freq_after(&self, i: usize) -> usize {
        (0..=i).fold(self.mel_bins, |f, _| (f + 2 - 3) / 2 + 1)
    }
}

/// Where Gemma 3n keeps a conformer block's tensors.
const LAYOUT: Layout = Layout {
    ffw: [
        [
            "ffw_layer_start.pre_layer_norm",
            "ffw_layer_start.ffw_layer_1",
            "ffw_layer_start.ffw_layer_2",
            "ffw_layer_start.post_layer_norm",
        ],
        [
            "ffw_layer_end.pre_layer_norm",
            "ffw_layer_end.ffw_layer_1",
            "ffw_layer_end.ffw_layer_2",
            "ffw_layer_end.post_layer_norm",
        ],
    ],
    attn_norm: "attention.pre_attn_norm",
    qkv: [
        "attention.attn.q_proj",
        "attention.attn.k_proj",
        "attention.attn.v_proj",
    ],
    per_dim_scale: ("attention.attn.per_dim_scale", false),
    pos_proj: "attention.attn.relative_position_embedding.pos_proj",
    post: "attention.post",
    post_norm: "attention.post_norm",
    lconv: HF_LCONV,
    norm: "norm",
};

/// What a clip becomes: rows of the text model's width for the prompt's
/// audio tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct AudioEmbedding {
    /// One row of the text width per audio token: on Gemma 3n
    /// [`Gemma3nAudioConfig::soft_tokens`] rows, on Gemma 4 one per token
    /// the clip gives.
    pub rows: Vec<f32>,
    /// How many leading rows come from the clip (the rest are padding).
    pub from_clip: usize,
}

/// Gemma 3n's audio tower and embedder.
pub struct Gemma3nAudioTower {
    cfg: Gemma3nAudioConfig,
    file: Arc<GgufFile>,
    conv: [Linear; 2],
    conv_norm: [Vec<f32>; 2],
    input_proj: Linear,
    blocks: Vec<Block>,
    soft_norm: Vec<f32>,
    projection: Linear,
    /// The audio vocabulary's tokens embedded in the text width
    /// (`[vocab][text_hidden]`); the last one pads.
    vocab: Vec<f32>,
}

impl std::fmt::Debug for Gemma3nAudioTower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gemma3nAudioTower")
            .field("cfg", &self.cfg)
            .finish()
    }
}

impl Gemma3nAudioTower {
    /// Bind the tensors of a converted checkpoint.
    pub fn from_gguf(file: Arc<GgufFile>) -> Result<Self, MediaError> {
        let cfg = Gemma3nAudioConfig::from_gguf(&file)?;
        let f = &file;
        let d = cfg.hidden;
        let [c0, c1] = cfg.channels;
        let conv = [
            weights::bind_plain(f, "a.subsample_conv_projection.conv_0.conv", c0, 9)?,
            weights::bind_plain(f, "a.subsample_conv_projection.conv_1.conv", c1, c0 * 9)?,
        ];
        let conv_norm = [
            vector(f, "a.subsample_conv_projection.conv_0.norm.weight", c0)?,
            vector(f, "a.subsample_conv_projection.conv_1.norm.weight", c1)?,
        ];
        let input_proj = weights::bind_plain(
            f,
            "a.subsample_conv_projection.input_proj_linear",
            d,
            c1 * cfg.freq_after(1),
        )?;
        // Load-time products (position tables, the vocabulary) on one
        // thread: they are small.
        let pool = ThreadPool::new(1);
        let shape = cfg.shape();
        let blocks = (0..cfg.layers)
            .map(|i| Block::bind(&pool, f, &shape, &LAYOUT, &format!("a.conformer.{i}.")))
            .collect::<Result<Vec<_>, MediaError>>()?;
        let soft_norm = vector(f, "mm.a.soft_embedding_norm.weight", d)?;
        let projection = weights::bind_plain(f, "mm.a.embedding_projection", cfg.text_hidden, d)?;
        // Every token of the audio vocabulary, embedded once: its row,
        // hard-normed, projected, normed without weight.
        let mut hard = vector(f, "mm.a.embedding.weight", cfg.vocab * d)?;
        let hard_norm = vector(f, "mm.a.hard_embedding_norm.weight", d)?;
        for row in hard.chunks_exact_mut(d) {
            nn::rms_norm(row, &hard_norm, cfg.eps);
        }
        let mut vocab = vec![0.0; cfg.vocab * cfg.text_hidden];
        product(
            &pool,
            f,
            &projection,
            &hard,
            cfg.vocab,
            &mut vocab,
            &mut Buffers::default(),
        )?;
        for row in vocab.chunks_exact_mut(cfg.text_hidden) {
            nn::rms_norm_plain(row, cfg.eps);
        }
        Ok(Self {
            cfg,
            file,
            conv,
            conv_norm,
            input_proj,
            blocks,
            soft_norm,
            projection,
            vocab,
        })
    }

    /// The embedding in the text width of token `id` when it belongs to the
    /// audio vocabulary (`vocab_offset..vocab_offset + vocab`). `None` for
    /// other ids.
    pub fn token_embedding(&self, id: u32) -> Option<&[f32]> {
        let cfg = &self.cfg;
        let i = (id as usize)
            .checked_sub(cfg.vocab_offset)
            .filter(|&i| i < cfg.vocab)?;
        Some(&self.vocab[i * cfg.text_hidden..][..cfg.text_hidden])
    }

    /// Padding's embedding: the audio vocabulary's last token.
    fn padding(&self) -> &[f32] {
        &self.vocab[(self.cfg.vocab - 1) * self.cfg.text_hidden..]
    }

    /// The configuration.
    pub fn config(&self) -> &Gemma3nAudioConfig {
        &self.cfg
    }

    /// The prompt rows for a clip's features: the clip's tokens (one per
    /// `4 · reduction` frames), then padding, [`Gemma3nAudioConfig::soft_tokens`]
    /// rows in all. A clip with more tokens than that is refused.
    pub fn encode(&self, pool: &ThreadPool, mel: &LogMel) -> Result<AudioEmbedding, MediaError> {
        let cfg = &self.cfg;
        if mel.bins != cfg.mel_bins || mel.frames == 0 {
            return Err(MediaError::Audio(format!(
                "{} frames of {} mel bins for an encoder of {} bins",
                mel.frames, mel.bins, cfg.mel_bins
            )));
        }
        let mut acts = Acts::default();
        let (x, t) = self.subsample(pool, mel, &mut acts.products)?;
        // A frame after sub-sampling is valid when the mel frame it starts
        // at is.
        let valid: Vec<bool> = (0..t)
            .map(|i| (i * 4).min(mel.frames - 1) < mel.valid)
            .collect();
        let mut x = x;
        let shape = cfg.shape();
        for b in &self.blocks {
            b.run(pool, &self.file, &shape, &mut x, &valid, &mut acts)?;
        }
        let d = cfg.hidden;
        let kept: Vec<usize> = (0..t).step_by(cfg.reduction).collect();
        let from_clip = kept.iter().filter(|&&i| valid[i]).count();
        if kept.len() > cfg.soft_tokens {
            return Err(MediaError::Unsupported(format!(
                "the clip gives {} audio tokens; the model takes {}",
                kept.len(),
                cfg.soft_tokens
            )));
        }
        let mut rows: Vec<f32> = Vec::with_capacity(kept.len() * d);
        for &i in &kept {
            rows.extend_from_slice(&x[i * d..][..d]);
        }
        nn::rms_norm_rows(pool, &mut rows, d, Some(&self.soft_norm), cfg.eps);
        let th = cfg.text_hidden;
        let mut out = vec![0.0f32; kept.len() * th];
        product(
            pool,
            &self.file,
            &self.projection,
            &rows,
            kept.len(),
            &mut out,
            &mut acts.products,
        )?;
        nn::rms_norm_rows(pool, &mut out, th, None, cfg.eps);
        for (j, &i) in kept.iter().enumerate() {
            if !valid[i] {
                out[j * th..][..th].copy_from_slice(self.padding());
            }
        }
        while out.len() < cfg.soft_tokens * th {
            out.extend_from_slice(self.padding());
        }
        Ok(AudioEmbedding {
            rows: out,
            from_clip,
        })
    }

    /// The two sub-sampling convolutions (each a product over unfolded
    /// 3×3 patches), their cumulative group norms and ReLUs, and the input
    /// projection: `t` rows of the encoder width.
    fn subsample(
        &self,
        pool: &ThreadPool,
        mel: &LogMel,
        bufs: &mut Buffers,
    ) -> Result<(Vec<f32>, usize), MediaError> {
        let cfg = &self.cfg;
        let mut x = Grid::mel(mel, mel.frames)?;
        for i in 0..2 {
            // Time is padded after the end only.
            x = conv_stride2(pool, &self.file, &self.conv[i], &x, 0, bufs)?;
            nn::cumulative_group_norm(
                &mut x.data,
                x.f * x.c,
                x.c,
                &self.conv_norm[i],
                cfg.group_norm_eps,
            );
            x.data.iter_mut().for_each(|v| *v = v.max(0.0));
        }
        let t = x.t;
        let mut out = vec![0.0f32; t * cfg.hidden];
        product(
            pool,
            &self.file,
            &self.input_proj,
            &x.data,
            t,
            &mut out,
            bufs,
        )?;
        Ok((out, t))
    }
}
