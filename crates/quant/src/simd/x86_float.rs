//! Float-weight kernels on AVX-512: F32, F16 and BF16 rows against f32
//! activations, one activation row or four at a time. They add in the scalar
//! reference's order (four chains of eight lanes, see
//! [`crate::scalar::float_dot`]), so every result has the bits of every other
//! tier's; a 512-bit register simply holds two of the chains.

use std::arch::x86_64::*;

use super::x86::float_dot_tail;

/// Weight row `w` (`es` bytes an element) against `R` activation rows that
/// start `stride` floats apart in `x`, over `n` elements: each result is
/// [`crate::scalar::float_dot`]'s to the bit. A weight vector is loaded and
/// widened once for all `R` rows, which is what a batch of a few rows
/// (speculation's check, several streams) gains over `R` single dots.
/// `wide` widens 16 elements, `narrow` 8, `elem` one.
#[inline]
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
fn float_rows<const R: usize>(
    w: &[u8],
    x: &[f32],
    stride: usize,
    n: usize,
    es: usize,
    wide: impl Fn(*const u8) -> __m512,
    narrow: impl Fn(*const u8) -> __m256,
    elem: impl Fn(&[u8]) -> f32,
) -> [f32; R] {
    // Each activation row needs its `n` floats: clamp to what the slices
    // hold, as the one-row kernels do.
    let room = x.len().saturating_sub((R - 1) * stride);
    let n = n.min(room).min(w.len() / es);
    let (wp, xp) = (w.as_ptr(), x.as_ptr());
    // Chains 0|1 and 2|3 of each row.
    let mut lo = [_mm512_setzero_ps(); R];
    let mut hi = [_mm512_setzero_ps(); R];
    let mut i = 0;
    while i + 32 <= n {
        // SAFETY: i + 32 <= n, within the weights and every activation row
        // (clamped above).
        let (w0, w1) = unsafe { (wide(wp.add(i * es)), wide(wp.add((i + 16) * es))) };
        for r in 0..R {
            // SAFETY: as above, row r starts r * stride floats in.
            let (x0, x1) = unsafe {
                let p = xp.add(r * stride + i);
                (_mm512_loadu_ps(p), _mm512_loadu_ps(p.add(16)))
            };
            lo[r] = _mm512_fmadd_ps(w0, x0, lo[r]);
            hi[r] = _mm512_fmadd_ps(w1, x1, hi[r]);
        }
        i += 32;
    }
    let mut out = [0.0; R];
    for (r, o) in out.iter_mut().enumerate() {
        let acc = [
            _mm512_castps512_ps256(lo[r]),
            high_half(lo[r]),
            _mm512_castps512_ps256(hi[r]),
            high_half(hi[r]),
        ];
        // A row past the end of `x` has had `n` clamped to 0 above.
        let row = x.get(r * stride..).unwrap_or_default();
        *o = float_dot_tail(acc, w, row, i, n, es, &narrow, &elem);
    }
    out
}

/// Lanes 8..16 (AVX-512F alone has no `extractf32x8`).
#[inline]
#[target_feature(enable = "avx512f")]
fn high_half(v: __m512) -> __m256 {
    _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)))
}

/// Defines the one-row ([`super::FloatDotFn`]) and four-row
/// ([`super::FloatTileFn`]) kernels of one weight type.
macro_rules! float_kernels {
    ($one:ident, $four:ident, $es:expr, $doc:literal,
     |$p:ident| wide: $wide:expr, narrow: $narrow:expr, elem: $elem:expr) => {
        #[doc = concat!($doc, " · F32, one activation row.")]
        ///
        /// # Safety
        /// [`super::FloatDotFn`] contract.
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
        pub(crate) unsafe fn $one(w: &[u8], x: &[f32], n: usize) -> f32 {
            float_rows::<1>(w, x, 0, n, $es, |$p| $wide, |$p| $narrow, $elem)[0]
        }

        #[doc = concat!($doc, " · F32, up to four activation rows (the rest of the result zero).")]
        ///
        /// # Safety
        /// [`super::FloatTileFn`] contract.
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
        pub(crate) unsafe fn $four(
            w: &[u8],
            x: &[f32],
            stride: usize,
            n: usize,
            rows: usize,
        ) -> [f32; 4] {
            // One function per height, so that each inlines its own copy
            // of `float_rows`: one function holding all four heights had
            // slowed the four-row product.
            #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
            fn rows_of<const R: usize>(w: &[u8], x: &[f32], stride: usize, n: usize) -> [f32; 4] {
                let mut out = [0.0; 4];
                out[..R].copy_from_slice(&float_rows::<R>(
                    w,
                    x,
                    stride,
                    n,
                    $es,
                    |$p| $wide,
                    |$p| $narrow,
                    $elem,
                ));
                out
            }
            match rows {
                0 => [0.0; 4],
                1 => rows_of::<1>(w, x, stride, n),
                2 => rows_of::<2>(w, x, stride, n),
                3 => rows_of::<3>(w, x, stride, n),
                _ => rows_of::<4>(w, x, stride, n),
            }
        }
    };
}

float_kernels!(f32_avx512, f32_x4_avx512, 4, "F32",
    |p| wide: {
        // SAFETY: `float_rows` passes pointers to 16 whole elements.
        unsafe { _mm512_loadu_ps(p as *const f32) }
    },
    narrow: {
        // SAFETY: `float_rows` passes pointers to 8 whole elements.
        unsafe { _mm256_loadu_ps(p as *const f32) }
    },
    elem: crate::formats::f32_at
);

float_kernels!(f16_avx512, f16_x4_avx512, 2, "F16",
    |p| wide: {
        // SAFETY: `float_rows` passes pointers to 16 whole elements.
        _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(p as *const __m256i) })
    },
    narrow: {
        // SAFETY: `float_rows` passes pointers to 8 whole elements.
        _mm256_cvtph_ps(unsafe { _mm_loadu_si128(p as *const __m128i) })
    },
    elem: crate::formats::f16_at
);

float_kernels!(bf16_avx512, bf16_x4_avx512, 2, "BF16",
    |p| wide: {
        // SAFETY: `float_rows` passes pointers to 16 whole elements.
        let h = unsafe { _mm256_loadu_si256(p as *const __m256i) };
        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
    },
    narrow: {
        // SAFETY: `float_rows` passes pointers to 8 whole elements.
        let h = unsafe { _mm_loadu_si128(p as *const __m128i) };
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
    },
    elem: |b| crate::formats::float::bf16_bits_to_f32(u16::from_le_bytes([b[0], b[1]]))
);
