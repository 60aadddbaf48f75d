//! The operations the text model and every media tower share, in f32:
//! element-wise activations, the rotary embedding and softmax here; the
//! norms in [`norm`], the products of a weight in [`linear`], and
//! attention with its variants (full, local, the row-wise form the text
//! model's cache attention runs) in [`attention`]. The text model's cache
//! layout and prefill schedule live with the cache.

pub mod attention;
pub mod linear;
pub mod lora;
pub mod norm;

pub use linear::{Clamp, Input, Linear, Precision, ProductBuffers, Products, Weight};
pub use lora::{Adapter, Adapters, LoraPair, RowAdapters};
pub use norm::{
    cumulative_group_norm, layer_norm, layer_norm_rows, post_norm_add, pre_norm, rms_norm,
    rms_norm_plain, rms_norm_rows,
};

/// GELU with the tanh approximation (`gelu_pytorch_tanh`), written with the
/// identity `(1 + tanh(z)) / 2 = 1 / (1 + exp(-2z))` and an `exp` from IEEE
/// operations ([`quant::activation`]): the same bits on every CPU,
/// and the same as the slice kernels [`geglu`] runs.
#[inline]
pub fn gelu_tanh(x: f32) -> f32 {
    quant::activation::gelu_tanh(x)
}

/// `x <- gelu(x)` over a slice (SIMD where the CPU has it, the same bits
/// as [`gelu_tanh`] element by element): the vision towers' MLP.
pub fn gelu(x: &mut [f32]) {
    quant::activation::gelu(x)
}

/// `gate <- gelu(gate) * up`, the gated FFN activation (SIMD where the CPU
/// has it, the same bits as [`gelu_tanh`] element by element).
pub fn geglu(gate: &mut [f32], up: &[f32]) {
    quant::activation::geglu(gate, up)
}

/// Gemma 3n's activation sparsity: `x <- relu(x - (mean + m·std))`, keeping
/// only what lies `m` standard deviations (population, as transformers
/// computes it) above the row's mean.
pub fn gaussian_top_k(x: &mut [f32], m: f32) {
    let (mean, var) = norm::mean_var(x);
    let cutoff = (mean + var.sqrt() * f64::from(m)) as f32;
    x.iter_mut().for_each(|v| *v = (*v - cutoff).max(0.0));
}

/// `cap * tanh(x / cap)` over a slice (SIMD where the CPU has it, the same
/// bits as [`tanh`] element by element).
pub fn softcap(x: &mut [f32], cap: f32) {
    quant::activation::softcap(x, cap)
}

pub use quant::activation::tanh;

/// Rotary embedding for one base and position scale.
///
/// The angle of pair `i` at position `p` is `p * base^(-2i/d) / f_i`, where
/// `d` is the rotated width and `f_i` an optional per-pair divisor (Gemma 4's
/// proportional RoPE stores huge divisors for the pairs it leaves unrotated).
/// The powers are built by repeated f32 multiplication, the way ggml builds
/// its rope cache: Gemma's activations are large enough that the last bits of
/// these angles show in the logits, and we want llama.cpp's numbers on the
/// same file.
#[derive(Debug, Clone, PartialEq)]
pub struct Rope {
    half: usize,
    theta_scale: f32,
    scale: f32,
    freq_divisors: Option<Vec<f32>>,
}

impl Rope {
    /// Tables rotating the leading `dims` dimensions of each head.
    pub fn new(dims: usize, base: f32, scale: f32) -> Self {
        Self {
            half: dims / 2,
            theta_scale: base.powf(-2.0 / dims as f32),
            scale,
            freq_divisors: None,
        }
    }

    /// The same rotation with a divisor per pair (`dims / 2` of them).
    pub fn with_divisors(mut self, divisors: Option<Vec<f32>>) -> Self {
        self.freq_divisors = divisors.filter(|d| d.len() == self.half);
        self
    }

    /// Pairs rotated per head (the width of [`Self::angles`]' tables).
    pub fn pairs(&self) -> usize {
        self.half
    }

    /// The cosine and sine of each pair's angle at `pos` (`pairs()` each),
    /// computed once for all the heads of a row.
    pub fn angles(&self, pos: usize, cos: &mut [f32], sin: &mut [f32]) {
        let mut theta = pos as f32;
        for (i, (c, s)) in cos
            .iter_mut()
            .zip(sin.iter_mut())
            .take(self.half)
            .enumerate()
        {
            let t = match &self.freq_divisors {
                Some(d) => theta / d[i],
                None => theta,
            };
            (*s, *c) = (t * self.scale).sin_cos();
            theta *= self.theta_scale;
        }
    }

    /// Rotate one head in place, NeoX style, through the angles of
    /// [`Self::angles`]: element `i` pairs with `i + dims/2`; elements past
    /// `dims` are left alone.
    pub fn apply_angles(&self, head: &mut [f32], cos: &[f32], sin: &[f32]) {
        let half = self.half;
        let (lo, hi) = head[..2 * half].split_at_mut(half);
        for (((a, b), &cos), &sin) in lo.iter_mut().zip(hi.iter_mut()).zip(cos).zip(sin) {
            let (x0, x1) = (*a, *b);
            *a = x0 * cos - x1 * sin;
            *b = x0 * sin + x1 * cos;
        }
    }

    /// Rotate one head in place at position `pos` (see [`Self::apply_angles`]).
    pub fn apply(&self, head: &mut [f32], pos: usize) {
        let (mut cos, mut sin) = (vec![0.0; self.half], vec![0.0; self.half]);
        self.angles(pos, &mut cos, &mut sin);
        self.apply_angles(head, &cos, &sin);
    }
}

/// `x <- x · sigmoid(x)` (SiLU) over a slice, through the same `exp` as
/// [`gelu_tanh`] (SIMD where the CPU has it, the same bits on every tier).
pub fn silu(x: &mut [f32]) {
    quant::activation::silu(x)
}

/// `x <- x · sigmoid(gate)`, a GLU's gating, over the shorter length (SIMD
/// where the CPU has it, the same bits on every tier).
pub fn glu(x: &mut [f32], gate: &[f32]) {
    quant::activation::glu(x, gate)
}

/// `ln(1 + e^x)`, and `x` itself past 20 (where the two agree in f32).
#[inline]
pub fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        quant::activation::exp(x).ln_1p()
    }
}

/// Numerically stable softmax in place.
pub fn softmax(x: &mut [f32]) {
    quant::activation::softmax(x)
}

/// Fewer rows than this run on the calling thread: handing them to the pool
/// would cost more than it saves.
pub const PAR_MIN_ROWS: usize = 16;

/// Apply `f(row_index, row)` to every `row_len`-wide row of `data`, split
/// over the pool when there are enough rows to pay for the hand-off.
#[track_caller]
pub fn par_rows(
    pool: &threads::ThreadPool,
    data: &mut [f32],
    row_len: usize,
    f: impl Fn(usize, &mut [f32]) + Sync + Send,
) {
    let rows = data.len() / row_len.max(1);
    if rows < PAR_MIN_ROWS || pool.threads() == 1 {
        data.chunks_exact_mut(row_len)
            .enumerate()
            .for_each(|(i, r)| f(i, r));
        return;
    }
    let per = rows.div_ceil(pool.threads());
    pool.for_each_chunk_mut(data, per * row_len, |chunk, rows| {
        for (j, r) in rows.chunks_exact_mut(row_len).enumerate() {
            f(chunk * per + j, r);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gelu_known_values() {
        assert_eq!(gelu_tanh(0.0), 0.0);
        assert!((gelu_tanh(1.0) - 0.841_192).abs() < 1e-5);
        assert!((gelu_tanh(-1.0) + 0.158_808).abs() < 1e-5);
    }

    #[test]
    fn rope_is_a_rotation() {
        let rope = Rope::new(4, 10000.0, 1.0);
        let mut h = vec![1.0, 0.5, 0.0, 2.0];
        let norm0: f32 = h.iter().map(|v| v * v).sum();
        rope.apply(&mut h, 7);
        let norm1: f32 = h.iter().map(|v| v * v).sum();
        assert!((norm0 - norm1).abs() < 1e-5);
        // Position 0 leaves the head unchanged.
        let mut z = vec![1.0, 0.5, 0.0, 2.0];
        rope.apply(&mut z, 0);
        assert_eq!(z, vec![1.0, 0.5, 0.0, 2.0]);
        // The first pair rotates by exactly `pos` radians (inv_freq[0] = 1).
        let mut e = vec![1.0, 0.0, 0.0, 0.0];
        rope.apply(&mut e, 1);
        assert!((e[0] - 1f32.cos()).abs() < 1e-6 && (e[2] - 1f32.sin()).abs() < 1e-6);
    }

    #[test]
    fn softmax_sums_to_one() {
        let mut x = vec![1.0, 2.0, 3.0, -1e9];
        softmax(&mut x);
        assert!((x.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!(x[3] == 0.0 && x[2] > x[1]);
    }
}
