//! Q4_K rows interleaved in groups of eight, Hearth's own decode layout.
//!
//! A decode product reads each weight once, and one Q4_K row at a time
//! spends most of its time on each block's tail (unpacking the scales,
//! horizontal sums, the float steps) rather than on the bytes. Eight rows
//! laid side by side let one register lane serve each row: a `vpdpbusd`
//! multiplies four weights of all eight rows by the same four activations,
//! the scales of eight rows unpack in one pass, and the product reads one
//! stream instead of eight. The layout has the same size as the rows it
//! replaces, and every value keeps its bits, so each row's dot is the
//! standard kernel's to the last bit.
//!
//! One group block (the eight rows' block `b`, [`GROUP_BLOCK_BYTES`]):
//!
//! | bytes | what |
//! |---|---|
//! | 0..16 | `d` of rows 0..8 (f16) |
//! | 16..32 | `dmin` of rows 0..8 (f16) |
//! | 32..128 | the packed scales: bytes 0..4 of rows 0..8, then 4..8, then 8..12 |
//! | 128..1152 | nibbles: for sub-block `j` and quarter `g`, 32 bytes at `128 + 32 (4 j + g)`, four per row; byte `i` of row `r` holds value `32 j + 8 g + i` low and `+ 4` high |

use super::blocks::{BlockFormat, BlockQ4K};

/// Rows in a group.
pub const GROUP_ROWS: usize = 8;

/// Bytes of one group block: eight Q4_K blocks.
pub(crate) const GROUP_BLOCK_BYTES: usize = GROUP_ROWS * BlockQ4K::BYTES;

/// Byte offsets within a group block.
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

/// Interleaves eight standard rows of `nb` Q4_K blocks (`rows[r]`) into
/// `dst` (`nb` group blocks).
///
/// Sub-blocks `2c` and `2c + 1` are the low and high nibbles of bytes
/// `32c..32c + 32` of `qs`; quarter `g` of either takes bytes `8g..8g + 4`
/// (its values 0..4) and `8g + 4..8g + 8` (4..8) of that run: word by word,
/// the low run's nibbles go low and the high run's high.
pub(crate) fn interleave_group(rows: [&[u8]; GROUP_ROWS], nb: usize, dst: &mut [u8]) {
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

/// The inverse of [`interleave_group`]: `src` (`nb` group blocks) back to
/// eight standard rows of `nb` blocks, one after another in `dst`.
pub(crate) fn deinterleave_group(src: &[u8], nb: usize, dst: &mut [u8]) {
    const B: usize = BlockQ4K::BYTES;
    for b in 0..nb {
        let g = &src[b * GROUP_BLOCK_BYTES..(b + 1) * GROUP_BLOCK_BYTES];
        for r in 0..GROUP_ROWS {
            let at = (r * nb + b) * B;
            let blk = &mut dst[at..at + B];
            blk[0..2].copy_from_slice(&g[x8::D + 2 * r..x8::D + 2 * r + 2]);
            blk[2..4].copy_from_slice(&g[x8::DMIN + 2 * r..x8::DMIN + 2 * r + 2]);
            for w in 0..3 {
                let at = x8::WORDS + 32 * w + 4 * r;
                blk[4 + 4 * w..8 + 4 * w].copy_from_slice(&g[at..at + 4]);
            }
            let qs = &mut blk[16..B];
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Any bytes survive the round trip, and each value lands where the
    /// kernels look for it.
    #[test]
    fn interleaving_round_trips_any_bytes() {
        let nb = 3;
        let row_bytes = nb * BlockQ4K::BYTES;
        let mut x = 0x2545_f491_4f6c_dd1d_u64;
        let src: Vec<u8> = (0..GROUP_ROWS * row_bytes)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 32) as u8
            })
            .collect();
        let rows: [&[u8]; GROUP_ROWS] =
            std::array::from_fn(|r| &src[r * row_bytes..(r + 1) * row_bytes]);
        let mut packed = vec![0u8; nb * GROUP_BLOCK_BYTES];
        interleave_group(rows, nb, &mut packed);
        let mut back = vec![0u8; src.len()];
        deinterleave_group(&packed, nb, &mut back);
        assert_eq!(back, src);
        // Row 5, block 2, value 37 (sub-block 1, quarter 0, byte 5: high).
        let blk = &src[5 * row_bytes + 2 * BlockQ4K::BYTES..];
        let want = blk[16 + 5] >> 4;
        let g = &packed[2 * GROUP_BLOCK_BYTES..];
        assert_eq!(g[x8::QS + 32 * 4 + 4 * 5 + 1] >> 4, want);
    }
}
