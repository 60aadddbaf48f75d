//! Plain float element types: F32, F16 and BF16.

/// Converts f32 to bf16 bits exactly as ggml does (round to nearest even, quiet NaNs).
#[inline]
pub(crate) fn f32_to_bf16_bits(v: f32) -> u16 {
    let u = v.to_bits();
    if (u & 0x7fff_ffff) > 0x7f80_0000 {
        return ((u >> 16) | 64) as u16;
    }
    ((u.wrapping_add(0x7fff + ((u >> 16) & 1))) >> 16) as u16
}

/// `v` rounded to the nearest bf16 value ([`f32_to_bf16_bits`]), as f32.
#[cfg(test)]
pub(crate) fn round_to_bf16(v: f32) -> f32 {
    bf16_bits_to_f32(f32_to_bf16_bits(v))
}

/// Converts bf16 bits to f32 (exact).
#[inline(always)]
pub(crate) fn bf16_bits_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

pub(crate) fn dequant_f32(src: &[u8], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src.chunks_exact(4)) {
        *d = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
    }
}

pub(crate) fn dequant_f16(src: &[u8], dst: &mut [f32]) {
    use half::slice::HalfFloatSliceExt;
    // Through a buffer of halves, so `half` converts 8 or 16 at a time
    // (F16C) where one at a time took a call per element; exact either way.
    let mut buf = [half::f16::ZERO; 64];
    for (d, s) in dst.chunks_mut(64).zip(src.chunks(128)) {
        let n = d.len().min(s.len() / 2);
        for (b, c) in buf.iter_mut().zip(s.chunks_exact(2)) {
            *b = half::f16::from_bits(u16::from_le_bytes([c[0], c[1]]));
        }
        buf[..n].convert_to_f32_slice(&mut d[..n]);
    }
}

pub(crate) fn dequant_bf16(src: &[u8], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
        *d = bf16_bits_to_f32(u16::from_le_bytes([s[0], s[1]]));
    }
}

pub(crate) fn quant_f32(src: &[f32], dst: &mut [u8]) {
    for (s, d) in src.iter().zip(dst.chunks_exact_mut(4)) {
        d.copy_from_slice(&s.to_le_bytes());
    }
}

pub(crate) fn quant_f16(src: &[f32], dst: &mut [u8]) {
    for (s, d) in src.iter().zip(dst.chunks_exact_mut(2)) {
        d.copy_from_slice(&half::f16::from_f32(*s).to_bits().to_le_bytes());
    }
}

pub(crate) fn quant_bf16(src: &[f32], dst: &mut [u8]) {
    for (s, d) in src.iter().zip(dst.chunks_exact_mut(2)) {
        d.copy_from_slice(&f32_to_bf16_bits(*s).to_le_bytes());
    }
}
