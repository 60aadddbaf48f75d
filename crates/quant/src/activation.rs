//! GELU (tanh form), the gated GeGLU activation, SiLU, the sigmoid-gated GLU,
//! softmax and the logit soft-cap ([`softcap`]) over slices,
//! with one `exp` written from IEEE operations so every tier gives the same
//! bits.
//!
//! The C library's `expf` is a call per element that no compiler
//! vectorizes, and libraries differ in its last bit. Here `exp` is a range
//! reduction by `ln 2`, a degree-6 polynomial and an exponent shift, each
//! step an exact IEEE operation or a fused multiply-add; the SIMD kernels do
//! the same steps lane by lane, so the scalar code is their reference. On a
//! 2-core Zen 3, GeGLU was 9% of a 1B's prefill on one thread, almost all in
//! `expf`.

use std::sync::OnceLock;

mod softcap;
pub use softcap::{scalar_softcap, tanh};

/// `2 * sqrt(2 / pi)`: GELU's tanh argument doubled, for the logistic form.
const TWO_SQRT_2_OVER_PI: f32 = 2.0 * 0.797_884_6;
/// GELU's cubic coefficient.
const CUBIC: f32 = 0.044_715;
/// Inputs of `exp` are clamped here, so `2^n` stays a normal float.
const EXP_LO: f32 = -87.0;
/// See [`EXP_LO`].
const EXP_HI: f32 = 88.0;
/// log2(e).
const LOG2E: f32 = std::f32::consts::LOG2_E;
/// ln 2 split in two: the high part has few bits, so `n * LN2_HI` is exact.
const LN2_HI: f32 = 0.693_359_4;
/// ln 2 − [`LN2_HI`].
const LN2_LO: f32 = -2.121_944_4e-4;
/// The polynomial for `(exp(r) - 1 - r) / r^2` on |r| ≤ ln2 / 2 (Cephes'
/// `expf`), highest degree first.
const POLY: [f32; 6] = [
    1.987_569_1e-4,
    1.398_199_9e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    1.666_666_5e-1,
    0.5,
];

/// `e^x` to about 2 ulp, from IEEE operations and fused multiply-adds only
/// (the same bits on every CPU). Inputs beyond -87..88 are clamped there.
#[inline]
pub fn exp(x: f32) -> f32 {
    // Not `clamp`: a NaN becomes EXP_LO here, as `maxps` makes it in the
    // SIMD kernels (`clamp` would keep the NaN).
    #[allow(clippy::manual_clamp)]
    let x = x.max(EXP_LO).min(EXP_HI);
    let n = (x * LOG2E).round_ties_even();
    let r = n.mul_add(-LN2_HI, x);
    let r = n.mul_add(-LN2_LO, r);
    let mut p = POLY[0];
    for &c in &POLY[1..] {
        p = p.mul_add(r, c);
    }
    let y = p.mul_add(r * r, r) + 1.0;
    y * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

/// GELU with the tanh approximation (`gelu_pytorch_tanh`), written with the
/// identity `(1 + tanh(z)) / 2 = 1 / (1 + exp(-2z))`: one [`exp`].
#[inline]
pub fn gelu_tanh(x: f32) -> f32 {
    x / (1.0 + exp(-TWO_SQRT_2_OVER_PI * (x + CUBIC * x * x * x)))
}

/// `x <- gelu(x)` over a slice, the reference of [`gelu`].
pub fn scalar_gelu(x: &mut [f32]) {
    x.iter_mut().for_each(|v| *v = gelu_tanh(*v));
}

/// `gate <- gelu(gate) * up` over the shorter length, the reference of
/// [`geglu`].
pub fn scalar_geglu(gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = gelu_tanh(*g) * u;
    }
}

/// `1 / (1 + e^-x)`, through [`exp`].
#[inline]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

/// `x · sigmoid(x)` (SiLU), written `x / (1 + e^-x)`: one [`exp`], one
/// division.
#[inline]
pub fn silu_of(x: f32) -> f32 {
    x / (1.0 + exp(-x))
}

/// `x <- silu(x)` over a slice, the reference of [`silu`].
pub fn scalar_silu(x: &mut [f32]) {
    x.iter_mut().for_each(|v| *v = silu_of(*v));
}

/// `x <- x · sigmoid(gate)` over the shorter length, the reference of
/// [`glu`].
pub fn scalar_glu(x: &mut [f32], gate: &[f32]) {
    for (v, &g) in x.iter_mut().zip(gate) {
        *v *= sigmoid(g);
    }
}

/// Lanes of [`scalar_softmax`]'s sum: element `i` goes to lane `i % 16`.
const SUM_LANES: usize = 16;

/// `x <- softmax(x)`, the reference of [`softmax`]: `e_i = exp(x_i - max)`
/// ([`exp`], and exactly 0 where `x_i - max` is below its clamp, so a
/// masked `-inf` score gets no weight), then each `e_i` divided by their
/// sum as one multiply by `1 / sum`.
///
/// The sum runs in [`SUM_LANES`] lanes, lane `l` adding `e_l, e_{l+16}, …`
/// in order, and the lanes are then added in halves (lane `l` plus lane
/// `l + 8`, then `+ 4`, `+ 2`, `+ 1`): the order a 16-lane vector sums in,
/// which the 8-lane kernels follow too, so every tier gives these bits. A
/// NaN input is passed over by the maximum (as `maxps` passes it over).
pub fn scalar_softmax(x: &mut [f32]) {
    let max = x.iter().fold(f32::NEG_INFINITY, max_skipping_nan);
    let mut lanes = [0.0f32; SUM_LANES];
    for chunk in x.chunks_mut(SUM_LANES) {
        for (v, lane) in chunk.iter_mut().zip(&mut lanes) {
            *v = softmax_exp(*v - max);
            *lane += *v;
        }
    }
    let inv = 1.0 / sum_lanes(lanes);
    x.iter_mut().for_each(|v| *v *= inv);
}

/// The larger of a running maximum `m` and `v`, keeping `m` where `v` is
/// NaN (as `maxps(v, m)` does, so the SIMD kernels' lane maxima agree).
#[inline]
fn max_skipping_nan(m: f32, &v: &f32) -> f32 {
    if v > m {
        v
    } else {
        m
    }
}

/// `exp(d)` for a score `d` below the maximum, or 0 where `d` is below the
/// clamp of [`exp`] (or NaN).
#[inline]
fn softmax_exp(d: f32) -> f32 {
    if d >= EXP_LO {
        exp(d)
    } else {
        0.0
    }
}

/// The lanes' total in [`scalar_softmax`]'s order: halves added together
/// until one lane is left.
#[inline]
fn sum_lanes(mut lanes: [f32; SUM_LANES]) -> f32 {
    let mut half = SUM_LANES / 2;
    while half > 0 {
        for l in 0..half {
            lanes[l] += lanes[l + half];
        }
        half /= 2;
    }
    lanes[0]
}

type UnaryFn = fn(&mut [f32]);
type GatedFn = fn(&mut [f32], &[f32]);
type PanelFn = fn(&mut [f32], &mut [f32]);
type CapFn = fn(&mut [f32], f32);

/// One tier's slice kernels.
#[derive(Clone, Copy)]
struct Kernels {
    gelu: UnaryFn,
    geglu: GatedFn,
    softmax: UnaryFn,
    softmax_panel: PanelFn,
    silu: UnaryFn,
    glu: GatedFn,
    softcap: CapFn,
}

/// The scalar references, which every tier's kernels reproduce.
const SCALAR: Kernels = Kernels {
    gelu: scalar_gelu,
    geglu: scalar_geglu,
    softmax: scalar_softmax,
    softmax_panel: scalar_softmax_panel,
    silu: scalar_silu,
    glu: scalar_glu,
    softcap: scalar_softcap,
};

/// The kernels of the kernel set in use.
fn kernels() -> &'static Kernels {
    static K: OnceLock<Kernels> = OnceLock::new();
    K.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        match crate::simd::best().gemm.vector() {
            crate::simd::GemmTier::Avx512Vnni => return x86::AVX512,
            crate::simd::GemmTier::Avx2 | crate::simd::GemmTier::AvxVnni => return x86::AVX2,
            crate::simd::GemmTier::Portable | crate::simd::GemmTier::Amx => {}
        }
        SCALAR
    })
}

/// `x <- gelu(x)` (tanh form) over a slice: [`scalar_gelu`]'s bits on
/// every tier.
pub fn gelu(x: &mut [f32]) {
    (kernels().gelu)(x)
}

/// `gate <- gelu(gate) * up` over the shorter length (the gated FFN's
/// activation): [`scalar_geglu`]'s bits on every tier.
pub fn geglu(gate: &mut [f32], up: &[f32]) {
    (kernels().geglu)(gate, up)
}

/// `x <- silu(x)` over a slice: [`scalar_silu`]'s bits on every tier.
pub fn silu(x: &mut [f32]) {
    (kernels().silu)(x)
}

/// `x <- x · sigmoid(gate)` over the shorter length (a GLU's gating):
/// [`scalar_glu`]'s bits on every tier.
pub fn glu(x: &mut [f32], gate: &[f32]) {
    (kernels().glu)(x, gate)
}

/// `x <- cap · tanh(x / cap)` (Gemma's logit soft-cap):
/// [`scalar_softcap`]'s bits on every tier.
pub fn softcap(x: &mut [f32], cap: f32) {
    (kernels().softcap)(x, cap)
}

/// `x <- softmax(x)`: [`scalar_softmax`]'s bits on every tier. Attention
/// normalizes every query's scores with it (a tenth of a long prompt's
/// prefill went to the C library's `expf` before). A row of only `-inf`
/// (nothing to attend to, which attention never asks) gives NaN.
pub fn softmax(x: &mut [f32]) {
    (kernels().softmax)(x)
}

/// Queries a panel of [`softmax_columns`] holds side by side (the packed
/// GEMM's panel width).
pub const COLUMN_PANEL: usize = crate::vector::PANEL;

/// The reference of [`softmax_columns`] for one panel of `rows ×`
/// [`COLUMN_PANEL`] scores: each column's scores become
/// `exp(s − column max)` (0 below the clamp of [`exp`]), and the column's
/// sum of them, added in row order, goes to `sum`.
pub fn scalar_softmax_panel(panel: &mut [f32], sum: &mut [f32]) {
    let mut max = [f32::NEG_INFINITY; COLUMN_PANEL];
    for row in panel.chunks_exact(COLUMN_PANEL) {
        max.iter_mut()
            .zip(row)
            .for_each(|(m, v)| *m = max_skipping_nan(*m, v));
    }
    sum[..COLUMN_PANEL].fill(0.0);
    for row in panel.chunks_exact_mut(COLUMN_PANEL) {
        for ((v, &m), s) in row.iter_mut().zip(&max).zip(sum.iter_mut()) {
            *v = softmax_exp(*v - m);
            *s += *v;
        }
    }
}

/// Softmax down the columns of packed scores (panels of `rows` rows ×
/// [`COLUMN_PANEL`] queries, one query a column), left unnormalized: the
/// exponentials in place and each column's sum in `sums` (a
/// [`COLUMN_PANEL`] per panel), so attention can divide its output once
/// per query. [`scalar_softmax_panel`]'s bits on every tier, and the same
/// `exp` as [`softmax`].
pub fn softmax_columns(panels: &mut [f32], rows: usize, sums: &mut [f32]) {
    let kernel = kernels().softmax_panel;
    for (panel, sum) in panels
        .chunks_exact_mut(rows * COLUMN_PANEL)
        .zip(sums.chunks_exact_mut(COLUMN_PANEL))
    {
        kernel(panel, sum);
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::*;
    use std::arch::x86_64::*;

    /// [`super::exp`] on eight lanes, step for step.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn exp8(x: __m256) -> __m256 {
        let x = _mm256_min_ps(
            _mm256_max_ps(x, _mm256_set1_ps(EXP_LO)),
            _mm256_set1_ps(EXP_HI),
        );
        let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm256_mul_ps(x, _mm256_set1_ps(LOG2E)),
        );
        let r = _mm256_fmadd_ps(n, _mm256_set1_ps(-LN2_HI), x);
        let r = _mm256_fmadd_ps(n, _mm256_set1_ps(-LN2_LO), r);
        let mut p = _mm256_set1_ps(POLY[0]);
        for &c in &POLY[1..] {
            p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
        }
        let y = _mm256_add_ps(
            _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r),
            _mm256_set1_ps(1.0),
        );
        let e = _mm256_slli_epi32::<23>(_mm256_add_epi32(
            _mm256_cvtps_epi32(n),
            _mm256_set1_epi32(127),
        ));
        _mm256_mul_ps(y, _mm256_castsi256_ps(e))
    }

    /// [`super::gelu_tanh`] on eight lanes, step for step.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn gelu8(x: __m256) -> __m256 {
        let cube = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(CUBIC), x), x), x);
        let z = _mm256_mul_ps(_mm256_set1_ps(-TWO_SQRT_2_OVER_PI), _mm256_add_ps(x, cube));
        _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0), exp8(z)))
    }

    /// [`super::exp`] on sixteen lanes, step for step.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn exp16(x: __m512) -> __m512 {
        let x = _mm512_min_ps(
            _mm512_max_ps(x, _mm512_set1_ps(EXP_LO)),
            _mm512_set1_ps(EXP_HI),
        );
        let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm512_mul_ps(x, _mm512_set1_ps(LOG2E)),
        );
        let r = _mm512_fmadd_ps(n, _mm512_set1_ps(-LN2_HI), x);
        let r = _mm512_fmadd_ps(n, _mm512_set1_ps(-LN2_LO), r);
        let mut p = _mm512_set1_ps(POLY[0]);
        for &c in &POLY[1..] {
            p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
        }
        let y = _mm512_add_ps(
            _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r),
            _mm512_set1_ps(1.0),
        );
        let e = _mm512_slli_epi32::<23>(_mm512_add_epi32(
            _mm512_cvtps_epi32(n),
            _mm512_set1_epi32(127),
        ));
        _mm512_mul_ps(y, _mm512_castsi512_ps(e))
    }

    /// [`super::gelu_tanh`] on sixteen lanes, step for step.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn gelu16(x: __m512) -> __m512 {
        let cube = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(CUBIC), x), x), x);
        let z = _mm512_mul_ps(_mm512_set1_ps(-TWO_SQRT_2_OVER_PI), _mm512_add_ps(x, cube));
        _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0), exp16(z)))
    }

    /// [`super::silu_of`] on eight lanes, step for step.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn silu8(x: __m256) -> __m256 {
        let neg = _mm256_xor_ps(x, _mm256_set1_ps(-0.0));
        _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0), exp8(neg)))
    }

    /// [`super::sigmoid`] on eight lanes, step for step.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn sigmoid8(x: __m256) -> __m256 {
        let neg = _mm256_xor_ps(x, _mm256_set1_ps(-0.0));
        let one = _mm256_set1_ps(1.0);
        _mm256_div_ps(one, _mm256_add_ps(one, exp8(neg)))
    }

    /// [`super::silu_of`] on sixteen lanes, step for step.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn silu16(x: __m512) -> __m512 {
        let neg = _mm512_castsi512_ps(_mm512_xor_si512(
            _mm512_castps_si512(x),
            _mm512_set1_epi32(i32::MIN),
        ));
        _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0), exp16(neg)))
    }

    /// [`super::sigmoid`] on sixteen lanes, step for step.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn sigmoid16(x: __m512) -> __m512 {
        let neg = _mm512_castsi512_ps(_mm512_xor_si512(
            _mm512_castps_si512(x),
            _mm512_set1_epi32(i32::MIN),
        ));
        let one = _mm512_set1_ps(1.0);
        _mm512_div_ps(one, _mm512_add_ps(one, exp16(neg)))
    }

    /// The AVX2 tier's kernels.
    pub(super) const AVX2: Kernels = Kernels {
        gelu: gelu_avx2,
        geglu: geglu_avx2,
        softmax: softmax_avx2,
        softmax_panel: softmax_panel_avx2,
        silu: silu_avx2,
        glu: glu_avx2,
        softcap: super::softcap::x86::softcap_avx2,
    };

    /// The AVX-512 tier's kernels.
    pub(super) const AVX512: Kernels = Kernels {
        gelu: gelu_avx512,
        geglu: geglu_avx512,
        softmax: softmax_avx512,
        softmax_panel: softmax_panel_avx512,
        silu: silu_avx512,
        glu: glu_avx512,
        softcap: super::softcap::x86::softcap_avx512,
    };

    fn silu_avx2(x: &mut [f32]) {
        // SAFETY: installed only after avx2 and fma were detected.
        unsafe { silu_avx2_impl(x) }
    }

    fn glu_avx2(x: &mut [f32], gate: &[f32]) {
        // SAFETY: installed only after avx2 and fma were detected.
        unsafe { glu_avx2_impl(x, gate) }
    }

    fn silu_avx512(x: &mut [f32]) {
        // SAFETY: installed only for the AVX-512 tier (avx512f, avx2, fma).
        unsafe { silu_avx512_impl(x) }
    }

    fn glu_avx512(x: &mut [f32], gate: &[f32]) {
        // SAFETY: installed only for the AVX-512 tier (avx512f, avx2, fma).
        unsafe { glu_avx512_impl(x, gate) }
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn silu_avx2_impl(x: &mut [f32]) {
        let mut chunks = x.chunks_exact_mut(8);
        for c in &mut chunks {
            // SAFETY: `c` holds 8 floats.
            unsafe { _mm256_storeu_ps(c.as_mut_ptr(), silu8(_mm256_loadu_ps(c.as_ptr()))) };
        }
        scalar_silu(chunks.into_remainder());
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn glu_avx2_impl(x: &mut [f32], gate: &[f32]) {
        let n = x.len().min(gate.len());
        let (x, gate) = (&mut x[..n], &gate[..n]);
        let mut xs = x.chunks_exact_mut(8);
        let mut gs = gate.chunks_exact(8);
        for (v, g) in (&mut xs).zip(&mut gs) {
            // SAFETY: `v` and `g` hold 8 floats each.
            unsafe {
                let s = sigmoid8(_mm256_loadu_ps(g.as_ptr()));
                _mm256_storeu_ps(
                    v.as_mut_ptr(),
                    _mm256_mul_ps(_mm256_loadu_ps(v.as_ptr()), s),
                );
            }
        }
        scalar_glu(xs.into_remainder(), gs.remainder());
    }

    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn silu_avx512_impl(x: &mut [f32]) {
        let mut chunks = x.chunks_exact_mut(16);
        for c in &mut chunks {
            // SAFETY: `c` holds 16 floats.
            unsafe { _mm512_storeu_ps(c.as_mut_ptr(), silu16(_mm512_loadu_ps(c.as_ptr()))) };
        }
        scalar_silu(chunks.into_remainder());
    }

    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn glu_avx512_impl(x: &mut [f32], gate: &[f32]) {
        let n = x.len().min(gate.len());
        let (x, gate) = (&mut x[..n], &gate[..n]);
        let mut xs = x.chunks_exact_mut(16);
        let mut gs = gate.chunks_exact(16);
        for (v, g) in (&mut xs).zip(&mut gs) {
            // SAFETY: `v` and `g` hold 16 floats each.
            unsafe {
                let s = sigmoid16(_mm512_loadu_ps(g.as_ptr()));
                _mm512_storeu_ps(
                    v.as_mut_ptr(),
                    _mm512_mul_ps(_mm512_loadu_ps(v.as_ptr()), s),
                );
            }
        }
        scalar_glu(xs.into_remainder(), gs.remainder());
    }

    fn gelu_avx2(x: &mut [f32]) {
        // SAFETY: installed only after avx2 and fma were detected.
        unsafe { gelu_avx2_impl(x) }
    }

    fn geglu_avx2(gate: &mut [f32], up: &[f32]) {
        // SAFETY: installed only after avx2 and fma were detected.
        unsafe { geglu_avx2_impl(gate, up) }
    }

    fn gelu_avx512(x: &mut [f32]) {
        // SAFETY: installed only for the AVX-512 tier (avx512f, avx2, fma).
        unsafe { gelu_avx512_impl(x) }
    }

    fn geglu_avx512(gate: &mut [f32], up: &[f32]) {
        // SAFETY: installed only for the AVX-512 tier (avx512f, avx2, fma).
        unsafe { geglu_avx512_impl(gate, up) }
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn gelu_avx2_impl(x: &mut [f32]) {
        let mut chunks = x.chunks_exact_mut(8);
        for c in &mut chunks {
            // SAFETY: `c` holds 8 floats.
            unsafe { _mm256_storeu_ps(c.as_mut_ptr(), gelu8(_mm256_loadu_ps(c.as_ptr()))) };
        }
        scalar_gelu(chunks.into_remainder());
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn geglu_avx2_impl(gate: &mut [f32], up: &[f32]) {
        let n = gate.len().min(up.len());
        let (gate, up) = (&mut gate[..n], &up[..n]);
        let mut gs = gate.chunks_exact_mut(8);
        let mut us = up.chunks_exact(8);
        for (g, u) in (&mut gs).zip(&mut us) {
            // SAFETY: `g` and `u` hold 8 floats each.
            unsafe {
                let v = _mm256_mul_ps(
                    gelu8(_mm256_loadu_ps(g.as_ptr())),
                    _mm256_loadu_ps(u.as_ptr()),
                );
                _mm256_storeu_ps(g.as_mut_ptr(), v);
            }
        }
        scalar_geglu(gs.into_remainder(), us.remainder());
    }

    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn gelu_avx512_impl(x: &mut [f32]) {
        let mut chunks = x.chunks_exact_mut(16);
        for c in &mut chunks {
            // SAFETY: `c` holds 16 floats.
            unsafe { _mm512_storeu_ps(c.as_mut_ptr(), gelu16(_mm512_loadu_ps(c.as_ptr()))) };
        }
        scalar_gelu(chunks.into_remainder());
    }

    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn geglu_avx512_impl(gate: &mut [f32], up: &[f32]) {
        let n = gate.len().min(up.len());
        let (gate, up) = (&mut gate[..n], &up[..n]);
        let mut gs = gate.chunks_exact_mut(16);
        let mut us = up.chunks_exact(16);
        for (g, u) in (&mut gs).zip(&mut us) {
            // SAFETY: `g` and `u` hold 16 floats each.
            unsafe {
                let v = _mm512_mul_ps(
                    gelu16(_mm512_loadu_ps(g.as_ptr())),
                    _mm512_loadu_ps(u.as_ptr()),
                );
                _mm512_storeu_ps(g.as_mut_ptr(), v);
            }
        }
        scalar_geglu(gs.into_remainder(), us.remainder());
    }

    fn softmax_avx2(x: &mut [f32]) {
        // SAFETY: installed only after avx2 and fma were detected.
        unsafe { softmax_avx2_impl(x) }
    }

    fn softmax_avx512(x: &mut [f32]) {
        // SAFETY: installed only for the AVX-512 tier (avx512f, avx2, fma).
        unsafe { softmax_avx512_impl(x) }
    }

    /// [`super::softmax_exp`] on eight lanes.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn softmax_exp8(d: __m256) -> __m256 {
        let live = _mm256_cmp_ps::<_CMP_GE_OQ>(d, _mm256_set1_ps(EXP_LO));
        _mm256_and_ps(exp8(d), live)
    }

    /// [`super::scalar_softmax`] with two 8-lane vectors standing for its
    /// 16 lanes (the first eight of every 16 elements, then the second).
    #[target_feature(enable = "avx2,fma")]
    unsafe fn softmax_avx2_impl(x: &mut [f32]) {
        // The maximum: `max(v, m)` keeps `m` where `v` is NaN, as the
        // reference's `v > m` does; the order of a maximum is free.
        let mut mv = _mm256_set1_ps(f32::NEG_INFINITY);
        let mut chunks = x.chunks_exact(8);
        for c in &mut chunks {
            // SAFETY: `c` holds 8 floats.
            mv = _mm256_max_ps(unsafe { _mm256_loadu_ps(c.as_ptr()) }, mv);
        }
        let mut lanes = [0.0f32; 8];
        // SAFETY: `lanes` holds 8 floats.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), mv) };
        let max = chunks
            .remainder()
            .iter()
            .chain(&lanes)
            .fold(f32::NEG_INFINITY, max_skipping_nan);
        let (maxv, mut lo, mut hi) = (
            _mm256_set1_ps(max),
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
        );
        let mut chunks = x.chunks_exact_mut(16);
        for c in &mut chunks {
            // SAFETY: `c` holds 16 floats.
            unsafe {
                let p = c.as_mut_ptr();
                let e0 = softmax_exp8(_mm256_sub_ps(_mm256_loadu_ps(p), maxv));
                let e1 = softmax_exp8(_mm256_sub_ps(_mm256_loadu_ps(p.add(8)), maxv));
                _mm256_storeu_ps(p, e0);
                _mm256_storeu_ps(p.add(8), e1);
                lo = _mm256_add_ps(lo, e0);
                hi = _mm256_add_ps(hi, e1);
            }
        }
        let mut sums = [0.0f32; SUM_LANES];
        // SAFETY: `sums` holds 16 floats.
        unsafe {
            _mm256_storeu_ps(sums.as_mut_ptr(), lo);
            _mm256_storeu_ps(sums.as_mut_ptr().add(8), hi);
        }
        for (v, lane) in chunks.into_remainder().iter_mut().zip(&mut sums) {
            *v = softmax_exp(*v - max);
            *lane += *v;
        }
        scale(x, 1.0 / sum_lanes(sums));
    }

    /// [`super::softmax_exp`] on sixteen lanes.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn softmax_exp16(d: __m512) -> __m512 {
        let live = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(d, _mm512_set1_ps(EXP_LO));
        _mm512_maskz_mov_ps(live, exp16(d))
    }

    /// [`super::scalar_softmax`] with its 16 lanes in one vector.
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn softmax_avx512_impl(x: &mut [f32]) {
        let mut mv = _mm512_set1_ps(f32::NEG_INFINITY);
        let mut chunks = x.chunks_exact(16);
        for c in &mut chunks {
            // SAFETY: `c` holds 16 floats.
            mv = _mm512_max_ps(unsafe { _mm512_loadu_ps(c.as_ptr()) }, mv);
        }
        let mut lanes = [0.0f32; 16];
        // SAFETY: `lanes` holds 16 floats.
        unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), mv) };
        let max = chunks
            .remainder()
            .iter()
            .chain(&lanes)
            .fold(f32::NEG_INFINITY, max_skipping_nan);
        let (maxv, mut acc) = (_mm512_set1_ps(max), _mm512_setzero_ps());
        let mut chunks = x.chunks_exact_mut(16);
        for c in &mut chunks {
            // SAFETY: `c` holds 16 floats.
            unsafe {
                let e = softmax_exp16(_mm512_sub_ps(_mm512_loadu_ps(c.as_ptr()), maxv));
                _mm512_storeu_ps(c.as_mut_ptr(), e);
                acc = _mm512_add_ps(acc, e);
            }
        }
        let mut sums = [0.0f32; SUM_LANES];
        // SAFETY: `sums` holds 16 floats.
        unsafe { _mm512_storeu_ps(sums.as_mut_ptr(), acc) };
        for (v, lane) in chunks.into_remainder().iter_mut().zip(&mut sums) {
            *v = softmax_exp(*v - max);
            *lane += *v;
        }
        scale(x, 1.0 / sum_lanes(sums));
    }

    fn softmax_panel_avx2(panel: &mut [f32], sum: &mut [f32]) {
        // SAFETY: installed only after avx2 and fma were detected.
        unsafe { softmax_panel_avx2_impl(panel, sum) }
    }

    fn softmax_panel_avx512(panel: &mut [f32], sum: &mut [f32]) {
        // SAFETY: installed only for the AVX-512 tier (avx512f, avx2, fma).
        unsafe { softmax_panel_avx512_impl(panel, sum) }
    }

    /// [`super::scalar_softmax_panel`] with a row (16 queries) in two
    /// 8-lane vectors.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn softmax_panel_avx2_impl(panel: &mut [f32], sum: &mut [f32]) {
        assert!(sum.len() >= COLUMN_PANEL);
        let mut max = [_mm256_set1_ps(f32::NEG_INFINITY); 2];
        for row in panel.chunks_exact(COLUMN_PANEL) {
            for (h, m) in max.iter_mut().enumerate() {
                // SAFETY: 8 of this row's 16 floats.
                *m = _mm256_max_ps(unsafe { _mm256_loadu_ps(row.as_ptr().add(8 * h)) }, *m);
            }
        }
        let mut acc = [_mm256_setzero_ps(); 2];
        for row in panel.chunks_exact_mut(COLUMN_PANEL) {
            for h in 0..2 {
                // SAFETY: 8 of this row's 16 floats.
                unsafe {
                    let at = row.as_mut_ptr().add(8 * h);
                    let e = softmax_exp8(_mm256_sub_ps(_mm256_loadu_ps(at), max[h]));
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

    /// [`super::scalar_softmax_panel`] with a row (16 queries) a vector.
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn softmax_panel_avx512_impl(panel: &mut [f32], sum: &mut [f32]) {
        assert!(sum.len() >= COLUMN_PANEL);
        let mut max = _mm512_set1_ps(f32::NEG_INFINITY);
        for row in panel.chunks_exact(COLUMN_PANEL) {
            // SAFETY: this row's 16 floats.
            max = _mm512_max_ps(unsafe { _mm512_loadu_ps(row.as_ptr()) }, max);
        }
        let mut acc = _mm512_setzero_ps();
        for row in panel.chunks_exact_mut(COLUMN_PANEL) {
            // SAFETY: this row's 16 floats.
            unsafe {
                let e = softmax_exp16(_mm512_sub_ps(_mm512_loadu_ps(row.as_ptr()), max));
                _mm512_storeu_ps(row.as_mut_ptr(), e);
                acc = _mm512_add_ps(acc, e);
            }
        }
        // SAFETY: `sum` holds 16 floats (asserted).
        unsafe { _mm512_storeu_ps(sum.as_mut_ptr(), acc) };
    }

    /// `x <- x * inv`, element by element (each product rounded once, as
    /// in the reference, whatever the compiler vectorizes it into).
    #[inline(always)]
    fn scale(x: &mut [f32], inv: f32) {
        x.iter_mut().for_each(|v| *v *= inv);
    }

    /// Every kernel set this CPU can run, for the property tests.
    #[cfg(test)]
    pub(super) fn available() -> Vec<(&'static str, Kernels)> {
        let mut v = Vec::new();
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            v.push(("avx2", AVX2));
        }
        if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx2") {
            v.push(("avx512", AVX512));
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    pub(super) fn simd() -> Vec<(&'static str, Kernels)> {
        #[cfg(target_arch = "x86_64")]
        return x86::available();
        #[cfg(not(target_arch = "x86_64"))]
        Vec::new()
    }

    /// `exp` within 2 ulp of the f64 one wherever the result is a normal
    /// float, and clamped beyond.
    #[test]
    fn exp_is_accurate() {
        let mut worst = 0.0f64;
        let mut x = -87.0f32;
        while x <= 88.0 {
            let want = f64::from(x).exp();
            let got = f64::from(exp(x));
            worst = worst.max((got - want).abs() / want);
            x += 0.001_37;
        }
        assert!(worst < 2.5e-7, "worst relative error {worst:e}");
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(-1000.0), exp(-87.0));
        assert_eq!(exp(1000.0), exp(88.0));
        assert!(exp(f32::NAN).is_nan() || exp(f32::NAN) == exp(-87.0));
    }

    /// GELU against the f64 tanh formula.
    #[test]
    fn gelu_is_accurate() {
        for i in -2000..=2000 {
            let x = i as f32 * 0.01;
            let xd = f64::from(x);
            let want = 0.5
                * xd
                * (1.0 + (0.797_884_560_802_865_4 * (xd + 0.044_715 * xd * xd * xd)).tanh());
            let got = f64::from(gelu_tanh(x));
            assert!(
                (got - want).abs() <= 1e-6 * want.abs().max(1e-3),
                "{x}: {got} vs {want}"
            );
        }
        assert_eq!(gelu_tanh(0.0), 0.0);
        // Far out, exp is clamped at e^88 instead of overflowing: a tiny
        // negative number where the exact limit is -0.
        assert!(gelu_tanh(-50.0) <= 0.0 && gelu_tanh(-50.0) > -1e-30);
        assert_eq!(gelu_tanh(50.0), 50.0);
    }

    /// SiLU and the sigmoid against f64.
    #[test]
    fn silu_and_sigmoid_are_accurate() {
        for i in -3000..=3000 {
            let x = i as f32 * 0.01;
            let s = 1.0 / (1.0 + (-f64::from(x)).exp());
            assert!((f64::from(sigmoid(x)) - s).abs() <= 4e-7 * s, "sigmoid {x}");
            let want = f64::from(x) * s;
            let got = f64::from(silu_of(x));
            assert!(
                (got - want).abs() <= 4e-7 * want.abs().max(1e-30),
                "silu {x}: {got} vs {want}"
            );
        }
        assert_eq!(silu_of(0.0), 0.0);
        assert_eq!(sigmoid(0.0), 0.5);
    }

    proptest! {
        /// Every SIMD kernel gives the scalar reference's bits, at every
        /// length (tails included), over the range activations reach and
        /// beyond the clamp.
        #[test]
        fn simd_matches_scalar(
            x in prop::collection::vec(prop_oneof![-12.0f32..12.0, -200.0f32..200.0], 0..100),
            u in prop::collection::vec(-4.0f32..4.0, 0..100),
        ) {
            let mut want_gelu = x.clone();
            scalar_gelu(&mut want_gelu);
            let mut want_geglu = x.clone();
            scalar_geglu(&mut want_geglu, &u);
            let mut want_silu = x.clone();
            scalar_silu(&mut want_silu);
            let mut want_glu = u.clone();
            scalar_glu(&mut want_glu, &x);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            for (name, k) in simd() {
                let mut got = x.clone();
                (k.gelu)(&mut got);
                prop_assert_eq!(bits(&got), bits(&want_gelu), "{} gelu", name);
                let mut got = x.clone();
                (k.geglu)(&mut got, &u);
                prop_assert_eq!(bits(&got), bits(&want_geglu), "{} geglu", name);
                let mut got = x.clone();
                (k.silu)(&mut got);
                prop_assert_eq!(bits(&got), bits(&want_silu), "{} silu", name);
                let mut got = u.clone();
                (k.glu)(&mut got, &x);
                prop_assert_eq!(bits(&got), bits(&want_glu), "{} glu", name);
            }
            let mut got = x.clone();
            geglu(&mut got, &u);
            prop_assert_eq!(got, want_geglu);
            let mut got = x.clone();
            silu(&mut got);
            prop_assert_eq!(bits(&got), bits(&want_silu));
            let mut got = u.clone();
            glu(&mut got, &x);
            prop_assert_eq!(bits(&got), bits(&want_glu));
        }

        /// Every soft-cap kernel gives the reference's bits at every length:
        /// logits as a head makes them, ones past saturation, tiny ones
        /// (returned as they are), infinities and NaN.
        #[test]
        fn softcap_simd_matches_scalar(
            x in prop::collection::vec(prop_oneof![
                8 => -60.0f32..60.0,
                2 => -1e-3f32..1e-3,
                1 => -1e6f32..1e6,
                1 => prop::sample::select(vec![f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 0.0, -0.0]),
            ], 0..80),
            cap in prop_oneof![Just(30.0f32), Just(50.0), 0.5f32..100.0],
        ) {
            let mut want = x.clone();
            scalar_softcap(&mut want, cap);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            for (name, k) in simd() {
                let mut got = x.clone();
                (k.softcap)(&mut got, cap);
                prop_assert_eq!(bits(&got), bits(&want), "{} softcap", name);
            }
            let mut got = x.clone();
            softcap(&mut got, cap);
            prop_assert_eq!(bits(&got), bits(&want));
        }

        /// Every softmax kernel gives the reference's bits at every length
        /// (the 16-lane sum's tails included), with scores spread far enough
        /// that some fall below the clamp and with `-inf` (masked) ones.
        #[test]
        fn softmax_simd_matches_scalar(
            x in prop::collection::vec(prop_oneof![
                8 => -30.0f32..30.0,
                1 => -300.0f32..10.0,
                1 => Just(f32::NEG_INFINITY),
            ], 1..200),
        ) {
            let mut want = x.clone();
            scalar_softmax(&mut want);
            for (name, k) in simd() {
                let mut got = x.clone();
                (k.softmax)(&mut got);
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    prop_assert_eq!(g.to_bits(), w.to_bits(), "{} softmax[{}]: {} vs {}", name, i, g, w);
                }
            }
            // Compared by bits: a row of only masked scores has no
            // distribution, and gives NaN on every path alike.
            let mut got = x.clone();
            softmax(&mut got);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            prop_assert_eq!(bits(&got), bits(&want));
        }

        /// Every column-softmax kernel gives the reference's bits, the
        /// exponentials and the sums, with scores below the clamp and
        /// masked ones among them.
        #[test]
        fn softmax_panels_simd_match_scalar(
            rows in 1usize..40,
            seed in prop::collection::vec(prop_oneof![
                8 => -30.0f32..30.0,
                1 => -300.0f32..10.0,
                1 => Just(f32::NEG_INFINITY),
            ], 40 * COLUMN_PANEL),
        ) {
            let base = &seed[..rows * COLUMN_PANEL];
            let (mut want, mut want_sum) = (base.to_vec(), [0.0f32; COLUMN_PANEL]);
            scalar_softmax_panel(&mut want, &mut want_sum);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            for (name, k) in simd() {
                let (mut got, mut sum) = (base.to_vec(), [0.0f32; COLUMN_PANEL]);
                (k.softmax_panel)(&mut got, &mut sum);
                prop_assert_eq!(bits(&got), bits(&want), "{} exponentials", name);
                prop_assert_eq!(bits(&sum), bits(&want_sum), "{} sums", name);
            }
            let (mut got, mut sum) = (base.to_vec(), [0.0f32; COLUMN_PANEL]);
            softmax_columns(&mut got, rows, &mut sum);
            prop_assert_eq!(bits(&got), bits(&want));
            prop_assert_eq!(bits(&sum), bits(&want_sum));
        }
    }

    /// Down each column, the exponentials over their sum are the softmax
    /// of that column's scores.
    #[test]
    fn column_softmax_is_the_softmax() {
        let rows = 100;
        let mut panel: Vec<f32> = (0..rows * COLUMN_PANEL)
            .map(|i| ((i as f32 * 0.731).sin() * 60.0) / (7.0 + (i % COLUMN_PANEL) as f32))
            .collect();
        let base = panel.clone();
        let mut sum = [0.0f32; COLUMN_PANEL];
        softmax_columns(&mut panel, rows, &mut sum);
        for lane in 0..COLUMN_PANEL {
            let mut want: Vec<f32> = (0..rows).map(|p| base[p * COLUMN_PANEL + lane]).collect();
            scalar_softmax(&mut want);
            for (p, w) in want.iter().enumerate() {
                let got = panel[p * COLUMN_PANEL + lane] / sum[lane];
                assert!((got - w).abs() <= 1e-6 * w + 1e-12, "{got} vs {w}");
            }
        }
    }

    /// The softmax against the f64 one: a distribution (sums to one within
    /// rounding), each value within a few ulp-scaled bounds, masked scores
    /// exactly 0, and the lanes summed in the documented order (a length
    /// whose tail lands in the first lanes).
    #[test]
    fn softmax_is_the_softmax() {
        for n in [1usize, 7, 16, 17, 40, 333] {
            let x: Vec<f32> = (0..n)
                .map(|i| ((i * 37 % 23) as f32 - 11.0) * 0.7)
                .collect();
            let mut got = x.clone();
            scalar_softmax(&mut got);
            let max = x
                .iter()
                .fold(f64::NEG_INFINITY, |m, &v| m.max(f64::from(v)));
            let total: f64 = x.iter().map(|&v| (f64::from(v) - max).exp()).sum();
            for (&g, &v) in got.iter().zip(&x) {
                let want = (f64::from(v) - max).exp() / total;
                assert!(
                    (f64::from(g) - want).abs() <= 2e-6 * want + 1e-12,
                    "{n}: {g} vs {want}"
                );
            }
            let sum: f32 = got.iter().sum();
            assert!((sum - 1.0).abs() < 1e-5, "{n}: sums to {sum}");
        }
        let mut x = vec![1.0, 2.0, 3.0, f32::NEG_INFINITY, -1e9];
        scalar_softmax(&mut x);
        assert!(x[3] == 0.0 && x[4] == 0.0 && x[2] > x[1] && x[1] > x[0]);
        // One large score and 16 equal small ones: lane 0 holds the large
        // one and the 17th, so the order of the lanes shows in the bits.
        let mut x = vec![0.0f32; 17];
        x[0] = 5.0;
        let mut got = x.clone();
        scalar_softmax(&mut got);
        let e: Vec<f32> = x.iter().map(|&v| exp(v - 5.0)).collect();
        let mut lanes = [0.0f32; 16];
        for (i, v) in e.iter().enumerate() {
            lanes[i % 16] += v;
        }
        let inv = 1.0 / sum_lanes(lanes);
        assert_eq!(got[0].to_bits(), (e[0] * inv).to_bits());
        assert_eq!(got[16].to_bits(), (e[16] * inv).to_bits());
    }
}
