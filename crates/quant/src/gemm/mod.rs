//! Batched products (prefill): weight rows repacked into panels for integer
//! dot products with rows in the vector lanes.
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
//! with q a small integer, stored as the unsigned byte `u = q + off` (`off`
//! fixed per format: 8 for Q4_0, 32 for Q6_K, 128 for Q8_0, …), the operand
//! `vpdpbusd` and `vpmaddubsw` take unsigned. Activations are quantized as
//! llama.cpp does at run time (Q8_K against the K formats, Q8_0 against the
//! rest) and kept as signed bytes; each group's integer sum starts at
//! `-off * sum(a)` of its activations, so it ends at exactly `sum(q * a)`.
//!
//! Every tier computes the same numbers: the group sums are exact integers
//! whatever instructions form them (`vpdpbusd` on AVX-512 VNNI,
//! `vpmaddubsw`/`vpmaddwd` on AVX2, `sdot` on AArch64 with `dotprod`, plain
//! integer arithmetic in the portable kernel), and each lane then does the
//! same float operations in the same order. So a prompt's prefill does not
//! depend on the CPU that runs it.

use crate::formats::blocks::{
    block, blocks_mut, BlockFormat, BlockIQ1M, BlockIQ1S, BlockIQ2S, BlockIQ2XS, BlockIQ2XXS,
    BlockIQ3S, BlockIQ3XXS, BlockIQ4NL, BlockIQ4XS, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ4_0,
    BlockQ4_1, BlockQ5K, BlockQ5_0, BlockQ5_1, BlockQ6K, BlockQ8K, BlockQ8_0, BlockQ8_1, Decoded,
};
#[cfg(target_arch = "x86_64")]
use crate::formats::interleave::GROUP_ROWS;
use crate::formats::kquants::{self, QK_K};
use crate::formats::legacy::{self, QK};
use crate::simd::GemmTier;
use crate::GgmlType;
use bytemuck::Zeroable;

pub(crate) mod amx;
#[cfg(target_arch = "aarch64")]
mod neon;
#[cfg(target_arch = "x86_64")]
mod pack_x86;
#[cfg(target_arch = "x86_64")]
mod x86;

#[cfg(test)]
mod tests;

/// Weight rows per panel: two 16-lane vectors.
pub(crate) const NR: usize = 32;
/// Activation rows per register tile, at most: the AVX-512 tile takes six
/// (twelve running sums, see `x86::tile_six`), the other kernels [`ROWS4`]
/// at a time (see [`tile`]).
pub(crate) const MR: usize = 6;
/// Activation rows the AVX2, AVX-VNNI and `dotprod` tiles take per call.
pub(crate) const ROWS4: usize = 4;

/// Elements per scale group for weights of type `ty`, or `None` when the
/// type has no panel form.
pub(crate) fn group_len(ty: GgmlType) -> Option<usize> {
    use GgmlType::*;
    match ty {
        Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q4_K | Q5_K | IQ4_NL | IQ4_XS => Some(32),
        IQ2_XXS | IQ3_XXS | IQ3_S | IQ1_S => Some(32),
        Q2_K | Q3_K | Q6_K | IQ2_XS | IQ2_S | IQ1_M => Some(16),
        _ => None,
    }
}

/// Whether the type's groups carry a minimum term (`m` ≠ 0).
fn has_min(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(ty, Q4_1 | Q5_1 | Q2_K | Q4_K | Q5_K)
}

/// The offset that makes `ty`'s panel values unsigned (what [`Acts`] needs
/// to know of the weights).
pub(crate) fn offset(ty: GgmlType) -> i32 {
    unsigned_range(ty).0
}

/// The offset that makes `ty`'s unpacked values unsigned, and the largest
/// value after it (a property of the format's bits, so it bounds every
/// block, corrupt ones included).
fn unsigned_range(ty: GgmlType) -> (i32, i32) {
    use GgmlType::*;
    match ty {
        Q4_0 => (8, 15),
        Q5_0 => (16, 31),
        Q8_0 => (128, 255),
        // Table values -127..=113 (`iquants::KVALUES`).
        IQ4_NL | IQ4_XS => (128, 241),
        // Lattice magnitudes, either sign (`formats::lattice`).
        IQ2_XXS | IQ2_XS | IQ2_S => (43, 86),
        IQ3_XXS => (62, 124),
        IQ3_S => (15, 30),
        // Grid values −1..=1 in eighths, shifted by ±1.
        IQ1_S | IQ1_M => (9, 18),
        Q3_K => (4, 7),
        Q6_K => (32, 63),
        Q2_K => (0, 3),
        Q5_1 | Q5_K => (0, 31),
        _ => (0, 15),
    }
}

/// A batch of activation rows in the kernel's form.
#[derive(Default)]
pub(crate) struct Acts {
    /// `rows × cols` signed bytes (the Q8 values, -127..=127); this and the
    /// buffers below may run longer (see [`Self::reset`]).
    pub q: Vec<u8>,
    /// `rows × cols/g` per-group `-off * sum(q)`, `off` being the weight
    /// format's offset ([`offset`]): the integer each panel group's sum
    /// starts from, so that it ends at exactly `sum(q * a)`. Stored
    /// premultiplied because the tile kernels start every group from it.
    pub base: Vec<i32>,
    /// `rows × cols/32` scales (the f16 scale of the Q8_0 block, widened).
    pub d: Vec<f32>,
    /// `rows × cols/g` per-group sums for the minimum term: `d * sum(q)`
    /// for Q8_0/Q8_1 rows, `sum(q)` alone for Q8_K rows (see [`Self::fold`]).
    pub sum: Vec<f32>,
    /// Elements per row.
    pub cols: usize,
    /// Weight group length these sums are for.
    pub g: usize,
    /// The weight format's offset `base` was computed for.
    pub off: i32,
    /// Whether the rows are Q8_K, one scale per 256 elements (against the
    /// K formats): the tile kernels then add a super-block's groups without
    /// the activation scale and apply it once per super-block, one multiply
    /// fewer per group ([`tile_scalar`] gives the order).
    pub fold: bool,
}

impl Acts {
    /// Room for `rows` rows of `cols` elements against groups of `g` of a
    /// weight format with offset `off`.
    ///
    /// The buffers only grow: every row in use is written before it is read,
    /// and a layer's products alternate between widths (1152 and 6912 on a
    /// 1B), so shrinking would zero megabytes on one thread at every regrowth.
    /// Readers take the first `rows` rows.
    /// `at` is the activation format the rows will be filled as.
    pub fn reset(&mut self, rows: usize, cols: usize, at: GgmlType, g: usize, off: i32) {
        self.cols = cols;
        self.g = g;
        self.off = off;
        self.fold = at == GgmlType::Q8_K;
        grow(&mut self.q, rows * cols, 0);
        grow(&mut self.d, rows * cols / QK, 0.0);
        grow(&mut self.sum, rows * cols / g, 0.0);
        grow(&mut self.base, rows * cols / g, 0);
    }

    /// Room for `x.len() / cols` rows against groups of `g` of a weight
    /// format with offset `off`, filled on this thread with
    /// [`Self::fill_row`] (the product splits the rows over its pool
    /// instead).
    pub fn fill(
        &mut self,
        tier: GemmTier,
        x: &[f32],
        cols: usize,
        at: GgmlType,
        g: usize,
        off: i32,
    ) {
        let rows = x.len().checked_div(cols).unwrap_or(0);
        self.reset(rows, cols, at, g, off);
        let groups = cols / g;
        for (r, xr) in x.chunks_exact(cols.max(1)).take(rows).enumerate() {
            Self::fill_row(
                tier,
                xr,
                at,
                g,
                &mut self.q[r * cols..(r + 1) * cols],
                &mut self.d[r * cols / QK..(r + 1) * cols / QK],
                &mut self.sum[r * groups..(r + 1) * groups],
                &mut self.base[r * groups..(r + 1) * groups],
                off,
            );
        }
    }

    /// Quantizes one row of `cols` values into `q`, `d`, `sum` and `base`
    /// (that row's slices) the way [`crate::quantize_activation`] does for
    /// `at`: Q8_K (one scale per 256, for the K formats), Q8_1 or Q8_0 (per
    /// 32), against weights of offset `off`.
    // One row's slices of the four buffers come in separately so each
    // thread can fill its own rows of them in parallel.
    #[allow(clippy::too_many_arguments)]
    pub fn fill_row(
        tier: GemmTier,
        x: &[f32],
        at: GgmlType,
        g: usize,
        q: &mut [u8],
        d: &mut [f32],
        sum: &mut [f32],
        base: &mut [i32],
        off: i32,
    ) {
        #[cfg(target_arch = "x86_64")]
        if at == GgmlType::Q8_0 && g == QK || at == GgmlType::Q8_K {
            let (q8_0, tier) = (at == GgmlType::Q8_0, tier.vector());
            // SAFETY: the tier's features were detected (every x86 tier
            // requires F16C); the row is a whole number of blocks (the
            // caller's shapes) and its slices of the buffers hold its
            // values, blocks and groups.
            unsafe {
                match tier {
                    GemmTier::Avx512Vnni if q8_0 => {
                        return x86::fill_row_q8_0_avx512(x, q, d, sum, base, off)
                    }
                    GemmTier::Avx512Vnni => {
                        return x86::fill_row_q8_k_avx512(x, q, d, sum, base, g, off)
                    }
                    GemmTier::Avx2 | GemmTier::AvxVnni if q8_0 => {
                        return x86::fill_row_q8_0_avx2(x, q, d, sum, base, off)
                    }
                    GemmTier::Avx2 | GemmTier::AvxVnni => {
                        return x86::fill_row_q8_k_avx2(x, q, d, sum, base, g, off)
                    }
                    GemmTier::Portable | GemmTier::Amx => {}
                }
            }
        }
        if at == GgmlType::Q8_K {
            let mut block = BlockQ8K::zeroed();
            for (b, xb) in x.chunks_exact(kquants::QK_K).enumerate() {
                quant_q8_k(tier, xb, &mut block);
                let per = kquants::QK_K / QK;
                d[b * per..(b + 1) * per].fill(block.d.get());
                // The group sums without the scale, which the kernels
                // apply once per super-block (`fold`).
                let values = bytemuck::cast_slice(&block.qs);
                Self::split(values, 1.0, g, b * kquants::QK_K, q, sum, base, off);
            }
            return;
        }
        if at == GgmlType::Q8_1 {
            // Q8_1 carries its block sum as an f16 `d * sum(q)`, which the
            // vector kernels use as is (32-element groups only).
            let mut block = BlockQ8_1::zeroed();
            for (b, xb) in x.chunks_exact(QK).enumerate() {
                legacy::quant_q8_1_act(xb, bytemuck::bytes_of_mut(&mut block));
                d[b] = block.d.get();
                let values = bytemuck::cast_slice(&block.qs);
                Self::split(values, d[b], g, b * QK, q, sum, base, off);
                sum[b] = block.s.get();
            }
            return;
        }
        let mut block = BlockQ8_0::zeroed();
        for (b, xb) in x.chunks_exact(QK).enumerate() {
            quant_q8_0(tier, xb, &mut block);
            let scale = block.d.get();
            d[b] = scale;
            Self::split(
                bytemuck::cast_slice(&block.qs),
                scale,
                g,
                b * QK,
                q,
                sum,
                base,
                off,
            );
        }
    }

    /// Where activation row `c0` starts in each buffer a tile kernel reads.
    #[cfg_attr(
        not(any(target_arch = "x86_64", target_arch = "aarch64")),
        allow(dead_code)
    )]
    pub(crate) fn rows_from(&self, c0: usize) -> RowsFrom {
        let groups = self.cols.checked_div(self.g).unwrap_or(0);
        RowsFrom {
            aq: self.q[c0 * self.cols..].as_ptr(),
            ad: self.d[c0 * (self.cols / QK)..].as_ptr(),
            asum: self.sum[c0 * groups..].as_ptr(),
            abase: self.base[c0 * groups..].as_ptr(),
        }
    }

    /// Stores signed values `vals` (starting at element `at`), their
    /// per-group sums times `scale` and the groups' starting integers.
    #[allow(clippy::too_many_arguments)]
    fn split(
        vals: &[u8],
        scale: f32,
        g: usize,
        at: usize,
        q: &mut [u8],
        sum: &mut [f32],
        base: &mut [i32],
        off: i32,
    ) {
        q[at..at + vals.len()].copy_from_slice(vals);
        for (h, part) in vals.chunks_exact(g).enumerate() {
            let s: i32 = part.iter().map(|&v| v as i8 as i32).sum();
            sum[at / g + h] = scale * s as f32;
            base[at / g + h] = -off * s;
        }
    }
}

/// Pointers to one activation row's start in [`Acts`]' buffers (see
/// [`Acts::rows_from`]): its bytes, scales, group sums and groups'
/// starting integers, from which the tile kernels read their rows.
#[cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    allow(dead_code)
)]
pub(crate) struct RowsFrom {
    /// The row's signed bytes.
    pub aq: *const u8,
    /// Its scales, one per 32.
    pub ad: *const f32,
    /// Its group sums.
    pub asum: *const f32,
    /// Its groups' starting integers.
    pub abase: *const i32,
}

/// [`NR`] weight rows unpacked for the tile kernel.
#[derive(Default)]
pub(crate) struct Panel {
    /// For each 4-element column step k4, the 4 bytes of every row in turn
    /// (`[cols/4][NR][4]` unsigned bytes `q + off`), possibly followed by
    /// stale bytes of a wider panel.
    pub q: Vec<u8>,
    /// `[groups][NR]` group scales.
    pub s: Vec<f32>,
    /// `[groups][NR]` minimum terms.
    pub m: Vec<f32>,
    /// The format's offset: stored bytes are `q + off`.
    pub off: i32,
    /// Scale groups per row.
    pub groups: usize,
    /// Elements per group.
    pub g: usize,
    /// Whether `m` is in use.
    pub min: bool,
    /// Column steps whose `vpmaddubsw` products the AVX2 kernel may add in
    /// 16 bits before widening: each step adds at most `2 * 127 * umax` per
    /// lane, so 8 steps for 4-bit formats, 4 for 5-bit, 2 for 6-bit, 1 for
    /// the IQ2 and IQ3_XXS magnitudes (at most a group's). 0 for Q8_0, whose products can saturate even alone
    /// (`2 * 255 * 127`); it folds the weight's sign into the activation
    /// instead. A power of two (whole runs tile a group). The sums are the
    /// same integers either way.
    pub run: usize,
    /// Whether `q` holds the signed values `q` themselves (the AMX tiles'
    /// form, see [`amx`]) rather than `q + off`.
    pub signed: bool,
}

impl Panel {
    /// Unpacks `rows` (at most [`NR`] rows of `cols` elements of type `ty`,
    /// which [`group_len`] accepts) through the portable packer; missing
    /// rows are zero.
    pub fn fill(&mut self, ty: GgmlType, rows: &[&[u8]], cols: usize) {
        self.fill_as(ty, rows, cols, false);
    }

    /// [`Self::fill`], with the values stored signed where `signed` asks
    /// for the AMX tiles' form.
    ///
    /// It never asks for the kernel tables: the AMX self-check packs panels
    /// while they are being chosen, inside their one-time initialisation,
    /// and asking then deadlocked `hearth` on AMX machines.
    pub fn fill_as(&mut self, ty: GgmlType, rows: &[&[u8]], cols: usize, signed: bool) {
        self.fill_on(GemmTier::Portable, ty, rows, cols, signed);
    }

    /// [`Self::fill_as`] through `tier`'s packer: the AVX2 one on every x86
    /// tier but the portable one, for the formats it knows and whole
    /// panels, in either form; the portable packer otherwise. Both store
    /// the same bytes and values.
    pub(crate) fn fill_on(
        &mut self,
        tier: GemmTier,
        ty: GgmlType,
        rows: &[&[u8]],
        cols: usize,
        signed: bool,
    ) {
        self.prepare(ty, cols, signed);
        use GgmlType::*;
        #[cfg(target_arch = "x86_64")]
        let bb = ty.block_bytes();
        #[cfg(target_arch = "x86_64")]
        if tier != GemmTier::Portable
            && is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("f16c")
            && pack_x86::packs(ty)
            && rows.len() == NR
            && cols.is_multiple_of(ty.block_len())
            && rows.iter().all(|r| r.len() >= cols / ty.block_len() * bb)
        {
            // SAFETY: avx2 and f16c were detected just above; the buffers
            // were sized by `prepare` and the rows checked as it requires.
            unsafe { pack_x86::pack_avx2(self, ty, rows, cols) };
            return;
        }
        let _ = tier;
        match ty {
            Q8_0 => self.pack_format::<BlockQ8_0>(rows, cols),
            Q4_0 => self.pack_format::<BlockQ4_0>(rows, cols),
            Q4_1 => self.pack_format::<BlockQ4_1>(rows, cols),
            Q5_0 => self.pack_format::<BlockQ5_0>(rows, cols),
            Q5_1 => self.pack_format::<BlockQ5_1>(rows, cols),
            Q2_K => self.pack_format::<BlockQ2K>(rows, cols),
            Q3_K => self.pack_format::<BlockQ3K>(rows, cols),
            Q4_K => self.pack_format::<BlockQ4K>(rows, cols),
            Q5_K => self.pack_format::<BlockQ5K>(rows, cols),
            Q6_K => self.pack_format::<BlockQ6K>(rows, cols),
            IQ4_NL => self.pack_format::<BlockIQ4NL>(rows, cols),
            IQ4_XS => self.pack_format::<BlockIQ4XS>(rows, cols),
            IQ2_XXS => self.pack_format::<BlockIQ2XXS>(rows, cols),
            IQ2_XS => self.pack_format::<BlockIQ2XS>(rows, cols),
            IQ2_S => self.pack_format::<BlockIQ2S>(rows, cols),
            IQ3_XXS => self.pack_format::<BlockIQ3XXS>(rows, cols),
            IQ3_S => self.pack_format::<BlockIQ3S>(rows, cols),
            IQ1_S => self.pack_format::<BlockIQ1S>(rows, cols),
            IQ1_M => self.pack_format::<BlockIQ1M>(rows, cols),
            _ => {}
        }
    }

    /// [`Self::fill_on`] for [`NR`] interleaved rows, given as their groups
    /// of [`GROUP_ROWS`](crate::formats::interleave::GROUP_ROWS) (each
    /// `cols` elements of `ty` in the interleaved layout), straight from that
    /// layout: its runs of 32 bytes are
    /// already the panel's column steps, so nothing is transposed. Returns
    /// false, packing nothing, where `tier` has no packer for it (the
    /// caller then copies the rows out for [`Self::fill_on`]).
    pub(crate) fn fill_interleaved(
        &mut self,
        tier: GemmTier,
        ty: GgmlType,
        groups: &[&[u8]],
        cols: usize,
        signed: bool,
    ) -> bool {
        #[cfg(target_arch = "x86_64")]
        if tier != GemmTier::Portable
            && is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("f16c")
            && pack_x86::packs_interleaved(ty)
            && groups.len() == NR / GROUP_ROWS
            && cols.is_multiple_of(ty.block_len())
            && groups
                .iter()
                .all(|g| g.len() >= cols / ty.block_len() * ty.block_bytes() * GROUP_ROWS)
        {
            self.prepare(ty, cols, signed);
            // SAFETY: avx2 and f16c were detected just above; the buffers
            // were sized by `prepare` and the groups checked as it requires.
            unsafe { pack_x86::pack_interleaved_avx2(self, ty, groups, cols) };
            return true;
        }
        let _ = (tier, ty, groups, cols, signed);
        false
    }

    /// Sets the panel's fields for `cols` elements of `ty` in the form
    /// `signed` asks for, and sizes its buffers.
    fn prepare(&mut self, ty: GgmlType, cols: usize, signed: bool) {
        self.signed = signed;
        let g = group_len(ty).unwrap_or(32);
        self.g = g;
        self.groups = cols / g;
        self.min = has_min(ty);
        let (off, umax) = unsigned_range(ty);
        self.off = off;
        let run = (i16::MAX as usize / (2 * 127 * umax as usize)).min(g / 4);
        // A power of two, so that whole runs tile a group's steps.
        self.run = if run == 0 { 0 } else { 1 << run.ilog2() };
        // Every byte of the first `cols * NR` is written below (missing rows
        // as zeros), so the buffer only grows and is never cleared.
        grow(&mut self.q, cols * NR, 0);
        for v in [&mut self.s, &mut self.m] {
            v.clear();
            v.resize(self.groups * NR, 0.0);
        }
    }

    /// [`Self::pack`] for blocks of `B`, each filled from its decoded form.
    fn pack_format<B: BlockFormat>(&mut self, rows: &[&[u8]], cols: usize) {
        let g = self.g;
        self.pack(rows, cols, B::BYTES, B::VALUES, |blk, v, s, m| {
            block::<B>(blk).decode().fill_panel(g, v, s, m)
        })
    }

    /// Packs `rows` one column block (`bl` elements, `bb` bytes a row) at
    /// a time: every row's block through `unpack` (values, then each
    /// group's scale and minimum term) into a small buffer, then that
    /// buffer transposed into the panel's column steps in order.
    // Writing each row's values straight into the panel stored four bytes
    // every 128, row after row over a panel larger than L1: packing was a
    // tenth of a 1B's prefill on one thread. Now the panel is written
    // sequentially and the scattered side stays in an 8 KiB buffer.
    #[inline(always)]
    fn pack(
        &mut self,
        rows: &[&[u8]],
        cols: usize,
        bb: usize,
        bl: usize,
        unpack: impl Fn(&[u8], &mut [i8], &mut [f32], &mut [f32]),
    ) {
        let g = self.g;
        let per = bl / g;
        let add = if self.signed { 0 } else { self.off as u8 };
        let mut tmp = [[0u8; QK_K]; NR];
        let mut vals = [0i8; QK_K];
        let (mut sc, mut mn) = ([0.0f32; QK_K / 16], [0.0f32; QK_K / 16]);
        for b in 0..cols / bl {
            for (r, row) in rows.iter().enumerate().take(NR) {
                let Some(blk) = row.get(b * bb..(b + 1) * bb) else {
                    // A short row packs as zeros, as a missing one does
                    // (not the previous block's bytes).
                    tmp[r][..bl].fill(0);
                    continue;
                };
                unpack(blk, &mut vals[..bl], &mut sc[..per], &mut mn[..per]);
                for h in 0..per {
                    self.s[(b * per + h) * NR + r] = sc[h];
                    self.m[(b * per + h) * NR + r] = mn[h];
                }
                for (t, &v) in tmp[r][..bl].iter_mut().zip(&vals[..bl]) {
                    *t = (v as u8).wrapping_add(add);
                }
            }
            // Column step k4 of the block: four bytes of each row in turn.
            let q = &mut self.q[b * bl * NR..(b + 1) * bl * NR];
            for (k4, step) in q.chunks_exact_mut(NR * 4).enumerate() {
                for (quad, t) in step.chunks_exact_mut(4).zip(&tmp) {
                    quad.copy_from_slice(&t[k4 * 4..k4 * 4 + 4]);
                }
            }
        }
    }
}

/// Lengthens `v` to `n` elements if it is shorter (never shortens it).
pub(crate) fn grow<T: Clone>(v: &mut Vec<T>, n: usize, fill: T) {
    if v.len() < n {
        v.resize(n, fill);
    }
}

/// Where group `gi` (of `g` elements) stands in its super-block when `a`'s
/// activation scale is applied once per super-block ([`Acts::fold`]):
/// `Some((first, last))`; `None` where every group takes its own scale.
/// (The SIMD kernels compute the same with `g` a constant.)
#[inline(always)]
pub(crate) fn fold_at(a: &Acts, g: usize, gi: usize) -> Option<(bool, bool)> {
    let span = QK_K / g.max(1);
    (a.fold && span > 0).then(|| (gi.is_multiple_of(span), gi % span == span - 1))
}

/// The register tile's result: `out[c][r]` for activation row `c0 + c` and
/// panel row `r`.
pub(crate) type Tile = [[f32; NR]; MR];

/// The tile kernel's reference and the portable tier's kernel: for
/// activation rows `c0..c0 + m` (m ≤ [`MR`]) against every panel row,
/// `sum over groups of (i32 sum) * (s * d)`, less `m * sum` where the type
/// has minimum terms, in the order the SIMD kernels round them (`mul_add` =
/// their fused multiply-add). The loops run along the panel's rows, so a
/// compiler can vectorize them (NEON on AArch64, SSE2 on baseline x86-64).
///
/// Q8_K rows ([`Acts::fold`]) have one scale `d` per super-block of 256:
/// there each super-block's groups add up without it, `t = i * s` for its
/// first group and `t = i * s + t` fused after (less `m * sum(q)` fused),
/// and then `o = t * d + o` fused, once per super-block. That takes the
/// multiply `s * d` out of every group (criterion `gemm_tile_2048`, one
/// core of an AMD EPYC VM: AVX-512 Q4_K 350 → 367, Q6_K 311 → 326 G
/// multiply-adds/s; AVX-VNNI Q4_K 151 → 174; AVX2 Q6_K 116 → 133).
pub(crate) fn tile_scalar(p: &Panel, a: &Acts, c0: usize, m: usize) -> Tile {
    let mut out = [[0.0f32; NR]; MR];
    let cols = a.cols;
    let quads = p.g / 4;
    for (c, out_c) in out.iter_mut().enumerate().take(m) {
        // A super-block's sums so far, without the activation scale.
        let mut pend = [0.0f32; NR];
        let row = c0 + c;
        let aq = &a.q[row * cols..(row + 1) * cols];
        let ad = &a.d[row * (cols / QK)..(row + 1) * (cols / QK)];
        for g in 0..p.groups {
            let mut isum = [a.base[row * p.groups + g]; NR];
            for k4 in g * quads..(g + 1) * quads {
                let wq = &p.q[k4 * NR * 4..(k4 + 1) * NR * 4];
                let av: [i32; 4] = std::array::from_fn(|j| aq[k4 * 4 + j] as i8 as i32);
                for (s, w) in isum.iter_mut().zip(wq.chunks_exact(4)) {
                    *s += w[0] as i32 * av[0]
                        + w[1] as i32 * av[1]
                        + w[2] as i32 * av[2]
                        + w[3] as i32 * av[3];
                }
            }
            let d = ad[g * p.g / QK];
            let scales = &p.s[g * NR..(g + 1) * NR];
            if let Some((first, last)) = fold_at(a, p.g, g) {
                for ((t, &i), &s) in pend.iter_mut().zip(&isum).zip(scales) {
                    *t = if first {
                        i as f32 * s
                    } else {
                        (i as f32).mul_add(s, *t)
                    };
                }
                if p.min {
                    let sum = a.sum[row * p.groups + g];
                    for (t, &mn) in pend.iter_mut().zip(&p.m[g * NR..(g + 1) * NR]) {
                        *t = (-mn).mul_add(sum, *t);
                    }
                }
                if last {
                    for (o, &t) in out_c.iter_mut().zip(&pend) {
                        *o = t.mul_add(d, *o);
                    }
                }
                continue;
            }
            for ((o, &i), &s) in out_c.iter_mut().zip(&isum).zip(scales) {
                *o = (i as f32).mul_add(s * d, *o);
            }
            if p.min {
                let sum = a.sum[row * p.groups + g];
                for (o, &mn) in out_c.iter_mut().zip(&p.m[g * NR..(g + 1) * NR]) {
                    *o = (-mn).mul_add(sum, *o);
                }
            }
        }
    }
    out
}

/// The tile kernel of `tier`. The SIMD kernels give the reference's sums
/// exactly, so the tier changes the speed and never the numbers.
pub(crate) fn tile(tier: GemmTier, p: &Panel, a: &Acts, c0: usize, m: usize) -> Tile {
    let cols = p.groups * p.g;
    assert!(m <= MR && a.cols == cols && a.g == p.g && a.off == p.off);
    assert!(p.q.len() >= cols * NR && p.s.len() >= p.groups * NR);
    assert!(p.m.len() >= p.groups * NR);
    assert!(a.q.len() >= (c0 + m) * cols && a.d.len() >= (c0 + m) * cols / QK);
    assert!(a.sum.len() >= (c0 + m) * p.groups && a.base.len() >= (c0 + m) * p.groups);
    // The AMX form's signed bytes are not what the register tiles add up.
    assert!(!p.signed, "a signed (AMX) panel in the register tiles");
    #[cfg(target_arch = "x86_64")]
    if p.g == 16 || p.g == 32 {
        match tier.vector() {
            // SAFETY: the tier comes from a kernel table installed only
            // after its CPU features were detected; the asserts bound every
            // element read.
            GemmTier::Avx512Vnni => return unsafe { x86::tile_avx512(p, a, c0, m) },
            GemmTier::Avx2 => {
                // SAFETY: as above (each call reads a part of those rows).
                return by_fours(m, |c, n| unsafe { x86::tile_avx2(p, a, c0 + c, n) });
            }
            GemmTier::AvxVnni => {
                // SAFETY: as above.
                return by_fours(m, |c, n| unsafe { x86::tile_avxvnni(p, a, c0 + c, n) });
            }
            GemmTier::Portable | GemmTier::Amx => {}
        }
    }
    #[cfg(target_arch = "aarch64")]
    if tier == GemmTier::Dotprod && (p.g == 16 || p.g == 32) {
        // SAFETY: the tier comes from a kernel table installed only after
        // `dotprod` was detected; the asserts bound every element read
        // (each call reads a part of those rows).
        return by_fours(m, |c, n| unsafe { neon::tile_dotprod(p, a, c0 + c, n) });
    }
    let _ = tier;
    tile_scalar(p, a, c0, m)
}

/// Activation rows per call to [`tile`] that `tier`'s kernel takes at once:
/// six on AVX-512, [`ROWS4`] elsewhere (six there would be a call of four
/// and one of two, and the second sweeps the panel for only two rows:
/// pp512 fell 4–11% at `--cpu avxvnni`).
pub(crate) fn tile_rows(tier: GemmTier) -> usize {
    if tier.vector() == GemmTier::Avx512Vnni {
        MR
    } else {
        ROWS4
    }
}

/// A tile of `m` ≤ [`MR`] activation rows from a kernel that takes at most
/// [`ROWS4`]: `kernel(c, n)` computes rows `c..c + n` of the tile into the
/// first `n` rows of its result. Each row's sums are the same whatever
/// rows share its call.
#[cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    allow(dead_code)
)]
#[inline(always)]
fn by_fours(m: usize, mut kernel: impl FnMut(usize, usize) -> Tile) -> Tile {
    let mut out = kernel(0, m.min(ROWS4));
    if m > ROWS4 {
        let rest = kernel(ROWS4, m - ROWS4);
        out[ROWS4..m].copy_from_slice(&rest[..m - ROWS4]);
    }
    out
}

/// One activation row of `src.len()` values into `at` (Q8_0 or Q8_K go
/// through `tier`'s block quantizers, the same bytes as the scalar ones;
/// other types through [`crate::quantize_activation`]). Decode quantizes a
/// row between products on one thread, so this is on the serial path.
pub(crate) fn quantize_act_row(
    tier: GemmTier,
    at: GgmlType,
    src: &[f32],
    dst: &mut [u8],
) -> Result<(), crate::QuantError> {
    if fits::<BlockQ8_0>(at, src, dst) {
        for (x, b) in src.chunks_exact(QK).zip(blocks_mut::<BlockQ8_0>(dst)) {
            quant_q8_0(tier, x, b);
        }
        Ok(())
    } else if fits::<BlockQ8K>(at, src, dst) {
        for (x, b) in src.chunks_exact(QK_K).zip(blocks_mut::<BlockQ8K>(dst)) {
            quant_q8_k(tier, x, b);
        }
        Ok(())
    } else {
        crate::quantize_activation(at, src, dst)
    }
}

/// Whether `at` is `B`'s type, `src` whole blocks of it and `dst` room
/// for them.
fn fits<B: BlockFormat>(at: GgmlType, src: &[f32], dst: &[u8]) -> bool {
    at == B::TYPE
        && src.len().is_multiple_of(B::VALUES)
        && dst.len() >= src.len() / B::VALUES * B::BYTES
}

/// `legacy::quant_q8_0_act` for one block of 32 through `tier`'s kernel
/// (the same bytes on every tier).
fn quant_q8_0(tier: GemmTier, x: &[f32], block: &mut BlockQ8_0) {
    #[cfg(target_arch = "x86_64")]
    match tier.vector() {
        // SAFETY: the tier's features were detected; `x` holds 32 values
        // (a `chunks_exact(32)` chunk).
        GemmTier::Avx512Vnni => return unsafe { x86::quant_q8_0_avx512(x, block) },
        // SAFETY: as above.
        GemmTier::Avx2 | GemmTier::AvxVnni => return unsafe { x86::quant_q8_0_avx2(x, block) },
        GemmTier::Portable | GemmTier::Amx => {}
    }
    let _ = tier;
    legacy::quant_q8_0_act_block(x, block);
}

/// `kquants::quant_q8_k` for one super-block of 256 through `tier`'s
/// kernel (the same bytes on every tier: scale, values and group sums).
fn quant_q8_k(tier: GemmTier, x: &[f32], block: &mut BlockQ8K) {
    #[cfg(target_arch = "x86_64")]
    match tier.vector() {
        // SAFETY: the tier's features were detected; `x` holds 256 values
        // (a `chunks_exact(256)` chunk).
        GemmTier::Avx512Vnni => return unsafe { x86::quant_q8_k_avx512(x, block) },
        // SAFETY: as above.
        GemmTier::Avx2 | GemmTier::AvxVnni => return unsafe { x86::quant_q8_k_avx2(x, block) },
        GemmTier::Portable | GemmTier::Amx => {}
    }
    let _ = tier;
    kquants::quant_q8_k_block(x, block);
}
