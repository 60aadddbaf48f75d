//! The few rows of a decode step: each weight row dotted with every row of
//! the batch, the rows shared out over the threads in parts (see
//! [`DecodeSplit`]).

use super::acts::{act_row_bytes, quantize_once, Ready};
use super::plan::{DecodeSplit, SharedOut, GEMM_MIN_BATCH, MAX_FUSED, ROW_TILE};
use super::Matrix;
use crate::formats::float::f32_to_bf16_bits;
use crate::formats::interleave::GROUP_ROWS;
use crate::{simd, vec_dot_type, QuantError};
use threads::ThreadPool;

/// A product of float weights (F32, F16, BF16): a GEMM for a batch of
/// [`GEMM_MIN_BATCH`] rows or more (`float_gemm`, `bf16_gemm`), one dot per
/// row and batch row below (BF16 against the activations rounded to bf16,
/// as ggml's BF16 products take them). `w`'s type must have a float kernel
/// in `k`.
#[track_caller]
pub(super) fn float_product(
    pool: &ThreadPool,
    k: &simd::Kernels,
    w: &Matrix,
    x: &[f32],
    batch: usize,
    out: &mut [f32],
) -> Result<(), QuantError> {
    let shared = SharedOut::of(out, batch * w.rows);
    if w.ty == crate::GgmlType::BF16 {
        // Rounded once, for the GEMM and the dots alike.
        return BF16_ACTS.with_borrow_mut(|buf| {
            let acts = AlignedActs::copy(buf, x, batch, w.cols, f32_to_bf16_bits);
            if batch >= GEMM_MIN_BATCH {
                let dot = k.has_bf16_dot();
                return crate::bf16_gemm::bf16_gemm(
                    pool,
                    w,
                    acts.data,
                    acts.stride,
                    batch,
                    &shared,
                    dot,
                );
            }
            let tile = k.bf16_tile.filter(|_| batch > 1);
            let tile = tile.map(|t| (t, simd::BF16_TILE_ACTS));
            float_rows(pool, k.bf16, tile, w, &acts, &shared);
            Ok(())
        });
    }
    if batch >= GEMM_MIN_BATCH {
        return crate::float_gemm::float_gemm(pool, w, x, batch, &shared);
    }
    let Some(f) = k.float(w.ty) else {
        return Err(QuantError::Unsupported(w.ty));
    };
    let Some(tile) = k.float_tile(w.ty).filter(|_| batch > 1) else {
        // One row reads its weights front to back from the caller's buffer.
        let acts = AlignedActs {
            data: x,
            batch,
            stride: w.cols,
        };
        float_rows(pool, f, None, w, &acts, &shared);
        return Ok(());
    };
    F32_ACTS.with_borrow_mut(|buf| {
        let acts = AlignedActs::copy(buf, x, batch, w.cols, |v| v);
        float_rows(
            pool,
            f,
            Some((tile, simd::FLOAT_TILE_ACTS)),
            w,
            &acts,
            &shared,
        );
    });
    Ok(())
}

/// Every row of `w` against every activation row, the rows shared out over
/// the threads: through `tile` where there is one (with the activation rows
/// it takes against one weight row), else by `f` one weight row and one
/// activation row at a time.
fn float_rows<T: Copy + Sync>(
    pool: &ThreadPool,
    f: simd::FloatDotFn<T>,
    tile: Option<(simd::FloatTileFn<T>, usize)>,
    w: &Matrix,
    acts: &AlignedActs<'_, T>,
    shared: &SharedOut,
) {
    let (rows, cols) = (w.rows, w.cols);
    let split = DecodeSplit::new(pool.threads(), rows);
    pool.run(split.parts(), |t| {
        let part = split.range(t);
        let mut r0 = part.start;
        while r0 < part.end {
            let r1 = (r0 + ROW_TILE).min(part.end);
            // One row reads its weights front to back, the stream the
            // hardware prefetchers follow best; the tiles read a few
            // rows side by side.
            if let Some((tile, most)) = tile {
                float_tiles(tile, most, w, acts, r0..r1, shared);
            } else {
                for b in 0..acts.batch {
                    let xb = &acts.data[b * acts.stride..][..cols];
                    for r in r0..r1 {
                        // SAFETY: kernel from `simd::best()`; the Matrix
                        // guarantees `cols` elements per row and `xb` has
                        // exactly `cols`.
                        let v = unsafe { f(w.row(r), xb, cols) };
                        // SAFETY: row r belongs to this task alone.
                        unsafe { shared.write(b * rows + r, v) };
                    }
                }
            }
            r0 = r1;
        }
    });
}

/// The activation bytes of a group from which a float tile takes several
/// weight rows at once (docs/perf/speculation.md).
const WIDE_TILE_ACT_BYTES: usize = 16 << 10;

thread_local! {
    /// The calling thread's copy of a float batch's activations, kept
    /// between products.
    static F32_ACTS: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
    /// The same for BF16 weights' products, rounded to bf16.
    static BF16_ACTS: std::cell::RefCell<Vec<u16>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A batch's activation rows copied to start on cache lines, each row
/// `stride` elements (its length rounded up to a line) from the last. The
/// tiles load every activation vector once per weight row; from the
/// model's buffers (4-byte aligned) each load straddled two lines and the
/// four-row tile was bound by those split loads.
struct AlignedActs<'a, T> {
    data: &'a [T],
    batch: usize,
    stride: usize,
}

impl<'a, T: Copy + Default> AlignedActs<'a, T> {
    /// `x`'s `batch` rows of `cols` floats, each converted by `convert`,
    /// laid out in `buf`; the padding is `T::default()` (zero).
    fn copy(
        buf: &'a mut Vec<T>,
        x: &[f32],
        batch: usize,
        cols: usize,
        convert: impl Fn(f32) -> T,
    ) -> Self {
        let line = 64 / std::mem::size_of::<T>();
        let stride = cols.next_multiple_of(line).max(line);
        let len = batch * stride;
        buf.clear();
        buf.resize(len + line, T::default());
        // Less than a line in: the buffer's start is aligned to its type.
        let skip = buf.as_ptr().align_offset(64).min(line);
        let data = &mut buf[skip..skip + len];
        for (dst, src) in data
            .chunks_exact_mut(stride)
            .zip(x.chunks_exact(cols.max(1)))
        {
            for (d, &s) in dst.iter_mut().zip(src) {
                *d = convert(s);
            }
        }
        Self {
            data,
            batch,
            stride,
        }
    }
}

/// Rows `range` of the float matrix `w` times the `batch` rows of `x`
/// through `tile`: the activation rows in as few groups as the tile takes,
/// of even sizes (nine rows as three threes rather than 4, 4 and 1, whose
/// last group would load each weight vector for one row).
fn float_tiles<T>(
    tile: simd::FloatTileFn<T>,
    one_row_acts: usize,
    w: &Matrix,
    acts: &AlignedActs<'_, T>,
    range: std::ops::Range<usize>,
    shared: &SharedOut,
) {
    let (rows, cols, row_bytes) = (w.rows, w.cols, w.row_bytes());
    let AlignedActs {
        data: x,
        batch,
        stride,
    } = *acts;
    // Several weight rows at once only where the group's activations would
    // not stay in L1 beside the weights: there each weight row's pass
    // reloaded them from L2. Otherwise one row at a time, which streams the
    // weights from memory best, against as many activation rows as the
    // tile takes.
    let wide_at = |n: usize| n * cols * std::mem::size_of::<T>() >= WIDE_TILE_ACT_BYTES;
    let most = if wide_at(one_row_acts.min(batch)) {
        simd::FLOAT_TILE_ACTS
    } else {
        one_row_acts
    };
    let groups = batch.div_ceil(most);
    let mut b = 0;
    for g in 0..groups {
        let n = (batch - b) / (groups - g);
        let wide = wide_at(n);
        let wmax = if wide { simd::FLOAT_TILE_WEIGHTS } else { 1 };
        let mut r = range.start;
        while r < range.end {
            let wn = (range.end - r).min(wmax);
            let ws = &w.data()[r * row_bytes..(r + wn) * row_bytes];
            // SAFETY: kernel from `simd::best()`; rows r..r + wn hold `cols`
            // elements each, `row_bytes` apart, and activation rows
            // b..b + n (`stride` apart) lie inside `x`.
            let v = unsafe {
                tile(
                    ws,
                    row_bytes,
                    &x[b * stride..(b + n) * stride],
                    stride,
                    cols,
                    wn,
                    n,
                )
            };
            for (dv, vs) in v.iter().take(wn).enumerate() {
                for (c, &v) in vs[..n].iter().enumerate() {
                    // SAFETY: row r + dv belongs to this task alone.
                    unsafe { shared.write((b + c) * rows + r + dv, v) };
                }
            }
            r += wn;
        }
        b += n;
    }
}

/// The products of up to [`MAX_FUSED`] integer matrices of one width over
/// the same rows (shapes checked): the activations are quantized once per
/// activation type (or taken from `input`), and every matrix's rows are
/// shared out in one parallel operation, where separate products would
/// quantize again and make the threads meet once per matrix. The rows are
/// split as one product's, so that only the last parts are short; a part
/// that spans two matrices does its piece of each.
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
    let acts = quantize_once(pool, ws, x, batch, scratch, input)?;
    let mut shared: [SharedOut; MAX_FUSED] = std::array::from_fn(|_| SharedOut::empty());
    for ((sh, w), out) in shared.iter_mut().zip(ws).zip(outs.iter_mut()) {
        *sh = SharedOut::of(out, batch * w.rows);
    }
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
                quant_rows(k, w, acts[i], batch, lo - first..hi - first, &shared[i]);
            }
            first = end;
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
#[expect(
    clippy::too_many_lines,
    reason = "longer than a screen; issue 91 splits it"
)]
pub(super) fn quant_rows(
    k: &simd::Kernels,
    w: &Matrix,
    acts: &[u8],
    batch: usize,
    range: std::ops::Range<usize>,
    out: &SharedOut,
) {
    if w.grouped {
        return grouped_rows(k, w, acts, batch, range, out);
    }
    let Some(f) = k.quant(w.ty) else { return };
    let (rows, cols) = (w.rows, w.cols);
    let at = vec_dot_type(w.ty);
    let arow = act_row_bytes(at, cols);
    let nb = cols / w.ty.block_len();
    if let (Some(tile), true) = (k.tile4(w.ty), batch >= 4) {
        let t44 = k.tile44(w.ty);
        let rb = w.row_bytes;
        // The activations' scales widened once for all the weight rows,
        // into a buffer the thread keeps from task to task.
        let mut scales = WIDE_SCALES.take();
        scales.clear();
        if at == crate::GgmlType::Q8_0 {
            simd::widen_scales(acts, arow, batch / 4 * 4, nb, &mut scales);
        }
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
                    let s = scales.get(b * nb..).unwrap_or_default();
                    // SAFETY: kernel from `simd::best()`; the row holds `nb`
                    // blocks, activation rows b..b+4 (each `arow` bytes of
                    // `nb` blocks) lie inside `acts`, and `s` holds their
                    // scales where they are Q8_0.
                    let v = unsafe { tile(w.row(r), &acts[b * arow..(b + 4) * arow], arow, s, nb) };
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
        WIDE_SCALES.set(scales);
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

/// [`quant_rows`] for an interleaved matrix: group by group through the
/// table's interleaved kernels, each group against every activation row
/// while it is in cache (four rows at a time where the table has a
/// four-row kernel); a table without one gets each group's rows copied out
/// for its one-row kernel.
fn grouped_rows(
    k: &simd::Kernels,
    w: &Matrix,
    acts: &[u8],
    batch: usize,
    range: std::ops::Range<usize>,
    out: &SharedOut,
) {
    let Some(f) = k.quant(w.ty) else { return };
    let (mut x8, mut x8x4) = (k.x8(w.ty), k.x8x4(w.ty));
    let arow = act_row_bytes(vec_dot_type(w.ty), w.cols);
    let (rb, nb) = (w.row_bytes, w.cols / w.ty.block_len());
    // A batch takes each group rewritten once into a type whose kernel
    // unpacks less per activation row (Q5_0's fifth bits), where the
    // table has such a rewrite; the sums are the same.
    let widen = k.x8_widened(w.ty).filter(|_| batch >= 2);
    if let Some((_, ty)) = widen {
        (x8, x8x4) = (k.x8(ty), k.x8x4(ty));
    }
    let mut copy = Vec::new();
    let mut widened = WIDENED.take();
    for g in range.start / GROUP_ROWS..range.end.div_ceil(GROUP_ROWS) {
        let first = g * GROUP_ROWS;
        let (lo, hi) = (first.max(range.start), (first + GROUP_ROWS).min(range.end));
        if x8.is_none() {
            w.rows_into(first, GROUP_ROWS, &mut copy);
        }
        let group = match widen {
            Some((rewrite, ty)) => {
                widened.resize(nb * GROUP_ROWS * ty.block_bytes(), 0);
                // SAFETY: a kernel of `simd::best()`; the group holds `nb`
                // group blocks and `widened` room for `nb` of `ty`.
                unsafe { rewrite(w.group(g), nb, &mut widened) };
                &widened[..]
            }
            None => w.group(g),
        };
        let write = |b: usize, v: [f32; GROUP_ROWS]| {
            for r in lo..hi {
                // SAFETY: row r belongs to this task alone.
                unsafe { out.write(b * w.rows + r, v[r - first]) };
            }
        };
        let mut b = 0;
        while let Some(x4) = x8x4.filter(|_| b + 4 <= batch) {
            // SAFETY: kernel from `simd::best()`; the group holds `nb` group
            // blocks and activation rows b..b+4 lie inside `acts`.
            let v = unsafe { x4(group, &acts[b * arow..(b + 4) * arow], arow, nb) };
            for (c, v) in v.into_iter().enumerate() {
                write(b + c, v);
            }
            b += 4;
        }
        for b in b..batch {
            let a = &acts[b * arow..(b + 1) * arow];
            write(
                b,
                match x8 {
                    // SAFETY: kernel from `simd::best()`; the group holds
                    // `nb` group blocks and `a` `nb` activation blocks.
                    Some(x8) => unsafe { x8(group, a, nb) },
                    None => {
                        // SAFETY: as in `quant_rows`, for the rows copied out.
                        std::array::from_fn(|r| unsafe { f(&copy[r * rb..(r + 1) * rb], a, nb) })
                    }
                },
            );
        }
    }
    WIDENED.set(widened);
}

thread_local! {
    /// A group rewritten for a batch (see [`simd::Kernels::x8_widened`]),
    /// kept so a decode step allocates none.
    static WIDENED: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
    /// The tile kernels' widened activation scales (see
    /// [`simd::widen_scales`]), kept so a decode step allocates none.
    static WIDE_SCALES: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

/// How far ahead of the row being multiplied the weights are prefetched: far
/// enough to cover memory latency at full bandwidth, near enough to stay in
/// L2 (docs/perf/speed.md, "The product's shape").
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
