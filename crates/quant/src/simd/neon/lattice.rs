//! The lattice formats (IQ2, IQ3, IQ1) against Q8_K on NEON: each
//! sub-block of 32 is read as [`Lattice::sub`] gives it, its grid entries
//! loaded into two vectors and its sign bits spread into byte masks that
//! select the negated values (IQ1: the values `8·g ± 1` made in the
//! vectors), then multiplied by the activations through the table's
//! [`Products`]. The two halves' exact sums take their scales as integers,
//! and a block's sum is the scalar reference's, scaled in its order, so
//! these give its bits.

use std::arch::aarch64::*;

use super::{ld_s8, Products, Sdot, Widening};
use crate::formats::blocks::{BlockQ8K, K_SUB_BLOCKS};
use crate::formats::lattice::{Lattice, Runs, Sub};
use crate::scalar::kquant_block;

/// Two eight-byte grid entries as one vector.
#[inline(always)]
unsafe fn pair8(a: &[u8; 8], b: &[u8; 8]) -> int8x16_t {
    // SAFETY: each entry holds 8 bytes; NEON loads need no alignment.
    unsafe { vreinterpretq_s8_u8(vcombine_u8(vld1_u8(a.as_ptr()), vld1_u8(b.as_ptr()))) }
}

/// Four four-byte grid entries as one vector.
#[inline(always)]
unsafe fn quad4(g: &[[u8; 4]], i: &[usize]) -> int8x16_t {
    let words: [u32; 4] = std::array::from_fn(|k| u32::from_le_bytes(g[i[k]]));
    // SAFETY: `words` holds 16 bytes.
    unsafe { vreinterpretq_s8_u32(vld1q_u32(words.as_ptr())) }
}

/// Two run bytes spread over eight bytes each.
#[inline(always)]
unsafe fn spread(first: u8, second: u8) -> uint8x16_t {
    // SAFETY: register operations only.
    unsafe { vcombine_u8(vdup_n_u8(first), vdup_n_u8(second)) }
}

/// `v` negated in each byte whose bit is set in its run's sign byte (the
/// first eight bytes by `first`, the rest by `second`; bit `j` for byte
/// `j` of the run).
#[inline(always)]
unsafe fn with_signs(v: int8x16_t, first: u8, second: u8) -> int8x16_t {
    const BITS: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
    // SAFETY: `BITS` holds 16 bytes; the rest are register operations.
    unsafe {
        let negative = vtstq_u8(spread(first, second), vld1q_u8(BITS.as_ptr()));
        vbslq_s8(negative, vnegq_s8(v), v)
    }
}

/// IQ1's values in eighths: entries `g` times 8, shifted by −1 in the runs
/// whose byte is 0xff and +1 in the others.
#[inline(always)]
unsafe fn shifted(g: int8x16_t, first: u8, second: u8) -> int8x16_t {
    // SAFETY: register operations only.
    unsafe {
        let down = vreinterpretq_s8_u8(spread(first, second));
        let shift = vorrq_s8(down, vdupq_n_s8(1));
        vaddq_s8(vshlq_n_s8::<3>(g), shift)
    }
}

/// The sub-block's 32 signed values, as values 0–15 and 16–31.
#[inline(always)]
unsafe fn values<L: Lattice>(s: &Sub) -> (int8x16_t, int8x16_t) {
    let (i, n) = (s.index.map(|i| i as usize), &s.signs);
    // SAFETY: the grid entries are whole (see the helpers).
    unsafe {
        match L::RUNS {
            Runs::Signed8(g) => (
                with_signs(pair8(&g[i[0]], &g[i[1]]), n[0], n[1]),
                with_signs(pair8(&g[i[2]], &g[i[3]]), n[2], n[3]),
            ),
            Runs::Signed4(g) => (
                with_signs(quad4(g, &i[0..4]), n[0], n[1]),
                with_signs(quad4(g, &i[4..8]), n[2], n[3]),
            ),
            Runs::Shifted8(g) => (
                shifted(pair8(&g[i[0]], &g[i[1]]), n[0], n[1]),
                shifted(pair8(&g[i[2]], &g[i[3]]), n[2], n[3]),
            ),
        }
    }
}

/// Lattice blocks `w` against Q8_K blocks `a`, as [`crate::scalar::dot`].
///
/// # Safety
/// The CPU must have what `P` needs.
#[inline(always)]
unsafe fn dot<L: Lattice, P: Products>(w: &[L], a: &[BlockQ8K]) -> f32 {
    let mut sumf = 0.0f32;
    for (bw, ba) in w.iter().zip(a) {
        // SAFETY: a Q8_K block holds 256 values, so 32ib..32ib + 32 are in
        // it; `P`'s features are the caller's to have.
        let isum = unsafe {
            let mut acc = vdupq_n_s32(0);
            for ib in 0..K_SUB_BLOCKS {
                let s = bw.sub(ib);
                let (lo, hi) = values::<L>(&s);
                let q = ba.qs.as_ptr().add(32 * ib) as *const u8;
                let dlo = P::dot4(vdupq_n_s32(0), lo, ld_s8(q));
                let dhi = P::dot4(vdupq_n_s32(0), hi, ld_s8(q.add(16)));
                acc = vmlaq_n_s32(vmlaq_n_s32(acc, dlo, s.scales[0]), dhi, s.scales[1]);
            }
            vaddvq_s32(acc)
        };
        sumf += kquant_block(bw.scale(), 0.0, ba.d.get(), isum, 0);
    }
    sumf
}

/// [`dot`] on plain NEON.
///
/// # Safety
/// The CPU must have NEON.
#[target_feature(enable = "neon")]
pub(super) unsafe fn dot_neon<L: Lattice>(w: &[L], a: &[BlockQ8K]) -> f32 {
    // SAFETY: NEON is this function's feature.
    unsafe { dot::<L, Widening>(w, a) }
}

/// [`dot`] with `sdot`.
///
/// # Safety
/// The CPU must have NEON and `dotprod`.
#[target_feature(enable = "neon,dotprod")]
pub(super) unsafe fn dot_dotprod<L: Lattice>(w: &[L], a: &[BlockQ8K]) -> f32 {
    // SAFETY: NEON and `dotprod` are this function's features.
    unsafe { dot::<L, Sdot>(w, a) }
}
