//! IQ4_NL and IQ4_XS on x86_64: the 4-bit indices become their table
//! values ([`KVALUES`]) with one `vpshufb` against the table held in both
//! 128-bit halves, and then take the integer products the Q4_0 and Q4_K
//! kernels take: IQ4_NL through the 32-block kernels' macros (its values
//! signed, as Q8_0's are, multiplied through the sign trick), IQ4_XS by
//! the K-quants' per-sub-block scale multiply-adds. The values are never
//! zero and at most 127 in magnitude, and the Q8 activations lie in
//! -127..=127, so every pair of byte products fits 16 bits.
//!
//! Both follow [`crate::scalar`]'s order, so every tier gives the scalar
//! reference's bits.

use super::*;
use crate::formats::blocks::{BlockIQ4NL, BlockIQ4XS};
use crate::formats::iquants::{xs_scale, KVALUES, XS_SCALE_BIAS};

/// [`KVALUES`] in both 128-bit halves, for `vpshufb` by nibble.
#[inline]
#[target_feature(enable = "avx2")]
fn table256() -> __m256i {
    // SAFETY: `KVALUES` holds 16 bytes.
    _mm256_broadcastsi128_si256(unsafe { load16(KVALUES.as_ptr() as *const u8) })
}

/// [`KVALUES`] in all four 128-bit lanes.
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512bw")]
fn table512() -> __m512i {
    // SAFETY: `KVALUES` holds 16 bytes.
    _mm512_broadcast_i32x4(unsafe { load16(KVALUES.as_ptr() as *const u8) })
}

/// The 32 signed values of the 16 bytes of nibbles at `p` (element `j`
/// from the low nibble of byte `j`, `j + 16` from its high nibble).
///
/// # Safety
/// `p` must be valid for 16 bytes.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn values32(p: *const u8) -> __m256i {
    // SAFETY: the caller's contract.
    _mm256_shuffle_epi8(table256(), unsafe { nibbles32_at(p) })
}

legacy_kernels!(@one "avx2,fma,f16c", dot4_avx2, iq4_nl_avx2, BlockIQ4NL, "IQ4_NL · Q8_0.", |bw| {
    // SAFETY: the block holds 16 bytes of nibbles (`qs`).
    unsafe { values32(bw.add(at::IQ4NL_QS)) }
});
legacy_kernels!(@one "avx2,fma,f16c,avxvnni", dot4_avxvnni, iq4_nl_avxvnni, BlockIQ4NL, "IQ4_NL · Q8_0.", |bw| {
    // SAFETY: the block holds 16 bytes of nibbles (`qs`).
    unsafe { values32(bw.add(at::IQ4NL_QS)) }
});
legacy_tiles!(@one "avx2,fma,f16c", dot4_avx2, iq4_nl_x4_avx2, BlockIQ4NL, |bw| {
    // SAFETY: the block holds 16 bytes of nibbles (`qs`).
    unsafe { values32(bw.add(at::IQ4NL_QS)) }
});
legacy_rows!(@one "avx2,fma,f16c", dot4_avx2, dot4acc_avx2, iq4_nl_r4_avx2, BlockIQ4NL, |bw| {
    // SAFETY: the block is inside `w` (see `legacy_rows`).
    unsafe { values32(bw.add(at::IQ4NL_QS)) }
});
legacy_rows!(@one "avx2,fma,f16c,avxvnni", dot4_avxvnni, dot4acc_avxvnni, iq4_nl_r4_avxvnni, BlockIQ4NL, |bw| {
    // SAFETY: the block is inside `w` (see `legacy_rows`).
    unsafe { values32(bw.add(at::IQ4NL_QS)) }
});
legacy_rows!(@one "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni", dot4_avx512vl, dot4acc_avx512vl, iq4_nl_r4_avx512vl, BlockIQ4NL, |bw| {
    // SAFETY: the block is inside `w` (see `legacy_rows`).
    unsafe { values32(bw.add(at::IQ4NL_QS)) }
});

/// One or two IQ4_NL blocks' table values at `p` (the second's in the high
/// half where `two`, zeros otherwise), through the 512-bit table.
///
/// # Safety
/// `p` must point at a whole block, and at two when `two`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni,avx512vl")]
unsafe fn pair_values(p: *const u8, two: bool) -> __m512i {
    // SAFETY: the caller's contract.
    let (qa, qb) = unsafe {
        let qb = if two {
            load16(p.add(BlockIQ4NL::BYTES + at::IQ4NL_QS))
        } else {
            _mm_setzero_si128()
        };
        (load16(p.add(at::IQ4NL_QS)), qb)
    };
    let v = _mm512_shuffle_epi8(table512(), zmm_nibbles(_mm256_set_m128i(qb, qa)));
    // An absent second block holds zeros (its activations are zeros too).
    let valid: __mmask64 = if two { !0 } else { 0xFFFF_FFFF };
    _mm512_maskz_mov_epi8(valid, v)
}

zmm_kernels!(
    rows_iq4_nl,
    iq4_nl_avx512,
    iq4_nl_x4_avx512,
    iq4_nl_t44_avx512,
    BlockIQ4NL,
    "IQ4_NL · Q8_0, two blocks per 512-bit register.",
    |p, two| pair_values(p, two),
    // The values plus 128 (1..=241): the sign bit flipped.
    unsigned 128 |p, two| {
        _mm512_xor_si512(pair_values(p, two), _mm512_set1_epi8(0x80u8 as i8))
    }
);

/// The eight sub-block multipliers `ls − 32` of the IQ4_XS block at `bw`,
/// each as an i16 pair in one dword, for a broadcast per sub-block.
///
/// # Safety
/// `bw` must point at a whole IQ4_XS block.
#[inline(always)]
unsafe fn xs_scale_pairs(bw: *const u8) -> [i32; K_SUB_BLOCKS] {
    // SAFETY: the caller's contract (the block has alignment 1).
    let b = unsafe { &*(bw as *const BlockIQ4XS) };
    std::array::from_fn(|ib| {
        let s = (xs_scale(b, ib) - XS_SCALE_BIAS) as i16 as u16 as u32;
        (s | s << 16) as i32
    })
}

/// Generates the IQ4_XS decode kernels for one multiply-accumulate
/// primitive ([`mac_avx2`] and its VNNI forms, the same integers): per
/// sub-block of 32 the values times the activations in i16 pairs
/// (`vpmaddubsw`, the sign trick), times the sub-block's multiplier into
/// i32 lanes, even and odd sub-blocks in two chains; the super-block's
/// exact sum then goes through [`crate::scalar::kquant_block`], blocks in
/// order, as the reference does.
macro_rules! iq4_xs_kernels {
    ($feat:literal, $mac:ident, $rows:ident, $one:ident, $four:ident) => {
        /// IQ4_XS · Q8_K for `N` activation rows sharing each weight
        /// block's unpacking; each row's sums are the one-row kernel's.
        ///
        /// # Safety
        /// `w` holds `nb` IQ4_XS blocks and each `a[c]` `nb` Q8_K blocks.
        #[inline]
        #[target_feature(enable = $feat)]
        unsafe fn $rows<const N: usize>(w: *const u8, a: [*const u8; N], nb: usize) -> [f32; N] {
            let mut sumf = [0.0f32; N];
            for i in 0..nb {
                // SAFETY: block i of the weights and of every activation
                // row is inside them (the caller's contract).
                let (bw, bas): (*const u8, [*const u8; N]) = unsafe {
                    (
                        w.add(i * BlockIQ4XS::BYTES),
                        std::array::from_fn(|c| a[c].add(i * BlockQ8K::BYTES)),
                    )
                };
                prefetch_block(bw);
                // SAFETY: a whole block.
                let scales = unsafe { xs_scale_pairs(bw) };
                // SAFETY: the block's f16 `d`, first.
                let d = _mm_cvtss_f32(h2f_pair(unsafe { rd16(bw) }));
                let (mut lo, mut hi) = ([_mm256_setzero_si256(); N], [_mm256_setzero_si256(); N]);
                for (ib, &s) in scales.iter().enumerate() {
                    // SAFETY: the block's 16 bytes of nibbles for sub-block ib.
                    let qx = unsafe { values32(bw.add(at::IQ4XS_QS + 16 * ib)) };
                    let ux = _mm256_sign_epi8(qx, qx);
                    let s = _mm256_set1_epi32(s);
                    for c in 0..N {
                        // SAFETY: the Q8_K block's 32 `qs` of sub-block ib.
                        let q8 = unsafe { load32(bas[c].add(at::Q8K_QS + 32 * ib)) };
                        let p = _mm256_maddubs_epi16(ux, _mm256_sign_epi8(q8, qx));
                        let acc = if ib % 2 == 0 { &mut lo[c] } else { &mut hi[c] };
                        *acc = $mac(*acc, p, s);
                    }
                }
                for c in 0..N {
                    // SAFETY: the Q8_K block's f32 `d`, first.
                    let dy = unsafe { rf32(bas[c]) };
                    let sumi = hsum_epi32(_mm256_add_epi32(lo[c], hi[c]));
                    sumf[c] += crate::scalar::kquant_block(d, 0.0, dy, sumi, 0);
                }
            }
            sumf
        }

        /// IQ4_XS · Q8_K.
        ///
        /// # Safety
        /// The features of `$feat` present.
        #[target_feature(enable = $feat)]
        pub(crate) unsafe fn $one(w: &[BlockIQ4XS], a: &[BlockQ8K]) -> f32 {
            let nb = w.len().min(a.len());
            // SAFETY: both hold `nb` blocks.
            unsafe { $rows::<1>(raw(w).as_ptr(), [raw(a).as_ptr()], nb)[0] }
        }

        /// IQ4_XS · Q8_K, four activation rows `stride` blocks apart.
        ///
        /// # Safety
        /// The features of `$feat` present.
        #[target_feature(enable = $feat)]
        pub(crate) unsafe fn $four(
            w: &[BlockIQ4XS],
            a: &[BlockQ8K],
            stride: usize,
            _scales: &[f32],
        ) -> [f32; 4] {
            let nb = w.len();
            check_rows(a.len(), 4, stride, nb);
            let (ap, stride) = (raw(a).as_ptr(), stride * BlockQ8K::BYTES);
            // SAFETY: four activation rows of `nb` blocks (checked).
            unsafe {
                $rows::<4>(
                    raw(w).as_ptr(),
                    std::array::from_fn(|c| ap.add(c * stride)),
                    nb,
                )
            }
        }
    };
}

iq4_xs_kernels!(
    "avx2,fma,f16c",
    mac_avx2,
    xs_rows_avx2,
    iq4_xs_avx2,
    iq4_xs_x4_avx2
);
iq4_xs_kernels!(
    "avx2,fma,f16c,avxvnni",
    mac_avxvnni,
    xs_rows_avxvnni,
    iq4_xs_avxvnni,
    iq4_xs_x4_avxvnni
);
iq4_xs_kernels!(
    "avx2,fma,f16c,avx512f,avx512vl,avx512vnni",
    mac_avx512vl,
    xs_rows_avx512vl,
    iq4_xs_avx512vl,
    iq4_xs_x4_avx512vl
);
