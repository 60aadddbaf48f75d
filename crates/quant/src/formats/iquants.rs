//! The 4-bit non-linear formats: IQ4_NL (blocks of 32) and IQ4_XS
//! (super-blocks of 256).
//!
//! Layouts (little-endian, packed), as in ggml-common.h:
//! - `block_iq4_nl`: d f16, qs[16] (element j in the low nibble of qs[j],
//!   j+16 in the high one); value = d · KVALUES[nibble]
//! - `block_iq4_xs`: d f16, scales_h u16, scales_l[4], qs[128]; sub-block
//!   ib of 32 has the 6-bit scale ls = low nibble ib of `scales_l` | bits
//!   2ib..2ib+2 of `scales_h` << 4, its nibbles in qs[16ib..16ib+16] laid
//!   out as IQ4_NL's; value = d · (ls − 32) · KVALUES[nibble]
//!
//! Both decode to the family forms their activations pair with: IQ4_NL to
//! [`legacy::Unpacked`] (against Q8_0, a scale per 32, as Q4_0), IQ4_XS to
//! [`kquants::Unpacked`] (against Q8_K, the integer sum of a super-block
//! scaled once, as Q4_K, with no minimums), so dequantizing, the scalar
//! dots and the panel product read them as they read those.

use super::blocks::{blocks_mut, BlockIQ4NL, BlockIQ4XS, K_SUB_BLOCKS};
use super::kquants::{self, QK_K};
use super::legacy::{self, QK};
use super::{nearest_int, GROUP_MAX_EPS};

/// `kvalues_iq4nl`: the 16 values a nibble indexes, ascending.
pub(crate) const KVALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// Offset of IQ4_XS's 6-bit scales: a sub-block's multiplier is `ls − 32`.
pub(crate) const XS_SCALE_BIAS: i32 = 32;

/// The 32 values of 16 bytes of nibbles through [`KVALUES`]: element `j`
/// from the low nibble of `qs[j]`, `j + 16` from the high one.
#[inline(always)]
fn values32(qs: &[u8], q: &mut [i8]) {
    for j in 0..QK / 2 {
        q[j] = KVALUES[(qs[j] & 0x0F) as usize];
        q[j + QK / 2] = KVALUES[(qs[j] >> 4) as usize];
    }
}

/// IQ4_NL's values and scale, as a legacy block with no minimum.
#[inline(always)]
pub(crate) fn unpack_iq4_nl(b: &BlockIQ4NL) -> legacy::Unpacked {
    let mut q = [0i8; QK];
    values32(&b.qs, &mut q);
    legacy::Unpacked {
        d: b.d.get(),
        m: 0.0,
        q,
    }
}

/// IQ4_XS's 6-bit scale of sub-block `ib` (0..8), `ls` before the bias.
#[inline(always)]
pub(crate) fn xs_scale(b: &BlockIQ4XS, ib: usize) -> i32 {
    let low = (b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0F;
    let high = (u16::from_le_bytes(b.scales_h) >> (2 * ib)) & 3;
    i32::from(low) | i32::from(high) << 4
}

/// IQ4_XS's values, and each sub-block's `ls − 32` spread over the
/// 16-element grid, as a K-quant block with no minimums.
pub(crate) fn unpack_iq4_xs(b: &BlockIQ4XS) -> kquants::Unpacked {
    let mut u = kquants::Unpacked::new(b.d.get(), 0.0);
    for ib in 0..K_SUB_BLOCKS {
        values32(
            &b.qs[16 * ib..16 * ib + 16],
            &mut u.q[QK * ib..QK * ib + QK],
        );
        let s = xs_scale(b, ib) - XS_SCALE_BIAS;
        u.sc[2 * ib] = s;
        u.sc[2 * ib + 1] = s;
    }
    u
}

/// ggml's `best_index_int8`: the index of the [`KVALUES`] entry nearest
/// `x` (the lower one on a tie), by bisection as ggml does it.
#[inline(always)]
fn best_index(x: f32) -> usize {
    let v = |i: usize| f32::from(KVALUES[i]);
    if x <= v(0) {
        return 0;
    }
    if x >= v(15) {
        return 15;
    }
    let (mut ml, mut mu) = (0, 15);
    while mu - ml > 1 {
        let mav = (ml + mu) / 2;
        if x < v(mav) {
            mu = mav;
        } else {
            ml = mav;
        }
    }
    if x - v(mu - 1) < v(mu) - x {
        mu - 1
    } else {
        mu
    }
}

/// Candidate scales tried either side of the first guess (`ntry` in
/// ggml's `quantize_row_iq4_nl_impl`, 7 for what `llama-quantize` writes).
const NTRY: i32 = 7;

/// The weighted sums `Σ w·q·x` and `Σ w·q²` of the values `x` rounded to
/// the table at inverse scale `id` (weights `w = x²`), in ggml's order.
#[inline(always)]
fn fit(x: &[f32], id: f32) -> (f32, f32) {
    let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
    for &xj in x {
        let q = f32::from(KVALUES[best_index(id * xj)]);
        let w = xj * xj;
        sumqx += w * q * xj;
        sumq2 += w * q * q;
    }
    (sumqx, sumq2)
}

/// The best scale of one block of 32 (`quantize_row_iq4_nl_impl`'s
/// per-block search without an importance matrix, `ntry` = 7); zero for a
/// block of (near) zeros. (ggml keeps the indices of its first guess too,
/// but both formats round every value again at the scale they store.)
fn block_scale(x: &[f32]) -> f32 {
    let (amax, max) = super::signed_amax(x);
    if amax < GROUP_MAX_EPS {
        return 0.0;
    }
    let k0 = f32::from(KVALUES[0]);
    let d = -max / k0;
    let (sumqx, sumq2) = fit(x, 1.0 / d);
    let mut d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
    let mut best = d * sumqx;
    for itry in -NTRY..=NTRY {
        let id = (itry as f32 + k0) / max;
        let (sumqx, sumq2) = fit(x, id);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    d
}

/// Packs 32 indices into 16 bytes of nibbles (element j low, j + 16 high).
#[inline(always)]
fn pack_nibbles(l: &[u8], qs: &mut [u8]) {
    for j in 0..QK / 2 {
        qs[j] = l[j] | (l[j + QK / 2] << 4);
    }
}

/// `quantize_iq4_nl` without an importance matrix: what `llama-quantize`
/// writes for IQ4_NL.
pub(crate) fn quant_iq4_nl(src: &[f32], dst: &mut [u8]) {
    let mut l = [0u8; QK];
    for (x, b) in src.chunks_exact(QK).zip(blocks_mut::<BlockIQ4NL>(dst)) {
        let d = block_scale(x);
        b.d.set(d);
        // ggml rounds the values again at the scale's inverse (zero for a
        // zero scale, which puts every value at index 8, ggml's bytes).
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        for (lj, &xj) in l.iter_mut().zip(x) {
            *lj = best_index(id * xj) as u8;
        }
        pack_nibbles(&l, &mut b.qs);
    }
}

/// `quantize_iq4_xs` without an importance matrix: each sub-block's best
/// scale, then one f16 scale for the super-block and a 6-bit multiplier
/// per sub-block, the values re-rounded at the scales stored.
pub(crate) fn quant_iq4_xs(src: &[f32], dst: &mut [u8]) {
    let mut l = [0u8; QK_K];
    for (x, b) in src.chunks_exact(QK_K).zip(blocks_mut::<BlockIQ4XS>(dst)) {
        let mut scales = [0.0f32; K_SUB_BLOCKS];
        let (mut max_scale, mut amax_scale) = (0.0f32, 0.0f32);
        for (ib, s) in scales.iter_mut().enumerate() {
            *s = block_scale(&x[QK * ib..QK * ib + QK]);
            if s.abs() > amax_scale {
                amax_scale = s.abs();
                max_scale = *s;
            }
        }
        let d = -max_scale / XS_SCALE_BIAS as f32;
        b.d.set(d);
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut scales_h = 0u16;
        b.scales_l = [0; K_SUB_BLOCKS / 2];
        for (ib, &s) in scales.iter().enumerate() {
            let ls = nearest_int(id * s).clamp(-XS_SCALE_BIAS, XS_SCALE_BIAS - 1);
            let dl = d * ls as f32;
            let idl = if dl != 0.0 { 1.0 / dl } else { 0.0 };
            for j in QK * ib..QK * ib + QK {
                l[j] = best_index(idl * x[j]) as u8;
            }
            let u = (ls + XS_SCALE_BIAS) as u8;
            b.scales_l[ib / 2] |= (u & 0x0F) << (4 * (ib % 2));
            scales_h |= u16::from(u >> 4) << (2 * ib);
        }
        b.scales_h = scales_h.to_le_bytes();
        for ib in 0..K_SUB_BLOCKS {
            pack_nibbles(&l[QK * ib..QK * ib + QK], &mut b.qs[16 * ib..16 * ib + 16]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::blocks::{BlockFormat, Decoded};

    /// [`best_index`] picks the nearest table value, the lower on a tie,
    /// as a linear scan does.
    #[test]
    fn best_index_is_the_nearest_value() {
        for i in -1400..=1400 {
            let x = i as f32 / 10.0;
            let want = (0..16)
                .min_by(|&a, &b| {
                    let da = (x - f32::from(KVALUES[a])).abs();
                    let db = (x - f32::from(KVALUES[b])).abs();
                    da.partial_cmp(&db).unwrap()
                })
                .unwrap();
            let got = best_index(x);
            let (dg, dw) = (
                (x - f32::from(KVALUES[got])).abs(),
                (x - f32::from(KVALUES[want])).abs(),
            );
            assert_eq!(dg, dw, "{x}: {got} vs {want}");
        }
    }

    /// A hand-made IQ4_NL block dequantizes to `d · kvalue` in ggml's
    /// element order.
    #[test]
    fn iq4_nl_block_dequantizes_by_hand() {
        let mut b: BlockIQ4NL = bytemuck::Zeroable::zeroed();
        b.d.set(0.5);
        for j in 0..16 {
            // Low nibble j, high nibble 15 - j.
            b.qs[j] = j as u8 | ((15 - j as u8) << 4);
        }
        let mut y = [0.0f32; 32];
        b.decode().dequantize(&mut y);
        for j in 0..16 {
            assert_eq!(y[j], 0.5 * f32::from(KVALUES[j]), "element {j}");
            assert_eq!(
                y[j + 16],
                0.5 * f32::from(KVALUES[15 - j]),
                "element {}",
                j + 16
            );
        }
        assert_eq!(y[0], -63.5);
        assert_eq!(y[16], 56.5);
    }

    /// A hand-made IQ4_XS block: each sub-block's 6-bit scale from its
    /// nibble of `scales_l` and its two bits of `scales_h`, less 32.
    #[test]
    fn iq4_xs_block_dequantizes_by_hand() {
        let mut b: BlockIQ4XS = bytemuck::Zeroable::zeroed();
        b.d.set(0.25);
        // ls for sub-blocks 0..8: 0, 63, 32, 33, 31, 1, 48, 16.
        let ls = [0u8, 63, 32, 33, 31, 1, 48, 16];
        let mut h = 0u16;
        for (ib, &s) in ls.iter().enumerate() {
            b.scales_l[ib / 2] |= (s & 0x0F) << (4 * (ib % 2));
            h |= u16::from(s >> 4) << (2 * ib);
        }
        b.scales_h = h.to_le_bytes();
        for (i, q) in b.qs.iter_mut().enumerate() {
            *q = (i % 16) as u8 | (((i * 7) % 16) as u8) << 4;
        }
        let mut y = [0.0f32; QK_K];
        b.decode().dequantize(&mut y);
        for ib in 0..8 {
            assert_eq!(xs_scale(&b, ib), i32::from(ls[ib]));
            let dl = 0.25 * (f32::from(ls[ib]) - 32.0);
            for j in 0..16 {
                let byte = b.qs[16 * ib + j];
                let lo = f32::from(KVALUES[(byte & 15) as usize]);
                let hi = f32::from(KVALUES[(byte >> 4) as usize]);
                assert_eq!(y[32 * ib + j], dl * lo, "sub-block {ib} element {j}");
                assert_eq!(
                    y[32 * ib + 16 + j],
                    dl * hi,
                    "sub-block {ib} element {}",
                    j + 16
                );
            }
        }
        // Sub-block 1, element 0: ls 63 → 31 · 0.25 · kvalues[0].
        assert_eq!(y[32], 0.25 * 31.0 * -127.0);
    }

    /// Quantizing and dequantizing keeps values within a small fraction
    /// of each block's range, for both formats.
    #[test]
    fn round_trip_is_close() {
        let mut next = crate::xorshift_values(0x1234_5678_9abc_def1);
        let x: Vec<f32> = (0..4 * QK_K).map(|_| next() * 3.0).collect();
        for (ty, bytes) in [
            (gguf::GgmlType::IQ4_NL, BlockIQ4NL::BYTES * x.len() / QK),
            (gguf::GgmlType::IQ4_XS, BlockIQ4XS::BYTES * x.len() / QK_K),
        ] {
            let mut q = vec![0u8; bytes];
            crate::quantize(ty, &x, &mut q).unwrap();
            let mut y = vec![0.0f32; x.len()];
            crate::dequantize(ty, &q, &mut y).unwrap();
            let err: f32 = x.iter().zip(&y).map(|(a, b)| (a - b) * (a - b)).sum();
            let pow: f32 = x.iter().map(|a| a * a).sum();
            assert!(
                err / pow < 0.01,
                "{ty}: relative squared error {}",
                err / pow
            );
        }
    }
}
