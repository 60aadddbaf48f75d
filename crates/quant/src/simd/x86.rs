//! x86_64 kernels: AVX2+FMA+F16C for every main format, and AVX-512 VNNI /
//! AVX-VNNI variants of the 32-block formats, where `vpdpbusd` replaces the
//! `maddubs`+`madd` pair. IQ4_NL and IQ4_XS are in `x86/iq4.rs`, on this
//! file's macros.
//!
//! Every kernel is an `unsafe fn` only for the CPU features it enables
//! (checked by [`detect`] before the kernel is put in a table): it takes its
//! block counts from its typed slices, or checks its rows fit
//! ([`super::check_rows`]).

#![allow(clippy::incompatible_msrv)] // AVX-512 intrinsics are stable since 1.89; guarded at run time.

use std::arch::x86_64::*;

use super::x86_x8 as x8;
use super::{check_rows, raw, x86_float, FloatKernels, FormatKernels, GemmTier, Kernels, SCALAR};
use crate::formats::blocks::at;
use crate::formats::blocks::{
    BlockFormat, BlockQ4K, BlockQ4_0, BlockQ5K, BlockQ5_0, BlockQ6K, BlockQ8K, BlockQ8_0, F16Le,
    F32Le, K_SUB_BLOCKS,
};

/// Reads a u16 at `p`.
///
/// # Safety
/// `p` must be valid for 2 bytes.
#[inline]
unsafe fn rd16(p: *const u8) -> u32 {
    // SAFETY: caller guarantees 2 readable bytes; unaligned read.
    unsafe { std::ptr::read_unaligned(p as *const u16) as u32 }
}

/// Reads a u32 at `p`.
///
/// # Safety
/// `p` must be valid for 4 bytes.
#[inline]
unsafe fn rd32(p: *const u8) -> u32 {
    // SAFETY: caller guarantees 4 readable bytes; unaligned read.
    unsafe { std::ptr::read_unaligned(p as *const u32) }
}

/// Widens the two f16 halves of `pair` (low half first) with F16C.
///
/// Going through a 32-bit GPR value matters: a lone 16-bit load is compiled to
/// `vpinsrw` into whatever register is live, chaining every block's scale onto the
/// accumulator and tripling the per-block latency.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn h2f_pair(pair: u32) -> __m128 {
    _mm_cvtph_ps(_mm_cvtsi32_si128(pair as i32))
}

/// Product of the two f16 halves of `pair`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn h2f_prod(pair: u32) -> f32 {
    let v = h2f_pair(pair);
    _mm_cvtss_f32(_mm_mul_ss(v, _mm_movehdup_ps(v)))
}

/// The f16 scales at the starts of 8 consecutive blocks `stride` bytes
/// apart, widened to f32 with one conversion instead of eight.
///
/// # Safety
/// `p + k * stride` must be valid for 2 bytes for k in 0..8.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scales8(p: *const u8, stride: usize) -> __m256 {
    // Eight scalar loads, not `vpgatherdd`: a gather is microcoded on AMD
    // Zen 1 and 2 (tens of cycles), and was the Q8_0 decode kernel's
    // bottleneck there; the values are the same either way.
    // SAFETY: 2 readable bytes at each of the 8 offsets (caller's contract).
    let h: [u16; 8] = std::array::from_fn(|k| unsafe { rd16(p.add(k * stride)) } as u16);
    // SAFETY: `h` holds 8 u16, 16 bytes.
    _mm256_cvtph_ps(unsafe { _mm_loadu_si128(h.as_ptr() as *const __m128i) })
}

/// [`scales8`] for blocks of `STRIDE` bytes, for the four-row decode
/// kernels. No 512-bit permutes here, though they would pick the scales out
/// in fewer instructions: while a 512-bit instruction is in flight an Intel
/// core shuts the vector half of port 1, and the 256-bit products around
/// it lose a third of their ports (the four-row Q5_0 kernel ran at 10.9
/// GB/s with its weights in L2 with one, 13.8 without).
///
/// # Safety
/// As [`scales8`].
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scales8_at<const STRIDE: usize>(p: *const u8) -> __m256 {
    // Four scales to a general register, by shifts and ors, and two moves
    // into the vector, in place of eight `vpinsrw` and seven unpacks, all
    // on the one shuffle port of an Intel core (the four-row Q5_0 kernel,
    // weights in L2: 13.8 -> 15.0 GB/s).
    // SAFETY: the caller's contract.
    let quad = |k: usize| unsafe {
        (0..4).fold(0u64, |q, j| {
            q | (rd16(p.add((k + j) * STRIDE)) as u64) << (16 * j)
        })
    };
    _mm256_cvtph_ps(_mm_set_epi64x(quad(4) as i64, quad(0) as i64))
}

/// Products of the weight and activation scales of 8 consecutive blocks
/// (each product rounded as `h2f_prod` rounds it).
///
/// # Safety
/// As [`scales8`] for both `w` (blocks `wb` bytes apart) and `a` (Q8_0 blocks).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scale_products8(w: *const u8, wb: usize, a: *const u8) -> [f32; 8] {
    // SAFETY: the caller's contract.
    let (dw, da) = unsafe { (scales8(w, wb), scales8(a, BlockQ8_0::BYTES)) };
    let mut out = [0.0f32; 8];
    // SAFETY: `out` holds 8 floats.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), _mm256_mul_ps(dw, da)) };
    out
}

/// Reads an f32 at `p`.
///
/// # Safety
/// `p` must be valid for 4 bytes.
#[inline]
unsafe fn rf32(p: *const u8) -> f32 {
    // SAFETY: caller guarantees 4 readable bytes; unaligned read.
    unsafe { std::ptr::read_unaligned(p as *const f32) }
}

/// The sum of eight f32 lanes, in the float kernels' fixed order (that of
/// `scalar::hsum8`).
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(crate) fn hsum_ps(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// The exact sum of eight i32 lanes (K-quant blocks reduce their integer
/// sums before any rounding, as the scalar reference does).
#[inline]
#[target_feature(enable = "avx2")]
fn hsum_epi32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
    _mm_cvtsi128_si32(s)
}

/// Loads 32 bytes.
///
/// # Safety
/// `p` must be valid for 32 bytes.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn load32(p: *const u8) -> __m256i {
    // SAFETY: caller guarantees 32 readable bytes; loadu has no alignment need.
    unsafe { _mm256_loadu_si256(p as *const __m256i) }
}

/// Loads 16 bytes.
///
/// # Safety
/// `p` must be valid for 16 bytes.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn load16(p: *const u8) -> __m128i {
    // SAFETY: caller guarantees 16 readable bytes; loadu has no alignment need.
    unsafe { _mm_loadu_si128(p as *const __m128i) }
}

/// Sums of four u8*i8 products per i32 lane (AVX2: maddubs then madd with ones).
#[inline]
#[target_feature(enable = "avx2")]
fn dot4_avx2(u: __m256i, s: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1))
}

/// Sums of four u8*i8 products per i32 lane (AVX-VNNI).
#[inline]
#[target_feature(enable = "avx2,avxvnni")]
fn dot4_avxvnni(u: __m256i, s: __m256i) -> __m256i {
    _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s)
}

/// Unpacks 16 bytes of nibbles: low nibbles to bytes 0..16, high ones to 16..32.
#[inline]
#[target_feature(enable = "avx2")]
fn nibbles32(q: __m128i) -> __m256i {
    let m = _mm_set1_epi8(0x0F);
    let lo = _mm_and_si128(q, m);
    let hi = _mm_and_si128(_mm_srli_epi16(q, 4), m);
    _mm256_set_m128i(hi, lo)
}

/// Expands 32 bits to 32 bytes: 0xFF where bit j is set, else 0.
#[inline]
#[target_feature(enable = "avx2")]
fn bits_to_bytes(x: u32) -> __m256i {
    let shuf = _mm256_set_epi64x(
        0x0303030303030303,
        0x0202020202020202,
        0x0101010101010101,
        0x0000000000000000,
    );
    let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(x as i32), shuf);
    let mask = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe_u64 as i64);
    _mm256_cmpeq_epi8(_mm256_or_si256(bytes, mask), _mm256_set1_epi64x(-1))
}

/// [`nibbles32`] of the 16 bytes at `p`, through a 128-bit broadcast load
/// and one variable shift (two instructions besides the load, against four).
///
/// # Safety
/// `p` must be valid for 16 bytes.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn nibbles32_at(p: *const u8) -> __m256i {
    // SAFETY: caller guarantees 16 readable bytes.
    let q = unsafe { _mm256_broadcastsi128_si256(load16(p)) };
    // The high half shifts right by 4 within each dword: each byte's high
    // nibble lands in its low nibble (the next byte's bits go above it).
    let shifted = _mm256_srlv_epi32(q, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4));
    _mm256_and_si256(shifted, _mm256_set1_epi8(0x0F))
}

/// [`dot4_avx2`] added to `c`.
#[inline]
#[target_feature(enable = "avx2")]
fn dot4acc_avx2(c: __m256i, u: __m256i, s: __m256i) -> __m256i {
    _mm256_add_epi32(c, dot4_avx2(u, s))
}

/// [`dot4_avxvnni`] added to `c`: one `vpdpbusd`.
#[inline]
#[target_feature(enable = "avx2,avxvnni")]
fn dot4acc_avxvnni(c: __m256i, u: __m256i, s: __m256i) -> __m256i {
    _mm256_dpbusd_avx_epi32(c, u, s)
}

/// Sums of four u8*i8 products per i32 lane (AVX-512 VNNI on 256 bits).
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512vl,avx512vnni")]
fn dot4_avx512vl(u: __m256i, s: __m256i) -> __m256i {
    _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s)
}

/// [`dot4_avx512vl`] added to `c`: one `vpdpbusd`.
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512vl,avx512vnni")]
fn dot4acc_avx512vl(c: __m256i, u: __m256i, s: __m256i) -> __m256i {
    _mm256_dpbusd_epi32(c, u, s)
}

/// A Q5_0 block's 32 values plus 16 (unsigned: nibble, and 16 for a set
/// fifth bit), from its `qh` bits at 2 and nibbles at 6.
///
/// # Safety
/// `bw` must be valid for a whole Q5_0 block.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn q5_0_unsigned_avx2(bw: *const u8) -> __m256i {
    // SAFETY: the block holds its `qh` bits and 16 bytes of nibbles.
    let (bits, nib) = unsafe {
        (
            bits_to_bytes(rd32(bw.add(at::Q5_0_QH))),
            nibbles32_at(bw.add(at::Q5_0_QS)),
        )
    };
    _mm256_or_si256(nib, _mm256_and_si256(bits, _mm256_set1_epi8(0x10)))
}

/// [`q5_0_unsigned_avx2`] with AVX-512BW/VL: the fifth bits are a byte mask
/// as they stand, so one masked add puts them in (two instructions against
/// the broadcast, shuffle, or, compare, and and or of the AVX2 form; the
/// Q5_0 four-row decode kernel is compute-bound on one core otherwise).
///
/// # Safety
/// `bw` must be valid for a whole Q5_0 block.
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
unsafe fn q5_0_unsigned_avx512vl(bw: *const u8) -> __m256i {
    // SAFETY: the block holds its `qh` bits and 16 bytes of nibbles.
    let (bits, q) = unsafe {
        (
            rd32(bw.add(at::Q5_0_QH)),
            _mm256_broadcastsi128_si256(load16(bw.add(at::Q5_0_QS))),
        )
    };
    let shifted = _mm256_srlv_epi32(q, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4));
    // (shifted & 0x0F) | fifth, in one `vpternlogd` (0xEA: A & B | C): a
    // masked add had compiled to an or and a masked move.
    let fifth = _mm256_maskz_mov_epi8(bits, _mm256_set1_epi8(0x10));
    _mm256_ternarylogic_epi32::<0xEA>(shifted, _mm256_set1_epi8(0x0F), fifth)
}

/// How far ahead of the block being multiplied the 32-block kernels
/// prefetch weights (a prefetch never faults, so past the row's end is fine).
const PREFETCH: usize = 8192;

/// Prefetches the 256-element block [`PREFETCH`] bytes after `p` (up to 210
/// bytes: four lines cover it wherever it starts).
#[inline(always)]
fn prefetch_block(p: *const u8) {
    for line in 0..4 {
        // SAFETY: a prefetch is a hint and never faults, whatever the address.
        unsafe {
            _mm_prefetch(
                p.wrapping_add(PREFETCH + 64 * line) as *const i8,
                _MM_HINT_T0,
            )
        };
    }
}

/// Generates the 32-block kernels for one i8 dot primitive and feature set.
///
/// Blocks go eight at a time where they can: the eight scale products come
/// from [`scale_products8`], then block `b` adds `d * dot` to chain `b % 2`,
/// in [`crate::scalar`]'s canonical order, so every tier gives the same bits
/// (and the two chains halve the FMA latency chain). Each block also
/// prefetches the weights [`PREFETCH`] bytes ahead: decode streams them once.
macro_rules! legacy_kernels {
    ($feat:literal, $dot4:ident, $q8_0:ident, $q4_0:ident, $q5_0:ident) => {
        legacy_kernels!(@one $feat, $dot4, $q8_0, BlockQ8_0, "Q8_0 · Q8_0.", |bw| {
            // SAFETY: the block holds its 32 `qs`.
            unsafe { load32(bw.add(at::Q8_0_QS)) }
        });
        legacy_kernels!(@one $feat, $dot4, $q4_0, BlockQ4_0, "Q4_0 · Q8_0.", |bw| {
            // SAFETY: the block holds 16 bytes of nibbles (`qs`).
            let q = unsafe { load16(bw.add(at::Q4_0_QS)) };
            _mm256_sub_epi8(nibbles32(q), _mm256_set1_epi8(8))
        });
        legacy_kernels!(@one $feat, $dot4, $q5_0, BlockQ5_0, "Q5_0 · Q8_0.", |bw| {
            // SAFETY: the block holds its `qh` bits and 16 bytes of nibbles.
            let (qh, q) = unsafe { (std::ptr::read_unaligned(bw.add(at::Q5_0_QH) as *const u32), load16(bw.add(at::Q5_0_QS))) };
            // Where the fifth bit is clear, or-ing 0xF0 makes the byte nibble-16.
            let hi = _mm256_andnot_si256(bits_to_bytes(qh), _mm256_set1_epi8(0xF0u8 as i8));
            _mm256_or_si256(nibbles32(q), hi)
        });
    };
    (@one $feat:literal, $dot4:ident, $name:ident, $block:ty, $doc:literal, |$bw:ident| $unpack:expr) => {
        #[doc = $doc]
        ///
        /// # Safety
        /// The features of `$feat` present.
        #[target_feature(enable = $feat)]
        pub(crate) unsafe fn $name(w: &[$block], a: &[BlockQ8_0]) -> f32 {
            const WB: usize = <$block>::BYTES;
            let nb = w.len().min(a.len());
            let (wp, ap) = (raw(w).as_ptr(), raw(a).as_ptr());
            let mut acc = [_mm256_setzero_ps(); 2];
            let mut i = 0;
            while i + 8 <= nb {
                // SAFETY: blocks i..i+8 are inside both slices (i + 8 <= nb).
                let dd = unsafe { scale_products8(wp.add(i * WB), WB, ap.add(i * BlockQ8_0::BYTES)) };
                for (k, &d) in dd.iter().enumerate() {
                    // SAFETY: block i + k is inside both slices.
                    let ($bw, ba) = unsafe { (wp.add((i + k) * WB), ap.add((i + k) * BlockQ8_0::BYTES)) };
                    _mm_prefetch($bw.wrapping_add(PREFETCH) as *const i8, _MM_HINT_T0);
                    let qx = $unpack;
                    // SAFETY: the activation block's 32 `qs`.
                    let qy = unsafe { load32(ba.add(at::Q8_0_QS)) };
                    // |x| as u8 and y carrying x's sign keep the product exact for u8*i8.
                    let p = $dot4(_mm256_sign_epi8(qx, qx), _mm256_sign_epi8(qy, qx));
                    acc[k % 2] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(p), acc[k % 2]);
                }
                i += 8;
            }
            for i in i..nb {
                // SAFETY: block i is inside both slices (i < nb).
                let ($bw, ba) = unsafe { (wp.add(i * WB), ap.add(i * BlockQ8_0::BYTES)) };
                _mm_prefetch($bw.wrapping_add(PREFETCH) as *const i8, _MM_HINT_T0);
                // SAFETY: as above; both blocks start with their f16 scale.
                let (d, qy) = unsafe { (h2f_prod(rd16($bw) | rd16(ba) << 16), load32(ba.add(at::Q8_0_QS))) };
                let qx = $unpack;
                let p = $dot4(_mm256_sign_epi8(qx, qx), _mm256_sign_epi8(qy, qx));
                acc[i % 2] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(p), acc[i % 2]);
            }
            hsum_ps(_mm256_add_ps(acc[0], acc[1]))
        }
    };
}

legacy_kernels!("avx2,fma,f16c", dot4_avx2, q8_0_avx2, q4_0_avx2, q5_0_avx2);
legacy_kernels!(
    "avx2,fma,f16c,avxvnni",
    dot4_avxvnni,
    q8_0_avxvnni,
    q4_0_avxvnni,
    q5_0_avxvnni
);

/// The lanes that spread a pair of blocks' scales over a 512-bit register
/// (through `vpermps` of eight blocks' scales): block `2k`'s in lanes 0..8,
/// block `2k + 1`'s in lanes 8..16.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni,avx512vl")]
fn pair_lanes(k: usize) -> __m512i {
    let (e, o) = (2 * k as i32, 2 * k as i32 + 1);
    _mm512_setr_epi32(e, e, e, e, e, e, e, e, o, o, o, o, o, o, o, o)
}

/// Prefetches the pair of `bytes`-byte blocks at `p` [`PREFETCH`] bytes
/// ahead: the lines of its first byte and of its last.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni,avx512vl")]
fn prefetch_pair(p: *const u8, bytes: usize) {
    _mm_prefetch(p.wrapping_add(PREFETCH) as *const i8, _MM_HINT_T0);
    _mm_prefetch(
        p.wrapping_add(PREFETCH + 2 * bytes - 1) as *const i8,
        _MM_HINT_T0,
    );
}

/// The 32 `qs` of the Q8_0 block at `ab` in the low half and, when `two`,
/// those of the block after it in the high half (zeros otherwise).
///
/// # Safety
/// `ab` must point at a whole Q8_0 block, and at two when `two`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni,avx512vl")]
unsafe fn q8_0_pair(ab: *const u8, two: bool) -> __m512i {
    // SAFETY: the caller's contract.
    unsafe {
        let lo = load32(ab.add(at::Q8_0_QS));
        let hi = if two {
            load32(ab.add(BlockQ8_0::BYTES + at::Q8_0_QS))
        } else {
            _mm256_setzero_si256()
        };
        _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
    }
}

/// The exact integer dots of two weight blocks, given as their magnitudes
/// `ux` and sign mask `neg`, with the two activation blocks `qy`: the
/// activations take the weights' signs, so each product is one `vpdpbusd`
/// term.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni,avx512vl")]
fn signed_pair_dot(ux: __m512i, neg: __mmask64, qy: __m512i) -> __m512i {
    let zero = _mm512_setzero_si512();
    let sy = _mm512_mask_sub_epi8(qy, neg, zero, qy);
    _mm512_dpbusd_epi32(zero, ux, sy)
}

/// The last one or two blocks of the one-row kernel's weights (at `p`,
/// `bytes` long) against the Q8_0 blocks at `ab`: the activations' `qs`
/// (zeros for a missing second block), and the scale products, the first
/// block's in lanes 0..8 and the second's in 8..16 (zero when missing),
/// each rounded as [`h2f_prod`] rounds it.
///
/// # Safety
/// `p` and `ab` must be valid for a whole block each, and for two when
/// `two`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni,avx512vl")]
unsafe fn tail_pair(p: *const u8, bytes: usize, ab: *const u8, two: bool) -> (__m512, __m512i) {
    // SAFETY: the caller's contract.
    unsafe {
        let lo = h2f_prod(rd16(p) | rd16(ab) << 16);
        let (hi, qy_hi) = if two {
            (
                h2f_prod(rd16(p.add(bytes)) | rd16(ab.add(BlockQ8_0::BYTES)) << 16),
                load32(ab.add(BlockQ8_0::BYTES + at::Q8_0_QS)),
            )
        } else {
            (0.0, _mm256_setzero_si256())
        };
        let qy =
            _mm512_inserti64x4::<1>(_mm512_castsi256_si512(load32(ab.add(at::Q8_0_QS))), qy_hi);
        let d = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(lo), _mm512_set1_ps(hi));
        (d, qy)
    }
}

/// One or two blocks' f16 scales (`bytes` apart from `p`) as f32, spread
/// over the half of the lanes each block fills: the first's in lanes 0..8,
/// the second's (zero unless `two`, as the one-row kernel's is) in 8..16.
///
/// # Safety
/// `p` must be valid for a block's scale, and for the next block's when
/// `two`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni,avx512vl")]
unsafe fn spread_pair_scales(p: *const u8, bytes: usize, two: bool) -> __m512 {
    let halves = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    // SAFETY: the caller's contract.
    let pair = unsafe { rd16(p) | if two { rd16(p.add(bytes)) << 16 } else { 0 } };
    _mm512_permutexvar_ps(halves, _mm512_castps128_ps512(h2f_pair(pair)))
}

/// Adds the dots of an activation block pair `qy` with four weight rows'
/// unsigned pairs `ux` (values `q + off`) into `acc[r]`, each scaled by
/// `dw[r] * da`: each dot starts from the offset's correction,
/// `-off * sum(qy)` per lane, so its integers are those of the signed
/// weights.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni,avx512vl")]
fn unsigned_pair_dots(
    qy: __m512i,
    off: __m512i,
    ux: &[__m512i; 4],
    dw: &[__m512; 4],
    da: __m512,
    acc: &mut [__m512; 4],
) {
    let zero = _mm512_setzero_si512();
    let corr = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, off, qy));
    for (r, acc) in acc.iter_mut().enumerate() {
        let dot = _mm512_dpbusd_epi32(corr, ux[r], qy);
        let d = _mm512_mul_ps(dw[r], da);
        *acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(dot), *acc);
    }
}

/// The sum of a 512-bit accumulator's sixteen lanes: its halves added,
/// then [`hsum_ps`]'s order.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni,avx512vl")]
fn hsum_zmm(v: __m512) -> f32 {
    let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
    hsum_ps(_mm256_add_ps(_mm512_castps512_ps256(v), hi))
}

/// The 32-block formats on 512-bit registers (AVX-512 BW and VNNI): two
/// blocks per register, the fifth bits of Q5_0 applied through a byte mask,
/// and `N` activation rows per weight row. The one-row kernels and the
/// four-row tiles are the same code, so they give the same sums to the bit:
/// a batched decode step matches decoding each sequence alone.
macro_rules! zmm_kernels {
    ($rows:ident, $one:ident, $four:ident, $t44:ident, $block:ty, $doc:literal, |$p:ident, $two:ident| $unpack:expr, unsigned $off:literal |$up:ident, $utwo:ident| $uunpack:expr) => {
        #[doc = $doc]
        ///
        /// # Safety
        /// AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C present; `w` holds `nb`
        /// blocks and each `a[c]` `nb` Q8_0 blocks.
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni,avx512vl")]
        unsafe fn $rows<const N: usize>(w: *const u8, a: [*const u8; N], nb: usize) -> [f32; N] {
            let mut acc = [_mm512_setzero_ps(); N];
            let mut i = 0;
            while i + 8 <= nb {
                // SAFETY: (loop body) blocks i..i+8 lie inside every row.
                unsafe {
                    let dw = scales8(w.add(i * <$block>::BYTES), <$block>::BYTES);
                    let dd: [__m512; N] = std::array::from_fn(|c| {
                        _mm512_castps256_ps512(_mm256_mul_ps(
                            dw,
                            scales8(a[c].add(i * BlockQ8_0::BYTES), BlockQ8_0::BYTES),
                        ))
                    });
                    for k in 0..4 {
                        let b = i + 2 * k;
                        let $p = w.add(b * <$block>::BYTES);
                        let $two = true;
                        prefetch_pair($p, <$block>::BYTES);
                        let qx: __m512i = $unpack;
                        let (ux, neg) = (_mm512_abs_epi8(qx), _mm512_movepi8_mask(qx));
                        let lanes = pair_lanes(k);
                        for c in 0..N {
                            let qy = q8_0_pair(a[c].add(b * BlockQ8_0::BYTES), true);
                            let dot = signed_pair_dot(ux, neg, qy);
                            let d = _mm512_permutexvar_ps(lanes, dd[c]);
                            acc[c] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(dot), acc[c]);
                        }
                    }
                }
                i += 8;
            }
            while i < nb {
                let two = i + 1 < nb;
                // SAFETY: (loop body) block i, and block i + 1 when `two`,
                // lie inside every row; nothing past them is read.
                unsafe {
                    let $p = w.add(i * <$block>::BYTES);
                    let $two = two;
                    let qx: __m512i = $unpack;
                    let (ux, neg) = (_mm512_abs_epi8(qx), _mm512_movepi8_mask(qx));
                    for c in 0..N {
                        let ab = a[c].add(i * BlockQ8_0::BYTES);
                        let (d, qy) = tail_pair($p, <$block>::BYTES, ab, two);
                        let dot = signed_pair_dot(ux, neg, qy);
                        acc[c] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(dot), acc[c]);
                    }
                }
                i += if two { 2 } else { 1 };
            }
            acc.map(|v| hsum_zmm(v))
        }

        #[doc = $doc]
        ///
        /// # Safety
        /// AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C present.
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni,avx512vl")]
        pub(crate) unsafe fn $one(w: &[$block], a: &[BlockQ8_0]) -> f32 {
            let nb = w.len().min(a.len());
            // SAFETY: both hold `nb` blocks.
            unsafe { $rows::<1>(raw(w).as_ptr(), [raw(a).as_ptr()], nb)[0] }
        }

        #[doc = $doc]
        /// Four activation rows `stride` blocks apart.
        ///
        /// # Safety
        /// AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C present.
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni,avx512vl")]
        pub(crate) unsafe fn $four(
            w: &[$block],
            a: &[BlockQ8_0],
            stride: usize,
            _scales: &[f32],
        ) -> [f32; 4] {
            let nb = w.len();
            check_rows(a.len(), 4, stride, nb);
            let ap = raw(a).as_ptr();
            // SAFETY: four rows of `nb` blocks (checked).
            unsafe { $rows::<4>(raw(w).as_ptr(), std::array::from_fn(|c| ap.add(c * stride * BlockQ8_0::BYTES)), nb) }
        }

        #[doc = $doc]
        /// Four weight rows `w_stride` blocks apart times four activation
        /// rows `stride` blocks apart, `out[c][r]` for activation row `c` and weight row
        /// `r`: each the one-row kernel's result to the bit.
        ///
        /// The weights are unpacked unsigned (`q + off`) instead of moving
        /// their signs onto the activations, so an activation block is
        /// loaded once for the four weight rows and each pair costs one
        /// `vpdpbusd`, which starts from `-off * sum(a)` per lane (computed
        /// once per activation block): the lane sums are the same integers.
        /// A missing odd block meets zero activations, so whatever its
        /// weights unpack to, its lanes sum to zero.
        ///
        /// # Safety
        /// AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C present.
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni,avx512vl")]
        pub(crate) unsafe fn $t44(
            w: &[$block],
            w_stride: usize,
            a: &[BlockQ8_0],
            stride: usize,
            nb: usize,
        ) -> [[f32; 4]; 4] {
            check_rows(w.len(), 4, w_stride, nb);
            check_rows(a.len(), 4, stride, nb);
            let (row_bytes, stride) = (w_stride * <$block>::BYTES, stride * BlockQ8_0::BYTES);
            let wr: [*const u8; 4] =
                // SAFETY: rows 0..4 of both start inside their slices (checked).
                std::array::from_fn(|r| unsafe { raw(w).as_ptr().add(r * row_bytes) });
            // SAFETY: as above.
            let ar: [*const u8; 4] = std::array::from_fn(|c| unsafe { raw(a).as_ptr().add(c * stride) });
            let off = _mm512_set1_epi8($off as u8 as i8);
            // acc[c][r]: lanes 0..8 chain of the even blocks, 8..16 the odd.
            let mut acc = [[_mm512_setzero_ps(); 4]; 4];
            let mut i = 0;
            while i + 8 <= nb {
                // SAFETY: (loop body) blocks i..i+8 lie inside every row.
                unsafe {
                    let dw: [__m256; 4] =
                        std::array::from_fn(|r| scales8_at::<{ <$block>::BYTES }>(wr[r].add(i * <$block>::BYTES)));
                    let da: [__m256; 4] = std::array::from_fn(|c| {
                        scales8_at::<{ BlockQ8_0::BYTES }>(ar[c].add(i * BlockQ8_0::BYTES))
                    });
                    for k in 0..4 {
                        let b = i + 2 * k;
                        let lanes = pair_lanes(k);
                        let ux: [__m512i; 4] = std::array::from_fn(|r| {
                            let $up = wr[r].add(b * <$block>::BYTES);
                            let $utwo = true;
                            prefetch_pair($up, <$block>::BYTES);
                            $uunpack
                        });
                        // The product of two scales is the same float
                        // whichever is permuted first.
                        let dwk: [__m512; 4] = std::array::from_fn(|r| {
                            _mm512_permutexvar_ps(lanes, _mm512_castps256_ps512(dw[r]))
                        });
                        for c in 0..4 {
                            let qy = q8_0_pair(ar[c].add(b * BlockQ8_0::BYTES), true);
                            let dak = _mm512_permutexvar_ps(lanes, _mm512_castps256_ps512(da[c]));
                            unsigned_pair_dots(qy, off, &ux, &dwk, dak, &mut acc[c]);
                        }
                    }
                }
                i += 8;
            }
            while i < nb {
                let two = i + 1 < nb;
                // SAFETY: (loop body) block i, and block i + 1 when `two`,
                // lie inside every row; nothing past them is read.
                unsafe {
                    let dw: [__m512; 4] = std::array::from_fn(|r| {
                        spread_pair_scales(wr[r].add(i * <$block>::BYTES), <$block>::BYTES, two)
                    });
                    let ux: [__m512i; 4] = std::array::from_fn(|r| {
                        let $up = wr[r].add(i * <$block>::BYTES);
                        let $utwo = two;
                        $uunpack
                    });
                    for c in 0..4 {
                        let ab = ar[c].add(i * BlockQ8_0::BYTES);
                        let da = spread_pair_scales(ab, BlockQ8_0::BYTES, two);
                        unsigned_pair_dots(q8_0_pair(ab, two), off, &ux, &dw, da, &mut acc[c]);
                    }
                }
                i += if two { 2 } else { 1 };
            }
            acc.map(|row| row.map(|v| hsum_zmm(v)))
        }
    };
}

zmm_kernels!(
    rows_q8_0,
    q8_0_avx512,
    q8_0_x4_avx512,
    q8_0_t44_avx512,
    BlockQ8_0,
    "Q8_0 · Q8_0, two blocks per 512-bit register.",
    |p, two| {
        let hi = if two {
            load32(p.add(BlockQ8_0::BYTES + at::Q8_0_QS))
        } else {
            _mm256_setzero_si256()
        };
        _mm512_inserti64x4::<1>(_mm512_castsi256_si512(load32(p.add(at::Q8_0_QS))), hi)
    },
    // q + 128: the sign bit flipped.
    unsigned 128 |p, two| {
        let hi = if two {
            load32(p.add(BlockQ8_0::BYTES + at::Q8_0_QS))
        } else {
            _mm256_setzero_si256()
        };
        let q = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(load32(p.add(at::Q8_0_QS))), hi);
        _mm512_xor_si512(q, _mm512_set1_epi8(0x80u8 as i8))
    }
);
zmm_kernels!(
    rows_q4_0,
    q4_0_avx512,
    q4_0_x4_avx512,
    q4_0_t44_avx512,
    BlockQ4_0,
    "Q4_0 · Q8_0, two blocks per 512-bit register.",
    |p, two| {
        let qb = if two {
            load16(p.add(BlockQ4_0::BYTES + at::Q4_0_QS))
        } else {
            _mm_setzero_si128()
        };
        let nib = zmm_nibbles(_mm256_set_m128i(qb, load16(p.add(at::Q4_0_QS))));
        let valid: __mmask64 = if two { !0 } else { 0xFFFF_FFFF };
        _mm512_maskz_sub_epi8(valid, nib, _mm512_set1_epi8(8))
    },
    // The nibbles as they are stored: q + 8.
    unsigned 8 |p, two| {
        let qb = if two {
            load16(p.add(BlockQ4_0::BYTES + at::Q4_0_QS))
        } else {
            _mm_setzero_si128()
        };
        zmm_nibbles(_mm256_set_m128i(qb, load16(p.add(at::Q4_0_QS))))
    }
);
zmm_kernels!(
    rows_q5_0,
    q5_0_avx512,
    q5_0_x4_avx512,
    q5_0_t44_avx512,
    BlockQ5_0,
    "Q5_0 · Q8_0, two blocks per 512-bit register.",
    |p, two| {
        let (qb, hb) = if two {
            (load16(p.add(BlockQ5_0::BYTES + at::Q5_0_QS)), rd32(p.add(BlockQ5_0::BYTES + at::Q5_0_QH)) as u64)
        } else {
            (_mm_setzero_si128(), 0)
        };
        let nib = zmm_nibbles(_mm256_set_m128i(qb, load16(p.add(at::Q5_0_QS))));
        let high: __mmask64 = rd32(p.add(at::Q5_0_QH)) as u64 | hb << 32;
        let valid: __mmask64 = if two { !0 } else { 0xFFFF_FFFF };
        // Where the fifth bit is clear the value is nibble - 16.
        _mm512_maskz_mov_epi8(
            valid,
            _mm512_mask_sub_epi8(nib, !high, nib, _mm512_set1_epi8(16)),
        )
    },
    // q + 16: the nibble, plus 16 where the fifth bit is set.
    unsigned 16 |p, two| {
        let (qb, hb) = if two {
            (load16(p.add(BlockQ5_0::BYTES + at::Q5_0_QS)), rd32(p.add(BlockQ5_0::BYTES + at::Q5_0_QH)) as u64)
        } else {
            (_mm_setzero_si128(), 0)
        };
        let nib = zmm_nibbles(_mm256_set_m128i(qb, load16(p.add(at::Q5_0_QS))));
        let high: __mmask64 = rd32(p.add(at::Q5_0_QH)) as u64 | hb << 32;
        _mm512_mask_add_epi8(nib, high, nib, _mm512_set1_epi8(16))
    }
);

/// Two blocks' 16 bytes of nibbles (block A low, B high) to 64 bytes: A's low
/// nibbles, A's high nibbles, then B's.
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512bw")]
fn zmm_nibbles(t: __m256i) -> __m512i {
    let m = _mm256_set1_epi8(0x0F);
    let lo = _mm256_and_si256(t, m);
    let hi = _mm256_and_si256(_mm256_srli_epi16(t, 4), m);
    // 128-bit lanes [loA, loB, hiA, hiB] reordered to [loA, hiA, loB, hiB].
    let z = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi);
    _mm512_shuffle_i64x2::<0b11_01_10_00>(z, z)
}

/// Sum over sub-blocks of min[j] * (bsums[2j] + bsums[2j+1]) for Q4_K/Q5_K:
/// one `vpmaddwd` of the 16 block sums against each min twice.
///
/// # Safety
/// `ba` must point at a whole Q8_K block.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn k4_min_dot(mins: [u8; K_SUB_BLOCKS], ba: *const u8) -> i32 {
    let m = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(i64::from_le_bytes(mins)));
    let twice = _mm256_set_m128i(_mm_unpackhi_epi16(m, m), _mm_unpacklo_epi16(m, m));
    // SAFETY: the block holds its 16 i16 `bsums`.
    let bsums = unsafe { load32(ba.add(at::Q8K_BSUMS)) };
    hsum_epi32(_mm256_madd_epi16(bsums, twice))
}

/// The 8 sub-block scales of a Q4_K/Q5_K block, each as an i16 pair in one
/// dword, for [`k4_scale`].
#[inline]
#[target_feature(enable = "avx2")]
fn k4_scales(sc: [u8; K_SUB_BLOCKS]) -> [i32; K_SUB_BLOCKS] {
    let s = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(i64::from_le_bytes(sc)));
    let mut pairs = [0i32; 8];
    let both = _mm256_set_m128i(_mm_unpackhi_epi16(s, s), _mm_unpacklo_epi16(s, s));
    // SAFETY: `pairs` holds 32 bytes.
    unsafe { _mm256_storeu_si256(pairs.as_mut_ptr() as *mut __m256i, both) };
    // Opaque, so that the broadcasts stay loads: seeing the values, LLVM
    // rebuilt each one with a shift and a register broadcast.
    std::hint::black_box(pairs)
}

/// The `vpshufb` control that copies i16 lane `i` (of a 128-bit half) into
/// every i16 lane of that half.
#[inline(always)]
fn i16_lane(i: usize) -> i16 {
    (((2 * i + 1) << 8) | (2 * i)) as i16
}

/// Scale `i` of [`k4_scales`] in every i16 lane: a broadcast load, which
/// takes no shuffle port (a byte shuffle per sub-block had compiled to a
/// shift and a broadcast, two shuffle-port instructions, 16 per block).
#[inline]
#[target_feature(enable = "avx2")]
fn k4_scale(pairs: &[i32; 8], i: usize) -> __m256i {
    _mm256_set1_epi32(pairs[i])
}

/// `acc + madd(p, s)` for the K-quant kernels: i16 products of `vpmaddubsw`
/// times i16 scales, pairs summed into the i32 lanes of `acc`.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn mac_avx2(acc: __m256i, p: __m256i, s: __m256i) -> __m256i {
    _mm256_add_epi32(acc, _mm256_madd_epi16(p, s))
}

/// [`mac_avx2`] as one AVX-VNNI `vpdpwssd` (the same sums).
#[inline]
#[target_feature(enable = "avx2,avxvnni")]
pub(super) fn mac_avxvnni(acc: __m256i, p: __m256i, s: __m256i) -> __m256i {
    _mm256_dpwssd_avx_epi32(acc, p, s)
}

/// [`mac_avx2`] as one AVX-512 VNNI `vpdpwssd` on 256 bits.
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512vl,avx512vnni")]
pub(super) fn mac_avx512vl(acc: __m256i, p: __m256i, s: __m256i) -> __m256i {
    _mm256_dpwssd_epi32(acc, p, s)
}

/// Generates the Q4_K, Q5_K and Q6_K decode kernels for one
/// multiply-accumulate primitive ([`mac_avx2`] and its VNNI forms, which
/// fuse the scale's multiply-add with the add and give the same integers,
/// so every tier's bits are the same). Each block's sums run in two chains
/// (`lo`, `hi`), so that a fused `vpdpwssd` does not wait on the last.
macro_rules! kquant_kernels {
    ($feat:literal, $mac:ident, $k4:ident, $k6:ident, $q4k:ident, $q5k:ident, $q6k:ident, $q4kx4:ident, $q5kx4:ident, $q6kx4:ident) => {
        /// Q4_K · Q8_K.
        ///
        /// # Safety
        /// The features of `$feat` present.
        #[target_feature(enable = $feat)]
        pub(crate) unsafe fn $q4k(w: &[BlockQ4K], a: &[BlockQ8K]) -> f32 {
            let nb = w.len().min(a.len());
            let (w, a) = (raw(w), raw(a));
            // SAFETY: both hold `nb` blocks.
            unsafe { $k4::<{ BlockQ4K::BYTES }, false, 1>(w.as_ptr(), [a.as_ptr()], nb)[0] }
        }

        /// Q4_K · Q8_K, four activation rows `stride` blocks apart.
        ///
        /// # Safety
        /// The features of `$feat` present.
        #[target_feature(enable = $feat)]
        pub(crate) unsafe fn $q4kx4(
            w: &[BlockQ4K],
            a: &[BlockQ8K],
            stride: usize,
            _scales: &[f32],
        ) -> [f32; 4] {
            let nb = w.len();
            check_rows(a.len(), 4, stride, nb);
            let (w, a, stride) = (raw(w), raw(a), stride * BlockQ8K::BYTES);
            // SAFETY: four activation rows of `nb` blocks (checked).
            unsafe {
                $k4::<{ BlockQ4K::BYTES }, false, 4>(
                    w.as_ptr(),
                    std::array::from_fn(|c| a.as_ptr().add(c * stride)),
                    nb,
                )
            }
        }

        /// Q5_K · Q8_K.
        ///
        /// # Safety
        /// The features of `$feat` present.
        #[target_feature(enable = $feat)]
        pub(crate) unsafe fn $q5k(w: &[BlockQ5K], a: &[BlockQ8K]) -> f32 {
            let nb = w.len().min(a.len());
            let (w, a) = (raw(w), raw(a));
            // SAFETY: both hold `nb` blocks.
            unsafe { $k4::<{ BlockQ5K::BYTES }, true, 1>(w.as_ptr(), [a.as_ptr()], nb)[0] }
        }

        /// Q5_K · Q8_K, four activation rows `stride` blocks apart.
        ///
        /// # Safety
        /// The features of `$feat` present.
        #[target_feature(enable = $feat)]
        pub(crate) unsafe fn $q5kx4(
            w: &[BlockQ5K],
            a: &[BlockQ8K],
            stride: usize,
            _scales: &[f32],
        ) -> [f32; 4] {
            let nb = w.len();
            check_rows(a.len(), 4, stride, nb);
            let (w, a, stride) = (raw(w), raw(a), stride * BlockQ8K::BYTES);
            // SAFETY: four activation rows of `nb` blocks (checked).
            unsafe {
                $k4::<{ BlockQ5K::BYTES }, true, 4>(
                    w.as_ptr(),
                    std::array::from_fn(|c| a.as_ptr().add(c * stride)),
                    nb,
                )
            }
        }

        /// Q4_K (`FIVE` false, `WB` its block's bytes) or Q5_K (`FIVE` true) ·
        /// Q8_K: the two share scales, minimums and nibbles; Q5_K adds 16
        /// where a value's fifth bit (32 bytes at 16) is set, and its
        /// nibbles start at 48 instead of 16. `N` activation rows share each
        /// weight block's unpacking; each row's sums are the one-row
        /// kernel's, in its order, so every result is the same bits.
        ///
        /// # Safety
        /// `w` holds `nb` blocks of `WB` bytes and each `a[c]` `nb` Q8_K blocks.
        #[inline]
        #[target_feature(enable = $feat)]
        unsafe fn $k4<const WB: usize, const FIVE: bool, const N: usize>(
            w: *const u8,
            a: [*const u8; N],
            nb: usize,
        ) -> [f32; N] {
            let qs = if FIVE { at::Q5K_QS } else { at::Q4K_QS };
            let mut sumf = [0.0f32; N];
            let m4 = _mm256_set1_epi8(0x0F);
            let b4 = _mm256_set1_epi8(0x10);
            for i in 0..nb {
                // SAFETY: block i of the weights and of every activation row
                // is inside them (the caller's contract).
                let (bw, bas): (*const u8, [*const u8; N]) = unsafe {
                    (
                        w.add(i * WB),
                        std::array::from_fn(|c| a[c].add(i * BlockQ8K::BYTES)),
                    )
                };
                prefetch_block(bw);
                // SAFETY: `bw` points at a whole Q4_K/Q5_K block (alignment 1).
                let (sc, mins) = crate::formats::kquants::scales_mins_k4(unsafe {
                    &(*(bw as *const BlockQ4K)).scales
                });
                // SAFETY: d, dmin at 0 and 2 of the weight block.
                let dd = unsafe { h2f_pair(rd32(bw)) };
                let (d, dmin) = (_mm_cvtss_f32(dd), _mm_cvtss_f32(_mm_movehdup_ps(dd)));
                let scales = k4_scales(sc);
                let qh = if FIVE {
                    // SAFETY: Q5_K's 32 bytes of `qh`.
                    unsafe { load32(bw.add(at::Q5K_QH)) }
                } else {
                    _mm256_setzero_si256()
                };
                let (mut lo, mut hi) = ([_mm256_setzero_si256(); N], [_mm256_setzero_si256(); N]);
                for j in 0..4 {
                    // SAFETY: the block's 128 bytes of nibbles from `qs` (32 per j).
                    let q = unsafe { load32(bw.add(qs + 32 * j)) };
                    let mut ql = _mm256_and_si256(q, m4);
                    let mut qu = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                    if FIVE {
                        let ml = _mm256_set1_epi8((1u8 << (2 * j)) as i8);
                        let mh = _mm256_set1_epi8((1u8 << (2 * j + 1)) as i8);
                        let hl = _mm256_cmpeq_epi8(_mm256_and_si256(qh, ml), ml);
                        let hh = _mm256_cmpeq_epi8(_mm256_and_si256(qh, mh), mh);
                        ql = _mm256_or_si256(ql, _mm256_and_si256(hl, b4));
                        qu = _mm256_or_si256(qu, _mm256_and_si256(hh, b4));
                    }
                    for c in 0..N {
                        // SAFETY: the Q8_K block's 256 `qs` (64 per j).
                        let (q8l, q8h) = unsafe {
                            (
                                load32(bas[c].add(at::Q8K_QS + 64 * j)),
                                load32(bas[c].add(at::Q8K_QS + 32 + 64 * j)),
                            )
                        };
                        // 2 * 31 * 128 < 2^15: `vpmaddubsw` cannot saturate.
                        lo[c] = $mac(
                            lo[c],
                            _mm256_maddubs_epi16(ql, q8l),
                            k4_scale(&scales, 2 * j),
                        );
                        hi[c] = $mac(
                            hi[c],
                            _mm256_maddubs_epi16(qu, q8h),
                            k4_scale(&scales, 2 * j + 1),
                        );
                    }
                }
                for c in 0..N {
                    // SAFETY: whole Q8_K block; its d f32 at 0.
                    let (msum, dy) = unsafe { (k4_min_dot(mins, bas[c]), rf32(bas[c])) };
                    let sumi = _mm256_add_epi32(lo[c], hi[c]);
                    sumf[c] += crate::scalar::kquant_block(d, dmin, dy, hsum_epi32(sumi), msum);
                }
            }
            sumf
        }

        /// Q6_K · Q8_K.
        ///
        /// # Safety
        /// The features of `$feat` present.
        #[target_feature(enable = $feat)]
        pub(crate) unsafe fn $q6k(w: &[BlockQ6K], a: &[BlockQ8K]) -> f32 {
            let nb = w.len().min(a.len());
            let (w, a) = (raw(w), raw(a));
            // SAFETY: the caller's contract.
            unsafe { $k6::<1>(w.as_ptr(), [a.as_ptr()], nb)[0] }
        }

        /// Q6_K · Q8_K, four activation rows `stride` blocks apart.
        ///
        /// # Safety
        /// The features of `$feat` present.
        #[target_feature(enable = $feat)]
        pub(crate) unsafe fn $q6kx4(
            w: &[BlockQ6K],
            a: &[BlockQ8K],
            stride: usize,
            _scales: &[f32],
        ) -> [f32; 4] {
            let nb = w.len();
            check_rows(a.len(), 4, stride, nb);
            let (w, a, stride) = (raw(w), raw(a), stride * BlockQ8K::BYTES);
            // SAFETY: four activation rows of `nb` blocks (checked).
            unsafe {
                $k6::<4>(
                    w.as_ptr(),
                    std::array::from_fn(|c| a.as_ptr().add(c * stride)),
                    nb,
                )
            }
        }

        /// Q6_K · Q8_K for `N` activation rows sharing each weight block's
        /// unpacking; each row's sums are the one-row kernel's, in its order.
        ///
        /// # Safety
        /// `w` holds `nb` Q6_K blocks and each `a[c]` `nb` Q8_K blocks.
        #[inline]
        #[target_feature(enable = $feat)]
        unsafe fn $k6<const N: usize>(w: *const u8, a: [*const u8; N], nb: usize) -> [f32; N] {
            let mut sumf = [0.0f32; N];
            let m4 = _mm256_set1_epi8(0x0F);
            for i in 0..nb {
                // SAFETY: block i of the weights and of every activation row
                // is inside them (the caller's contract).
                let (bw, bas): (*const u8, [*const u8; N]) = unsafe {
                    (
                        w.add(i * BlockQ6K::BYTES),
                        std::array::from_fn(|c| a[c].add(i * BlockQ8K::BYTES)),
                    )
                };
                prefetch_block(bw);
                // SAFETY: the block's 16 i8 `scales`.
                let sc = unsafe { _mm256_cvtepi8_epi16(load16(bw.add(at::Q6K_SCALES))) };
                // Scales 0..8 and 8..16 each in both 128-bit halves, for a
                // per-half byte shuffle to pick one scale for each half.
                let halves = [
                    _mm256_permute2x128_si256::<0x00>(sc, sc),
                    _mm256_permute2x128_si256::<0x11>(sc, sc),
                ];
                // SAFETY: Q6_K's `d` is the upper half of the u32 before its end (a 4-byte
                // read ending exactly at the block's end).
                let d = unsafe {
                    _mm_cvtss_f32(_mm_movehdup_ps(h2f_pair(rd32(bw.add(at::Q6K_D - 2)))))
                };
                let (mut lo, mut hi) = ([_mm256_setzero_si256(); N], [_mm256_setzero_si256(); N]);
                for (n, &half) in halves.iter().enumerate() {
                    // SAFETY: the block's `ql` (64 bytes per n) and `qh` (32 per n).
                    let (ql1, ql2, qh) = unsafe {
                        (
                            load32(bw.add(at::Q6K_QL + 64 * n)),
                            load32(bw.add(at::Q6K_QL + 64 * n + 32)),
                            load32(bw.add(at::Q6K_QH + 32 * n)),
                        )
                    };
                    let q = [
                        _mm256_or_si256(
                            _mm256_and_si256(ql1, m4),
                            _mm256_slli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(0x03)), 4),
                        ),
                        _mm256_or_si256(
                            _mm256_and_si256(ql2, m4),
                            _mm256_slli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(0x0C)), 2),
                        ),
                        _mm256_or_si256(
                            _mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                            _mm256_and_si256(qh, _mm256_set1_epi8(0x30)),
                        ),
                        _mm256_or_si256(
                            _mm256_and_si256(_mm256_srli_epi16(ql2, 4), m4),
                            _mm256_srli_epi16(
                                _mm256_and_si256(qh, _mm256_set1_epi8(0xC0u8 as i8)),
                                2,
                            ),
                        ),
                    ];
                    for (k, &qk) in q.iter().enumerate() {
                        // Low half: scale 2k of these eight; high half: 2k + 1.
                        let s = _mm256_shuffle_epi8(
                            half,
                            _mm256_set_m128i(
                                _mm_set1_epi16(i16_lane(2 * k + 1)),
                                _mm_set1_epi16(i16_lane(2 * k)),
                            ),
                        );
                        for c in 0..N {
                            // SAFETY: the Q8_K block's `qs` (128 per n, 32 per k).
                            let q8 = unsafe { load32(bas[c].add(at::Q8K_QS + 128 * n + 32 * k)) };
                            // u <= 63 against |a| <= 127: a pair sums to at most 16002.
                            let p = _mm256_maddubs_epi16(qk, q8);
                            let acc = if k % 2 == 0 { &mut lo[c] } else { &mut hi[c] };
                            *acc = $mac(*acc, p, s);
                        }
                    }
                }
                for c in 0..N {
                    // SAFETY: the Q8_K block's `d` (first) and its 16 i16 `bsums`.
                    let (dy, bsums) = unsafe { (rf32(bas[c]), load32(bas[c].add(at::Q8K_BSUMS))) };
                    // Values are stored +32: sum(sc * u * a) over the block, less
                    // 32 * sum(sc * bsum), is the block's exact sum(sc * q * a).
                    let offset = 32 * hsum_epi32(_mm256_madd_epi16(sc, bsums));
                    let sumi = _mm256_add_epi32(lo[c], hi[c]);
                    // Q6_K has no minimums: the reference's zero term is kept so the
                    // bits agree even where a block sums to zero.
                    sumf[c] +=
                        crate::scalar::kquant_block(d, 0.0, dy, hsum_epi32(sumi) - offset, 0);
                }
            }
            sumf
        }
    };
}

kquant_kernels!(
    "avx2,fma,f16c",
    mac_avx2,
    k4_avx2,
    k6_avx2,
    q4_k_avx2,
    q5_k_avx2,
    q6_k_avx2,
    q4_k_x4_avx2,
    q5_k_x4_avx2,
    q6_k_x4_avx2
);
kquant_kernels!(
    "avx2,fma,f16c,avxvnni",
    mac_avxvnni,
    k4_avxvnni,
    k6_avxvnni,
    q4_k_avxvnni,
    q5_k_avxvnni,
    q6_k_avxvnni,
    q4_k_x4_avxvnni,
    q5_k_x4_avxvnni,
    q6_k_x4_avxvnni
);
kquant_kernels!(
    "avx2,fma,f16c,avx512f,avx512vl,avx512vnni",
    mac_avx512vl,
    k4_avx512vl,
    k6_avx512vl,
    q4_k_avx512vl,
    q5_k_avx512vl,
    q6_k_avx512vl,
    q4_k_x4_avx512vl,
    q5_k_x4_avx512vl,
    q6_k_x4_avx512vl
);

/// F32 · F32.
///
/// # Safety
/// AVX2, FMA and F16C present.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn f32_avx2(w: &[F32Le], x: &[f32]) -> f32 {
    float_dot(
        raw(w),
        x,
        w.len(),
        4,
        |p| {
            // SAFETY: `float_dot` passes pointers to 8 whole elements.
            unsafe { _mm256_loadu_ps(p as *const f32) }
        },
        crate::formats::f32_at,
    )
}

/// F16 · F32.
///
/// # Safety
/// AVX2, FMA and F16C present.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn f16_avx2(w: &[F16Le], x: &[f32]) -> f32 {
    float_dot(
        raw(w),
        x,
        w.len(),
        2,
        |p| {
            // SAFETY: `float_dot` passes pointers to 8 whole elements.
            _mm256_cvtph_ps(unsafe { load16(p) })
        },
        crate::formats::f16_at,
    )
}

/// Shared float loop in [`crate::scalar::float_dot`]'s order: four chains
/// (which also hide the FMA latency), combined `(c0 + c2) + (c1 + c3)`, then
/// the last `n % 8` products fused one at a time.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn float_dot(
    w: &[u8],
    x: &[f32],
    n: usize,
    es: usize,
    load: impl Fn(*const u8) -> __m256,
    elem: impl Fn(&[u8]) -> f32,
) -> f32 {
    let n = n.min(x.len()).min(w.len() / es);
    let (wp, xp) = (w.as_ptr(), x.as_ptr());
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (k, a) in acc.iter_mut().enumerate() {
            let j = i + 8 * k;
            // SAFETY: j + 8 <= n, and n is within both slices (clamped above).
            let (wv, xv) = unsafe { (load(wp.add(j * es)), _mm256_loadu_ps(xp.add(j))) };
            *a = _mm256_fmadd_ps(wv, xv, *a);
        }
        i += 32;
    }
    float_dot_tail(acc, w, x, i, n, es, load, elem)
}

/// The end of [`float_dot`] from element `i` (a multiple of 32) of `n`,
/// given its four chains so far: the remaining 8-element steps into their
/// chains, the chains combined, the last `n % 8` products fused one at a
/// time. Also the end of the wider kernels' rows, so every tier keeps one
/// order. `n` must be within `w` (`es` bytes an element) and `x`.
#[inline]
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn float_dot_tail(
    mut acc: [__m256; 4],
    w: &[u8],
    x: &[f32],
    mut i: usize,
    n: usize,
    es: usize,
    load: impl Fn(*const u8) -> __m256,
    elem: impl Fn(&[u8]) -> f32,
) -> f32 {
    let n = n.min(x.len()).min(w.len() / es);
    let (wp, xp) = (w.as_ptr(), x.as_ptr());
    while i + 8 <= n {
        // SAFETY: i + 8 <= n, within both slices (clamped above).
        let (wv, xv) = unsafe { (load(wp.add(i * es)), _mm256_loadu_ps(xp.add(i))) };
        let a = &mut acc[(i / 8) % 4];
        *a = _mm256_fmadd_ps(wv, xv, *a);
        i += 8;
    }
    let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]));
    let mut sum = hsum_ps(s);
    for j in i..n {
        sum = elem(&w[j * es..]).mul_add(x[j], sum);
    }
    sum
}

/// The AVX2 table, with the best VNNI variants of the 32-block kernels on top.
pub(crate) fn detect() -> Option<Kernels> {
    available().pop().copied()
}

/// The AVX2 + FMA + F16C table: every main format's kernels on 256-bit
/// registers.
static AVX2_TABLE: Kernels = Kernels {
    name: "avx2",
    q4_0: FormatKernels {
        tile4: Some(q4_0_x4_avx2),
        rows4: Some(q4_0_r4_avx2),
        prefetches: true,
        ..FormatKernels::dot(q4_0_avx2)
    },
    q4_1: FormatKernels::dot(q8_1::q4_1_avx2),
    q5_1: FormatKernels::dot(q8_1::q5_1_avx2),
    q5_0: FormatKernels {
        tile4: Some(q5_0_x4_avx2),
        rows4: Some(q5_0_r4_avx2),
        x8: Some(x8::q5_0_x8_avx2),
        x8_as_q8_0: Some(x8::q5_0_x8_as_q8_0_avx2),
        prefetches: true,
        ..FormatKernels::dot(q5_0_avx2)
    },
    q8_0: FormatKernels {
        tile4: Some(q8_0_x4_avx2),
        rows4: Some(q8_0_r4_avx2),
        x8: Some(x8::q8_0_x8_avx2),
        prefetches: true,
        ..FormatKernels::dot(q8_0_avx2)
    },
    q4_k: FormatKernels {
        tile4: Some(q4_k_x4_avx2),
        x8: Some(x8::q4_k_x8_avx2),
        x8x4: Some(x8::q4_k_x8x4_avx2),
        prefetches: true,
        ..FormatKernels::dot(q4_k_avx2)
    },
    q5_k: FormatKernels {
        tile4: Some(q5_k_x4_avx2),
        prefetches: true,
        ..FormatKernels::dot(q5_k_avx2)
    },
    q6_k: FormatKernels {
        tile4: Some(q6_k_x4_avx2),
        x8: Some(x8::q6_k_x8_avx2),
        x8x4: Some(x8::q6_k_x8x4_avx2),
        prefetches: true,
        ..FormatKernels::dot(q6_k_avx2)
    },
    iq4_nl: FormatKernels {
        tile4: Some(iq4::iq4_nl_x4_avx2),
        rows4: Some(iq4::iq4_nl_r4_avx2),
        prefetches: true,
        ..FormatKernels::dot(iq4::iq4_nl_avx2)
    },
    iq4_xs: FormatKernels {
        tile4: Some(iq4::iq4_xs_x4_avx2),
        prefetches: true,
        ..FormatKernels::dot(iq4::iq4_xs_avx2)
    },
    f32: FloatKernels::dot(f32_avx2),
    f16: FloatKernels::dot(f16_avx2),
    lattice: super::lattice_kernels!(lattice::dot_avx2),
    bf16: FloatKernels::dot(super::x86_bf16::bf16_avx2),
    gemm: GemmTier::Avx2,
    ..SCALAR
};
/// [`AVX2_TABLE`] with AVX-VNNI's `vpdpbusd` in the integer dots.
static AVXVNNI_TABLE: Kernels = Kernels {
    name: "avxvnni",
    q4_0: FormatKernels {
        dot: q4_0_avxvnni,
        rows4: Some(q4_0_r4_avxvnni),
        ..AVX2_TABLE.q4_0
    },
    q5_0: FormatKernels {
        dot: q5_0_avxvnni,
        rows4: Some(q5_0_r4_avxvnni),
        x8: Some(x8::q5_0_x8_avxvnni),
        ..AVX2_TABLE.q5_0
    },
    q8_0: FormatKernels {
        dot: q8_0_avxvnni,
        rows4: Some(q8_0_r4_avxvnni),
        x8: Some(x8::q8_0_x8_avxvnni),
        ..AVX2_TABLE.q8_0
    },
    q4_k: FormatKernels {
        dot: q4_k_avxvnni,
        tile4: Some(q4_k_x4_avxvnni),
        x8: Some(x8::q4_k_x8_avxvnni),
        x8x4: Some(x8::q4_k_x8x4_avxvnni),
        ..AVX2_TABLE.q4_k
    },
    q5_k: FormatKernels {
        dot: q5_k_avxvnni,
        tile4: Some(q5_k_x4_avxvnni),
        ..AVX2_TABLE.q5_k
    },
    q6_k: FormatKernels {
        dot: q6_k_avxvnni,
        tile4: Some(q6_k_x4_avxvnni),
        x8: Some(x8::q6_k_x8_avxvnni),
        x8x4: Some(x8::q6_k_x8x4_avxvnni),
        ..AVX2_TABLE.q6_k
    },
    iq4_nl: FormatKernels {
        dot: iq4::iq4_nl_avxvnni,
        rows4: Some(iq4::iq4_nl_r4_avxvnni),
        ..AVX2_TABLE.iq4_nl
    },
    iq4_xs: FormatKernels {
        dot: iq4::iq4_xs_avxvnni,
        tile4: Some(iq4::iq4_xs_x4_avxvnni),
        ..AVX2_TABLE.iq4_xs
    },
    gemm: GemmTier::AvxVnni,
    ..AVX2_TABLE
};

/// The AVX-512 (F, BW, VL, VNNI) table: the 512-bit one-row kernels for
/// the 32-block formats, and for decode the 256-bit four-row ones (the same bits: every tier sums in one
/// canonical order). Four rows a pass beat one on a 16-core Xeon: 1B
/// decode 95.2 -> 102.6 t/s at 16 threads, 11.6 -> 12.0 at one. The
/// four-row ones take `vpdpbusd` through AVX-512 VL and Q5_0's fifth bits
/// as a byte mask (2-core Xeon, 1B tg128 at 1/2 threads: 13.7-14.1 ->
/// 14.5-14.6 and 26.4 -> 27.1-27.3 t/s against the AVX-VNNI/AVX2 ones).
/// Q5_0's rewrite as Q8_0 measured no gain here (its kernel unpacks more
/// cheaply) and is left out.
static AVX512_TABLE: Kernels = Kernels {
    name: "avx512",
    q4_0: FormatKernels {
        dot: q4_0_avx512,
        tile4: Some(q4_0_x4_avx512),
        tile44: Some(q4_0_t44_avx512),
        rows4: Some(q4_0_r4_avx512vl),
        ..AVX2_TABLE.q4_0
    },
    q5_0: FormatKernels {
        dot: q5_0_avx512,
        tile4: Some(q5_0_x4_avx512),
        tile44: Some(q5_0_t44_avx512),
        rows4: Some(q5_0_r4_avx512vl),
        x8: Some(x8::q5_0_x8_avx512vl),
        x8_as_q8_0: None,
        ..AVX2_TABLE.q5_0
    },
    q8_0: FormatKernels {
        dot: q8_0_avx512,
        tile4: Some(q8_0_x4_avx512),
        tile44: Some(q8_0_t44_avx512),
        rows4: Some(q8_0_r4_avx512vl),
        x8: Some(x8::q8_0_x8_avx512vl),
        ..AVX2_TABLE.q8_0
    },
    q4_k: FormatKernels {
        dot: q4_k_avx512vl,
        tile4: Some(q4_k_x4_avx512vl),
        x8: Some(x8::q4_k_x8_avx512vl),
        x8x4: Some(x8::q4_k_x8x4_avx512vl),
        ..AVX2_TABLE.q4_k
    },
    q5_k: FormatKernels {
        dot: q5_k_avx512vl,
        tile4: Some(q5_k_x4_avx512vl),
        ..AVX2_TABLE.q5_k
    },
    q6_k: FormatKernels {
        dot: q6_k_avx512vl,
        tile4: Some(q6_k_x4_avx512vl),
        x8: Some(x8::q6_k_x8_avx512vl),
        x8x4: Some(x8::q6_k_x8x4_avx512vl),
        ..AVX2_TABLE.q6_k
    },
    iq4_nl: FormatKernels {
        dot: iq4::iq4_nl_avx512,
        tile4: Some(iq4::iq4_nl_x4_avx512),
        tile44: Some(iq4::iq4_nl_t44_avx512),
        rows4: Some(iq4::iq4_nl_r4_avx512vl),
        ..AVX2_TABLE.iq4_nl
    },
    iq4_xs: FormatKernels {
        dot: iq4::iq4_xs_avx512vl,
        tile4: Some(iq4::iq4_xs_x4_avx512vl),
        ..AVX2_TABLE.iq4_xs
    },
    f32: FloatKernels {
        dot: x86_float::f32_avx512,
        tile: Some(x86_float::f32_tile_avx512),
    },
    f16: FloatKernels {
        dot: x86_float::f16_avx512,
        tile: Some(x86_float::f16_tile_avx512),
    },
    gemm: GemmTier::Avx512Vnni,
    ..AVX2_TABLE
};

/// [`AVX512_TABLE`] with AVX512_BF16's dot for BF16 weights (Zen 4, Cooper
/// Lake, Sapphire Rapids on); the same name, as its results are the same.
static AVX512_BF16_TABLE: Kernels = Kernels {
    bf16: FloatKernels {
        dot: super::x86_bf16::bf16_avx512,
        tile: Some(super::x86_bf16::bf16_tile_avx512),
    },
    ..AVX512_TABLE
};

/// [`AVX512_BF16_TABLE`] with AMX-INT8 tiles for the panel product
/// (Sapphire Rapids on, which all have AVX-VNNI). Listed below AVX-512 because it is
/// slower there so far: on a 16-core Xeon, pp512 of a 1B at 1/16 threads
/// 98/893 t/s against 147/1149 (4B at 16: 197 against 316), with the
/// same numbers. So it runs only when asked for (`HEARTH_CPU=amx`).
static AMX_TABLE: Kernels = Kernels {
    name: "amx",
    gemm: GemmTier::Amx,
    ..AVX512_BF16_TABLE
};

/// Every x86 table this CPU can run, slowest first.
pub(crate) fn available() -> Vec<&'static Kernels> {
    let mut v = Vec::new();
    if !(is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c"))
    {
        return v;
    }
    v.push(&AVX2_TABLE);
    if is_x86_feature_detected!("avxvnni") {
        v.push(&AVXVNNI_TABLE);
    }
    if is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512vnni")
    {
        let bf16 = is_x86_feature_detected!("avx512bf16");
        if bf16 && is_x86_feature_detected!("avxvnni") && crate::gemm::amx::usable() {
            v.push(&AMX_TABLE);
        }
        v.push(if bf16 {
            &AVX512_BF16_TABLE
        } else {
            &AVX512_TABLE
        });
    }
    v
}

/// Tile kernels for batched products: one weight row against four activation
/// rows. Each weight block is unpacked once and used four times, which is
/// what makes prefill compute-bound on the dot products rather than on the
/// unpacking.
macro_rules! legacy_tiles {
    ($feat:literal, $dot4:ident, $t8:ident, $t4:ident, $t5:ident) => {
        legacy_tiles!(@one $feat, $dot4, $t8, BlockQ8_0, |bw| {
            // SAFETY: the block holds its 32 `qs`.
            unsafe { load32(bw.add(at::Q8_0_QS)) }
        });
        legacy_tiles!(@one $feat, $dot4, $t4, BlockQ4_0, |bw| {
            // SAFETY: the block holds 16 bytes of nibbles (`qs`).
            let q = unsafe { load16(bw.add(at::Q4_0_QS)) };
            _mm256_sub_epi8(nibbles32(q), _mm256_set1_epi8(8))
        });
        legacy_tiles!(@one $feat, $dot4, $t5, BlockQ5_0, |bw| {
            // SAFETY: the block holds its `qh` bits and 16 bytes of nibbles.
            let (qh, q) = unsafe { (std::ptr::read_unaligned(bw.add(at::Q5_0_QH) as *const u32), load16(bw.add(at::Q5_0_QS))) };
            let hi = _mm256_andnot_si256(bits_to_bytes(qh), _mm256_set1_epi8(0xF0u8 as i8));
            _mm256_or_si256(nibbles32(q), hi)
        });
    };
    (@one $feat:literal, $dot4:ident, $name:ident, $block:ty, |$bw:ident| $unpack:expr) => {
        /// One weight row times four Q8_0 activation rows `stride` blocks
        /// apart, their block scales widened in `scales`.
        ///
        /// # Safety
        /// The features of `$feat` present.
        #[target_feature(enable = $feat)]
        pub(crate) unsafe fn $name(
            w: &[$block],
            a: &[BlockQ8_0],
            stride: usize,
            scales: &[f32],
        ) -> [f32; 4] {
            const WB: usize = <$block>::BYTES;
            let nb = w.len();
            check_rows(a.len(), 4, stride, nb);
            check_rows(scales.len(), 4, nb, nb);
            let stride = stride * BlockQ8_0::BYTES;
            let (wp, ap, sp) = (raw(w).as_ptr(), raw(a).as_ptr(), scales.as_ptr());
            // Chain i % 2 of each activation row, as in the one-row kernels.
            let mut acc = [[_mm256_setzero_ps(); 4]; 2];
            for i in 0..nb {
                // SAFETY: block i is inside the weight row (i < nb).
                let $bw = unsafe { wp.add(i * WB) };
                let qx = $unpack;
                // SAFETY: d is the first two bytes of the block.
                let dw = _mm256_broadcastss_ps(h2f_pair(unsafe { rd16($bw) }));
                let ux = _mm256_sign_epi8(qx, qx);
                for (c, acc) in acc[i % 2].iter_mut().enumerate() {
                    // SAFETY: activation row c's block i lies inside `a`, and
                    // its scale inside `scales` (checked).
                    let (ay, da) = unsafe { (ap.add(c * stride + i * BlockQ8_0::BYTES + at::Q8_0_QS), &*sp.add(c * nb + i)) };
                    // The one-row kernels' scale product (exact f16 values
                    // multiplied in f32) in every lane; a broadcast load
                    // costs no vector instruction.
                    let d = _mm256_mul_ps(dw, _mm256_broadcast_ss(da));
                    // SAFETY: 32 quants follow the block's scale.
                    let qy = unsafe { load32(ay) };
                    let p = $dot4(ux, _mm256_sign_epi8(qy, qx));
                    *acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), *acc);
                }
            }
            std::array::from_fn(|c| hsum_ps(_mm256_add_ps(acc[0][c], acc[1][c])))
        }
    };
}

legacy_tiles!(
    "avx2,fma,f16c",
    dot4_avx2,
    q8_0_x4_avx2,
    q4_0_x4_avx2,
    q5_0_x4_avx2
);

/// Horizontal sums of four vectors, each added in [`hsum_ps`]'s order (high
/// half onto low, then lanes two apart, then neighbours), so every sum is the
/// one `hsum_ps` gives to the bit; the four share the shuffles.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn hsum4_ps(v: [__m256; 4]) -> [f32; 4] {
    let s: [__m128; 4] = std::array::from_fn(|r| {
        _mm_add_ps(_mm256_castps256_ps128(v[r]), _mm256_extractf128_ps(v[r], 1))
    });
    // [a0+a2, b0+b2, a1+a3, b1+b3] for the pairs (s0, s1) and (s2, s3).
    let u01 = _mm_add_ps(_mm_unpacklo_ps(s[0], s[1]), _mm_unpackhi_ps(s[0], s[1]));
    let u23 = _mm_add_ps(_mm_unpacklo_ps(s[2], s[3]), _mm_unpackhi_ps(s[2], s[3]));
    // (x0+x2) + (x1+x3) for each of the four.
    let t = _mm_add_ps(_mm_movelh_ps(u01, u23), _mm_movehl_ps(u23, u01));
    let mut out = [0.0f32; 4];
    // SAFETY: `out` holds 4 floats.
    unsafe { _mm_storeu_ps(out.as_mut_ptr(), t) };
    out
}

/// Decode kernels: four consecutive weight rows against one activation row.
/// Each row's blocks are added in the one-row kernel's order with the same
/// scale products, and the sums reduced in `hsum_ps`'s order, so each result
/// is the one-row kernel's to the bit; what is shared is the activation
/// loads and scales, the loop and the reduction, which on rows as short as a
/// small model's (20 blocks for 640 columns) cost as much as the products.
/// Prefetches the byte `off` past `base`, the first of a group of four
/// contiguous rows. The rows kernels call it once per block and row with
/// offsets that walk the span [`PREFETCH`] bytes ahead front to back, so
/// memory sees one sequential stream, as from the one-row kernel; four
/// streams, one per row, ran a third slower on a Q8_0 head streamed from
/// DRAM (7 against 10 GB/s, one thread, AMD EPYC Zen 1).
#[inline(always)]
fn prefetch_rows_line(base: *const u8, off: usize) {
    // SAFETY: a prefetch is a hint and never faults, whatever the address.
    unsafe { _mm_prefetch(base.wrapping_add(off) as *const i8, _MM_HINT_T0) };
}

macro_rules! legacy_rows {
    ($feat:literal, $dot4:ident, $dot4acc:ident, $q5:ident, $r8:ident, $r4:ident, $r5:ident) => {
        legacy_rows!(@one $feat, $dot4, $dot4acc, $r8, BlockQ8_0, |bw| {
            // SAFETY: the block holds its 32 `qs`.
            unsafe { load32(bw.add(at::Q8_0_QS)) }
        });
        // Q4_0 and Q5_0 stay unsigned (nibble, or nibble plus 16 for the
        // fifth bit) and the offset comes off the integer sums (see `@one`).
        legacy_rows!(@one $feat, $dot4, $dot4acc, $r4, BlockQ4_0, offset 3, |bw| {
            // SAFETY: the block holds 16 bytes of nibbles (`qs`).
            unsafe { nibbles32_at(bw.add(at::Q4_0_QS)) }
        });
        legacy_rows!(@one $feat, $dot4, $dot4acc, $r5, BlockQ5_0, offset 4, |bw| {
            // SAFETY: the block is inside `w` (see `@one`).
            unsafe { $q5(bw) }
        });
    };
    (@one $feat:literal, $dot4:ident, $dot4acc:ident, $name:ident, $block:ty, |$bw:ident| $unpack:expr) => {
        legacy_rows!(@one $feat, $dot4, $dot4acc, $name, $block, signed, |$bw| $unpack);
    };
    // `signed`: the unpacked bytes are the signed values, multiplied through
    // the sign trick. `offset K`: they are `value + 2^K`, unsigned, so they
    // multiply the activations directly and each lane's sum loses 2^K times
    // the lane's activation sum, which the four rows share (negated once, so
    // that each row's products add to it: one `vpdpbusd` with VNNI). The
    // lane sums are the same integers either way, so the results are the
    // one-row kernels' to the bit, with three fewer instructions per row and
    // block.
    (@one $feat:literal, $dot4:ident, $dot4acc:ident, $name:ident, $block:ty, $form:ident $($shift:literal)?, |$bw:ident| $unpack:expr) => {
        /// Four weight rows `w_stride` blocks apart times one Q8_0
        /// activation row.
        ///
        /// # Safety
        /// The features of `$feat` present.
        #[target_feature(enable = $feat)]
        pub(crate) unsafe fn $name(w: &[$block], w_stride: usize, a: &[BlockQ8_0]) -> [f32; 4] {
            const WB: usize = <$block>::BYTES;
            let nb = a.len();
            check_rows(w.len(), 4, w_stride, nb);
            let (ap, row_bytes) = (raw(a).as_ptr(), w_stride * WB);
            // SAFETY: rows 0..4 start inside `w` (checked).
            let wp: [*const u8; 4] = std::array::from_fn(|r| unsafe { raw(w).as_ptr().add(r * row_bytes) });
            // Chain i % 2 of each row, as in the one-row kernels. The two
            // chains are named, not indexed by `k % 2`: indexed, they had
            // lived on the stack (a load and a store per block and row),
            // zeroed there by a 512-bit store (see `scales8_at`).
            let (mut even, mut odd) = ([_mm256_setzero_ps(); 4], [_mm256_setzero_ps(); 4]);
            let mut i = 0;
            while i + 8 <= nb {
                // SAFETY: blocks i..i+8 lie inside every row and the activations.
                let da = unsafe { scales8_at::<{ BlockQ8_0::BYTES }>(ap.add(i * BlockQ8_0::BYTES)) };
                // SAFETY: as above.
                let dd: [[f32; 8]; 4] = std::array::from_fn(|r| {
                    let mut d = [0.0f32; 8];
                    // SAFETY: as above; `d` holds 8 floats.
                    unsafe { _mm256_storeu_ps(d.as_mut_ptr(), _mm256_mul_ps(scales8_at::<{ WB }>(wp[r].add(i * WB)), da)) };
                    d
                });
                for k in (0..8).step_by(2) {
                    for (k, acc) in [(k, &mut even), (k + 1, &mut odd)] {
                        // SAFETY: activation block i + k: 32 quants at 2.
                        let qy = unsafe { load32(ap.add((i + k) * BlockQ8_0::BYTES + at::Q8_0_QS)) };
                        let corr = legacy_rows!(@corr $dot4, qy, $form $($shift)?);
                        for r in 0..4 {
                            // SAFETY: block i + k of row r is inside `w`.
                            let $bw = unsafe { wp[r].add((i + k) * WB) };
                            prefetch_rows_line(wp[0], PREFETCH + ((i + k) * 4 + r) * WB);
                            let qx = $unpack;
                            let p = legacy_rows!(@dot $dot4, $dot4acc, qx, qy, corr, $form);
                            let d = _mm256_set1_ps(dd[r][k]);
                            acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[r]);
                        }
                    }
                }
                i += 8;
            }
            for i in i..nb {
                // SAFETY: activation block i: its f16 scale at 0, 32 quants at 2.
                let ba = unsafe { ap.add(i * BlockQ8_0::BYTES) };
                // SAFETY: as above.
                let (da, qy) = unsafe { (rd16(ba), load32(ba.add(at::Q8_0_QS))) };
                let corr = legacy_rows!(@corr $dot4, qy, $form $($shift)?);
                for r in 0..4 {
                    // SAFETY: block i of row r is inside `w`; its f16 scale at 0.
                    let $bw = unsafe { wp[r].add(i * WB) };
                    prefetch_rows_line(wp[0], PREFETCH + (i * 4 + r) * WB);
                    // SAFETY: as above.
                    let d = h2f_prod(unsafe { rd16($bw) } | da << 16);
                    let qx = $unpack;
                    let p = legacy_rows!(@dot $dot4, $dot4acc, qx, qy, corr, $form);
                    let acc = if i % 2 == 0 { &mut even[r] } else { &mut odd[r] };
                    *acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(p), *acc);
                }
            }
            hsum4_ps(std::array::from_fn(|r| _mm256_add_ps(even[r], odd[r])))
        }
    };
    (@corr $dot4:ident, $qy:ident, signed) => {
        _mm256_setzero_si256()
    };
    (@corr $dot4:ident, $qy:ident, offset $shift:literal) => {
        _mm256_sub_epi32(
            _mm256_setzero_si256(),
            _mm256_slli_epi32::<$shift>($dot4(_mm256_set1_epi8(1), $qy)),
        )
    };
    (@dot $dot4:ident, $dot4acc:ident, $qx:ident, $qy:ident, $corr:ident, signed) => {{
        let _ = $corr;
        $dot4(_mm256_sign_epi8($qx, $qx), _mm256_sign_epi8($qy, $qx))
    }};
    (@dot $dot4:ident, $dot4acc:ident, $qx:ident, $qy:ident, $corr:ident, offset) => {
        $dot4acc($corr, $qx, $qy)
    };
}

legacy_rows!(
    "avx2,fma,f16c",
    dot4_avx2,
    dot4acc_avx2,
    q5_0_unsigned_avx2,
    q8_0_r4_avx2,
    q4_0_r4_avx2,
    q5_0_r4_avx2
);
legacy_rows!(
    "avx2,fma,f16c,avxvnni",
    dot4_avxvnni,
    dot4acc_avxvnni,
    q5_0_unsigned_avx2,
    q8_0_r4_avxvnni,
    q4_0_r4_avxvnni,
    q5_0_r4_avxvnni
);
// AVX-512 machines (Ice Lake, Cascade Lake, Zen 4 and later): `vpdpbusd`
// on 256 bits through AVX-512 VL (no AVX-VNNI needed) and the masked
// fifth-bit add.
legacy_rows!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    dot4_avx512vl,
    dot4acc_avx512vl,
    q5_0_unsigned_avx512vl,
    q8_0_r4_avx512vl,
    q4_0_r4_avx512vl,
    q5_0_r4_avx512vl
);

/// IQ4_NL and IQ4_XS, on the macros above.
mod iq4;
/// The lattice formats (IQ2, IQ3, IQ1).
mod lattice;
/// Q4_1 and Q5_1 against Q8_1.
mod q8_1;
