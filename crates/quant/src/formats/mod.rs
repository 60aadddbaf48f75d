//! Byte-exact ggml block layouts: decoding to integers (shared by dequantize and
//! the scalar dot products, so both follow one spec) and reference quantizers.

// Index loops mirror the bit layouts in ggml-quants.c, which keeps them checkable by eye.
#![allow(clippy::needless_range_loop)]

pub(crate) mod float;
pub(crate) mod kquants;
pub(crate) mod legacy;

/// Reads a little-endian f16 at `b[0..2]`.
#[inline(always)]
pub(crate) fn f16_at(b: &[u8]) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32()
}

/// Writes `v` as a little-endian f16 (round to nearest even, as ggml does).
#[inline(always)]
pub(crate) fn put_f16(b: &mut [u8], v: f32) {
    b[..2].copy_from_slice(&half::f16::from_f32(v).to_bits().to_le_bytes());
}

/// Reads a little-endian f32 at `b[0..4]`.
#[inline(always)]
pub(crate) fn f32_at(b: &[u8]) -> f32 {
    f32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// ggml's `nearest_int`: round half to even (the magic-number trick rounds that way).
#[inline(always)]
pub(crate) fn nearest_int(v: f32) -> i32 {
    v.round_ties_even() as i32
}
