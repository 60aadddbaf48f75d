//! BF16 weights against a batch of activations rounded to bf16, in the
//! order of AVX512_BF16's `vdpbf16ps` that the short products follow
//! ([`crate::scalar::dot_bf16`]'s lanes): each output sums over the pairs
//! of `k` in order, the odd element's product first, one rounding each.
//!
//! That is the f32 packed GEMM's order ([`crate::sgemm_packed`]: one fused
//! multiply-add a step of `k`, in order) over `k` with each pair swapped,
//! so CPUs without the instruction run that GEMM on swapped, rounded
//! operands, and CPUs with it run a kernel that reads bf16 panels (32
//! multiply-adds an instruction): the same bits wherever no value falls
//! below f32's normal range (the instruction takes those as zero).

use crate::float_gemm::for_each_block;
use crate::formats::float::bf16_bits_to_f32;
use crate::matmul::{Matrix, SharedOut};
use crate::sgemm_packed::{sgemm_packed, PackedB, PANEL};
use crate::QuantError;
use std::cell::RefCell;
use threads::ThreadPool;

/// `out = W x` for `batch` rows of bf16 activations (`acts`, rows `lda`
/// apart, each zero past the row's end up to an even length) through the
/// BF16 matrix `w`, the output shared as `out` (`batch` rows of
/// `w.rows()`); `dot`: by the AVX512_BF16 kernel.
pub(crate) fn bf16_gemm(
    pool: &ThreadPool,
    w: &Matrix,
    acts: &[u16],
    lda: usize,
    batch: usize,
    out: &SharedOut,
    dot: bool,
) -> Result<(), QuantError> {
    // Pairs of `k`, the last one filled out with a zero.
    let pairs = w.cols().div_ceil(2);
    if lda < 2 * pairs || acts.len() < batch * lda {
        return Err(QuantError::Shape(format!(
            "{batch} activation rows {lda} apart in {} values for {} columns",
            acts.len(),
            w.cols()
        )));
    }
    if dot {
        return for_each_block(pool, w.rows(), batch, out, |block, tile| {
            SCRATCH.with_borrow_mut(|s| {
                if block.new_rows {
                    pack_bf16(w, block.r0, block.n, pairs, &mut s.bf16);
                }
                let a = &acts[block.b0 * lda..(block.b0 + block.m) * lda];
                product_dot(block.m, block.n, pairs, a, lda, &s.bf16, tile);
                Ok(())
            })
        });
    }
    // Without the instruction: the same values, each pair swapped, for the
    // f32 GEMM (once for every task).
    SWAPPED.with_borrow_mut(|swapped| {
        swapped.clear();
        let swap = |p: &[u16]| [bf16_bits_to_f32(p[1]), bf16_bits_to_f32(p[0])];
        swapped.extend(acts[..batch * lda].chunks_exact(2).flat_map(swap));
        for_each_block(pool, w.rows(), batch, out, |block, tile| {
            SCRATCH.with_borrow_mut(|s| {
                if block.new_rows {
                    pack_swapped(w, block.r0, block.n, pairs, &mut s.packed, &mut s.rows)?;
                }
                let a = &swapped[block.b0 * lda..(block.b0 + block.m) * lda];
                sgemm_packed(block.m, a, lda, &s.packed, tile, block.n)
            })
        })
    })
}

/// A thread's panels and rows, kept from product to product.
#[derive(Default)]
struct Scratch {
    packed: PackedB,
    rows: Vec<f32>,
    bf16: Vec<u16>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
    /// The calling thread's swapped activations, kept between products.
    static SWAPPED: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Rows `r0..r0 + n` of `w` as f32 panels of `2 * pairs` steps, each pair
/// of steps swapped (the odd element first).
fn pack_swapped(
    w: &Matrix,
    r0: usize,
    n: usize,
    pairs: usize,
    packed: &mut PackedB,
    rows: &mut Vec<f32>,
) -> Result<(), QuantError> {
    let (k, cols) = (2 * pairs, w.cols());
    packed.reshape(k, n);
    rows.resize(PANEL * k, 0.0);
    for s in 0..n.div_ceil(PANEL) {
        for (j, row) in rows.chunks_exact_mut(k).enumerate() {
            let r = s * PANEL + j;
            row.fill(0.0);
            if r < n {
                w.dequantize_row(r0 + r, &mut row[..cols])?;
                for p in row.chunks_exact_mut(2) {
                    p.swap(0, 1);
                }
            }
        }
        packed.fill_panel_from_rows(s, rows);
    }
    Ok(())
}

/// Rows `r0..r0 + n` of `w` as bf16 panels: panel `s`, pair `p`, row `j`
/// at `(s * pairs + p) * 2 * PANEL + 2 * j` (its even element, then odd;
/// zero past the row).
fn pack_bf16(w: &Matrix, r0: usize, n: usize, pairs: usize, out: &mut Vec<u16>) {
    let panels = n.div_ceil(PANEL);
    out.clear();
    out.resize(panels * pairs * 2 * PANEL, 0);
    let cols = w.cols();
    for r in 0..n {
        let (s, j) = (r / PANEL, r % PANEL);
        let src = &w.row(r0 + r)[..2 * cols];
        let base = s * pairs * 2 * PANEL + 2 * j;
        for (p, b) in src.chunks(4).enumerate() {
            let at = base + p * 2 * PANEL;
            out[at] = u16::from_le_bytes([b[0], b[1]]);
            if let [_, _, lo, hi] = *b {
                out[at + 1] = u16::from_le_bytes([lo, hi]);
            }
        }
    }
}

/// `tile = A B` for `m` rows of bf16 activations (`lda` apart, `2 * pairs`
/// each) and the `n` columns packed by [`pack_bf16`], through AVX512_BF16.
fn product_dot(
    m: usize,
    n: usize,
    pairs: usize,
    a: &[u16],
    lda: usize,
    b: &[u16],
    tile: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    {
        assert!(lda >= 2 * pairs && a.len() >= m.saturating_sub(1) * lda + 2 * pairs);
        assert!(b.len() >= n.div_ceil(PANEL) * pairs * 2 * PANEL && tile.len() >= m * n);
        // SAFETY: chosen only where the CPU has AVX512_BF16 (the table
        // with the BF16 dot); the slices hold the shapes (asserted).
        unsafe { x86::product(m, n, pairs, a, lda, b, tile) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (m, n, pairs, a, lda, b, tile);
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::PANEL;
    use std::arch::x86_64::*;

    /// Rows of A a tile takes: 12 rows by two panels is 24 accumulators.
    const MR: usize = 12;

    /// # Safety
    /// AVX512_BF16 present; `a`, `b` and `tile` hold the shapes.
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    pub(super) unsafe fn product(
        m: usize,
        n: usize,
        pairs: usize,
        a: &[u16],
        lda: usize,
        b: &[u16],
        tile: &mut [f32],
    ) {
        let panels = n.div_ceil(PANEL);
        let mask = |s: usize| -> __mmask16 {
            let w = (n - s * PANEL).min(PANEL);
            if w == PANEL {
                0xffff
            } else {
                (1u16 << w) - 1
            }
        };
        let (ap, bp, cp) = (a.as_ptr(), b.as_ptr(), tile.as_mut_ptr());
        let mut s = 0;
        while s < panels {
            let two = panels - s >= 2;
            let (m0, m1) = (mask(s), if two { mask(s + 1) } else { 0 });
            let mut i = 0;
            while i < m {
                let rows = (m - i).min(MR);
                // SAFETY: rows i..i + rows of A, panels s (and s + 1 when
                // `two`) of B and C's columns under the masks are inside
                // the shapes.
                unsafe {
                    let (a, b, c) = (
                        ap.add(i * lda),
                        bp.add(s * pairs * 2 * PANEL),
                        cp.add(i * n + s * PANEL),
                    );
                    macro_rules! go {
                        ($($r:literal),*) => {
                            match (rows, two) {
                                $(($r, true) => tile_of::<$r, 2>(pairs, a, lda, b, c, n, m0, m1),
                                  ($r, false) => tile_of::<$r, 1>(pairs, a, lda, b, c, n, m0, m1),)*
                                _ => {}
                            }
                        };
                    }
                    go!(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12);
                }
                i += rows;
            }
            s += if two { 2 } else { 1 };
        }
    }

    /// `R` rows of A (`lda` apart) against `P` adjacent panels, over every
    /// pair of `k`.
    ///
    /// # Safety
    /// As [`product`], for this tile.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile_of<const R: usize, const P: usize>(
        pairs: usize,
        a: *const u16,
        lda: usize,
        b: *const u16,
        c: *mut f32,
        ldc: usize,
        m0: __mmask16,
        m1: __mmask16,
    ) {
        let masks = [m0, m1];
        let panel = pairs * 2 * PANEL;
        let mut acc = [[_mm512_setzero_ps(); P]; R];
        for p in 0..pairs {
            // SAFETY: pair p of each panel and of each of the R rows.
            unsafe {
                let bv: [__m512bh; P] = std::array::from_fn(|q| {
                    let v = _mm512_loadu_si512(b.add(q * panel + p * 2 * PANEL) as *const _);
                    std::mem::transmute::<__m512i, __m512bh>(v)
                });
                for (r, row) in acc.iter_mut().enumerate() {
                    let word = std::ptr::read_unaligned(a.add(r * lda + 2 * p) as *const i32);
                    let av = std::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(word));
                    for (v, &bq) in row.iter_mut().zip(&bv) {
                        *v = _mm512_dpbf16_ps(*v, av, bq);
                    }
                }
            }
        }
        for (r, row) in acc.iter().enumerate() {
            for (q, &v) in row.iter().enumerate() {
                // SAFETY: C's row r, panel q's columns under its mask.
                unsafe {
                    let dst = c.add(r * ldc + q * PANEL);
                    if masks[q] == 0xffff {
                        _mm512_storeu_ps(dst, v);
                    } else {
                        _mm512_mask_storeu_ps(dst, masks[q], v);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::float::f32_to_bf16_bits;
    use crate::{quantize, GgmlType};
    use threads::ThreadPool;

    /// The AVX512_BF16 kernel (where the CPU has it) gives the bits of the
    /// f32 packed GEMM over the swapped, rounded operands, which every
    /// other CPU runs; and both agree with a sum in f64 of the rounded
    /// operands. Shapes leave partial panels, row tiles and blocks, an odd
    /// `k`, and sums long enough to cross the f32 GEMM's blocks of `k`.
    #[test]
    fn both_paths_give_the_same_bits() {
        let mut seed = 21u64;
        let mut next = move || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        };
        let dot = crate::simd::best().has_bf16_dot();
        let pool = ThreadPool::new(2);
        for (rows, cols, batch) in [(300, 40, 300), (37, 641, 19), (16, 2, 13), (5, 1, 3)] {
            let w: Vec<f32> = (0..rows * cols).map(|_| next()).collect();
            let x: Vec<f32> = (0..batch * cols).map(|_| next()).collect();
            let mut bytes = vec![0u8; rows * cols * 2];
            quantize(GgmlType::BF16, &w, &mut bytes).unwrap();
            let m = Matrix::new(GgmlType::BF16, rows, cols, &bytes).unwrap();
            // Rows padded apart, an odd length's pair filled out with zero.
            let lda = cols.next_multiple_of(2) + 4;
            let mut acts = vec![0u16; batch * lda];
            for (dst, src) in acts.chunks_exact_mut(lda).zip(x.chunks_exact(cols)) {
                for (d, &v) in dst.iter_mut().zip(src) {
                    *d = f32_to_bf16_bits(v);
                }
            }
            let run = |dot: bool| {
                let mut out = vec![f32::NAN; batch * rows];
                let shared = SharedOut::of(&mut out, batch * rows);
                bf16_gemm(&pool, &m, &acts, lda, batch, &shared, dot).unwrap();
                out
            };
            let swapped = run(false);
            if dot {
                let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(&run(true)),
                    bits(&swapped),
                    "{rows}x{cols} batch {batch}"
                );
            }
            let mut row = vec![0.0f32; cols];
            for r in 0..rows {
                m.dequantize_row(r, &mut row).unwrap();
                for b in 0..batch {
                    let want: f64 = row
                        .iter()
                        .zip(&x[b * cols..(b + 1) * cols])
                        .map(|(&a, &c)| a as f64 * bf16_bits_to_f32(f32_to_bf16_bits(c)) as f64)
                        .sum();
                    let got = swapped[b * rows + r] as f64;
                    assert!(
                        (got - want).abs() < 1e-4,
                        "{rows}x{cols} row {r} batch {b}: {got} vs {want}"
                    );
                }
            }
        }
    }
}
