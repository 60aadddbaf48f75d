//! The scalar reference kernels: the specification every SIMD kernel is tested against.
//!
//! They follow ggml's generic C kernels: integer dot products per (sub-)block,
//! scaled in f32 once per block.

use crate::formats::kquants::{self, q8k_bsum, QK_K};
use crate::formats::legacy::{self, QK};
use crate::formats::{f16_at, f32_at};
use crate::GgmlType;

/// Dot product of one weight row (type `ty`, `n` elements) with one activation row in
/// [`crate::vec_dot_type`]`(ty)`, using only the scalar reference kernels.
///
/// An error when the type is unsupported or the buffers are too short for `n`
/// elements.
pub fn vec_dot(ty: GgmlType, n: usize, w: &[u8], a: &[u8]) -> Result<f32, crate::QuantError> {
    crate::simd::checked_vec_dot(crate::simd::scalar_kernels(), ty, n, w, a)
}

/// Dot product of a float-typed weight row (F32, F16 or BF16) with f32 activations.
///
/// An error when the type is not a float type or the buffers are too short.
pub fn vec_dot_f32(ty: GgmlType, w: &[u8], x: &[f32]) -> Result<f32, crate::QuantError> {
    crate::simd::checked_vec_dot_f32(crate::simd::scalar_kernels(), ty, w, x)
}

#[inline(always)]
fn idot(x: &[i8], y: &[u8]) -> i32 {
    x.iter()
        .zip(y)
        .map(|(&x, &y)| x as i32 * y as i8 as i32)
        .sum()
}

fn unpack_q8_0(b: &[u8]) -> legacy::Unpacked {
    let mut q = [0i8; QK];
    for (q, &v) in q.iter_mut().zip(&b[2..34]) {
        *q = v as i8;
    }
    legacy::Unpacked {
        d: f16_at(b),
        m: 0.0,
        q,
    }
}

#[inline(always)]
fn legacy_q8_0(
    w: &[u8],
    a: &[u8],
    nb: usize,
    wb: usize,
    unpack: impl Fn(&[u8]) -> legacy::Unpacked,
) -> f32 {
    let mut sumf = 0.0f32;
    for (bw, ba) in w.chunks_exact(wb).zip(a.chunks_exact(34)).take(nb) {
        let u = unpack(bw);
        let sumi = idot(&u.q, &ba[2..34]);
        sumf += sumi as f32 * (u.d * f16_at(ba));
    }
    sumf
}

#[inline(always)]
fn legacy_q8_1(
    w: &[u8],
    a: &[u8],
    nb: usize,
    wb: usize,
    unpack: impl Fn(&[u8]) -> legacy::Unpacked,
) -> f32 {
    let mut sumf = 0.0f32;
    for (bw, ba) in w.chunks_exact(wb).zip(a.chunks_exact(36)).take(nb) {
        let u = unpack(bw);
        let sumi = idot(&u.q, &ba[4..36]);
        sumf += sumi as f32 * (u.d * f16_at(ba)) + u.m * f16_at(&ba[2..]);
    }
    sumf
}

#[inline(always)]
fn kquant_q8_k(
    w: &[u8],
    a: &[u8],
    nb: usize,
    wb: usize,
    unpack: impl Fn(&[u8]) -> kquants::Unpacked,
) -> f32 {
    let mut sumf = 0.0f32;
    for (bw, ba) in w.chunks_exact(wb).zip(a.chunks_exact(292)).take(nb) {
        let u = unpack(bw);
        let qa = &ba[4..4 + QK_K];
        let (mut isum, mut msum) = (0i32, 0i32);
        for g in 0..kquants::GROUPS {
            isum += u.sc[g] * idot(&u.q[16 * g..16 * g + 16], &qa[16 * g..16 * g + 16]);
            msum += u.m[g] * q8k_bsum(ba, g);
        }
        let dy = f32_at(ba);
        sumf += (u.d * dy) * isum as f32 - (u.dmin * dy) * msum as f32;
    }
    sumf
}

/// Q4_0 · Q8_0.
pub(crate) fn dot_q4_0(w: &[u8], a: &[u8], nb: usize) -> f32 {
    legacy_q8_0(w, a, nb, 18, legacy::unpack_q4_0)
}
/// Q5_0 · Q8_0.
pub(crate) fn dot_q5_0(w: &[u8], a: &[u8], nb: usize) -> f32 {
    legacy_q8_0(w, a, nb, 22, legacy::unpack_q5_0)
}
/// Q8_0 · Q8_0.
pub(crate) fn dot_q8_0(w: &[u8], a: &[u8], nb: usize) -> f32 {
    legacy_q8_0(w, a, nb, 34, unpack_q8_0)
}
/// Q4_1 · Q8_1.
pub(crate) fn dot_q4_1(w: &[u8], a: &[u8], nb: usize) -> f32 {
    legacy_q8_1(w, a, nb, 20, legacy::unpack_q4_1)
}
/// Q5_1 · Q8_1.
pub(crate) fn dot_q5_1(w: &[u8], a: &[u8], nb: usize) -> f32 {
    legacy_q8_1(w, a, nb, 24, legacy::unpack_q5_1)
}
/// Q2_K · Q8_K.
pub(crate) fn dot_q2_k(w: &[u8], a: &[u8], nb: usize) -> f32 {
    kquant_q8_k(w, a, nb, 84, kquants::unpack_q2_k)
}
/// Q3_K · Q8_K.
pub(crate) fn dot_q3_k(w: &[u8], a: &[u8], nb: usize) -> f32 {
    kquant_q8_k(w, a, nb, 110, kquants::unpack_q3_k)
}
/// Q4_K · Q8_K.
pub(crate) fn dot_q4_k(w: &[u8], a: &[u8], nb: usize) -> f32 {
    kquant_q8_k(w, a, nb, 144, kquants::unpack_q4_k)
}
/// Q5_K · Q8_K.
pub(crate) fn dot_q5_k(w: &[u8], a: &[u8], nb: usize) -> f32 {
    kquant_q8_k(w, a, nb, 176, kquants::unpack_q5_k)
}
/// Q6_K · Q8_K.
pub(crate) fn dot_q6_k(w: &[u8], a: &[u8], nb: usize) -> f32 {
    kquant_q8_k(w, a, nb, 210, kquants::unpack_q6_k)
}
/// Q8_K · Q8_K.
pub(crate) fn dot_q8_k(w: &[u8], a: &[u8], nb: usize) -> f32 {
    kquant_q8_k(w, a, nb, 292, kquants::unpack_q8_k)
}

/// F32 · F32.
pub(crate) fn dot_f32(w: &[u8], x: &[f32], n: usize) -> f32 {
    w.chunks_exact(4)
        .zip(x)
        .take(n)
        .map(|(w, &x)| f32_at(w) * x)
        .sum()
}
/// F16 · F32.
pub(crate) fn dot_f16(w: &[u8], x: &[f32], n: usize) -> f32 {
    w.chunks_exact(2)
        .zip(x)
        .take(n)
        .map(|(w, &x)| f16_at(w) * x)
        .sum()
}
/// BF16 · F32.
pub(crate) fn dot_bf16(w: &[u8], x: &[f32], n: usize) -> f32 {
    w.chunks_exact(2)
        .zip(x)
        .take(n)
        .map(|(w, &x)| {
            crate::formats::float::bf16_bits_to_f32(u16::from_le_bytes([w[0], w[1]])) * x
        })
        .sum()
}
