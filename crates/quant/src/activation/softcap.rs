//! `tanh` and the logit soft-cap `cap · tanh(x / cap)`, evaluated in f64
//! from IEEE basic operations so every CPU and C library gives the same
//! bits. The C library's `tanhf` differs in the last bit between x86-64 and
//! AArch64 glibc, which showed in Gemma 2 and 4 logits.
//!
//! A final soft-cap runs once per vocabulary entry per token (262,144 on
//! Gemma), so the x86 kernels take eight values a step, each lane doing the
//! scalar reference's operations in its order.

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

/// ln 2 with its low 21 bits zero, so `k * LN2_HI` is exact.
const LN2_HI: f64 = 6.931_471_803_691_238e-1;
/// ln 2 − [`LN2_HI`].
const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;
/// Below this, `tanh(x) = x` to the last bit (the cubic term is under half
/// an ulp).
const TINY: f32 = 1.0 / 4096.0;
/// From here on, `tanh(x) = ±1` to the last bit (`1 - tanh(10)` is 4e-9).
const SATURATED: f32 = 10.0;

/// `e^z` for `0 <= z <= 20` from basic operations: `z = k ln 2 + r` with
/// `|r| <= ln 2 / 2` (ln 2 split so `k ln 2` is exact), a degree-12 Taylor
/// polynomial for `e^r` (error below 1e-15 relative) and `2^k` from the
/// exponent bits. Plain multiplies and adds, not `mul_add`: without the FMA
/// target feature `mul_add` is a libm call per step, and f64 has precision
/// to spare for an f32 result.
fn exp_f64(z: f64) -> f64 {
    let k = (z * std::f64::consts::LOG2_E).round_ties_even();
    let r = (z - k * LN2_HI) - k * LN2_LO;
    let p = INV_FACTORIALS[1..]
        .iter()
        .fold(INV_FACTORIALS[0], |p, &c| p * r + c);
    // k is at most 29 here, far inside f64's exponent range.
    p * f64::from_bits(((1023 + k as i64) as u64) << 52)
}

/// `tanh(x)` from IEEE basic operations only: evaluated in f64, where
/// `1 - 2 / (e^{2|x|} + 1)` loses at most a few f64 bits to cancellation
/// (|x| ≥ 2^-12), and rounded once to f32, so within an ulp of the true
/// value and the same bits everywhere.
pub fn tanh(x: f32) -> f32 {
    let a = x.abs();
    if a.is_nan() {
        return x;
    }
    if a < TINY {
        return x;
    }
    if a >= SATURATED {
        return 1.0f32.copysign(x);
    }
    let e = exp_f64(2.0 * a as f64);
    let t = 1.0 - 2.0 / (e + 1.0);
    (t as f32).copysign(x)
}

/// `x <- cap · tanh(x / cap)` element by element: the reference every tier's
/// kernel reproduces bit for bit.
pub fn scalar_softcap(x: &mut [f32], cap: f32) {
    for v in x {
        *v = cap * tanh(*v / cap);
    }
}

#[cfg(target_arch = "x86_64")]
pub(super) mod x86 {
    use super::*;
    use std::arch::x86_64::*;

    /// [`super::scalar_softcap`] eight values a step, in four-lane f64
    /// halves.
    pub(in crate::activation) fn softcap_avx2(x: &mut [f32], cap: f32) {
        // SAFETY: installed only after avx2 and fma were detected.
        unsafe { softcap_avx2_impl(x, cap) }
    }

    /// [`super::scalar_softcap`] eight values a step, in one eight-lane f64
    /// register.
    pub(in crate::activation) fn softcap_avx512(x: &mut [f32], cap: f32) {
        // SAFETY: installed only for the AVX-512 tier (avx512f, avx2, fma).
        unsafe { softcap_avx512_impl(x, cap) }
    }

    /// `1 - 2 / (e^z + 1)` on four lanes, [`super::exp_f64`]'s steps in
    /// its order, rounded to f32.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn tanh_of_doubled4(z: __m256d) -> __m128 {
        let xk = _mm256_mul_pd(z, _mm256_set1_pd(std::f64::consts::LOG2_E));
        let k = _mm256_round_pd::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(xk);
        let r = _mm256_sub_pd(
            _mm256_sub_pd(z, _mm256_mul_pd(k, _mm256_set1_pd(LN2_HI))),
            _mm256_mul_pd(k, _mm256_set1_pd(LN2_LO)),
        );
        let mut p = _mm256_set1_pd(INV_FACTORIALS[0]);
        for &c in &INV_FACTORIALS[1..] {
            p = _mm256_add_pd(_mm256_mul_pd(p, r), _mm256_set1_pd(c));
        }
        // 2^k from the exponent bits (k is a small whole number here).
        let k64 = _mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(k));
        let pow = _mm256_slli_epi64::<52>(_mm256_add_epi64(k64, _mm256_set1_epi64x(1023)));
        let e = _mm256_mul_pd(p, _mm256_castsi256_pd(pow));
        let one = _mm256_set1_pd(1.0);
        let t = _mm256_sub_pd(
            one,
            _mm256_div_pd(_mm256_set1_pd(2.0), _mm256_add_pd(e, one)),
        );
        _mm256_cvtpd_ps(t)
    }

    /// [`super::tanh`]'s edge cases over the computed `t` (non-negative):
    /// the sign of `y`, `y` itself where tiny or NaN, ±1 where saturated.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn finish8(y: __m256, a: __m256, t: __m256) -> __m256 {
        let sign = _mm256_and_ps(y, _mm256_set1_ps(-0.0));
        let t = _mm256_or_ps(t, sign);
        let ones = _mm256_or_ps(_mm256_set1_ps(1.0), sign);
        let big = _mm256_cmp_ps::<_CMP_GE_OQ>(a, _mm256_set1_ps(SATURATED));
        // Not `a >= TINY`: true below it and for NaN.
        let keep = _mm256_cmp_ps::<_CMP_NGE_UQ>(a, _mm256_set1_ps(TINY));
        _mm256_blendv_ps(_mm256_blendv_ps(t, ones, big), y, keep)
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn softcap_avx2_impl(x: &mut [f32], cap: f32) {
        let capv = _mm256_set1_ps(cap);
        let mut chunks = x.chunks_exact_mut(8);
        for c in &mut chunks {
            // SAFETY: `c` holds 8 floats.
            let v = unsafe { _mm256_loadu_ps(c.as_ptr()) };
            let y = _mm256_div_ps(v, capv);
            let a = _mm256_andnot_ps(_mm256_set1_ps(-0.0), y);
            let lo = _mm256_cvtps_pd(_mm256_castps256_ps128(a));
            let hi = _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(a));
            let t = _mm256_set_m128(
                tanh_of_doubled4(_mm256_add_pd(hi, hi)),
                tanh_of_doubled4(_mm256_add_pd(lo, lo)),
            );
            let r = _mm256_mul_ps(capv, finish8(y, a, t));
            // SAFETY: as the load.
            unsafe { _mm256_storeu_ps(c.as_mut_ptr(), r) };
        }
        scalar_softcap(chunks.into_remainder(), cap);
    }

    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn softcap_avx512_impl(x: &mut [f32], cap: f32) {
        let capv = _mm256_set1_ps(cap);
        let mut chunks = x.chunks_exact_mut(8);
        for c in &mut chunks {
            // SAFETY: `c` holds 8 floats.
            let v = unsafe { _mm256_loadu_ps(c.as_ptr()) };
            let y = _mm256_div_ps(v, capv);
            let a = _mm256_andnot_ps(_mm256_set1_ps(-0.0), y);
            let wide = _mm512_cvtps_pd(a);
            let z = _mm512_add_pd(wide, wide);
            let xk = _mm512_mul_pd(z, _mm512_set1_pd(std::f64::consts::LOG2_E));
            let k = _mm512_roundscale_pd::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(xk);
            let r = _mm512_sub_pd(
                _mm512_sub_pd(z, _mm512_mul_pd(k, _mm512_set1_pd(LN2_HI))),
                _mm512_mul_pd(k, _mm512_set1_pd(LN2_LO)),
            );
            let mut p = _mm512_set1_pd(INV_FACTORIALS[0]);
            for &c in &INV_FACTORIALS[1..] {
                p = _mm512_add_pd(_mm512_mul_pd(p, r), _mm512_set1_pd(c));
            }
            // Exact: a power-of-two scaling of a normal number in range.
            let e = _mm512_scalef_pd(p, k);
            let one = _mm512_set1_pd(1.0);
            let t = _mm512_sub_pd(
                one,
                _mm512_div_pd(_mm512_set1_pd(2.0), _mm512_add_pd(e, one)),
            );
            let r = _mm256_mul_ps(capv, finish8(y, a, _mm512_cvtpd_ps(t)));
            // SAFETY: as the load.
            unsafe { _mm256_storeu_ps(c.as_mut_ptr(), r) };
        }
        scalar_softcap(chunks.into_remainder(), cap);
    }
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

    /// Every f32 whose tanh is computed (not passed through, not saturated),
    /// both signs, through every tier against the reference. Whatever `cap`,
    /// the kernels only ever see these values (`x / cap` is an f32), so this
    /// is the whole input space: none of them puts `2|x| log2 e` on a half,
    /// where a tie rule could matter.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn every_f32_in_range_matches() {
        let tiers = super::super::tests::simd();
        let (lo, hi) = (TINY.to_bits(), SATURATED.to_bits());
        let mut want = Vec::with_capacity(1 << 20);
        let mut got = Vec::with_capacity(1 << 20);
        let mut start = lo;
        while start < hi {
            let end = (start + (1 << 20)).min(hi);
            for sign in [0u32, 1 << 31] {
                want.clear();
                want.extend((start..end).map(|b| f32::from_bits(b | sign)));
                let input = want.clone();
                scalar_softcap(&mut want, 1.0);
                for (name, k) in &tiers {
                    got.clear();
                    got.extend_from_slice(&input);
                    (k.softcap)(&mut got, 1.0);
                    for i in 0..got.len() {
                        assert_eq!(
                            got[i].to_bits(),
                            want[i].to_bits(),
                            "{name} at {}",
                            input[i]
                        );
                    }
                }
            }
            start = end;
        }
    }
}
