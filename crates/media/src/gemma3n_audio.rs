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
//! model's width. A prompt always holds [`AudioConfig::soft_tokens`] audio
//! tokens; those past the clip (and frames of padding) take the embedding
//! of the audio vocabulary's last token.
//!
//! Weights come from a checkpoint directory, converted in memory by the
//! `hf` crate: the tower's tensors under `a.`, the embedder's under `mm.a.`,
//! with the hyper-parameters under `hearth.audio.`.

use crate::audio::LogMel;
use crate::vision::{product, vector, Buffers, Linear};
use crate::MediaError;
use gguf::GgufFile;
use quant::ThreadPool;
use std::sync::Arc;

/// Metadata keys the converter writes.
pub const AUDIO_KEY_PREFIX: &str = "hearth.audio.";

/// The audio encoder's shape and the prompt's size.
#[derive(Debug, Clone, PartialEq)]
pub struct AudioConfig {
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

impl AudioConfig {
    /// Read the `hearth.audio.*` keys.
    pub fn from_gguf(file: &GgufFile) -> Result<Self, MediaError> {
        let key = |k: &str| format!("{AUDIO_KEY_PREFIX}{k}");
        let uint = |k: &str| -> Result<usize, MediaError> {
            file.get_u64(&key(k))
                .and_then(|v| usize::try_from(v).ok())
                .ok_or_else(|| MediaError::Metadata(format!("`{}` is missing", key(k))))
        };
        let float = |k: &str| -> Result<f32, MediaError> {
            file.get_f32(&key(k))
                .ok_or_else(|| MediaError::Metadata(format!("`{}` is missing", key(k))))
        };
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
        let ok = cfg.hidden > 0
            && cfg.heads > 0
            && cfg.hidden.is_multiple_of(cfg.heads)
            && cfg.hidden.is_multiple_of(2)
            && (1..=1024).contains(&cfg.context_left)
            && cfg.context_right <= 1024
            && cfg.logit_cap > 0.0
            && cfg.reduction > 0
            && (1..=64).contains(&cfg.conv_kernel)
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

    /// Frequency bins after the `i`-th sub-sampling convolution.
    fn freq_after(&self, i: usize) -> usize {
        (0..=i).fold(self.mel_bins, |f, _| (f + 2 - 3) / 2 + 1)
    }
}

/// One conformer block's weights.
struct Block {
    ffw: [FeedForward; 2],
    attn_norm: Vec<f32>,
    q: Linear,
    k: Linear,
    v: Linear,
    /// The relative-position projection of the sinusoids (`[span][d]`),
    /// computed once at load.
    positions: Vec<f32>,
    /// Each head dimension's query scale: `d_head^-1/2 / ln 2 · softplus(s)`.
    query_scale: Vec<f32>,
    post: Linear,
    post_norm: Vec<f32>,
    conv_norm_in: Vec<f32>,
    conv_start: Linear,
    /// Depthwise kernel, `[d][kernel]`.
    conv: Vec<f32>,
    conv_norm: Vec<f32>,
    conv_end: Linear,
    norm: Vec<f32>,
}

/// A half-step feed-forward block.
struct FeedForward {
    pre_norm: Vec<f32>,
    up: Linear,
    down: Linear,
    post_norm: Vec<f32>,
}

/// What a clip becomes: rows of the text model's width for the prompt's
/// audio tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct AudioEmbedding {
    /// [`AudioConfig::soft_tokens`] rows of the text width.
    pub rows: Vec<f32>,
    /// How many leading rows come from the clip (the rest are padding).
    pub from_clip: usize,
}

/// Gemma 3n's audio tower and embedder.
pub struct AudioTower {
    cfg: AudioConfig,
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

impl std::fmt::Debug for AudioTower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AudioTower")
            .field("cfg", &self.cfg)
            .finish()
    }
}

/// `x <- x / sqrt(mean(x²) + eps) · w`, Gemma 3n's RMSNorm (weight `w`
/// itself, not `1 + w`); without `w`, no weight.
fn rms_norm(x: &mut [f32], w: Option<&[f32]>, eps: f32) {
    let ss: f64 = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
    let s = 1.0 / ((ss / x.len().max(1) as f64) as f32 + eps).sqrt();
    match w {
        Some(w) => x.iter_mut().zip(w).for_each(|(v, &g)| *v = *v * s * g),
        None => x.iter_mut().for_each(|v| *v *= s),
    }
}

fn rows_norm(pool: &ThreadPool, x: &mut [f32], d: usize, w: Option<&[f32]>, eps: f32) {
    pool.for_each_chunk_mut(x, d, |_, row| rms_norm(row, w, eps));
}

fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

impl AudioTower {
    /// Bind the tensors of a converted checkpoint.
    pub fn from_gguf(file: Arc<GgufFile>) -> Result<Self, MediaError> {
        let cfg = AudioConfig::from_gguf(&file)?;
        let f = &file;
        let d = cfg.hidden;
        let [c0, c1] = cfg.channels;
        let conv = [
            Linear::bind_plain(f, "a.subsample_conv_projection.conv_0.conv", c0, 9)?,
            Linear::bind_plain(f, "a.subsample_conv_projection.conv_1.conv", c1, c0 * 9)?,
        ];
        let conv_norm = [
            vector(f, "a.subsample_conv_projection.conv_0.norm.weight", c0)?,
            vector(f, "a.subsample_conv_projection.conv_1.norm.weight", c1)?,
        ];
        let input_proj = Linear::bind_plain(
            f,
            "a.subsample_conv_projection.input_proj_linear",
            d,
            c1 * cfg.freq_after(1),
        )?;
        let dh = d / cfg.heads;
        // Load-time products (position tables, the vocabulary) on one
        // thread: they are small.
        let pool = ThreadPool::new(1);
        let blocks = (0..cfg.layers)
            .map(|i| {
                let n = |s: &str| format!("a.conformer.{i}.{s}");
                let ffw = |which: &str| -> Result<FeedForward, MediaError> {
                    Ok(FeedForward {
                        pre_norm: vector(f, &n(&format!("{which}.pre_layer_norm.weight")), d)?,
                        up: Linear::bind_plain(f, &n(&format!("{which}.ffw_layer_1")), 4 * d, d)?,
                        down: Linear::bind_plain(f, &n(&format!("{which}.ffw_layer_2")), d, 4 * d)?,
                        post_norm: vector(f, &n(&format!("{which}.post_layer_norm.weight")), d)?,
                    })
                };
                let per_dim = vector(f, &n("attention.attn.per_dim_scale"), dh)?;
                let base = (dh as f32).powf(-0.5) / softplus(0.0);
                let pos_proj = Linear::bind_plain(
                    f,
                    &n("attention.attn.relative_position_embedding.pos_proj"),
                    d,
                    d,
                )?;
                Ok(Block {
                    ffw: [ffw("ffw_layer_start")?, ffw("ffw_layer_end")?],
                    attn_norm: vector(f, &n("attention.pre_attn_norm.weight"), d)?,
                    q: Linear::bind_plain(f, &n("attention.attn.q_proj"), d, d)?,
                    k: Linear::bind_plain(f, &n("attention.attn.k_proj"), d, d)?,
                    v: Linear::bind_plain(f, &n("attention.attn.v_proj"), d, d)?,
                    positions: Self::relative_positions(&pool, f, &cfg, &pos_proj)?,
                    query_scale: per_dim.iter().map(|&s| base * softplus(s)).collect(),
                    post: Linear::bind_plain(f, &n("attention.post"), d, d)?,
                    post_norm: vector(f, &n("attention.post_norm.weight"), d)?,
                    conv_norm_in: vector(f, &n("lconv1d.pre_layer_norm.weight"), d)?,
                    conv_start: Linear::bind_plain(f, &n("lconv1d.linear_start"), 2 * d, d)?,
                    conv: vector(
                        f,
                        &n("lconv1d.depthwise_conv1d.weight"),
                        d * cfg.conv_kernel,
                    )?,
                    conv_norm: vector(f, &n("lconv1d.conv_norm.weight"), d)?,
                    conv_end: Linear::bind_plain(f, &n("lconv1d.linear_end"), d, d)?,
                    norm: vector(f, &n("norm.weight"), d)?,
                })
            })
            .collect::<Result<Vec<_>, MediaError>>()?;
        let soft_norm = vector(f, "mm.a.soft_embedding_norm.weight", d)?;
        let projection = Linear::bind_plain(f, "mm.a.embedding_projection", cfg.text_hidden, d)?;
        // Every token of the audio vocabulary, embedded once: its row,
        // hard-normed, projected, normed without weight.
        let mut hard = vector(f, "mm.a.embedding.weight", cfg.vocab * d)?;
        let hard_norm = vector(f, "mm.a.hard_embedding_norm.weight", d)?;
        for row in hard.chunks_exact_mut(d) {
            rms_norm(row, Some(&hard_norm), cfg.eps);
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
            rms_norm(row, None, cfg.eps);
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

    /// The sinusoids of relative distances `context_left - 1` down to
    /// `-context_right` (sines of every timescale, then cosines), through
    /// the block's projection: `[span][d]`.
    fn relative_positions(
        pool: &ThreadPool,
        file: &GgufFile,
        cfg: &AudioConfig,
        proj: &Linear,
    ) -> Result<Vec<f32>, MediaError> {
        let d = cfg.hidden;
        let half = d / 2;
        let past = cfg.context_left - 1;
        let span = past + cfg.context_right + 1;
        let step = (1.0e4f32).ln() / (half.saturating_sub(1).max(1)) as f32;
        let mut signal = vec![0.0f32; span * d];
        for (f, row) in signal.chunks_exact_mut(d).enumerate() {
            let pos = past as f32 - f as f32;
            for i in 0..half {
                let t = pos * (-(i as f32) * step).exp();
                row[i] = t.sin();
                row[half + i] = t.cos();
            }
        }
        let mut out = vec![0.0; span * d];
        product(
            pool,
            file,
            proj,
            &signal,
            span,
            &mut out,
            &mut Buffers::default(),
        )?;
        Ok(out)
    }

    /// The configuration.
    pub fn config(&self) -> &AudioConfig {
        &self.cfg
    }

    /// The prompt rows for a clip's features: the clip's tokens (one per
    /// `4 · reduction` frames), then padding, [`AudioConfig::soft_tokens`]
    /// rows in all. A clip with more tokens than that is refused.
    pub fn encode(&self, pool: &ThreadPool, mel: &LogMel) -> Result<AudioEmbedding, MediaError> {
        let cfg = &self.cfg;
        if mel.bins != cfg.mel_bins || mel.frames == 0 {
            return Err(MediaError::Decode(format!(
                "{} frames of {} mel bins for an encoder of {} bins",
                mel.frames, mel.bins, cfg.mel_bins
            )));
        }
        let mut bufs = Buffers::default();
        let (x, t) = self.subsample(pool, mel, &mut bufs)?;
        // A frame after sub-sampling is valid when the mel frame it starts
        // at is.
        let valid: Vec<bool> = (0..t)
            .map(|i| (i * 4).min(mel.frames - 1) < mel.valid)
            .collect();
        let mut x = x;
        for b in &self.blocks {
            self.block(pool, b, &mut x, &valid, &mut bufs)?;
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
        rows_norm(pool, &mut rows, d, Some(&self.soft_norm), cfg.eps);
        let th = cfg.text_hidden;
        let mut out = vec![0.0f32; kept.len() * th];
        product(
            pool,
            &self.file,
            &self.projection,
            &rows,
            kept.len(),
            &mut out,
            &mut bufs,
        )?;
        rows_norm(pool, &mut out, th, None, cfg.eps);
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
        // Layout `[time][freq][channel]`; the mel features are one channel.
        let (mut x, mut t, mut f, mut c) = (mel.data.clone(), mel.frames, mel.bins, 1);
        for i in 0..2 {
            let (t2, f2) = ((t + 2 - 3) / 2 + 1, (f + 2 - 3) / 2 + 1);
            let cols = c * 9;
            // Patches in the kernel's order (channel, time, frequency); time
            // is padded after the end, frequency by one on each side.
            let mut patches = vec![0.0f32; t2 * f2 * cols];
            for (p, patch) in patches.chunks_exact_mut(cols).enumerate() {
                let (ti, fi) = (p / f2, p % f2);
                for ci in 0..c {
                    for kt in 0..3 {
                        let tt = 2 * ti + kt;
                        for kf in 0..3 {
                            let ff = (2 * fi + kf).wrapping_sub(1);
                            if tt < t && ff < f {
                                patch[ci * 9 + kt * 3 + kf] = x[(tt * f + ff) * c + ci];
                            }
                        }
                    }
                }
            }
            let out_c = cfg.channels[i];
            let mut y = vec![0.0f32; t2 * f2 * out_c];
            product(
                pool,
                &self.file,
                &self.conv[i],
                &patches,
                t2 * f2,
                &mut y,
                bufs,
            )?;
            cumulative_group_norm(
                &mut y,
                f2 * out_c,
                out_c,
                &self.conv_norm[i],
                cfg.group_norm_eps,
            );
            y.iter_mut().for_each(|v| *v = v.max(0.0));
            (x, t, f, c) = (y, t2, f2, out_c);
        }
        let mut out = vec![0.0f32; t * cfg.hidden];
        product(pool, &self.file, &self.input_proj, &x, t, &mut out, bufs)?;
        Ok((out, t))
    }

    /// One conformer block over `x` (`valid.len()` rows).
    fn block(
        &self,
        pool: &ThreadPool,
        b: &Block,
        x: &mut [f32],
        valid: &[bool],
        bufs: &mut Buffers,
    ) -> Result<(), MediaError> {
        let cfg = &self.cfg;
        let (t, d) = (valid.len(), cfg.hidden);
        let clip = |v: &mut [f32]| v.iter_mut().for_each(|e| *e = e.clamp(-cfg.clip, cfg.clip));
        self.feed_forward(pool, &b.ffw[0], x, t, bufs)?;
        // Attention.
        let mut h = x.to_vec();
        clip(&mut h);
        rows_norm(pool, &mut h, d, Some(&b.attn_norm), cfg.eps);
        let (mut q, mut k, mut v) = (vec![0.0; t * d], vec![0.0; t * d], vec![0.0; t * d]);
        product(pool, &self.file, &b.q, &h, t, &mut q, bufs)?;
        product(pool, &self.file, &b.k, &h, t, &mut k, bufs)?;
        product(pool, &self.file, &b.v, &h, t, &mut v, bufs)?;
        let dh = d / cfg.heads;
        for row in q.chunks_exact_mut(dh) {
            row.iter_mut()
                .zip(&b.query_scale)
                .for_each(|(e, &s)| *e *= s);
        }
        let mut attn = vec![0.0f32; t * d];
        self.local_attention(pool, b, &q, &k, &v, valid, &mut attn);
        let mut o = vec![0.0f32; t * d];
        product(pool, &self.file, &b.post, &attn, t, &mut o, bufs)?;
        clip(&mut o);
        rows_norm(pool, &mut o, d, Some(&b.post_norm), cfg.eps);
        x.iter_mut().zip(&o).for_each(|(e, &a)| *e += a);
        // Frames past the clip do not enter the convolution.
        for (row, &ok) in x.chunks_exact_mut(d).zip(valid) {
            if !ok {
                row.fill(0.0);
            }
        }
        // Light convolution.
        let mut h = x.to_vec();
        rows_norm(pool, &mut h, d, Some(&b.conv_norm_in), cfg.eps);
        let mut wide = vec![0.0f32; t * 2 * d];
        product(pool, &self.file, &b.conv_start, &h, t, &mut wide, bufs)?;
        let mut gated = vec![0.0f32; t * d];
        for (g, w) in gated.chunks_exact_mut(d).zip(wide.chunks_exact(2 * d)) {
            let (a, gate) = w.split_at(d);
            for ((o, &av), &gv) in g.iter_mut().zip(a).zip(gate) {
                *o = av / (1.0 + (-gv).exp());
            }
        }
        let kernel = cfg.conv_kernel;
        let mut conv = vec![0.0f32; t * d];
        pool.for_each_chunk_mut(&mut conv, d, |ti, out| {
            for (ch, o) in out.iter_mut().enumerate() {
                let w = &b.conv[ch * kernel..][..kernel];
                let mut s = 0.0f32;
                for (kk, &wv) in w.iter().enumerate() {
                    // Causal: the kernel's last tap is the frame itself.
                    if let Some(src) = (ti + kk).checked_sub(kernel - 1) {
                        s += wv * gated[src * d + ch];
                    }
                }
                *o = s;
            }
        });
        clip(&mut conv);
        rows_norm(pool, &mut conv, d, Some(&b.conv_norm), cfg.eps);
        conv.iter_mut().for_each(|e| *e = silu(*e));
        let mut o = vec![0.0f32; t * d];
        product(pool, &self.file, &b.conv_end, &conv, t, &mut o, bufs)?;
        x.iter_mut().zip(&o).for_each(|(e, &a)| *e += a);
        self.feed_forward(pool, &b.ffw[1], x, t, bufs)?;
        clip(x);
        rows_norm(pool, x, d, Some(&b.norm), cfg.eps);
        Ok(())
    }

    /// `x += w · post_norm(down(silu(up(pre_norm(clip(x))))))`, clipped.
    fn feed_forward(
        &self,
        pool: &ThreadPool,
        ff: &FeedForward,
        x: &mut [f32],
        t: usize,
        bufs: &mut Buffers,
    ) -> Result<(), MediaError> {
        let cfg = &self.cfg;
        let d = cfg.hidden;
        let mut h: Vec<f32> = x.iter().map(|e| e.clamp(-cfg.clip, cfg.clip)).collect();
        rows_norm(pool, &mut h, d, Some(&ff.pre_norm), cfg.eps);
        let mut up = vec![0.0f32; t * 4 * d];
        product(pool, &self.file, &ff.up, &h, t, &mut up, bufs)?;
        up.iter_mut().for_each(|e| *e = silu(*e));
        let mut o = vec![0.0f32; t * d];
        product(pool, &self.file, &ff.down, &up, t, &mut o, bufs)?;
        o.iter_mut().for_each(|e| *e = e.clamp(-cfg.clip, cfg.clip));
        rows_norm(pool, &mut o, d, Some(&ff.post_norm), cfg.eps);
        let w = cfg.residual_weight;
        x.iter_mut().zip(&o).for_each(|(e, &a)| *e += a * w);
        Ok(())
    }

    /// Each query frame attends to the valid frames from `context_left - 1`
    /// before it to `context_right` after it: logits are `q·k` plus `q`
    /// dotted with the projected sinusoid of their distance, soft-capped.
    /// A query with no valid frame in reach (past the clip) gets zeros.
    #[allow(clippy::too_many_arguments)]
    fn local_attention(
        &self,
        pool: &ThreadPool,
        b: &Block,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        valid: &[bool],
        out: &mut [f32],
    ) {
        let cfg = &self.cfg;
        let (t, d) = (valid.len(), cfg.hidden);
        let dh = d / cfg.heads;
        let past = cfg.context_left - 1;
        let future = cfg.context_right;
        let cap = cfg.logit_cap;
        pool.for_each_chunk_mut(out, d, |qi, out| {
            let lo = qi.saturating_sub(past);
            let hi = (qi + future).min(t - 1);
            let mut logits = vec![0.0f32; hi + 1 - lo];
            for hd in 0..cfg.heads {
                let qv = &q[qi * d + hd * dh..][..dh];
                let mut any = false;
                for (j, ki) in (lo..=hi).enumerate() {
                    if !valid[ki] {
                        logits[j] = f32::NEG_INFINITY;
                        continue;
                    }
                    any = true;
                    let kv = &k[ki * d + hd * dh..][..dh];
                    // Row `past - (qi - ki)` holds the distance qi - ki.
                    let row = past + ki - qi;
                    let pv = &b.positions[row * d + hd * dh..][..dh];
                    let s: f32 = qv.iter().zip(kv).map(|(a, b)| a * b).sum::<f32>()
                        + qv.iter().zip(pv).map(|(a, b)| a * b).sum::<f32>();
                    logits[j] = (s / cap).tanh() * cap;
                }
                let o = &mut out[hd * dh..][..dh];
                o.fill(0.0);
                if !any {
                    continue;
                }
                let max = logits.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
                let mut sum = 0.0f32;
                for l in logits.iter_mut() {
                    *l = (*l - max).exp();
                    sum += *l;
                }
                for (j, ki) in (lo..=hi).enumerate() {
                    let p = logits[j] / sum;
                    if p == 0.0 {
                        continue;
                    }
                    let vv = &v[ki * d + hd * dh..][..dh];
                    o.iter_mut().zip(vv).for_each(|(e, &x)| *e += p * x);
                }
            }
        });
    }
}

/// Group norm over each time step's `width` values (frequency × channel,
/// channel fastest), with mean and variance accumulated over time: step
/// `t` uses the mean of steps `0..=t`, and the sum over those steps of
/// their squared distances from their own running means. Then a weight per
/// channel.
fn cumulative_group_norm(x: &mut [f32], width: usize, channels: usize, w: &[f32], eps: f32) {
    let (mut sum, mut sq, mut count) = (0.0f64, 0.0f64, 0.0f64);
    for row in x.chunks_exact_mut(width) {
        sum += row.iter().map(|&v| f64::from(v)).sum::<f64>();
        count += width as f64;
        let mean = sum / count;
        sq += row
            .iter()
            .map(|&v| (f64::from(v) - mean) * (f64::from(v) - mean))
            .sum::<f64>();
        let inv = 1.0 / ((sq / count) as f32 + eps).sqrt();
        let mean = mean as f32;
        for (i, v) in row.iter_mut().enumerate() {
            *v = (*v - mean) * inv * w[i % channels];
        }
    }
}
