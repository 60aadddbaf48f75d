//! The portable block code compiled for AVX2 or AVX-512, where the compiler
//! vectorizes it: whole rows dequantized to f32, and the dot products of the
//! formats with no hand-written kernel (the lattice formats). Each value is
//! the same one or two roundings as in the portable code and each dot the
//! reference's integer sums in its order (Rust never fuses a product into a
//! sum), so every tier gives the portable bits.

use crate::formats::blocks::{dequantize_row, BlockFormat, WeightFormat};
use crate::scalar;

/// [`dequantize_row`] compiled for AVX2.
#[target_feature(enable = "avx2,f16c")]
pub(crate) fn dequantize_row_avx2<B: BlockFormat>(src: &[u8], dst: &mut [f32]) {
    dequantize_row::<B>(src, dst)
}

/// [`dequantize_row`] compiled for AVX-512.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,f16c")]
pub(crate) fn dequantize_row_avx512<B: BlockFormat>(src: &[u8], dst: &mut [f32]) {
    dequantize_row::<B>(src, dst)
}

/// [`scalar::dot`] compiled for AVX2.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_avx2<W: WeightFormat>(w: &[W], a: &[W::Acts]) -> f32 {
    scalar::dot(w, a)
}

/// [`scalar::dot`] compiled for AVX-512.
///
/// # Safety
/// The CPU must have AVX-512 F, BW and VL, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
pub(crate) unsafe fn dot_avx512<W: WeightFormat>(w: &[W], a: &[W::Acts]) -> f32 {
    scalar::dot(w, a)
}
