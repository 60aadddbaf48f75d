//! The few rows of a decode step: each weight row dotted with every row of
//! the batch, the rows shared out over the threads in parts (see
//! [`DecodeSplit`]).

use super::acts::{quantize_once, Ready};
use super::plan::{DecodeSplit, SharedOut, GEMM_MIN_BATCH, MAX_FUSED, ROW_TILE};
use super::Matrix;
use crate::formats::blocks::{blocks, BlockQ8_0, WeightFormat};
use crate::formats::float::f32_to_bf16_bits;
use crate::formats::interleave::{Interleaved, GROUP_ROWS};
use crate::simd::Acts;
use crate::{simd, QuantError};
use bytemuck::Zeroable;
use threads::ThreadPool;

/// A product of float weights (F32, F16, BF16): a GEMM for a batch of
/// [`GEMM_MIN_BATCH`] rows or more (`float_gemm`, `bf16_gemm`), one dot per
/// row and batch row below (BF16 against the activations rounded to bf16,
/// as ggml's BF16 products take them). `w`'s type must be a float type.
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
    match w.ty {
        crate::GgmlType::BF16 => BF16_ACTS.with_borrow_mut(|buf| {
            // Rounded once, for the GEMM and the dots alike.
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
            let tile = k.bf16.tile.filter(|_| batch > 1);
            let tile = tile.map(|t| (t, simd::BF16_TILE_ACTS));
            float_rows(pool, k.bf16.dot, tile, w, &acts, &shared);
            Ok(())
        }),
        _ if batch >= GEMM_MIN_BATCH => crate::float_gemm::float_gemm(pool, w, x, batch, &shared),
        crate::GgmlType::F32 => f32_rows(pool, &k.f32, w, x, batch, &shared),
        crate::GgmlType::F16 => f32_rows(pool, &k.f16, w, x, batch, &shared),
        ty => Err(QuantError::Unsupported(ty)),
    }
}

/// [`float_rows`] for weights stored as `E` against f32 activations
/// (`batch` rows of `x`): through the set's tile for a batch of two or
/// more, copying the activations to aligned rows for it.
fn f32_rows<E: bytemuck::Pod + Sync>(
    pool: &ThreadPool,
    f: &simd::FloatKernels<E>,
    w: &Matrix,
    x: &[f32],
    batch: usize,
    shared: &SharedOut,
) -> Result<(), QuantError> {
    let Some(tile) = f.tile.filter(|_| batch > 1) else {
        // One row reads its weights front to back from the caller's buffer.
        let acts = AlignedActs {
            data: x,
            batch,
            stride: w.cols,
        };
        float_rows(pool, f.dot, None, w, &acts, shared);
        return Ok(());
    };
    F32_ACTS.with_borrow_mut(|buf| {
        let acts = AlignedActs::copy(buf, x, batch, w.cols, |v| v);
        let tile = Some((tile, simd::FLOAT_TILE_ACTS));
        float_rows(pool, f.dot, tile, w, &acts, shared);
    });
    Ok(())
}

/// Every row of `w` (its elements stored as `E`) against every activation
/// row, the rows shared out over the threads: through `tile` where there is
/// one (with the activation rows it takes against one weight row), else by
/// `f` one weight row and one activation row at a time.
fn float_rows<E: bytemuck::Pod + Sync, T: Copy + Sync>(
    pool: &ThreadPool,
    f: simd::FloatDotFn<E, T>,
    tile: Option<(simd::FloatTileFn<E, T>, usize)>,
    w: &Matrix,
    acts: &AlignedActs<'_, T>,
    shared: &SharedOut,
) {
    let (rows, cols) = (w.rows, w.cols);
    let elements: &[E] = bytemuck::cast_slice(w.data());
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
                float_tiles(tile, most, elements, w, acts, r0..r1, shared);
            } else {
                for b in 0..acts.batch {
                    let xb = &acts.data[b * acts.stride..][..cols];
                    for r in r0..r1 {
                        // SAFETY: kernel from `simd::best()`.
                        let v = unsafe { f(&elements[r * cols..(r + 1) * cols], xb) };
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
fn float_tiles<E, T>(
    tile: simd::FloatTileFn<E, T>,
    one_row_acts: usize,
    elements: &[E],
    w: &Matrix,
    acts: &AlignedActs<'_, T>,
    range: std::ops::Range<usize>,
    shared: &SharedOut,
) {
    let (rows, cols) = (w.rows, w.cols);
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
            let ws = &elements[r * cols..(r + wn) * cols];
            // SAFETY: kernel from `simd::best()`.
            let v = unsafe {
                tile(
                    ws,
                    cols,
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
/// of `w`'s activation type) into `out`, through the kernel set of `w`'s
/// format (see [`QuantRows`]). `w`'s type must be a quantized format.
pub(super) fn quant_rows(
    k: &simd::Kernels,
    w: &Matrix,
    acts: &[u8],
    batch: usize,
    range: std::ops::Range<usize>,
    out: &SharedOut,
) {
    let rows = QuantRows {
        w,
        acts,
        batch,
        range,
        out,
    };
    k.with_format(w.ty, rows);
}

/// One part of a quantized product: rows `range` of `w` against `batch`
/// activation rows (`acts`), into `out`.
struct QuantRows<'a> {
    w: &'a Matrix<'a>,
    acts: &'a [u8],
    batch: usize,
    range: std::ops::Range<usize>,
    out: &'a SharedOut,
}

impl simd::ForFormat for QuantRows<'_> {
    type Out = ();

    /// Through the small-batch kernels: four weight rows by four activation
    /// rows, or one weight row by four activation rows, where the format
    /// has such kernels; four weight rows at a time for one activation row;
    /// else one dot at a time. An interleaved matrix goes group by group
    /// ([`grouped_rows`]).
    fn run<W: WeightFormat>(self, k: &simd::Kernels, f: &simd::FormatKernels<W>) {
        let acts = blocks::<Acts<W>>(self.acts);
        if self.w.grouped {
            return grouped_rows(k, f, &self, acts);
        }
        let w = blocks::<W>(self.w.data());
        let (rows, nb) = (self.w.rows, self.w.cols / W::VALUES);
        let out = self.out;
        let row = |r: usize| &w[r * nb..(r + 1) * nb];
        let act = |b: usize| &acts[b * nb..(b + 1) * nb];
        if let (Some(tile), true) = (f.tile4, self.batch >= 4) {
            return tiled_rows(f, tile, w, acts, &self);
        }
        if let Some(rows4) = f.rows4 {
            for_row_tiles(self.range, |r0, r1| {
                for b in 0..self.batch {
                    let mut r = r0;
                    while r + 4 <= r1 {
                        // SAFETY: kernel from `simd::best()`.
                        let v = unsafe { rows4(&w[r * nb..(r + 4) * nb], nb, act(b)) };
                        for (j, v) in v.into_iter().enumerate() {
                            // SAFETY: row r + j belongs to this task alone.
                            unsafe { out.write(b * rows + r + j, v) };
                        }
                        r += 4;
                    }
                    for r in r..r1 {
                        // SAFETY: kernel from `simd::best()`.
                        let v = unsafe { (f.dot)(row(r), act(b)) };
                        // SAFETY: row r belongs to this task alone.
                        unsafe { out.write(b * rows + r, v) };
                    }
                }
            });
            return;
        }
        let ahead = (PREFETCH_BYTES / self.w.row_bytes).max(1);
        for_tiles(self.range, self.batch, |r, b| {
            if b == 0 && !f.prefetches {
                prefetch(self.w.row(r + ahead));
            }
            // SAFETY: kernel from `simd::best()`.
            let v = unsafe { (f.dot)(row(r), act(b)) };
            // SAFETY: row r belongs to this task alone.
            unsafe { out.write(b * rows + r, v) };
        });
    }
}

/// [`QuantRows`] for a batch of four or more through the format's tiles:
/// four weight rows by four activation rows where it has that tile, else
/// one weight row by four; the batch's last rows one dot at a time.
fn tiled_rows<W: WeightFormat>(
    f: &simd::FormatKernels<W>,
    tile: simd::TileFn<W>,
    w: &[W],
    acts: &[Acts<W>],
    part: &QuantRows<'_>,
) {
    let (rows, nb, batch, out) = (part.w.rows, part.w.cols / W::VALUES, part.batch, part.out);
    // The activations' scales widened once for all the weight rows, into a
    // buffer the thread keeps from task to task.
    let mut scales = WIDE_SCALES.take();
    scales.clear();
    if let Some(q8_0) = simd::as_q8_0(acts) {
        simd::widen_scales(q8_0, nb, batch / 4 * 4, nb, &mut scales);
    }
    for_row_tiles(part.range.clone(), |r0, r1| {
        let mut b = 0;
        while b + 4 <= batch {
            let a = &acts[b * nb..(b + 4) * nb];
            let mut r = r0;
            while let Some(t44) = f.tile44.filter(|_| r + 4 <= r1) {
                // SAFETY: kernel from `simd::best()`.
                let v = unsafe { t44(&w[r * nb..(r + 4) * nb], nb, a, nb, nb) };
                for (c, v) in v.into_iter().enumerate() {
                    for (j, v) in v.into_iter().enumerate() {
                        // SAFETY: row r + j belongs to this task alone.
                        unsafe { out.write((b + c) * rows + r + j, v) };
                    }
                }
                r += 4;
            }
            for r in r..r1 {
                let s = scales.get(b * nb..).unwrap_or_default();
                // SAFETY: kernel from `simd::best()`; `s` holds the rows'
                // scales where they are Q8_0.
                let v = unsafe { tile(&w[r * nb..(r + 1) * nb], a, nb, s) };
                for (c, v) in v.into_iter().enumerate() {
                    // SAFETY: row r belongs to this task alone.
                    unsafe { out.write((b + c) * rows + r, v) };
                }
            }
            b += 4;
        }
        for b in b..batch {
            for r in r0..r1 {
                let (wr, a) = (&w[r * nb..(r + 1) * nb], &acts[b * nb..(b + 1) * nb]);
                // SAFETY: kernel from `simd::best()`.
                let v = unsafe { (f.dot)(wr, a) };
                // SAFETY: row r belongs to this task alone.
                unsafe { out.write(b * rows + r, v) };
            }
        }
    });
    WIDE_SCALES.set(scales);
}

/// [`QuantRows`] for an interleaved matrix: group by group through the
/// format's interleaved kernels, each group against every activation row
/// while it is in cache (four rows at a time where the set has a four-row
/// kernel); a set without them gets each group's rows copied out for its
/// one-row kernel. A batch of two or more takes each group rewritten as
/// Q8_0 first where the set has that rewrite (the same sums, the format
/// unpacked once rather than once per activation row).
fn grouped_rows<W: WeightFormat>(
    k: &simd::Kernels,
    f: &simd::FormatKernels<W>,
    part: &QuantRows<'_>,
    acts: &[Acts<W>],
) {
    let w = part.w;
    let range = part.range.clone();
    let nb = w.cols / W::VALUES;
    let widen = f.x8_as_q8_0.filter(|_| part.batch >= 2);
    // Only Q5_0 is rewritten, and its activations are Q8_0 already.
    let q8_acts = simd::as_q8_0(acts);
    let mut widened = WIDENED.take();
    let mut copy = Vec::new();
    for g in range.start / GROUP_ROWS..range.end.div_ceil(GROUP_ROWS) {
        let first = g * GROUP_ROWS;
        let (lo, hi) = (first.max(range.start), (first + GROUP_ROWS).min(range.end));
        let write = |b: usize, v: [f32; GROUP_ROWS]| {
            for r in lo..hi {
                // SAFETY: row r belongs to this task alone.
                unsafe { part.out.write(b * w.rows + r, v[r - first]) };
            }
        };
        let group = blocks::<Interleaved<W>>(w.group(g));
        match (widen, q8_acts) {
            (Some(rewrite), Some(a)) => {
                widened.resize(nb, Interleaved([BlockQ8_0::zeroed(); GROUP_ROWS]));
                // SAFETY: a kernel of `simd::best()`.
                unsafe { rewrite(group, &mut widened) };
                group_against(&k.q8_0, &widened, a, part.batch, &mut copy, write);
            }
            _ => group_against(f, group, acts, part.batch, &mut copy, write),
        }
    }
    WIDENED.set(widened);
}

/// One interleaved group (`group`, `nb` group blocks) against `batch`
/// activation rows of `nb` blocks (`acts`), each row's eight results handed
/// to `write`: through the set's interleaved kernels, else its one-row
/// kernel on the group's rows copied out into `copy`.
fn group_against<W: WeightFormat>(
    f: &simd::FormatKernels<W>,
    group: &[Interleaved<W>],
    acts: &[Acts<W>],
    batch: usize,
    copy: &mut Vec<u8>,
    write: impl Fn(usize, [f32; GROUP_ROWS]),
) {
    let nb = group.len();
    let Some(x8) = f.x8 else {
        copy.resize(GROUP_ROWS * nb * W::BYTES, 0);
        let bytes = simd::raw(group);
        crate::formats::interleave::deinterleave_rows(W::TYPE, bytes, nb, 0..GROUP_ROWS, copy);
        let copy = blocks::<W>(copy);
        for b in 0..batch {
            let a = &acts[b * nb..(b + 1) * nb];
            // SAFETY: kernel from `simd::best()`.
            write(
                b,
                std::array::from_fn(|r| unsafe { (f.dot)(&copy[r * nb..(r + 1) * nb], a) }),
            );
        }
        return;
    };
    let mut b = 0;
    while let Some(x4) = f.x8x4.filter(|_| b + 4 <= batch) {
        // SAFETY: kernel from `simd::best()`.
        let v = unsafe { x4(group, &acts[b * nb..(b + 4) * nb], nb) };
        for (c, v) in v.into_iter().enumerate() {
            write(b + c, v);
        }
        b += 4;
    }
    for b in b..batch {
        // SAFETY: kernel from `simd::best()`.
        write(b, unsafe { x8(group, &acts[b * nb..(b + 1) * nb]) });
    }
}

thread_local! {
    /// A group rewritten for a batch (see
    /// [`simd::FormatKernels::x8_as_q8_0`]), kept so a decode step
    /// allocates none.
    static WIDENED: std::cell::Cell<Vec<Interleaved<BlockQ8_0>>> = const { std::cell::Cell::new(Vec::new()) };
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
    for_row_tiles(rows, |r0, r1| {
        for b in 0..batch {
            for r in r0..r1 {
                f(r, b);
            }
        }
    });
}

/// Visits rows `rows` in tiles of [`ROW_TILE`]: `f(start, end)` for each.
#[inline]
fn for_row_tiles(rows: std::ops::Range<usize>, mut f: impl FnMut(usize, usize)) {
    let mut r0 = rows.start;
    while r0 < rows.end {
        let r1 = (r0 + ROW_TILE).min(rows.end);
        f(r0, r1);
        r0 = r1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::GgmlType;

    /// Every table gives an interleaved matrix the products of its plain
    /// rows to the bit, through its interleaved kernels or, on a table
    /// without them (the scalar one), through the group's rows copied out;
    /// for one activation row and a batch.
    #[test]
    fn interleaved_matrices_match_plain_rows_on_every_table() {
        let (rows, cols) = (16, 512);
        for ty in [
            GgmlType::Q4_K,
            GgmlType::Q6_K,
            GgmlType::Q5_0,
            GgmlType::Q8_0,
        ] {
            let wf: Vec<f32> = (0..rows * cols)
                .map(|i| ((i * 37 % 101) as f32 * 0.13).sin())
                .collect();
            let mut w = vec![0u8; rows * crate::row_size(ty, cols).unwrap()];
            crate::quantize(ty, &wf, &mut w).unwrap();
            let packed = crate::interleave(ty, rows, cols, &w, |_| {})
                .unwrap()
                .unwrap();
            let plain = Matrix::new(ty, rows, cols, &w).unwrap();
            let grouped = Matrix::interleaved(ty, rows, cols, &packed).unwrap();
            let at = crate::vec_dot_type(ty);
            for batch in [1usize, 5] {
                let x: Vec<f32> = (0..batch * cols)
                    .map(|i| ((i * 11 % 97) as f32 * 0.29).cos() * 2.0)
                    .collect();
                let mut a = vec![0u8; batch * crate::row_size(at, cols).unwrap()];
                crate::quantize_activation(at, &x, &mut a).unwrap();
                for k in simd::available() {
                    let run = |m: &Matrix| {
                        let mut out = vec![0.0f32; batch * rows];
                        let shared = SharedOut::of(&mut out, batch * rows);
                        quant_rows(k, m, &a, batch, 0..rows, &shared);
                        out
                    };
                    let (want, got) = (run(&plain), run(&grouped));
                    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&got), bits(&want), "{} {ty} batch {batch}", k.name);
                }
            }
        }
    }
}
