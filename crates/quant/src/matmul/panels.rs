//! The panel product of a prefill batch (see [`crate::gemm`]): weight rows
//! packed into panels, activation rows swept past them.

use super::acts::{quantize_panel_acts, Ready, RowSource};
use super::plan::{
    panel_runs, sweep_rows, tasks_per_thread, PanelFormat, PanelRun, SharedOut, MAX_FUSED, PANELS,
};
use super::Matrix;
use crate::formats::interleave::GROUP_ROWS;
use crate::gemm::amx::{Tiles, MA};
use crate::gemm::{tile, tile_rows, Acts, Panel, NR};
use crate::simd::{self, GemmTier};
use crate::QuantError;
use std::cell::RefCell;
use std::ops::Range;
use threads::ThreadPool;

/// The panel product (see [`crate::gemm`]) of one or more matrices of the
/// same width and activation format (a layer's query and key projections,
/// its gate and up): the activations are quantized once (see
/// [`quantize_panel_acts`]), and one parallel operation computes every
/// matrix (see [`panels_product`]).
#[track_caller]
pub(super) fn gemm_panels(
    pool: &ThreadPool,
    tier: GemmTier,
    ws: &[&Matrix],
    x: &[f32],
    batch: usize,
    outs: &[SharedOut],
) {
    thread_local! {
        static ACTS: RefCell<Acts> = RefCell::new(Acts::default());
    }
    let Some(w0) = ws.first() else { return };
    let Some(format) = PanelFormat::of(w0.ty, w0.cols, batch, tier) else {
        return;
    };
    ACTS.with(|acts| {
        let mut acts = acts.borrow_mut();
        quantize_panel_acts(pool, format, RowSource::Given(x), &mut acts);
        panels_product(pool, tier, ws, &acts, batch, outs);
    });
}

/// The panel product of `ws` (same width and activation format) over the
/// activations `acts` quantized for them: one parallel operation, each
/// task packing its own run of weight panels and sweeping activation rows
/// past them (see [`PanelProduct::task`]).
///
/// Tasks are runs of panels (never across two matrices), several per
/// thread so threads that finish early take more. A product of few panels
/// for the threads (a 1152-row projection is 36 panels; sixteen threads
/// would do three rounds with the last a quarter full) also splits the
/// activation rows into blocks, each task one run and one block: the
/// panels are packed once per block, which costs less than idle threads.
#[track_caller]
pub(super) fn panels_product(
    pool: &ThreadPool,
    tier: GemmTier,
    ws: &[&Matrix],
    acts: &Acts,
    batch: usize,
    outs: &[SharedOut],
) {
    let Some(w0) = ws.first() else { return };
    // AMX blocks are MA (32) activation rows, the register tiles the
    // tier's own height (six on AVX-512, four elsewhere).
    let amx = tier == GemmTier::Amx;
    let rows_per_tile = tile_rows(tier);
    let step = if amx { MA } else { rows_per_tile };
    let product = PanelProduct {
        tier,
        amx,
        rows_per_tile,
        sweep: sweep_rows(step),
        cols: w0.cols,
        acts,
    };
    let split = TaskSplit::new(pool, ws, batch, step, product.sweep);
    pool.run(split.runs.len() * split.blocks, |t| {
        let (
            PanelRun {
                matrix,
                panels: mine,
            },
            block,
        ) = (split.runs[t / split.blocks].clone(), t % split.blocks);
        let (b0, b1) = (
            block * split.block_rows,
            ((block + 1) * split.block_rows).min(batch),
        );
        product.task(ws[matrix], &outs[matrix], mine, b0..b1);
    });
}

/// How the panel product's tasks share out the work: runs of panels, each
/// taken by `blocks` tasks, one per block of `block_rows` activation rows.
struct TaskSplit {
    /// The runs of panels, in the order the pool hands them out.
    runs: Vec<PanelRun>,
    /// The blocks of activation rows each run is split into.
    blocks: usize,
    /// The activation rows of a block (the last may have fewer).
    block_rows: usize,
}

impl TaskSplit {
    /// The split of `ws`'s panels over `pool`'s threads, for `batch`
    /// activation rows taken `step` at a time (a register tile's or an AMX
    /// block's) and swept `sweep` at a time.
    #[track_caller]
    fn new(pool: &ThreadPool, ws: &[&Matrix], batch: usize, step: usize, sweep: usize) -> Self {
        // Fixed arrays: at most MAX_FUSED matrices.
        let mut panels = [0usize; MAX_FUSED];
        for (p, w) in panels.iter_mut().zip(ws) {
            *p = w.rows.div_ceil(NR);
        }
        let aim = pool.threads() * tasks_per_thread();
        let runs = panel_runs(&panels[..ws.len()], aim, pool.threads());
        let blocks = if runs.len() >= aim {
            1
        } else {
            aim.div_ceil(runs.len().max(1))
                .min(batch.div_ceil(sweep))
                .max(1)
        };
        let block_rows = batch.div_ceil(blocks).div_ceil(step) * step;
        let blocks = batch.div_ceil(block_rows.max(1)).max(1);
        Self {
            runs,
            blocks,
            block_rows,
        }
    }
}

/// What every task of one panel product shares.
struct PanelProduct<'a> {
    tier: GemmTier,
    /// Whether AMX blocks of [`MA`] rows take the activations, rather than
    /// the tier's register tiles.
    amx: bool,
    /// The height of the tier's register tiles.
    rows_per_tile: usize,
    /// How many activation rows are swept past the packed panels at once.
    sweep: usize,
    /// The width of every matrix.
    cols: usize,
    acts: &'a Acts,
}

impl PanelProduct<'_> {
    /// One task: panels `mine` of `w` packed [`PANELS`] at a time, and
    /// each time the activation rows `b` swept past them into `out`.
    fn task(&self, w: &Matrix, out: &SharedOut, mine: Range<usize>, b: Range<usize>) {
        thread_local! {
            static PACKED: RefCell<Vec<Panel>> = const { RefCell::new(Vec::new()) };
            /// An interleaved matrix's panel rows copied out, kept from task to
            /// task so a prefill allocates none.
            static COPIED: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
        }
        PACKED.with(|packed| {
            COPIED.with(|copied| {
                let mut packed = packed.borrow_mut();
                packed.resize_with(PANELS, Panel::default);
                let mut tiles = self.amx.then(Tiles::new);
                let mut copied = copied.borrow_mut();
                let mut p0 = mine.start;
                while p0 < mine.end {
                    let p1 = (p0 + PANELS).min(mine.end);
                    self.pack(&mut packed, w, p0..p1, &mut copied);
                    self.sweep_acts(&packed, p0..p1, w.rows, out, b.clone(), &mut tiles);
                    p0 = p1;
                }
            })
        });
    }

    /// Packs `panels` of `w` into the start of `packed`: an
    /// interleaved matrix's whole panels straight from its groups where the
    /// tier can, else from the rows' standard layout (interleaved rows
    /// copied out into `copied` first).
    fn pack(&self, packed: &mut [Panel], w: &Matrix, panels: Range<usize>, copied: &mut Vec<u8>) {
        let (p0, p1) = (panels.start, panels.end);
        let (tier, cols, amx, rows) = (self.tier, self.cols, self.amx, w.rows);
        for (i, panel) in packed.iter_mut().enumerate().take(p1 - p0) {
            let r0 = (p0 + i) * NR;
            // A fixed array: this runs for every panel.
            let mut views: [&[u8]; NR] = [&[]; NR];
            let n = (rows - r0).min(NR);
            if w.grouped && n == NR {
                let g0 = r0 / GROUP_ROWS;
                let groups: [&[u8]; NR / GROUP_ROWS] = std::array::from_fn(|i| w.group(g0 + i));
                if panel.fill_interleaved(tier, w.ty, &groups, cols, amx) {
                    continue;
                }
            }
            if w.grouped {
                // Else interleaved rows are packed from their
                // standard layout, copied out a panel at a time.
                w.rows_into(r0, n, copied);
                for (v, row) in views.iter_mut().zip(copied.chunks_exact(w.row_bytes)) {
                    *v = row;
                }
            } else {
                for (v, r) in views.iter_mut().zip(r0..r0 + n) {
                    *v = w.row(r);
                }
            }
            panel.fill_on(tier, w.ty, &views[..n], cols, amx);
        }
    }

    /// Sweeps the activation rows `b`, `self.sweep` at a time, past the
    /// packed panels `panels` of a matrix of `rows` rows, writing the
    /// products into `out`: through AMX `tiles` where there are, else
    /// through the tier's register tiles.
    fn sweep_acts(
        &self,
        packed: &[Panel],
        panels: Range<usize>,
        rows: usize,
        out: &SharedOut,
        b: Range<usize>,
        tiles: &mut Option<Tiles>,
    ) {
        let (p0, p1, b0, b1) = (panels.start, panels.end, b.start, b.end);
        let (rows_per_tile, acts) = (self.rows_per_tile, self.acts);
        for c0 in (b0..b1).step_by(self.sweep) {
            let c1 = (c0 + self.sweep).min(b1);
            for (i, panel) in packed.iter().enumerate().take(p1 - p0) {
                let r0 = (p0 + i) * NR;
                let n = (rows - r0).min(NR);
                if let Some(tiles) = tiles.as_mut() {
                    for c in (c0..c1).step_by(MA) {
                        let m = (c1 - c).min(MA);
                        let v = tiles.block(panel, acts, c, m);
                        for (j, vj) in v.iter().enumerate().take(m) {
                            // SAFETY: as below.
                            unsafe { out.slice((c + j) * rows + r0, n) }.copy_from_slice(&vj[..n]);
                        }
                    }
                    continue;
                }
                for c in (c0..c1).step_by(rows_per_tile) {
                    let m = (c1 - c).min(rows_per_tile);
                    let v = tile(self.tier, panel, acts, c, m);
                    for (j, vj) in v.iter().enumerate().take(m) {
                        // SAFETY: weight rows r0..r0+n of rows
                        // b0..b1 belong to this task alone, and
                        // this slice is the only one alive.
                        unsafe { out.slice((c + j) * rows + r0, n) }.copy_from_slice(&vj[..n]);
                    }
                }
            }
        }
    }
}

/// The products of up to [`MAX_FUSED`] matrices over a batch that takes
/// the panel product (shapes checked): the matrices that share an
/// activation format go as one product (see [`gemm_panels`]), the rest one
/// at a time (see [`super::single`]). The same numbers as each matrix's
/// product alone: a panel's sums do not depend on what else runs. The
/// format `input` holds is not quantized again.
#[track_caller]
#[allow(clippy::too_many_arguments)]
pub(super) fn products(
    pool: &ThreadPool,
    k: &simd::Kernels,
    ws: &[&Matrix],
    x: &[f32],
    batch: usize,
    outs: &mut [&mut [f32]],
    scratch: &mut Vec<u8>,
    input: Option<&Ready<'_>>,
) -> Result<(), QuantError> {
    let format = |w: &Matrix| PanelFormat::for_product(k, w, batch);
    let mut done = [false; MAX_FUSED];
    for i in 0..ws.len() {
        if done[i] {
            continue;
        }
        let Some(f) = format(ws[i]) else {
            super::single(pool, k, ws[i], x, batch, outs[i], scratch)?;
            done[i] = true;
            continue;
        };
        // Every later matrix of this format joins the product.
        let mut group: [&Matrix; MAX_FUSED] = [ws[i]; MAX_FUSED];
        let mut shared: [SharedOut; MAX_FUSED] = std::array::from_fn(|_| SharedOut::empty());
        let mut n = 0;
        for j in i..ws.len() {
            if !done[j] && format(ws[j]) == Some(f) {
                group[n] = ws[j];
                shared[n] = SharedOut::of(outs[j], batch * ws[j].rows);
                done[j] = true;
                n += 1;
            }
        }
        match input.and_then(|r| r.panel(f)) {
            Some(acts) => panels_product(pool, k.gemm, &group[..n], acts, batch, &shared[..n]),
            None => gemm_panels(pool, k.gemm, &group[..n], x, batch, &shared[..n]),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::GgmlType;

    /// The panel product on the AMX tier (its instructions emulated where the
    /// CPU lacks them) writes the portable tier's numbers: whole and partial
    /// 16-row blocks, row blocks split over threads, fused matrices of two
    /// formats' worth of panels, partial panels.
    #[test]
    fn amx_panel_product_matches_portable() {
        let pool = ThreadPool::new(3);
        let cols = 512;
        for (ty, rows, batch) in [
            (GgmlType::Q4_K, 70, 16),
            (GgmlType::Q6_K, 45, 37),
            (GgmlType::Q8_0, 33, 100),
            (GgmlType::Q5_0, 96, 21),
        ] {
            let mut seed = 0x1234_5678_u64 ^ rows as u64;
            let mut next = move || {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                (seed >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
            };
            let wf: Vec<f32> = (0..rows * cols).map(|_| next()).collect();
            let x: Vec<f32> = (0..batch * cols).map(|_| next() * 3.0).collect();
            let rb = crate::row_size(ty, cols).unwrap();
            let mut bytes = vec![0u8; rb * rows];
            crate::quantize(ty, &wf, &mut bytes).unwrap();
            let w = Matrix::new(ty, rows, cols, &bytes).unwrap();
            let run = |tier| {
                let mut out = vec![0.0f32; batch * rows * 2];
                let (a, b) = out.split_at_mut(batch * rows);
                let shared = [SharedOut::of(a, a.len()), SharedOut::of(b, b.len())];
                gemm_panels(&pool, tier, &[&w, &w], &x, batch, &shared);
                out
            };
            let want = run(GemmTier::Portable);
            let got = run(GemmTier::Amx);
            assert!(want.iter().any(|&v| v != 0.0), "{ty}");
            assert_eq!(want, got, "{ty} rows {rows} batch {batch}");
        }
    }
}
