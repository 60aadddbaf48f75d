//! Byte-exact ggml block layouts: decoding to integers (shared by dequantize and
//! the scalar dot products, so both follow one spec) and reference quantizers.

// Index loops mirror the bit layouts in ggml-quants.c, which keeps them checkable by eye.
#![allow(clippy::needless_range_loop)]

pub(crate) mod blocks;
pub(crate) mod float;
pub(crate) mod interleave;
pub(crate) mod iquants;
pub(crate) mod kquantize;
pub(crate) mod kquants;
pub(crate) mod lattice;
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

/// The largest magnitude of `x` and the value that has it (the first, on a
/// tie), as ggml's quantizers find them.
#[inline]
pub(crate) fn signed_amax(x: &[f32]) -> (f32, f32) {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    (amax, max)
}

/// ggml's `GROUP_MAX_EPS`: a group whose largest magnitude is below it
/// quantizes to zeros.
pub(crate) const GROUP_MAX_EPS: f32 = 1e-15;

/// ggml's `nearest_int`: round half to even (the magic-number trick rounds that way).
#[inline(always)]
pub(crate) fn nearest_int(v: f32) -> i32 {
    // Adding 1.5 * 2^23 leaves the rounded integer in the low mantissa bits
    // (round half to even, as the FPU rounds): ggml's trick, and an inline
    // add where `round_ties_even` is a libm call on baseline x86-64.
    if v.abs() <= 4_194_303.0 {
        ((v + 12_582_912.0).to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
    } else {
        v.round_ties_even() as i32
    }
}

#[cfg(test)]
mod nearest_int_tests {
    use super::nearest_int;
    use proptest::prelude::*;

    #[test]
    fn halves_round_to_even() {
        for (v, want) in [
            (0.5, 0),
            (1.5, 2),
            (2.5, 2),
            (-0.5, 0),
            (-1.5, -2),
            (126.5, 126),
            (-127.5, -128),
        ] {
            assert_eq!(nearest_int(v), want, "{v}");
        }
        assert_eq!(nearest_int(1e9), 1_000_000_000);
    }

    proptest! {
        #[test]
        fn matches_round_ties_even(v in -5_000_000.0f32..5_000_000.0) {
            prop_assert_eq!(nearest_int(v), v.round_ties_even() as i32);
        }
    }
}
