//! Q4_K, Q6_K, Q5_0 and Q8_0 decode kernels over eight interleaved rows (the layout of
//! [`crate::formats::interleave`]): one 32-bit lane per row, so the rows'
//! values meet the same four activations in one `vpdpbusd`, and the
//! scales, the minimums and the float steps of eight rows take one pass.
//! Every integer sum is exact and each row's float steps are the scalar
//! reference's ([`crate::scalar::kquant_block`] for Q4_K, the two chains of
//! eight lanes for Q5_0 and Q8_0), lane by lane and block by block, so each result
//! is the one-row kernel's to the bit.

use std::arch::x86_64::*;

use super::x86::{mac_avx2, mac_avx512vl, mac_avxvnni};
use super::{check_rows, raw};
use crate::formats::blocks::{at, BlockFormat, BlockQ4K, BlockQ5_0, BlockQ6K, BlockQ8K, BlockQ8_0};
use crate::formats::interleave::{
    x8, x8_q5_0, x8_q6_k, x8_q8_0, Interleaved, GROUP_BLOCK_BYTES, GROUP_ROWS, Q5_0_GROUP_BYTES,
    Q6_K_GROUP_BYTES, Q8_0_GROUP_BYTES,
};

/// `acc + Σ u·s` over each lane's four byte pairs, without VNNI: `u` holds
/// Q4_K's 0..15, Q5_0's codes 0..31 or Q8_0's |w| ≤ 128 against
/// activations of at most 127, so `vpmaddubsw` cannot saturate
/// (2 · 128 · 127 < 2^15).
#[inline]
#[target_feature(enable = "avx2")]
fn dpbusd_avx2(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
    let pairs = _mm256_maddubs_epi16(u, s);
    _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
}

/// [`dpbusd_avx2`] as one AVX-VNNI `vpdpbusd`.
#[inline]
#[target_feature(enable = "avx2,avxvnni")]
fn dpbusd_avxvnni(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
    _mm256_dpbusd_avx_epi32(acc, u, s)
}

/// [`dpbusd_avx2`] as one AVX-512 VNNI `vpdpbusd` on 256 bits.
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512vl,avx512vnni")]
fn dpbusd_avx512vl(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
    _mm256_dpbusd_epi32(acc, u, s)
}

/// `Σ u[i] · s[i]` over the four byte pairs of each lane and the eight
/// pairs of vectors, for Q4_K's nibbles (`u` at most 15) against any
/// signed bytes: each `vpmaddubsw` lane is at most 2 · 15 · 128 = 3840 in
/// size, so the eight add exactly in 16 bits before one widening, where
/// widening each would cost two more instructions.
#[inline]
#[target_feature(enable = "avx2")]
fn nibble_dot8_avx2(u: [__m256i; 8], s: [__m256i; 8]) -> __m256i {
    let mut pairs = _mm256_maddubs_epi16(u[0], s[0]);
    for i in 1..8 {
        pairs = _mm256_add_epi16(pairs, _mm256_maddubs_epi16(u[i], s[i]));
    }
    _mm256_madd_epi16(pairs, _mm256_set1_epi16(1))
}

/// [`nibble_dot8_avx2`] as two chains of AVX-VNNI `vpdpbusd`.
#[inline]
#[target_feature(enable = "avx2,avxvnni")]
fn nibble_dot8_avxvnni(u: [__m256i; 8], s: [__m256i; 8]) -> __m256i {
    let (mut even, mut odd) = (_mm256_setzero_si256(), _mm256_setzero_si256());
    for i in (0..8).step_by(2) {
        even = dpbusd_avxvnni(even, u[i], s[i]);
        odd = dpbusd_avxvnni(odd, u[i + 1], s[i + 1]);
    }
    _mm256_add_epi32(even, odd)
}

/// [`nibble_dot8_avx2`] as two chains of AVX-512 VNNI `vpdpbusd`.
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512vl,avx512vnni")]
fn nibble_dot8_avx512vl(u: [__m256i; 8], s: [__m256i; 8]) -> __m256i {
    let (mut even, mut odd) = (_mm256_setzero_si256(), _mm256_setzero_si256());
    for i in (0..8).step_by(2) {
        even = dpbusd_avx512vl(even, u[i], s[i]);
        odd = dpbusd_avx512vl(odd, u[i + 1], s[i + 1]);
    }
    _mm256_add_epi32(even, odd)
}

/// Four activations at `p` in every lane.
///
/// # Safety
/// `p` must point at four readable bytes.
#[inline(always)]
unsafe fn act4(p: *const u8) -> __m256i {
    // SAFETY: the caller's contract.
    _mm256_set1_epi32(unsafe { std::ptr::read_unaligned(p as *const i32) })
}

/// Byte `n` of each lane of `v`, as an i32.
#[inline]
#[target_feature(enable = "avx2")]
fn byte_of(v: __m256i, n: i32) -> __m256i {
    let shifted = _mm256_srl_epi32(v, _mm_cvtsi32_si128(8 * n));
    _mm256_and_si256(shifted, _mm256_set1_epi32(0xFF))
}

/// The one- and four-activation-row entries of a K-quant interleaved
/// kernel whose body is `$rows::<N>` over `$gb`-byte group blocks.
macro_rules! k_x8_entries {
    ($feat:literal, $name:literal, $block:ty, $rows:ident, $one:ident, $four:ident) => {
        #[doc = concat!("Eight interleaved ", $name, " rows · Q8_K: one result per row.")]
        ///
        /// # Safety
        /// The features of `$feat` present.
        #[target_feature(enable = $feat)]
        pub(crate) unsafe fn $one(w: &[Interleaved<$block>], a: &[BlockQ8K]) -> [f32; GROUP_ROWS] {
            let nb = w.len().min(a.len());
            // SAFETY: both hold `nb` blocks.
            unsafe { $rows::<1>(raw(w).as_ptr(), [raw(a).as_ptr()], nb)[0] }
        }

        #[doc = concat!("Eight interleaved ", $name, " rows · four Q8_K rows `stride` blocks apart.")]
        ///
        /// # Safety
        /// The features of `$feat` present.
        #[target_feature(enable = $feat)]
        pub(crate) unsafe fn $four(
            w: &[Interleaved<$block>],
            a: &[BlockQ8K],
            stride: usize,
        ) -> [[f32; GROUP_ROWS]; 4] {
            let nb = w.len();
            check_rows(a.len(), 4, stride, nb);
            let ap = raw(a).as_ptr();
            // SAFETY: four activation rows of `nb` blocks (checked).
            unsafe {
                $rows::<4>(
                    raw(w).as_ptr(),
                    std::array::from_fn(|c| ap.add(c * stride * BlockQ8K::BYTES)),
                    nb,
                )
            }
        }
    };
}

/// Adds a K-quant block's float steps for eight rows to `sum`, lane by
/// lane in [`crate::scalar::kquant_block`]'s order: `(d · dy) · isum −
/// (dmin · dy) · msum`, `dy` the scale of the Q8_K block at `ab`.
///
/// # Safety
/// `ab` must point at a Q8_K block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn kquant_x8_step(
    sum: __m256,
    (d, dmin): (__m256, __m256),
    ab: *const u8,
    isum: __m256i,
    msum: __m256,
) -> __m256 {
    // SAFETY: the Q8_K block's f32 scale at 0.
    let dy = _mm256_set1_ps(unsafe { std::ptr::read_unaligned(ab as *const f32) });
    let t = _mm256_mul_ps(_mm256_mul_ps(d, dy), _mm256_cvtepi32_ps(isum));
    let u = _mm256_mul_ps(_mm256_mul_ps(dmin, dy), msum);
    _mm256_add_ps(sum, _mm256_sub_ps(t, u))
}

/// Each activation row's eight sums, one per weight row.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn x8_results<const N: usize>(sumf: [__m256; N]) -> [[f32; GROUP_ROWS]; N] {
    let mut out = [[0.0f32; GROUP_ROWS]; N];
    for (o, v) in out.iter_mut().zip(sumf) {
        // SAFETY: `o` holds eight f32.
        unsafe { _mm256_storeu_ps(o.as_mut_ptr(), v) };
    }
    out
}

/// A Q4_K group block's scales for its eight rows, a row to a lane.
struct Q4KScales {
    /// The super-block scales.
    d: __m256,
    /// The super-block minimums' scales.
    dmin: __m256,
    /// Sub-blocks `4w..4w + 4`'s scales in `sc[w]`, a byte each.
    sc: [__m256i; 2],
    /// Their minimums, as `sc`.
    mn: [__m256i; 2],
}

/// `scales_mins_k4` on eight rows at once: the low six bits of words 0
/// and 1, the rest from word 2 and the spare top bits.
///
/// # Safety
/// `g` must point at a whole Q4_K group block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_k_x8_scales(g: *const u8) -> Q4KScales {
    let (low6, low4, low2) = (
        _mm256_set1_epi32(0x3f3f_3f3f),
        _mm256_set1_epi32(0x0f0f_0f0f),
        _mm256_set1_epi32(0x0303_0303),
    );
    // SAFETY: the group block's d, dmin and scale words.
    let (d, dmin, w0, w1, w2) = unsafe {
        (
            _mm256_cvtph_ps(_mm_loadu_si128(g.add(x8::D) as *const __m128i)),
            _mm256_cvtph_ps(_mm_loadu_si128(g.add(x8::DMIN) as *const __m128i)),
            _mm256_loadu_si256(g.add(x8::WORDS) as *const __m256i),
            _mm256_loadu_si256(g.add(x8::WORDS + 32) as *const __m256i),
            _mm256_loadu_si256(g.add(x8::WORDS + 64) as *const __m256i),
        )
    };
    let high = |lo: __m256i, top: __m256i| {
        let top = _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(top, 6), low2), 4);
        _mm256_or_si256(_mm256_and_si256(lo, low4), top)
    };
    Q4KScales {
        d,
        dmin,
        sc: [_mm256_and_si256(w0, low6), high(w2, w0)],
        mn: [
            _mm256_and_si256(w1, low6),
            high(_mm256_srli_epi32(w2, 4), w1),
        ],
    }
}

/// Each activation row's Σ min · sub-block sum over the eight weight rows,
/// once a block: the mins of sub-blocks 4w and 4w + 2 (then 4w + 1 and
/// 4w + 3) as i16 pairs against those sub-blocks' activation sums.
///
/// # Safety
/// Each `ab[c]` must point at a whole Q8_K block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_k_x8_min_sums<const N: usize>(mn: &[__m256i; 2], ab: &[*const u8; N]) -> [__m256i; N] {
    let pair_order = _mm256_setr_epi8(
        0, 1, 4, 5, 2, 3, 6, 7, 0, 1, 4, 5, 2, 3, 6, 7, 0, 1, 4, 5, 2, 3, 6, 7, 0, 1, 4, 5, 2, 3,
        6, 7,
    );
    let mins: [[__m256i; 2]; 2] = std::array::from_fn(|w| {
        [
            _mm256_and_si256(mn[w], _mm256_set1_epi32(0x00ff_00ff)),
            _mm256_srli_epi16::<8>(mn[w]),
        ]
    });
    std::array::from_fn(|c| {
        let bsums =
            // SAFETY: each Q8_K block's 16 i16 sums; pairs make
            // sub-blocks (at most 32 · 128 each, so they fit i16).
            unsafe { _mm256_loadu_si256(ab[c].add(at::Q8K_BSUMS) as *const __m256i) };
        let subs = _mm256_madd_epi16(bsums, _mm256_set1_epi16(1));
        let s16 = _mm256_packs_epi32(subs, subs);
        // Per 128-bit half: i32 lanes (s0, s2), (s1, s3).
        let sp = _mm256_shuffle_epi8(s16, pair_order);
        let at = |i: i32| _mm256_permutevar8x32_epi32(sp, _mm256_set1_epi32(i));
        let lo = _mm256_add_epi32(
            _mm256_madd_epi16(mins[0][0], at(0)),
            _mm256_madd_epi16(mins[0][1], at(1)),
        );
        let hi = _mm256_add_epi32(
            _mm256_madd_epi16(mins[1][0], at(4)),
            _mm256_madd_epi16(mins[1][1], at(5)),
        );
        _mm256_add_epi32(lo, hi)
    })
}

/// Sub-block `j`'s nibbles of the Q4_K group block at `g`, as the
/// unsigned operands of [`nibble_dot8_avx2`]: quarter `i / 2`'s low
/// nibbles at even `i`, its high ones at odd `i`.
///
/// # Safety
/// `g` must point at a whole Q4_K group block; `j < 8`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_k_x8_nibbles(g: *const u8, j: usize) -> [__m256i; 8] {
    let m4 = _mm256_set1_epi8(0x0F);
    let mut nibbles = [[_mm256_setzero_si256(); 2]; 4];
    for (q, pair) in nibbles.iter_mut().enumerate() {
        // SAFETY: sub-block j's quarter q of the nibbles.
        let v = unsafe { _mm256_loadu_si256(g.add(x8::QS + 32 * (4 * j + q)) as *const __m256i) };
        *pair = [
            _mm256_and_si256(v, m4),
            _mm256_and_si256(_mm256_srli_epi16(v, 4), m4),
        ];
    }
    std::array::from_fn(|i| nibbles[i / 2][i % 2])
}

macro_rules! q4_k_x8_kernels {
    ($feat:literal, $dot8:ident, $rows:ident, $one:ident, $four:ident) => {
        k_x8_entries!($feat, "Q4_K", BlockQ4K, $rows, $one, $four);

        /// The body of the kernels above: `N` activation rows share each
        /// group block's unpacking, and each row's sums are the one-row
        /// kernel's.
        ///
        /// # Safety
        /// `w` holds `nb` group blocks and each `a[c]` `nb` Q8_K blocks.
        #[inline]
        #[target_feature(enable = $feat)]
        unsafe fn $rows<const N: usize>(
            w: *const u8,
            a: [*const u8; N],
            nb: usize,
        ) -> [[f32; GROUP_ROWS]; N] {
            let mut sumf = [_mm256_setzero_ps(); N];
            for b in 0..nb {
                // SAFETY: block b of the weights and activations lies inside
                // them (the caller's contract). No software prefetch: the
                // layout is one stream, which the hardware prefetcher follows
                // (prefetching 2-16 KiB ahead was no faster).
                let (g, ab): (*const u8, [*const u8; N]) = unsafe {
                    (
                        w.add(b * GROUP_BLOCK_BYTES),
                        std::array::from_fn(|c| a[c].add(b * BlockQ8K::BYTES)),
                    )
                };
                // SAFETY: a whole group block and whole Q8_K blocks.
                let (scales, msum) = unsafe {
                    let scales = q4_k_x8_scales(g);
                    let msum = q4_k_x8_min_sums(&scales.mn, &ab);
                    (scales, msum)
                };
                let mut isum = [_mm256_setzero_si256(); N];
                for j in 0..8 {
                    // SAFETY: sub-block j of a whole group block.
                    let u = unsafe { q4_k_x8_nibbles(g, j) };
                    let s = byte_of(scales.sc[j / 4], (j % 4) as i32);
                    for c in 0..N {
                        // SAFETY: sub-block j's 32 activations, four at a
                        // time: quarter q's low four at 8 q, high at 8 q + 4.
                        let acts: [__m256i; 8] = std::array::from_fn(|i| unsafe {
                            act4(ab[c].add(at::Q8K_QS + 32 * j + 4 * i))
                        });
                        let prod = _mm256_mullo_epi32($dot8(u, acts), s);
                        isum[c] = _mm256_add_epi32(isum[c], prod);
                    }
                }
                for c in 0..N {
                    let (dm, m) = ((scales.d, scales.dmin), _mm256_cvtepi32_ps(msum[c]));
                    // SAFETY: the row's Q8_K block.
                    sumf[c] = unsafe { kquant_x8_step(sumf[c], dm, ab[c], isum[c], m) };
                }
            }
            x8_results(sumf)
        }
    };
}

q4_k_x8_kernels!(
    "avx2,fma,f16c",
    nibble_dot8_avx2,
    q4_k_x8_rows_avx2,
    q4_k_x8_avx2,
    q4_k_x8x4_avx2
);
q4_k_x8_kernels!(
    "avx2,fma,f16c,avxvnni",
    nibble_dot8_avxvnni,
    q4_k_x8_rows_avxvnni,
    q4_k_x8_avxvnni,
    q4_k_x8x4_avxvnni
);
q4_k_x8_kernels!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    nibble_dot8_avx512vl,
    q4_k_x8_rows_avx512vl,
    q4_k_x8_avx512vl,
    q4_k_x8x4_avx512vl
);

/// The `vpshufb` control that puts byte `k` of each 32-bit lane in both
/// of its 16-bit halves' high bytes (zeros below): an arithmetic shift
/// right by 8 then gives that byte sign-extended twice, as the i16 pair a
/// `vpmaddwd` multiplies by.
#[inline]
#[target_feature(enable = "avx2")]
fn byte_to_i16_pair(k: usize) -> __m256i {
    let lane = |l: usize| {
        let b = (4 * l + k) as i32;
        0x80 | b << 8 | 0x80 << 16 | b << 24
    };
    _mm256_setr_epi32(
        lane(0),
        lane(1),
        lane(2),
        lane(3),
        lane(0),
        lane(1),
        lane(2),
        lane(3),
    )
}

/// The four quads of group `gi` (values `16 gi..16 gi + 16`) of the Q6_K
/// group block at `g`: unsigned codes, four of each row a lane.
///
/// # Safety
/// `g` points at a whole Q6_K group block; `gi < 16`.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn q6_k_group_quads(g: *const u8, gi: usize) -> [__m256i; 4] {
    // SAFETY: group gi's two runs of low bits and its run of high bits.
    let (ql0, ql1, qh) = unsafe {
        (
            _mm256_loadu_si256(g.add(x8_q6_k::low(4 * gi)) as *const __m256i),
            _mm256_loadu_si256(g.add(x8_q6_k::low(4 * gi + 2)) as *const __m256i),
            _mm256_loadu_si256(g.add(x8_q6_k::high(4 * gi)) as *const __m256i),
        )
    };
    let (m4, m30) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x30));
    let low = |v: __m256i| _mm256_and_si256(v, m4);
    let high = |v: __m256i| _mm256_and_si256(v, m30);
    [
        _mm256_or_si256(low(ql0), high(_mm256_slli_epi16::<4>(qh))),
        _mm256_or_si256(
            low(_mm256_srli_epi16::<4>(ql0)),
            high(_mm256_slli_epi16::<2>(qh)),
        ),
        _mm256_or_si256(low(ql1), high(qh)),
        _mm256_or_si256(
            low(_mm256_srli_epi16::<4>(ql1)),
            high(_mm256_srli_epi16::<2>(qh)),
        ),
    ]
}

/// A Q6_K group block's eight super-block scales (f32, a row to a lane)
/// and its four words of sub-block scales (`words[w]` holds scales
/// `4w..4w + 4`, a signed byte each, in every row's lane).
///
/// # Safety
/// `g` must point at a whole Q6_K group block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6_k_x8_scales(g: *const u8) -> (__m256, [__m256i; 4]) {
    // SAFETY: the group block's d and scale words.
    unsafe {
        (
            _mm256_cvtph_ps(_mm_loadu_si128(g.add(x8_q6_k::D) as *const __m128i)),
            std::array::from_fn(|w| {
                _mm256_loadu_si256(g.add(x8_q6_k::SCALES + 32 * w) as *const __m256i)
            }),
        )
    }
}

/// The 16 i16 group sums of the Q8_K block at `ab`, each 128-bit half's
/// as i32 pairs (0, 2), (1, 3), (4, 6), (5, 7).
///
/// # Safety
/// `ab` must point at a whole Q8_K block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6_k_bsum_pairs(ab: *const u8) -> __m256i {
    let pairs = _mm256_setr_epi8(
        0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15, 0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13,
        10, 11, 14, 15,
    );
    // SAFETY: the Q8_K block's 16 i16 group sums.
    let bsums = unsafe { _mm256_loadu_si256(ab.add(at::Q8K_BSUMS) as *const __m256i) };
    _mm256_shuffle_epi8(bsums, pairs)
}

/// A Q6_K group's four quads of codes against its four quads of
/// activations, without VNNI: quads 0 and 1's `vpmaddubsw` pairs added in
/// 16 bits, then quads 2 and 3's. Codes <= 63 against |a| <= 128: two
/// products of two sum to at most 32256 in 16 bits.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q6_k_pair_sums(q: &[__m256i; 4], acts: &[__m256i; 4]) -> (__m256i, __m256i) {
    let p0 = _mm256_add_epi16(
        _mm256_maddubs_epi16(q[0], acts[0]),
        _mm256_maddubs_epi16(q[1], acts[1]),
    );
    let p1 = _mm256_add_epi16(
        _mm256_maddubs_epi16(q[2], acts[2]),
        _mm256_maddubs_epi16(q[3], acts[3]),
    );
    (p0, p1)
}

macro_rules! q6_k_x8_kernels {
    ($feat:literal, $mac:ident, $dp:ident, $vnni:literal, $rows:ident, $one:ident, $four:ident) => {
        k_x8_entries!($feat, "Q6_K", BlockQ6K, $rows, $one, $four);

        /// The body of the kernels above. Codes are unsigned (`q + 32`):
        /// each row's `Σ sc · code · a` less `32 Σ sc · bsum` is the one-row
        /// kernel's exact `Σ sc · q · a`, and its float steps are
        /// `scalar::kquant_block`'s (no minimum), lane by lane in block
        /// order.
        ///
        /// # Safety
        /// `w` holds `nb` group blocks and each `a[c]` `nb` Q8_K blocks.
        #[inline]
        #[target_feature(enable = $feat)]
        unsafe fn $rows<const N: usize>(
            w: *const u8,
            a: [*const u8; N],
            nb: usize,
        ) -> [[f32; GROUP_ROWS]; N] {
            let pick: [__m256i; 4] = std::array::from_fn(|k| byte_to_i16_pair(k));
            let zero = _mm256_setzero_ps();
            let mut sumf = [_mm256_setzero_ps(); N];
            for b in 0..nb {
                // SAFETY: block b of the weights and activations lies inside
                // them (the caller's contract).
                let (g, ab): (*const u8, [*const u8; N]) = unsafe {
                    (
                        w.add(b * Q6_K_GROUP_BYTES),
                        std::array::from_fn(|c| a[c].add(b * BlockQ8K::BYTES)),
                    )
                };
                // SAFETY: a whole group block.
                let (d, words) = unsafe { q6_k_x8_scales(g) };
                // Each row's Σ sc · bsum: word w's scales 4w and 4w + 2 (and
                // 4w + 1, 4w + 3) as i16 pairs, against those bsums.
                let mut isum: [__m256i; N] = std::array::from_fn(|c| {
                    // SAFETY: a whole Q8_K block.
                    let bp = unsafe { q6_k_bsum_pairs(ab[c]) };
                    let mut off = _mm256_setzero_si256();
                    for (w, &word) in words.iter().enumerate() {
                        let even = _mm256_srai_epi16::<8>(_mm256_slli_epi16::<8>(word));
                        let odd = _mm256_srai_epi16::<8>(word);
                        let at = |i: usize| _mm256_set1_epi32(i as i32);
                        off = $mac(off, even, _mm256_permutevar8x32_epi32(bp, at(2 * w)));
                        off = $mac(off, odd, _mm256_permutevar8x32_epi32(bp, at(2 * w + 1)));
                    }
                    _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32::<5>(off))
                });
                for gi in 0..16 {
                    // SAFETY: a whole group block.
                    let q = unsafe { q6_k_group_quads(g, gi) };
                    if $vnni {
                        // With VNNI: the group's four quads straight into
                        // i32 by `vpdpbusd`, then one multiply by the scale.
                        let shift = _mm_cvtsi32_si128((24 - 8 * (gi % 4)) as i32);
                        let s = _mm256_srai_epi32::<24>(_mm256_sll_epi32(words[gi / 4], shift));
                        for c in 0..N {
                            // SAFETY: group gi's 16 activations, four at a time.
                            let acts: [__m256i; 4] = std::array::from_fn(|i| unsafe {
                                act4(ab[c].add(at::Q8K_QS + 16 * gi + 4 * i))
                            });
                            let mut dot = _mm256_setzero_si256();
                            for i in 0..4 {
                                dot = $dp(dot, q[i], acts[i]);
                            }
                            isum[c] = _mm256_add_epi32(isum[c], _mm256_mullo_epi32(dot, s));
                        }
                        continue;
                    }
                    let s =
                        _mm256_srai_epi16::<8>(_mm256_shuffle_epi8(words[gi / 4], pick[gi % 4]));
                    for c in 0..N {
                        // SAFETY: group gi's 16 activations, four at a time.
                        let acts: [__m256i; 4] = std::array::from_fn(|i| unsafe {
                            act4(ab[c].add(at::Q8K_QS + 16 * gi + 4 * i))
                        });
                        let (p0, p1) = q6_k_pair_sums(&q, &acts);
                        isum[c] = $mac($mac(isum[c], p0, s), p1, s);
                    }
                }
                for c in 0..N {
                    // The reference's minimum term, `(0 · dy) · 0`, kept so
                    // the bits agree where a block sums to zero.
                    // SAFETY: the row's Q8_K block.
                    sumf[c] = unsafe { kquant_x8_step(sumf[c], (d, zero), ab[c], isum[c], zero) };
                }
            }
            x8_results(sumf)
        }
    };
}

q6_k_x8_kernels!(
    "avx2,fma,f16c",
    mac_avx2,
    dpbusd_avx2,
    false,
    q6_k_x8_rows_avx2,
    q6_k_x8_avx2,
    q6_k_x8x4_avx2
);
q6_k_x8_kernels!(
    "avx2,fma,f16c,avxvnni",
    mac_avxvnni,
    dpbusd_avxvnni,
    true,
    q6_k_x8_rows_avxvnni,
    q6_k_x8_avxvnni,
    q6_k_x8x4_avxvnni
);
q6_k_x8_kernels!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    mac_avx512vl,
    dpbusd_avx512vl,
    true,
    q6_k_x8_rows_avx512vl,
    q6_k_x8_avx512vl,
    q6_k_x8x4_avx512vl
);

macro_rules! legacy_x8_kernel {
    ($feat:literal, $dp:ident, $one:ident, $block:ty, $doc:literal, |$g:ident, $ab:ident| $quads:expr) => {
        #[doc = $doc]
        ///
        /// Quad `j` of block `b` adds to lane `j` of chain `b % 2` as in
        /// [`crate::scalar`]'s order for the 32-value formats, here eight
        /// rows in a register, and the lanes meet as `hsum8` adds them.
        ///
        /// # Safety
        /// The features of `$feat` present.
        #[target_feature(enable = $feat)]
        pub(crate) unsafe fn $one(w: &[Interleaved<$block>], a: &[BlockQ8_0]) -> [f32; GROUP_ROWS] {
            const GB: usize = size_of::<Interleaved<$block>>();
            let nb = w.len().min(a.len());
            let (w, a) = (raw(w).as_ptr(), raw(a).as_ptr());
            // Chain `b % 2`'s lane `j`, for the eight rows at once.
            let (mut even, mut odd) = ([_mm256_setzero_ps(); 8], [_mm256_setzero_ps(); 8]);
            let step = |acc: &mut [__m256; 8], b: usize| {
                // SAFETY: block b lies inside the weights and activations
                // (the caller's contract): the eight f16 `d` at 0 and the
                // activations' f16 `d` at 0.
                let ($g, $ab, d) = unsafe {
                    let (g, ab) = (w.add(b * GB), a.add(b * BlockQ8_0::BYTES));
                    let dw = _mm256_cvtph_ps(_mm_loadu_si128(g as *const __m128i));
                    let da = std::ptr::read_unaligned(ab as *const i16);
                    (
                        g,
                        ab,
                        _mm256_mul_ps(dw, _mm256_cvtph_ps(_mm_set1_epi16(da))),
                    )
                };
                // Each quad's `vpdpbusd` operands: a start, unsigned weight
                // bytes and signed activation bytes whose sum with the start
                // is the quad's exact dot, four bytes of each row a lane.
                let quads: [QuadOperands; 8] = $quads;
                for (lane, q) in acc.iter_mut().zip(quads) {
                    let p = $dp(q.start, q.unsigned, q.signed);
                    *lane = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), *lane);
                }
            };
            let mut b = 0;
            while b + 2 <= nb {
                step(&mut even, b);
                step(&mut odd, b + 1);
                b += 2;
            }
            if b < nb {
                step(&mut even, b);
            }
            let s: [__m256; 8] = std::array::from_fn(|j| _mm256_add_ps(even[j], odd[j]));
            let h: [__m256; 4] = std::array::from_fn(|j| _mm256_add_ps(s[j], s[j + 4]));
            let v = _mm256_add_ps(_mm256_add_ps(h[0], h[2]), _mm256_add_ps(h[1], h[3]));
            let mut out = [0.0f32; GROUP_ROWS];
            // SAFETY: `out` holds eight f32.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr(), v) };
            out
        }
    };
}

/// One quad's operands for `vpdpbusd`: `start + Σ unsigned · signed` over
/// each lane's four byte pairs is the quad's dot for that lane's row.
#[derive(Clone, Copy)]
struct QuadOperands {
    start: __m256i,
    unsigned: __m256i,
    signed: __m256i,
}

/// Q8_0's signed weights `v` against activations `av`: |w| meets the
/// activations carrying w's sign, which keeps each product exact for the
/// u8 · i8 instruction.
#[inline]
#[target_feature(enable = "avx2")]
fn signed_quad(v: __m256i, av: __m256i) -> QuadOperands {
    QuadOperands {
        start: _mm256_setzero_si256(),
        unsigned: _mm256_sign_epi8(v, v),
        signed: _mm256_sign_epi8(av, v),
    }
}

/// The Q8_0 and Q5_0 kernels for one feature set.
macro_rules! legacy_x8_kernels {
    ($feat:literal, $dp:ident, $q8_0:ident, $q5_0:ident) => {
        legacy_x8_kernel!(
            $feat,
            $dp,
            $q8_0,
            BlockQ8_0,
            "Eight interleaved Q8_0 rows · Q8_0: one result per row.",
            |g, ab| {
                std::array::from_fn(|j| {
                    // SAFETY: quad j of the group block's values and of the
                    // activations.
                    unsafe {
                        let v = _mm256_loadu_si256(g.add(x8_q8_0::QS + 32 * j) as *const __m256i);
                        signed_quad(v, act4(ab.add(at::Q8_0_QS + 4 * j)))
                    }
                })
            }
        );
        legacy_x8_kernel!(
            $feat,
            $dp,
            $q5_0,
            BlockQ5_0,
            "Eight interleaved Q5_0 rows · Q8_0: one result per row.",
            |g, ab| {
                // SAFETY: a whole Q5_0 group block, and a whole activation
                // block.
                unsafe { q5_0_quad_operands(g, ab) }
            }
        );
    };
}

/// A Q5_0 group block's quads against the activation block at `ab`: the
/// codes `q` (0..31) as they are, starting from −16 × the activation
/// quad's sum, so `Σ (q − 16) · a` needs no sign fix-ups.
///
/// # Safety
/// `g` points at a whole Q5_0 group block and `ab` at a Q8_0 block.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn q5_0_quad_operands(g: *const u8, ab: *const u8) -> [QuadOperands; 8] {
    // SAFETY: the block's 32 activations (the caller's contract).
    let acts = unsafe { _mm256_loadu_si256(ab.add(at::Q8_0_QS) as *const __m256i) };
    // Quad j's sum times −16 in lane j: pairs of bytes, then pairs of those.
    let pairs = _mm256_maddubs_epi16(_mm256_set1_epi8(1), acts);
    let sums = _mm256_madd_epi16(pairs, _mm256_set1_epi16(-16));
    // SAFETY: the caller's contract.
    let codes = unsafe { q5_0_codes(g) };
    std::array::from_fn(|j| QuadOperands {
        start: _mm256_permutevar8x32_epi32(sums, _mm256_set1_epi32(j as i32)),
        unsigned: codes[j],
        // SAFETY: quad j of the activation block.
        signed: unsafe { act4(ab.add(at::Q8_0_QS + 4 * j)) },
    })
}

/// Q5_0 group blocks rewritten as Q8_0 ones ([`super::WidenX8Fn`]), for
/// the AVX2 and AVX-VNNI tables: there a batch's rows then skip unpacking
/// the nibbles and fifth bits each (docs/perf/speed.md). The AVX-512
/// table, whose kernel unpacks more cheaply, measured no gain and does
/// without it.
///
/// # Safety
/// AVX2 present.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn q5_0_x8_as_q8_0_avx2(
    src: &[Interleaved<BlockQ5_0>],
    dst: &mut [Interleaved<BlockQ8_0>],
) {
    let nb = src.len();
    assert!(dst.len() >= nb, "{nb} group blocks into {}", dst.len());
    let (src, dst) = (raw(src), bytemuck::cast_slice_mut::<_, u8>(dst));
    for b in 0..nb {
        // SAFETY: group block b of each, inside them (asserted).
        unsafe {
            let g = src.as_ptr().add(b * Q5_0_GROUP_BYTES);
            let o = dst.as_mut_ptr().add(b * Q8_0_GROUP_BYTES);
            let d = _mm_loadu_si128(g.add(x8_q5_0::D) as *const __m128i);
            _mm_storeu_si128(o.add(x8_q8_0::D) as *mut __m128i, d);
            for (j, q) in q5_0_codes(g).into_iter().enumerate() {
                let v = _mm256_sub_epi8(q, _mm256_set1_epi8(16));
                _mm256_storeu_si256(o.add(x8_q8_0::QS + 32 * j) as *mut __m256i, v);
            }
        }
    }
}

/// The eight quads' codes `q` (0..31, the value being `q - 16`) of the
/// Q5_0 group block at `g`, four of each row a lane.
///
/// # Safety
/// `g` points at a whole Q5_0 group block.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn q5_0_codes(g: *const u8) -> [__m256i; 8] {
    // SAFETY: (the closure's callers) run `k` of the group block's four
    // runs of nibbles.
    let run =
        |k: usize| unsafe { _mm256_loadu_si256(g.add(x8_q5_0::QS + 32 * k) as *const __m256i) };
    // SAFETY: the group block's fifth bits.
    let qh = unsafe { _mm256_loadu_si256(g.add(x8_q5_0::QH) as *const __m256i) };
    // The runs and codes as plain locals: built through `array::from_fn`,
    // the runs went through the stack once the kernels took typed slices.
    let runs = [run(0), run(1), run(2), run(3)];
    let m4 = _mm256_set1_epi8(0x0F);
    let low = |j: usize| _mm256_or_si256(_mm256_and_si256(runs[j], m4), fifth_bit(qh, j));
    let high = |j: usize| {
        let nib = _mm256_and_si256(_mm256_srli_epi16(runs[j], 4), m4);
        _mm256_or_si256(nib, fifth_bit(qh, j + 4))
    };
    [
        low(0),
        low(1),
        low(2),
        low(3),
        high(0),
        high(1),
        high(2),
        high(3),
    ]
}

/// Bit `j` of each byte of `qh` as 0x10 in that byte (else 0): quad `j`'s
/// fifth bits from a Q5_0 group block's 32 bytes of them. A shift of
/// 16-bit lanes by at most four keeps each byte's bit 4 from its own bits.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn fifth_bit(qh: __m256i, j: usize) -> __m256i {
    let moved = match j {
        0 => _mm256_slli_epi16::<4>(qh),
        1 => _mm256_slli_epi16::<3>(qh),
        2 => _mm256_slli_epi16::<2>(qh),
        3 => _mm256_slli_epi16::<1>(qh),
        4 => qh,
        5 => _mm256_srli_epi16::<1>(qh),
        6 => _mm256_srli_epi16::<2>(qh),
        _ => _mm256_srli_epi16::<3>(qh),
    };
    _mm256_and_si256(moved, _mm256_set1_epi8(0x10))
}

legacy_x8_kernels!("avx2,fma,f16c", dpbusd_avx2, q8_0_x8_avx2, q5_0_x8_avx2);
legacy_x8_kernels!(
    "avx2,fma,f16c,avxvnni",
    dpbusd_avxvnni,
    q8_0_x8_avxvnni,
    q5_0_x8_avxvnni
);
legacy_x8_kernels!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    dpbusd_avx512vl,
    q8_0_x8_avx512vl,
    q5_0_x8_avx512vl
);
