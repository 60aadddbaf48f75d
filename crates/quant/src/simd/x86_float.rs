//! Float-weight kernels on AVX-512: F32 and F16 rows against f32
//! activations, one activation row or four at a time. They add in the scalar
//! reference's order (four chains of eight lanes, see
//! [`crate::scalar::float_dot`]), so every result has the bits of every other
//! tier's; a 512-bit register simply holds two of the chains.

use std::arch::x86_64::*;

use super::x86::float_dot_tail;
use super::{raw, FloatTile};
use crate::formats::blocks::{F16Le, F32Le};

/// Bytes ahead of a lone weight row's reads that a tile of several
/// activation rows prefetches (docs/perf/speculation.md).
const SINGLE_ROW_PREFETCH: usize = 1024;

/// `W` weight rows (`w_stride` bytes apart in `w`, `es` bytes an element)
/// against `R` activation rows that start `stride` floats apart in `x`,
/// over `n` elements: each result is [`crate::scalar::float_dot`]'s to the
/// bit. Each weight vector is loaded and widened once for all `R` rows and
/// each activation vector loaded once for all `W` rows, which is what a
/// batch of a few rows (speculation's check, several streams) gains over
/// single dots: a tile of one weight row reloaded the activations for every
/// weight row and was bound by those loads. `wide` widens 16 elements,
/// `narrow` 8, `elem` one.
#[inline]
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
fn float_rows<const W: usize, const R: usize>(
    w: &[u8],
    w_stride: usize,
    x: &[f32],
    stride: usize,
    n: usize,
    es: usize,
    wide: impl Fn(*const u8) -> __m512,
    narrow: impl Fn(*const u8) -> __m256,
    elem: impl Fn(&[u8]) -> f32,
) -> [[f32; R]; W] {
    // Each activation row needs its `n` floats and each weight row its `n`
    // elements: clamp to what the slices hold, as the one-row kernels do.
    let room = x.len().saturating_sub((R - 1) * stride);
    let w_room = w.len().saturating_sub((W - 1) * w_stride) / es;
    let n = n.min(room).min(w_room);
    let (wp, xp) = (w.as_ptr(), x.as_ptr());
    // Chains 0|1 and 2|3 of each pair of rows.
    let mut lo = [[_mm512_setzero_ps(); R]; W];
    let mut hi = [[_mm512_setzero_ps(); R]; W];
    let mut i = 0;
    while i + 32 <= n {
        // SAFETY: i + 32 <= n, within every weight row (clamped above).
        let ws: [(__m512, __m512); W] = std::array::from_fn(|v| unsafe {
            let p = wp.add(v * w_stride + i * es);
            (wide(p), wide(p.add(16 * es)))
        });
        // Four tiles on, the rows at this place: `W` short rows read side
        // by side are a pattern the hardware prefetchers do not follow far
        // enough ahead from memory (one row alone is a plain stream). A
        // prefetch never faults, so the addresses past the matrix are
        // harmless.
        // One row against several: each line's work is several times a
        // plain dot's, so fewer of the row's next lines are in flight
        // than the stream needs; ask for them ahead.
        if W == 1 && R > 1 {
            let p = wp.wrapping_add(i * es + SINGLE_ROW_PREFETCH);
            for line in (0..32 * es).step_by(64) {
                _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(line) as *const i8);
            }
        }
        if W > 1 {
            for v in 0..W {
                let p = wp.wrapping_add((4 * W + v) * w_stride + i * es);
                for line in (0..32 * es).step_by(64) {
                    _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(line) as *const i8);
                }
            }
        }
        for r in 0..R {
            // SAFETY: as above, activation row r starts r * stride floats in.
            let (x0, x1) = unsafe {
                let p = xp.add(r * stride + i);
                (_mm512_loadu_ps(p), _mm512_loadu_ps(p.add(16)))
            };
            for v in 0..W {
                lo[v][r] = _mm512_fmadd_ps(ws[v].0, x0, lo[v][r]);
                hi[v][r] = _mm512_fmadd_ps(ws[v].1, x1, hi[v][r]);
            }
        }
        i += 32;
    }
    let mut out = [[0.0; R]; W];
    for (v, outs) in out.iter_mut().enumerate() {
        // A weight row past the end of `w` has had `n` clamped to 0 above.
        let wrow = w.get(v * w_stride..).unwrap_or_default();
        for (r, o) in outs.iter_mut().enumerate() {
            let acc = [
                _mm512_castps512_ps256(lo[v][r]),
                high_half(lo[v][r]),
                _mm512_castps512_ps256(hi[v][r]),
                high_half(hi[v][r]),
            ];
            let row = x.get(r * stride..).unwrap_or_default();
            *o = float_dot_tail(acc, wrow, row, i, n, es, &narrow, &elem);
        }
    }
    out
}

/// Lanes 8..16 (AVX-512F alone has no `extractf32x8`).
#[inline]
#[target_feature(enable = "avx512f")]
fn high_half(v: __m512) -> __m256 {
    _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)))
}

/// Defines the one-row ([`super::FloatDotFn`]) and tile
/// ([`super::FloatTileFn`]) kernels of one weight type.
macro_rules! float_kernels {
    ($one:ident, $tile:ident, $el:ty, $es:expr, $doc:literal,
     |$p:ident| wide: $wide:expr, narrow: $narrow:expr, elem: $elem:expr) => {
        #[doc = concat!($doc, " · F32, one activation row.")]
        ///
        /// # Safety
        /// AVX-512 F/BW/VL, AVX2, FMA and F16C present.
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
        pub(crate) unsafe fn $one(w: &[$el], x: &[f32]) -> f32 {
            float_rows::<1, 1>(
                raw(w),
                0,
                x,
                0,
                w.len(),
                $es,
                |$p| $wide,
                |$p| $narrow,
                $elem,
            )[0][0]
        }

        #[doc = concat!($doc, " · F32, a tile of up to three weight rows by four activation rows.")]
        ///
        /// # Safety
        /// AVX-512 F/BW/VL, AVX2, FMA and F16C present.
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
        pub(crate) unsafe fn $tile(
            w: &[$el],
            w_stride: usize,
            x: &[f32],
            stride: usize,
            n: usize,
            wrows: usize,
            rows: usize,
        ) -> FloatTile {
            // One function per shape, so that each inlines its own copy
            // of `float_rows`: one function holding all four heights had
            // slowed the four-row product.
            #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
            fn rows_of<const W: usize, const R: usize>(
                w: &[u8],
                w_stride: usize,
                x: &[f32],
                stride: usize,
                n: usize,
            ) -> FloatTile {
                let got = float_rows::<W, R>(
                    w,
                    w_stride,
                    x,
                    stride,
                    n,
                    $es,
                    |$p| $wide,
                    |$p| $narrow,
                    $elem,
                );
                let mut out = FloatTile::default();
                for (o, g) in out.iter_mut().zip(got) {
                    o[..R].copy_from_slice(&g);
                }
                out
            }
            let f = match (wrows, rows) {
                (0, _) | (_, 0) => return FloatTile::default(),
                (1, 1) => rows_of::<1, 1>,
                (1, 2) => rows_of::<1, 2>,
                (1, 3) => rows_of::<1, 3>,
                (1, _) => rows_of::<1, 4>,
                (2, 1) => rows_of::<2, 1>,
                (2, 2) => rows_of::<2, 2>,
                (2, 3) => rows_of::<2, 3>,
                (2, _) => rows_of::<2, 4>,
                (_, 1) => rows_of::<3, 1>,
                (_, 2) => rows_of::<3, 2>,
                (_, 3) => rows_of::<3, 3>,
                _ => rows_of::<3, 4>,
            };
            f(raw(w), w_stride * $es, x, stride, n)
        }
    };
}

float_kernels!(f32_avx512, f32_tile_avx512, F32Le, 4, "F32",
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

float_kernels!(f16_avx512, f16_tile_avx512, F16Le, 2, "F16",
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
