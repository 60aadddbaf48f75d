//! The lattice formats: IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S and
//! IQ1_M (super-blocks of 256). Each names a run of eight (IQ2, IQ1) or
//! four (IQ3) values by an index into a fixed codebook, its grid, whose
//! entries are the format's definition: they are data here
//! (`crates/quant/data/*.grid`, written from llama.cpp's ggml-common.h by
//! `scripts/iq-grids.py`).
//!
//! Every format decodes to [`kquants::Unpacked`] (against Q8_K, integer
//! values and scales, no minimums), so dequantizing, the scalar dots and
//! the panel product read them as they read the K formats:
//! - IQ2 (values ±{8, 25, 43}) and IQ3_XXS (±4..62) scale a sub-block by
//!   `(0.5 + ls) / 4` and `(0.5 + ls) / 2`, held as the odd integer
//!   `2·ls + 1` over a block scale `d/8` and `d/4`;
//! - IQ3_S (±1..15) scales by `1 + 2·ls` over `d`;
//! - IQ1 values are a grid entry (−1, 0, 1) shifted by ±1/8, held as the
//!   integer `8·g ± 1` over `d/8`.
//!
//! The powers of two in those block scales are exact, so each dequantized
//! value is the bits of ggml's `dequantize_row_iq*` (one rounding for the
//! sub-block scale, one for the value).

use super::blocks::{
    BlockFormat, BlockIQ1M, BlockIQ1S, BlockIQ2S, BlockIQ2XS, BlockIQ2XXS, BlockIQ3S, BlockIQ3XXS,
    K_SUB_BLOCKS,
};
use super::kquants::Unpacked;
use gguf::GgmlType;

/// `N` entries of `W` bytes each from a grid file, checked when compiled.
const fn entries<const N: usize, const W: usize>(bytes: &[u8]) -> [[u8; W]; N] {
    assert!(bytes.len() == N * W, "a grid file of the wrong size");
    let mut out = [[0u8; W]; N];
    let mut i = 0;
    while i < N * W {
        out[i / W][i % W] = bytes[i];
        i += 1;
    }
    out
}

/// `iq2xxs_grid`: 256 runs of eight magnitudes.
pub(crate) static IQ2XXS_GRID: [[u8; 8]; 256] = entries(include_bytes!("../../data/iq2xxs.grid"));
/// `iq2xs_grid`: 512 runs of eight magnitudes.
pub(crate) static IQ2XS_GRID: [[u8; 8]; 512] = entries(include_bytes!("../../data/iq2xs.grid"));
/// `iq2s_grid`: 1024 runs of eight magnitudes.
pub(crate) static IQ2S_GRID: [[u8; 8]; 1024] = entries(include_bytes!("../../data/iq2s.grid"));
/// `iq3xxs_grid`: 256 runs of four magnitudes.
pub(crate) static IQ3XXS_GRID: [[u8; 4]; 256] = entries(include_bytes!("../../data/iq3xxs.grid"));
/// `iq3s_grid`: 512 runs of four magnitudes.
pub(crate) static IQ3S_GRID: [[u8; 4]; 512] = entries(include_bytes!("../../data/iq3s.grid"));
/// `iq1s_grid`: 2048 runs of eight values −1, 0 or 1 (as bytes 0xff, 0, 1).
pub(crate) static IQ1S_GRID: [[u8; 8]; 2048] = entries(include_bytes!("../../data/iq1s.grid"));

/// `ksigns_iq2xs`: a 7-bit sign index widened to eight sign bits, the
/// eighth making their count even (ggml stores the table; it is this).
#[inline(always)]
pub(crate) fn ksigns(index: u32) -> u8 {
    let i = (index & 127) as u8;
    i | (((i.count_ones() & 1) as u8) << 7)
}

/// Little-endian u32 `i` of `bytes`.
#[inline(always)]
fn u32_at(bytes: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([
        bytes[4 * i],
        bytes[4 * i + 1],
        bytes[4 * i + 2],
        bytes[4 * i + 3],
    ])
}

/// Little-endian u16 `i` of `bytes`.
#[inline(always)]
fn u16_at(bytes: &[u8], i: usize) -> u32 {
    u32::from(u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]]))
}

/// How a lattice format's runs of eight values come from its grid.
pub(crate) enum Runs {
    /// One entry of eight magnitudes per run, negated by the run's sign
    /// bits (IQ2).
    Signed8(&'static [[u8; 8]]),
    /// Two entries of four magnitudes per run, negated by the run's sign
    /// bits (IQ3).
    Signed4(&'static [[u8; 4]]),
    /// One entry of eight values −1, 0, 1 per run, in eighths, shifted by
    /// −1 where the run's sign byte is 0xff and +1 where it is 0 (IQ1).
    Shifted8(&'static [[u8; 8]]),
}

/// Sub-block of 32 of a lattice block, as its bits say: what the scalar
/// decode and the SIMD kernels both read.
pub(crate) struct Sub {
    /// Grid index of each entry: the first four for one entry a run, all
    /// eight for two.
    pub index: [u32; 8],
    /// Each run's sign bits (bit `j` for its value `j`), or IQ1's shift
    /// direction.
    pub signs: [u8; 4],
    /// The integer scales of its two halves of 16.
    pub scales: [i32; 2],
}

/// A lattice block format.
pub(crate) trait Lattice: BlockFormat<Decoded = Unpacked> {
    /// Its grid and how runs read it.
    const RUNS: Runs;
    /// The super-block scale every integer scale multiplies (ggml's `d`
    /// with the format's power of two).
    fn scale(&self) -> f32;
    /// Sub-block `ib` (0..8).
    fn sub(&self, ib: usize) -> Sub;
}

/// Magnitudes `grid` into `out`, value `j` negated where bit `j` of
/// `signs` is set.
#[inline(always)]
fn signed(grid: &[u8], signs: u8, out: &mut [i8]) {
    for (j, (o, &g)) in out.iter_mut().zip(grid).enumerate() {
        let g = g as i8;
        *o = if signs >> j & 1 != 0 { -g } else { g };
    }
}

/// Eight IQ1 values: entry `grid` shifted by −1/8 (`down`) or +1/8, in
/// eighths.
#[inline(always)]
fn shifted(grid: &[u8; 8], down: bool, out: &mut [i8]) {
    let shift = if down { -1 } else { 1 };
    for (o, &g) in out.iter_mut().zip(grid) {
        *o = 8 * (g as i8) + shift;
    }
}

/// A lattice block's values and scales, sub-block by sub-block.
#[inline(always)]
pub(crate) fn unpack<L: Lattice>(b: &L) -> Unpacked {
    let mut u = Unpacked::new(b.scale(), 0.0);
    for ib in 0..K_SUB_BLOCKS {
        let s = b.sub(ib);
        u.sc[2 * ib..2 * ib + 2].copy_from_slice(&s.scales);
        for l in 0..4 {
            let out = &mut u.q[32 * ib + 8 * l..32 * ib + 8 * l + 8];
            match L::RUNS {
                Runs::Signed8(grid) => signed(&grid[s.index[l] as usize], s.signs[l], out),
                Runs::Signed4(grid) => {
                    let (first, second) = out.split_at_mut(4);
                    signed(&grid[s.index[2 * l] as usize], s.signs[l], first);
                    signed(&grid[s.index[2 * l + 1] as usize], s.signs[l] >> 4, second);
                }
                Runs::Shifted8(grid) => shifted(&grid[s.index[l] as usize], s.signs[l] != 0, out),
            }
        }
    }
    u
}

/// The integer scale `2·ls + 1` of a (half) sub-block.
#[inline(always)]
fn odd(ls: u32) -> i32 {
    2 * ls as i32 + 1
}

/// IQ2_XS's and IQ2_S's two 4-bit scales of a sub-block, as `2·ls + 1`.
#[inline(always)]
fn nibble_scales(byte: u8) -> [i32; 2] {
    [odd(u32::from(byte & 0x0F)), odd(u32::from(byte >> 4))]
}

/// [`Sub::index`] for one entry a run: `f(l)` for runs 0..4.
#[inline(always)]
fn per_run(f: impl Fn(usize) -> u32) -> [u32; 8] {
    std::array::from_fn(|l| if l < 4 { f(l) } else { 0 })
}

/// Where IQ1 shifts a run down.
#[inline(always)]
fn down(flag: bool) -> u8 {
    if flag {
        0xFF
    } else {
        0
    }
}

impl Lattice for BlockIQ2XXS {
    const RUNS: Runs = Runs::Signed8(&IQ2XXS_GRID);
    #[inline(always)]
    fn scale(&self) -> f32 {
        self.d.get() * 0.125
    }
    #[inline(always)]
    fn sub(&self, ib: usize) -> Sub {
        let (index, aux) = (u32_at(&self.qs, 2 * ib), u32_at(&self.qs, 2 * ib + 1));
        Sub {
            index: per_run(|l| index >> (8 * l) & 0xFF),
            signs: std::array::from_fn(|l| ksigns(aux >> (7 * l))),
            scales: [odd(aux >> 28); 2],
        }
    }
}

impl Lattice for BlockIQ2XS {
    const RUNS: Runs = Runs::Signed8(&IQ2XS_GRID);
    #[inline(always)]
    fn scale(&self) -> f32 {
        self.d.get() * 0.125
    }
    #[inline(always)]
    fn sub(&self, ib: usize) -> Sub {
        let v: [u32; 4] = std::array::from_fn(|l| u16_at(&self.qs, 4 * ib + l));
        Sub {
            index: per_run(|l| v[l] & 511),
            signs: v.map(|v| ksigns(v >> 9)),
            scales: nibble_scales(self.scales[ib]),
        }
    }
}

impl Lattice for BlockIQ2S {
    const RUNS: Runs = Runs::Signed8(&IQ2S_GRID);
    #[inline(always)]
    fn scale(&self) -> f32 {
        self.d.get() * 0.125
    }
    #[inline(always)]
    fn sub(&self, ib: usize) -> Sub {
        let (low, signs) = self.qs.split_at(32);
        let qh = u32::from(self.qh[ib]);
        Sub {
            index: per_run(|l| u32::from(low[4 * ib + l]) | (qh << (8 - 2 * l)) & 0x300),
            signs: std::array::from_fn(|l| signs[4 * ib + l]),
            scales: nibble_scales(self.scales[ib]),
        }
    }
}

impl Lattice for BlockIQ3XXS {
    const RUNS: Runs = Runs::Signed4(&IQ3XXS_GRID);
    #[inline(always)]
    fn scale(&self) -> f32 {
        self.d.get() * 0.25
    }
    #[inline(always)]
    fn sub(&self, ib: usize) -> Sub {
        let (index, aux) = self.qs.split_at(64);
        let a = u32_at(aux, ib);
        Sub {
            index: std::array::from_fn(|j| u32::from(index[8 * ib + j])),
            signs: std::array::from_fn(|l| ksigns(a >> (7 * l))),
            scales: [odd(a >> 28); 2],
        }
    }
}

impl Lattice for BlockIQ3S {
    const RUNS: Runs = Runs::Signed4(&IQ3S_GRID);
    #[inline(always)]
    fn scale(&self) -> f32 {
        self.d.get()
    }
    #[inline(always)]
    fn sub(&self, ib: usize) -> Sub {
        let ls = u32::from((self.scales[ib / 2] >> (4 * (ib % 2))) & 0x0F);
        let qh = u32::from(self.qh[ib]);
        // Index `j` of the sub-block takes bit `j` of its `qh` byte as its ninth.
        let index = std::array::from_fn(|j| u32::from(self.qs[8 * ib + j]) | (qh << (8 - j)) & 256);
        Sub {
            index,
            signs: std::array::from_fn(|l| self.signs[4 * ib + l]),
            scales: [odd(ls); 2],
        }
    }
}

impl Lattice for BlockIQ1S {
    const RUNS: Runs = Runs::Shifted8(&IQ1S_GRID);
    #[inline(always)]
    fn scale(&self) -> f32 {
        self.d.get() * 0.125
    }
    #[inline(always)]
    fn sub(&self, ib: usize) -> Sub {
        let qh = u16_at(&self.qh, ib);
        Sub {
            index: per_run(|l| u32::from(self.qs[4 * ib + l]) | ((qh >> (3 * l)) & 7) << 8),
            signs: [down(qh & 0x8000 != 0); 4],
            scales: [odd((qh >> 12) & 7); 2],
        }
    }
}

/// IQ1_M's super-block scale: the f16 whose four nibbles are the top
/// nibbles of its four little-endian u16 scale words.
#[inline(always)]
fn iq1_m_scale(scales: &[u8; 8]) -> f32 {
    let top = |i: usize| (u16_at(scales, i) >> 12) as u16;
    let bits = top(0) | top(1) << 4 | top(2) << 8 | top(3) << 12;
    half::f16::from_bits(bits).to_f32()
}

impl Lattice for BlockIQ1M {
    const RUNS: Runs = Runs::Shifted8(&IQ1S_GRID);
    #[inline(always)]
    fn scale(&self) -> f32 {
        iq1_m_scale(&self.scales) * 0.125
    }
    #[inline(always)]
    fn sub(&self, ib: usize) -> Sub {
        let word = u16_at(&self.scales, ib / 2) >> (6 * (ib % 2));
        // A nibble per run: three index bits, then the shift's direction.
        let nibble = |l: usize| u32::from(self.qh[2 * ib + l / 2]) >> (4 * (l % 2)) & 0x0F;
        Sub {
            index: per_run(|l| u32::from(self.qs[4 * ib + l]) | (nibble(l) & 7) << 8),
            signs: std::array::from_fn(|l| down(nibble(l) & 8 != 0)),
            scales: [odd(word & 7), odd((word >> 3) & 7)],
        }
    }
}

/// Whether `ty` is a lattice format.
pub(crate) fn is_lattice(ty: GgmlType) -> bool {
    GgmlType::LATTICE.contains(&ty)
}

/// Sets the f16 super-block scale of the lattice block `block` (of type
/// `ty`) to `d`: the first two bytes, or IQ1_M's four top nibbles.
pub(crate) fn set_scale(ty: GgmlType, block: &mut [u8], d: f32) {
    let bits = half::f16::from_f32(d).to_bits();
    if ty != GgmlType::IQ1_M {
        block[..2].copy_from_slice(&bits.to_le_bytes());
        return;
    }
    let scales = std::mem::offset_of!(BlockIQ1M, scales);
    for i in 0..4 {
        let at = scales + 2 * i;
        let word = u16::from_le_bytes([block[at], block[at + 1]]);
        let word = (word & 0x0FFF) | ((bits >> (4 * i)) & 0x0F) << 12;
        block[at..at + 2].copy_from_slice(&word.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sign widening is ggml's table: its first row and its rule.
    #[test]
    fn ksigns_is_ggmls_table() {
        let first_row = [
            0, 129, 130, 3, 132, 5, 6, 135, 136, 9, 10, 139, 12, 141, 142, 15,
        ];
        for (i, &want) in first_row.iter().enumerate() {
            assert_eq!(ksigns(i as u32), want);
        }
        assert_eq!(ksigns(127), 255);
        assert_eq!(ksigns(126), 126);
        assert!((0..128).all(|i| ksigns(i).count_ones().is_multiple_of(2)));
    }

    /// Each grid holds its format's magnitudes only, every entry once.
    #[test]
    fn grids_hold_their_formats_values() {
        fn check<const W: usize>(grid: &[[u8; W]], allowed: &[u8]) {
            let mut seen = std::collections::HashSet::new();
            for e in grid {
                assert!(e.iter().all(|v| allowed.contains(v)), "{e:?}");
                assert!(seen.insert(*e), "{e:?} twice");
            }
        }
        check(&IQ2XXS_GRID, &[8, 25, 43]);
        check(&IQ2XS_GRID, &[8, 25, 43]);
        check(&IQ2S_GRID, &[8, 25, 43]);
        check(&IQ3XXS_GRID, &[4, 12, 20, 28, 36, 44, 52, 62]);
        check(&IQ3S_GRID, &[1, 3, 5, 7, 9, 11, 13, 15]);
        check(&IQ1S_GRID, &[0xff, 0, 1]);
    }
}
