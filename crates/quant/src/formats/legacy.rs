//! The 32-element block formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and Q8_1.
//!
//! Layouts (little-endian, packed):
//! - `block_q4_0`: d f16, qs[16] (element j in the low nibble of qs[j], j+16 in the high one)
//! - `block_q4_1`: d f16, m f16, qs[16]
//! - `block_q5_0`: d f16, qh u32 (bit j = fifth bit of element j), qs[16]
//! - `block_q5_1`: d f16, m f16, qh u32, qs[16]
//! - `block_q8_0`: d f16, qs[32] i8
//! - `block_q8_1`: d f16, s f16 (= d * sum(qs)), qs[32] i8

use super::blocks::{blocks_mut, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, BlockQ8_1};

/// Elements per block.
pub(crate) const QK: usize = 32;

/// A decoded block: value = d * q + m.
pub(crate) struct Unpacked {
    pub d: f32,
    pub m: f32,
    pub q: [i8; QK],
}

#[inline(always)]
fn nibbles(qs: &[u8], q: &mut [i8; QK], hi_bits: u32, offset: i8) {
    for j in 0..QK / 2 {
        let h0 = (((hi_bits >> j) & 1) << 4) as u8;
        let h1 = (((hi_bits >> (j + 16)) & 1) << 4) as u8;
        q[j] = ((qs[j] & 0x0F) | h0) as i8 - offset;
        q[j + QK / 2] = ((qs[j] >> 4) | h1) as i8 - offset;
    }
}

#[inline(always)]
pub(crate) fn unpack_q4_0(b: &BlockQ4_0) -> Unpacked {
    let mut q = [0i8; QK];
    nibbles(&b.qs, &mut q, 0, 8);
    Unpacked {
        d: b.d.get(),
        m: 0.0,
        q,
    }
}

#[inline(always)]
pub(crate) fn unpack_q4_1(b: &BlockQ4_1) -> Unpacked {
    let mut q = [0i8; QK];
    nibbles(&b.qs, &mut q, 0, 0);
    Unpacked {
        d: b.d.get(),
        m: b.m.get(),
        q,
    }
}

#[inline(always)]
pub(crate) fn unpack_q5_0(b: &BlockQ5_0) -> Unpacked {
    let mut q = [0i8; QK];
    nibbles(&b.qs, &mut q, u32::from_le_bytes(b.qh), 16);
    Unpacked {
        d: b.d.get(),
        m: 0.0,
        q,
    }
}

#[inline(always)]
pub(crate) fn unpack_q5_1(b: &BlockQ5_1) -> Unpacked {
    let mut q = [0i8; QK];
    nibbles(&b.qs, &mut q, u32::from_le_bytes(b.qh), 0);
    Unpacked {
        d: b.d.get(),
        m: b.m.get(),
        q,
    }
}

/// Q8_0's values and scale (the same form as the other legacy blocks').
#[inline(always)]
pub(crate) fn unpack_q8_0(b: &BlockQ8_0) -> Unpacked {
    Unpacked {
        d: b.d.get(),
        m: 0.0,
        q: b.qs,
    }
}

/// Q8_1's values and scale (its sum term is for dot products only).
#[inline(always)]
pub(crate) fn unpack_q8_1(b: &BlockQ8_1) -> Unpacked {
    Unpacked {
        d: b.d.get(),
        m: 0.0,
        q: b.qs,
    }
}

impl super::blocks::Decoded for Unpacked {
    #[inline(always)]
    fn dequantize(&self, y: &mut [f32]) {
        if self.m == 0.0 {
            for (y, &q) in y.iter_mut().zip(self.q.iter()) {
                *y = q as f32 * self.d;
            }
        } else {
            for (y, &q) in y.iter_mut().zip(self.q.iter()) {
                *y = q as f32 * self.d + self.m;
            }
        }
    }

    /// One group per block; `value = d·q + m` is a minimum term of `-m`.
    #[inline(always)]
    fn fill_panel(&self, _g: usize, v: &mut [i8], s: &mut [f32], m: &mut [f32]) {
        v.copy_from_slice(&self.q);
        s[0] = self.d;
        m[0] = -self.m;
    }
}

/// Signed value with the largest magnitude (the first one on ties), as ggml picks it.
#[inline(always)]
fn signed_absmax(x: &[f32]) -> f32 {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

#[inline(always)]
fn min_max(x: &[f32]) -> (f32, f32) {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    // Strict comparisons as in ggml, so the sign of a zero extreme matches too.
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

/// `quantize_row_q4_0_ref`.
pub(crate) fn quant_q4_0(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(blocks_mut::<BlockQ4_0>(dst)) {
        let d = signed_absmax(x) / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d.set(d);
        for j in 0..QK / 2 {
            let x0 = ((x[j] * id + 8.5) as i8).min(15) as u8;
            let x1 = ((x[j + 16] * id + 8.5) as i8).min(15) as u8;
            b.qs[j] = x0 | (x1 << 4);
        }
    }
}

/// `quantize_row_q4_1_ref`.
pub(crate) fn quant_q4_1(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(blocks_mut::<BlockQ4_1>(dst)) {
        let (min, max) = min_max(x);
        let d = (max - min) / 15.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d.set(d);
        b.m.set(min);
        for j in 0..QK / 2 {
            let x0 = (((x[j] - min) * id + 0.5) as i8).min(15) as u8;
            let x1 = (((x[j + 16] - min) * id + 0.5) as i8).min(15) as u8;
            b.qs[j] = x0 | (x1 << 4);
        }
    }
}

/// `quantize_row_q5_0_ref`.
pub(crate) fn quant_q5_0(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(blocks_mut::<BlockQ5_0>(dst)) {
        let d = signed_absmax(x) / -16.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d.set(d);
        let mut qh = 0u32;
        for j in 0..QK / 2 {
            let x0 = ((x[j] * id + 16.5) as i8).min(31) as u8;
            let x1 = ((x[j + 16] * id + 16.5) as i8).min(31) as u8;
            b.qs[j] = (x0 & 0x0F) | ((x1 & 0x0F) << 4);
            qh |= (((x0 & 0x10) >> 4) as u32) << j;
            qh |= (((x1 & 0x10) >> 4) as u32) << (j + 16);
        }
        b.qh = qh.to_le_bytes();
    }
}

/// `quantize_row_q5_1_ref`.
pub(crate) fn quant_q5_1(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(blocks_mut::<BlockQ5_1>(dst)) {
        let (min, max) = min_max(x);
        let d = (max - min) / 31.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d.set(d);
        b.m.set(min);
        let mut qh = 0u32;
        for j in 0..QK / 2 {
            let x0 = (((x[j] - min) * id + 0.5) as i8).min(31) as u8;
            let x1 = (((x[j + 16] - min) * id + 0.5) as i8).min(31) as u8;
            b.qs[j] = (x0 & 0x0F) | ((x1 & 0x0F) << 4);
            qh |= (((x0 & 0x10) >> 4) as u32) << j;
            qh |= (((x1 & 0x10) >> 4) as u32) << (j + 16);
        }
        b.qh = qh.to_le_bytes();
    }
}

/// `quantize_row_q8_0_ref`: what llama-quantize writes into files
/// (id = 1/d, round half away from zero).
pub(crate) fn quant_q8_0_ref(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(blocks_mut::<BlockQ8_0>(dst)) {
        let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b.d.set(d);
        for (q, &v) in b.qs.iter_mut().zip(x) {
            *q = (v * id).round() as i8;
        }
    }
}

/// llama.cpp's x86 `quantize_row_q8_0`/`q8_1` for activations: id = 127/amax and
/// round half to even (`_mm256_round_ps`), so our logits track llama.cpp's on x86.
/// Returns d and the integer sum (Q8_1 needs it).
#[inline(always)]
fn quant_q8_act_block(x: &[f32], qs: &mut [i8; QK]) -> (f32, i32) {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    let mut sum = 0i32;
    for (q, &v) in qs.iter_mut().zip(x) {
        let i = super::nearest_int(v * id).clamp(-128, 127) as i8;
        sum += i as i32;
        *q = i;
    }
    (d, sum)
}

/// Activation quantizer for one Q8_0 block (see [`quant_q8_act_block`]).
pub(crate) fn quant_q8_0_act_block(x: &[f32], b: &mut BlockQ8_0) {
    let (d, _) = quant_q8_act_block(x, &mut b.qs);
    b.d.set(d);
}

/// Activation quantizer for Q8_0 (see [`quant_q8_act_block`]).
pub(crate) fn quant_q8_0_act(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(blocks_mut::<BlockQ8_0>(dst)) {
        quant_q8_0_act_block(x, b);
    }
}

/// Activation quantizer for Q8_1: also stores s = d * sum(qs).
pub(crate) fn quant_q8_1_act(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(blocks_mut::<BlockQ8_1>(dst)) {
        let (d, sum) = quant_q8_act_block(x, &mut b.qs);
        b.d.set(d);
        b.s.set(d * sum as f32);
    }
}
