//! Attention among all positions, with no mask (the vision towers'): every
//! query sees every key, as blocked products over whole register tiles.

use quant::vector::{PackedB, PANEL};
use quant::QuantError;
use threads::{FirstError, ThreadPool};

/// Query rows per attention task: each task holds one block's scores for
/// one head at a time (`BLOCK × positions` floats).
const ATTENTION_BLOCK: usize = 64;

/// Full (bidirectional) multi-head attention among all positions
/// (a tower's patches or frames):
/// `out[:, head] = softmax(scale · q_h k_hᵀ) v_h`, computed transposed so
/// that every product runs on whole register tiles and the softmax runs down
/// columns with no horizontal sums:
///
/// - each head's keys (`n × dh`, contiguous) and values transposed
///   (`dh × n`) are laid out once;
/// - head by head, each task takes a block of query rows: the scaled
///   queries packed as `q_hᵀ` (`dh × rows`), the scores `k_h · q_hᵀ`
///   (`n × rows`) written straight into packed panels of 16 queries, a
///   softmax down each query's column (16 queries a vector), `v_hᵀ · P`
///   (`dh × rows`), and each query's output divided by its sum of
///   exponentials.
///
/// A block's scores take `64 × n` floats (1 MiB at 4096 patches), so they
/// stay in L2 between the two products.
#[allow(clippy::too_many_arguments)]
pub fn attention(
    pool: &ThreadPool,
    heads: usize,
    dh: usize,
    scale: f32,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    out: &mut [f32],
    packs: &mut Vec<HeadOperands>,
) -> Result<(), QuantError> {
    let d = heads * dh;
    let n = q.len() / d;
    // A value row's stride: a multiple of 4 KiB would put the twelve rows
    // a tile reads in one L1 set.
    let ldv = n + 16;
    packs.resize_with(heads, Default::default);
    pool.for_each_chunk_mut(&mut packs[..], 1, |h, slot| {
        let HeadOperands { keys, values_t } = &mut slot[0];
        keys.clear();
        for row in k.chunks_exact(d) {
            keys.extend_from_slice(&row[h * dh..(h + 1) * dh]);
        }
        values_t.clear();
        values_t.resize(dh * ldv, 0.0);
        for (j, row) in v.chunks_exact(d).enumerate() {
            for (c, &val) in row[h * dh..(h + 1) * dh].iter().enumerate() {
                values_t[c * ldv + j] = val;
            }
        }
    });
    let failure = FirstError::new();
    // Head by head, every thread on the same head: one head's keys and
    // values (2.4 MB at 4096 patches) stay in the shared cache while all
    // its query blocks read them; all heads' (38 MB) do not.
    for (h, ops) in packs.iter().enumerate() {
        pool.for_each_chunk_mut(out, ATTENTION_BLOCK * d, |b, chunk| {
            SCRATCH
                .with_borrow_mut(|scratch| {
                    let at = HeadBlock {
                        h,
                        d,
                        r0: b * ATTENTION_BLOCK,
                    };
                    attend_block(ops, at, chunk, q, (dh, n, ldv, scale), scratch)
                })
                .unwrap_or_else(|e| failure.set(e));
        });
    }
    failure.into_result()
}

/// Where a block of query rows sits: its head `h`, the row width `d` (all
/// heads), and its first row `r0`.
struct HeadBlock {
    h: usize,
    d: usize,
    r0: usize,
}

thread_local! {
    /// Each pool thread's attention scratch, kept between blocks and
    /// encodings: the scores alone are 1 MiB a block, and allocating them
    /// afresh cost page faults on every block.
    static SCRATCH: std::cell::RefCell<AttentionScratch> = Default::default();
}

/// One thread's buffers for [`attend_block`].
#[derive(Default)]
struct AttentionScratch {
    /// The block's scaled queries, transposed and packed.
    qt: PackedB,
    /// The block's scores, then exponentials (keys × queries, packed).
    scores: PackedB,
    /// `Vᵀ · P` (head width × queries).
    ot: Vec<f32>,
    /// Each query's sum of exponentials.
    sums: Vec<f32>,
}

/// The query rows of `at` (`chunk`'s rows) through head `at.h`, whose
/// operands are `ops`, for [`attention`]; `shape` is (head width, patches,
/// value row stride, scale).
fn attend_block(
    ops: &HeadOperands,
    at: HeadBlock,
    chunk: &mut [f32],
    q: &[f32],
    shape: (usize, usize, usize, f32),
    scratch: &mut AttentionScratch,
) -> Result<(), QuantError> {
    let (dh, n, ldv, scale) = shape;
    let HeadBlock { h, d, r0 } = at;
    let rows = chunk.len() / d;
    let AttentionScratch {
        qt,
        scores,
        ot,
        sums,
    } = scratch;
    ot.resize(dh * rows, 0.0);
    sums.resize(rows.div_ceil(PANEL) * PANEL, 0.0);
    qt.reset(dh, rows);
    let qd = qt.panels_mut();
    for i in 0..rows {
        let src = &q[(r0 + i) * d + h * dh..][..dh];
        let base = (i / PANEL) * dh * PANEL + i % PANEL;
        for (c, &val) in src.iter().enumerate() {
            qd[base + c * PANEL] = val * scale;
        }
    }
    quant::vector::sgemm_packed_to_panels(n, &ops.keys, dh, qt, scores)?;
    quant::activation::softmax_columns(scores.panels_mut(), n, sums);
    quant::vector::sgemm_packed(dh, &ops.values_t, ldv, scores, ot, rows)?;
    for (i, orow) in chunk.chunks_exact_mut(d).enumerate() {
        let inv = 1.0 / sums[i];
        for (c, o) in orow[h * dh..(h + 1) * dh].iter_mut().enumerate() {
            *o = ot[c * rows + i] * inv;
        }
    }
    Ok(())
}

/// One head's keys and transposed values, laid out for [`attention`].
#[derive(Default)]
pub struct HeadOperands {
    /// `n × dh`, row-major.
    keys: Vec<f32>,
    /// `dh × n`, rows `n + 16` apart.
    values_t: Vec<f32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The transposed, blocked attention is the textbook one.
    #[test]
    fn attention_matches_the_textbook_form() {
        let (heads, dh, n) = (3, 20, 150);
        let d = heads * dh;
        let gen = |seed: usize, len: usize| -> Vec<f32> {
            (0..len)
                .map(|i| ((i * 7 + seed * 13) as f32 * 0.173).sin() * 1.5)
                .collect()
        };
        let (q, k, v) = (gen(1, n * d), gen(2, n * d), gen(3, n * d));
        let scale = 0.3;
        let pool = ThreadPool::new(2);
        let mut out = vec![0.0f32; n * d];
        let mut packs = Vec::new();
        attention(&pool, heads, dh, scale, &q, &k, &v, &mut out, &mut packs).unwrap();
        for h in 0..heads {
            for i in 0..n {
                let mut w: Vec<f32> = (0..n)
                    .map(|j| {
                        (0..dh)
                            .map(|c| q[i * d + h * dh + c] * k[j * d + h * dh + c])
                            .sum::<f32>()
                            * scale
                    })
                    .collect();
                crate::softmax(&mut w);
                for c in 0..dh {
                    let want: f32 = (0..n).map(|j| w[j] * v[j * d + h * dh + c]).sum();
                    let got = out[i * d + h * dh + c];
                    assert!(
                        (got - want).abs() < 1e-5,
                        "head {h} row {i} col {c}: {got} vs {want}"
                    );
                }
            }
        }
    }
}
