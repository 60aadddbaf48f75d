//! Q4_1 and Q5_1 against Q8_1 on AVX2: each block's exact integer dot in
//! vectors (its values unsigned, 0..=31, straight into `vpmaddubsw`), then
//! the scalar reference's float steps for the block, in its order
//! ([`crate::scalar`]'s `legacy_q8_1`), so the sums are its bits. These
//! formats are what llama-quantize's mixes fall back to where a row is not
//! whole super-blocks (a 270M's 640-wide attention V under IQ4_XS and
//! Q4_K_S, for one), and on the scalar kernel they were a fifth of such a
//! model's decode.

use super::*;
use crate::formats::blocks::{BlockQ4_1, BlockQ5_1, BlockQ8_1};

/// Generates one Q8_1-activation kernel: `$unpack` gives the block's 32
/// unsigned values (element order) from its pointer `$bw`.
macro_rules! q8_1_kernel {
    ($name:ident, $block:ty, $doc:literal, |$bw:ident| $unpack:expr) => {
        #[doc = $doc]
        ///
        /// # Safety
        /// AVX2, FMA and F16C present.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(crate) unsafe fn $name(w: &[$block], a: &[BlockQ8_1]) -> f32 {
            let nb = w.len().min(a.len());
            let (wp, ap) = (raw(w).as_ptr(), raw(a).as_ptr());
            let mut sumf = 0.0f32;
            for i in 0..nb {
                // SAFETY: block i is inside both slices (i < nb).
                let $bw = unsafe { wp.add(i * <$block>::BYTES) };
                // SAFETY: as above.
                let ba = unsafe { ap.add(i * BlockQ8_1::BYTES) };
                _mm_prefetch($bw.wrapping_add(PREFETCH) as *const i8, _MM_HINT_T0);
                let u: __m256i = $unpack;
                // SAFETY: the activation block's 32 `qs`.
                let qy = unsafe { load32(ba.add(at::Q8_1_QS)) };
                // u <= 31 against |a| <= 128: a pair sums to at most 7936.
                let sumi = hsum_epi32(dot4_avx2(u, qy));
                // SAFETY: both blocks start with two f16: (d, m) and (d, s).
                let (wdm, ads) = unsafe { (h2f_pair(rd32($bw)), h2f_pair(rd32(ba))) };
                let (d, m) = (_mm_cvtss_f32(wdm), _mm_cvtss_f32(_mm_movehdup_ps(wdm)));
                let (dy, s) = (_mm_cvtss_f32(ads), _mm_cvtss_f32(_mm_movehdup_ps(ads)));
                sumf += sumi as f32 * (d * dy) + m * s;
            }
            sumf
        }
    };
}

q8_1_kernel!(q4_1_avx2, BlockQ4_1, "Q4_1 · Q8_1.", |bw| {
    // SAFETY: the block holds 16 bytes of nibbles (`qs`).
    unsafe { nibbles32_at(bw.add(at::Q4_1_QS)) }
});
q8_1_kernel!(q5_1_avx2, BlockQ5_1, "Q5_1 · Q8_1.", |bw| {
    // SAFETY: the block holds its `qh` bits and 16 bytes of nibbles.
    let (bits, nib) = unsafe {
        (
            bits_to_bytes(rd32(bw.add(at::Q5_1_QH))),
            nibbles32_at(bw.add(at::Q5_1_QS)),
        )
    };
    _mm256_or_si256(nib, _mm256_and_si256(bits, _mm256_set1_epi8(0x10)))
});
