//! AArch64 kernels: NEON (every AArch64 CPU) and NEON with the `dotprod`
//! extension (`sdot`: Cortex-A76/A78, Apple M1 and later, Neoverse N1 and
//! later, the Raspberry Pi 5), for the formats llama-quantize's mixes use:
//! Q4_0, Q5_0, Q8_0, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS (their table values
//! by `tbl`), the lattice formats (`lattice`) and the F32/F16/BF16 dots.
//! The other formats stay on the scalar kernels.
//!
//! Both tables follow the canonical order of [`crate::scalar`]: integer
//! products are exact in any order, and the float accumulation uses the same
//! chains, lanes and reduction, so their results equal the scalar kernels'
//! to the bit. The lane layout of the 32-block formats (lane `j` sums the
//! products `4j..4j+4`) is what `sdot` computes natively; plain NEON gets it
//! from widening multiplies and two pairwise additions.
//!
//! Every kernel is an `unsafe fn` only for the features it was compiled for
//! (checked by [`available`]): it takes its block count from its typed
//! slices.
//!
//! `sdot` and the f16 conversion intrinsics are not stable in Rust yet, so
//! the two instructions they need (`sdot`, `fcvtl`) are written as inline
//! assembly; everything else is `core::arch::aarch64`.

use std::arch::aarch64::*;
use std::arch::asm;

use super::{raw, FloatKernels, FormatKernels, GemmTier, Kernels, SCALAR};
use crate::formats::blocks::{
    at, block, Bf16Le, BlockFormat, BlockIQ4NL, BlockIQ4XS, BlockQ4K, BlockQ4_0, BlockQ5K,
    BlockQ5_0, BlockQ6K, BlockQ8K, BlockQ8_0, F16Le, F32Le, K_SUB_BLOCKS,
};
use crate::formats::f16_at;
use crate::formats::iquants::{xs_scale, KVALUES, XS_SCALE_BIAS};
use crate::formats::kquants::scales_mins_k4;

/// How a table turns 16 pairs of signed bytes into four lanes, lane `j`
/// holding the exact sum of the products `4j..4j+4`.
trait Products {
    /// `acc + products(a, b)`, lanewise.
    ///
    /// # Safety
    /// The CPU must have the features the implementation needs.
    unsafe fn dot4(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t;
}

/// Plain NEON: `smull` to 16-bit products, widening pairwise additions.
struct Widening;

impl Products for Widening {
    #[inline(always)]
    unsafe fn dot4(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
        // 8 x 8 bit products fit 16 bits (at most 128 * 128); pairs are
        // widened to 32 bits before they are added, so nothing saturates.
        let lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
        let hi = vmull_high_s8(a, b);
        let pairs = vpaddq_s32(vpaddlq_s16(lo), vpaddlq_s16(hi));
        vaddq_s32(acc, pairs)
    }
}

/// The `dotprod` extension's `sdot`.
struct Sdot;

impl Products for Sdot {
    #[inline(always)]
    unsafe fn dot4(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
        let mut acc = acc;
        // SAFETY: only reached from kernels compiled with `dotprod` and put
        // in a table after `is_aarch64_feature_detected!("dotprod")`; the
        // instruction reads and writes registers only.
        unsafe {
            asm!(
                "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
                acc = inout(vreg) acc,
                a = in(vreg) a,
                b = in(vreg) b,
                options(pure, nomem, nostack, preserves_flags)
            );
        }
        acc
    }
}

/// Loads 16 bytes at `p` as signed bytes.
///
/// # Safety
/// `p` must be valid for 16 bytes.
#[inline(always)]
unsafe fn ld_s8(p: *const u8) -> int8x16_t {
    // SAFETY: caller guarantees 16 readable bytes; NEON loads need no alignment.
    unsafe { vld1q_s8(p as *const i8) }
}

/// Loads 16 bytes at `p`.
///
/// # Safety
/// `p` must be valid for 16 bytes.
#[inline(always)]
unsafe fn ld_u8(p: *const u8) -> uint8x16_t {
    // SAFETY: as for `ld_s8`.
    unsafe { vld1q_u8(p) }
}

/// The canonical reduction of eight lanes held as `lo` (lanes 0–3) and `hi`
/// (lanes 4–7): [`crate::scalar::hsum8`].
#[inline(always)]
unsafe fn hsum8(lo: float32x4_t, hi: float32x4_t) -> f32 {
    let h = vaddq_f32(lo, hi);
    let pair = vadd_f32(vget_low_f32(h), vget_high_f32(h));
    vpadds_f32(pair)
}

/// The 32-block formats against Q8_0 in the canonical order
/// ([`crate::scalar`]'s `legacy_q8_0`): `unpack` gives the block's 32
/// signed weights as elements 0–15 and 16–31.
///
/// # Safety
/// `w` holds `nb` blocks of `wb` bytes, `a` holds `nb` Q8_0 blocks.
#[inline(always)]
unsafe fn legacy_q8_0<P: Products>(
    w: &[u8],
    a: &[u8],
    nb: usize,
    wb: usize,
    unpack: impl Fn(*const u8) -> (int8x16_t, int8x16_t),
) -> f32 {
    let zero = vdupq_n_f32(0.0);
    // Chains 0 and 1, each eight lanes in two registers.
    let mut c = [[zero; 2]; 2];
    for b in 0..nb {
        // SAFETY: block `b` lies inside both slices (the caller's contract).
        unsafe {
            let pw = w.as_ptr().add(b * wb);
            let pa = a.as_ptr().add(b * BlockQ8_0::BYTES);
            let d = f16_at(std::slice::from_raw_parts(pw, 2))
                * f16_at(std::slice::from_raw_parts(pa, 2));
            let (q0, q1) = unpack(pw);
            let z = vdupq_n_s32(0);
            let p0 = P::dot4(z, q0, ld_s8(pa.add(at::Q8_0_QS)));
            let p1 = P::dot4(z, q1, ld_s8(pa.add(at::Q8_0_QS + 16)));
            let ch = &mut c[b % 2];
            ch[0] = vfmaq_n_f32(ch[0], vcvtq_f32_s32(p0), d);
            ch[1] = vfmaq_n_f32(ch[1], vcvtq_f32_s32(p1), d);
        }
    }
    // SAFETY: register arithmetic only.
    unsafe { hsum8(vaddq_f32(c[0][0], c[1][0]), vaddq_f32(c[0][1], c[1][1])) }
}

/// Q8_0 weights: 32 signed bytes after the scale.
#[inline(always)]
unsafe fn unpack_q8_0(p: *const u8) -> (int8x16_t, int8x16_t) {
    // SAFETY: `p` points at a whole Q8_0 block, whose 32 `qs` these are.
    unsafe { (ld_s8(p.add(at::Q8_0_QS)), ld_s8(p.add(at::Q8_0_QS + 16))) }
}

/// Q4_0 weights: low nibbles are elements 0–15, high nibbles 16–31, less 8.
#[inline(always)]
unsafe fn unpack_q4_0(p: *const u8) -> (int8x16_t, int8x16_t) {
    // SAFETY: `p` points at a whole Q4_0 block, whose 16 `qs` bytes these are.
    unsafe {
        let qs = ld_u8(p.add(at::Q4_0_QS));
        let eight = vdupq_n_s8(8);
        let lo = vreinterpretq_s8_u8(vandq_u8(qs, vdupq_n_u8(0x0F)));
        let hi = vreinterpretq_s8_u8(vshrq_n_u8::<4>(qs));
        (vsubq_s8(lo, eight), vsubq_s8(hi, eight))
    }
}

/// The 16 bytes of nibbles at `p` as table values ([`KVALUES`], by
/// `tbl`): elements 0–15 from the low nibbles, 16–31 from the high ones.
///
/// # Safety
/// `p` must be valid for 16 bytes.
#[inline(always)]
unsafe fn iq4_values(p: *const u8) -> (int8x16_t, int8x16_t) {
    // SAFETY: the caller's contract; `KVALUES` is 16 bytes.
    unsafe {
        let table = vld1q_s8(KVALUES.as_ptr());
        let qs = ld_u8(p);
        (
            vqtbl1q_s8(table, vandq_u8(qs, vdupq_n_u8(0x0F))),
            vqtbl1q_s8(table, vshrq_n_u8::<4>(qs)),
        )
    }
}

/// IQ4_NL weights: the table values of its nibbles.
#[inline(always)]
unsafe fn unpack_iq4_nl(p: *const u8) -> (int8x16_t, int8x16_t) {
    // SAFETY: `p` points at a whole IQ4_NL block, whose 16 `qs` bytes these are.
    unsafe { iq4_values(p.add(at::IQ4NL_QS)) }
}

/// Bit `i` of `bits` (16 bits) as byte `i`: 0x10 where set, else 0.
#[inline(always)]
unsafe fn high_bits(bits: u16) -> uint8x16_t {
    const MASK: [u8; size_of::<uint8x16_t>()] =
        [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
    // SAFETY: `MASK` is 16 bytes; the rest is register arithmetic.
    unsafe {
        let [b0, b1] = bits.to_le_bytes();
        let spread = vcombine_u8(vdup_n_u8(b0), vdup_n_u8(b1));
        vandq_u8(vtstq_u8(spread, vld1q_u8(MASK.as_ptr())), vdupq_n_u8(0x10))
    }
}

/// Q5_0 weights: nibbles as Q4_0 with a fifth bit from `qh`, less 16.
#[inline(always)]
unsafe fn unpack_q5_0(p: *const u8) -> (int8x16_t, int8x16_t) {
    // SAFETY: `p` points at a whole Q5_0 block: its `qh` and 16 `qs` bytes.
    unsafe {
        let qh = u32::from_le_bytes(*(p.add(at::Q5_0_QH) as *const [u8; size_of::<u32>()]));
        let qs = ld_u8(p.add(at::Q5_0_QS));
        let lo = vorrq_u8(vandq_u8(qs, vdupq_n_u8(0x0F)), high_bits(qh as u16));
        let hi = vorrq_u8(vshrq_n_u8::<4>(qs), high_bits((qh >> 16) as u16));
        let sixteen = vdupq_n_s8(16);
        (
            vsubq_s8(vreinterpretq_s8_u8(lo), sixteen),
            vsubq_s8(vreinterpretq_s8_u8(hi), sixteen),
        )
    }
}

/// Sum of `mins[s] * (bsum[2s] + bsum[2s+1])` over the 8 sub-blocks of a
/// Q4_K/Q5_K block: the min correction, exact.
#[inline(always)]
unsafe fn min_sum(mins: &[u8; K_SUB_BLOCKS], a: *const u8) -> i32 {
    // SAFETY: `a` points at a whole Q8_K block, whose 16 i16 `bsums` these are.
    unsafe {
        let s0 = vld1q_s16(a.add(at::Q8K_BSUMS) as *const i16);
        let s1 = vld1q_s16(a.add(at::Q8K_BSUMS + 16) as *const i16);
        // Pairs of 16-element sums: at most 2 * 16 * 128, no overflow.
        let pairs = vpaddq_s16(s0, s1);
        let m = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(mins.as_ptr())));
        let lo = vmull_s16(vget_low_s16(pairs), vget_low_s16(m));
        let hi = vmull_high_s16(pairs, m);
        vaddvq_s32(vaddq_s32(lo, hi))
    }
}

/// A K-quant row against Q8_K, blocks added in order by
/// [`crate::scalar::kquant_block`]: `sums(w_block, a_block)` gives a block's
/// `(d, dmin, isum, msum)`, the exact integer sums and the weight scales.
///
/// # Safety
/// `w` holds `nb` blocks of `wb` bytes, `a` `nb` Q8_K blocks,
/// and `sums` reads only inside the blocks it is given.
#[inline(always)]
unsafe fn kquant_row(
    w: &[u8],
    a: &[u8],
    nb: usize,
    wb: usize,
    sums: impl Fn(&[u8], *const u8) -> (f32, f32, i32, i32),
) -> f32 {
    let mut sum = 0.0f32;
    for (bw, ba) in w
        .chunks_exact(wb)
        .zip(a.chunks_exact(BlockQ8K::BYTES))
        .take(nb)
    {
        let (d, dmin, isum, msum) = sums(bw, ba.as_ptr());
        sum += crate::scalar::kquant_block(d, dmin, crate::formats::f32_at(ba), isum, msum);
    }
    sum
}

/// Q4_K · Q8_K: exact integer sums per block, then
/// [`crate::scalar::kquant_block`], blocks in order.
///
/// # Safety
/// `w` holds `nb` Q4_K blocks, `a` `nb` Q8_K blocks.
#[inline(always)]
unsafe fn q4_k<P: Products>(w: &[u8], a: &[u8], nb: usize) -> f32 {
    // SAFETY: `kquant_row` hands over whole Q4_K blocks and their Q8_K
    // blocks; every read below stays inside them.
    unsafe {
        kquant_row(w, a, nb, BlockQ4K::BYTES, |blk, pa| {
            let pw = blk.as_ptr();
            let head: &BlockQ4K = block(blk);
            let (sc, mins) = scales_mins_k4(&head.scales);
            let qa = pa.add(at::Q8K_QS);
            let mask = vdupq_n_u8(0x0F);
            let mut isum = vdupq_n_s32(0);
            for j in 0..4 {
                let q0 = ld_u8(pw.add(at::Q4K_QS + 32 * j));
                let q1 = ld_u8(pw.add(at::Q4K_QS + 16 + 32 * j));
                let z = vdupq_n_s32(0);
                let lo = P::dot4(
                    P::dot4(
                        z,
                        vreinterpretq_s8_u8(vandq_u8(q0, mask)),
                        ld_s8(qa.add(64 * j)),
                    ),
                    vreinterpretq_s8_u8(vandq_u8(q1, mask)),
                    ld_s8(qa.add(64 * j + 16)),
                );
                let hi = P::dot4(
                    P::dot4(
                        z,
                        vreinterpretq_s8_u8(vshrq_n_u8::<4>(q0)),
                        ld_s8(qa.add(64 * j + 32)),
                    ),
                    vreinterpretq_s8_u8(vshrq_n_u8::<4>(q1)),
                    ld_s8(qa.add(64 * j + 48)),
                );
                isum = vmlaq_n_s32(isum, lo, sc[2 * j] as i32);
                isum = vmlaq_n_s32(isum, hi, sc[2 * j + 1] as i32);
            }
            (
                head.d.get(),
                head.dmin.get(),
                vaddvq_s32(isum),
                min_sum(&mins, pa),
            )
        })
    }
}

/// IQ4_XS · Q8_K: each sub-block's exact dot times its multiplier
/// `ls − 32`, then [`crate::scalar::kquant_block`] (no minimums), blocks in
/// order.
///
/// # Safety
/// `w` holds `nb` IQ4_XS blocks, `a` `nb` Q8_K blocks.
#[inline(always)]
unsafe fn iq4_xs<P: Products>(w: &[u8], a: &[u8], nb: usize) -> f32 {
    // SAFETY: `kquant_row` hands over whole IQ4_XS blocks and their Q8_K
    // blocks; every read below stays inside them.
    unsafe {
        kquant_row(w, a, nb, BlockIQ4XS::BYTES, |blk, pa| {
            let head: &BlockIQ4XS = block(blk);
            let qa = pa.add(at::Q8K_QS);
            let mut isum = vdupq_n_s32(0);
            for ib in 0..K_SUB_BLOCKS {
                let (lo, hi) = iq4_values(blk.as_ptr().add(at::IQ4XS_QS + 16 * ib));
                let z = vdupq_n_s32(0);
                let dot = P::dot4(
                    P::dot4(z, lo, ld_s8(qa.add(32 * ib))),
                    hi,
                    ld_s8(qa.add(32 * ib + 16)),
                );
                isum = vmlaq_n_s32(isum, dot, xs_scale(head, ib) - XS_SCALE_BIAS);
            }
            (head.d.get(), 0.0, vaddvq_s32(isum), 0)
        })
    }
}

/// Q5_K · Q8_K, as [`q4_k`] with a fifth bit per weight from `qh`.
///
/// # Safety
/// `w` holds `nb` Q5_K blocks, `a` `nb` Q8_K blocks.
#[inline(always)]
unsafe fn q5_k<P: Products>(w: &[u8], a: &[u8], nb: usize) -> f32 {
    // SAFETY: `kquant_row` hands over whole Q5_K blocks and their Q8_K
    // blocks; every read below stays inside them.
    unsafe {
        kquant_row(w, a, nb, BlockQ5K::BYTES, |blk, pa| {
            let pw = blk.as_ptr();
            let head: &BlockQ5K = block(blk);
            let (sc, mins) = scales_mins_k4(&head.scales);
            let qh = [ld_u8(pw.add(at::Q5K_QH)), ld_u8(pw.add(at::Q5K_QH + 16))];
            let qa = pa.add(at::Q8K_QS);
            let mask = vdupq_n_u8(0x0F);
            let bit5 = vdupq_n_u8(0x10);
            let mut isum = vdupq_n_s32(0);
            for j in 0..4 {
                let qs = [
                    ld_u8(pw.add(at::Q5K_QS + 32 * j)),
                    ld_u8(pw.add(at::Q5K_QS + 16 + 32 * j)),
                ];
                let lo_bit = vdupq_n_u8(1 << (2 * j));
                let hi_bit = vdupq_n_u8(2 << (2 * j));
                let z = vdupq_n_s32(0);
                let (mut lo, mut hi) = (z, z);
                for h in 0..2 {
                    let l = vorrq_u8(
                        vandq_u8(qs[h], mask),
                        vandq_u8(vtstq_u8(qh[h], lo_bit), bit5),
                    );
                    let u = vorrq_u8(
                        vshrq_n_u8::<4>(qs[h]),
                        vandq_u8(vtstq_u8(qh[h], hi_bit), bit5),
                    );
                    lo = P::dot4(lo, vreinterpretq_s8_u8(l), ld_s8(qa.add(64 * j + 16 * h)));
                    hi = P::dot4(
                        hi,
                        vreinterpretq_s8_u8(u),
                        ld_s8(qa.add(64 * j + 32 + 16 * h)),
                    );
                }
                isum = vmlaq_n_s32(isum, lo, sc[2 * j] as i32);
                isum = vmlaq_n_s32(isum, hi, sc[2 * j + 1] as i32);
            }
            (
                head.d.get(),
                head.dmin.get(),
                vaddvq_s32(isum),
                min_sum(&mins, pa),
            )
        })
    }
}

/// Q6_K · Q8_K: 6-bit weights less 32, a signed scale per 16.
///
/// # Safety
/// `w` holds `nb` Q6_K blocks, `a` `nb` Q8_K blocks.
#[inline(always)]
unsafe fn q6_k<P: Products>(w: &[u8], a: &[u8], nb: usize) -> f32 {
    // SAFETY: `kquant_row` hands over whole Q6_K blocks and their Q8_K
    // blocks; every read below stays inside them.
    unsafe {
        kquant_row(w, a, nb, BlockQ6K::BYTES, |blk, pa| {
            let pw = blk.as_ptr();
            let b6: &BlockQ6K = block(blk);
            let qa = pa.add(at::Q8K_QS);
            let mask = vdupq_n_u8(0x0F);
            let three = vdupq_n_u8(3);
            let off = vdupq_n_s8(32);
            let mut isum = vdupq_n_s32(0);
            for n in 0..2 {
                let ql = pw.add(at::Q6K_QL + 64 * n);
                let qhp = pw.add(at::Q6K_QH + 32 * n);
                for h in 0..2 {
                    // Elements 16h..16h+16 of each of the four 32-runs.
                    let l0 = ld_u8(ql.add(16 * h));
                    let l1 = ld_u8(ql.add(32 + 16 * h));
                    let qh = ld_u8(qhp.add(16 * h));
                    let hb = |s: i32| {
                        vshlq_n_u8::<4>(vandq_u8(vshlq_u8(qh, vdupq_n_s8(-s as i8)), three))
                    };
                    let runs = [
                        vorrq_u8(vandq_u8(l0, mask), hb(0)),
                        vorrq_u8(vandq_u8(l1, mask), hb(2)),
                        vorrq_u8(vshrq_n_u8::<4>(l0), hb(4)),
                        vorrq_u8(vshrq_n_u8::<4>(l1), hb(6)),
                    ];
                    for (r, q) in runs.into_iter().enumerate() {
                        let e = 128 * n + 32 * r + 16 * h;
                        let q = vsubq_s8(vreinterpretq_s8_u8(q), off);
                        let p = P::dot4(vdupq_n_s32(0), q, ld_s8(qa.add(e)));
                        isum = vmlaq_n_s32(isum, p, i32::from(b6.scales[e / 16]));
                    }
                }
            }
            (b6.d.get(), 0.0, vaddvq_s32(isum), 0)
        })
    }
}

/// A float dot in the canonical order ([`crate::scalar::float_dot`]): group
/// `g` of eight into chain `g % 4`, chains combined `(c0 + c2) + (c1 + c3)`,
/// [`hsum8`], then the tail fused one element at a time. `load(i)` gives
/// weights `i..i+4` as f32, `elem(i)` weight `i`.
///
/// # Safety
/// `load` must be sound for every `i + 4 <= n` and `elem` for `i < n`;
/// `x` holds `n` values.
#[inline(always)]
unsafe fn float_dot(
    n: usize,
    x: &[f32],
    load: impl Fn(usize) -> float32x4_t,
    elem: impl Fn(usize) -> f32,
) -> f32 {
    let zero = vdupq_n_f32(0.0);
    let mut c = [[zero; 2]; 4];
    let groups = n / 8;
    let xp = x.as_ptr();
    // SAFETY: every index read is below `groups * 8 <= n`.
    unsafe {
        for g in 0..groups {
            let i = 8 * g;
            let ch = &mut c[g % 4];
            ch[0] = vfmaq_f32(ch[0], load(i), vld1q_f32(xp.add(i)));
            ch[1] = vfmaq_f32(ch[1], load(i + 4), vld1q_f32(xp.add(i + 4)));
        }
    }
    // SAFETY: register arithmetic only.
    let mut sum = unsafe {
        let lo = vaddq_f32(vaddq_f32(c[0][0], c[2][0]), vaddq_f32(c[1][0], c[3][0]));
        let hi = vaddq_f32(vaddq_f32(c[0][1], c[2][1]), vaddq_f32(c[1][1], c[3][1]));
        hsum8(lo, hi)
    };
    for (i, &xv) in x.iter().enumerate().take(n).skip(groups * 8) {
        sum = elem(i).mul_add(xv, sum);
    }
    sum
}

/// Four f16 values at `p` widened to f32 (`fcvtl`, base AArch64).
///
/// # Safety
/// `p` must be valid for 8 bytes.
#[inline(always)]
unsafe fn f16x4(p: *const u8) -> float32x4_t {
    // SAFETY: caller guarantees 8 readable bytes.
    let h = unsafe { vld1_u16(p as *const u16) };
    let out: float32x4_t;
    // SAFETY: `fcvtl` converts registers only; it is part of base AArch64
    // (FP and Advanced SIMD), which every AArch64 Linux CPU has.
    unsafe {
        asm!(
            "fcvtl {out:v}.4s, {h:v}.4h",
            out = lateout(vreg) out,
            h = in(vreg) h,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    out
}

/// F32 · F32.
///
/// # Safety
/// `w` holds `n` f32 and `x` `n` values.
#[inline(always)]
unsafe fn f32_dot(w: &[u8], x: &[f32], n: usize) -> f32 {
    let p = w.as_ptr();
    // SAFETY: the caller's contract covers indices below `n`.
    unsafe {
        float_dot(
            n,
            x,
            |i| vld1q_f32(p.add(4 * i) as *const f32),
            |i| crate::formats::f32_at(&w[4 * i..]),
        )
    }
}

/// F16 · F32.
///
/// # Safety
/// `w` holds `n` f16 and `x` `n` values.
#[inline(always)]
unsafe fn f16_dot(w: &[u8], x: &[f32], n: usize) -> f32 {
    let p = w.as_ptr();
    // SAFETY: the caller's contract covers indices below `n`.
    unsafe { float_dot(n, x, |i| f16x4(p.add(2 * i)), |i| f16_at(&w[2 * i..])) }
}

/// BF16 · BF16 in [`crate::scalar::dot_bf16`]'s order: each 32-bit word
/// holds an odd element in its high half and an even one in its low half,
/// so a mask and a shift make a lane's two operands, the odd's multiply-add
/// first. Equal to the reference where no value falls below f32's normal
/// range (the reference flushes those, as AVX512_BF16 does).
///
/// # Safety
/// `w` holds `n` bf16 and `x` `n` values.
unsafe fn bf16_dot(w: &[u8], x: &[u16], n: usize) -> f32 {
    use crate::scalar::BF16_BLOCK;
    let n = n.min(x.len()).min(w.len() / 2);
    // [block parity][lanes 4q..4q + 4]
    let mut acc = [[vdupq_n_f32(0.0); 4]; 2];
    let high = vdupq_n_u32(0xffff_0000);
    // SAFETY: (callers) `wp` and `xp` point to 32 elements each.
    let step = |acc: &mut [float32x4_t; 4], wp: *const u8, xp: *const u16| {
        for (q, a) in acc.iter_mut().enumerate() {
            // SAFETY: lanes 4q..4q + 4 are elements 8q..8q + 8 of the 32.
            let (wv, xv) = unsafe {
                (
                    vreinterpretq_u32_u8(vld1q_u8(wp.add(16 * q))),
                    vld1q_u32(xp.add(8 * q) as *const u32),
                )
            };
            let odd = |v| vreinterpretq_f32_u32(vandq_u32(v, high));
            let even = |v| vreinterpretq_f32_u32(vshlq_n_u32::<16>(v));
            *a = vfmaq_f32(*a, odd(wv), odd(xv));
            *a = vfmaq_f32(*a, even(wv), even(xv));
        }
    };
    let full = n / BF16_BLOCK;
    for b in 0..full {
        let i = b * BF16_BLOCK;
        // Block b's 32 elements lie within both rows' first `n`.
        step(&mut acc[b % 2], w[2 * i..].as_ptr(), x[i..].as_ptr());
    }
    let i = full * BF16_BLOCK;
    if i < n {
        // The short last block, filled out with zeros.
        let mut wb = [0u8; 2 * BF16_BLOCK];
        let mut xb = [0u16; BF16_BLOCK];
        wb[..2 * (n - i)].copy_from_slice(&w[2 * i..2 * n]);
        xb[..n - i].copy_from_slice(&x[i..n]);
        step(&mut acc[full % 2], wb.as_ptr(), xb.as_ptr());
    }
    let t: [float32x4_t; 4] = std::array::from_fn(|q| vaddq_f32(acc[0][q], acc[1][q]));
    // Lane l plus l + 8, then l + 4, l + 2, l + 1.
    let t = vaddq_f32(vaddq_f32(t[0], t[2]), vaddq_f32(t[1], t[3]));
    let t = vadd_f32(vget_low_f32(t), vget_high_f32(t));
    vget_lane_f32::<0>(t) + vget_lane_f32::<1>(t)
}

/// Writes a table's kernels: `$feat` is the target feature string of the
/// functions, `$p` the [`Products`] they use.
macro_rules! kernels {
    ($feat:literal, $p:ty, $q4_0:ident, $q5_0:ident, $q8_0:ident, $q4_k:ident, $q5_k:ident, $q6_k:ident, $iq4_nl:ident, $iq4_xs:ident) => {
        kernels!(@one $feat, $iq4_nl, BlockIQ4NL, BlockQ8_0, |w, a, nb| {
            legacy_q8_0::<$p>(w, a, nb, BlockIQ4NL::BYTES, |p| unpack_iq4_nl(p))
        });
        kernels!(@one $feat, $iq4_xs, BlockIQ4XS, BlockQ8K, |w, a, nb| iq4_xs::<$p>(w, a, nb));
        kernels!(@one $feat, $q4_0, BlockQ4_0, BlockQ8_0, |w, a, nb| {
            legacy_q8_0::<$p>(w, a, nb, BlockQ4_0::BYTES, |p| unpack_q4_0(p))
        });
        kernels!(@one $feat, $q5_0, BlockQ5_0, BlockQ8_0, |w, a, nb| {
            legacy_q8_0::<$p>(w, a, nb, BlockQ5_0::BYTES, |p| unpack_q5_0(p))
        });
        kernels!(@one $feat, $q8_0, BlockQ8_0, BlockQ8_0, |w, a, nb| {
            legacy_q8_0::<$p>(w, a, nb, BlockQ8_0::BYTES, |p| unpack_q8_0(p))
        });
        kernels!(@one $feat, $q4_k, BlockQ4K, BlockQ8K, |w, a, nb| q4_k::<$p>(w, a, nb));
        kernels!(@one $feat, $q5_k, BlockQ5K, BlockQ8K, |w, a, nb| q5_k::<$p>(w, a, nb));
        kernels!(@one $feat, $q6_k, BlockQ6K, BlockQ8K, |w, a, nb| q6_k::<$p>(w, a, nb));
    };
    (@one $feat:literal, $name:ident, $block:ty, $acts:ty, |$w:ident, $a:ident, $nb:ident| $body:expr) => {
        /// # Safety
        /// The features of `$feat` present.
        #[target_feature(enable = $feat)]
        unsafe fn $name(w: &[$block], a: &[$acts]) -> f32 {
            let $nb = w.len().min(a.len());
            let ($w, $a) = (raw(w), raw(a));
            // SAFETY: both hold `nb` blocks.
            unsafe { $body }
        }
    };
}

kernels!(
    "neon",
    Widening,
    q4_0_neon,
    q5_0_neon,
    q8_0_neon,
    q4_k_neon,
    q5_k_neon,
    q6_k_neon,
    iq4_nl_neon,
    iq4_xs_neon
);
kernels!(
    "neon,dotprod",
    Sdot,
    q4_0_dp,
    q5_0_dp,
    q8_0_dp,
    q4_k_dp,
    q5_k_dp,
    q6_k_dp,
    iq4_nl_dp,
    iq4_xs_dp
);

/// F32 · F32 (NEON).
#[target_feature(enable = "neon")]
unsafe fn f32_neon(w: &[F32Le], x: &[f32]) -> f32 {
    // SAFETY: both hold that many elements.
    unsafe { f32_dot(raw(w), x, w.len().min(x.len())) }
}
/// F16 · F32 (NEON).
#[target_feature(enable = "neon")]
unsafe fn f16_neon(w: &[F16Le], x: &[f32]) -> f32 {
    // SAFETY: both hold that many elements.
    unsafe { f16_dot(raw(w), x, w.len().min(x.len())) }
}
/// BF16 · BF16 (NEON).
#[target_feature(enable = "neon")]
unsafe fn bf16_neon(w: &[Bf16Le], x: &[u16]) -> f32 {
    // SAFETY: both hold that many elements.
    unsafe { bf16_dot(raw(w), x, w.len().min(x.len())) }
}

/// The f32 vector dot of [`crate::vector`] in the canonical order.
pub(crate) fn vector_dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let p = a.as_ptr();
    // SAFETY: NEON is part of every AArch64 target; indices stay below `n`,
    // which both slices hold.
    unsafe { float_dot(n, b, |i| vld1q_f32(p.add(i)), |i| a[i]) }
}

/// `y[i] += alpha * x[i]`, one fused multiply-add per element.
pub(crate) fn vector_axpy(y: &mut [f32], alpha: f32, x: &[f32]) {
    let n = y.len().min(x.len());
    let full = n / 4 * 4;
    let (yp, xp) = (y.as_mut_ptr(), x.as_ptr());
    // SAFETY: NEON is part of every AArch64 target; indices stay below `n`.
    unsafe {
        for i in (0..full).step_by(4) {
            let v = vfmaq_n_f32(vld1q_f32(yp.add(i)), vld1q_f32(xp.add(i)), alpha);
            vst1q_f32(yp.add(i), v);
        }
    }
    for i in full..n {
        y[i] = alpha.mul_add(x[i], y[i]);
    }
}

/// Every AArch64 table this CPU can run, slowest first.
pub(crate) fn available() -> Vec<&'static Kernels> {
    static NEON: Kernels = Kernels {
        name: "neon",
        q4_0: FormatKernels::dot(q4_0_neon),
        q5_0: FormatKernels::dot(q5_0_neon),
        q8_0: FormatKernels::dot(q8_0_neon),
        q4_k: FormatKernels::dot(q4_k_neon),
        q5_k: FormatKernels::dot(q5_k_neon),
        q6_k: FormatKernels::dot(q6_k_neon),
        iq4_nl: FormatKernels::dot(iq4_nl_neon),
        iq4_xs: FormatKernels::dot(iq4_xs_neon),
        lattice: super::lattice_kernels!(lattice::dot_neon),
        f32: FloatKernels::dot(f32_neon),
        f16: FloatKernels::dot(f16_neon),
        bf16: FloatKernels::dot(bf16_neon),
        gemm: GemmTier::Neon,
        ..SCALAR
    };
    static DOTPROD: Kernels = Kernels {
        name: "dotprod",
        q4_0: FormatKernels::dot(q4_0_dp),
        q5_0: FormatKernels::dot(q5_0_dp),
        q8_0: FormatKernels::dot(q8_0_dp),
        q4_k: FormatKernels::dot(q4_k_dp),
        q5_k: FormatKernels::dot(q5_k_dp),
        q6_k: FormatKernels::dot(q6_k_dp),
        iq4_nl: FormatKernels::dot(iq4_nl_dp),
        iq4_xs: FormatKernels::dot(iq4_xs_dp),
        lattice: super::lattice_kernels!(lattice::dot_dotprod),
        gemm: GemmTier::Dotprod,
        ..NEON
    };
    let mut v = vec![&NEON];
    if std::arch::is_aarch64_feature_detected!("dotprod") {
        v.push(&DOTPROD);
    }
    v
}

/// The lattice formats (IQ2, IQ3, IQ1).
mod lattice;
