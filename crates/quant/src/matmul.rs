//! Weight matrices and the matrix-times-activations product.

use crate::pool::ThreadPool;
use crate::simd::GemmTier;
use crate::{dequantize, is_supported, simd, vec_dot_type, GgmlType, QuantError};

/// A row-major weight matrix view: `rows` rows of `cols` elements of type `ty`,
/// validated on construction.
#[derive(Debug, Clone, Copy)]
pub struct Matrix<'a> {
    ty: GgmlType,
    rows: usize,
    cols: usize,
    row_bytes: usize,
    data: &'a [u8],
}

impl<'a> Matrix<'a> {
    /// Checks that `ty` is supported, `cols` is a whole number of blocks and `data`
    /// is exactly `rows` rows long.
    pub fn new(ty: GgmlType, rows: usize, cols: usize, data: &'a [u8]) -> Result<Self, QuantError> {
        if !is_supported(ty) {
            return Err(QuantError::Unsupported(ty));
        }
        let block = ty.block_len();
        if !cols.is_multiple_of(block) {
            return Err(QuantError::NotBlockMultiple {
                ty,
                len: cols,
                block,
            });
        }
        let row_bytes = (cols / block)
            .checked_mul(ty.block_bytes())
            .ok_or(QuantError::Overflow)?;
        let need = rows.checked_mul(row_bytes).ok_or(QuantError::Overflow)?;
        if data.len() != need {
            return Err(QuantError::BadMatrixSize {
                ty,
                rows,
                cols,
                need,
                have: data.len(),
            });
        }
        Ok(Matrix {
            ty,
            rows,
            cols,
            row_bytes,
            data,
        })
    }

    /// Element type.
    pub fn ty(&self) -> GgmlType {
        self.ty
    }

    /// Number of rows (output features).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Number of columns (input features).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Bytes per row.
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    /// The whole matrix's bytes.
    pub fn data(&self) -> &'a [u8] {
        self.data
    }

    /// The bytes of row `i`; empty when `i` is out of range.
    pub fn row(&self, i: usize) -> &'a [u8] {
        if i >= self.rows {
            return &[];
        }
        &self.data[i * self.row_bytes..(i + 1) * self.row_bytes]
    }

    /// Dequantizes row `i` into `dst[..cols]`.
    pub fn dequantize_row(&self, i: usize, dst: &mut [f32]) -> Result<(), QuantError> {
        if i >= self.rows {
            return Err(QuantError::RowOutOfRange {
                row: i,
                rows: self.rows,
            });
        }
        let have = dst.len();
        let dst = dst.get_mut(..self.cols).ok_or(QuantError::BufferTooShort {
            what: "destination",
            need: self.cols,
            have,
        })?;
        dequantize(self.ty, self.row(i), dst)
    }
}

/// Rows computed together for every batch entry, so their weights stay in cache
/// while the activations stream past.
const ROW_TILE: usize = 16;

/// Batches from this size on take the panel GEMM where the CPU has it.
///
/// Below it every row of a product comes out with the bits it has alone,
/// which keeps a served greedy reply equal to `hearth complete`'s (the
/// server feeds a prompt's last token in a decode step of its own). From 8
/// rows on the panel product is faster now that packing is vectorized
/// (serving the 270M at `--parallel 8` on two Xeon threads: 127 -> 170
/// tokens/s), but short prompts then split differently between the two and
/// their greedy replies part; that trade is not taken here.
const GEMM_MIN_BATCH: usize = 16;

/// Panels packed together; their activations are swept in [`SWEEP`]-row
/// blocks, so the packed panels and the swept activations both stay in L2.
const PANELS: usize = 8;

/// Tasks per thread the panel product aims for (see [`gemm_panels`]):
/// [`DEFAULT_GEMM_SPLIT`], or `HEARTH_GEMM_SPLIT` (1 to 64), for measuring.
/// A product ends when its last task does, so the threads that finish
/// early wait for the last: more, smaller tasks shorten that wait and
/// cost nothing else (a task's panels are packed once either way), and the
/// last tasks are shorter still (see [`panel_runs`]).
fn tasks_per_thread() -> usize {
    static SPLIT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *SPLIT.get_or_init(|| split_from_env("HEARTH_GEMM_SPLIT", DEFAULT_GEMM_SPLIT))
}

/// A parts-per-thread setting from the environment variable `var` (1 to
/// 64), else `default`: the knobs the split of the products is measured by.
fn split_from_env(var: &str, default: usize) -> usize {
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
const SWEEP: usize = 64;

/// The rows of one sweep for tiles of `rows_per_tile`: the most whole tiles
/// within [`SWEEP`], so that only a batch's last tile is short.
fn sweep_rows(rows_per_tile: usize) -> usize {
    (SWEEP / rows_per_tile.max(1)).max(1) * rows_per_tile.max(1)
}

/// The panel product (see [`crate::gemm`]) of one or more matrices of the
/// same width and activation format (a layer's query and key projections,
/// its gate and up): the activations are quantized once (see
/// [`quantize_panel_acts`]), and one parallel operation computes every
/// matrix (see [`panels_product`]).
#[track_caller]
fn gemm_panels(
    pool: &ThreadPool,
    tier: GemmTier,
    ws: &[&Matrix],
    x: &[f32],
    batch: usize,
    outs: &[SharedOut],
) {
    use crate::gemm::Acts;
    use std::cell::RefCell;
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

/// What the panel product's activations are quantized as: the activation
/// format, the weight format's group length and offset (see
/// [`crate::gemm::Acts`]), the width, the batch and the tier (AMX also
/// wants the unsigned copy). Matrices of one format share one quantization.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PanelFormat {
    at: GgmlType,
    g: usize,
    off: i32,
    cols: usize,
    batch: usize,
    tier: GemmTier,
}

impl PanelFormat {
    /// The format for weights of `ty`, or `None` where the type has no
    /// panel product.
    fn of(ty: GgmlType, cols: usize, batch: usize, tier: GemmTier) -> Option<Self> {
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
    fn for_product(k: &simd::Kernels, w: &Matrix, batch: usize) -> Option<Self> {
        let panel = batch >= GEMM_MIN_BATCH && k.float(w.ty).is_none() && k.quant(w.ty).is_some();
        panel
            .then(|| Self::of(w.ty, w.cols, batch, k.gemm))
            .flatten()
    }
}

/// Where [`quantize_panel_acts`] takes its rows from.
enum RowSource<'a> {
    /// Rows computed already.
    Given(&'a [f32]),
    /// Rows that `make(i)` computes in `buf` (row `i`, `cols` wide) just
    /// before they are quantized, on the thread that quantizes them, so
    /// they are read from its cache: the operation that produces the
    /// product's input and its quantization are one.
    Made {
        buf: &'a SharedOut,
        make: &'a (dyn Fn(usize) + Sync),
    },
}

/// Quantizes the `format.batch` rows of `src` into `acts` for the panel
/// product, in parallel: each task quantizes its own run of rows into its
/// own parts of the four buffers.
#[track_caller]
fn quantize_panel_acts(
    pool: &ThreadPool,
    format: PanelFormat,
    src: RowSource<'_>,
    acts: &mut crate::gemm::Acts,
) {
    use crate::gemm::{amx::MA, Acts};
    let PanelFormat {
        at,
        g,
        off,
        cols,
        batch,
        tier,
    } = format;
    acts.reset(batch, cols, at, g, off);
    if tier == GemmTier::Amx {
        // The tile loads read whole blocks of MA rows (the rows past the
        // batch give sums that are never used).
        crate::gemm::grow(&mut acts.q, batch.next_multiple_of(MA) * cols, 0);
    }
    // Several runs a thread, claimed as threads free up: one each
    // made the product wait for the thread that woke last.
    let per = batch.div_ceil(pool.threads() * tasks_per_thread()).max(1);
    let Acts {
        q, d, sum, base, ..
    } = acts;
    // The buffers may be longer than this batch (they only grow).
    let parts: Vec<std::sync::Mutex<ActsPart>> = q[..batch * cols]
        .chunks_mut(per * cols)
        .zip(d[..batch * cols / 32].chunks_mut(per * cols / 32))
        .zip(sum[..batch * cols / g].chunks_mut(per * cols / g))
        .zip(base[..batch * cols / g].chunks_mut(per * cols / g))
        .map(|(((q, d), s), i)| std::sync::Mutex::new((q, d, s, i)))
        .collect();
    pool.run(parts.len(), |t| {
        let mut part = parts[t].lock().unwrap_or_else(|p| p.into_inner());
        let (q, d, s, i) = &mut *part;
        let rows = q.len() / cols;
        for r in 0..rows {
            let row = t * per + r;
            let x = match &src {
                RowSource::Given(x) => &x[row * cols..(row + 1) * cols],
                RowSource::Made { buf, make } => {
                    make(row);
                    // SAFETY: row `row` belongs to this task alone, and
                    // `make` holds no slice of it any more.
                    unsafe { buf.view(row * cols, cols) }
                }
            };
            Acts::fill_row(
                tier,
                x,
                at,
                g,
                &mut q[r * cols..(r + 1) * cols],
                &mut d[r * cols / 32..(r + 1) * cols / 32],
                &mut s[r * cols / g..(r + 1) * cols / g],
                &mut i[r * cols / g..(r + 1) * cols / g],
                off,
            );
        }
    });
}

/// The panel product of `ws` (same width and activation format) over the
/// activations `acts` quantized for them: one parallel operation, each
/// task packing its own run of weight panels and sweeping activation rows
/// past them.
///
/// Tasks are runs of panels (never across two matrices), several per
/// thread so threads that finish early take more. A product of few panels
/// for the threads (a 1152-row projection is 36 panels; sixteen threads
/// would do three rounds with the last a quarter full) also splits the
/// activation rows into blocks, each task one run and one block: the
/// panels are packed once per block, which costs less than idle threads.
#[track_caller]
fn panels_product(
    pool: &ThreadPool,
    tier: GemmTier,
    ws: &[&Matrix],
    acts: &crate::gemm::Acts,
    batch: usize,
    outs: &[SharedOut],
) {
    use crate::gemm::amx::{Tiles, MA};
    use crate::gemm::{tile, tile_rows, Panel, NR};
    use std::cell::RefCell;
    thread_local! {
        static PACKED: RefCell<Vec<Panel>> = const { RefCell::new(Vec::new()) };
    }
    let Some(w0) = ws.first() else { return };
    let cols = w0.cols;
    // AMX blocks are MA (32) activation rows, the register tiles the
    // tier's own height (six on AVX-512, four elsewhere).
    let amx = tier == GemmTier::Amx;
    let rows_per_tile = tile_rows(tier);
    let step = if amx { MA } else { rows_per_tile };
    let sweep = sweep_rows(step);
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
    pool.run(runs.len() * blocks, |t| {
        let (
            PanelRun {
                matrix,
                panels: mine,
            },
            block,
        ) = (runs[t / blocks].clone(), t % blocks);
        let (b0, b1) = (block * block_rows, ((block + 1) * block_rows).min(batch));
        let (w, out, rows) = (ws[matrix], &outs[matrix], ws[matrix].rows);
        PACKED.with(|packed| {
            let mut packed = packed.borrow_mut();
            packed.resize_with(PANELS, Panel::default);
            let mut tiles = amx.then(Tiles::new);
            let mut p0 = mine.start;
            while p0 < mine.end {
                let p1 = (p0 + PANELS).min(mine.end);
                for (i, panel) in packed.iter_mut().enumerate().take(p1 - p0) {
                    let r0 = (p0 + i) * NR;
                    // A fixed array: this runs for every panel.
                    let mut views: [&[u8]; NR] = [&[]; NR];
                    let n = (rows - r0).min(NR);
                    for (v, r) in views.iter_mut().zip(r0..r0 + n) {
                        *v = w.row(r);
                    }
                    panel.fill_on(tier, w.ty, &views[..n], cols, amx);
                }
                for c0 in (b0..b1).step_by(sweep) {
                    let c1 = (c0 + sweep).min(b1);
                    for (i, panel) in packed.iter().enumerate().take(p1 - p0) {
                        let r0 = (p0 + i) * NR;
                        let n = (rows - r0).min(NR);
                        if let Some(tiles) = tiles.as_mut() {
                            for c in (c0..c1).step_by(MA) {
                                let m = (c1 - c).min(MA);
                                let v = tiles.block(panel, acts, c, m);
                                for (j, vj) in v.iter().enumerate().take(m) {
                                    // SAFETY: as below.
                                    unsafe { out.slice((c + j) * rows + r0, n) }
                                        .copy_from_slice(&vj[..n]);
                                }
                            }
                            continue;
                        }
                        for c in (c0..c1).step_by(rows_per_tile) {
                            let m = (c1 - c).min(rows_per_tile);
                            let v = tile(tier, panel, acts, c, m);
                            for (j, vj) in v.iter().enumerate().take(m) {
                                // SAFETY: weight rows r0..r0+n of rows
                                // b0..b1 belong to this task alone, and
                                // this slice is the only one alive.
                                unsafe { out.slice((c + j) * rows + r0, n) }
                                    .copy_from_slice(&vj[..n]);
                            }
                        }
                    }
                }
                p0 = p1;
            }
        });
    });
}

/// A task of the panel product: a run of one matrix's panels.
#[derive(Debug, Clone, PartialEq)]
struct PanelRun {
    matrix: usize,
    panels: std::ops::Range<usize>,
}

/// The panel product's tasks over matrices of `panels[m]` panels each, in
/// the order the pool hands them out: about `aim` runs of at most
/// [`PANELS`], never across two matrices, and shorter ones towards the end
/// (once fewer than two runs a thread are left, a run takes about half of
/// its thread's share of what remains), so the threads that finish first
/// wait for a short run instead of a whole one. One thread waits for none,
/// and its runs stay whole (each run sweeps the activations once more).
fn panel_runs(panels: &[usize], aim: usize, threads: usize) -> Vec<PanelRun> {
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

/// One task's rows of the activation buffers (bytes, scales, scaled sums,
/// group starting integers).
type ActsPart<'a> = (&'a mut [u8], &'a mut [f32], &'a mut [f32], &'a mut [i32]);

/// A buffer shared by tasks that each write a disjoint part of it.
pub(crate) struct Shared<T> {
    ptr: *mut T,
    len: usize,
}

/// The output buffer shared by tasks that each write a disjoint set of rows.
pub(crate) type SharedOut = Shared<f32>;

/// The ready activations' bytes, which tasks write in disjoint blocks.
type SharedBytes = Shared<u8>;

// SAFETY: tasks write only the parts that are theirs (their row ranges, or
// the blocks whose counts they complete), so no two threads touch the same
// element, and the buffer outlives the parallel scope.
unsafe impl<T: Send> Sync for Shared<T> {}
// SAFETY: as above; the pointer is only dereferenced inside the scope of the borrow.
unsafe impl<T: Send> Send for Shared<T> {}

impl<T: Copy> Shared<T> {
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
    unsafe fn view(&self, start: usize, n: usize) -> &[T] {
        assert!(start.checked_add(n).is_some_and(|e| e <= self.len));
        // SAFETY: in bounds (checked above); no writer is the caller's contract.
        unsafe { std::slice::from_raw_parts(self.ptr.add(start), n) }
    }

    /// Writes `v` at `i`.
    ///
    /// # Safety
    /// No other thread may access index `i` concurrently.
    #[inline]
    unsafe fn write(&self, i: usize, v: T) {
        assert!(i < self.len);
        // SAFETY: in bounds (checked above); exclusivity is the caller's contract.
        unsafe { *self.ptr.add(i) = v }
    }
}

/// Checks that `x` holds `batch` rows of `w.cols()` activations and `out`
/// has room for `batch` rows of `w.rows()` results.
pub fn check_product_shapes(
    w: &Matrix,
    x: &[f32],
    batch: usize,
    out: &[f32],
) -> Result<(), QuantError> {
    let nx = batch.checked_mul(w.cols).ok_or(QuantError::Overflow)?;
    let nout = batch.checked_mul(w.rows).ok_or(QuantError::Overflow)?;
    if x.len() < nx {
        return Err(QuantError::BufferTooShort {
            what: "activation",
            need: nx,
            have: x.len(),
        });
    }
    if out.len() < nout {
        return Err(QuantError::BufferTooShort {
            what: "output",
            need: nout,
            have: out.len(),
        });
    }
    Ok(())
}

/// `out[b*rows + r] = dot(W row r, x[b*cols..(b+1)*cols])` for `b` in `0..batch`.
///
/// `scratch` holds the quantized activations and is reused across calls: it only
/// grows, so once it is big enough there is no allocation. Operands shorter than
/// the shapes imply are an error, never a panic.
#[track_caller]
pub fn matmul(
    pool: &ThreadPool,
    w: &Matrix,
    x: &[f32],
    batch: usize,
    out: &mut [f32],
    scratch: &mut Vec<u8>,
) -> Result<(), QuantError> {
    check_product_shapes(w, x, batch, out)?;
    let (rows, cols) = (w.rows, w.cols);
    let (nx, nout) = (batch * cols, batch * rows);
    if nout == 0 {
        return Ok(());
    }
    let x = &x[..nx];
    let k = simd::best();
    let shared = SharedOut {
        ptr: out.as_mut_ptr(),
        len: nout,
    };
    let split = DecodeSplit::new(pool.threads(), rows);

    if let Some(f) = k.float(w.ty) {
        if batch >= GEMM_MIN_BATCH {
            return crate::float_gemm::float_gemm(pool, w, x, batch, &shared);
        }
        pool.run(split.parts(), |t| {
            for_tiles(split.range(t), batch, |r, b| {
                let xb = &x[b * cols..(b + 1) * cols];
                // SAFETY: kernel from `simd::best()`; the Matrix guarantees `cols`
                // elements per row and `xb` has exactly `cols`.
                let v = unsafe { f(w.row(r), xb, cols) };
                // SAFETY: row r belongs to this task alone.
                unsafe { shared.write(b * rows + r, v) };
            });
        });
        return Ok(());
    }

    k.quant(w.ty).ok_or(QuantError::Unsupported(w.ty))?;
    if batch >= GEMM_MIN_BATCH && crate::gemm::group_len(w.ty).is_some() {
        gemm_panels(pool, k.gemm, &[w], x, batch, std::slice::from_ref(&shared));
        return Ok(());
    }
    let at = vec_dot_type(w.ty);
    let arow = act_row_bytes(at, cols);
    let need = arow * batch;
    if scratch.len() < need {
        scratch.resize(need, 0);
    }
    quantize_rows(pool, at, x, cols, &mut scratch[..need])?;
    rows_of_acts(pool, k, w, &scratch[..need], batch, &shared);
    Ok(())
}

/// Every row of `w` against `batch` rows of activations quantized for it,
/// into `out`, the rows shared out over the pool as [`DecodeSplit`] says.
#[track_caller]
fn rows_of_acts(
    pool: &ThreadPool,
    k: &simd::Kernels,
    w: &Matrix,
    acts: &[u8],
    batch: usize,
    out: &SharedOut,
) {
    let split = DecodeSplit::new(pool.threads(), w.rows);
    pool.run(split.parts(), |t| {
        quant_rows(k, w, acts, batch, split.range(t), out);
    });
}

/// Activations quantized ahead for the next product by the one before it
/// (see [`matmul_gated`]'s `next`), for [`matmul_ready`]. On a decode step
/// the tasks of the gated product quantize each block of its output as the
/// block is completed, while its values are in their cache; otherwise the
/// calling thread would quantize the whole row alone between the two
/// products, reading most of it from the other cores' caches. On a
/// prefill batch the tasks that apply the activation function to a row
/// quantize it for the panel product, so that no separate operation reads
/// the rows again from other cores' caches.
#[derive(Default)]
pub struct ReadyActs {
    /// What `bytes` holds, `(activation type, columns, rows, address of
    /// the rows quantized)`; `None` when nothing is ready. A product takes
    /// it only for the same rows.
    shape: Option<(GgmlType, usize, usize, usize)>,
    bytes: Vec<u8>,
    /// Per row and block: the elements computed so far.
    filled: Vec<std::sync::atomic::AtomicU32>,
    /// What `panel` holds, for a batch that takes the panel product, and
    /// the address of the rows it was quantized from (a product takes it
    /// only for the same rows); `None` when nothing is ready there.
    panel_for: Option<(PanelFormat, usize)>,
    /// A prefill batch's activations for the panel product, quantized row
    /// by row by the tasks that applied the activation function to them.
    panel: crate::gemm::Acts,
}

impl std::fmt::Debug for ReadyActs {
    // What is ready, not the megabytes of it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadyActs")
            .field("shape", &self.shape)
            .field("panel_for", &self.panel_for)
            .finish_non_exhaustive()
    }
}

impl ReadyActs {
    /// Whether activations are ready for a product (until one uses them).
    pub fn is_ready(&self) -> bool {
        self.shape.is_some() || self.panel_for.is_some()
    }
}

/// Makes the `format.batch` rows of `x` with `make(i, row)` and quantizes
/// each, on the thread that made it, into `ready` for a panel product of
/// `format` over `x`.
#[track_caller]
fn make_panel_rows(
    pool: &ThreadPool,
    format: PanelFormat,
    x: &mut [f32],
    make: &(dyn Fn(usize, &mut [f32]) + Sync),
    ready: &mut ReadyActs,
) {
    let cols = format.cols;
    let buf = SharedOut {
        ptr: x.as_mut_ptr(),
        len: x.len(),
    };
    let make_row = |i: usize| {
        // SAFETY: row i belongs to the task that makes it, and this is the
        // only slice of it alive.
        make(i, unsafe { buf.slice(i * cols, cols) });
    };
    let src = RowSource::Made {
        buf: &buf,
        make: &make_row,
    };
    quantize_panel_acts(pool, format, src, &mut ready.panel);
    ready.panel_for = Some((format, x.as_ptr() as usize));
}

/// Makes the `batch` rows of `x` (`w.cols()` wide) with `make(i, row)`, row
/// by row, in parallel once the batch is long enough to pay for it. Where
/// `w` takes the panel product over this batch, the task that makes a row
/// also quantizes it for `w` at once, from its cache, into `ready`: the
/// product of `x` that comes next (by [`matmul_ready`], [`matmul_many_ready`]
/// or [`matmul_gated`]) then takes them instead of quantizing `x` in a
/// parallel operation of its own, which reads the rows again, mostly from
/// the other cores' caches. The same numbers either way.
#[track_caller]
pub fn prepare_rows(
    pool: &ThreadPool,
    w: &Matrix,
    x: &mut [f32],
    batch: usize,
    make: &(dyn Fn(usize, &mut [f32]) + Sync),
    ready: &mut ReadyActs,
) -> Result<(), QuantError> {
    let cols = w.cols;
    let n = batch.checked_mul(cols).ok_or(QuantError::Overflow)?;
    let have = x.len();
    let x = x.get_mut(..n).ok_or(QuantError::BufferTooShort {
        what: "activation",
        need: n,
        have,
    })?;
    ready.shape = None;
    ready.panel_for = None;
    if cols == 0 {
        return Ok(());
    }
    let k = simd::best();
    if let Some(format) = PanelFormat::for_product(k, w, batch) {
        make_panel_rows(pool, format, x, make, ready);
        return Ok(());
    }
    if batch < GEMM_MIN_BATCH || pool.threads() == 1 {
        x.chunks_exact_mut(cols)
            .enumerate()
            .for_each(|(i, r)| make(i, r));
        return Ok(());
    }
    let per = batch.div_ceil(pool.threads());
    pool.for_each_chunk_mut(x, per * cols, |chunk, rows| {
        for (j, r) in rows.chunks_exact_mut(cols).enumerate() {
            make(chunk * per + j, r);
        }
    });
    Ok(())
}

/// [`matmul`] of `x`, with the activations [`ReadyActs`] holds where they
/// are `x` quantized for `w` (made by the product that computed `x`);
/// quantizing `x` itself otherwise. Either way the same numbers. The ready
/// activations are used up.
#[track_caller]
pub fn matmul_ready(
    pool: &ThreadPool,
    w: &Matrix,
    x: &[f32],
    batch: usize,
    out: &mut [f32],
    scratch: &mut Vec<u8>,
    ready: &mut ReadyActs,
) -> Result<(), QuantError> {
    let k = simd::best();
    let at = vec_dot_type(w.ty);
    // Used up whatever follows: ready activations serve one product.
    let readied = ready.panel_for.take();
    let panel = PanelFormat::for_product(k, w, batch);
    if panel.is_some_and(|f| readied == Some((f, x.as_ptr() as usize))) {
        ready.shape = None;
        check_product_shapes(w, x, batch, out)?;
        let shared = SharedOut {
            ptr: out.as_mut_ptr(),
            len: batch * w.rows,
        };
        panels_product(pool, k.gemm, &[w], &ready.panel, batch, &[shared]);
        return Ok(());
    }
    let usable = ready.shape.take() == Some((at, w.cols, batch, x.as_ptr() as usize))
        && batch < GEMM_MIN_BATCH
        && k.float(w.ty).is_none()
        && k.quant(w.ty).is_some();
    if !usable {
        return matmul(pool, w, x, batch, out, scratch);
    }
    check_product_shapes(w, x, batch, out)?;
    let shared = SharedOut {
        ptr: out.as_mut_ptr(),
        len: batch * w.rows,
    };
    let acts = &ready.bytes[..act_row_bytes(at, w.cols) * batch];
    rows_of_acts(pool, k, w, acts, batch, &shared);
    Ok(())
}

/// Where the tasks of a gated decode product put the blocks of its output
/// they complete (see [`ReadyActs`]).
struct BlockSink<'a> {
    at: GgmlType,
    /// Elements and bytes of a block; blocks per row.
    len: usize,
    bytes: usize,
    per_row: usize,
    out: SharedBytes,
    filled: &'a [std::sync::atomic::AtomicU32],
}

impl<'a> BlockSink<'a> {
    /// Readies `ready` for the output of a gated product of `rows` rows and
    /// `batch` activation rows feeding `next`; `None` where `next` does not
    /// take block-quantized activations of that width.
    fn new(
        k: &simd::Kernels,
        next: &Matrix,
        rows: usize,
        batch: usize,
        ready: &'a mut ReadyActs,
    ) -> Option<Self> {
        use std::sync::atomic::{AtomicU32, Ordering};
        ready.shape = None;
        ready.panel_for = None;
        let at = vec_dot_type(next.ty);
        let len = match at {
            GgmlType::Q8_0 | GgmlType::Q8_K => at.block_len(),
            _ => return None,
        };
        let usable = next.cols == rows
            && rows.is_multiple_of(len)
            && k.float(next.ty).is_none()
            && k.quant(next.ty).is_some();
        if !usable {
            return None;
        }
        let per_row = rows / len;
        let bytes = at.block_bytes();
        let ReadyActs {
            bytes: buf, filled, ..
        } = ready;
        crate::gemm::grow(buf, batch * per_row * bytes, 0);
        if filled.len() < batch * per_row {
            filled.resize_with(batch * per_row, AtomicU32::default);
        }
        let filled = &filled[..batch * per_row];
        filled.iter().for_each(|c| c.store(0, Ordering::Relaxed));
        Some(Self {
            at,
            len,
            bytes,
            per_row,
            out: SharedBytes {
                ptr: buf.as_mut_ptr(),
                len: batch * per_row * bytes,
            },
            filled,
        })
    }

    /// Counts elements `range` of row `b` of `computed` as done, and
    /// quantizes each block this completes.
    ///
    /// # Safety
    /// Those elements are final, and this task holds no slice of `computed`.
    unsafe fn done(
        &self,
        tier: GemmTier,
        computed: &SharedOut,
        rows: usize,
        b: usize,
        range: std::ops::Range<usize>,
    ) {
        use std::sync::atomic::Ordering;
        if range.is_empty() {
            return;
        }
        for block in range.start / self.len..=(range.end - 1) / self.len {
            let lo = range.start.max(block * self.len);
            let hi = range.end.min((block + 1) * self.len);
            let n = (hi - lo) as u32;
            let i = b * self.per_row + block;
            // AcqRel: the task that completes a block sees every other
            // task's values of it (each released them with its count).
            if self.filled[i].fetch_add(n, Ordering::AcqRel) + n == self.len as u32 {
                // SAFETY: every element of the block is final (the counts
                // say so) and no slice of them is alive (the caller's
                // contract, for every task); the block's bytes belong to the
                // one task that completed its count.
                let (src, dst) = unsafe {
                    (
                        computed.view(b * rows + block * self.len, self.len),
                        self.out.slice(i * self.bytes, self.bytes),
                    )
                };
                // The shapes were checked in `new`, so this cannot fail.
                let _ = crate::gemm::quantize_act_row(tier, self.at, src, dst);
            }
        }
    }
}

/// Several products of the same activations at once (`outs[i] = ws[i] x`),
/// such as a layer's query, key and value projections: for the few rows of
/// a decode step, the activations are quantized once per activation type
/// and every matrix's rows are shared out in one parallel operation, where
/// separate products would quantize them again and make the threads meet
/// once per matrix. Each result is [`matmul`]'s to the bit. Batches that
/// take the panel product go as one panel product per activation format
/// (see [`gemm_many`]); float weights go through [`matmul`] one matrix at a
/// time.
#[track_caller]
pub fn matmul_many(
    pool: &ThreadPool,
    ws: &[&Matrix],
    x: &[f32],
    batch: usize,
    outs: &mut [&mut [f32]],
    scratch: &mut Vec<u8>,
) -> Result<(), QuantError> {
    let mut none = ReadyActs::default();
    matmul_many_ready(pool, ws, x, batch, outs, scratch, &mut none)
}

/// [`matmul_many`] of `x`, with the activations [`prepare_rows`] readied
/// in `ready` where they are `x` quantized for a panel product of this
/// batch; quantizing `x` itself otherwise. Either way the same numbers.
/// The ready activations are used up.
#[track_caller]
pub fn matmul_many_ready(
    pool: &ThreadPool,
    ws: &[&Matrix],
    x: &[f32],
    batch: usize,
    outs: &mut [&mut [f32]],
    scratch: &mut Vec<u8>,
    ready: &mut ReadyActs,
) -> Result<(), QuantError> {
    ready.shape = None;
    if ws.len() != outs.len() {
        ready.panel_for = None;
        return Err(QuantError::Shape(format!(
            "{} matrices for {} outputs",
            ws.len(),
            outs.len()
        )));
    }
    let k = simd::best();
    let fused = (2..=MAX_FUSED).contains(&ws.len())
        && batch > 0
        && batch < GEMM_MIN_BATCH
        && ws
            .iter()
            .all(|w| w.cols == ws[0].cols && k.float(w.ty).is_none() && k.quant(w.ty).is_some());
    if !fused {
        if batch >= GEMM_MIN_BATCH && ws.len() <= MAX_FUSED {
            return gemm_many(pool, k, ws, x, batch, outs, scratch, ready);
        }
        ready.panel_for = None;
        for (w, out) in ws.iter().zip(outs.iter_mut()) {
            matmul(pool, w, x, batch, out, scratch)?;
        }
        return Ok(());
    }
    ready.panel_for = None;
    for (w, out) in ws.iter().zip(outs.iter()) {
        check_product_shapes(w, x, batch, out)?;
    }
    let (starts, need) = quantize_once(pool, ws, x, batch, scratch)?;
    let cols = ws[0].cols;
    let acts_len = |w: &Matrix| act_row_bytes(vec_dot_type(w.ty), cols) * batch;
    let scratch = &scratch[..need];
    let mut shared: [SharedOut; MAX_FUSED] = std::array::from_fn(|_| SharedOut {
        ptr: std::ptr::null_mut(),
        len: 0,
    });
    for ((sh, w), out) in shared.iter_mut().zip(ws).zip(outs.iter_mut()) {
        *sh = SharedOut {
            ptr: out.as_mut_ptr(),
            len: batch * w.rows,
        };
    }
    // The matrices' rows one after another, split as one product's, so
    // that only the last parts are short; a part that spans two matrices
    // does its piece of each.
    let total = ws.iter().map(|w| w.rows).sum();
    let split = DecodeSplit::new(pool.threads(), total);
    pool.run(split.parts(), |task| {
        let part = split.range(task);
        let mut first = 0;
        for (i, w) in ws.iter().enumerate() {
            // The part's rows within this matrix, in its own numbering.
            let end = first + w.rows;
            let (lo, hi) = (part.start.clamp(first, end), part.end.clamp(first, end));
            if lo < hi {
                let acts = &scratch[starts[i]..starts[i] + acts_len(w)];
                quant_rows(k, w, acts, batch, lo - first..hi - first, &shared[i]);
            }
            first = end;
        }
    });
    Ok(())
}

/// [`matmul_many`] for a batch that takes the panel product: the matrices
/// that share an activation format go as one product (see
/// [`gemm_panels`]), the rest through [`matmul`]. The same numbers as
/// [`matmul`] on each: a panel's sums do not depend on what else runs.
/// The format of `ready`'s panel activations, where they were made from
/// `x`, is not quantized again.
#[track_caller]
#[allow(clippy::too_many_arguments)]
fn gemm_many(
    pool: &ThreadPool,
    k: &simd::Kernels,
    ws: &[&Matrix],
    x: &[f32],
    batch: usize,
    outs: &mut [&mut [f32]],
    scratch: &mut Vec<u8>,
    ready: &mut ReadyActs,
) -> Result<(), QuantError> {
    let format = |w: &Matrix| PanelFormat::for_product(k, w, batch);
    // Taken whatever follows: ready activations serve one product.
    let input = ready.panel_for.take();
    for (w, out) in ws.iter().zip(outs.iter()) {
        check_product_shapes(w, x, batch, out)?;
    }
    let mut done = [false; MAX_FUSED];
    for i in 0..ws.len() {
        if done[i] {
            continue;
        }
        let Some(f) = format(ws[i]) else {
            matmul(pool, ws[i], x, batch, outs[i], scratch)?;
            done[i] = true;
            continue;
        };
        // Every later matrix of this format joins the product.
        let mut group: [&Matrix; MAX_FUSED] = [ws[i]; MAX_FUSED];
        let mut shared: [SharedOut; MAX_FUSED] = std::array::from_fn(|_| SharedOut {
            ptr: std::ptr::null_mut(),
            len: 0,
        });
        let mut n = 0;
        for j in i..ws.len() {
            if !done[j] && format(ws[j]) == Some(f) {
                group[n] = ws[j];
                shared[n] = SharedOut {
                    ptr: outs[j].as_mut_ptr(),
                    len: batch * ws[j].rows,
                };
                done[j] = true;
                n += 1;
            }
        }
        if input == Some((f, x.as_ptr() as usize)) {
            panels_product(pool, k.gemm, &group[..n], &ready.panel, batch, &shared[..n]);
        } else {
            gemm_panels(pool, k.gemm, &group[..n], x, batch, &shared[..n]);
        }
    }
    Ok(())
}

/// Quantizes `batch` rows of `x` once per activation type that `ws` (at
/// most [`MAX_FUSED`] matrices of equal width) needs, one copy after
/// another in `scratch`. Returns where each matrix's copy starts and the
/// bytes used. Fixed arrays, as this runs a few times per decode step.
#[track_caller]
fn quantize_once(
    pool: &ThreadPool,
    ws: &[&Matrix],
    x: &[f32],
    batch: usize,
    scratch: &mut Vec<u8>,
) -> Result<([usize; MAX_FUSED], usize), QuantError> {
    let cols = ws.first().map_or(0, |w| w.cols);
    let mut starts = [0usize; MAX_FUSED];
    let mut need = 0;
    for (i, w) in ws.iter().enumerate().take(MAX_FUSED) {
        let at = vec_dot_type(w.ty);
        match ws[..i].iter().position(|v| vec_dot_type(v.ty) == at) {
            Some(j) => starts[i] = starts[j],
            None => {
                starts[i] = need;
                need += act_row_bytes(at, cols) * batch;
            }
        }
    }
    if scratch.len() < need {
        scratch.resize(need, 0);
    }
    for (i, w) in ws.iter().enumerate().take(MAX_FUSED) {
        if ws[..i]
            .iter()
            .all(|v| vec_dot_type(v.ty) != vec_dot_type(w.ty))
        {
            let len = act_row_bytes(vec_dot_type(w.ty), cols) * batch;
            let dst = &mut scratch[starts[i]..starts[i] + len];
            quantize_rows(pool, vec_dot_type(w.ty), &x[..batch * cols], cols, dst)?;
        }
    }
    Ok((starts, need))
}

/// `gate = act(W_gate x, W_up x)` applied row by row, with `up = W_up x`
/// kept: a gated MLP's first half. For the few rows of a decode step it is
/// one parallel operation in which each task computes the same range of
/// gate and up rows and applies `act` to them at once, so the activation
/// (GeGLU's tanh over thousands of values) is spread over the threads
/// instead of running on one between two products. (Applying it inside the
/// panel product's tasks too, each sweep's pieces while in cache, measured
/// no faster on 2 threads: 1B pp512 413.6 against 413.4 t/s, five
/// alternated pairs.) A prefill batch applies `act` after the panel
/// product, row by row, and where `next` takes the panel product the same
/// tasks quantize each row for it (see [`ReadyActs`]). `act` must act element
/// by element (it is handed pieces of rows); the results are those of
/// [`matmul_many`] followed by `act` on whole rows, to the bit.
#[track_caller]
#[allow(clippy::too_many_arguments)]
pub fn matmul_gated(
    pool: &ThreadPool,
    gate: &Matrix,
    up: &Matrix,
    x: &[f32],
    batch: usize,
    out_gate: &mut [f32],
    out_up: &mut [f32],
    scratch: &mut Vec<u8>,
    act: &(dyn Fn(&mut [f32], &[f32]) + Sync),
    next: Option<(&Matrix, &mut ReadyActs)>,
) -> Result<(), QuantError> {
    let k = simd::best();
    let rows = gate.rows;
    let fused = batch > 0
        && batch < GEMM_MIN_BATCH
        && up.rows == rows
        && up.cols == gate.cols
        && [gate, up]
            .iter()
            .all(|w| k.float(w.ty).is_none() && k.quant(w.ty).is_some());
    if !fused {
        let mut next = next;
        // Activations readied for gate and up (by `prepare_rows`) are in
        // `next`'s buffer: this product takes them first.
        let mut none = ReadyActs::default();
        let input = match next.as_mut() {
            Some((_, ready)) => &mut **ready,
            None => &mut none,
        };
        matmul_many_ready(
            pool,
            &[gate, up],
            x,
            batch,
            &mut [&mut *out_gate, &mut *out_up],
            scratch,
            input,
        )?;
        let n = batch * rows;
        // A prefill batch whose next product is a panel product: the tasks
        // that apply `act` to a row quantize it for that product at once,
        // from their cache, in the same parallel operation.
        let panel_next = next.and_then(|(w, ready)| {
            let format = PanelFormat::for_product(k, w, batch)?;
            (w.cols == rows).then_some((format, ready))
        });
        if let Some((format, ready)) = panel_next {
            let u = &out_up[..n];
            let make = |i: usize, g: &mut [f32]| act(g, &u[i * rows..(i + 1) * rows]);
            make_panel_rows(pool, format, &mut out_gate[..n], &make, ready);
            return Ok(());
        }
        let (g, u) = (&mut out_gate[..n], &out_up[..n]);
        let rows_of = |g: &mut [f32], u: &[f32]| {
            g.chunks_exact_mut(rows.max(1))
                .zip(u.chunks_exact(rows.max(1)))
                .for_each(|(g, u)| act(g, u));
        };
        if batch < 16 || rows == 0 {
            rows_of(g, u);
        } else {
            let per = batch.div_ceil(pool.threads());
            pool.for_each_chunk_mut(g, per * rows, |chunk, g| {
                rows_of(g, &u[chunk * per * rows..])
            });
        }
        return Ok(());
    }
    check_product_shapes(gate, x, batch, out_gate)?;
    check_product_shapes(up, x, batch, out_up)?;
    let ws = [gate, up];
    let (starts, need) = quantize_once(pool, &ws, x, batch, scratch)?;
    let scratch = &scratch[..need];
    let acts_len = |w: &Matrix| act_row_bytes(vec_dot_type(w.ty), w.cols) * batch;
    let (acts_g, acts_u) = (
        &scratch[starts[0]..starts[0] + acts_len(gate)],
        &scratch[starts[1]..starts[1] + acts_len(up)],
    );
    let sh_g = SharedOut {
        ptr: out_gate.as_mut_ptr(),
        len: batch * rows,
    };
    let sh_u = SharedOut {
        ptr: out_up.as_mut_ptr(),
        len: batch * rows,
    };
    let split = DecodeSplit::new(pool.threads(), rows);
    let (next_w, mut ready) = next.unzip();
    let sink = match (next_w, ready.as_deref_mut()) {
        (Some(w), Some(ready)) => BlockSink::new(k, w, rows, batch, ready),
        _ => None,
    };
    pool.run(split.parts(), |t| {
        let range = split.range(t);
        if range.is_empty() {
            return;
        }
        quant_rows(k, gate, acts_g, batch, range.clone(), &sh_g);
        quant_rows(k, up, acts_u, batch, range.clone(), &sh_u);
        for b in 0..batch {
            let at = b * rows + range.start;
            {
                // SAFETY: rows `range` of every batch row belong to this task
                // alone, and these are the only slices of them alive.
                let (g, u) = unsafe { (sh_g.slice(at, range.len()), sh_u.slice(at, range.len())) };
                act(g, u);
            }
            if let Some(sink) = &sink {
                // SAFETY: this task's values of row b are final and its
                // slices of them gone (above); so are those of every task
                // that counted its part of a block before.
                unsafe { sink.done(k.gemm, &sh_g, rows, b, range.clone()) };
            }
        }
    });
    let shape = sink.map(|sink| (sink.at, rows, batch, out_gate.as_ptr() as usize));
    if let (Some(shape), Some(ready)) = (shape, ready) {
        ready.shape = Some(shape);
    }
    Ok(())
}

/// How a decode product's rows are shared out over the pool's threads: in
/// parts claimed as threads free up, whole ones first and shorter ones
/// towards the end.
///
/// Several parts per thread: when every core streams weights at once,
/// memory serves them unevenly, and with one part each the product waits
/// for the slowest while the rest idle (16 threads of a Xeon: 1B decode 92
/// -> 97 t/s, 270M 332 -> 359). Equal parts still left the threads that
/// finished first waiting for up to a whole part at the end of every
/// product (the caller's wait was 5-9% of a 2-thread decode), so once a
/// thread's share of what is left is under two parts, each part takes
/// half of it and an eighth of a whole part more (guided self-scheduling),
/// down to parts of about that eighth (at least [`MIN_PART_ROWS`] rows).
/// The parts' bounds have a closed form, so each task finds its own with no
/// table made per product.
/// `HEARTH_DECODE_SPLIT` sets the whole parts per thread (1 to 64, default
/// 4) for measuring.
#[derive(Clone, Copy, Debug)]
struct DecodeSplit {
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
    fn new(threads: usize, rows: usize) -> DecodeSplit {
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
    fn parts(&self) -> usize {
        self.whole + self.shrinking
    }

    /// Where part `k` starts; part `parts()` starts at `rows`.
    fn start(&self, k: usize) -> usize {
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
    fn range(&self, k: usize) -> std::ops::Range<usize> {
        self.start(k)..self.start(k + 1)
    }
}

/// The rows a decode part gets at least when parts are more than the
/// threads (see [`DecodeSplit`]): claiming a part costs an atomic add on a
/// line every thread shares, and its rows restart the prefetch.
const MIN_PART_ROWS: usize = 16;

/// The most products [`matmul_many`] runs as one (a layer's query, key and
/// value projections); more go one at a time.
const MAX_FUSED: usize = 4;

/// Bytes of one row of `cols` activations quantized as `at`.
fn act_row_bytes(at: GgmlType, cols: usize) -> usize {
    (cols / at.block_len()) * at.block_bytes()
}

/// Quantizes `batch` rows of `cols` activations (`x`) into `dst` as type
/// `at`, the rows split over the pool when there are several.
#[track_caller]
fn quantize_rows(
    pool: &ThreadPool,
    at: GgmlType,
    x: &[f32],
    cols: usize,
    dst: &mut [u8],
) -> Result<(), QuantError> {
    let arow = act_row_bytes(at, cols);
    let batch = dst.len() / arow.max(1);
    let tier = simd::best().gemm;
    if batch <= 1 {
        return crate::gemm::quantize_act_row(tier, at, &x[..cols * batch], dst);
    }
    let per = batch.div_ceil(pool.threads());
    pool.for_each_chunk_mut(dst, per * arow, |i, dst| {
        for (j, d) in dst.chunks_exact_mut(arow).enumerate() {
            let b = i * per + j;
            // Shapes are consistent by construction, so this cannot fail.
            let _ = crate::gemm::quantize_act_row(tier, at, &x[b * cols..(b + 1) * cols], d);
        }
    });
    Ok(())
}

/// Rows `range` of `w` times `batch` quantized activation rows (`acts`,
/// of `w`'s activation type) into `out`, through the small-batch kernels:
/// four weight rows by four activation rows, or one weight row by four
/// activation rows, where the type has such kernels; four weight rows at a
/// time for one activation row; else one dot at a time.
/// `w`'s type must have a quantized kernel in `k`.
fn quant_rows(
    k: &simd::Kernels,
    w: &Matrix,
    acts: &[u8],
    batch: usize,
    range: std::ops::Range<usize>,
    out: &SharedOut,
) {
    let Some(f) = k.quant(w.ty) else { return };
    let (rows, cols) = (w.rows, w.cols);
    let at = vec_dot_type(w.ty);
    let arow = act_row_bytes(at, cols);
    let nb = cols / w.ty.block_len();
    if let (Some(tile), true) = (k.tile4(w.ty), batch >= 4) {
        let t44 = k.tile44(w.ty);
        let rb = w.row_bytes;
        let mut r0 = range.start;
        while r0 < range.end {
            let r1 = (r0 + ROW_TILE).min(range.end);
            let mut b = 0;
            while b + 4 <= batch {
                let mut r = r0;
                if let Some(t44) = t44 {
                    while r + 4 <= r1 {
                        // SAFETY: kernel from `simd::best()`; rows r..r+4 are
                        // inside the matrix (r + 4 <= r1 <= rows), each `nb`
                        // blocks, and activation rows b..b+4 lie inside `acts`.
                        let v = unsafe {
                            t44(
                                &w.data[r * rb..(r + 4) * rb],
                                rb,
                                &acts[b * arow..(b + 4) * arow],
                                arow,
                                nb,
                            )
                        };
                        for (c, v) in v.into_iter().enumerate() {
                            for (j, v) in v.into_iter().enumerate() {
                                // SAFETY: row r + j belongs to this task alone.
                                unsafe { out.write((b + c) * rows + r + j, v) };
                            }
                        }
                        r += 4;
                    }
                }
                for r in r..r1 {
                    // SAFETY: kernel from `simd::best()`; the row holds `nb`
                    // blocks, and activation rows b..b+4 (each `arow` bytes of
                    // `nb` Q8_0 blocks) lie inside `acts`.
                    let v = unsafe { tile(w.row(r), &acts[b * arow..(b + 4) * arow], arow, nb) };
                    for (c, v) in v.into_iter().enumerate() {
                        // SAFETY: row r belongs to this task alone.
                        unsafe { out.write((b + c) * rows + r, v) };
                    }
                }
                b += 4;
            }
            for b in b..batch {
                for r in r0..r1 {
                    // SAFETY: as in the single-row path below.
                    let v = unsafe { f(w.row(r), &acts[b * arow..(b + 1) * arow], nb) };
                    // SAFETY: row r belongs to this task alone.
                    unsafe { out.write(b * rows + r, v) };
                }
            }
            r0 = r1;
        }
        return;
    }
    if let Some(rows4) = k.rows4(w.ty) {
        let rb = w.row_bytes;
        let mut r0 = range.start;
        while r0 < range.end {
            let r1 = (r0 + ROW_TILE).min(range.end);
            for b in 0..batch {
                let a = &acts[b * arow..(b + 1) * arow];
                let mut r = r0;
                while r + 4 <= r1 {
                    // SAFETY: kernel from `simd::best()`; rows r..r+4 are
                    // inside the matrix (r + 4 <= r1 <= rows), each `nb`
                    // blocks, and `a` holds `nb` activation blocks.
                    let v = unsafe { rows4(&w.data[r * rb..(r + 4) * rb], rb, a, nb) };
                    for (j, v) in v.into_iter().enumerate() {
                        // SAFETY: row r + j belongs to this task alone.
                        unsafe { out.write(b * rows + r + j, v) };
                    }
                    r += 4;
                }
                for r in r..r1 {
                    // SAFETY: as in the single-row path below.
                    let v = unsafe { f(w.row(r), a, nb) };
                    // SAFETY: row r belongs to this task alone.
                    unsafe { out.write(b * rows + r, v) };
                }
            }
            r0 = r1;
        }
        return;
    }
    let ahead = (PREFETCH_BYTES / w.row_bytes).max(1);
    let self_prefetching = k.prefetches(w.ty);
    for_tiles(range, batch, |r, b| {
        if b == 0 && !self_prefetching {
            prefetch(w.row(r + ahead));
        }
        // SAFETY: kernel from `simd::best()`; a row holds `nb` weight blocks and
        // each activation row `nb` blocks of the vec_dot type.
        let v = unsafe { f(w.row(r), &acts[b * arow..(b + 1) * arow], nb) };
        // SAFETY: row r belongs to this task alone.
        unsafe { out.write(b * rows + r, v) };
    });
}

/// How far ahead of the row being multiplied the weights are prefetched: far
/// enough to cover memory latency at full bandwidth, near enough to stay in
/// L2 (measured on decode: 8 KiB beats 2.7 KiB by 7%).
const PREFETCH_BYTES: usize = 8192;

/// Ask for `bytes` (a weight row; empty past the last row) to be brought into
/// cache: the decode products stream weights once, and the hardware
/// prefetcher alone leaves the kernels waiting on memory.
#[inline(always)]
fn prefetch(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    for line in bytes.chunks(64) {
        // SAFETY: prefetching is a hint that never faults; the address is in a
        // live slice anyway.
        unsafe {
            std::arch::x86_64::_mm_prefetch(
                line.as_ptr() as *const i8,
                std::arch::x86_64::_MM_HINT_T0,
            )
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// Visits (row, batch) pairs tile by tile: all batch entries for a few rows at a time.
#[inline]
fn for_tiles(rows: std::ops::Range<usize>, batch: usize, mut f: impl FnMut(usize, usize)) {
    let mut r0 = rows.start;
    while r0 < rows.end {
        let r1 = (r0 + ROW_TILE).min(rows.end);
        for b in 0..batch {
            for r in r0..r1 {
                f(r, b);
            }
        }
        r0 = r1;
    }
}

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
                let shared = [
                    SharedOut {
                        ptr: a.as_mut_ptr(),
                        len: a.len(),
                    },
                    SharedOut {
                        ptr: b.as_mut_ptr(),
                        len: b.len(),
                    },
                ];
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
