//! BF16 weights against bf16 activations in [`crate::scalar::dot_bf16`]'s
//! order: with AVX512_BF16's `vdpbf16ps` (32 multiply-adds an instruction,
//! the weights used as they lie), and on AVX2 by two fused multiply-adds a
//! lane, the odd element's first, which the instruction matches bit for bit
//! where no value falls below f32's normal range (it flushes those to zero).

use std::arch::x86_64::*;

use super::{raw, FloatTile};
use crate::formats::blocks::Bf16Le;
use crate::scalar::BF16_BLOCK;

/// Bytes ahead of a lone weight row's reads that a tile of several
/// activation rows prefetches (as the float tiles do).
const SINGLE_ROW_PREFETCH: usize = 1024;

/// `W` weight rows (`w_stride` bytes apart in `w`) against `R` bf16
/// activation rows that start `stride` elements apart in `x`, over `n`
/// elements, each result [`crate::scalar::dot_bf16`]'s to the bit. Each
/// weight vector is loaded once for all `R` rows and each activation vector
/// once for all `W` rows.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
fn bf16_rows<const W: usize, const R: usize>(
    w: &[u8],
    w_stride: usize,
    x: &[u16],
    stride: usize,
    n: usize,
) -> [[f32; R]; W] {
    let room = x.len().saturating_sub((R - 1) * stride);
    let w_room = w.len().saturating_sub((W - 1) * w_stride) / 2;
    let n = n.min(room).min(w_room);
    let (wp, xp) = (w.as_ptr(), x.as_ptr());
    // Even blocks into `lo`, odd ones into `hi`: two blocks a pass, so that
    // each accumulator is a register of its own.
    let mut lo = [[_mm512_setzero_ps(); R]; W];
    let mut hi = [[_mm512_setzero_ps(); R]; W];
    let pairs = n / (2 * BF16_BLOCK);
    for p in 0..pairs {
        let i = p * 2 * BF16_BLOCK;
        // SAFETY: both blocks lie within every row's first `n` elements.
        unsafe {
            bf16_block::<W, R>(&mut lo, wp, w_stride, xp, stride, i, !0);
            bf16_block::<W, R>(&mut hi, wp, w_stride, xp, stride, i + BF16_BLOCK, !0);
        }
    }
    // The last one or two blocks, the short one filled out with zeros by
    // masked loads, which read only the row's elements.
    let i = pairs * 2 * BF16_BLOCK;
    let mask = |left: usize| -> __mmask32 {
        if left >= BF16_BLOCK {
            !0
        } else {
            (1u32 << left) - 1
        }
    };
    if i < n {
        // SAFETY: the masks keep every load within the rows' first `n`.
        unsafe { bf16_block::<W, R>(&mut lo, wp, w_stride, xp, stride, i, mask(n - i)) };
    }
    if i + BF16_BLOCK < n {
        let j = i + BF16_BLOCK;
        // SAFETY: as above.
        unsafe { bf16_block::<W, R>(&mut hi, wp, w_stride, xp, stride, j, mask(n - j)) };
    }
    let mut out = [[0.0; R]; W];
    for v in 0..W {
        for r in 0..R {
            out[v][r] = fold16(_mm512_add_ps(lo[v][r], hi[v][r]));
        }
    }
    out
}

/// One block of 32 elements at element `i` of `W` weight rows and `R`
/// activation rows into `acc`, loading the lanes in `mask` (zeros
/// elsewhere).
///
/// # Safety
/// The masked lanes of every row lie within its slice.
#[inline]
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
unsafe fn bf16_block<const W: usize, const R: usize>(
    acc: &mut [[__m512; R]; W],
    wp: *const u8,
    w_stride: usize,
    xp: *const u16,
    stride: usize,
    i: usize,
    mask: __mmask32,
) {
    // SAFETY: the caller's contract.
    let ws: [__m512bh; W] = std::array::from_fn(|v| unsafe {
        let p = wp.add(v * w_stride + i * 2) as *const i16;
        std::mem::transmute::<__m512i, __m512bh>(_mm512_maskz_loadu_epi16(mask, p))
    });
    // The float tiles' prefetch rule (`x86_float::float_rows`): a prefetch
    // never faults, so addresses past the matrix are harmless.
    if W == 1 && R > 1 {
        let p = wp.wrapping_add(i * 2 + SINGLE_ROW_PREFETCH);
        _mm_prefetch::<_MM_HINT_T0>(p as *const i8);
    }
    if W > 1 {
        for v in 0..W {
            let p = wp.wrapping_add((4 * W + v) * w_stride + i * 2);
            _mm_prefetch::<_MM_HINT_T0>(p as *const i8);
        }
    }
    for r in 0..R {
        // SAFETY: the caller's contract; activation row r starts r * stride in.
        let xv = unsafe {
            let p = xp.add(r * stride + i) as *const i16;
            std::mem::transmute::<__m512i, __m512bh>(_mm512_maskz_loadu_epi16(mask, p))
        };
        for (a, &wv) in acc.iter_mut().zip(&ws) {
            a[r] = _mm512_dpbf16_ps(a[r], wv, xv);
        }
    }
}

/// The reference's fold of 16 lanes: lane `l` plus lane `l + 8`, then
/// `l + 4`, `l + 2`, `l + 1`.
#[inline]
#[target_feature(enable = "avx512f")]
fn fold16(t: __m512) -> f32 {
    let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(t)));
    fold8(_mm256_add_ps(_mm512_castps512_ps256(t), hi))
}

/// [`fold16`]'s last three steps, over eight lanes.
#[inline]
#[target_feature(enable = "avx2")]
fn fold8(t: __m256) -> f32 {
    let t = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps::<1>(t));
    let t = _mm_add_ps(t, _mm_movehl_ps(t, t));
    _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)))
}

/// BF16 · BF16 with AVX512_BF16, one activation row.
///
/// # Safety
/// AVX-512 F/BW/VL and BF16 present.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
pub(crate) unsafe fn bf16_avx512(w: &[Bf16Le], x: &[u16]) -> f32 {
    bf16_rows::<1, 1>(raw(w), 0, x, 0, w.len())[0][0]
}

/// BF16 · BF16 with AVX512_BF16, a tile of up to three weight rows by four
/// activation rows, or one weight row by up to eight.
///
/// # Safety
/// AVX-512 F/BW/VL and BF16 present.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
pub(crate) unsafe fn bf16_tile_avx512(
    w: &[Bf16Le],
    w_stride: usize,
    x: &[u16],
    stride: usize,
    n: usize,
    wrows: usize,
    rows: usize,
) -> FloatTile {
    // One function per shape, each with its own inlined copy of the loop.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
    fn rows_of<const W: usize, const R: usize>(
        w: &[u8],
        w_stride: usize,
        x: &[u16],
        stride: usize,
        n: usize,
    ) -> FloatTile {
        let got = bf16_rows::<W, R>(w, w_stride, x, stride, n);
        let mut out = FloatTile::default();
        for (o, g) in out.iter_mut().zip(got) {
            o[..R].copy_from_slice(&g);
        }
        out
    }
    if wrows > 1 && rows > super::FLOAT_TILE_ACTS {
        // Outside the contract: one weight row at a time.
        let mut out = FloatTile::default();
        for (v, o) in out.iter_mut().enumerate().take(wrows) {
            let wv = w.get(v * w_stride..).unwrap_or_default();
            // SAFETY: the features are the caller's.
            *o = unsafe { bf16_tile_avx512(wv, w_stride, x, stride, n, 1, rows) }[0];
        }
        return out;
    }
    let f = match (wrows, rows) {
        (0, _) | (_, 0) => return FloatTile::default(),
        (1, 1) => rows_of::<1, 1>,
        (1, 2) => rows_of::<1, 2>,
        (1, 3) => rows_of::<1, 3>,
        (1, 4) => rows_of::<1, 4>,
        (1, 5) => rows_of::<1, 5>,
        (1, 6) => rows_of::<1, 6>,
        (1, 7) => rows_of::<1, 7>,
        (1, _) => rows_of::<1, 8>,
        (2, 1) => rows_of::<2, 1>,
        (2, 2) => rows_of::<2, 2>,
        (2, 3) => rows_of::<2, 3>,
        (2, _) => rows_of::<2, 4>,
        (_, 1) => rows_of::<3, 1>,
        (_, 2) => rows_of::<3, 2>,
        (_, 3) => rows_of::<3, 3>,
        _ => rows_of::<3, 4>,
    };
    f(raw(w), w_stride * size_of::<Bf16Le>(), x, stride, n)
}

/// BF16 · BF16 on AVX2: each 32-bit word holds an odd element in its high
/// half and an even one in its low half, so a mask and a shift make the two
/// f32 operands of a lane's two multiply-adds.
///
/// # Safety
/// AVX2 and FMA present.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn bf16_avx2(w: &[Bf16Le], x: &[u16]) -> f32 {
    let n = w.len().min(x.len());
    let w = raw(w);
    // [block parity][lanes 0..8, 8..16]
    let mut acc = [[_mm256_setzero_ps(); 2]; 2];
    let high = _mm256_set1_epi32(0xffff_0000_u32 as i32);
    let step = |acc: &mut [__m256; 2], wv: [__m256i; 2], xv: [__m256i; 2]| {
        for h in 0..2 {
            let odd = |v: __m256i| _mm256_castsi256_ps(_mm256_and_si256(v, high));
            let even = |v: __m256i| _mm256_castsi256_ps(_mm256_slli_epi32::<16>(v));
            acc[h] = _mm256_fmadd_ps(odd(wv[h]), odd(xv[h]), acc[h]);
            acc[h] = _mm256_fmadd_ps(even(wv[h]), even(xv[h]), acc[h]);
        }
    };
    // SAFETY: (callers) `pw` and `px` point to 32 elements each.
    let load = |pw: *const u8, px: *const u16| unsafe {
        let lw = |o: usize| _mm256_loadu_si256(pw.add(o) as *const __m256i);
        let lx = |o: usize| _mm256_loadu_si256(px.add(o) as *const __m256i);
        ([lw(0), lw(32)], [lx(0), lx(16)])
    };
    let full = n / BF16_BLOCK;
    let (wp, xp) = (w.as_ptr(), x.as_ptr());
    // Two blocks a pass, so that each accumulator is a register of its own.
    for p in 0..full / 2 {
        let i = p * 2 * BF16_BLOCK;
        // SAFETY: both blocks lie within both rows' first `n` elements.
        let (w0, x0) = unsafe { load(wp.add(i * 2), xp.add(i)) };
        step(&mut acc[0], w0, x0);
        // SAFETY: as above.
        let (w1, x1) = unsafe { load(wp.add(i * 2 + 2 * BF16_BLOCK), xp.add(i + BF16_BLOCK)) };
        step(&mut acc[1], w1, x1);
    }
    if full % 2 == 1 {
        let i = (full - 1) * BF16_BLOCK;
        // SAFETY: as above.
        let (w0, x0) = unsafe { load(wp.add(i * 2), xp.add(i)) };
        step(&mut acc[0], w0, x0);
    }
    let i = full * BF16_BLOCK;
    if i < n {
        // The short last block, filled out with zeros.
        let mut wb = [0u16; BF16_BLOCK];
        let mut xb = [0u16; BF16_BLOCK];
        for (k, (a, b)) in wb.iter_mut().zip(&mut xb).take(n - i).enumerate() {
            *a = u16::from_le_bytes([w[2 * (i + k)], w[2 * (i + k) + 1]]);
            *b = x[i + k];
        }
        let (wv, xv) = load(wb.as_ptr() as *const u8, xb.as_ptr());
        step(&mut acc[full % 2], wv, xv);
    }
    let lo = _mm256_add_ps(acc[0][0], acc[1][0]);
    let hi = _mm256_add_ps(acc[0][1], acc[1][1]);
    fold8(_mm256_add_ps(lo, hi))
}
