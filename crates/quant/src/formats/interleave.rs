//! Q4_K, Q6_K, Q5_0 and Q8_0 rows interleaved in groups of eight, Hearth's
//! own decode layout.
//!
//! A decode product reads each weight once, and one row at a time spends
//! most of its time on each block's tail (unpacking the scales, horizontal
//! sums, the float steps) rather than on the bytes. Eight rows laid side by
//! side let one register lane serve each row: a `vpdpbusd` multiplies four
//! weights of all eight rows by the same four activations, the scales of
//! eight rows unpack in one pass, and the product reads one stream instead
//! of eight. The layout has the same size as the rows it replaces, and
//! every value keeps its bits, so each row's dot is the standard kernel's
//! to the last bit.
//!
//! One Q4_K group block (the eight rows' block `b`, [`GROUP_BLOCK_BYTES`]):
//!
//! | bytes | what |
//! |---|---|
//! | 0..16 | `d` of rows 0..8 (f16) |
//! | 16..32 | `dmin` of rows 0..8 (f16) |
//! | 32..128 | the packed scales: bytes 0..4 of rows 0..8, then 4..8, then 8..12 |
//! | 128..1152 | nibbles: for sub-block `j` and quarter `g`, 32 bytes at `128 + 32 (4 j + g)`, four per row; byte `i` of row `r` holds value `32 j + 8 g + i` low and `+ 4` high |
//!
//! One Q6_K group block ([`Q6_K_GROUP_BYTES`]; value `v` of a row is its
//! unsigned code `q + 32`, quad `j` its values `4 j..4 j + 4`, and group `g`,
//! which shares a scale, quads `4 g..4 g + 4`):
//!
//! | bytes | what |
//! |---|---|
//! | 0..16 | `d` of rows 0..8 (f16) |
//! | 16..144 | the scales: bytes 0..4 of rows 0..8, then 4..8, 8..12, 12..16 |
//! | 144..1680 | group `g` at `144 + 96 g`: two runs of low four bits (at 0: quad `4 g` low, `4 g + 1` high; at 32: quads `4 g + 2`, `4 g + 3`), then one of high two bits (at 64: bits `2 i..2 i + 2` for quad `4 g + i`); in each run, byte `4 r + t` is row `r`'s value `t` |
//!
//! One Q8_0 group block ([`Q8_0_GROUP_BYTES`]):
//!
//! | bytes | what |
//! |---|---|
//! | 0..16 | `d` of rows 0..8 (f16) |
//! | 16..272 | values: for quad `j`, 32 bytes at `16 + 32 j`, the values `4 j..4 j + 4` of row `r` at `4 r` |
//!
//! One Q5_0 group block ([`Q5_0_GROUP_BYTES`]):
//!
//! | bytes | what |
//! |---|---|
//! | 0..16 | `d` of rows 0..8 (f16) |
//! | 16..48 | fifth bits: byte `4 r + t` holds row `r`'s of values `4 j + t` at bit `j` (quad `j`'s bits sit where its values do in a run, so one shift and mask give them) |
//! | 48..176 | nibbles: run `k` at `48 + 32 k`, bytes `4 k..4 k + 4` of row `r`'s `qs` at `4 r` (values `4 k + i` low, `16 + 4 k + i` high) |

use super::blocks::{at, BlockFormat, BlockQ4K, BlockQ5_0, BlockQ6K, BlockQ8_0};
use crate::GgmlType;

/// Rows in a group.
pub const GROUP_ROWS: usize = 8;

/// Block `b` of a group: the eight rows' blocks `b` of `B`, the same bytes
/// rearranged as the tables above lay them out. Only the interleaved
/// kernels and this module read one.
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(transparent)]
pub(crate) struct Interleaved<B>(pub(crate) [B; GROUP_ROWS]);

/// Bytes of one group block: eight Q4_K blocks.
pub(crate) const GROUP_BLOCK_BYTES: usize = GROUP_ROWS * BlockQ4K::BYTES;

/// Bytes of one Q8_0 group block: eight Q8_0 blocks.
pub(crate) const Q8_0_GROUP_BYTES: usize = GROUP_ROWS * BlockQ8_0::BYTES;

/// Byte offsets within a Q8_0 group block.
pub(crate) mod x8_q8_0 {
    /// The eight `d`.
    pub(crate) const D: usize = 0;
    /// The values, quad by quad.
    pub(crate) const QS: usize = 16;
}

/// Bytes of one Q5_0 group block: eight Q5_0 blocks.
pub(crate) const Q5_0_GROUP_BYTES: usize = GROUP_ROWS * BlockQ5_0::BYTES;

/// Byte offsets within a Q5_0 group block.
pub(crate) mod x8_q5_0 {
    /// The eight `d`.
    pub(crate) const D: usize = 0;
    /// The fifth bits, a word per quad.
    pub(crate) const QH: usize = 16;
    /// The nibbles, four runs.
    pub(crate) const QS: usize = 48;
}

/// Bytes of one Q6_K group block: eight Q6_K blocks.
pub(crate) const Q6_K_GROUP_BYTES: usize = GROUP_ROWS * BlockQ6K::BYTES;

/// Byte offsets within a Q6_K group block.
pub(crate) mod x8_q6_k {
    /// The eight `d`.
    pub(crate) const D: usize = 0;
    /// The scales, as four words of eight rows.
    pub(crate) const SCALES: usize = 16;
    /// The values: sixteen groups of [`GROUP`] bytes.
    pub(crate) const VALUES: usize = 144;
    /// Bytes of one group of sixteen values: two runs of low bits, then
    /// one of high bits, so a product reads the block front to back.
    pub(crate) const GROUP: usize = 96;

    /// The run holding quad `j`'s low four bits (low nibbles for even `j`,
    /// high for odd).
    pub(crate) const fn low(j: usize) -> usize {
        VALUES + GROUP * (j / 4) + 32 * (j % 4 / 2)
    }

    /// The run holding quad `j`'s high two bits (bits `2 (j % 4)` up).
    pub(crate) const fn high(j: usize) -> usize {
        VALUES + GROUP * (j / 4) + 64
    }
}

/// Whether rows of `ty` have an interleaved layout.
pub(crate) fn supports(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::Q4_K | GgmlType::Q6_K | GgmlType::Q5_0 | GgmlType::Q8_0
    )
}

/// Interleaves eight standard rows of `nb` blocks of `ty` (`rows[r]`) into
/// `dst` (`nb` group blocks); nothing for a type without the layout.
pub(crate) fn interleave_group(ty: GgmlType, rows: [&[u8]; GROUP_ROWS], nb: usize, dst: &mut [u8]) {
    match ty {
        GgmlType::Q4_K => interleave_q4_k(rows, nb, dst),
        GgmlType::Q6_K => interleave_q6_k(rows, nb, dst),
        GgmlType::Q5_0 => interleave_q5_0(rows, nb, dst),
        GgmlType::Q8_0 => interleave_q8_0(rows, nb, dst),
        _ => {}
    }
}

/// Row `r`'s block out of one group block (`group`, `r`, the block).
type BlockOf = fn(&[u8], usize, &mut [u8]);

/// The inverse of [`interleave_group`] for rows `rows` of the group: `src`
/// (`nb` group blocks) back to those rows' standard blocks, one row after
/// another in `dst`. Nothing for a type without the layout.
pub(crate) fn deinterleave_rows(
    ty: GgmlType,
    src: &[u8],
    nb: usize,
    rows: std::ops::Range<usize>,
    dst: &mut [u8],
) {
    let (block_of, gb): (BlockOf, usize) = match ty {
        GgmlType::Q4_K => (q4_k_block_of, GROUP_BLOCK_BYTES),
        GgmlType::Q6_K => (q6_k_block_of, Q6_K_GROUP_BYTES),
        GgmlType::Q5_0 => (q5_0_block_of, Q5_0_GROUP_BYTES),
        GgmlType::Q8_0 => (q8_0_block_of, Q8_0_GROUP_BYTES),
        _ => return,
    };
    let bb = ty.block_bytes();
    for (i, r) in rows.enumerate() {
        for b in 0..nb {
            let at = (i * nb + b) * bb;
            block_of(&src[b * gb..(b + 1) * gb], r, &mut dst[at..at + bb]);
        }
    }
}

/// Q8_0's layout: the eight scales, then each quad of values of the eight
/// rows side by side.
fn interleave_q8_0(rows: [&[u8]; GROUP_ROWS], nb: usize, dst: &mut [u8]) {
    const B: usize = BlockQ8_0::BYTES;
    for b in 0..nb {
        let g = &mut dst[b * Q8_0_GROUP_BYTES..(b + 1) * Q8_0_GROUP_BYTES];
        for (r, row) in rows.iter().enumerate() {
            let blk = &row[b * B..(b + 1) * B];
            g[x8_q8_0::D + 2 * r..x8_q8_0::D + 2 * r + 2].copy_from_slice(&blk[0..2]);
            for j in 0..8 {
                let at = x8_q8_0::QS + 32 * j + 4 * r;
                g[at..at + 4].copy_from_slice(&blk[2 + 4 * j..6 + 4 * j]);
            }
        }
    }
}

/// Row `r`'s Q8_0 block from the group block `g` (the inverse of
/// [`interleave_q8_0`]).
fn q8_0_block_of(g: &[u8], r: usize, blk: &mut [u8]) {
    blk[0..2].copy_from_slice(&g[x8_q8_0::D + 2 * r..x8_q8_0::D + 2 * r + 2]);
    for j in 0..8 {
        let at = x8_q8_0::QS + 32 * j + 4 * r;
        blk[2 + 4 * j..6 + 4 * j].copy_from_slice(&g[at..at + 4]);
    }
}

/// Q5_0's layout: the eight scales, the fifth bits regrouped by place in
/// a quad, then the nibbles four bytes of each row at a time.
fn interleave_q5_0(rows: [&[u8]; GROUP_ROWS], nb: usize, dst: &mut [u8]) {
    const B: usize = BlockQ5_0::BYTES;
    for b in 0..nb {
        let g = &mut dst[b * Q5_0_GROUP_BYTES..(b + 1) * Q5_0_GROUP_BYTES];
        for (r, row) in rows.iter().enumerate() {
            let blk = &row[b * B..(b + 1) * B];
            g[x8_q5_0::D + 2 * r..x8_q5_0::D + 2 * r + 2].copy_from_slice(&blk[0..2]);
            let qh = word(&blk[2..6], 0);
            for t in 0..4 {
                // Bit j: value 4 j + t's fifth bit.
                g[x8_q5_0::QH + 4 * r + t] =
                    (0..8).fold(0u8, |byte, j| byte | (((qh >> (4 * j + t)) & 1) as u8) << j);
            }
            for k in 0..4 {
                let at = x8_q5_0::QS + 32 * k + 4 * r;
                g[at..at + 4].copy_from_slice(&blk[6 + 4 * k..10 + 4 * k]);
            }
        }
    }
}

/// Row `r`'s Q5_0 block from the group block `g` (the inverse of
/// [`interleave_q5_0`]).
fn q5_0_block_of(g: &[u8], r: usize, blk: &mut [u8]) {
    blk[0..2].copy_from_slice(&g[x8_q5_0::D + 2 * r..x8_q5_0::D + 2 * r + 2]);
    let qh = (0..32).fold(0u32, |qh, v| {
        let (j, t) = (v / 4, v % 4);
        qh | u32::from((g[x8_q5_0::QH + 4 * r + t] >> j) & 1) << v
    });
    blk[2..6].copy_from_slice(&qh.to_le_bytes());
    for k in 0..4 {
        let at = x8_q5_0::QS + 32 * k + 4 * r;
        blk[6 + 4 * k..10 + 4 * k].copy_from_slice(&g[at..at + 4]);
    }
}

/// A Q6_K block's 256 unsigned codes (`q + 32`, 0..63) in value order, as
/// `kquants::unpack_q6_k` places them: word `j` holds quad `j` (values
/// `4 j..4 j + 4`), four codes to a word.
fn q6_k_codes(blk: &[u8]) -> [u32; 64] {
    const NIB: u32 = 0x0f0f_0f0f;
    const TWO: u32 = 0x0303_0303;
    let (ql, qh) = (
        &blk[at::Q6K_QL..at::Q6K_QH],
        &blk[at::Q6K_QH..at::Q6K_SCALES],
    );
    let mut y = [0u32; 64];
    for n in 0..2 {
        for l in (0..32).step_by(4) {
            let (a, b) = (word(ql, (64 * n + l) / 4), word(ql, (64 * n + l + 32) / 4));
            let h = word(qh, (32 * n + l) / 4);
            let q = 32 * n + l / 4;
            y[q] = (a & NIB) | (h & TWO) << 4;
            y[q + 8] = (b & NIB) | (h >> 2 & TWO) << 4;
            y[q + 16] = (a >> 4 & NIB) | (h >> 4 & TWO) << 4;
            y[q + 24] = (b >> 4 & NIB) | (h >> 6 & TWO) << 4;
        }
    }
    y
}

/// The inverse of [`q6_k_codes`]: a block's `ql` and `qh` from its codes.
fn q6_k_from_codes(y: &[u8; 256], blk: &mut [u8]) {
    let (ql, qh) = blk[at::Q6K_QL..at::Q6K_SCALES].split_at_mut(at::Q6K_QH - at::Q6K_QL);
    for n in 0..2 {
        let (ql, qh, y) = (&mut ql[64 * n..], &mut qh[32 * n..], &y[128 * n..]);
        for l in 0..32 {
            ql[l] = (y[l] & 0x0F) | (y[l + 64] & 0x0F) << 4;
            ql[l + 32] = (y[l + 32] & 0x0F) | (y[l + 96] & 0x0F) << 4;
            qh[l] =
                (y[l] >> 4) | (y[l + 32] >> 4) << 2 | (y[l + 64] >> 4) << 4 | (y[l + 96] >> 4) << 6;
        }
    }
}

/// Q6_K's layout (see the module's table), a word (four values of a row)
/// at a time: a model's Q6_K matrices are rearranged at every load.
fn interleave_q6_k(rows: [&[u8]; GROUP_ROWS], nb: usize, dst: &mut [u8]) {
    const B: usize = BlockQ6K::BYTES;
    const NIB: u32 = 0x0f0f_0f0f;
    const TWO: u32 = 0x0303_0303;
    for b in 0..nb {
        let g = &mut dst[b * Q6_K_GROUP_BYTES..(b + 1) * Q6_K_GROUP_BYTES];
        for (r, row) in rows.iter().enumerate() {
            let blk = &row[b * B..(b + 1) * B];
            g[x8_q6_k::D + 2 * r..x8_q6_k::D + 2 * r + 2]
                .copy_from_slice(&blk[at::Q6K_D..at::Q6K_D + 2]);
            for w in 0..4 {
                let to = x8_q6_k::SCALES + 32 * w + 4 * r;
                let from = at::Q6K_SCALES + 4 * w;
                g[to..to + 4].copy_from_slice(&blk[from..from + 4]);
            }
            let y = q6_k_codes(blk);
            for (gi, q) in y.chunks_exact(4).enumerate() {
                let j = 4 * gi;
                let high = (0..4).fold(0, |h, i| h | (q[i] >> 4 & TWO) << (2 * i));
                for (at, v) in [
                    (x8_q6_k::low(j), (q[0] & NIB) | (q[1] & NIB) << 4),
                    (x8_q6_k::low(j + 2), (q[2] & NIB) | (q[3] & NIB) << 4),
                    (x8_q6_k::high(j), high),
                ] {
                    g[at + 4 * r..at + 4 * r + 4].copy_from_slice(&v.to_le_bytes());
                }
            }
        }
    }
}

/// Row `r`'s Q6_K block from the group block `g` (the inverse of
/// [`interleave_q6_k`]).
fn q6_k_block_of(g: &[u8], r: usize, blk: &mut [u8]) {
    let mut y = [0u8; 256];
    for (j, quad) in y.chunks_exact_mut(4).enumerate() {
        for (t, v) in quad.iter_mut().enumerate() {
            let low = g[x8_q6_k::low(j) + 4 * r + t] >> (4 * (j % 2)) & 0x0F;
            let high = g[x8_q6_k::high(j) + 4 * r + t] >> (2 * (j % 4)) & 3;
            *v = low | high << 4;
        }
    }
    q6_k_from_codes(&y, blk);
    for w in 0..4 {
        let from = x8_q6_k::SCALES + 32 * w + 4 * r;
        let to = at::Q6K_SCALES + 4 * w;
        blk[to..to + 4].copy_from_slice(&g[from..from + 4]);
    }
    blk[at::Q6K_D..at::Q6K_D + 2].copy_from_slice(&g[x8_q6_k::D + 2 * r..x8_q6_k::D + 2 * r + 2]);
}

/// Byte offsets within a Q4_K group block.
pub(crate) mod x8 {
    /// The eight `d`.
    pub(crate) const D: usize = 0;
    /// The eight `dmin`.
    pub(crate) const DMIN: usize = 16;
    /// The packed scales, as three words of eight rows.
    pub(crate) const WORDS: usize = 32;
    /// The nibbles.
    pub(crate) const QS: usize = 128;
}

/// The nibbles' 32-bit word `n` of a block's `qs` (little-endian).
#[inline(always)]
fn word(qs: &[u8], n: usize) -> u32 {
    u32::from_le_bytes([qs[4 * n], qs[4 * n + 1], qs[4 * n + 2], qs[4 * n + 3]])
}

const LOW: u32 = 0x0f0f_0f0f;

/// Q4_K's layout (see the module's table).
///
/// Sub-blocks `2c` and `2c + 1` are the low and high nibbles of bytes
/// `32c..32c + 32` of `qs`; quarter `g` of either takes bytes `8g..8g + 4`
/// (its values 0..4) and `8g + 4..8g + 8` (4..8) of that run: word by word,
/// the low run's nibbles go low and the high run's high.
fn interleave_q4_k(rows: [&[u8]; GROUP_ROWS], nb: usize, dst: &mut [u8]) {
    const B: usize = BlockQ4K::BYTES;
    for b in 0..nb {
        let g = &mut dst[b * GROUP_BLOCK_BYTES..(b + 1) * GROUP_BLOCK_BYTES];
        for (r, row) in rows.iter().enumerate() {
            let blk = &row[b * B..(b + 1) * B];
            g[x8::D + 2 * r..x8::D + 2 * r + 2].copy_from_slice(&blk[0..2]);
            g[x8::DMIN + 2 * r..x8::DMIN + 2 * r + 2].copy_from_slice(&blk[2..4]);
            for w in 0..3 {
                let at = x8::WORDS + 32 * w + 4 * r;
                g[at..at + 4].copy_from_slice(&blk[4 + 4 * w..8 + 4 * w]);
            }
            let qs = &blk[16..B];
            for j in 0..8 {
                for q in 0..4 {
                    let n = 8 * (j / 2) + 2 * q;
                    let (lo, hi) = (word(qs, n), word(qs, n + 1));
                    let v = if j % 2 == 0 {
                        (lo & LOW) | ((hi & LOW) << 4)
                    } else {
                        ((lo >> 4) & LOW) | (hi & !LOW)
                    };
                    let at = x8::QS + 32 * (4 * j + q) + 4 * r;
                    g[at..at + 4].copy_from_slice(&v.to_le_bytes());
                }
            }
        }
    }
}

/// Row `r`'s Q4_K block from the group block `g` (the inverse of
/// [`interleave_q4_k`]).
fn q4_k_block_of(g: &[u8], r: usize, blk: &mut [u8]) {
    blk[0..2].copy_from_slice(&g[x8::D + 2 * r..x8::D + 2 * r + 2]);
    blk[2..4].copy_from_slice(&g[x8::DMIN + 2 * r..x8::DMIN + 2 * r + 2]);
    for w in 0..3 {
        let at = x8::WORDS + 32 * w + 4 * r;
        blk[4 + 4 * w..8 + 4 * w].copy_from_slice(&g[at..at + 4]);
    }
    let qs = &mut blk[16..BlockQ4K::BYTES];
    for c in 0..4 {
        for q in 0..4 {
            let at = |j: usize| &g[x8::QS + 32 * (4 * j + q) + 4 * r..];
            let (even, odd) = (word(at(2 * c), 0), word(at(2 * c + 1), 0));
            let lo = (even & LOW) | ((odd & LOW) << 4);
            let hi = ((even >> 4) & LOW) | (odd & !LOW);
            let n = 8 * c + 2 * q;
            qs[4 * n..4 * n + 4].copy_from_slice(&lo.to_le_bytes());
            qs[4 * n + 4..4 * n + 8].copy_from_slice(&hi.to_le_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytemuck::Zeroable;

    /// `GROUP_ROWS` rows of `nb` blocks of `ty`, any bytes.
    fn random_rows(ty: GgmlType, nb: usize) -> Vec<u8> {
        let mut x = 0x2545_f491_4f6c_dd1d_u64;
        (0..GROUP_ROWS * nb * ty.block_bytes())
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 32) as u8
            })
            .collect()
    }

    /// `src` through the layout and back, and the layout itself.
    fn round_trip(ty: GgmlType, src: &[u8], nb: usize) -> Vec<u8> {
        let row_bytes = nb * ty.block_bytes();
        let rows: [&[u8]; GROUP_ROWS] =
            std::array::from_fn(|r| &src[r * row_bytes..(r + 1) * row_bytes]);
        let mut packed = vec![0u8; src.len()];
        interleave_group(ty, rows, nb, &mut packed);
        let mut back = vec![0u8; src.len()];
        deinterleave_rows(ty, &packed, nb, 0..GROUP_ROWS, &mut back);
        assert_eq!(back, src, "{ty:?}");
        // One row alone.
        let mut row = vec![0u8; row_bytes];
        deinterleave_rows(ty, &packed, nb, 5..6, &mut row);
        assert_eq!(row, src[5 * row_bytes..6 * row_bytes], "{ty:?} row 5");
        packed
    }

    /// `nb` Q5_0 group blocks (`src`) as Q8_0 group blocks (`dst`) of the
    /// same values and scales: each quad's values `q - 16` as signed bytes, in
    /// the same places. Exact, so a Q8_0 kernel on `dst` gives the Q5_0
    /// kernel's sums.
    fn q5_0_group_as_q8_0(src: &[u8], nb: usize, dst: &mut [u8]) {
        for b in 0..nb {
            let g = &src[b * Q5_0_GROUP_BYTES..(b + 1) * Q5_0_GROUP_BYTES];
            let o = &mut dst[b * Q8_0_GROUP_BYTES..(b + 1) * Q8_0_GROUP_BYTES];
            o[x8_q8_0::D..x8_q8_0::D + 16].copy_from_slice(&g[x8_q5_0::D..x8_q5_0::D + 16]);
            for j in 0..8 {
                for i in 0..32 {
                    let byte = g[x8_q5_0::QS + 32 * (j % 4) + i];
                    let nib = if j < 4 { byte & 0x0F } else { byte >> 4 };
                    let q = nib | ((g[x8_q5_0::QH + i] >> j) & 1) << 4;
                    o[x8_q8_0::QS + 32 * j + i] = (q as i8 - 16) as u8;
                }
            }
        }
    }

    /// Every table's rewrite of Q5_0 group blocks as Q8_0 ones is the
    /// reference's, byte for byte, on any bytes.
    #[test]
    fn q5_0_groups_widen_to_q8_0_exactly() {
        for nb in [1, 2, 5] {
            let src = random_rows(GgmlType::Q5_0, nb);
            let mut want = vec![0u8; nb * Q8_0_GROUP_BYTES];
            q5_0_group_as_q8_0(&src, nb, &mut want);
            for k in crate::simd::available() {
                let Some(widen) = k.q5_0.x8_as_q8_0 else {
                    continue;
                };
                let mut got = vec![Interleaved([BlockQ8_0::zeroed(); GROUP_ROWS]); nb];
                // SAFETY: a table this CPU runs.
                unsafe { widen(crate::formats::blocks::blocks(&src), &mut got) };
                assert_eq!(
                    bytemuck::cast_slice::<_, u8>(&got),
                    want,
                    "{} nb {nb}",
                    k.name
                );
            }
        }
    }

    /// Any bytes survive the round trip, and each value lands where the
    /// kernels look for it.
    #[test]
    fn interleaving_round_trips_any_bytes() {
        let nb = 3;
        let src = random_rows(GgmlType::Q4_K, nb);
        let packed = round_trip(GgmlType::Q4_K, &src, nb);
        // Row 5, block 2, value 37 (sub-block 1, quarter 0, byte 5: high).
        let blk = &src[5 * nb * BlockQ4K::BYTES + 2 * BlockQ4K::BYTES..];
        let want = blk[16 + 5] >> 4;
        let g = &packed[2 * GROUP_BLOCK_BYTES..];
        assert_eq!(g[x8::QS + 32 * 4 + 4 * 5 + 1] >> 4, want);

        let src = random_rows(GgmlType::Q6_K, nb);
        let packed = round_trip(GgmlType::Q6_K, &src, nb);
        // Row 2, block 1, value 201 (half 1, l = 9, the third of `l`'s
        // four: ql[64 + 9] high, qh[32 + 9] bits 4..6): quad 50, place 1,
        // so group 12's second low run, low nibble, and its high run's bits
        // 4..6.
        let blk = &src[2 * nb * BlockQ6K::BYTES + BlockQ6K::BYTES..];
        let g = &packed[Q6_K_GROUP_BYTES..];
        let group = x8_q6_k::VALUES + 96 * 12;
        assert_eq!(g[group + 32 + 4 * 2 + 1] & 0x0F, blk[64 + 9] >> 4);
        assert_eq!(
            g[group + 64 + 4 * 2 + 1] >> 4 & 3,
            blk[128 + 32 + 9] >> 4 & 3
        );
        assert_eq!(g[x8_q6_k::SCALES + 32 * 3 + 4 * 2 + 2], blk[192 + 14]);

        let src = random_rows(GgmlType::Q8_0, nb);
        let packed = round_trip(GgmlType::Q8_0, &src, nb);
        // Row 6, block 1: its scale, and value 13 (quad 3, byte 1).
        let blk = &src[6 * nb * BlockQ8_0::BYTES + BlockQ8_0::BYTES..];
        let g = &packed[Q8_0_GROUP_BYTES..];
        assert_eq!(g[x8_q8_0::D + 12..x8_q8_0::D + 14], blk[0..2]);
        assert_eq!(g[x8_q8_0::QS + 32 * 3 + 4 * 6 + 1], blk[2 + 13]);

        let src = random_rows(GgmlType::Q5_0, nb);
        let packed = round_trip(GgmlType::Q5_0, &src, nb);
        // Row 3, block 2: value 22's fifth bit (quad 5, place 2: bit 5 of
        // byte 4 · 3 + 2) and nibble (run 1, byte 2, high).
        let blk = &src[3 * nb * BlockQ5_0::BYTES + 2 * BlockQ5_0::BYTES..];
        let g = &packed[2 * Q5_0_GROUP_BYTES..];
        let qh = word(&blk[2..6], 0);
        assert_eq!(
            u32::from(g[x8_q5_0::QH + 4 * 3 + 2] >> 5) & 1,
            (qh >> 22) & 1
        );
        assert_eq!(g[x8_q5_0::QS + 32 + 4 * 3 + 2] >> 4, blk[6 + 6] >> 4);
    }
}
