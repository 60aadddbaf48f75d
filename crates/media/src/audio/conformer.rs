//! The USM-style conformer block that Gemma 3n's and Gemma 4's audio
//! encoders share: a half-step feed-forward, local self-attention with
//! relative positions and soft-capped logits, a light convolution (GLU, a
//! causal depthwise convolution, SiLU), a second half-step feed-forward and
//! a norm, with activations clamped between steps. The two families differ
//! in tensor names, in Gemma 4's key scale and its clamped products (a
//! [`Linear`] carries its own clamps), and in what surrounds the blocks.

use crate::weights;
use crate::weights::{product, vector, Buffers};
use crate::MediaError;
use gguf::GgufFile;
use nn::attention::local::{local, LocalWindow};
use nn::Linear;
use threads::ThreadPool;

/// Metadata keys the converter writes.
pub const AUDIO_KEY_PREFIX: &str = "hearth.audio.";

/// Reads the converter's `hearth.audio.*` keys.
pub(crate) struct AudioKeys<'f>(pub(crate) &'f GgufFile);

impl AudioKeys<'_> {
    fn missing(k: &str) -> MediaError {
        MediaError::Metadata(format!("`{AUDIO_KEY_PREFIX}{k}` is missing"))
    }

    /// `hearth.audio.{k}` as a count.
    pub(crate) fn uint(&self, k: &str) -> Result<usize, MediaError> {
        self.0
            .get_u64(&format!("{AUDIO_KEY_PREFIX}{k}"))
            .and_then(|v| usize::try_from(v).ok())
            .ok_or_else(|| Self::missing(k))
    }

    /// `hearth.audio.{k}` as a number.
    pub(crate) fn float(&self, k: &str) -> Result<f32, MediaError> {
        self.0
            .get_f32(&format!("{AUDIO_KEY_PREFIX}{k}"))
            .ok_or_else(|| Self::missing(k))
    }
}

/// The blocks' shape and constants.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Shape {
    /// Encoder width.
    pub(crate) hidden: usize,
    /// Attention heads.
    pub(crate) heads: usize,
    /// Past frames of the relative-position table, the distance-0 row
    /// included (the table spans `context_left - 1` down to
    /// `-context_right`).
    pub(crate) context_left: usize,
    /// Frames at or before a query that it attends to, itself included:
    /// Gemma 3n `context_left`; Gemma 4 one fewer (transformers' and
    /// llama.cpp's masks keep distances below `context_left - 1`).
    pub(crate) left_keys: usize,
    /// Future frames a query sees.
    pub(crate) context_right: usize,
    /// Soft-cap of the attention logits.
    pub(crate) logit_cap: f32,
    /// Weight of the half-step feed-forward blocks.
    pub(crate) residual_weight: f32,
    /// Kernel of the depthwise convolution.
    pub(crate) conv_kernel: usize,
    /// Epsilon of the RMS norms.
    pub(crate) eps: f32,
    /// Activations are clamped to ±this between steps.
    pub(crate) clip: f32,
    /// Keys are multiplied by this (Gemma 4: `ln(1 + e) / ln 2`; Gemma 3n: 1).
    pub(crate) key_scale: f32,
}

impl Shape {
    /// Whether the numbers can drive the blocks.
    pub(crate) fn plausible(&self) -> bool {
        self.hidden > 0
            && self.heads > 0
            && self.hidden.is_multiple_of(self.heads)
            && self.hidden.is_multiple_of(2)
            && (1..=1024).contains(&self.context_left)
            && (1..=self.context_left).contains(&self.left_keys)
            && self.context_right <= 1024
            && self.logit_cap > 0.0
            && (1..=64).contains(&self.conv_kernel)
            && self.key_scale.is_finite()
    }
}

/// Where a family keeps a block's tensors, below the block's prefix: module
/// names, to which `.weight` is added (a product's clamps sit beside its
/// weight).
pub(crate) struct Layout {
    /// The two feed-forward blocks: pre-norm, up, down, post-norm.
    pub(crate) ffw: [[&'static str; 4]; 2],
    /// The norm before attention.
    pub(crate) attn_norm: &'static str,
    /// The query, key and value products.
    pub(crate) qkv: [&'static str; 3],
    /// The per-dimension query scale, and whether it is stored with the
    /// softplus already applied (llama.cpp's files).
    pub(crate) per_dim_scale: (&'static str, bool),
    /// The projection of the relative-position sinusoids.
    pub(crate) pos_proj: &'static str,
    /// The attention's output product.
    pub(crate) post: &'static str,
    /// The norm after attention.
    pub(crate) post_norm: &'static str,
    /// The light convolution: pre-norm, the product before the GLU, the
    /// depthwise kernel, the norm after it, the product after it.
    pub(crate) lconv: [&'static str; 5],
    /// The block's last norm.
    pub(crate) norm: &'static str,
}

/// The Hugging Face names of both families' light convolution.
pub(crate) const HF_LCONV: [&str; 5] = [
    "lconv1d.pre_layer_norm",
    "lconv1d.linear_start",
    "lconv1d.depthwise_conv1d",
    "lconv1d.conv_norm",
    "lconv1d.linear_end",
];

/// One conformer block's weights.
pub(crate) struct Block {
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

/// The activations a block works in, made once per clip and reused by
/// every block (each use starts from zeros, as a fresh buffer would).
#[derive(Default)]
pub(crate) struct Acts {
    /// The products' buffers.
    pub(crate) products: Buffers,
    /// A normed copy of the block's input.
    h: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    /// Attention's output.
    attn: Vec<f32>,
    /// A step's output before the residual add.
    o: Vec<f32>,
    /// The convolution's product before the GLU, and the GLU's output.
    wide: Vec<f32>,
    gated: Vec<f32>,
    /// The depthwise convolution's output.
    conv: Vec<f32>,
    /// The feed-forward's hidden layer.
    up: Vec<f32>,
}

/// `buf` as `n` zeros, its allocation kept.
fn zeros(buf: &mut Vec<f32>, n: usize) -> &mut [f32] {
    buf.clear();
    buf.resize(n, 0.0);
    buf
}

/// `buf` as a copy of `x`, its allocation kept.
fn copy_of<'b>(buf: &'b mut Vec<f32>, x: &[f32]) -> &'b mut [f32] {
    buf.clear();
    buf.extend_from_slice(x);
    buf
}

/// A half-step feed-forward block.
struct FeedForward {
    pre_norm: Vec<f32>,
    up: Linear,
    down: Linear,
    post_norm: Vec<f32>,
}

impl Block {
    /// Bind block `prefix` (ending in `.`) of `layout`. Products bind with
    /// their clamps where the file has them.
    pub(crate) fn bind(
        pool: &ThreadPool,
        f: &GgufFile,
        shape: &Shape,
        layout: &Layout,
        prefix: &str,
    ) -> Result<Self, MediaError> {
        let d = shape.hidden;
        let dh = d / shape.heads;
        let n = |s: &str| format!("{prefix}{s}");
        let w = |s: &str| format!("{prefix}{s}.weight");
        let ffw = |names: &[&str; 4]| -> Result<FeedForward, MediaError> {
            Ok(FeedForward {
                pre_norm: vector(f, &w(names[0]), d)?,
                up: weights::bind_clamped(f, &n(names[1]), 4 * d, d)?,
                down: weights::bind_clamped(f, &n(names[2]), d, 4 * d)?,
                post_norm: vector(f, &w(names[3]), d)?,
            })
        };
        let (scale_name, softplus_applied) = layout.per_dim_scale;
        let per_dim = vector(f, &n(scale_name), dh)?;
        let base = (dh as f32).powf(-0.5) / nn::softplus(0.0);
        let pos_proj = weights::bind_plain(f, &n(layout.pos_proj), d, d)?;
        let [q, k, v] = layout.qkv;
        let [conv_norm_in, conv_start, conv, conv_norm, conv_end] = layout.lconv;
        Ok(Self {
            ffw: [ffw(&layout.ffw[0])?, ffw(&layout.ffw[1])?],
            attn_norm: vector(f, &w(layout.attn_norm), d)?,
            q: weights::bind_clamped(f, &n(q), d, d)?,
            k: weights::bind_clamped(f, &n(k), d, d)?,
            v: weights::bind_clamped(f, &n(v), d, d)?,
            positions: relative_positions(pool, f, shape, &pos_proj)?,
            query_scale: per_dim
                .iter()
                .map(|&s| base * if softplus_applied { s } else { nn::softplus(s) })
                .collect(),
            post: weights::bind_clamped(f, &n(layout.post), d, d)?,
            post_norm: vector(f, &w(layout.post_norm), d)?,
            conv_norm_in: vector(f, &w(conv_norm_in), d)?,
            conv_start: weights::bind_clamped(f, &n(conv_start), 2 * d, d)?,
            conv: vector(f, &w(conv), d * shape.conv_kernel)?,
            conv_norm: vector(f, &w(conv_norm), d)?,
            conv_end: weights::bind_clamped(f, &n(conv_end), d, d)?,
            norm: vector(f, &w(layout.norm), d)?,
        })
    }

    /// Run the block over `x` (`valid.len()` rows; frames past the clip are
    /// not `valid`): half a feed-forward, attention, the light convolution,
    /// the other half, a norm.
    pub(crate) fn run(
        &self,
        pool: &ThreadPool,
        file: &GgufFile,
        shape: &Shape,
        x: &mut [f32],
        valid: &[bool],
        acts: &mut Acts,
    ) -> Result<(), MediaError> {
        let (t, d) = (valid.len(), shape.hidden);
        let (lo, hi) = (-shape.clip, shape.clip);
        self.ffw[0].run(pool, file, shape, x, t, acts)?;
        self.attend(pool, file, shape, x, valid, acts)?;
        self.convolve(pool, file, shape, x, t, acts)?;
        self.ffw[1].run(pool, file, shape, x, t, acts)?;
        nn::par_rows(pool, x, d, |_, row| {
            row.iter_mut().for_each(|e| *e = e.clamp(lo, hi));
            nn::rms_norm(row, &self.norm, shape.eps);
        });
        Ok(())
    }

    /// `x += post_norm(clip(post(local attention(pre_norm(clip(x))))))`;
    /// frames past the clip are zeroed.
    fn attend(
        &self,
        pool: &ThreadPool,
        file: &GgufFile,
        shape: &Shape,
        x: &mut [f32],
        valid: &[bool],
        acts: &mut Acts,
    ) -> Result<(), MediaError> {
        let (t, d) = (valid.len(), shape.hidden);
        let (lo, hi) = (-shape.clip, shape.clip);
        let eps = shape.eps;
        let Acts {
            products: bufs,
            h,
            q,
            k,
            v,
            attn,
            o,
            ..
        } = acts;
        let h = copy_of(h, x);
        nn::par_rows(pool, h, d, |_, row| {
            row.iter_mut().for_each(|e| *e = e.clamp(lo, hi));
            nn::rms_norm(row, &self.attn_norm, eps);
        });
        let (q, k, v) = (zeros(q, t * d), zeros(k, t * d), zeros(v, t * d));
        product(pool, file, &self.q, h, t, q, bufs)?;
        product(pool, file, &self.k, h, t, k, bufs)?;
        product(pool, file, &self.v, h, t, v, bufs)?;
        let dh = d / shape.heads;
        nn::par_rows(pool, q, d, |_, row| {
            for head in row.chunks_exact_mut(dh) {
                head.iter_mut()
                    .zip(&self.query_scale)
                    .for_each(|(e, &s)| *e *= s);
            }
        });
        if shape.key_scale != 1.0 {
            nn::par_rows(pool, k, d, |_, row| {
                row.iter_mut().for_each(|e| *e *= shape.key_scale)
            });
        }
        let attn = zeros(attn, t * d);
        // Each frame sees the valid frames from `left_keys - 1` before it
        // to `context_right` after it, scored with their distance's term.
        let window = LocalWindow {
            heads: shape.heads,
            before: shape.left_keys - 1,
            after: shape.context_right,
            past: shape.context_left - 1,
            softcap: shape.logit_cap,
        };
        local(pool, &window, q, k, v, &self.positions, valid, attn);
        let o = zeros(o, t * d);
        product(pool, file, &self.post, attn, t, o, bufs)?;
        nn::par_rows(pool, o, d, |_, row| {
            row.iter_mut().for_each(|e| *e = e.clamp(lo, hi));
            nn::rms_norm(row, &self.post_norm, eps);
        });
        // The residual; frames past the clip do not enter the convolution.
        nn::par_rows(pool, x, d, |i, row| {
            if valid[i] {
                row.iter_mut()
                    .zip(&o[i * d..][..d])
                    .for_each(|(e, &a)| *e += a);
            } else {
                row.fill(0.0);
            }
        });
        Ok(())
    }

    /// The light convolution: `x += end(silu(norm(clip(causal conv(glu(start(norm(x))))))))`.
    fn convolve(
        &self,
        pool: &ThreadPool,
        file: &GgufFile,
        shape: &Shape,
        x: &mut [f32],
        t: usize,
        acts: &mut Acts,
    ) -> Result<(), MediaError> {
        let d = shape.hidden;
        let (lo, hi) = (-shape.clip, shape.clip);
        let eps = shape.eps;
        let Acts {
            products: bufs,
            h,
            wide,
            gated,
            conv,
            o,
            ..
        } = acts;
        let h = copy_of(h, x);
        nn::par_rows(pool, h, d, |_, row| {
            nn::rms_norm(row, &self.conv_norm_in, eps)
        });
        let wide = zeros(wide, t * 2 * d);
        product(pool, file, &self.conv_start, h, t, wide, bufs)?;
        let wide = &*wide;
        let gated = zeros(gated, t * d);
        nn::par_rows(pool, gated, d, |i, g| {
            let (a, gate) = wide[i * 2 * d..][..2 * d].split_at(d);
            g.copy_from_slice(a);
            nn::glu(g, gate);
        });
        let kernel = shape.conv_kernel;
        let gated = &*gated;
        let conv = zeros(conv, t * d);
        nn::par_rows(pool, conv, d, |ti, out| {
            for (ch, o) in out.iter_mut().enumerate() {
                let w = &self.conv[ch * kernel..][..kernel];
                let mut s = 0.0f32;
                for (kk, &wv) in w.iter().enumerate() {
                    // Causal: the kernel's last tap is the frame itself.
                    if let Some(src) = (ti + kk).checked_sub(kernel - 1) {
                        s += wv * gated[src * d + ch];
                    }
                }
                *o = s;
            }
            out.iter_mut().for_each(|e| *e = e.clamp(lo, hi));
            nn::rms_norm(out, &self.conv_norm, eps);
            nn::silu(out);
        });
        let o = zeros(o, t * d);
        product(pool, file, &self.conv_end, conv, t, o, bufs)?;
        let o = &*o;
        nn::par_rows(pool, x, d, |i, row| {
            row.iter_mut()
                .zip(&o[i * d..][..d])
                .for_each(|(e, &a)| *e += a)
        });
        Ok(())
    }
}

impl FeedForward {
    /// `x += w · post_norm(clip(down(silu(up(pre_norm(clip(x)))))))`.
    fn run(
        &self,
        pool: &ThreadPool,
        file: &GgufFile,
        shape: &Shape,
        x: &mut [f32],
        t: usize,
        acts: &mut Acts,
    ) -> Result<(), MediaError> {
        let d = shape.hidden;
        let (lo, hi) = (-shape.clip, shape.clip);
        let eps = shape.eps;
        let Acts {
            products: bufs,
            h,
            up,
            o,
            ..
        } = acts;
        let h = copy_of(h, x);
        nn::par_rows(pool, h, d, |_, row| {
            row.iter_mut().for_each(|e| *e = e.clamp(lo, hi));
            nn::rms_norm(row, &self.pre_norm, eps);
        });
        let up = zeros(up, t * 4 * d);
        product(pool, file, &self.up, h, t, up, bufs)?;
        nn::par_rows(pool, up, 4 * d, |_, row| nn::silu(row));
        let o = zeros(o, t * d);
        product(pool, file, &self.down, up, t, o, bufs)?;
        nn::par_rows(pool, o, d, |_, row| {
            row.iter_mut().for_each(|e| *e = e.clamp(lo, hi));
            nn::rms_norm(row, &self.post_norm, eps);
        });
        let w = shape.residual_weight;
        nn::par_rows(pool, x, d, |i, row| {
            row.iter_mut()
                .zip(&o[i * d..][..d])
                .for_each(|(e, &a)| *e += a * w)
        });
        Ok(())
    }
}

/// The sinusoids of relative distances `context_left - 1` down to
/// `-context_right` (sines of every timescale, then cosines), through the
/// block's projection: `[span][d]`.
fn relative_positions(
    pool: &ThreadPool,
    file: &GgufFile,
    shape: &Shape,
    proj: &Linear,
) -> Result<Vec<f32>, MediaError> {
    let d = shape.hidden;
    let half = d / 2;
    let past = shape.context_left - 1;
    let span = past + shape.context_right + 1;
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

/// Values on a time × frequency grid with channels, `[time][freq][channel]`
/// (the sub-sampling convolutions' layout).
pub(crate) struct Grid {
    /// The values, channel fastest.
    pub(crate) data: Vec<f32>,
    /// Time steps.
    pub(crate) t: usize,
    /// Frequency bins.
    pub(crate) f: usize,
    /// Channels.
    pub(crate) c: usize,
}

impl Grid {
    /// The first `frames` log-mel frames as one channel; an error when the
    /// features hold fewer.
    pub(crate) fn mel(mel: &crate::LogMel, frames: usize) -> Result<Self, MediaError> {
        let data = frames
            .checked_mul(mel.bins)
            .and_then(|n| mel.data.get(..n))
            .ok_or_else(|| {
                MediaError::Audio(format!(
                    "{frames} frames of {} mel bins asked of features holding {} values",
                    mel.bins,
                    mel.data.len()
                ))
            })?;
        Ok(Self {
            data: data.to_vec(),
            t: frames,
            f: mel.bins,
            c: 1,
        })
    }
}

/// A 3×3 convolution of stride 2 in time and frequency without bias (a
/// product over unfolded patches), `w` holding one row per output channel
/// in the kernel's order (input channel, time, frequency). Frequency is
/// padded by one on each side; time by `time_before` before the start and
/// the rest of one kernel after the end.
pub(crate) fn conv_stride2(
    pool: &ThreadPool,
    file: &GgufFile,
    w: &Linear,
    x: &Grid,
    time_before: usize,
    bufs: &mut Buffers,
) -> Result<Grid, MediaError> {
    let (t, f, c) = (x.t, x.f, x.c);
    let (t2, f2) = ((t + 2 - 3) / 2 + 1, (f + 2 - 3) / 2 + 1);
    let cols = c * 9;
    let mut patches = vec![0.0f32; t2 * f2 * cols];
    for (p, patch) in patches.chunks_exact_mut(cols).enumerate() {
        let (ti, fi) = (p / f2, p % f2);
        for ci in 0..c {
            for kt in 0..3 {
                let tt = (2 * ti + kt).wrapping_sub(time_before);
                for kf in 0..3 {
                    let ff = (2 * fi + kf).wrapping_sub(1);
                    if tt < t && ff < f {
                        patch[ci * 9 + kt * 3 + kf] = x.data[(tt * f + ff) * c + ci];
                    }
                }
            }
        }
    }
    let out_c = w.rows();
    let mut y = vec![0.0f32; t2 * f2 * out_c];
    product(pool, file, w, &patches, t2 * f2, &mut y, bufs)?;
    Ok(Grid {
        data: y,
        t: t2,
        f: f2,
        c: out_c,
    })
}
