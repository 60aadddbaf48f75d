//! Batched products (prefill) for the 32-element block formats whose
//! activations are Q8_0 (Q8_0, Q5_0, Q4_0 weights).
//!
//! A matrix-vector kernel has to unpack every weight block for every
//! activation row. Here each tile of four weight rows is unpacked once into
//! plain signed bytes and f32 scales, the activations are split the same way
//! once per call, and a 4×4 register tile then sweeps them with 512-bit
//! integer dot products over pairs of blocks. The integer sums and scales are
//! those of the vector kernels; only the order of the f32 additions differs.

use crate::formats::legacy::QK;
use crate::GgmlType;

/// Rows and columns of the register tile.
pub(crate) const TILE: usize = 4;

/// Weights or activations split into signed bytes and one f32 scale per block,
/// blocks taken in pairs (an odd last block is paired with a zero block).
pub(crate) struct Split {
    /// `n` rows of `pairs * 64` signed bytes.
    pub q: Vec<i8>,
    /// `n` rows of `pairs * 16` scales: each block's scale repeated over the
    /// eight i32 lanes its products land in.
    pub s: Vec<f32>,
    /// Block pairs per row.
    pub pairs: usize,
    /// Per 32-element block: for Q4_K weights the minimum term `dmin * m`,
    /// for activations the block's sum `d * sum(q)`; zero otherwise.
    pub m: Vec<f32>,
}

impl Split {
    /// Room for `n` rows of `nb` blocks.
    pub fn new(n: usize, nb: usize) -> Self {
        let pairs = nb.div_ceil(2);
        Self {
            q: vec![0; n * pairs * 64],
            s: vec![0.0; n * pairs * 16],
            pairs,
            m: vec![0.0; n * pairs * 2],
        }
    }

    /// Fill row `row` from a row of `cols` elements of type `ty`: weights of
    /// any type [`supports`] accepts, or activations in Q8_0 or Q8_K.
    pub fn fill_row(&mut self, row: usize, ty: GgmlType, src: &[u8], cols: usize) {
        match ty {
            GgmlType::Q4_K | GgmlType::Q6_K | GgmlType::Q8_K => self.fill_k(row, ty, src, cols),
            _ => self.fill(row, ty, src, cols / QK),
        }
        if matches!(ty, GgmlType::Q8_0 | GgmlType::Q8_K) {
            // Activation block sums, for the Q4_K minimum term.
            let pairs = self.pairs;
            for b in 0..cols / QK {
                let q = &self.q[row * pairs * 64 + b * QK..][..QK];
                let sum: i32 = q.iter().map(|&v| v as i32).sum();
                self.m[row * pairs * 2 + b] = self.s[row * pairs * 16 + b * 8] * sum as f32;
            }
        }
    }

    /// The super-block formats: each 32-element block gets its byte values
    /// and a scale per i32 lane (Q6_K's scales cover 16 elements, four lanes).
    fn fill_k(&mut self, row: usize, ty: GgmlType, src: &[u8], cols: usize) {
        let pairs = self.pairs;
        let base = row * pairs;
        for (sb, b) in src
            .chunks_exact(ty.block_bytes())
            .take(cols / 256)
            .enumerate()
        {
            for k in 0..8 {
                let blk = sb * 8 + k;
                let q = &mut self.q[base * 64 + blk * QK..][..QK];
                let s = &mut self.s[base * 16 + blk * 8..][..8];
                match ty {
                    GgmlType::Q8_K => {
                        let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                        for (o, &v) in q.iter_mut().zip(&b[4 + k * 32..4 + (k + 1) * 32]) {
                            *o = v as i8;
                        }
                        s.fill(d);
                    }
                    GgmlType::Q4_K => {
                        let d = half::f16::from_le_bytes([b[0], b[1]]).to_f32();
                        let dmin = half::f16::from_le_bytes([b[2], b[3]]).to_f32();
                        let (sc, mn) = crate::formats::kquants::scales_mins_k4(&b[4..16]);
                        let qs = &b[16 + (k / 2) * 32..16 + (k / 2 + 1) * 32];
                        for (o, &v) in q.iter_mut().zip(qs) {
                            *o = if k % 2 == 0 {
                                (v & 0x0F) as i8
                            } else {
                                (v >> 4) as i8
                            };
                        }
                        s.fill(d * sc[k] as f32);
                        self.m[base * 2 + blk] = dmin * mn[k] as f32;
                    }
                    GgmlType::Q6_K => {
                        let (ql, qh, sc) = (&b[0..128], &b[128..192], &b[192..208]);
                        let d = half::f16::from_le_bytes([b[208], b[209]]).to_f32();
                        // Element e of the super-block: half h = e / 128, and
                        // within it l = e % 32 and quarter j = (e % 128) / 32.
                        for (i, o) in q.iter_mut().enumerate() {
                            let e = k * 32 + i;
                            let (h, j, l) = (e / 128, (e % 128) / 32, e % 32);
                            let lo = ql[h * 64 + l + if j % 2 == 1 { 32 } else { 0 }];
                            let lo = if j >= 2 { lo >> 4 } else { lo & 0x0F };
                            let hi = (qh[h * 32 + l] >> (2 * j)) & 3;
                            *o = (lo | (hi << 4)) as i8 - 32;
                        }
                        for (lane, sv) in s.iter_mut().enumerate() {
                            *sv = d * sc[(k * 32 + lane * 4) / 16] as i8 as f32;
                        }
                    }
                    _ => unreachable!("fill_k takes super-block types only"),
                }
            }
        }
    }

    /// Fill row `row` from one row of `nb` blocks of type `ty` (Q8_0, Q5_0 or
    /// Q4_0; anything else leaves zeros).
    pub fn fill(&mut self, row: usize, ty: GgmlType, src: &[u8], nb: usize) {
        let pairs = self.pairs;
        let q = &mut self.q[row * pairs * 64..(row + 1) * pairs * 64];
        let s = &mut self.s[row * pairs * 16..(row + 1) * pairs * 16];
        let bb = ty.block_bytes();
        for (i, b) in src.chunks_exact(bb).take(nb).enumerate() {
            let d = half::f16::from_le_bytes([b[0], b[1]]).to_f32();
            let dst = &mut q[i * QK..(i + 1) * QK];
            match ty {
                GgmlType::Q8_0 => {
                    for (o, &v) in dst.iter_mut().zip(&b[2..34]) {
                        *o = v as i8;
                    }
                }
                GgmlType::Q4_0 => {
                    for j in 0..16 {
                        dst[j] = (b[2 + j] & 0x0F) as i8 - 8;
                        dst[j + 16] = (b[2 + j] >> 4) as i8 - 8;
                    }
                }
                GgmlType::Q5_0 => {
                    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
                    for j in 0..16 {
                        let lo = (b[6 + j] & 0x0F) | ((((qh >> j) & 1) as u8) << 4);
                        let hi = (b[6 + j] >> 4) | ((((qh >> (j + 16)) & 1) as u8) << 4);
                        dst[j] = lo as i8 - 16;
                        dst[j + 16] = hi as i8 - 16;
                    }
                }
                _ => dst.fill(0),
            }
            s[i * 8..(i + 1) * 8].fill(d);
        }
    }

    /// Zero row `row` (padding rows of a partial tile).
    pub fn clear(&mut self, row: usize) {
        let pairs = self.pairs;
        self.q[row * pairs * 64..(row + 1) * pairs * 64].fill(0);
        self.s[row * pairs * 16..(row + 1) * pairs * 16].fill(0.0);
        self.m[row * pairs * 2..(row + 1) * pairs * 2].fill(0.0);
    }

    /// `sum_b self.m[row][b] * other.m[other_row][b]`: the Q4_K minimum term.
    pub fn min_term(&self, row: usize, other: &Split, other_row: usize) -> f32 {
        let n = self.pairs * 2;
        let a = &self.m[row * n..(row + 1) * n];
        let b = &other.m[other_row * n..(other_row + 1) * n];
        crate::vector::dot(a, b)
    }
}

/// Whether the weight type has a split form.
pub(crate) fn supports(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::Q8_0 | GgmlType::Q5_0 | GgmlType::Q4_0 | GgmlType::Q4_K | GgmlType::Q6_K
    )
}

/// The 4×4 tile kernel: `out[c][r] = sum over pairs of the dot products of
/// weight row `r` and activation row `c`, each pair scaled by both scales.
pub(crate) type TileFn =
    fn(w: &Split, w_row0: usize, a: &Split, a_row0: usize) -> [[f32; TILE]; TILE];

/// The tile kernel this CPU can run, if any.
pub(crate) fn kernel() -> Option<TileFn> {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vnni")
        {
            return Some(x86::tile_vnni512);
        }
    }
    None
}

/// The scalar reference of the tile kernel (the spec the SIMD tile is tested against).
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn tile_scalar(
    w: &Split,
    w_row0: usize,
    a: &Split,
    a_row0: usize,
) -> [[f32; TILE]; TILE] {
    let pairs = w.pairs;
    let mut out = [[0.0f32; TILE]; TILE];
    for (c, out_c) in out.iter_mut().enumerate() {
        let ar = a_row0 + c;
        for (r, o) in out_c.iter_mut().enumerate() {
            let wr = w_row0 + r;
            let mut acc = 0.0f32;
            for blk in 0..pairs * 2 {
                let wq = &w.q[wr * pairs * 64 + blk * QK..][..QK];
                let aq = &a.q[ar * pairs * 64 + blk * QK..][..QK];
                let isum: i32 = wq.iter().zip(aq).map(|(&x, &y)| x as i32 * y as i32).sum();
                let ws = w.s[wr * pairs * 16 + blk * 8];
                let as_ = a.s[ar * pairs * 16 + blk * 8];
                acc += isum as f32 * (ws * as_);
            }
            *o = acc;
        }
    }
    out
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    #![allow(clippy::incompatible_msrv)] // AVX-512 intrinsics: stable since 1.89, checked at run time.

    use super::{Split, TILE};
    use std::arch::x86_64::*;

    pub(super) fn tile_vnni512(
        w: &Split,
        w_row0: usize,
        a: &Split,
        a_row0: usize,
    ) -> [[f32; TILE]; TILE] {
        let pairs = w.pairs;
        assert!(a.pairs == pairs);
        assert!(
            (w_row0 + TILE) * pairs * 64 <= w.q.len() && (w_row0 + TILE) * pairs * 16 <= w.s.len()
        );
        assert!(
            (a_row0 + TILE) * pairs * 64 <= a.q.len() && (a_row0 + TILE) * pairs * 16 <= a.s.len()
        );
        // SAFETY: `kernel()` hands this out only after detecting avx512f, bw and
        // vnni; the asserts above bound every row the kernel reads.
        unsafe { tile_impl(w, w_row0, a, a_row0) }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn tile_impl(w: &Split, w_row0: usize, a: &Split, a_row0: usize) -> [[f32; TILE]; TILE] {
        let pairs = w.pairs;
        // Row starts; in bounds for r, c < TILE by the caller's asserts.
        let wq = |r: usize| w.q[(w_row0 + r) * pairs * 64..].as_ptr();
        let ws = |r: usize| w.s[(w_row0 + r) * pairs * 16..].as_ptr();
        let aq = |c: usize| a.q[(a_row0 + c) * pairs * 64..].as_ptr();
        let as_ = |c: usize| a.s[(a_row0 + c) * pairs * 16..].as_ptr();
        let zero = _mm512_setzero_si512();
        let flip = _mm512_set1_epi8(0x80u8 as i8);
        let ones = _mm512_set1_epi8(1);
        let mut acc = [[_mm512_setzero_ps(); TILE]; TILE];
        // vpdpbusd multiplies unsigned by signed bytes. Activations (in
        // [-127, 127]) are shifted to a + 128 by flipping their top bit, and
        // the extra 128 * sum(w) is cancelled by starting each dot product at
        // -128 * sum(w), computed once per weight row and pair.
        for p in 0..pairs {
            let mut wv = [zero; TILE];
            let mut bias = [zero; TILE];
            let mut sw = [_mm512_setzero_ps(); TILE];
            for r in 0..TILE {
                // SAFETY: pair p of row r lies inside the buffers (asserted by the caller).
                wv[r] = unsafe { _mm512_loadu_si512(wq(r).add(p * 64) as *const _) };
                let wsum = _mm512_dpbusd_epi32(zero, ones, wv[r]);
                bias[r] = _mm512_sub_epi32(zero, _mm512_slli_epi32(wsum, 7));
                // SAFETY: as above, 16 scales per pair.
                sw[r] = unsafe { _mm512_loadu_ps(ws(r).add(p * 16)) };
            }
            for (c, acc_c) in acc.iter_mut().enumerate() {
                // SAFETY: pair p of activation row c lies inside the buffers.
                let (av, sa) = unsafe {
                    (
                        _mm512_loadu_si512(aq(c).add(p * 64) as *const _),
                        _mm512_loadu_ps(as_(c).add(p * 16)),
                    )
                };
                let au = _mm512_xor_si512(av, flip);
                for r in 0..TILE {
                    let dot = _mm512_dpbusd_epi32(bias[r], au, wv[r]);
                    let scale = _mm512_mul_ps(sw[r], sa);
                    acc_c[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc_c[r]);
                }
            }
        }
        acc.map(|row| row.map(|v| _mm512_reduce_add_ps(v)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn random_split(n: usize, nb: usize, seed: u64) -> Split {
        let mut s = Split::new(n, nb);
        let mut x = seed | 1;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for row in 0..n {
            let mut bytes = Vec::new();
            for _ in 0..nb {
                let d = half::f16::from_f32((next() % 1000) as f32 / 5000.0 + 0.001);
                bytes.extend_from_slice(&d.to_le_bytes());
                // Activations never hold -128 (the quantizer stops at ±127),
                // which the kernel relies on when it shifts them to unsigned.
                bytes.extend((0..32).map(|_| ((next() % 255) as i32 - 127) as i8 as u8));
            }
            s.fill(row, GgmlType::Q8_0, &bytes, nb);
        }
        s
    }

    proptest! {
        /// The SIMD tile agrees with the scalar reference.
        #[test]
        fn simd_tile_matches_scalar(nb in 1usize..24, seed in any::<u64>()) {
            let Some(k) = kernel() else { return Ok(()) };
            let w = random_split(TILE, nb, seed);
            let a = random_split(TILE, nb, seed ^ 0xabcdef);
            let want = tile_scalar(&w, 0, &a, 0);
            let got = k(&w, 0, &a, 0);
            // Tolerance: f32 rounding of the sum of the per-block terms' magnitudes.
            let mag = |c: usize, r: usize| -> f32 {
                let p = w.pairs;
                (0..p * 2)
                    .map(|b| {
                        let wq = &w.q[r * p * 64 + b * 32..][..32];
                        let aq = &a.q[c * p * 64 + b * 32..][..32];
                        // Element magnitudes: the SIMD lanes hold partial sums
                        // that may cancel only in the final reduction.
                        let isum: i32 = wq.iter().zip(aq).map(|(&x, &y)| (x as i32 * y as i32).abs()).sum();
                        (isum as f32 * w.s[r * p * 16 + b * 8] * a.s[c * p * 16 + b * 8]).abs()
                    })
                    .sum()
            };
            for c in 0..TILE {
                for r in 0..TILE {
                    let tol = 1e-5 * mag(c, r) + 1e-6;
                    prop_assert!((got[c][r] - want[c][r]).abs() <= tol, "{} vs {}", got[c][r], want[c][r]);
                }
            }
        }
    }

    /// Q4_K and Q6_K rows split into bytes, lane scales and minimum terms
    /// that reproduce `dequantize` (random valid super-blocks).
    #[test]
    fn split_k_decodes_like_dequantize() {
        let mut x = 0x9e37_79b9_u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for ty in [GgmlType::Q4_K, GgmlType::Q6_K] {
            let mut blocks: Vec<u8> = (0..2 * ty.block_bytes()).map(|_| next() as u8).collect();
            // Sane f16 scales (d and dmin for Q4_K at 0..4, d for Q6_K at 208..210).
            for sb in 0..2 {
                let o = sb * ty.block_bytes();
                let d = half::f16::from_f32(0.01 + (next() % 100) as f32 / 1000.0).to_le_bytes();
                if ty == GgmlType::Q4_K {
                    blocks[o..o + 2].copy_from_slice(&d);
                    blocks[o + 2..o + 4].copy_from_slice(&d);
                } else {
                    blocks[o + 208..o + 210].copy_from_slice(&d);
                }
            }
            let mut want = vec![0.0f32; 512];
            crate::dequantize(ty, &blocks, &mut want).unwrap();
            let mut s = Split::new(1, 16);
            s.fill_row(0, ty, &blocks, 512);
            for (e, &w) in want.iter().enumerate() {
                let (b, lane) = (e / 32, (e % 32) / 4);
                let got = s.q[e] as f32 * s.s[b * 8 + lane] - s.m[b];
                assert!(
                    (got - w).abs() <= 1e-5 * (w.abs() + 1.0),
                    "{ty} element {e}: {got} vs {w}"
                );
            }
        }
    }

    #[test]
    fn split_decodes_like_dequantize() {
        for ty in [GgmlType::Q8_0, GgmlType::Q5_0, GgmlType::Q4_0] {
            let x: Vec<f32> = (0..96).map(|i| ((i * 37) % 23) as f32 - 11.0).collect();
            let mut blocks = vec![0u8; ty.row_bytes(96).unwrap() as usize];
            crate::quantize(ty, &x, &mut blocks).unwrap();
            let mut want = vec![0.0f32; 96];
            crate::dequantize(ty, &blocks, &mut want).unwrap();
            let mut s = Split::new(1, 3);
            s.fill(0, ty, &blocks, 3);
            for (i, &w) in want.iter().enumerate() {
                let got = s.q[i] as f32 * s.s[(i / 32) * 8];
                assert_eq!(got, w, "{ty} element {i}");
            }
            // The padding block of the last pair is zero.
            assert!(s.q[96..128].iter().all(|&v| v == 0));
        }
    }
}
