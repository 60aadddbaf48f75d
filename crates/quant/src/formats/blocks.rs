//! Every ggml block format as a type with named fields, laid out as
//! ggml-common.h lays it out (packed, little-endian, alignment 1), and one
//! trait, [`BlockFormat`], that says which GGUF type a block is and how many
//! values it holds. A row's bytes are viewed as blocks with [`block`] and
//! [`blocks_mut`] (checked casts, no copies), so code reads `b.d`, `b.qs`
//! and `b.scales` where it used to count byte offsets.

use bytemuck::{Pod, Zeroable};
use gguf::GgmlType;

use super::kquants::{GROUPS, QK_K};
use super::legacy::QK;

/// Bytes of a packed K-quant scale field (eight 6-bit scales and eight
/// 6-bit mins, or sixteen 6-bit scales).
pub(crate) const K_SCALE_BYTES: usize = 12;
/// Sub-blocks of 32 in a super-block (the six-bit scales and mins of
/// Q4_K and Q5_K, one each).
pub(crate) const K_SUB_BLOCKS: usize = QK_K / 32;

/// A little-endian f16, as a block stores its scales.
#[derive(Clone, Copy, Pod, Zeroable, Default, Debug, PartialEq)]
#[repr(transparent)]
pub(crate) struct F16Le(pub(crate) [u8; size_of::<u16>()]);

impl F16Le {
    /// The value.
    #[inline(always)]
    pub(crate) fn get(self) -> f32 {
        super::f16_at(&self.0)
    }

    /// Store `v`, rounded to nearest even as ggml rounds.
    #[inline(always)]
    pub(crate) fn set(&mut self, v: f32) {
        super::put_f16(&mut self.0, v);
    }
}

/// A little-endian bf16, as BF16 weights store it.
#[derive(Clone, Copy, Pod, Zeroable, Default, Debug, PartialEq)]
#[repr(transparent)]
pub(crate) struct Bf16Le(pub(crate) [u8; size_of::<u16>()]);

/// A little-endian f32 (Q8_K's scale).
#[derive(Clone, Copy, Pod, Zeroable, Default, Debug, PartialEq)]
#[repr(transparent)]
pub(crate) struct F32Le(pub(crate) [u8; size_of::<f32>()]);

impl F32Le {
    /// The value.
    #[inline(always)]
    pub(crate) fn get(self) -> f32 {
        super::f32_at(&self.0)
    }

    /// Store `v`.
    #[inline(always)]
    pub(crate) fn set(&mut self, v: f32) {
        self.0 = v.to_le_bytes();
    }
}

/// A little-endian i16 (Q8_K's group sums).
#[derive(Clone, Copy, Pod, Zeroable, Default, Debug, PartialEq)]
#[repr(transparent)]
pub(crate) struct I16Le(pub(crate) [u8; size_of::<i16>()]);

impl I16Le {
    /// The value.
    #[inline(always)]
    pub(crate) fn get(self) -> i16 {
        i16::from_le_bytes(self.0)
    }

    /// Store `v`.
    #[inline(always)]
    pub(crate) fn set(&mut self, v: i16) {
        self.0 = v.to_le_bytes();
    }
}

/// A block format: its GGUF type, the values one block holds (its size in
/// bytes is the type's size), and how it decodes. Dequantizing, the scalar
/// dot products ([`WeightFormat`]) and the batched product's weight panels
/// all start from [`BlockFormat::decode`], so they follow one reading of the
/// bits.
pub(crate) trait BlockFormat: Pod {
    /// The GGUF tensor type stored as these blocks.
    const TYPE: GgmlType;
    /// Values per block.
    const VALUES: usize;
    /// Bytes per block.
    const BYTES: usize = size_of::<Self>();
    /// The block as integers and scales, in its family's form.
    type Decoded: Decoded;
    /// Decode the block.
    fn decode(&self) -> Self::Decoded;
}

/// A decoded block, and what is made from it.
pub(crate) trait Decoded {
    /// The block's values into `out` (one block's worth), with ggml's order
    /// of operations.
    fn dequantize(&self, out: &mut [f32]);
    /// The block's integers `v`, and each group of `g` values' scale `s` and
    /// minimum term `m` (to subtract), as the batched product's weight
    /// panels hold them.
    fn fill_panel(&self, g: usize, v: &mut [i8], s: &mut [f32], m: &mut [f32]);
}

/// A block format weights are stored in: the activation blocks it is
/// multiplied with and the scalar reference product (the specification
/// every SIMD kernel is held to).
pub(crate) trait WeightFormat: BlockFormat {
    /// The blocks activations are quantized into for this format.
    type Acts: BlockFormat;
    /// `Σ w·a` over the blocks of `w` and `a` (as many of each), in the
    /// canonical order every tier follows.
    fn dot(w: &[Self], a: &[Self::Acts]) -> f32;
}

/// `bytes` as whole blocks of `B`, to read (a trailing partial block is
/// left out).
#[inline(always)]
pub(crate) fn blocks<B: Pod>(bytes: &[u8]) -> &[B] {
    let whole = bytes.len() / size_of::<B>() * size_of::<B>();
    bytemuck::cast_slice(&bytes[..whole])
}

/// Dequantize whole blocks of `B` from `src` into `dst`.
#[inline(always)]
pub(crate) fn dequantize_row<B: BlockFormat>(src: &[u8], dst: &mut [f32]) {
    for (b, y) in blocks::<B>(src).iter().zip(dst.chunks_exact_mut(B::VALUES)) {
        b.decode().dequantize(y);
    }
}

/// `bytes` as whole blocks of `B`, to write (a trailing partial block is
/// left out).
#[inline(always)]
pub(crate) fn blocks_mut<B: BlockFormat>(bytes: &mut [u8]) -> &mut [B] {
    let whole = bytes.len() / B::BYTES * B::BYTES;
    bytemuck::cast_slice_mut(&mut bytes[..whole])
}

/// The first block of `B` in `bytes` (which must hold one).
#[inline(always)]
pub(crate) fn block<B: BlockFormat>(bytes: &[u8]) -> &B {
    bytemuck::from_bytes(&bytes[..B::BYTES])
}

macro_rules! block_format {
    ($name:ident, $ty:ident, $values:expr, $family:ident :: $unpack:ident) => {
        block_format!($name, $ty, $values, $family::$unpack as $family);
    };
    // `as FORM`: the block decodes to another family's form.
    ($name:ident, $ty:ident, $values:expr, $family:ident :: $unpack:ident as $form:ident) => {
        impl BlockFormat for $name {
            const TYPE: GgmlType = GgmlType::$ty;
            const VALUES: usize = $values;
            type Decoded = super::$form::Unpacked;
            #[inline(always)]
            fn decode(&self) -> Self::Decoded {
                super::$family::$unpack(self)
            }
        }
    };
}

/// `block_q4_0`: value `d · (q − 8)`; element `j` in the low nibble of
/// `qs[j]`, `j + 16` in the high one.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub(crate) struct BlockQ4_0 {
    pub(crate) d: F16Le,
    pub(crate) qs: [u8; QK / 2],
}
block_format!(BlockQ4_0, Q4_0, QK, legacy::unpack_q4_0);

/// `block_q4_1`: value `d · q + m`, nibbles as Q4_0.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub(crate) struct BlockQ4_1 {
    pub(crate) d: F16Le,
    pub(crate) m: F16Le,
    pub(crate) qs: [u8; QK / 2],
}
block_format!(BlockQ4_1, Q4_1, QK, legacy::unpack_q4_1);

/// `block_q5_0`: value `d · (q − 16)`; bit `j` of `qh` is element `j`'s
/// fifth bit.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub(crate) struct BlockQ5_0 {
    pub(crate) d: F16Le,
    pub(crate) qh: [u8; size_of::<u32>()],
    pub(crate) qs: [u8; QK / 2],
}
block_format!(BlockQ5_0, Q5_0, QK, legacy::unpack_q5_0);

/// `block_q5_1`: value `d · q + m`, bits as Q5_0.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub(crate) struct BlockQ5_1 {
    pub(crate) d: F16Le,
    pub(crate) m: F16Le,
    pub(crate) qh: [u8; size_of::<u32>()],
    pub(crate) qs: [u8; QK / 2],
}
block_format!(BlockQ5_1, Q5_1, QK, legacy::unpack_q5_1);

/// `block_q8_0`: value `d · q`.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub(crate) struct BlockQ8_0 {
    pub(crate) d: F16Le,
    pub(crate) qs: [i8; QK],
}
block_format!(BlockQ8_0, Q8_0, QK, legacy::unpack_q8_0);

/// `block_q8_1`: value `d · q`, and `s = d · Σq`.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub(crate) struct BlockQ8_1 {
    pub(crate) d: F16Le,
    pub(crate) s: F16Le,
    pub(crate) qs: [i8; QK],
}
block_format!(BlockQ8_1, Q8_1, QK, legacy::unpack_q8_1);

/// `block_q2_K`: a byte per group of 16 (scale in the low nibble, min in
/// the high one), 2-bit values, the super-block's scale and min.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub(crate) struct BlockQ2K {
    pub(crate) scales: [u8; GROUPS],
    pub(crate) qs: [u8; QK_K / 4],
    pub(crate) d: F16Le,
    pub(crate) dmin: F16Le,
}
block_format!(BlockQ2K, Q2_K, QK_K, kquants::unpack_q2_k);

/// `block_q3_K`: the high bits, 2-bit low parts, sixteen 6-bit scales.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub(crate) struct BlockQ3K {
    pub(crate) hmask: [u8; QK_K / 8],
    pub(crate) qs: [u8; QK_K / 4],
    pub(crate) scales: [u8; K_SCALE_BYTES],
    pub(crate) d: F16Le,
}
block_format!(BlockQ3K, Q3_K, QK_K, kquants::unpack_q3_k);

/// `block_q4_K`: eight 6-bit scales and mins per 32, 4-bit values.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub(crate) struct BlockQ4K {
    pub(crate) d: F16Le,
    pub(crate) dmin: F16Le,
    pub(crate) scales: [u8; K_SCALE_BYTES],
    pub(crate) qs: [u8; QK_K / 2],
}
block_format!(BlockQ4K, Q4_K, QK_K, kquants::unpack_q4_k);

/// `block_q5_K`: Q4_K with a fifth bit per value in `qh`.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub(crate) struct BlockQ5K {
    pub(crate) d: F16Le,
    pub(crate) dmin: F16Le,
    pub(crate) scales: [u8; K_SCALE_BYTES],
    pub(crate) qh: [u8; QK_K / 8],
    pub(crate) qs: [u8; QK_K / 2],
}
block_format!(BlockQ5K, Q5_K, QK_K, kquants::unpack_q5_k);

/// `block_q6_K`: 4-bit low parts, 2-bit high parts, an i8 scale per 16.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub(crate) struct BlockQ6K {
    pub(crate) ql: [u8; QK_K / 2],
    pub(crate) qh: [u8; QK_K / 4],
    pub(crate) scales: [i8; GROUPS],
    pub(crate) d: F16Le,
}
block_format!(BlockQ6K, Q6_K, QK_K, kquants::unpack_q6_k);

/// `block_q8_K`: an f32 scale, i8 values and each group of 16's sum.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub(crate) struct BlockQ8K {
    pub(crate) d: F32Le,
    pub(crate) qs: [i8; QK_K],
    pub(crate) bsums: [I16Le; GROUPS],
}
block_format!(BlockQ8K, Q8_K, QK_K, kquants::unpack_q8_k);

/// `block_iq4_nl`: value `d · KVALUES[q]` (see `iquants`), nibbles as
/// Q4_0's.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub(crate) struct BlockIQ4NL {
    pub(crate) d: F16Le,
    pub(crate) qs: [u8; QK / 2],
}
block_format!(BlockIQ4NL, IQ4_NL, QK, iquants::unpack_iq4_nl as legacy);

/// `block_iq4_xs`: the super-block's scale, the two high bits
/// (`scales_h`) and four low bits (`scales_l`) of each sub-block of 32's
/// 6-bit scale, and 4-bit indices, each sub-block's laid out as IQ4_NL's.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub(crate) struct BlockIQ4XS {
    pub(crate) d: F16Le,
    pub(crate) scales_h: [u8; size_of::<u16>()],
    pub(crate) scales_l: [u8; K_SUB_BLOCKS / 2],
    pub(crate) qs: [u8; QK_K / 2],
}
block_format!(BlockIQ4XS, IQ4_XS, QK_K, iquants::unpack_iq4_xs as kquants);

/// `block_iq2_xxs`: per sub-block of 32, two little-endian u32 in `qs`:
/// the first holds four 8-bit indices into the IQ2_XXS grid (eight values
/// each), the second four 7-bit sign indices and the 4-bit scale on top.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub(crate) struct BlockIQ2XXS {
    pub(crate) d: F16Le,
    pub(crate) qs: [u8; QK_K / 4],
}
block_format!(BlockIQ2XXS, IQ2_XXS, QK_K, lattice::unpack as kquants);

/// `block_iq2_xs`: a little-endian u16 per eight values (a 9-bit index
/// into the IQ2_XS grid, a 7-bit sign index on top) and two 4-bit scales
/// per sub-block of 32.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub(crate) struct BlockIQ2XS {
    pub(crate) d: F16Le,
    pub(crate) qs: [u8; QK_K / 4],
    pub(crate) scales: [u8; K_SUB_BLOCKS],
}
block_format!(BlockIQ2XS, IQ2_XS, QK_K, lattice::unpack as kquants);

/// `block_iq2_s`: the low 8 bits of a 10-bit IQ2_S grid index per eight
/// values, then a sign byte per eight values (`qs`), the indices' high bits
/// (`qh`, two per eight values), two 4-bit scales per sub-block of 32.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub(crate) struct BlockIQ2S {
    pub(crate) d: F16Le,
    pub(crate) qs: [u8; QK_K / 4],
    pub(crate) qh: [u8; K_SUB_BLOCKS],
    pub(crate) scales: [u8; K_SUB_BLOCKS],
}
block_format!(BlockIQ2S, IQ2_S, QK_K, lattice::unpack as kquants);

/// `block_iq3_xxs`: an 8-bit IQ3_XXS grid index per four values, then per
/// sub-block of 32 a little-endian u32 of four 7-bit sign indices and the
/// 4-bit scale on top.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub(crate) struct BlockIQ3XXS {
    pub(crate) d: F16Le,
    pub(crate) qs: [u8; 3 * QK_K / 8],
}
block_format!(BlockIQ3XXS, IQ3_XXS, QK_K, lattice::unpack as kquants);

/// `block_iq3_s`: the low 8 bits of a 9-bit IQ3_S grid index per four
/// values (`qs`), their high bits (`qh`, a byte per sub-block of 32), a
/// sign bit per value, a 4-bit scale per sub-block.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub(crate) struct BlockIQ3S {
    pub(crate) d: F16Le,
    pub(crate) qs: [u8; QK_K / 4],
    pub(crate) qh: [u8; K_SUB_BLOCKS],
    pub(crate) signs: [u8; QK_K / 8],
    pub(crate) scales: [u8; K_SUB_BLOCKS / 2],
}
block_format!(BlockIQ3S, IQ3_S, QK_K, lattice::unpack as kquants);

/// `block_iq1_s`: the low 8 bits of an 11-bit IQ1_S grid index per eight
/// values, and per sub-block of 32 a little-endian u16 of the indices'
/// high bits, a 3-bit scale and the sign of the shift.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub(crate) struct BlockIQ1S {
    pub(crate) d: F16Le,
    pub(crate) qs: [u8; QK_K / 8],
    pub(crate) qh: [u8; QK_K / 16],
}
block_format!(BlockIQ1S, IQ1_S, QK_K, lattice::unpack as kquants);

/// `block_iq1_m`: the low 8 bits of an IQ1_S grid index per eight values,
/// a nibble per eight values of the index's high bits and the shift's
/// sign, and 3-bit scales per 16 values whose spare top nibbles hold the
/// super-block's f16 scale.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
pub(crate) struct BlockIQ1M {
    pub(crate) qs: [u8; QK_K / 8],
    pub(crate) qh: [u8; QK_K / 16],
    pub(crate) scales: [u8; QK_K / 32],
}
block_format!(BlockIQ1M, IQ1_M, QK_K, lattice::unpack as kquants);

/// Where the fields these kernels load start in their blocks, from the
/// block types, for the SIMD kernels that load a field as one vector from
/// its start.
// Q6_K's scales and scale are read by field on AArch64.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) mod at {
    use super::*;
    use std::mem::offset_of;

    pub(crate) const Q4_0_QS: usize = offset_of!(BlockQ4_0, qs);
    pub(crate) const Q5_0_QH: usize = offset_of!(BlockQ5_0, qh);
    pub(crate) const Q5_0_QS: usize = offset_of!(BlockQ5_0, qs);
    pub(crate) const Q8_0_QS: usize = offset_of!(BlockQ8_0, qs);
    pub(crate) const Q4_1_QS: usize = offset_of!(BlockQ4_1, qs);
    pub(crate) const Q5_1_QH: usize = offset_of!(BlockQ5_1, qh);
    pub(crate) const Q5_1_QS: usize = offset_of!(BlockQ5_1, qs);
    pub(crate) const Q8_1_QS: usize = offset_of!(BlockQ8_1, qs);
    pub(crate) const Q4K_QS: usize = offset_of!(BlockQ4K, qs);
    pub(crate) const Q5K_QH: usize = offset_of!(BlockQ5K, qh);
    pub(crate) const Q5K_QS: usize = offset_of!(BlockQ5K, qs);
    pub(crate) const Q6K_QL: usize = offset_of!(BlockQ6K, ql);
    pub(crate) const Q6K_QH: usize = offset_of!(BlockQ6K, qh);
    pub(crate) const Q6K_SCALES: usize = offset_of!(BlockQ6K, scales);
    pub(crate) const Q6K_D: usize = offset_of!(BlockQ6K, d);
    pub(crate) const Q8K_QS: usize = offset_of!(BlockQ8K, qs);
    pub(crate) const Q8K_BSUMS: usize = offset_of!(BlockQ8K, bsums);
    pub(crate) const IQ4NL_QS: usize = offset_of!(BlockIQ4NL, qs);
    pub(crate) const IQ4XS_QS: usize = offset_of!(BlockIQ4XS, qs);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check<B: BlockFormat>() {
        assert_eq!(B::BYTES, B::TYPE.block_bytes(), "{:?} bytes", B::TYPE);
        assert_eq!(B::VALUES, B::TYPE.block_len(), "{:?} values", B::TYPE);
        assert_eq!(align_of::<B>(), 1, "{:?} packed", B::TYPE);
    }

    /// Each type's size, values per block and packing are ggml's.
    #[test]
    fn blocks_are_ggml_sized() {
        check::<BlockQ4_0>();
        check::<BlockQ4_1>();
        check::<BlockQ5_0>();
        check::<BlockQ5_1>();
        check::<BlockQ8_0>();
        check::<BlockQ8_1>();
        check::<BlockQ2K>();
        check::<BlockQ3K>();
        check::<BlockQ4K>();
        check::<BlockQ5K>();
        check::<BlockQ6K>();
        check::<BlockQ8K>();
        check::<BlockIQ4NL>();
        check::<BlockIQ4XS>();
        check::<BlockIQ2XXS>();
        check::<BlockIQ2XS>();
        check::<BlockIQ2S>();
        check::<BlockIQ3XXS>();
        check::<BlockIQ3S>();
        check::<BlockIQ1S>();
        check::<BlockIQ1M>();
    }

    /// A view of bytes as blocks reads the fields at ggml's offsets.
    #[test]
    fn fields_sit_at_ggml_offsets() {
        let mut bytes: Vec<u8> = (0..2 * BlockQ4K::BYTES).map(|i| i as u8).collect();
        let b = block::<BlockQ4K>(&bytes[BlockQ4K::BYTES..]);
        assert_eq!(b.d.0, [144, 145]);
        assert_eq!(b.scales[0], 148);
        assert_eq!(b.qs[0], 160);
        assert_eq!(blocks_mut::<BlockQ4K>(&mut bytes[..200]).len(), 1);
        let mut q8 = vec![0u8; BlockQ8K::BYTES];
        let k = &mut blocks_mut::<BlockQ8K>(&mut q8)[0];
        k.d.set(2.5);
        k.bsums[15].set(-3);
        assert_eq!(q8[..4], 2.5f32.to_le_bytes());
        assert_eq!(q8[290..], (-3i16).to_le_bytes());
    }
}
