//! The 256-element super-block formats: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and Q8_K.
//!
//! Layouts (little-endian, packed), as in ggml-common.h:
//! - `block_q2_K`: scales[16] (low nibble scale, high nibble min), qs[64], d f16, dmin f16
//! - `block_q3_K`: hmask[32], qs[64], scales[12] (16 six-bit scales), d f16
//! - `block_q4_K`: d f16, dmin f16, scales[12] (8 six-bit scales + 8 six-bit mins), qs[128]
//! - `block_q5_K`: d f16, dmin f16, scales[12], qh[32], qs[128]
//! - `block_q6_K`: ql[128], qh[64], scales[16] i8, d f16
//! - `block_q8_K`: d f32, qs[256] i8, bsums[16] i16 (sum of each 16 quants)

use super::blocks::{
    blocks_mut, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K, K_SUB_BLOCKS,
};
use super::nearest_int;

/// Elements per super-block.
pub(crate) const QK_K: usize = 256;
/// Groups of 16 elements per super-block; every K format's scales fit this grid.
pub(crate) const GROUPS: usize = QK_K / 16;

/// A decoded super-block: value[i] = d * sc[i/16] * q[i] - dmin * m[i/16].
pub(crate) struct Unpacked {
    pub d: f32,
    pub dmin: f32,
    pub q: [i8; QK_K],
    pub sc: [i32; GROUPS],
    pub m: [i32; GROUPS],
}

impl Unpacked {
    /// A block of scales `d` and `dmin`, every value, scale and minimum zero.
    pub(crate) fn new(d: f32, dmin: f32) -> Self {
        Unpacked {
            d,
            dmin,
            q: [0; QK_K],
            sc: [0; GROUPS],
            m: [0; GROUPS],
        }
    }
}

/// ggml's `get_scale_min_k4`: the 6-bit scale and min of sub-block `j` (of 8),
/// byte by byte; the definition [`scales_mins_k4`] is tested against.
#[cfg(test)]
pub(crate) fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// All 8 scales and 8 mins of a Q4_K/Q5_K block: [`scale_min_k4`] for j in
/// 0..8, four sub-blocks per 32-bit word operation (every K-quant decode
/// kernel calls this once per 256 weights).
#[inline(always)]
pub(crate) fn scales_mins_k4(q: &[u8]) -> ([u8; K_SUB_BLOCKS], [u8; K_SUB_BLOCKS]) {
    let word = |i: usize| u32::from_le_bytes([q[4 * i], q[4 * i + 1], q[4 * i + 2], q[4 * i + 3]]);
    let (w0, w1, w2) = (word(0), word(1), word(2));
    const LOW6: u32 = 0x3f3f_3f3f;
    const LOW4: u32 = 0x0f0f_0f0f;
    const LOW2: u32 = 0x0303_0303;
    // Sub-blocks 4..8 take their low four bits from bytes 8..12 and their
    // top two from the spare bits 6 and 7 of bytes 0..4 (scales) or 4..8
    // (mins). Shifting a word right moves each byte's bits down within the
    // byte; the masks drop what comes in from the next byte.
    let sc_hi = (w2 & LOW4) | (((w0 >> 6) & LOW2) << 4);
    let m_hi = ((w2 >> 4) & LOW4) | (((w1 >> 6) & LOW2) << 4);
    let bytes = |lo: u32, hi: u32| (u64::from(lo) | (u64::from(hi) << 32)).to_le_bytes();
    (bytes(w0 & LOW6, sc_hi), bytes(w1 & LOW6, m_hi))
}

pub(crate) fn unpack_q2_k(b: &BlockQ2K) -> Unpacked {
    let (scales, qs) = (&b.scales, &b.qs);
    let mut u = Unpacked::new(b.d.get(), b.dmin.get());
    for g in 0..GROUPS {
        u.sc[g] = (scales[g] & 0x0F) as i32;
        u.m[g] = (scales[g] >> 4) as i32;
    }
    for n in 0..2 {
        let q = &qs[32 * n..32 * n + 32];
        for j in 0..4 {
            let shift = 2 * j;
            for l in 0..32 {
                u.q[128 * n + 32 * j + l] = ((q[l] >> shift) & 3) as i8;
            }
        }
    }
    u
}

pub(crate) fn unpack_q3_k(b: &BlockQ3K) -> Unpacked {
    let (hm, qs, s) = (&b.hmask, &b.qs, &b.scales);
    let mut u = Unpacked::new(b.d.get(), 0.0);
    // 16 six-bit scales: low 4 bits from s[0..8] nibbles, high 2 bits from s[8..12].
    for g in 0..GROUPS {
        let low = if g < 8 { s[g] & 0x0F } else { s[g - 8] >> 4 };
        let high = (s[8 + (g % 4)] >> (2 * (g / 4))) & 3;
        u.sc[g] = (low | (high << 4)) as i32 - 32;
    }
    let mut m = 1u8;
    for n in 0..2 {
        let q = &qs[32 * n..32 * n + 32];
        for j in 0..4 {
            let shift = 2 * j;
            for l in 0..32 {
                let low = ((q[l] >> shift) & 3) as i8;
                let sub = if hm[l] & m != 0 { 0 } else { 4 };
                u.q[128 * n + 32 * j + l] = low - sub;
            }
            m <<= 1;
        }
    }
    u
}

pub(crate) fn unpack_q4_k(b: &BlockQ4K) -> Unpacked {
    let mut u = Unpacked::new(b.d.get(), b.dmin.get());
    let (sc, m) = scales_mins_k4(&b.scales);
    let qs = &b.qs;
    for j in 0..4 {
        let q = &qs[32 * j..32 * j + 32];
        for l in 0..32 {
            u.q[64 * j + l] = (q[l] & 0x0F) as i8;
            u.q[64 * j + 32 + l] = (q[l] >> 4) as i8;
        }
    }
    expand_8(&mut u, &sc, &m);
    u
}

pub(crate) fn unpack_q5_k(b: &BlockQ5K) -> Unpacked {
    let mut u = Unpacked::new(b.d.get(), b.dmin.get());
    let (sc, m) = scales_mins_k4(&b.scales);
    let (qh, qs) = (&b.qh, &b.qs);
    for j in 0..4 {
        let q = &qs[32 * j..32 * j + 32];
        for l in 0..32 {
            let h0 = ((qh[l] >> (2 * j)) & 1) << 4;
            let h1 = ((qh[l] >> (2 * j + 1)) & 1) << 4;
            u.q[64 * j + l] = ((q[l] & 0x0F) | h0) as i8;
            u.q[64 * j + 32 + l] = ((q[l] >> 4) | h1) as i8;
        }
    }
    expand_8(&mut u, &sc, &m);
    u
}

/// Spreads 8 per-32 scales and mins over the 16-element grid.
#[inline(always)]
fn expand_8(u: &mut Unpacked, sc: &[u8; K_SUB_BLOCKS], m: &[u8; K_SUB_BLOCKS]) {
    for g in 0..GROUPS {
        u.sc[g] = sc[g / 2] as i32;
        u.m[g] = m[g / 2] as i32;
    }
}

pub(crate) fn unpack_q6_k(b: &BlockQ6K) -> Unpacked {
    let mut u = Unpacked::new(b.d.get(), 0.0);
    for (s, &v) in u.sc.iter_mut().zip(&b.scales) {
        *s = i32::from(v);
    }
    for n in 0..2 {
        let ql = &b.ql[64 * n..64 * n + 64];
        let qh = &b.qh[32 * n..32 * n + 32];
        let y = &mut u.q[128 * n..128 * n + 128];
        for l in 0..32 {
            y[l] = ((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) as i8 - 32;
            y[l + 32] = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
            y[l + 64] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
            y[l + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
        }
    }
    u
}

pub(crate) fn unpack_q8_k(b: &BlockQ8K) -> Unpacked {
    let mut u = Unpacked::new(b.d.get(), 0.0);
    u.q = b.qs;
    u.sc = [1; GROUPS];
    u
}

impl super::blocks::Decoded for Unpacked {
    #[inline(always)]
    fn dequantize(&self, y: &mut [f32]) {
        for g in 0..GROUPS {
            // Same operation order as ggml: (d*sc)*q - (dmin*m).
            let dl = self.d * self.sc[g] as f32;
            let ml = self.dmin * self.m[g] as f32;
            for l in 0..16 {
                y[16 * g + l] = dl * self.q[16 * g + l] as f32 - ml;
            }
        }
    }

    /// The unpacked scales sit on a 16-element grid; a 32-element group
    /// takes the first of its two (they are equal).
    #[inline(always)]
    fn fill_panel(&self, g: usize, v: &mut [i8], s: &mut [f32], m: &mut [f32]) {
        v.copy_from_slice(&self.q);
        for (h, (sh, mh)) in s.iter_mut().zip(m.iter_mut()).enumerate() {
            let g16 = h * g / 16;
            *sh = self.d * self.sc[g16] as f32;
            *mh = self.dmin * self.m[g16] as f32;
        }
    }
}

/// `quantize_row_q8_K_ref`: iscale = -127/max of the signed extreme, so the extreme
/// maps to -127, and block sums of 16 feed the K-quant min corrections.
pub(crate) fn quant_q8_k(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(blocks_mut::<BlockQ8K>(dst)) {
        quant_q8_k_block(x, b);
    }
}

/// [`quant_q8_k`] for one super-block.
pub(crate) fn quant_q8_k_block(x: &[f32], b: &mut BlockQ8K) {
    let (amax, max) = super::signed_amax(x);
    if amax == 0.0 {
        *b = bytemuck::Zeroable::zeroed();
        return;
    }
    let iscale = -127.0 / max;
    for (q, &v) in b.qs.iter_mut().zip(x) {
        *q = nearest_int(iscale * v).min(127) as i8;
    }
    for (sum, group) in b.bsums.iter_mut().zip(b.qs.chunks_exact(16)) {
        sum.set(group.iter().map(|&q| i32::from(q)).sum::<i32>() as i16);
    }
    b.d.set(1.0 / iscale);
}

#[cfg(test)]
mod scale_tests {
    use super::*;

    /// The word-wise unpacking gives ggml's bytes for any 12 bytes.
    #[test]
    fn scales_mins_k4_matches_bytewise() {
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        for _ in 0..100_000 {
            let mut q = [0u8; 12];
            for b in &mut q {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = (x >> 24) as u8;
            }
            let (sc, m) = scales_mins_k4(&q);
            for j in 0..8 {
                assert_eq!((sc[j], m[j]), scale_min_k4(j, &q), "{q:?} sub-block {j}");
            }
        }
    }
}
