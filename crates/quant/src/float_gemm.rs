//! Float weights (F32, F16; BF16 in [`crate::bf16_gemm`]) against a batch
//! of activations: each task
//! widens a block of the weight's rows into f32 panels once, in its own
//! cache, and runs the packed GEMM ([`crate::sgemm_packed`]) over a block
//! of activation rows. Against a dot product per (row, activation row),
//! which converts every weight element once per activation row, the weights
//! are converted once per block of activation rows and read from L2.

use crate::matmul::{Matrix, SharedOut};
use crate::sgemm_packed::{sgemm_packed, PackedB, PANEL};
use crate::QuantError;
use std::cell::RefCell;
use threads::{FirstError, ThreadPool};

/// Weight rows per block: sixteen panels.
const BLOCK_ROWS: usize = 16 * PANEL;
/// Activation rows per block.
const BLOCK_BATCH: usize = 256;

/// `out = W x` for `batch` rows of `x` through the float matrix `w`, the
/// output shared as `out` (`batch` rows of `w.rows()`).
pub(crate) fn float_gemm(
    pool: &ThreadPool,
    w: &Matrix,
    x: &[f32],
    batch: usize,
    out: &SharedOut,
) -> Result<(), QuantError> {
    let cols = w.cols();
    for_each_block(pool, w.rows(), batch, out, |block, tile| {
        SCRATCH.with(|scratch| {
            let Scratch { packed, widened } = &mut *scratch.borrow_mut();
            if block.new_rows {
                pack_rows(w, block.r0, block.n, packed, widened)?;
            }
            let a = &x[block.b0 * cols..(block.b0 + block.m) * cols];
            sgemm_packed(block.m, a, cols, packed, tile, block.n)
        })
    })
}

/// One task's share of a batched product: weight rows `r0..r0 + n`
/// against activation rows `b0..b0 + m`.
#[derive(Clone, Copy)]
pub(crate) struct Block {
    pub r0: usize,
    pub n: usize,
    pub b0: usize,
    pub m: usize,
    /// Whether the thread's last block had other weight rows (its packed
    /// panels must be made again).
    pub new_rows: bool,
}

/// Runs `f` for every block of [`BLOCK_ROWS`] weight rows by
/// [`BLOCK_BATCH`] activation rows, shared out over `pool` by weight rows
/// first (so each thread's panels serve every activation block it takes);
/// `f` fills the `m × n` tile it is given, which goes to `out` (`batch` rows
/// of `rows`). The first error stops the product.
pub(crate) fn for_each_block(
    pool: &ThreadPool,
    rows: usize,
    batch: usize,
    out: &SharedOut,
    f: impl Fn(Block, &mut Vec<f32>) -> Result<(), QuantError> + Sync,
) -> Result<(), QuantError> {
    let row_blocks = rows.div_ceil(BLOCK_ROWS);
    let batch_blocks = batch.div_ceil(BLOCK_BATCH);
    let failure = FirstError::new();
    let tasks = row_blocks * batch_blocks;
    let per_task = tasks.div_ceil(pool.threads()).max(1);
    pool.run(tasks.div_ceil(per_task), |t| {
        TILE.with(|tile| {
            let tile = &mut *tile.borrow_mut();
            let mut packed_block = usize::MAX;
            for task in t * per_task..((t + 1) * per_task).min(tasks) {
                let (rb, bb) = (task / batch_blocks, task % batch_blocks);
                let (r0, b0) = (rb * BLOCK_ROWS, bb * BLOCK_BATCH);
                let block = Block {
                    r0,
                    n: BLOCK_ROWS.min(rows - r0),
                    b0,
                    m: BLOCK_BATCH.min(batch - b0),
                    new_rows: packed_block != rb,
                };
                packed_block = rb;
                tile.resize(block.m * block.n, 0.0);
                if let Err(e) = f(block, tile) {
                    return failure.set(e);
                }
                for (i, vals) in tile.chunks_exact(block.n).enumerate() {
                    // SAFETY: rows r0..r0 + n of activation rows b0..b0 + m
                    // belong to this task alone.
                    unsafe { out.slice((b0 + i) * rows + r0, block.n) }.copy_from_slice(vals);
                }
            }
        })
    });
    failure.into_result()
}

/// A thread's panels and widened rows, kept from product to product: fresh
/// ones (megabytes each) were pages to fault in and zero for every product
/// of an encoder's.
#[derive(Default)]
struct Scratch {
    packed: PackedB,
    widened: Vec<f32>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
    /// A thread's output tile, kept as its panels are.
    static TILE: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Rows `r0..r0 + n` of `w`, widened to f32, as the packed `cols × n`
/// right-hand side (its columns are the rows). A panel's 16 rows are widened
/// first, then interleaved, so the panel is written front to back.
fn pack_rows(
    w: &Matrix,
    r0: usize,
    n: usize,
    packed: &mut PackedB,
    rows: &mut Vec<f32>,
) -> Result<(), QuantError> {
    let cols = w.cols();
    // Every element is written below, the padding of a short panel too.
    packed.reshape(cols, n);
    rows.resize(PANEL * cols, 0.0);
    for s in 0..n.div_ceil(PANEL) {
        let width = PANEL.min(n - s * PANEL);
        for (jj, row) in rows.chunks_exact_mut(cols).enumerate() {
            if jj < width {
                w.dequantize_row(r0 + s * PANEL + jj, row)?;
            } else {
                // The padding of a short panel.
                row.fill(0.0);
            }
        }
        packed.fill_panel_from_rows(s, rows);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::{matmul, quantize, GgmlType, Matrix, Product};
    use threads::ThreadPool;

    /// A batched product through the packed GEMM against a sum in f64 of
    /// the same (stored-precision) weights, for each float type, with
    /// shapes that leave partial blocks of rows and of activations.
    #[test]
    fn batched_float_products_match_an_f64_reference() {
        let (rows, cols, batch) = (300, 40, 300);
        let mut seed = 9u64;
        let mut next = move || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        };
        let w: Vec<f32> = (0..rows * cols).map(|_| next()).collect();
        let x: Vec<f32> = (0..batch * cols).map(|_| next()).collect();
        let pool = ThreadPool::new(2);
        for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
            let mut bytes = vec![0u8; rows * crate::row_size(ty, cols).unwrap()];
            quantize(ty, &w, &mut bytes).unwrap();
            let m = Matrix::new(ty, rows, cols, &bytes).unwrap();
            let mut out = vec![0.0f32; batch * rows];
            matmul(
                &pool,
                Product::new(&[&m], &x, batch),
                &mut [&mut out[..]],
                &mut Vec::new(),
            )
            .unwrap();
            // BF16 weights take the activations rounded to bf16.
            let xs: Vec<f32> = if ty == GgmlType::BF16 {
                x.iter()
                    .map(|&v| crate::formats::float::round_to_bf16(v))
                    .collect()
            } else {
                x.clone()
            };
            let mut row = vec![0.0f32; cols];
            for r in 0..rows {
                m.dequantize_row(r, &mut row).unwrap();
                for b in 0..batch {
                    let want: f64 = row
                        .iter()
                        .zip(&xs[b * cols..(b + 1) * cols])
                        .map(|(&a, &c)| a as f64 * c as f64)
                        .sum();
                    let got = out[b * rows + r] as f64;
                    assert!(
                        (got - want).abs() < 1e-5,
                        "{ty:?} row {r} batch {b}: {got} vs {want}"
                    );
                }
            }
        }
    }

    /// A row's products do not depend on the rows beside it in the batch,
    /// so a sequence gets the same bits alone and in a shared batch.
    #[test]
    fn a_rows_products_do_not_depend_on_the_batch() {
        let (rows, cols) = (96, 64);
        let w: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 7919 % 1000) as f32 / 1000.0) - 0.5)
            .collect();
        let x: Vec<f32> = (0..19 * cols)
            .map(|i| ((i * 104729 % 997) as f32 / 997.0) - 0.5)
            .collect();
        let pool = ThreadPool::new(2);
        let mut bytes = vec![0u8; rows * crate::row_size(GgmlType::F32, cols).unwrap()];
        quantize(GgmlType::F32, &w, &mut bytes).unwrap();
        let m = Matrix::new(GgmlType::F32, rows, cols, &bytes).unwrap();
        let (mut a, mut b) = (vec![0.0f32; 17 * rows], vec![0.0f32; 19 * rows]);
        matmul(
            &pool,
            Product::new(&[&m], &x[..17 * cols], 17),
            &mut [&mut a[..]],
            &mut Vec::new(),
        )
        .unwrap();
        matmul(
            &pool,
            Product::new(&[&m], &x, 19),
            &mut [&mut b[..]],
            &mut Vec::new(),
        )
        .unwrap();
        assert_eq!(a, b[..17 * rows]);
    }
}
