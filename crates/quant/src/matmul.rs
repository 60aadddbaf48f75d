//! Weight matrices and the matrix-times-activations product.

use crate::pool::{split_range, ThreadPool};
use crate::{
    dequantize, is_supported, quantize_activation, simd, vec_dot_type, GgmlType, QuantError,
};

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

/// Batches from this size on take the split-tile GEMM where the CPU has it.
const GEMM_MIN_BATCH: usize = 16;

/// The split-tile product (see [`crate::gemm`]): activations split once, each
/// thread splits its own tiles of four weight rows and sweeps all activations.
#[allow(clippy::too_many_arguments)]
fn gemm_split(
    pool: &ThreadPool,
    w: &Matrix,
    at: GgmlType,
    acts: &[u8],
    arow: usize,
    batch: usize,
    tile: crate::gemm::TileFn,
    out: &SharedOut,
) {
    use crate::gemm::{Split, TILE};
    let (rows, cols) = (w.rows, w.cols);
    let nb = cols / 32;
    let has_min = w.ty == GgmlType::Q4_K;
    let cols_padded = batch.div_ceil(TILE) * TILE;
    let mut a = Split::new(cols_padded, nb);
    for c in 0..batch {
        a.fill_row(c, at, &acts[c * arow..(c + 1) * arow], cols);
    }
    let tiles = rows.div_ceil(TILE);
    let parts = pool.threads().min(tiles);
    pool.run(parts, |t| {
        let mut ws = Split::new(TILE, nb);
        for rt in split_range(tiles, parts, t) {
            let r0 = rt * TILE;
            for r in 0..TILE {
                if r0 + r < rows {
                    ws.fill_row(r, w.ty, w.row(r0 + r), cols);
                } else {
                    ws.clear(r);
                }
            }
            for c0 in (0..batch).step_by(TILE) {
                let v = tile(&ws, 0, &a, c0);
                for (c, vc) in v.iter().enumerate().take(batch - c0) {
                    for (r, &x) in vc
                        .iter()
                        .enumerate()
                        .take(rows.saturating_sub(r0).min(TILE))
                    {
                        let x = if has_min {
                            x - ws.min_term(r, &a, c0 + c)
                        } else {
                            x
                        };
                        // SAFETY: rows r0..r0+TILE belong to this task alone.
                        unsafe { out.write((c0 + c) * rows + r0 + r, x) };
                    }
                }
            }
        }
    });
}

/// The output buffer shared by tasks that each write a disjoint set of rows.
struct SharedOut {
    ptr: *mut f32,
    len: usize,
}

// SAFETY: tasks write only indices b*rows + r for r in their own row range, so no
// two threads touch the same element, and the buffer outlives the parallel scope.
unsafe impl Sync for SharedOut {}
// SAFETY: as above; the pointer is only dereferenced inside the scope of the borrow.
unsafe impl Send for SharedOut {}

impl SharedOut {
    /// Writes `v` at `i`.
    ///
    /// # Safety
    /// No other thread may access index `i` concurrently.
    #[inline]
    unsafe fn write(&self, i: usize, v: f32) {
        assert!(i < self.len);
        // SAFETY: in bounds (checked above); exclusivity is the caller's contract.
        unsafe { *self.ptr.add(i) = v }
    }
}

/// `out[b*rows + r] = dot(W row r, x[b*cols..(b+1)*cols])` for `b` in `0..batch`.
///
/// `scratch` holds the quantized activations and is reused across calls: it only
/// grows, so once it is big enough there is no allocation.
///
/// # Panics
/// When `x` or `out` is shorter than the shapes imply; use [`try_matmul`] to get an
/// error instead.
pub fn matmul(
    pool: &ThreadPool,
    w: &Matrix,
    x: &[f32],
    batch: usize,
    out: &mut [f32],
    scratch: &mut Vec<u8>,
) {
    if let Err(e) = try_matmul(pool, w, x, batch, out, scratch) {
        panic!("matmul: {e}");
    }
}

/// [`matmul`] that reports bad shapes as errors.
pub fn try_matmul(
    pool: &ThreadPool,
    w: &Matrix,
    x: &[f32],
    batch: usize,
    out: &mut [f32],
    scratch: &mut Vec<u8>,
) -> Result<(), QuantError> {
    let (rows, cols) = (w.rows, w.cols);
    let nx = batch.checked_mul(cols).ok_or(QuantError::Overflow)?;
    let nout = batch.checked_mul(rows).ok_or(QuantError::Overflow)?;
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
    if nout == 0 {
        return Ok(());
    }
    let x = &x[..nx];
    let k = simd::best();
    let shared = SharedOut {
        ptr: out.as_mut_ptr(),
        len: nout,
    };
    let parts = pool.threads().min(rows);

    if let Some(f) = k.float(w.ty) {
        pool.run(parts, |t| {
            for_tiles(split_range(rows, parts, t), batch, |r, b| {
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

    let f = k.quant(w.ty).ok_or(QuantError::Unsupported(w.ty))?;
    let at = vec_dot_type(w.ty);
    let arow = (cols / at.block_len()) * at.block_bytes();
    let need = arow * batch;
    if scratch.len() < need {
        scratch.resize(need, 0);
    }
    let acts = &mut scratch[..need];
    if batch > 1 {
        let per = batch.div_ceil(pool.threads());
        pool.for_each_chunk_mut(acts, per * arow, |i, dst| {
            for (j, d) in dst.chunks_exact_mut(arow).enumerate() {
                let b = i * per + j;
                // Shapes are consistent by construction, so this cannot fail.
                let _ = quantize_activation(at, &x[b * cols..(b + 1) * cols], d);
            }
        });
    } else {
        quantize_activation(at, x, acts)?;
    }
    let acts = &scratch[..need];
    let nb = cols / w.ty.block_len();
    if batch >= GEMM_MIN_BATCH && crate::gemm::supports(w.ty) {
        if let Some(tile) = crate::gemm::kernel() {
            gemm_split(pool, w, at, acts, arow, batch, tile, &shared);
            return Ok(());
        }
    }
    if let (Some(tile), true) = (k.tile4(w.ty), batch >= 4) {
        pool.run(parts, |t| {
            let range = split_range(rows, parts, t);
            let mut r0 = range.start;
            while r0 < range.end {
                let r1 = (r0 + ROW_TILE).min(range.end);
                let mut b = 0;
                while b + 4 <= batch {
                    for r in r0..r1 {
                        // SAFETY: kernel from `simd::best()`; the row holds `nb`
                        // blocks, and activation rows b..b+4 (each `arow` bytes of
                        // `nb` Q8_0 blocks) lie inside `acts`.
                        let v =
                            unsafe { tile(w.row(r), &acts[b * arow..(b + 4) * arow], arow, nb) };
                        for (c, v) in v.into_iter().enumerate() {
                            // SAFETY: row r belongs to this task alone.
                            unsafe { shared.write((b + c) * rows + r, v) };
                        }
                    }
                    b += 4;
                }
                for b in b..batch {
                    for r in r0..r1 {
                        // SAFETY: as in the single-row path below.
                        let v = unsafe { f(w.row(r), &acts[b * arow..(b + 1) * arow], nb) };
                        // SAFETY: row r belongs to this task alone.
                        unsafe { shared.write(b * rows + r, v) };
                    }
                }
                r0 = r1;
            }
        });
        return Ok(());
    }
    pool.run(parts, |t| {
        for_tiles(split_range(rows, parts, t), batch, |r, b| {
            if b == 0 {
                prefetch(w.row(r + PREFETCH_ROWS));
            }
            // SAFETY: kernel from `simd::best()`; a row holds `nb` weight blocks and
            // each activation row `nb` blocks of the vec_dot type.
            let v = unsafe { f(w.row(r), &acts[b * arow..(b + 1) * arow], nb) };
            // SAFETY: row r belongs to this task alone.
            unsafe { shared.write(b * rows + r, v) };
        });
    });
    Ok(())
}

/// How far ahead of the row being multiplied its successor is prefetched.
const PREFETCH_ROWS: usize = 4;

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
