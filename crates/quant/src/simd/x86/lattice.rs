//! The lattice formats (IQ2, IQ3, IQ1) against Q8_K on AVX2: each
//! sub-block of 32 is read as [`Lattice::sub`] gives it, its grid entries
//! gathered into one vector of magnitudes and its sign bits spread into a
//! byte mask (IQ1: its values `8·g ± 1` made in the vector, then split into
//! magnitude and sign), and the activations take the signs (`vpsignb`) so
//! that `vpmaddubsw` multiplies unsigned magnitudes (at most 62) by signed
//! bytes (at most 127): a pair's sum stays far inside 16 bits. The two
//! halves' scales multiply in `vpmaddwd`, and a block's i32 lanes are the
//! exact integer sum the scalar reference forms, scaled in its order, so
//! these give its bits.

use super::*;
use crate::formats::blocks::BlockQ8K;
use crate::formats::lattice::{Lattice, Runs, Sub};
use crate::scalar::kquant_block;

/// Eight bytes as a little-endian i64.
#[inline(always)]
fn le8(e: &[u8; 8]) -> i64 {
    i64::from_le_bytes(*e)
}

/// Four bytes as a little-endian i32.
#[inline(always)]
fn le4(e: &[u8; 4]) -> i32 {
    i32::from_le_bytes(*e)
}

/// Each of the four bytes of `runs` repeated over its run of eight bytes
/// (run `l` covers bytes `8l..8l + 8`).
#[inline]
#[target_feature(enable = "avx2")]
fn spread_runs(runs: [u8; 4]) -> __m256i {
    // Byte `l` of the word to the eight bytes of run `l` (within each
    // 128-bit half, which holds two runs).
    let pick = _mm256_set_epi64x(
        0x0303_0303_0303_0303,
        0x0202_0202_0202_0202,
        0x0101_0101_0101_0101,
        0,
    );
    _mm256_shuffle_epi8(_mm256_set1_epi32(i32::from_le_bytes(runs)), pick)
}

/// 0xff in each byte whose bit is set in its run's byte of `runs` (bit `j`
/// of run `l` for byte `8l + j`), 0 elsewhere.
#[inline]
#[target_feature(enable = "avx2")]
fn run_mask(runs: [u8; 4]) -> __m256i {
    let bits = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    _mm256_cmpeq_epi8(_mm256_and_si256(spread_runs(runs), bits), bits)
}

/// The eight-byte entries `i[0..4]` of `g`, in order.
#[inline]
#[target_feature(enable = "avx2")]
fn eights(g: &[[u8; 8]], i: &[usize; 8]) -> __m256i {
    _mm256_set_epi64x(le8(&g[i[3]]), le8(&g[i[2]]), le8(&g[i[1]]), le8(&g[i[0]]))
}

/// The sub-block's 32 magnitudes and the mask of its negative values.
#[inline]
#[target_feature(enable = "avx2")]
fn magnitudes<L: Lattice>(s: &Sub) -> (__m256i, __m256i) {
    let i = s.index.map(|i| i as usize);
    match L::RUNS {
        Runs::Signed8(g) => (eights(g, &i), run_mask(s.signs)),
        Runs::Signed4(g) => (
            _mm256_set_epi32(
                le4(&g[i[7]]),
                le4(&g[i[6]]),
                le4(&g[i[5]]),
                le4(&g[i[4]]),
                le4(&g[i[3]]),
                le4(&g[i[2]]),
                le4(&g[i[1]]),
                le4(&g[i[0]]),
            ),
            run_mask(s.signs),
        ),
        Runs::Shifted8(g) => {
            let v = eights(g, &i);
            let v2 = _mm256_add_epi8(v, v);
            let v4 = _mm256_add_epi8(v2, v2);
            // −1 where a run shifts down, +1 where it shifts up.
            let shift = _mm256_or_si256(spread_runs(s.signs), _mm256_set1_epi8(1));
            let x = _mm256_add_epi8(_mm256_add_epi8(v4, v4), shift);
            (
                _mm256_abs_epi8(x),
                _mm256_cmpgt_epi8(_mm256_setzero_si256(), x),
            )
        }
    }
}

/// Lattice blocks `w` against Q8_K blocks `a`, as [`crate::scalar::dot`].
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_avx2<L: Lattice>(w: &[L], a: &[BlockQ8K]) -> f32 {
    let ones = _mm256_set1_epi8(1);
    let mut sumf = 0.0f32;
    for (bw, ba) in w.iter().zip(a) {
        let mut acc = _mm256_setzero_si256();
        for ib in 0..K_SUB_BLOCKS {
            let s = bw.sub(ib);
            let (mag, neg) = magnitudes::<L>(&s);
            // SAFETY: a Q8_K block holds 256 values, so 32ib..32ib + 32 are in it.
            let q8 = unsafe { load32(ba.qs.as_ptr().add(32 * ib) as *const u8) };
            let signed = _mm256_sign_epi8(q8, _mm256_or_si256(neg, ones));
            let pairs = _mm256_maddubs_epi16(mag, signed);
            let scales = _mm256_set_m128i(
                _mm_set1_epi16(s.scales[1] as i16),
                _mm_set1_epi16(s.scales[0] as i16),
            );
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, scales));
        }
        sumf += kquant_block(bw.scale(), 0.0, ba.d.get(), hsum_epi32(acc), 0);
    }
    sumf
}
