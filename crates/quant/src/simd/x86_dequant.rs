//! Whole rows dequantized to f32 by the portable block code compiled for
//! AVX2 or AVX-512, where the compiler vectorizes it. Each value is the same
//! one or two roundings as in the portable code (Rust never fuses a product
//! into a sum), so every tier writes the portable bits.

use crate::formats::blocks::{dequantize_row, BlockFormat};

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
