//! The scalar reference kernels: the specification every SIMD kernel is tested against.
//!
//! They follow ggml's generic C kernels: integer dot products per (sub-)block,
//! scaled in f32 once per block. Where ggml leaves the order of the float
//! additions to each SIMD kernel, ours fix one order that every tier follows
//! (see [`LANES`]), so a dot product gives the same bits on every CPU and a
//! prompt's tokens do not depend on which machine runs it.

use crate::formats::blocks::{
    Bf16Le, BlockFormat, BlockIQ1M, BlockIQ1S, BlockIQ2S, BlockIQ2XS, BlockIQ2XXS, BlockIQ3S,
    BlockIQ3XXS, BlockIQ4NL, BlockIQ4XS, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ4_0, BlockQ4_1,
    BlockQ5K, BlockQ5_0, BlockQ5_1, BlockQ6K, BlockQ8K, BlockQ8_0, BlockQ8_1, F16Le, F32Le,
    WeightFormat,
};
use crate::formats::{kquants, legacy};
use crate::GgmlType;

/// Dot product of one weight row (type `ty`, `n` elements) with one activation row in
/// [`crate::vec_dot_type`]`(ty)`, using only the scalar reference kernels.
///
/// An error when the type is unsupported or the buffers are too short for `n`
/// elements.
pub fn vec_dot(ty: GgmlType, n: usize, w: &[u8], a: &[u8]) -> Result<f32, crate::QuantError> {
    crate::simd::checked_vec_dot(crate::simd::scalar_kernels(), ty, n, w, a)
}

/// Dot product of a float-typed weight row (F32, F16 or BF16) with f32 activations
/// (rounded to bf16 first for BF16 weights, see [`dot_bf16`]).
///
/// An error when the type is not a float type or the buffers are too short.
pub fn vec_dot_f32(ty: GgmlType, w: &[u8], x: &[f32]) -> Result<f32, crate::QuantError> {
    crate::simd::checked_vec_dot_f32(crate::simd::scalar_kernels(), ty, w, x)
}

#[inline(always)]
fn idot(x: &[i8], y: &[i8]) -> i32 {
    x.iter().zip(y).map(|(&x, &y)| x as i32 * y as i32).sum()
}

/// The lane count of the canonical float accumulation: an AVX2 register of
/// f32, half an AVX-512 one.
pub(crate) const LANES: usize = 8;

/// The canonical horizontal sum of eight lanes: the high half onto the low
/// one, then lanes two apart, then neighbours (what `hsum_ps` does on x86).
#[inline(always)]
pub(crate) fn hsum8(v: [f32; LANES]) -> f32 {
    let h = [v[0] + v[4], v[1] + v[5], v[2] + v[6], v[3] + v[7]];
    (h[0] + h[2]) + (h[1] + h[3])
}

/// The scalar reference product of `nb` blocks of weights `W` (bytes `w`)
/// with activations in `W::Acts` (bytes `a`): the kernel table's entry for
/// `W` on the scalar tier.
#[inline(always)]
pub(crate) fn dot<W: WeightFormat>(w: &[W], a: &[W::Acts]) -> f32 {
    let nb = w.len().min(a.len());
    W::dot(&w[..nb], &a[..nb])
}

/// Q4_0/Q5_0/Q8_0 (and IQ4_NL, whose values are table entries) against
/// Q8_0 in the canonical order every tier follows:
/// lane `j` of a block is the exact integer sum of its products `4j..4j+4`;
/// block `b` adds `d_b * lane` into chain `b % 2` of eight lanes with one
/// fused multiply-add (`d_b` the product of the two f16 scales, rounded to
/// f32); the two chains are added lane by lane and reduced by [`hsum8`].
/// An AVX2 kernel runs the two chains in two registers, an AVX-512 one takes
/// two blocks per register, and both give these bits.
#[inline(always)]
fn legacy_q8_0<W: BlockFormat<Decoded = legacy::Unpacked>>(w: &[W], a: &[BlockQ8_0]) -> f32 {
    let mut chains = [[0.0f32; LANES]; 2];
    for (b, (bw, ba)) in w.iter().zip(a).enumerate() {
        let u = bw.decode();
        let d = u.d * ba.d.get();
        for (j, lane) in chains[b % 2].iter_mut().enumerate() {
            let p = idot(&u.q[4 * j..4 * j + 4], &ba.qs[4 * j..4 * j + 4]);
            *lane = d.mul_add(p as f32, *lane);
        }
    }
    hsum8(std::array::from_fn(|j| chains[0][j] + chains[1][j]))
}

/// Q4_1/Q5_1 against Q8_1, as ggml's generic kernel: the integer sum per
/// block, scaled, plus the block minimum times the activations' sum.
#[inline(always)]
fn legacy_q8_1<W: BlockFormat<Decoded = legacy::Unpacked>>(w: &[W], a: &[BlockQ8_1]) -> f32 {
    let mut sumf = 0.0f32;
    for (bw, ba) in w.iter().zip(a) {
        let u = bw.decode();
        let sumi = idot(&u.q, &ba.qs);
        sumf += sumi as f32 * (u.d * ba.d.get()) + u.m * ba.s.get();
    }
    sumf
}

/// A K-quant (or an IQ type but IQ4_NL, whose values are table entries
/// and whose minimums are zero) against Q8_K: exact integer sums per super-block
/// (values by group scales, minimums by the activations' group sums), then
/// [`kquant_block`] in block order.
#[inline(always)]
fn kquant_q8_k<W: BlockFormat<Decoded = kquants::Unpacked>>(w: &[W], a: &[BlockQ8K]) -> f32 {
    let mut sumf = 0.0f32;
    for (bw, ba) in w.iter().zip(a) {
        let u = bw.decode();
        let (mut isum, mut msum) = (0i32, 0i32);
        for g in 0..kquants::GROUPS {
            let span = 16 * g..16 * g + 16;
            isum += u.sc[g] * idot(&u.q[span.clone()], &ba.qs[span]);
            msum += u.m[g] * i32::from(ba.bsums[g].get());
        }
        sumf += kquant_block(u.d, u.dmin, ba.d.get(), isum, msum);
    }
    sumf
}

/// One K-quant block's share of a dot product, from its exact integer sums:
/// the blocks of a row add these in order on every tier.
#[inline(always)]
pub(crate) fn kquant_block(d: f32, dmin: f32, dy: f32, isum: i32, msum: i32) -> f32 {
    (d * dy) * isum as f32 - (dmin * dy) * msum as f32
}

macro_rules! weight_format {
    ($block:ident, $acts:ident, $order:ident) => {
        impl WeightFormat for $block {
            type Acts = $acts;
            #[inline(always)]
            fn dot(w: &[Self], a: &[$acts]) -> f32 {
                $order(w, a)
            }
        }
    };
}

weight_format!(BlockQ4_0, BlockQ8_0, legacy_q8_0);
weight_format!(BlockQ5_0, BlockQ8_0, legacy_q8_0);
weight_format!(BlockQ8_0, BlockQ8_0, legacy_q8_0);
weight_format!(BlockQ4_1, BlockQ8_1, legacy_q8_1);
weight_format!(BlockQ5_1, BlockQ8_1, legacy_q8_1);
weight_format!(BlockQ2K, BlockQ8K, kquant_q8_k);
weight_format!(BlockQ3K, BlockQ8K, kquant_q8_k);
weight_format!(BlockQ4K, BlockQ8K, kquant_q8_k);
weight_format!(BlockQ5K, BlockQ8K, kquant_q8_k);
weight_format!(BlockQ6K, BlockQ8K, kquant_q8_k);
weight_format!(BlockQ8K, BlockQ8K, kquant_q8_k);
weight_format!(BlockIQ4NL, BlockQ8_0, legacy_q8_0);
weight_format!(BlockIQ4XS, BlockQ8K, kquant_q8_k);
weight_format!(BlockIQ2XXS, BlockQ8K, kquant_q8_k);
weight_format!(BlockIQ2XS, BlockQ8K, kquant_q8_k);
weight_format!(BlockIQ2S, BlockQ8K, kquant_q8_k);
weight_format!(BlockIQ3XXS, BlockQ8K, kquant_q8_k);
weight_format!(BlockIQ3S, BlockQ8K, kquant_q8_k);
weight_format!(BlockIQ1S, BlockQ8K, kquant_q8_k);
weight_format!(BlockIQ1M, BlockQ8K, kquant_q8_k);

/// The canonical order of a float dot product of `n` elements, which every
/// tier's float kernels follow: 8-element group `g` adds its products into
/// chain `g % 4` of eight lanes by fused multiply-adds; the chains are added
/// lane by lane as `(c0 + c2) + (c1 + c3)` (two AVX-512 registers holding
/// chains 0|1 and 2|3 add to that) and reduced by [`hsum8`]; the last
/// `n % 8` products are then fused into the sum one at a time.
#[inline(always)]
pub(crate) fn float_dot(n: usize, w: impl Fn(usize) -> f32, x: impl Fn(usize) -> f32) -> f32 {
    let mut chains = [[0.0f32; LANES]; 4];
    let full = n / LANES;
    for g in 0..full {
        for (l, lane) in chains[g % 4].iter_mut().enumerate() {
            let i = g * LANES + l;
            *lane = w(i).mul_add(x(i), *lane);
        }
    }
    let mut sum = hsum8(std::array::from_fn(|l| {
        (chains[0][l] + chains[2][l]) + (chains[1][l] + chains[3][l])
    }));
    for i in full * LANES..n {
        sum = w(i).mul_add(x(i), sum);
    }
    sum
}

/// F32 · F32.
pub(crate) fn dot_f32(w: &[F32Le], x: &[f32]) -> f32 {
    float_dot(w.len().min(x.len()), |i| w[i].get(), |i| x[i])
}
/// F16 · F32.
pub(crate) fn dot_f16(w: &[F16Le], x: &[f32]) -> f32 {
    float_dot(w.len().min(x.len()), |i| w[i].get(), |i| x[i])
}
/// Elements of one AVX512_BF16 dot step (`vdpbf16ps` on 512 bits): 16
/// lanes of two elements each.
pub(crate) const BF16_BLOCK: usize = 32;

/// BF16 · BF16 in the order of AVX512_BF16's `vdpbf16ps`, which every tier
/// follows: 32-element block `b` adds into accumulator `b % 2` of 16 lanes,
/// lane `j` taking element `2j + 1` and then `2j` of the block, each by one
/// fused multiply-add (a product of two bf16 values is exact in f32), with
/// inputs and results below f32's normal range taken as zero as the
/// instruction does; the last block is filled out with zeros. The two
/// accumulators are added lane by lane and the 16 lanes folded in halves
/// (lane `l` plus lane `l + 8`, then `l + 4`, `l + 2`, `l + 1`).
///
/// The activations are bf16 because that instruction takes them so, as
/// ggml's BF16 products do (they round the activations with
/// [`crate::formats::float::f32_to_bf16_bits`] too).
pub(crate) fn dot_bf16(w: &[Bf16Le], x: &[u16]) -> f32 {
    let n = w.len().min(x.len());
    let at = |i: usize| -> (f32, f32) {
        if i >= n {
            return (0.0, 0.0);
        }
        let wi = u16::from_le_bytes(w[i].0);
        (bf16_daz(wi), bf16_daz(x[i]))
    };
    let mut acc = [[0.0f32; BF16_BLOCK / 2]; 2];
    for b in 0..n.div_ceil(BF16_BLOCK) {
        for (j, lane) in acc[b % 2].iter_mut().enumerate() {
            let i = b * BF16_BLOCK + 2 * j;
            for (wv, xv) in [at(i + 1), at(i)] {
                *lane = flush_subnormal(wv.mul_add(xv, *lane));
            }
        }
    }
    let mut t: [f32; BF16_BLOCK / 2] = std::array::from_fn(|l| acc[0][l] + acc[1][l]);
    let mut half = BF16_BLOCK / 4;
    while half > 0 {
        for l in 0..half {
            t[l] += t[l + half];
        }
        half /= 2;
    }
    t[0]
}

/// A bf16 value as f32, a subnormal one as a zero of its sign.
#[inline(always)]
fn bf16_daz(h: u16) -> f32 {
    flush_subnormal(crate::formats::float::bf16_bits_to_f32(h))
}

/// `v`, or a zero of its sign where it is below f32's normal range.
#[inline(always)]
fn flush_subnormal(v: f32) -> f32 {
    if v.is_subnormal() {
        0.0f32.copysign(v)
    } else {
        v
    }
}
