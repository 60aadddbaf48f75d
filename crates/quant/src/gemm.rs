//! Batched products (prefill): weight rows repacked into panels for 512-bit
//! integer dot products.
//!
//! A matrix-vector kernel unpacks every weight block once per activation row
//! and ends every dot product with a horizontal sum. Here, once per call, each
//! run of [`NR`] weight rows is unpacked into a panel whose vector lanes are
//! *rows*: four consecutive bytes of 16 rows fill a 512-bit register, and one
//! `vpdpbusd` against four broadcast activation bytes advances 16 row sums at
//! once. Sums stay in i32 across a scale group (16 or 32 elements) and are
//! scaled into f32 once per group, so the register tile does 64 integer
//! multiply-adds per instruction and no reductions.
//!
//! Every weight format is brought to one form per group: `value = s * q - m`
//! with q a signed byte. Activations are quantized as llama.cpp does at run
//! time (Q8_K against the K formats, Q8_0 against the rest) and shifted to unsigned bytes (`q + 128`), the
//! operand order `vpdpbusd` needs; each group's sum starts at `-128 * sum(q)`
//! of its weights to cancel the shift.

use crate::formats::legacy::{self, QK};
use crate::formats::{f16_at, kquants};
use crate::GgmlType;

/// Weight rows per panel: two 16-lane vectors.
pub(crate) const NR: usize = 32;
/// Activation rows per register tile.
pub(crate) const MR: usize = 4;

/// Elements per scale group for weights of type `ty`, or `None` when the
/// type has no panel form.
pub(crate) fn group_len(ty: GgmlType) -> Option<usize> {
    use GgmlType::*;
    match ty {
        Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q4_K | Q5_K => Some(32),
        Q2_K | Q3_K | Q6_K => Some(16),
        _ => None,
    }
}

/// Whether the type's groups carry a minimum term (`m` ≠ 0).
fn has_min(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(ty, Q4_1 | Q5_1 | Q2_K | Q4_K | Q5_K)
}

/// A batch of activation rows in the kernel's form.
#[derive(Default)]
pub(crate) struct Acts {
    /// `rows × cols` bytes: each Q8 value plus 128.
    pub q: Vec<u8>,
    /// `rows × cols/32` scales (the f16 scale of the Q8_0 block, widened).
    pub d: Vec<f32>,
    /// `rows × cols/g` per-group `d * sum(q)`, for the minimum term.
    pub sum: Vec<f32>,
    /// Elements per row.
    pub cols: usize,
    /// Weight group length these sums are for.
    pub g: usize,
}

impl Acts {
    /// Room for `rows` rows of `cols` elements against groups of `g`.
    pub fn reset(&mut self, rows: usize, cols: usize, g: usize) {
        self.cols = cols;
        self.g = g;
        self.q.resize(rows * cols, 0);
        self.d.resize(rows * cols / QK, 0.0);
        self.sum.resize(rows * cols / g, 0.0);
    }

    /// Quantizes one row of `cols` values into `q`, `d` and `sum` (that row's
    /// slices) the way [`crate::quantize_activation`] does for `at`: Q8_K
    /// (one scale per 256, for the K formats), Q8_1 or Q8_0 (per 32).
    pub fn fill_row(
        x: &[f32],
        at: GgmlType,
        g: usize,
        q: &mut [u8],
        d: &mut [f32],
        sum: &mut [f32],
    ) {
        if at == GgmlType::Q8_K {
            let mut block = [0u8; 292];
            for (b, xb) in x.chunks_exact(kquants::QK_K).enumerate() {
                #[cfg(target_arch = "x86_64")]
                if available() {
                    // SAFETY: avx512f/bw detected; `xb` holds 256 values and
                    // the block 4 + 256 bytes.
                    unsafe { x86::quant_q8_k(xb, &mut block) };
                } else {
                    kquants::quant_q8_k(xb, &mut block);
                }
                #[cfg(not(target_arch = "x86_64"))]
                kquants::quant_q8_k(xb, &mut block);
                let scale = f32::from_le_bytes([block[0], block[1], block[2], block[3]]);
                let per = kquants::QK_K / QK;
                d[b * per..(b + 1) * per].fill(scale);
                Self::split(&block[4..260], scale, g, b * kquants::QK_K, q, sum);
            }
            return;
        }
        if at == GgmlType::Q8_1 {
            // Q8_1 carries its block sum as an f16 `d * sum(q)`, which the
            // vector kernels use as is (32-element groups only).
            let mut block = [0u8; 36];
            for (b, xb) in x.chunks_exact(QK).enumerate() {
                legacy::quant_q8_1_act(xb, &mut block);
                d[b] = f16_at(&block);
                Self::split(&block[4..], d[b], g, b * QK, q, sum);
                sum[b] = f16_at(&block[2..]);
            }
            return;
        }
        let mut block = [0u8; 34];
        for (b, xb) in x.chunks_exact(QK).enumerate() {
            #[cfg(target_arch = "x86_64")]
            if available() {
                // SAFETY: avx512f/bw detected; `xb` holds 32 values, the block 34 bytes.
                unsafe { x86::quant_q8_0(xb, &mut block) };
            } else {
                legacy::quant_q8_0_act(xb, &mut block);
            }
            #[cfg(not(target_arch = "x86_64"))]
            legacy::quant_q8_0_act(xb, &mut block);
            let scale = f16_at(&block);
            d[b] = scale;
            Self::split(&block[2..], scale, g, b * QK, q, sum);
        }
    }

    /// Stores signed values `vals` (starting at element `at`) shifted to
    /// unsigned, and their per-group scaled sums.
    fn split(vals: &[u8], scale: f32, g: usize, at: usize, q: &mut [u8], sum: &mut [f32]) {
        for (o, &v) in q[at..at + vals.len()].iter_mut().zip(vals) {
            *o = v ^ 0x80;
        }
        for (h, part) in vals.chunks_exact(g).enumerate() {
            let s: i32 = part.iter().map(|&v| v as i8 as i32).sum();
            sum[at / g + h] = scale * s as f32;
        }
    }
}

/// [`NR`] weight rows unpacked for the tile kernel.
#[derive(Default)]
pub(crate) struct Panel {
    /// For each 4-element column step k4, the 4 bytes of every row in turn
    /// (`[cols/4][NR][4]` signed bytes).
    pub q: Vec<i8>,
    /// `[groups][NR]` group scales.
    pub s: Vec<f32>,
    /// `[groups][NR]` minimum terms.
    pub m: Vec<f32>,
    /// `[groups][NR]` i32 starting sums: `-128 * sum(q)` of the group.
    pub bias: Vec<i32>,
    /// Scale groups per row.
    pub groups: usize,
    /// Elements per group.
    pub g: usize,
    /// Whether `m` is in use.
    pub min: bool,
}

impl Panel {
    /// Unpacks `rows` (at most [`NR`] rows of `cols` elements of type `ty`,
    /// which [`group_len`] accepts); missing rows are zero.
    pub fn fill(&mut self, ty: GgmlType, rows: &[&[u8]], cols: usize) {
        let g = group_len(ty).unwrap_or(32);
        self.g = g;
        self.groups = cols / g;
        self.min = has_min(ty);
        self.q.clear();
        self.q.resize(cols * NR, 0);
        for v in [&mut self.s, &mut self.m] {
            v.clear();
            v.resize(self.groups * NR, 0.0);
        }
        self.bias.clear();
        self.bias.resize(self.groups * NR, 0);
        for (r, row) in rows.iter().enumerate().take(NR) {
            self.fill_row(ty, r, row, cols);
        }
    }

    /// Stores signed values `vals` of row `r` from element `k0` (a multiple
    /// of the group length) four at a time, and their groups' starting sums.
    fn put(&mut self, r: usize, k0: usize, vals: &[i8]) {
        for (j, quad) in vals.chunks_exact(4).enumerate() {
            let at = (k0 / 4 + j) * NR * 4 + r * 4;
            self.q[at..at + 4].copy_from_slice(quad);
        }
        for (h, part) in vals.chunks_exact(self.g).enumerate() {
            let sum: i32 = part.iter().map(|&v| v as i32).sum();
            self.bias[(k0 / self.g + h) * NR + r] = -128 * sum;
        }
    }

    fn fill_row(&mut self, ty: GgmlType, r: usize, row: &[u8], cols: usize) {
        use GgmlType::*;
        let unpack_legacy: Option<fn(&[u8]) -> legacy::Unpacked> = match ty {
            Q4_0 => Some(legacy::unpack_q4_0),
            Q4_1 => Some(legacy::unpack_q4_1),
            Q5_0 => Some(legacy::unpack_q5_0),
            Q5_1 => Some(legacy::unpack_q5_1),
            _ => None,
        };
        let bb = ty.block_bytes();
        if ty == Q8_0 {
            for (b, blk) in row.chunks_exact(bb).take(cols / QK).enumerate() {
                let mut vals = [0i8; QK];
                for (o, &v) in vals.iter_mut().zip(legacy::q8_values(blk, 2)) {
                    *o = v as i8;
                }
                self.put(r, b * QK, &vals);
                self.s[b * NR + r] = f16_at(blk);
            }
        } else if let Some(unpack) = unpack_legacy {
            for (b, blk) in row.chunks_exact(bb).take(cols / QK).enumerate() {
                let u = unpack(blk);
                self.put(r, b * QK, &u.q);
                // value = d * q + m, i.e. s = d and a minimum term of -m.
                self.s[b * NR + r] = u.d;
                self.m[b * NR + r] = -u.m;
            }
        } else {
            let unpack: fn(&[u8]) -> kquants::Unpacked = match ty {
                Q2_K => kquants::unpack_q2_k,
                Q3_K => kquants::unpack_q3_k,
                Q4_K => kquants::unpack_q4_k,
                Q5_K => kquants::unpack_q5_k,
                Q6_K => kquants::unpack_q6_k,
                _ => return,
            };
            let per = kquants::QK_K / self.g;
            for (b, blk) in row.chunks_exact(bb).take(cols / kquants::QK_K).enumerate() {
                let u = unpack(blk);
                self.put(r, b * kquants::QK_K, &u.q);
                // The unpacked scales sit on a 16-element grid; a 32-element
                // group takes the first of its two (they are equal).
                for h in 0..per {
                    let g16 = h * self.g / 16;
                    self.s[(b * per + h) * NR + r] = u.d * u.sc[g16] as f32;
                    self.m[(b * per + h) * NR + r] = u.dmin * u.m[g16] as f32;
                }
            }
        }
    }
}

/// The register tile's result: `out[c][r]` for activation row `c0 + c` and
/// panel row `r`.
pub(crate) type Tile = [[f32; NR]; MR];

/// The tile kernel's reference: for activation rows `c0..c0 + m` (m ≤ [`MR`])
/// against every panel row, `sum over groups of (i32 sum) * (s * d)`, less
/// `m * sum` where the type has minimum terms, in the order the SIMD kernel
/// rounds them (`mul_add` = its fused multiply-add).
pub(crate) fn tile_scalar(p: &Panel, a: &Acts, c0: usize, m: usize) -> Tile {
    let mut out = [[0.0f32; NR]; MR];
    let cols = a.cols;
    for (c, out_c) in out.iter_mut().enumerate().take(m) {
        let aq = &a.q[(c0 + c) * cols..(c0 + c + 1) * cols];
        for (r, o) in out_c.iter_mut().enumerate() {
            let mut acc = 0.0f32;
            for g in 0..p.groups {
                let mut isum = p.bias[g * NR + r];
                for (k, &av) in aq.iter().enumerate().skip(g * p.g).take(p.g) {
                    isum += p.q[(k / 4) * NR * 4 + r * 4 + k % 4] as i32 * av as i32;
                }
                let d = a.d[(c0 + c) * (cols / QK) + g * p.g / QK];
                acc = (isum as f32).mul_add(p.s[g * NR + r] * d, acc);
                if p.min {
                    let sum = a.sum[(c0 + c) * p.groups + g];
                    acc = (-p.m[g * NR + r]).mul_add(sum, acc);
                }
            }
            *o = acc;
        }
    }
    out
}

/// Whether this CPU runs the SIMD tile (AVX-512 with VNNI).
pub(crate) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The tile kernel: the SIMD one where [`available`], else the reference.
pub(crate) fn tile(p: &Panel, a: &Acts, c0: usize, m: usize) -> Tile {
    let cols = p.groups * p.g;
    assert!(m <= MR && a.cols == cols && a.g == p.g);
    assert!(p.q.len() >= cols * NR && p.s.len() >= p.groups * NR);
    assert!(p.m.len() >= p.groups * NR && p.bias.len() >= p.groups * NR);
    assert!(a.q.len() >= (c0 + m) * cols && a.d.len() >= (c0 + m) * cols / QK);
    assert!(a.sum.len() >= (c0 + m) * p.groups);
    #[cfg(target_arch = "x86_64")]
    if available() && (p.g == 16 || p.g == 32) {
        // SAFETY: features detected; the asserts bound every element read.
        return unsafe { x86::tile(p, a, c0, m) };
    }
    tile_scalar(p, a, c0, m)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    #![allow(clippy::incompatible_msrv)] // AVX-512 intrinsics: stable since 1.89, checked at run time.

    use super::{Acts, Panel, Tile, MR, NR, QK};
    use std::arch::x86_64::*;

    /// # Safety
    /// avx512f/bw/vnni present; `p` and `a` hold what [`super::tile`] asserts.
    pub(super) unsafe fn tile(p: &Panel, a: &Acts, c0: usize, m: usize) -> Tile {
        macro_rules! pick {
            ($g:literal) => {
                match (m, p.min) {
                    (4, false) => tile_m::<4, $g, false>(p, a, c0),
                    (3, false) => tile_m::<3, $g, false>(p, a, c0),
                    (2, false) => tile_m::<2, $g, false>(p, a, c0),
                    (1, false) => tile_m::<1, $g, false>(p, a, c0),
                    (4, true) => tile_m::<4, $g, true>(p, a, c0),
                    (3, true) => tile_m::<3, $g, true>(p, a, c0),
                    (2, true) => tile_m::<2, $g, true>(p, a, c0),
                    (1, true) => tile_m::<1, $g, true>(p, a, c0),
                    _ => [[0.0; NR]; MR],
                }
            };
        }
        const _: () = assert!(MR == 4 && NR == 32);
        // SAFETY: the caller's contract, passed on.
        unsafe {
            if p.g == 16 {
                pick!(16)
            } else {
                pick!(32)
            }
        }
    }

    /// `legacy::quant_q8_0_act` for one block of 32, the same bytes: scale
    /// amax/127 (as f16), values round-half-even of `v * 127/amax`.
    ///
    /// # Safety
    /// avx512f and avx512bw present; `x` holds 32 values, `block` 34 bytes.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) unsafe fn quant_q8_0(x: &[f32], block: &mut [u8; 34]) {
        assert!(x.len() >= 32);
        // SAFETY: 32 values, as asserted.
        let (v0, v1) = unsafe {
            (
                _mm512_loadu_ps(x.as_ptr()),
                _mm512_loadu_ps(x.as_ptr().add(16)),
            )
        };
        let amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        let d = amax / 127.0;
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        let idv = _mm512_set1_ps(id);
        let lo = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v0, idv)));
        let hi = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v1, idv)));
        crate::formats::put_f16(&mut block[..2], d);
        // SAFETY: bytes 2..34 of the block.
        unsafe {
            _mm_storeu_si128(block.as_mut_ptr().add(2) as *mut _, lo);
            _mm_storeu_si128(block.as_mut_ptr().add(18) as *mut _, hi);
        }
    }

    /// `kquants::quant_q8_k` for one super-block of 256, the same bytes
    /// (scale, values; the i16 group sums are not written).
    ///
    /// # Safety
    /// avx512f and avx512bw present; `x` holds 256 values.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) unsafe fn quant_q8_k(x: &[f32], block: &mut [u8; 292]) {
        assert!(x.len() >= 256);
        let mut vmax = _mm512_setzero_ps();
        for i in 0..16 {
            // SAFETY: 256 values, as asserted.
            let v = unsafe { _mm512_loadu_ps(x.as_ptr().add(16 * i)) };
            vmax = _mm512_max_ps(vmax, _mm512_abs_ps(v));
        }
        let amax = _mm512_reduce_max_ps(vmax);
        if amax == 0.0 {
            block.fill(0);
            return;
        }
        // The signed value of the first element reaching amax, as the
        // scalar loop finds it.
        let max = x[..256]
            .iter()
            .copied()
            .find(|v| v.abs() == amax)
            .unwrap_or(amax);
        let iscale = -127.0 / max;
        let sv = _mm512_set1_ps(iscale);
        let top = _mm512_set1_epi32(127);
        for i in 0..16 {
            // SAFETY: 256 values in, 4 + 256 bytes out.
            unsafe {
                let v = _mm512_loadu_ps(x.as_ptr().add(16 * i));
                let q = _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(v, sv)), top);
                _mm_storeu_si128(
                    block.as_mut_ptr().add(4 + 16 * i) as *mut _,
                    _mm512_cvtsepi32_epi8(q),
                );
            }
        }
        block[0..4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn tile_m<const M: usize, const G: usize, const MIN: bool>(
        p: &Panel,
        a: &Acts,
        c0: usize,
    ) -> Tile {
        let cols = p.groups * G;
        let pq = p.q.as_ptr();
        let (ps, pm, pb) = (p.s.as_ptr(), p.m.as_ptr(), p.bias.as_ptr());
        let aq = a.q[c0 * cols..].as_ptr();
        let ad = a.d[c0 * (cols / QK)..].as_ptr();
        let asum = a.sum[c0 * p.groups..].as_ptr();
        let mut facc = [[_mm512_setzero_ps(); 2]; M];
        for g in 0..p.groups {
            // SAFETY (whole body): group g's panel entries and each activation
            // row's elements g*G..(g+1)*G lie inside the buffers (asserted by
            // `super::tile`).
            unsafe {
                let b0 = _mm512_loadu_si512(pb.add(g * NR) as *const _);
                let b1 = _mm512_loadu_si512(pb.add(g * NR + 16) as *const _);
                let mut iacc = [[b0, b1]; M];
                for kq in 0..G / 4 {
                    let k4 = g * (G / 4) + kq;
                    let w0 = _mm512_loadu_si512(pq.add(k4 * NR * 4) as *const _);
                    let w1 = _mm512_loadu_si512(pq.add(k4 * NR * 4 + 64) as *const _);
                    for (c, acc) in iacc.iter_mut().enumerate() {
                        let quad = (aq.add(c * cols + k4 * 4) as *const i32).read_unaligned();
                        let av = _mm512_set1_epi32(quad);
                        acc[0] = _mm512_dpbusd_epi32(acc[0], av, w0);
                        acc[1] = _mm512_dpbusd_epi32(acc[1], av, w1);
                    }
                }
                let s0 = _mm512_loadu_ps(ps.add(g * NR));
                let s1 = _mm512_loadu_ps(ps.add(g * NR + 16));
                for c in 0..M {
                    let d = _mm512_set1_ps(*ad.add(c * (cols / QK) + g * G / QK));
                    facc[c][0] = _mm512_fmadd_ps(
                        _mm512_cvtepi32_ps(iacc[c][0]),
                        _mm512_mul_ps(s0, d),
                        facc[c][0],
                    );
                    facc[c][1] = _mm512_fmadd_ps(
                        _mm512_cvtepi32_ps(iacc[c][1]),
                        _mm512_mul_ps(s1, d),
                        facc[c][1],
                    );
                }
                if MIN {
                    let m0 = _mm512_loadu_ps(pm.add(g * NR));
                    let m1 = _mm512_loadu_ps(pm.add(g * NR + 16));
                    for (c, acc) in facc.iter_mut().enumerate() {
                        let sum = _mm512_set1_ps(*asum.add(c * p.groups + g));
                        acc[0] = _mm512_fnmadd_ps(m0, sum, acc[0]);
                        acc[1] = _mm512_fnmadd_ps(m1, sum, acc[1]);
                    }
                }
            }
        }
        let mut out = [[0.0f32; NR]; MR];
        for (o, acc) in out.iter_mut().zip(&facc) {
            // SAFETY: `o` holds NR = 32 floats.
            unsafe {
                _mm512_storeu_ps(o.as_mut_ptr(), acc[0]);
                _mm512_storeu_ps(o.as_mut_ptr().add(16), acc[1]);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Random rows of `ty` with sane scales: quantized from random floats.
    fn random_rows(ty: GgmlType, n: usize, cols: usize, seed: u64) -> Vec<Vec<u8>> {
        let mut x = seed | 1;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        };
        (0..n)
            .map(|_| {
                let v: Vec<f32> = (0..cols).map(|_| next()).collect();
                let mut b = vec![0u8; crate::row_size(ty, cols).unwrap()];
                crate::quantize(ty, &v, &mut b).unwrap();
                b
            })
            .collect()
    }

    fn random_acts(n: usize, cols: usize, at: GgmlType, g: usize, seed: u64) -> (Acts, Vec<f32>) {
        let mut x = seed | 1;
        let xs: Vec<f32> = (0..n * cols)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                ((x >> 40) as f32 / (1u64 << 24) as f32) * 6.0 - 3.0
            })
            .collect();
        let mut a = Acts::default();
        a.reset(n, cols, g);
        for r in 0..n {
            Acts::fill_row(
                &xs[r * cols..(r + 1) * cols],
                at,
                g,
                &mut a.q[r * cols..(r + 1) * cols],
                &mut a.d[r * cols / QK..(r + 1) * cols / QK],
                &mut a.sum[r * cols / g..(r + 1) * cols / g],
            );
        }
        (a, xs)
    }

    const TYPES: [GgmlType; 10] = [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
    ];

    proptest! {
        /// The SIMD tile gives exactly the reference's sums, for every type,
        /// partial tiles and partial panels included.
        #[test]
        fn simd_tile_matches_scalar(t in 0usize..10, sbs in 1usize..4, rows in 1usize..=NR, m in 1usize..=MR, seed in any::<u64>()) {
            let ty = TYPES[t];
            let cols = sbs * 256;
            let g = group_len(ty).unwrap();
            let w = random_rows(ty, rows, cols, seed);
            let views: Vec<&[u8]> = w.iter().map(|r| r.as_slice()).collect();
            let mut p = Panel::default();
            p.fill(ty, &views, cols);
            let (a, _) = random_acts(m + 1, cols, crate::vec_dot_type(ty), g, seed ^ 0x5555);
            let want = tile_scalar(&p, &a, 1, m);
            let got = tile(&p, &a, 1, m);
            prop_assert_eq!(got, want);
        }
    }

    /// The SIMD activation quantizers write the scalar ones' bytes.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn simd_activation_quantizers_match_scalar() {
        if !available() {
            return;
        }
        let mut x = 0x2545_f491_u64;
        for round in 0..200 {
            let scale = [1e-3f32, 1.0, 37.0, 1e4][round % 4];
            let v: Vec<f32> = (0..256)
                .map(|i| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // Some exact halves and repeated extremes, to hit ties.
                    if round % 5 == 0 && i % 9 == 0 {
                        scale
                    } else {
                        ((x >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
                    }
                })
                .collect();
            let (mut want, mut got) = ([0u8; 292], [0u8; 292]);
            kquants::quant_q8_k(&v, &mut want);
            // SAFETY: features checked above; 256 values.
            unsafe { x86::quant_q8_k(&v, &mut got) };
            assert_eq!(want[..260], got[..260], "q8_k round {round}");
            let (mut want, mut got) = ([0u8; 34], [0u8; 34]);
            legacy::quant_q8_0_act(&v[..32], &mut want);
            // SAFETY: as above; 32 values.
            unsafe { x86::quant_q8_0(&v[..32], &mut got) };
            assert_eq!(want, got, "q8_0 round {round}");
        }
        let zeros = [0.0f32; 256];
        let (mut want, mut got) = ([0u8; 292], [1u8; 292]);
        kquants::quant_q8_k(&zeros, &mut want);
        // SAFETY: as above.
        unsafe { x86::quant_q8_k(&zeros, &mut got) };
        assert_eq!(want[..260], got[..260]);
    }

    /// The panel product agrees with dequantized weights times the Q8_0
    /// activations' values, for every type (the unpacking and the shift are
    /// right, not only consistent between the two kernels).
    #[test]
    fn tile_matches_dequantized_product() {
        for (i, &ty) in TYPES.iter().enumerate() {
            let cols = 512;
            let g = group_len(ty).unwrap();
            let w = random_rows(ty, NR, cols, 7 + i as u64);
            let views: Vec<&[u8]> = w.iter().map(|r| r.as_slice()).collect();
            let mut p = Panel::default();
            p.fill(ty, &views, cols);
            // Q8_1's f16 block sums are rounded; exact Q8_0 sums isolate the
            // unpacking, which is what this checks.
            let at = match crate::vec_dot_type(ty) {
                GgmlType::Q8_1 => GgmlType::Q8_0,
                at => at,
            };
            let (a, _) = random_acts(MR, cols, at, g, 99);
            let got = tile(&p, &a, 0, MR);
            for (r, row) in w.iter().enumerate() {
                let mut wf = vec![0.0f32; cols];
                crate::dequantize(ty, row, &mut wf).unwrap();
                for (c, got_c) in got.iter().enumerate() {
                    let mut want = 0.0f64;
                    let mut mag = 0.0f64;
                    for (k, &wk) in wf.iter().enumerate() {
                        let av = (a.q[c * cols + k] ^ 0x80) as i8 as f64
                            * a.d[c * cols / QK + k / QK] as f64;
                        want += wk as f64 * av;
                        mag += (wk as f64 * av).abs();
                    }
                    let err = (got_c[r] as f64 - want).abs();
                    assert!(
                        err <= 1e-5 * mag + 1e-6,
                        "{ty} row {r} col {c}: {} vs {want}",
                        got_c[r]
                    );
                }
            }
        }
    }
}
