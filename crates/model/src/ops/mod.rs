//! The operations the text model and every media tower share, in f32:
//! element-wise activations, the rotary embedding and softmax here; the
//! norms in [`norm`], the products of a weight in [`linear`], and
//! attention with its variants (full, local, the row-wise form the text
//! model's cache attention runs) in [`attention`]. The text model's cache
//! layout and prefill schedule live with the cache.

pub mod attention;
pub mod linear;
pub mod norm;

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

/// `cap * tanh(x / cap)` over a slice.
pub fn softcap(x: &mut [f32], cap: f32) {
    for v in x {
        *v = cap * tanh(*v / cap);
    }
}

/// `tanh(x)` from IEEE basic operations only, so it gives the same bits on
/// every CPU and C library. The C library's `tanhf` differs in the last bit
/// between x86-64 and AArch64 glibc, which showed in Gemma 2 and 4 logits
/// (their softcaps); ours is evaluated in f64, where `1 - 2 / (e^{2|x|} + 1)`
/// loses at most a few f64 bits to cancellation (|x| ≥ 2^-12), and rounded
/// once to f32: within an ulp of the true value.
pub fn tanh(x: f32) -> f32 {
    let a = x.abs();
    if a.is_nan() {
        return x;
    }
    if a < 1.0 / 4096.0 {
        // tanh(x) = x - x^3/3 + …: the cubic term is below half an ulp.
        return x;
    }
    if a >= 10.0 {
        // 1 - tanh(10) = 4e-9 is below half an ulp of 1.
        return 1.0f32.copysign(x);
    }
    let e = exp_f64(2.0 * a as f64);
    let t = 1.0 - 2.0 / (e + 1.0);
    (t as f32).copysign(x)
}

/// `1/n!` for n = 12 down to 0: the Taylor coefficients of `e^r`.
const INV_FACTORIALS: [f64; 13] = [
    1.0 / 479_001_600.0,
    1.0 / 39_916_800.0,
    1.0 / 3_628_800.0,
    1.0 / 362_880.0,
    1.0 / 40_320.0,
    1.0 / 5_040.0,
    1.0 / 720.0,
    1.0 / 120.0,
    1.0 / 24.0,
    1.0 / 6.0,
    1.0 / 2.0,
    1.0,
    1.0,
];

/// `e^z` for `0 <= z <= 20` from basic operations: `z = k ln 2 + r` with
/// `|r| <= ln 2 / 2` (ln 2 split so `k ln 2` is exact), a degree-12 Taylor
/// polynomial for `e^r` (error below 1e-15 relative) and `2^k` from the
/// exponent bits. Plain multiplies and adds, not `mul_add`: without the FMA
/// target feature `mul_add` is a libm call per step, and f64 has precision
/// to spare for an f32 result. Final logit softcaps run this once per
/// vocabulary entry per token.
fn exp_f64(z: f64) -> f64 {
    // ln 2 with its low 21 bits zero, so `k * LN2_HI` is exact; the rest.
    const LN2_HI: f64 = 6.931_471_803_691_238e-1;
    const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;
    let k = (z * std::f64::consts::LOG2_E).round();
    let r = (z - k * LN2_HI) - k * LN2_LO;
    let p = INV_FACTORIALS[1..]
        .iter()
        .fold(INV_FACTORIALS[0], |p, &c| p * r + c);
    // k is at most 29 here, far inside f64's exponent range.
    p * f64::from_bits(((1023 + k as i64) as u64) << 52)
}

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
pub(crate) const PAR_MIN_ROWS: usize = 16;

/// Apply `f(row_index, row)` to every `row_len`-wide row of `data`, split
/// over the pool when there are enough rows to pay for the hand-off.
#[track_caller]
pub fn par_rows(
    pool: &quant::ThreadPool,
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

    /// Within one f32 ulp of the libm's f64 tanh everywhere that matters,
    /// odd, and exact at the edges (±0, ±inf, NaN, saturation).
    #[test]
    fn tanh_is_within_an_ulp() {
        let mut worst = 0u32;
        let mut x = 1e-6f32;
        while x < 12.0 {
            for v in [x, -x] {
                let want = (v as f64).tanh() as f32;
                let got = tanh(v);
                let ulps = (got.to_bits() as i64 - want.to_bits() as i64).unsigned_abs() as u32;
                worst = worst.max(ulps);
                assert!(ulps <= 1, "tanh({v}) = {got}, want {want}");
                assert_eq!(tanh(-v).to_bits(), (-got).to_bits());
            }
            x *= 1.0007;
        }
        assert!(worst <= 1);
        assert_eq!(tanh(0.0).to_bits(), 0.0f32.to_bits());
        assert_eq!(tanh(-0.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!(tanh(f32::INFINITY), 1.0);
        assert_eq!(tanh(f32::NEG_INFINITY), -1.0);
        assert_eq!(tanh(40.0), 1.0);
        assert!(tanh(f32::NAN).is_nan());
    }

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
