//! How a product is planned: which path a batch takes, how its rows or
//! panels are shared out over the threads, and the buffer the tasks share.

use super::Matrix;
use crate::simd::{self, GemmTier};
use crate::{vec_dot_type, GgmlType};

/// Rows computed together for every batch entry, so their weights stay in cache
/// while the activations stream past.
pub(super) const ROW_TILE: usize = 16;

/// Batches from this size on take the panel GEMM where the CPU has it.
///
/// Below it every row of a product comes out with the bits it has alone,
/// which keeps a served greedy reply equal to `hearth complete`'s (the
/// server feeds a prompt's last token in a decode step of its own). From 8
/// rows on the panel product is faster (docs/perf/speed.md, "The product's
/// shape"), but short prompts then split differently between the two and
/// their greedy replies part; that trade is not taken here.
pub(super) const GEMM_MIN_BATCH: usize = 16;

/// The most rows a product computes each as a decode step does, to the bit
/// (one fewer than [`GEMM_MIN_BATCH`]): the longest verifying batch that
/// keeps speculation's greedy output the same as without.
pub const ROW_BATCH_MAX: usize = GEMM_MIN_BATCH - 1;

/// Panels packed together; their activations are swept in [`SWEEP`]-row
/// blocks, so the packed panels and the swept activations both stay in L2.
pub(super) const PANELS: usize = 8;

/// Tasks per thread the panel product aims for (see [`super::panels::gemm_panels`]):
/// [`DEFAULT_GEMM_SPLIT`], or `HEARTH_GEMM_SPLIT` (1 to 64), for measuring.
/// A product ends when its last task does, so the threads that finish
/// early wait for the last: more, smaller tasks shorten that wait and
/// cost nothing else (a task's panels are packed once either way), and the
/// last tasks are shorter still (see [`panel_runs`]).
pub(super) fn tasks_per_thread() -> usize {
    static SPLIT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *SPLIT.get_or_init(|| split_from_env("HEARTH_GEMM_SPLIT", DEFAULT_GEMM_SPLIT))
}

/// A parts-per-thread setting from the environment variable `var` (1 to
/// 64), else `default`: the knobs the split of the products is measured by.
pub(super) fn split_from_env(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
        .clamp(1, 64)
}

/// The panel product's tasks per thread unless `HEARTH_GEMM_SPLIT` says.
const DEFAULT_GEMM_SPLIT: usize = 4;

/// Activation rows per sweep over the packed panels, at most: whole tiles
/// of the tier's height, 64 rows of four or 60 of six (see [`sweep_rows`]).
pub(super) const SWEEP: usize = 64;

/// The rows of one sweep for tiles of `rows_per_tile`: the most whole tiles
/// within [`SWEEP`], so that only a batch's last tile is short.
pub(super) fn sweep_rows(rows_per_tile: usize) -> usize {
    (SWEEP / rows_per_tile.max(1)).max(1) * rows_per_tile.max(1)
}

/// What the panel product's activations are quantized as: the activation
/// format, the weight format's group length and offset (see
/// [`crate::gemm::Acts`]), the width, the batch and the tier (AMX also
/// wants the unsigned copy). Matrices of one format share one quantization.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PanelFormat {
    pub(super) at: GgmlType,
    pub(super) g: usize,
    pub(super) off: i32,
    pub(super) cols: usize,
    pub(super) batch: usize,
    pub(super) tier: GemmTier,
}

impl PanelFormat {
    /// The format for weights of `ty`, or `None` where the type has no
    /// panel product.
    pub(super) fn of(ty: GgmlType, cols: usize, batch: usize, tier: GemmTier) -> Option<Self> {
        crate::gemm::group_len(ty).map(|g| Self {
            at: vec_dot_type(ty),
            g,
            off: crate::gemm::offset(ty),
            cols,
            batch,
            tier,
        })
    }

    /// The format of `w`'s product over `batch` rows through `k`, where
    /// that is a panel product (a batch of [`GEMM_MIN_BATCH`] rows or
    /// more, of a type with integer kernels and panels).
    pub(super) fn for_product(k: &simd::Kernels, w: &Matrix, batch: usize) -> Option<Self> {
        let panel = batch >= GEMM_MIN_BATCH && k.quantized(w.ty);
        panel
            .then(|| Self::of(w.ty, w.cols, batch, k.gemm))
            .flatten()
    }
}

/// A task of the panel product: a run of one matrix's panels.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct PanelRun {
    pub(super) matrix: usize,
    pub(super) panels: std::ops::Range<usize>,
}

/// The panel product's tasks over matrices of `panels[m]` panels each, in
/// the order the pool hands them out: about `aim` runs of at most
/// [`PANELS`], never across two matrices, and shorter ones towards the end
/// (once fewer than two runs a thread are left, a run takes about half of
/// its thread's share of what remains), so the threads that finish first
/// wait for a short run instead of a whole one. One thread waits for none,
/// and its runs stay whole (each run sweeps the activations once more).
pub(super) fn panel_runs(panels: &[usize], aim: usize, threads: usize) -> Vec<PanelRun> {
    let total: usize = panels.iter().sum();
    let per_task = total.div_ceil(aim.max(1)).clamp(1, PANELS);
    let shrink = if threads > 1 { 2 * threads } else { 1 };
    let mut runs = Vec::new();
    let mut left = total;
    for (matrix, &n) in panels.iter().enumerate() {
        let mut p0 = 0;
        while p0 < n {
            let len = left.div_ceil(shrink).clamp(1, per_task).min(n - p0);
            runs.push(PanelRun {
                matrix,
                panels: p0..p0 + len,
            });
            p0 += len;
            left -= len;
        }
    }
    runs
}

/// A buffer shared by tasks that each write a disjoint part of it.
pub(crate) struct Shared<T> {
    pub(super) ptr: *mut T,
    pub(super) len: usize,
}

/// The output buffer shared by tasks that each write a disjoint set of rows.
pub(crate) type SharedOut = Shared<f32>;

/// The ready activations' bytes, which tasks write in disjoint blocks.
pub(super) type SharedBytes = Shared<u8>;

// SAFETY: tasks write only the parts that are theirs (their row ranges, or
// the blocks whose counts they complete), so no two threads touch the same
// element, and the buffer outlives the parallel scope.
unsafe impl<T: Send> Sync for Shared<T> {}
// SAFETY: as above; the pointer is only dereferenced inside the scope of the borrow.
unsafe impl<T: Send> Send for Shared<T> {}

impl<T: Copy> Shared<T> {
    /// A buffer of no elements, a placeholder in fixed arrays.
    pub(crate) fn empty() -> Self {
        Shared {
            ptr: std::ptr::NonNull::dangling().as_ptr(),
            len: 0,
        }
    }

    /// The first `len` elements of `buf`, to share (at most `buf.len()`).
    pub(crate) fn of(buf: &mut [T], len: usize) -> Self {
        Shared {
            ptr: buf.as_mut_ptr(),
            len: len.min(buf.len()),
        }
    }

    /// The `n` elements from `start`.
    ///
    /// # Safety
    /// No other thread may access them while the slice lives, and no other
    /// slice of them may be live.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn slice(&self, start: usize, n: usize) -> &mut [T] {
        assert!(start.checked_add(n).is_some_and(|e| e <= self.len));
        // SAFETY: in bounds (checked above); exclusivity is the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(start), n) }
    }

    /// The `n` elements from `start`, to read.
    ///
    /// # Safety
    /// No thread may write them while the slice lives.
    pub(super) unsafe fn view(&self, start: usize, n: usize) -> &[T] {
        assert!(start.checked_add(n).is_some_and(|e| e <= self.len));
        // SAFETY: in bounds (checked above); no writer is the caller's contract.
        unsafe { std::slice::from_raw_parts(self.ptr.add(start), n) }
    }

    /// Writes `v` at `i`.
    ///
    /// # Safety
    /// No other thread may access index `i` concurrently.
    #[inline]
    pub(super) unsafe fn write(&self, i: usize, v: T) {
        assert!(i < self.len);
        // SAFETY: in bounds (checked above); exclusivity is the caller's contract.
        unsafe { *self.ptr.add(i) = v }
    }
}

/// How a decode product's rows are shared out over the pool's threads: in
/// parts claimed as threads free up, whole ones first and shorter ones
/// towards the end.
///
/// Several parts per thread: when every core streams weights at once,
/// memory serves them unevenly, and with one part each the product waits
/// for the slowest while the rest idle. Equal parts still left the threads
/// that finished first waiting for up to a whole part at the end of every
/// product (docs/perf/speed.md, "The product's shape"), so once a
/// thread's share of what is left is under two parts, each part takes
/// half of it and an eighth of a whole part more (guided self-scheduling),
/// down to parts of about that eighth (at least [`MIN_PART_ROWS`] rows).
/// The parts' bounds have a closed form, so each task finds its own with no
/// table made per product.
/// `HEARTH_DECODE_SPLIT` sets the whole parts per thread (1 to 64, default
/// 4) for measuring.
#[derive(Clone, Copy, Debug)]
pub(super) struct DecodeSplit {
    /// The rows shared out.
    rows: usize,
    /// Rows in each whole part.
    per: usize,
    /// Whole parts, before the shrinking ones.
    whole: usize,
    /// The shrinking parts.
    shrinking: usize,
    /// The rows the shrinking parts share (those after the whole parts).
    left: f64,
    /// The ratio of rows left from one shrinking part to the next, with
    /// [`Self::c`] added: `1 - 1 / (2 threads)`.
    q: f64,
    /// Twice the threads times the length the shrinking parts approach (an
    /// eighth of a whole part, at least [`MIN_PART_ROWS`] rows).
    c: f64,
}

impl DecodeSplit {
    /// The split of `rows` over `threads`.
    pub(super) fn new(threads: usize, rows: usize) -> DecodeSplit {
        static SPLIT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        let split = *SPLIT.get_or_init(|| split_from_env("HEARTH_DECODE_SPLIT", 4));
        if threads <= 1 || rows <= MIN_PART_ROWS {
            return DecodeSplit {
                rows,
                per: rows,
                whole: rows.min(1),
                shrinking: 0,
                left: 0.0,
                q: 0.0,
                c: 0.0,
            };
        }
        let per = rows
            .div_ceil(threads * split)
            .next_multiple_of(MIN_PART_ROWS)
            .max(MIN_PART_ROWS);
        let shares = 2 * threads;
        // Whole parts while at least two of them a thread are left.
        let whole = rows.saturating_sub(shares * per) / per;
        let left = (rows - whole * per) as f64;
        // The shrinking parts' rows left, `r(j)`, follow
        // `r(j+1) = r(j) - (r(j) + c) / shares` with `c = shares * least`,
        // so `r(j) + c = (left + c) * q^j`, `q = 1 - 1 / shares`; they end
        // at the first `j` where that reaches 0.
        let least = (per / 8 / ROW_TILE * ROW_TILE).max(MIN_PART_ROWS) as f64;
        let c = shares as f64 * least;
        let q = 1.0 - 1.0 / shares as f64;
        let shrinking = (((left + c) / c).ln() / -q.ln()).ceil().max(1.0) as usize;
        DecodeSplit {
            rows,
            per,
            whole,
            shrinking,
            left,
            q,
            c,
        }
    }

    /// How many parts there are (some may be empty).
    pub(super) fn parts(&self) -> usize {
        self.whole + self.shrinking
    }

    /// Where part `k` starts; part `parts()` starts at `rows`.
    pub(super) fn start(&self, k: usize) -> usize {
        if k <= self.whole {
            return (k * self.per).min(self.rows);
        }
        let j = k - self.whole;
        if j >= self.shrinking {
            return self.rows;
        }
        let (left, c) = (self.left, self.c);
        let rest = (((left + c) * self.q.powi(j as i32) - c).max(0.0) as usize).min(left as usize);
        // Bounds on whole tiles of rows, except at the end (the whole
        // parts' end is on one, so they stay in order).
        (self.rows - rest) / ROW_TILE * ROW_TILE
    }

    /// The rows of part `k`.
    pub(super) fn range(&self, k: usize) -> std::ops::Range<usize> {
        self.start(k)..self.start(k + 1)
    }
}

/// The rows a decode part gets at least when parts are more than the
/// threads (see [`DecodeSplit`]): claiming a part costs an atomic add on a
/// line every thread shares, and its rows restart the prefetch.
pub(super) const MIN_PART_ROWS: usize = 16;

/// The most matrices one product runs as one operation (a layer's query, key and
/// value projections); more go one at a time.
pub(super) const MAX_FUSED: usize = 4;

#[cfg(test)]
mod tests {
    use super::*;

    /// A decode product's parts cover every row once, in order, on whole
    /// tiles of rows; no more than a few times the even split's count, and
    /// shorter towards the end: the last non-empty part is at most two
    /// tiles wherever the threads have several parts each, and none is
    /// over half a thread's share of what is left plus a tile. One thread
    /// takes all the rows in one part.
    #[test]
    fn decode_parts_cover_each_row_once_and_shrink_at_the_end() {
        for threads in [1, 2, 3, 4, 8, 16, 64] {
            for rows in [
                0, 1, 15, 16, 17, 100, 256, 640, 1152, 2048, 6912, 262_144, 262_145,
            ] {
                let split = DecodeSplit::new(threads, rows);
                // The length the shrinking parts approach.
                let least = (split.c / (2 * threads) as f64).round() as usize;
                let n = split.parts();
                assert!(
                    n <= 8 * threads.max(1) * 4 + 64,
                    "{threads} {rows}: {split:?}"
                );
                let mut next = 0;
                let mut last = 0..0;
                for k in 0..n {
                    let r = split.range(k);
                    assert_eq!(r.start, next, "{threads} {rows}: {split:?} part {k}");
                    assert!(r.start <= r.end);
                    assert!(
                        r.end == rows || r.end.is_multiple_of(ROW_TILE),
                        "{rows}: {r:?}"
                    );
                    let left = rows - r.start;
                    if threads > 1 && k >= split.whole {
                        assert!(
                            r.len() <= left.div_ceil(2 * threads) + least + ROW_TILE,
                            "{threads} {rows}: part {k} {r:?} of {left} left"
                        );
                    }
                    if !r.is_empty() {
                        last = r.clone();
                    }
                    next = r.end;
                }
                assert_eq!(next, rows, "{threads} {rows}: {split:?}");
                if threads == 1 {
                    assert_eq!(n, rows.min(1));
                } else if rows >= 8 * threads * MIN_PART_ROWS {
                    assert!(
                        last.len() <= least + 2 * ROW_TILE
                            && (split.per < 8 * ROW_TILE || last.len() <= split.per / 2),
                        "{threads} {rows}: last {last:?} of {split:?}"
                    );
                }
            }
        }
    }

    /// The panel product's runs cover every panel of every matrix once, in
    /// order, never across matrices, none longer than the even split's
    /// run, and get shorter towards the end: the last runs are single
    /// panels wherever there are several panels a thread.
    #[test]
    fn panel_runs_cover_each_panel_once_and_shrink_at_the_end() {
        for (panels, threads) in [
            (vec![432], 16),
            (vec![432], 2),
            (vec![32, 8, 8], 2),
            (vec![32, 8, 8], 16),
            (vec![36], 16),
            (vec![1], 4),
            (vec![5, 0, 3], 3),
            (vec![2160, 2160], 8),
            (vec![432], 1),
            (vec![32, 8, 8], 1),
        ] {
            let aim = threads * 4;
            let runs = panel_runs(&panels, aim, threads);
            let total: usize = panels.iter().sum();
            let per_task = total.div_ceil(aim).clamp(1, PANELS);
            let mut next = vec![0; panels.len()];
            let mut last_matrix = 0;
            for r in &runs {
                assert!(r.matrix >= last_matrix, "{panels:?}: {runs:?}");
                last_matrix = r.matrix;
                assert_eq!(r.panels.start, next[r.matrix], "{panels:?}: {runs:?}");
                assert!(!r.panels.is_empty() && r.panels.len() <= per_task);
                assert!(r.panels.end <= panels[r.matrix]);
                next[r.matrix] = r.panels.end;
            }
            assert_eq!(next, panels, "{runs:?}");
            // Short at the end: no run is more than half a thread's share
            // of the panels left when it starts, and the last is one panel;
            // on one thread, whole runs (but a matrix's last).
            let mut left = total;
            for r in &runs {
                let len = r.panels.len();
                if threads == 1 {
                    assert!(
                        len == per_task || r.panels.end == panels[r.matrix],
                        "{runs:?}"
                    );
                } else {
                    assert!(len <= left.div_ceil(2 * threads), "{panels:?}: {runs:?}");
                }
                left -= len;
            }
            if total >= 2 * threads && threads > 1 {
                assert_eq!(
                    runs.last().map(|r| r.panels.len()),
                    Some(1),
                    "{panels:?}: {runs:?}"
                );
            }
        }
    }
}
