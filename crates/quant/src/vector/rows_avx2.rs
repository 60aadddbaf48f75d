//! AVX2 kernels for [`super::dot_rows`] and [`super::axpy_rows`]: each key
//! or value row is loaded (and widened from f16 or Q8_0) once for the query
//! heads that share it, where the row-by-row path widened it into a buffer
//! and then walked it once per head. The bits are those of one
//! [`super::dot`] or [`super::axpy`] per row and head: the same four chains
//! of eight fused lanes and reduction, the same fused multiply-add per
//! element in row order.

use crate::simd::x86::hsum_ps as hsum8;
use half::f16;
use std::arch::x86_64::*;
use std::ops::Range;

/// Rows taken at a time by every head (and column chunk), so that the
/// later heads and chunks find a block in L1/L2 rather than memory: 64
/// rows of 256 halves are 32 KB.
const ROW_BLOCK: usize = 64;

/// `0..n` in blocks of [`ROW_BLOCK`].
fn row_blocks(n: usize) -> impl Iterator<Item = Range<usize>> {
    (0..n)
        .step_by(ROW_BLOCK)
        .map(move |j0| j0..(j0 + ROW_BLOCK).min(n))
}

/// An element type the AVX2 kernels load 8 at a time, widened to f32.
pub(super) trait Lanes8: Copy {
    /// Eight elements from element `at` of the rows that start at `p`, as
    /// f32.
    ///
    /// # Safety
    /// avx2, fma and f16c present; elements `at..at + 8` readable from `p`
    /// (for Q8_0 bytes, `at` a multiple of 8 and its block readable).
    unsafe fn load8(p: *const Self, at: usize) -> __m256;
}

impl Lanes8 for f32 {
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load8(p: *const f32, at: usize) -> __m256 {
        // SAFETY: the caller's contract.
        unsafe { _mm256_loadu_ps(p.add(at)) }
    }
}

impl Lanes8 for f16 {
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load8(p: *const f16, at: usize) -> __m256 {
        // SAFETY: the caller's contract (8 halves are 16 bytes); `vcvtph2ps`
        // widens an f16 bit pattern exactly.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.add(at).cast())) }
    }
}

/// Bytes here are Q8_0 blocks ([`super::Rows::Q8_0`]): element `at` (a
/// multiple of 8) is in block `at / 32`, whose f16 scale comes first.
impl Lanes8 for u8 {
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load8(p: *const u8, at: usize) -> __m256 {
        debug_assert!(at.is_multiple_of(8));
        // SAFETY: the caller's contract: the block holding elements
        // `at..at + 8` is readable (its scale, then 32 bytes).
        unsafe {
            let block = p.add(at / super::Q8_0_BLOCK * super::Q8_0_BLOCK_BYTES);
            let d = _mm256_cvtph_ps(_mm_set1_epi16(block.cast::<i16>().read_unaligned()));
            let q = _mm_loadl_epi64(block.add(2 + at % super::Q8_0_BLOCK).cast());
            // 7 by 11 significant bits: exact, as the scalar widening is.
            _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d)
        }
    }
}

/// [`super::dot_rows`] for head widths that are a multiple of 32: two heads
/// at a time (their eight chains and a key chunk fill most of the sixteen
/// registers).
///
/// # Safety
/// avx2, fma and f16c present; `q` holds `heads * hd` floats, `keys` `n`
/// rows of `hd` `stride` apart, `out` `heads` rows of `n` `out_stride` apart.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot_rows<T: Lanes8>(
    q: &[f32],
    heads: usize,
    hd: usize,
    keys: &[T],
    stride: usize,
    n: usize,
    out: &mut [f32],
    out_stride: usize,
) {
    for rows in row_blocks(n) {
        let mut g0 = 0;
        while g0 < heads {
            let r = rows.clone();
            // SAFETY: the caller's shapes, heads g0..g0 + 2 (or the last
            // one), rows inside 0..n.
            unsafe {
                if heads - g0 >= 2 {
                    dot_rows_h::<T, 2>(q, g0, hd, keys, stride, r, out, out_stride);
                    g0 += 2;
                } else {
                    dot_rows_h::<T, 1>(q, g0, hd, keys, stride, r, out, out_stride);
                    g0 += 1;
                }
            }
        }
    }
}

/// Heads `g0..g0 + H` and keys `rows` of [`dot_rows`].
#[allow(clippy::too_many_arguments)]
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_rows_h<T: Lanes8, const H: usize>(
    q: &[f32],
    g0: usize,
    hd: usize,
    keys: &[T],
    stride: usize,
    rows: Range<usize>,
    out: &mut [f32],
    out_stride: usize,
) {
    let (qp, kp, op) = (q.as_ptr(), keys.as_ptr(), out.as_mut_ptr());
    for j in rows {
        let mut acc = [[_mm256_setzero_ps(); 4]; H];
        // SAFETY: key j's `hd` elements and each head's are inside the
        // shapes (the caller's contract).
        unsafe {
            let k = j * stride;
            let mut i = 0;
            while i < hd {
                for c in 0..4 {
                    let kc = T::load8(kp, k + i + 8 * c);
                    for (g, a) in acc.iter_mut().enumerate() {
                        let qg = _mm256_loadu_ps(qp.add((g0 + g) * hd + i + 8 * c));
                        a[c] = _mm256_fmadd_ps(qg, kc, a[c]);
                    }
                }
                i += 32;
            }
            for (g, a) in acc.iter().enumerate() {
                let s = _mm256_add_ps(_mm256_add_ps(a[0], a[2]), _mm256_add_ps(a[1], a[3]));
                *op.add((g0 + g) * out_stride + j) = hsum8(s);
            }
        }
    }
}

/// [`super::axpy_rows`] for output widths that are a multiple of 8: up to
/// four heads by two vectors of 8 (one or two heads by four) in registers
/// across the rows.
///
/// # Safety
/// avx2, fma and f16c present; `o` holds `heads * width` floats, `vals` `n`
/// rows of `width` `stride` apart, `p` `heads` rows of `n` `p_stride` apart.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn axpy_rows<T: Lanes8>(
    o: &mut [f32],
    heads: usize,
    width: usize,
    p: &[f32],
    p_stride: usize,
    vals: &[T],
    stride: usize,
    n: usize,
) {
    for rows in row_blocks(n) {
        let mut g0 = 0;
        while g0 < heads {
            let h = (heads - g0).min(4);
            let mut d0 = 0;
            while d0 < width {
                // Eight accumulators where the heads allow, so that the
                // fused adds' latency is hidden.
                let v = ((width - d0) / 8).min(if h <= 2 { 4 } else { 2 });
                let r = rows.clone();
                // SAFETY: the caller's shapes, heads g0..g0 + h, the columns
                // d0..d0 + 8v of each, rows inside 0..n.
                unsafe {
                    macro_rules! go {
                        ($($hh:literal),*) => {
                            match (h, v) {
                                $( ($hh, 4) => axpy_rows_hv::<T, $hh, 4>(o, g0, d0, width, p, p_stride, vals, stride, r),
                                   ($hh, 3) => axpy_rows_hv::<T, $hh, 3>(o, g0, d0, width, p, p_stride, vals, stride, r),
                                   ($hh, 2) => axpy_rows_hv::<T, $hh, 2>(o, g0, d0, width, p, p_stride, vals, stride, r),
                                   ($hh, _) => axpy_rows_hv::<T, $hh, 1>(o, g0, d0, width, p, p_stride, vals, stride, r), )*
                                _ => {}
                            }
                        };
                    }
                    go!(1, 2, 3, 4);
                }
                d0 += 8 * v;
            }
            g0 += h;
        }
    }
}

/// Heads `g0..g0 + H`, columns `d0..d0 + 8 V` and rows `rows` of
/// [`axpy_rows`].
#[allow(clippy::too_many_arguments)]
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn axpy_rows_hv<T: Lanes8, const H: usize, const V: usize>(
    o: &mut [f32],
    g0: usize,
    d0: usize,
    width: usize,
    p: &[f32],
    p_stride: usize,
    vals: &[T],
    stride: usize,
    rows: Range<usize>,
) {
    let (op, pp, vp) = (o.as_mut_ptr(), p.as_ptr(), vals.as_ptr());
    // SAFETY: every access is inside the caller's shapes (heads g0..g0 + H,
    // columns d0..d0 + 8V, rows inside 0..n).
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); V]; H];
        for (g, a) in acc.iter_mut().enumerate() {
            for (c, x) in a.iter_mut().enumerate() {
                *x = _mm256_loadu_ps(op.add((g0 + g) * width + d0 + 8 * c));
            }
        }
        for j in rows {
            let row = j * stride + d0;
            let v: [__m256; V] = std::array::from_fn(|c| T::load8(vp, row + 8 * c));
            for (g, a) in acc.iter_mut().enumerate() {
                let w = _mm256_set1_ps(*pp.add((g0 + g) * p_stride + j));
                for (x, &vc) in a.iter_mut().zip(&v) {
                    *x = _mm256_fmadd_ps(w, vc, *x);
                }
            }
        }
        for (g, a) in acc.iter().enumerate() {
            for (c, &x) in a.iter().enumerate() {
                _mm256_storeu_ps(op.add((g0 + g) * width + d0 + 8 * c), x);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Called directly (whatever tier the machine's best is), the AVX2
        /// kernels give one scalar `dot` or `axpy`'s bits per row and head,
        /// on f32 rows and on f16 rows widened.
        #[test]
        fn avx2_rows_are_scalar_dots_and_axpys(
            heads in 1usize..6,
            blocks in 1usize..9,
            gap in 0usize..9,
            trim in 0usize..4,
            n in 1usize..150,
            seed in any::<u64>(),
        ) {
            if !(is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c"))
            {
                return Ok(());
            }
            let hd = 32 * blocks;
            let stride = hd + gap;
            let val = |i: usize| {
                let h = (i as u64 ^ seed).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
                (h % 2001) as f32 / 100.0 - 10.0
            };
            let q: Vec<f32> = (0..heads * hd).map(val).collect();
            let halves: Vec<f16> = (0..n * stride).map(|i| f16::from_f32(val(i + 7_000))).collect();
            let wide: Vec<f32> = halves.iter().map(|h| h.to_f32()).collect();
            let p: Vec<f32> = (0..heads * n).map(|i| val(i + 9_000) / 10.0).collect();
            // The values' width: any multiple of 8.
            let vw = hd - 8 * trim;
            let start: Vec<f32> = (0..heads * vw).map(|i| val(i + 11_000)).collect();
            let mut want_o = start.clone();
            for j in 0..n {
                for g in 0..heads {
                    let row = &wide[j * stride..j * stride + vw];
                    crate::vector::scalar_axpy(&mut want_o[g * vw..(g + 1) * vw], p[g * n + j], row);
                }
            }
            for half in [false, true] {
                let mut out = vec![f32::NAN; heads * n];
                let mut o = start.clone();
                // SAFETY: the features were detected above; the shapes hold.
                unsafe {
                    if half {
                        dot_rows(&q, heads, hd, &halves, stride, n, &mut out, n);
                        axpy_rows(&mut o, heads, vw, &p, n, &halves, stride, n);
                    } else {
                        dot_rows(&q, heads, hd, &wide, stride, n, &mut out, n);
                        axpy_rows(&mut o, heads, vw, &p, n, &wide, stride, n);
                    }
                }
                for g in 0..heads {
                    for j in 0..n {
                        let want = crate::vector::scalar_dot(
                            &q[g * hd..(g + 1) * hd],
                            &wide[j * stride..j * stride + hd],
                        );
                        prop_assert_eq!(out[g * n + j].to_bits(), want.to_bits(), "f16 {} head {} key {}", half, g, j);
                    }
                }
                for (i, (a, b)) in o.iter().zip(&want_o).enumerate() {
                    prop_assert_eq!(a.to_bits(), b.to_bits(), "f16 {} axpy element {}", half, i);
                }
            }
        }
    }
}
