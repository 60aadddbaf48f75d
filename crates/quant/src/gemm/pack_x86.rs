//! Panel packing with AVX2: the common weight formats unpacked 32 values of
//! a row at a time and transposed into the panel's column steps in
//! registers.
//!
//! Packing runs once per product for every weight, whatever the batch. The
//! portable packer ([`Panel::pack`]) unpacks a block to signed values, adds
//! the offset and copies four bytes at a time; at 2–5 G weights/s per core
//! it was an eighth of a 512-token prefill and most of a 16-sequence decode
//! step. Here each format's stored bits are already the unsigned panel bytes
//! `q + off` (Q8_0 flips its sign bit), so unpacking is a few masks and
//! shifts (IQ4_NL and IQ4_XS: a table lookup by `vpshufb`, the sign bit
//! flipped), and eight rows' 32 bytes go through one 8 × 8 transpose of
//! 4-byte words into eight column steps. The bytes, scales and minimum
//! terms are exactly the portable packer's (tested).

use super::{Panel, NR};
use crate::formats::blocks::{at, block, BlockIQ4XS, BlockQ4K, BlockQ6K, K_SUB_BLOCKS};
use crate::formats::f16_at;
use crate::formats::interleave::{x8, x8_q5_0, x8_q6_k, x8_q8_0, GROUP_ROWS};
use crate::formats::iquants::{xs_scale, KVALUES, XS_SCALE_BIAS};
use crate::formats::kquants::scales_mins_k4;
use crate::simd::x86_x8::{fifth_bit, q6_k_group_quads};
use crate::GgmlType;
use std::arch::x86_64::*;

/// How far ahead of the bytes being packed each row is prefetched.
const PREFETCH_AHEAD: usize = 256;

/// Whether [`pack_avx2`] packs `ty`.
pub(super) fn packs(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(
        ty,
        Q4_0 | Q5_0 | Q8_0 | Q4_K | Q5_K | Q6_K | IQ4_NL | IQ4_XS
    )
}

/// Packs `rows` (exactly [`NR`] rows, each holding at least `cols`
/// elements of `ty`, one of [`packs`]) into `p`, whose fields
/// [`Panel::fill_as`] has set (for either form) and whose buffers it
/// has sized (`q` at least `cols * NR` bytes, `s` and `m` `groups * NR`
/// values, `m` zeroed). Panics, before touching memory, where any of that
/// does not hold.
///
/// # Safety
/// avx2 and f16c present.
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn pack_avx2(p: &mut Panel, ty: GgmlType, rows: &[&[u8]], cols: usize) {
    let (bl, bb) = (ty.block_len(), ty.block_bytes());
    assert!(packs(ty) && rows.len() == NR && cols.is_multiple_of(bl));
    let blocks = cols / bl;
    assert!(rows.iter().all(|r| r.len() >= blocks * bb));
    assert!(p.q.len() >= cols * NR && p.g * p.groups == cols);
    assert!(p.s.len() >= p.groups * NR && p.m.len() >= p.groups * NR);
    let q = p.q.as_mut_ptr();
    // The signed form (AMX's) is the unsigned bytes less the offset.
    let less = _mm256_set1_epi8(if p.signed { p.off as i8 } else { 0 });
    // Where the next panel's rows lie relative to these: a matrix's rows
    // are evenly spaced (a guess elsewhere costs only useless prefetches).
    let next_panel = (rows[1].as_ptr() as usize)
        .wrapping_sub(rows[0].as_ptr() as usize)
        .wrapping_mul(NR);
    // Column chunks of 32: one 32-byte vector per row.
    for c in 0..cols / 32 {
        let (b, j) = (c * 32 / bl, (c * 32 % bl) / 32);
        if j == 0 {
            scales(p, ty, rows, b, bb);
        }
        // Each of the 32 rows is a stream of its own, more than the
        // hardware prefetchers follow: ask for every row's bytes a little
        // ahead (a prefetch never faults, so past a row's end is harmless).
        let at = c * 32 * bb / bl;
        for row in rows {
            _mm_prefetch::<_MM_HINT_T0>(row.as_ptr().wrapping_add(at + PREFETCH_AHEAD) as *const i8);
        }
        // The next panel's rows (a product packs a run of consecutive
        // panels) start cold: their first bytes are asked for while this
        // panel's first chunks are packed.
        if at < PREFETCH_AHEAD {
            for row in rows {
                let next = row.as_ptr().wrapping_add(next_panel + at);
                _mm_prefetch::<_MM_HINT_T0>(next as *const i8);
            }
        }
        for g in 0..NR / 8 {
            // A plain loop, not `array::from_fn`: the closure that takes
            // was once compiled out of line (without the inlined `codes`
            // and its vectors in registers), and packing ran 30% slower.
            let mut v = [_mm256_setzero_si256(); 8];
            for (i, v) in v.iter_mut().enumerate() {
                // SAFETY: the row holds block `b` whole (asserted above), and
                // `codes` reads only inside a block of `ty`. Unchecked, as
                // in `scales`: this runs for every row of every chunk.
                *v = unsafe { codes(ty, rows.get_unchecked(8 * g + i).as_ptr().add(b * bb), j) };
                *v = _mm256_sub_epi8(*v, less);
            }
            // SAFETY: column steps c*8..c*8+8 of the panel, rows 8g..8g+8:
            // inside the first `cols * NR` bytes of `q` (asserted above).
            unsafe { transpose_store(v, q.add(c * 8 * NR * 4 + g * 32)) };
        }
    }
}

/// Whether [`pack_interleaved_avx2`] packs `ty`.
pub(super) fn packs_interleaved(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::Q4_K | GgmlType::Q6_K | GgmlType::Q5_0 | GgmlType::Q8_0
    )
}

/// [`pack_avx2`] for [`NR`] interleaved rows, as their groups (`groups[i]`
/// rows `8 i..8 i + 8`, each at least `cols` elements of `ty`, one of
/// [`packs_interleaved`], in the layout of `formats::interleave`). Each of
/// the layout's runs of 32 bytes holds four values of eight rows, which is
/// one column step of the panel for those rows: it is unpacked and stored
/// as it is. Same contract on `p` as [`pack_avx2`]; panics, before
/// touching memory, where it does not hold.
///
/// # Safety
/// avx2 and f16c present.
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn pack_interleaved_avx2(
    p: &mut Panel,
    ty: GgmlType,
    groups: &[&[u8]],
    cols: usize,
) {
    let (bl, gb) = (ty.block_len(), GROUP_ROWS * ty.block_bytes());
    assert!(packs_interleaved(ty) && groups.len() == NR / GROUP_ROWS);
    assert!(cols.is_multiple_of(bl));
    let blocks = cols / bl;
    assert!(groups.iter().all(|g| g.len() >= blocks * gb));
    assert!(p.q.len() >= cols * NR && p.g * p.groups == cols);
    assert!(p.s.len() >= p.groups * NR && p.m.len() >= p.groups * NR);
    let q = p.q.as_mut_ptr();
    let less = _mm256_set1_epi8(if p.signed { p.off as i8 } else { 0 });
    let low4 = _mm256_set1_epi8(0x0f);
    // Column step `s` of rows 8i..8i+8 lies at `q + s * NR * 4 + 32 i`.
    let step = NR * 4;
    for b in 0..blocks {
        for (i, group) in groups.iter().enumerate() {
            // SAFETY: group block b lies inside the group (asserted above).
            let g = unsafe { group.as_ptr().add(b * gb) };
            // SAFETY: as above; `p.s` and `p.m` hold this block's groups.
            unsafe { interleaved_scales(p, ty, g, b, i) };
            // SAFETY: this block's column steps, rows 8i..8i+8: inside the
            // first `cols * NR` bytes of `q` (asserted above).
            let dst = unsafe { q.add(b * (bl / 4) * step + 32 * i) };
            let put = |s: usize, v: __m256i| {
                // SAFETY: step s of this block, as above.
                unsafe {
                    _mm256_storeu_si256(dst.add(s * step) as *mut __m256i, _mm256_sub_epi8(v, less))
                }
            };
            // SAFETY: (the loads below) runs of the group block, read
            // within it.
            unsafe {
                match ty {
                    GgmlType::Q8_0 => {
                        for j in 0..8 {
                            let v =
                                _mm256_loadu_si256(g.add(x8_q8_0::QS + 32 * j) as *const __m256i);
                            put(j, _mm256_xor_si256(v, _mm256_set1_epi8(-128)));
                        }
                    }
                    GgmlType::Q5_0 => {
                        let qh = _mm256_loadu_si256(g.add(x8_q5_0::QH) as *const __m256i);
                        for j in 0..8 {
                            let run = _mm256_loadu_si256(
                                g.add(x8_q5_0::QS + 32 * (j % 4)) as *const __m256i
                            );
                            let nib = if j < 4 {
                                run
                            } else {
                                _mm256_srli_epi16::<4>(run)
                            };
                            put(
                                j,
                                _mm256_or_si256(_mm256_and_si256(nib, low4), fifth_bit(qh, j)),
                            );
                        }
                    }
                    GgmlType::Q6_K => {
                        for gi in 0..16 {
                            for (i, v) in q6_k_group_quads(g, gi).into_iter().enumerate() {
                                put(4 * gi + i, v);
                            }
                        }
                    }
                    _ => {
                        // Run c (sub-block c / 4, quarter c % 4): the low
                        // nibbles are step 2c, the high ones step 2c + 1.
                        for c in 0..32 {
                            let v = _mm256_loadu_si256(g.add(x8::QS + 32 * c) as *const __m256i);
                            put(2 * c, _mm256_and_si256(v, low4));
                            put(2 * c + 1, _mm256_and_si256(_mm256_srli_epi16::<4>(v), low4));
                        }
                    }
                }
            }
        }
    }
}

/// Group block `b`'s scales (and Q4_K's minimum terms) for rows
/// `8 i..8 i + 8` of the panel, from the group block at `g`, as
/// [`scales`] stores them.
///
/// # Safety
/// avx2 and f16c present; `g` points at a whole group block of `ty`;
/// `p.s` and `p.m` hold block `b`'s groups.
#[inline(always)]
unsafe fn interleaved_scales(p: &mut Panel, ty: GgmlType, g: *const u8, b: usize, i: usize) {
    if ty == GgmlType::Q6_K {
        // Sixteen groups a block; no minimum (left at `prepare`'s zeros).
        let s = &mut p.s[b * 16 * NR..(b + 1) * 16 * NR];
        // SAFETY: the group block's d and scales, read within it.
        let head = unsafe { std::slice::from_raw_parts(g, x8_q6_k::VALUES) };
        for r in 0..GROUP_ROWS {
            let d = f16_at(&head[x8_q6_k::D + 2 * r..]);
            for (h, s) in s.chunks_exact_mut(NR).enumerate() {
                let sc = head[x8_q6_k::SCALES + 32 * (h / 4) + 4 * r + h % 4] as i8;
                s[8 * i + r] = d * f32::from(sc);
            }
        }
        return;
    }
    if ty == GgmlType::Q4_K {
        let (s, m) = (
            &mut p.s[b * 8 * NR..(b + 1) * 8 * NR],
            &mut p.m[b * 8 * NR..(b + 1) * 8 * NR],
        );
        // SAFETY: the group block's heads, read within it.
        let head = unsafe { std::slice::from_raw_parts(g, x8::QS) };
        for r in 0..GROUP_ROWS {
            let (d, dmin) = (
                f16_at(&head[x8::D + 2 * r..]),
                f16_at(&head[x8::DMIN + 2 * r..]),
            );
            let mut packed = [0u8; 12];
            for (w, word) in packed.chunks_exact_mut(4).enumerate() {
                let at = x8::WORDS + 32 * w + 4 * r;
                word.copy_from_slice(&head[at..at + 4]);
            }
            let (sc, mn) = scales_mins_k4(&packed);
            for (h, (s, m)) in s
                .chunks_exact_mut(NR)
                .zip(m.chunks_exact_mut(NR))
                .enumerate()
            {
                s[8 * i + r] = d * f32::from(sc[h]);
                m[8 * i + r] = dmin * f32::from(mn[h]);
            }
        }
        return;
    }
    // Q8_0 and Q5_0: the eight f16 scales at the block's start; the
    // minimum terms a negated zero, as in `scales`.
    let at = b * NR + 8 * i;
    let (s, m) = (&mut p.s[at..at + 8], &mut p.m[at..at + 8]);
    // SAFETY: eight f16 read inside the group block, eight f32 written,
    // the slices' lengths; f16c is enabled by the caller.
    unsafe {
        let v = _mm256_cvtph_ps(_mm_loadu_si128(g as *const __m128i));
        _mm256_storeu_ps(s.as_mut_ptr(), v);
        _mm256_storeu_ps(m.as_mut_ptr(), _mm256_set1_ps(-0.0));
    }
}

/// The 32 panel bytes of chunk `j` (of 32 values) of the block at `blk`.
///
/// # Safety
/// avx2 present; `blk` points at a whole block of `ty`.
#[inline(always)]
unsafe fn codes(ty: GgmlType, blk: *const u8, j: usize) -> __m256i {
    let low4 = _mm256_set1_epi8(0x0f);
    // SAFETY: (every load below) fields of the block's type, read
    // within it.
    unsafe {
        match ty {
            GgmlType::Q8_0 => _mm256_xor_si256(
                _mm256_loadu_si256(blk.add(at::Q8_0_QS) as *const __m256i),
                _mm256_set1_epi8(-128),
            ),
            GgmlType::Q4_0 => nibbles(_mm_loadu_si128(blk.add(at::Q4_0_QS) as *const __m128i)),
            GgmlType::IQ4_NL => iq4_codes(blk.add(at::IQ4NL_QS)),
            GgmlType::IQ4_XS => iq4_codes(blk.add(at::IQ4XS_QS + 16 * j)),
            GgmlType::Q5_0 => {
                let qh = (blk.add(at::Q5_0_QH) as *const u32).read_unaligned();
                let lo = nibbles(_mm_loadu_si128(blk.add(at::Q5_0_QS) as *const __m128i));
                _mm256_or_si256(
                    lo,
                    _mm256_and_si256(bits_to_bytes(qh), _mm256_set1_epi8(0x10)),
                )
            }
            GgmlType::Q4_K => {
                let v = _mm256_loadu_si256(blk.add(at::Q4K_QS + 32 * (j / 2)) as *const __m256i);
                if j.is_multiple_of(2) {
                    _mm256_and_si256(v, low4)
                } else {
                    _mm256_and_si256(_mm256_srli_epi16::<4>(v), low4)
                }
            }
            GgmlType::Q5_K => {
                let v = _mm256_loadu_si256(blk.add(at::Q5K_QS + 32 * (j / 2)) as *const __m256i);
                let low = if j.is_multiple_of(2) {
                    _mm256_and_si256(v, low4)
                } else {
                    _mm256_and_si256(_mm256_srli_epi16::<4>(v), low4)
                };
                let qh = _mm256_loadu_si256(blk.add(at::Q5K_QH) as *const __m256i);
                // Bit j of each qh byte to bit 4.
                let high = match j {
                    0 => _mm256_slli_epi16::<4>(qh),
                    1 => _mm256_slli_epi16::<3>(qh),
                    2 => _mm256_slli_epi16::<2>(qh),
                    3 => _mm256_slli_epi16::<1>(qh),
                    4 => qh,
                    5 => _mm256_srli_epi16::<1>(qh),
                    6 => _mm256_srli_epi16::<2>(qh),
                    _ => _mm256_srli_epi16::<3>(qh),
                };
                _mm256_or_si256(low, _mm256_and_si256(high, _mm256_set1_epi8(0x10)))
            }
            GgmlType::Q6_K => {
                let (n, sub) = (j / 4, j % 4);
                let ql = _mm256_loadu_si256(
                    blk.add(at::Q6K_QL + 64 * n + 32 * (sub % 2)) as *const __m256i
                );
                let qh = _mm256_loadu_si256(blk.add(at::Q6K_QH + 32 * n) as *const __m256i);
                let low = if sub < 2 {
                    _mm256_and_si256(ql, low4)
                } else {
                    _mm256_and_si256(_mm256_srli_epi16::<4>(ql), low4)
                };
                // Bits 2*sub..2*sub+2 of qh to bits 4..6.
                let high = match sub {
                    0 => _mm256_slli_epi16::<4>(qh),
                    1 => _mm256_slli_epi16::<2>(qh),
                    2 => qh,
                    _ => _mm256_srli_epi16::<2>(qh),
                };
                _mm256_or_si256(low, _mm256_and_si256(high, _mm256_set1_epi8(0x30)))
            }
            _ => _mm256_setzero_si256(),
        }
    }
}

/// A legacy block's 16 bytes of nibbles as 32 values: low nibbles first.
/// The 16 bytes of IQ4 nibbles at `p` as panel bytes: each nibble's table
/// value plus 128 (the value with its sign bit flipped), element order.
///
/// # Safety
/// `p` must be valid for 16 bytes; avx2 present (as in every caller).
#[inline(always)]
unsafe fn iq4_codes(p: *const u8) -> __m256i {
    // SAFETY: the caller's contract; `KVALUES` holds 16 bytes.
    unsafe {
        let table =
            _mm256_broadcastsi128_si256(_mm_loadu_si128(KVALUES.as_ptr() as *const __m128i));
        let idx = nibbles(_mm_loadu_si128(p as *const __m128i));
        _mm256_xor_si256(_mm256_shuffle_epi8(table, idx), _mm256_set1_epi8(-128))
    }
}

#[inline(always)]
fn nibbles(v: __m128i) -> __m256i {
    // SAFETY: register operations only; avx2 is enabled by the caller.
    unsafe {
        let low4 = _mm_set1_epi8(0x0f);
        let lo = _mm_and_si128(v, low4);
        let hi = _mm_and_si128(_mm_srli_epi16::<4>(v), low4);
        _mm256_set_m128i(hi, lo)
    }
}

/// Byte `i` all ones where bit `i` of `bits` is set, else zero.
#[inline(always)]
fn bits_to_bytes(bits: u32) -> __m256i {
    // SAFETY: register operations only; avx2 is enabled by the caller.
    unsafe {
        // Byte i takes byte i/8 of the word, then every bit but bit i%8 is
        // set, so the byte is all ones exactly when bit i%8 was.
        let spread = _mm256_shuffle_epi8(
            _mm256_set1_epi32(bits as i32),
            _mm256_setr_epi64x(
                0x0000_0000_0000_0000,
                0x0101_0101_0101_0101,
                0x0202_0202_0202_0202,
                0x0303_0303_0303_0303,
            ),
        );
        let others = _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe);
        _mm256_cmpeq_epi8(_mm256_or_si256(spread, others), _mm256_set1_epi8(-1))
    }
}

/// Transposes eight rows of eight 4-byte words (`v[i]`, row i) and stores
/// word column k (32 bytes: the rows' words in order) at `dst + k * NR * 4`.
///
/// # Safety
/// avx2 present; `dst + k * NR * 4 .. + 32` writable for k in 0..8.
#[inline(always)]
unsafe fn transpose_store(v: [__m256i; 8], dst: *mut u8) {
    // SAFETY: register operations, then the stores the caller vouches for.
    unsafe {
        let t0 = _mm256_unpacklo_epi32(v[0], v[1]);
        let t1 = _mm256_unpackhi_epi32(v[0], v[1]);
        let t2 = _mm256_unpacklo_epi32(v[2], v[3]);
        let t3 = _mm256_unpackhi_epi32(v[2], v[3]);
        let t4 = _mm256_unpacklo_epi32(v[4], v[5]);
        let t5 = _mm256_unpackhi_epi32(v[4], v[5]);
        let t6 = _mm256_unpacklo_epi32(v[6], v[7]);
        let t7 = _mm256_unpackhi_epi32(v[6], v[7]);
        // Per 128-bit lane, u_k holds word k (lane 0) and k + 4 (lane 1)
        // of rows 0..4 (u0..u3) or 4..8 (u4..u7).
        let u0 = _mm256_unpacklo_epi64(t0, t2);
        let u1 = _mm256_unpackhi_epi64(t0, t2);
        let u2 = _mm256_unpacklo_epi64(t1, t3);
        let u3 = _mm256_unpackhi_epi64(t1, t3);
        let u4 = _mm256_unpacklo_epi64(t4, t6);
        let u5 = _mm256_unpackhi_epi64(t4, t6);
        let u6 = _mm256_unpacklo_epi64(t5, t7);
        let u7 = _mm256_unpackhi_epi64(t5, t7);
        let cols = [
            _mm256_permute2x128_si256::<0x20>(u0, u4),
            _mm256_permute2x128_si256::<0x20>(u1, u5),
            _mm256_permute2x128_si256::<0x20>(u2, u6),
            _mm256_permute2x128_si256::<0x20>(u3, u7),
            _mm256_permute2x128_si256::<0x31>(u0, u4),
            _mm256_permute2x128_si256::<0x31>(u1, u5),
            _mm256_permute2x128_si256::<0x31>(u2, u6),
            _mm256_permute2x128_si256::<0x31>(u3, u7),
        ];
        for (k, col) in cols.into_iter().enumerate() {
            _mm256_storeu_si256(dst.add(k * NR * 4) as *mut __m256i, col);
        }
    }
}

/// Block `b`'s group scales (and minimum terms, where the format has them)
/// for every row, as [`Panel::pack`] stores them.
///
/// # Safety
/// avx2 and f16c present; every row holds block `b` (`bb` bytes); `p.s`
/// and `p.m` hold `groups * NR` values.
#[inline(always)]
unsafe fn scales(p: &mut Panel, ty: GgmlType, rows: &[&[u8]], b: usize, bb: usize) {
    match ty {
        GgmlType::Q4_K | GgmlType::Q5_K => {
            // This block's groups of every row: NR values per group.
            let (s, m) = (
                &mut p.s[b * 8 * NR..(b + 1) * 8 * NR],
                &mut p.m[b * 8 * NR..(b + 1) * 8 * NR],
            );
            for (r, row) in rows.iter().enumerate() {
                // Q4_K and Q5_K share the head: d, dmin, scales.
                let blk: &BlockQ4K = block(&row[b * bb..(b + 1) * bb]);
                let (d, dmin) = (blk.d.get(), blk.dmin.get());
                let (sc, mn) = scales_mins_k4(&blk.scales);
                for (h, (s, m)) in s
                    .chunks_exact_mut(NR)
                    .zip(m.chunks_exact_mut(NR))
                    .enumerate()
                {
                    s[r] = d * f32::from(sc[h]);
                    m[r] = dmin * f32::from(mn[h]);
                }
            }
        }
        GgmlType::IQ4_XS => {
            // The portable packer's `d · (ls − 32)`; no minimum terms (`m`
            // stays the zeros `prepare` left).
            let s = &mut p.s[b * K_SUB_BLOCKS * NR..(b + 1) * K_SUB_BLOCKS * NR];
            for (r, row) in rows.iter().enumerate() {
                let blk: &BlockIQ4XS = block(&row[b * bb..(b + 1) * bb]);
                let d = blk.d.get();
                for (ib, s) in s.chunks_exact_mut(NR).enumerate() {
                    s[r] = d * (xs_scale(blk, ib) - XS_SCALE_BIAS) as f32;
                }
            }
        }
        GgmlType::Q6_K => {
            let s = &mut p.s[b * 16 * NR..(b + 1) * 16 * NR];
            for (r, row) in rows.iter().enumerate() {
                let blk: &BlockQ6K = block(&row[b * bb..(b + 1) * bb]);
                let d = blk.d.get();
                for (s, &sc) in s.chunks_exact_mut(NR).zip(&blk.scales) {
                    s[r] = d * f32::from(sc);
                }
            }
        }
        _ => {
            // One f16 scale at the block's start per row; the minimum
            // terms (never read for these formats) are a negated zero, as
            // the portable packer stores `-m` of a block with no minimum.
            let mut h = [0u16; NR];
            for (h, row) in h.iter_mut().zip(rows) {
                // SAFETY: every row holds block `b` (the caller's contract),
                // whose first two bytes are its scale. Unchecked: this runs
                // for 32 rows per block, and the checks were a tenth of the
                // packer's time (`perf annotate`).
                *h = u16::from_le(unsafe {
                    (row.as_ptr().add(b * bb) as *const u16).read_unaligned()
                });
            }
            let s = &mut p.s[b * NR..(b + 1) * NR];
            let m = &mut p.m[b * NR..(b + 1) * NR];
            for ((s, m), h) in s
                .chunks_exact_mut(8)
                .zip(m.chunks_exact_mut(8))
                .zip(h.chunks_exact(8))
            {
                // SAFETY: eight u16 read and eight f32 written, the slices'
                // lengths; f16c is enabled by the caller.
                unsafe {
                    let v = _mm256_cvtph_ps(_mm_loadu_si128(h.as_ptr() as *const __m128i));
                    _mm256_storeu_ps(s.as_mut_ptr(), v);
                    _mm256_storeu_ps(m.as_mut_ptr(), _mm256_set1_ps(-0.0));
                }
            }
        }
    }
}
