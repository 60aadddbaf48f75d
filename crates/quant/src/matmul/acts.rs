//! The activations of a product, quantized to the weights' activation
//! type: at the product, or ahead of it by the operation that computes
//! them ([`PreparedActs`]), while they are in that operation's cache.

use super::plan::{
    tasks_per_thread, PanelFormat, SharedBytes, SharedOut, GEMM_MIN_BATCH, MAX_FUSED,
};
use super::Matrix;
use crate::simd::{self, GemmTier};
use crate::{vec_dot_type, GgmlType, QuantError};
use threads::ThreadPool;

/// Where [`quantize_panel_acts`] takes its rows from.
pub(super) enum RowSource<'a> {
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
pub(super) fn quantize_panel_acts(
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

/// One task's rows of the activation buffers (bytes, scales, scaled sums,
/// group starting integers).
type ActsPart<'a> = (&'a mut [u8], &'a mut [f32], &'a mut [f32], &'a mut [i32]);

/// Activations quantized ahead, by the operation that computed them, for
/// the product that comes next: the caller holds this value and hands it
/// to that product ([`super::Product::prepared`]), which takes it where it
/// is in the form its weights read, and empties it either way.
///
/// On a prefill batch the tasks that compute a row (a norm, by
/// [`PreparedActs::make_rows`]; a gated MLP's activation, by
/// [`super::Gate::next`]) quantize it for the panel product at once, so
/// that no separate operation reads the rows again from the other cores'
/// caches. On a decode step the tasks of a gated product quantize each
/// block of its output as they complete it; otherwise the calling thread
/// would quantize the whole row alone between the two products.
#[derive(Default)]
pub struct PreparedActs {
    /// What the buffers hold; `None` when nothing is prepared.
    form: Option<Form>,
    /// Block-quantized rows, for a decode product.
    bytes: Vec<u8>,
    /// Per row and block: the elements computed so far.
    filled: Vec<std::sync::atomic::AtomicU32>,
    /// A prefill batch's activations for the panel product.
    panel: crate::gemm::Acts,
}

/// What a [`PreparedActs`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// `batch` rows of `cols` activations block-quantized as `at`, in `bytes`.
    Rows {
        at: GgmlType,
        cols: usize,
        batch: usize,
    },
    /// The panel product's activations of this format, in `panel`.
    Panel(PanelFormat),
}

impl std::fmt::Debug for PreparedActs {
    // What is prepared, not the megabytes of it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedActs")
            .field("form", &self.form)
            .finish_non_exhaustive()
    }
}

/// Activations taken from a [`PreparedActs`] by the product they serve.
pub(super) struct Ready<'p> {
    form: Form,
    acts: &'p PreparedActs,
}

impl Ready<'_> {
    /// The panel activations, where they are of `format`.
    pub(super) fn panel(&self, format: PanelFormat) -> Option<&crate::gemm::Acts> {
        (self.form == Form::Panel(format)).then_some(&self.acts.panel)
    }

    /// The block-quantized rows, where they are `batch` rows of `cols`
    /// activations of type `at`.
    pub(super) fn rows(&self, at: GgmlType, cols: usize, batch: usize) -> Option<&[u8]> {
        (self.form == Form::Rows { at, cols, batch })
            .then(|| &self.acts.bytes[..act_row_bytes(at, cols) * batch])
    }
}

impl PreparedActs {
    /// Whether activations are prepared (until a product takes them).
    pub fn is_ready(&self) -> bool {
        self.form.is_some()
    }

    /// Forgets what was prepared (the buffers are kept for reuse).
    pub fn clear(&mut self) {
        self.form = None;
    }

    /// Takes what is prepared, for one product: empty after it.
    pub(super) fn take(&mut self) -> Option<Ready<'_>> {
        let form = self.form.take()?;
        Some(Ready { form, acts: self })
    }

    /// Makes the `batch` rows of `x` (`next.cols()` wide) with `make(i,
    /// row)`, row by row, in parallel once the batch is long enough to pay
    /// for it. Where `next` takes the panel product over this batch, the
    /// task that makes a row also quantizes it for `next` at once, from its
    /// cache, into `self`, for the product of `x` that comes next. Whatever
    /// was prepared before is gone.
    #[track_caller]
    pub fn make_rows(
        &mut self,
        pool: &ThreadPool,
        next: &Matrix,
        x: &mut [f32],
        batch: usize,
        make: &(dyn Fn(usize, &mut [f32]) + Sync),
    ) -> Result<(), QuantError> {
        let cols = next.cols;
        let n = batch.checked_mul(cols).ok_or(QuantError::Overflow)?;
        let have = x.len();
        let x = x.get_mut(..n).ok_or(QuantError::BufferTooShort {
            what: "activation",
            need: n,
            have,
        })?;
        self.form = None;
        if cols == 0 {
            return Ok(());
        }
        if let Some(format) = PanelFormat::for_product(simd::best(), next, batch) {
            self.make_panel_rows(pool, format, x, make);
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

    /// Makes the `format.batch` rows of `x` with `make(i, row)` and
    /// quantizes each, on the thread that made it, into `self` for a panel
    /// product of `format`.
    #[track_caller]
    pub(super) fn make_panel_rows(
        &mut self,
        pool: &ThreadPool,
        format: PanelFormat,
        x: &mut [f32],
        make: &(dyn Fn(usize, &mut [f32]) + Sync),
    ) {
        let cols = format.cols;
        let buf = SharedOut::of(x, x.len());
        let make_row = |i: usize| {
            // SAFETY: row i belongs to the task that makes it, and this is
            // the only slice of it alive.
            make(i, unsafe { buf.slice(i * cols, cols) });
        };
        let src = RowSource::Made {
            buf: &buf,
            make: &make_row,
        };
        quantize_panel_acts(pool, format, src, &mut self.panel);
        self.form = Some(Form::Panel(format));
    }
}

/// Where the tasks of a gated decode product put the blocks of its output
/// they complete (see [`PreparedActs`]).
pub(super) struct BlockSink<'a> {
    at: GgmlType,
    /// Elements and bytes of a block; blocks per row.
    len: usize,
    bytes: usize,
    per_row: usize,
    out: SharedBytes,
    filled: &'a [std::sync::atomic::AtomicU32],
    /// The form of the value the blocks go to, set once they are all done.
    form: &'a mut Option<Form>,
    /// The rows and batch of the product.
    shape: (usize, usize),
}

impl<'a> BlockSink<'a> {
    /// Readies `ready` for the output of a gated product of `rows` rows and
    /// `batch` activation rows feeding `next` (it holds them once every
    /// block is done, see [`Self::finish`]); `None` where `next` does not
    /// take block-quantized activations of that width.
    pub(super) fn new(
        k: &simd::Kernels,
        next: &Matrix,
        rows: usize,
        batch: usize,
        ready: &'a mut PreparedActs,
    ) -> Option<Self> {
        use std::sync::atomic::{AtomicU32, Ordering};
        ready.form = None;
        let at = vec_dot_type(next.ty);
        let len = match at {
            GgmlType::Q8_0 | GgmlType::Q8_K => at.block_len(),
            _ => return None,
        };
        let usable = next.cols == rows && rows.is_multiple_of(len) && k.quantized(next.ty);
        if !usable {
            return None;
        }
        let per_row = rows / len;
        let bytes = at.block_bytes();
        let PreparedActs {
            bytes: buf,
            filled,
            form,
            ..
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
            out: SharedBytes::of(buf, batch * per_row * bytes),
            filled,
            form,
            shape: (rows, batch),
        })
    }

    /// Counts elements `range` of row `b` of `computed` as done, and
    /// quantizes each block this completes.
    ///
    /// # Safety
    /// Those elements are final, and this task holds no slice of `computed`.
    pub(super) unsafe fn done(
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

    /// Marks the blocks, all done now the product's tasks have ended, as
    /// prepared for the next product.
    pub(super) fn finish(self) {
        let (cols, batch) = self.shape;
        *self.form = Some(Form::Rows {
            at: self.at,
            cols,
            batch,
        });
    }
}

/// The activations each of `ws` (at most [`MAX_FUSED`] matrices of equal
/// width) reads: `batch` rows of `x` quantized once per activation type
/// they need, one copy after another in `scratch`, except where `input`
/// holds that type for these rows already. Fixed arrays, as this runs a
/// few times per decode step.
#[track_caller]
pub(super) fn quantize_once<'s>(
    pool: &ThreadPool,
    ws: &[&Matrix],
    x: &[f32],
    batch: usize,
    scratch: &'s mut Vec<u8>,
    input: Option<&'s Ready<'_>>,
) -> Result<[&'s [u8]; MAX_FUSED], QuantError> {
    let cols = ws.first().map_or(0, |w| w.cols);
    let at = |i: usize| vec_dot_type(ws[i].ty);
    let given = |i: usize| input.and_then(|r| r.rows(at(i), cols, batch));
    // Where in `scratch` each matrix's copy starts; `None` where `input`
    // has it.
    let mut starts = [None; MAX_FUSED];
    let mut need = 0;
    for i in 0..ws.len().min(MAX_FUSED) {
        if given(i).is_some() {
            continue;
        }
        starts[i] = match (0..i).find(|&j| at(j) == at(i)) {
            Some(j) => starts[j],
            None => {
                let start = need;
                need += act_row_bytes(at(i), cols) * batch;
                crate::gemm::grow(scratch, need, 0);
                let dst = &mut scratch[start..need];
                quantize_rows(pool, at(i), &x[..batch * cols], cols, dst)?;
                Some(start)
            }
        };
    }
    let scratch = &scratch[..];
    let mut acts: [&[u8]; MAX_FUSED] = [&[]; MAX_FUSED];
    for i in 0..ws.len().min(MAX_FUSED) {
        acts[i] = match (given(i), starts[i]) {
            (Some(a), _) => a,
            (None, Some(s)) => &scratch[s..s + act_row_bytes(at(i), cols) * batch],
            (None, None) => &[],
        };
    }
    Ok(acts)
}

/// Bytes of one row of `cols` activations quantized as `at`.
pub(super) fn act_row_bytes(at: GgmlType, cols: usize) -> usize {
    (cols / at.block_len()) * at.block_bytes()
}

/// Quantizes `batch` rows of `cols` activations (`x`) into `dst` as type
/// `at`, the rows split over the pool when there are several.
#[track_caller]
pub(super) fn quantize_rows(
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
