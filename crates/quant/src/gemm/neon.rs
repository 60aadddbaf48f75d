//! The AArch64 tile kernel: NEON with the `dotprod` extension (Cortex-A76
//! and later: the Raspberry Pi 5, Neoverse N1 servers, Apple M1).
//!
//! The panel's column step holds four bytes of each of its 32 rows, so one
//! 16-byte load is four rows' four bytes, and `sdot` by element (`sdot
//! v.4s, w.16b, a.4b[l]`) adds the dot of each row's four bytes with one
//! activation row's four bytes at that step into that row's lane: four
//! rows' sums per instruction, 16 multiply-adds, with no broadcast.
//!
//! `sdot` multiplies signed bytes. Every format but Q8_0 stores values of
//! at most 63 after its offset, which read the same as signed bytes, so
//! their sums start from the activations' offset correction as on x86.
//! Q8_0 stores `q + 128`; its bytes flipped by `eor 0x80` are `q` itself,
//! so its sums start at zero. Either way each group ends at the exact
//! integer `sum(q * a)` of the reference, and the float steps are the
//! reference's in its order, so the tile gives [`super::tile_scalar`]'s
//! numbers to the bit.
//!
//! `sdot` is not among Rust's stable intrinsics, so it is written as inline
//! assembly, as [`crate::simd`]'s AArch64 kernels write it.

use super::{Acts, Panel, RowsFrom, Tile, MR, NR, QK, ROWS4};
use crate::formats::kquants::QK_K;
use std::arch::aarch64::*;
use std::arch::asm;

/// Panel rows per sweep: 16 rows (four vectors of four lanes) against up
/// to four activation rows is 16 accumulators, which leaves registers for
/// the weights and activations (32 rows would need all 32 for the sums).
const HALF: usize = 16;

/// One column step for four activation rows against 16 panel rows: loads
/// the step's 64 bytes at `w` (four rows' four bytes a register, bytes
/// flipped by `eor 0x80` where `FLIP`) and adds to `acc[c][i]` the dots of
/// rows `4i..4i + 4` with activation row `c`'s bytes `4L..4L + 4` of
/// `x[c]`.
///
/// One assembly block per step, loads included: written as intrinsics, the
/// compiler hoisted every step's weight loads to the top of the group and
/// spilled the sums (16 sums, 16 weights and 4 activations are more than
/// the 32 registers).
///
/// # Safety
/// The CPU must have `dotprod` (the callers are compiled for it); `w` must
/// be valid for 64 bytes.
#[inline(always)]
unsafe fn step<const L: u32, const FLIP: bool>(
    acc: &mut [[int32x4_t; 4]; 4],
    w: *const u8,
    x: &[int8x16_t; 4],
) {
    let [[a00, a01, a02, a03], [a10, a11, a12, a13], [a20, a21, a22, a23], [a30, a31, a32, a33]] =
        acc;
    macro_rules! body {
        ($flip:literal, $($sign:tt)*) => {
            // SAFETY: the caller's contract: 64 readable bytes at `w`, and
            // `dotprod`; the block touches only its operands.
            unsafe {
                asm!(
                    "ldp {w0:q}, {w1:q}, [{p}]",
                    "ldp {w2:q}, {w3:q}, [{p}, #32]",
                    $flip,
                    "sdot {a00:v}.4s, {w0:v}.16b, {x0:v}.4b[{l}]",
                    "sdot {a01:v}.4s, {w1:v}.16b, {x0:v}.4b[{l}]",
                    "sdot {a02:v}.4s, {w2:v}.16b, {x0:v}.4b[{l}]",
                    "sdot {a03:v}.4s, {w3:v}.16b, {x0:v}.4b[{l}]",
                    "sdot {a10:v}.4s, {w0:v}.16b, {x1:v}.4b[{l}]",
                    "sdot {a11:v}.4s, {w1:v}.16b, {x1:v}.4b[{l}]",
                    "sdot {a12:v}.4s, {w2:v}.16b, {x1:v}.4b[{l}]",
                    "sdot {a13:v}.4s, {w3:v}.16b, {x1:v}.4b[{l}]",
                    "sdot {a20:v}.4s, {w0:v}.16b, {x2:v}.4b[{l}]",
                    "sdot {a21:v}.4s, {w1:v}.16b, {x2:v}.4b[{l}]",
                    "sdot {a22:v}.4s, {w2:v}.16b, {x2:v}.4b[{l}]",
                    "sdot {a23:v}.4s, {w3:v}.16b, {x2:v}.4b[{l}]",
                    "sdot {a30:v}.4s, {w0:v}.16b, {x3:v}.4b[{l}]",
                    "sdot {a31:v}.4s, {w1:v}.16b, {x3:v}.4b[{l}]",
                    "sdot {a32:v}.4s, {w2:v}.16b, {x3:v}.4b[{l}]",
                    "sdot {a33:v}.4s, {w3:v}.16b, {x3:v}.4b[{l}]",
                    p = in(reg) w,
                    l = const L,
                    w0 = out(vreg) _,
                    w1 = out(vreg) _,
                    w2 = out(vreg) _,
                    w3 = out(vreg) _,
                    $($sign)*
                    x0 = in(vreg) x[0],
                    x1 = in(vreg) x[1],
                    x2 = in(vreg) x[2],
                    x3 = in(vreg) x[3],
                    a00 = inout(vreg) *a00,
                    a01 = inout(vreg) *a01,
                    a02 = inout(vreg) *a02,
                    a03 = inout(vreg) *a03,
                    a10 = inout(vreg) *a10,
                    a11 = inout(vreg) *a11,
                    a12 = inout(vreg) *a12,
                    a13 = inout(vreg) *a13,
                    a20 = inout(vreg) *a20,
                    a21 = inout(vreg) *a21,
                    a22 = inout(vreg) *a22,
                    a23 = inout(vreg) *a23,
                    a30 = inout(vreg) *a30,
                    a31 = inout(vreg) *a31,
                    a32 = inout(vreg) *a32,
                    a33 = inout(vreg) *a33,
                    options(nostack, preserves_flags, readonly)
                );
            }
        };
    }
    if FLIP {
        body!(
            "eor {w0:v}.16b, {w0:v}.16b, {sign:v}.16b
             eor {w1:v}.16b, {w1:v}.16b, {sign:v}.16b
             eor {w2:v}.16b, {w2:v}.16b, {sign:v}.16b
             eor {w3:v}.16b, {w3:v}.16b, {sign:v}.16b",
            sign = in(vreg) vdupq_n_u8(0x80),
        );
    } else {
        body!("",);
    }
}

/// The `dotprod` tile: [`super::tile_scalar`]'s numbers.
///
/// # Safety
/// The CPU must have `dotprod`; `p` and `a` hold what [`super::tile`]
/// asserts, and `p.g` is 16 or 32.
pub(super) unsafe fn tile_dotprod(p: &Panel, a: &Acts, c0: usize, m: usize) -> Tile {
    const _: () = assert!(MR >= ROWS4 && ROWS4 == 4 && NR == 2 * HALF);
    let m = m.min(ROWS4);
    if m == 0 {
        // No activation row to read (the sums would read row `c0`).
        return [[0.0; NR]; MR];
    }
    // Only Q8_0's stored bytes reach 128 (its offset is 128, every other
    // format's at most 32 with values of at most 63).
    let flip = p.off >= 128;
    // SAFETY: the caller's contract, passed on.
    unsafe {
        match (p.g, p.min, flip) {
            (16, false, _) => tile_g::<16, false, false>(p, a, c0, m),
            (16, true, _) => tile_g::<16, true, false>(p, a, c0, m),
            (_, false, false) => tile_g::<32, false, false>(p, a, c0, m),
            (_, true, false) => tile_g::<32, true, false>(p, a, c0, m),
            (_, false, true) => tile_g::<32, false, true>(p, a, c0, m),
            (_, true, true) => tile_g::<32, true, true>(p, a, c0, m),
        }
    }
}

/// One tile of `m` activation rows (from `c0`) against the panel, groups of
/// `G`, with minimum terms where `MIN`, Q8_0's flipped bytes where `FLIP`.
/// The integer sums always run for four rows (a short tile repeats its
/// first row in the missing ones, whose sums are dropped), so one step
/// kernel serves every tile.
///
/// # Safety
/// As [`tile_dotprod`], with `p.g == G` and `1 <= m <= ROWS4`.
#[target_feature(enable = "neon,dotprod")]
unsafe fn tile_g<const G: usize, const MIN: bool, const FLIP: bool>(
    p: &Panel,
    a: &Acts,
    c0: usize,
    m: usize,
) -> Tile {
    let mut out = [[0.0f32; NR]; MR];
    // A super-block's sums without the activation scale (Q8_K rows, see
    // `super::tile_scalar`).
    let mut pend = [[0.0f32; NR]; MR];
    let fold = a.fold;
    let cols = p.groups * G;
    let pq = p.q.as_ptr();
    let (ps, pm) = (p.s.as_ptr(), p.m.as_ptr());
    let RowsFrom {
        aq,
        ad,
        asum,
        abase,
    } = a.rows_from(c0);
    // The activation row each of the four sum rows reads.
    let src: [usize; 4] = std::array::from_fn(|c| if c < m { c } else { 0 });
    for g in 0..p.groups {
        // SAFETY: (whole body) group g's panel entries and the elements
        // g*G..(g+1)*G of activation rows c0..c0 + m lie inside the buffers
        // (asserted by `super::tile`); `out` holds MR rows of NR.
        unsafe {
            for h in 0..NR / HALF {
                let mut acc: [[int32x4_t; 4]; 4] = std::array::from_fn(|c| {
                    [vdupq_n_s32(if FLIP {
                        0
                    } else {
                        *abase.add(src[c] * p.groups + g)
                    }); 4]
                });
                for t in 0..G / 16 {
                    // Four column steps: 16 bytes of each activation row.
                    let x: [int8x16_t; 4] = std::array::from_fn(|c| {
                        vld1q_s8(aq.add(src[c] * cols + g * G + 16 * t) as *const i8)
                    });
                    let w = pq.add((g * (G / 4) + 4 * t) * NR * 4 + h * HALF * 4);
                    step::<0, FLIP>(&mut acc, w, &x);
                    step::<1, FLIP>(&mut acc, w.add(NR * 4), &x);
                    step::<2, FLIP>(&mut acc, w.add(2 * NR * 4), &x);
                    step::<3, FLIP>(&mut acc, w.add(3 * NR * 4), &x);
                }
                // The reference's float steps, lane by lane: `o += i * (s * d)`
                // fused, then `o -= m * sum` fused where there are minimums;
                // folded, `t = i * s (+ t)` and `t -= m * sum` per group and
                // `o += t * d` per super-block.
                let (first, last) = (g.is_multiple_of(QK_K / G), g % (QK_K / G) == QK_K / G - 1);
                for (c, ((acc_c, out_c), pend_c)) in acc
                    .iter()
                    .zip(out.iter_mut())
                    .zip(pend.iter_mut())
                    .enumerate()
                    .take(m)
                {
                    let d = *ad.add(c * (cols / QK) + g * G / QK);
                    let sum = vdupq_n_f32(if MIN {
                        *asum.add(c * p.groups + g)
                    } else {
                        0.0
                    });
                    for (i, &isum) in acc_c.iter().enumerate() {
                        let at = h * HALF + 4 * i;
                        let o = out_c.as_mut_ptr().add(at);
                        if fold {
                            let t = pend_c.as_mut_ptr().add(at);
                            let (iv, sv) = (vcvtq_f32_s32(isum), vld1q_f32(ps.add(g * NR + at)));
                            let mut v = if first {
                                vmulq_f32(iv, sv)
                            } else {
                                vfmaq_f32(vld1q_f32(t), iv, sv)
                            };
                            if MIN {
                                v = vfmsq_f32(v, vld1q_f32(pm.add(g * NR + at)), sum);
                            }
                            if last {
                                vst1q_f32(o, vfmaq_f32(vld1q_f32(o), v, vdupq_n_f32(d)));
                            } else {
                                vst1q_f32(t, v);
                            }
                            continue;
                        }
                        let sd = vmulq_n_f32(vld1q_f32(ps.add(g * NR + at)), d);
                        let mut v = vfmaq_f32(vld1q_f32(o), vcvtq_f32_s32(isum), sd);
                        if MIN {
                            v = vfmsq_f32(v, vld1q_f32(pm.add(g * NR + at)), sum);
                        }
                        vst1q_f32(o, v);
                    }
                }
            }
        }
    }
    out
}
