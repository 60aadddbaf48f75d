//! Weight matrices and their one product with activations ([`matmul`]),
//! by concern: [`plan`] shares a product out over the threads, [`acts`]
//! quantizes its activations (ahead of it, as [`PreparedActs`], or at the
//! product), [`rows`] computes the few rows of a decode step, [`panels`] a
//! prefill batch, and [`gated`] a gated MLP's first half.

mod acts;
mod gated;
mod panels;
mod plan;
mod rows;

pub use acts::PreparedActs;
pub(crate) use plan::SharedOut;
pub use plan::ROW_BATCH_MAX;

use crate::formats::interleave::{deinterleave_rows, supports, GROUP_ROWS};
use crate::{dequantize, is_supported, simd, GgmlType, QuantError};
use acts::Ready;
use plan::{GEMM_MIN_BATCH, MAX_FUSED};
use threads::ThreadPool;

/// A weight matrix view: `rows` rows of `cols` elements of type `ty`,
/// validated on construction; row after row, or Q4_K/Q6_K/Q5_0/Q8_0 rows in groups
/// of eight (see [`Matrix::interleaved`]).
#[derive(Debug, Clone, Copy)]
pub struct Matrix<'a> {
    ty: GgmlType,
    rows: usize,
    cols: usize,
    row_bytes: usize,
    data: &'a [u8],
    /// Rows interleaved in groups of [`GROUP_ROWS`].
    grouped: bool,
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
            grouped: false,
        })
    }

    /// A Q4_K, Q5_0 or Q8_0 matrix in the decode layout [`crate::interleave`] makes: its
    /// rows in groups of [`GROUP_ROWS`], each group's blocks side by side.
    /// Every product reads it with the same results as the rows it came
    /// from; the decode kernels read it as one stream.
    pub fn interleaved(
        ty: GgmlType,
        rows: usize,
        cols: usize,
        data: &'a [u8],
    ) -> Result<Self, QuantError> {
        if !supports(ty) || !rows.is_multiple_of(GROUP_ROWS) {
            return Err(QuantError::Shape(format!(
                "rows interleaved by {GROUP_ROWS} are Q4_K, Q5_0 or Q8_0 in whole groups, not {ty:?} x {rows}"
            )));
        }
        Ok(Matrix {
            grouped: true,
            ..Self::new(ty, rows, cols, data)?
        })
    }

    /// Whether the rows are interleaved (see [`Matrix::interleaved`]).
    pub fn is_interleaved(&self) -> bool {
        self.grouped
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

    /// The bytes of row `i`; empty when `i` is out of range or the rows
    /// are interleaved (whose rows [`Matrix::rows_into`] copies out).
    pub fn row(&self, i: usize) -> &'a [u8] {
        if i >= self.rows || self.grouped {
            return &[];
        }
        &self.data[i * self.row_bytes..(i + 1) * self.row_bytes]
    }

    /// The bytes of group `g` of an interleaved matrix (rows `8g..8g+8`).
    pub(crate) fn group(&self, g: usize) -> &'a [u8] {
        let len = GROUP_ROWS * self.row_bytes;
        &self.data[g * len..(g + 1) * len]
    }

    /// Rows `first..first + n` (clamped to the matrix) one after another in
    /// their standard layout, into `dst` (resized to fit), whatever the
    /// matrix's layout.
    pub fn rows_into(&self, first: usize, n: usize, dst: &mut Vec<u8>) {
        let (first, end) = (first.min(self.rows), (first + n).min(self.rows));
        let rb = self.row_bytes;
        dst.resize((end - first) * rb, 0);
        if !self.grouped {
            dst.copy_from_slice(&self.data[first * rb..end * rb]);
            return;
        }
        let nb = self.cols / self.ty.block_len();
        for g in first / GROUP_ROWS..end.div_ceil(GROUP_ROWS) {
            let (lo, hi) = ((g * GROUP_ROWS).max(first), ((g + 1) * GROUP_ROWS).min(end));
            let within = lo - g * GROUP_ROWS..hi - g * GROUP_ROWS;
            let at = (lo - first) * rb..(hi - first) * rb;
            deinterleave_rows(self.ty, self.group(g), nb, within, &mut dst[at]);
        }
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
        if self.grouped {
            // Block by block through a buffer on the stack: a token's
            // embedding is looked up this way, so nothing is allocated.
            let (bb, bl) = (self.ty.block_bytes(), self.ty.block_len());
            let mut stack = [0u8; 256];
            let block = stack
                .get_mut(..bb)
                .ok_or(QuantError::Unsupported(self.ty))?;
            let group = self.group(i / GROUP_ROWS);
            let r = i % GROUP_ROWS;
            for (b, out) in dst.chunks_exact_mut(bl).enumerate() {
                let src = &group[b * GROUP_ROWS * bb..(b + 1) * GROUP_ROWS * bb];
                deinterleave_rows(self.ty, src, 1, r..r + 1, block);
                dequantize(self.ty, block, out)?;
            }
            return Ok(());
        }
        dequantize(self.ty, self.row(i), dst)
    }

    /// Checks that `x` holds `batch` rows of `cols()` activations and `out`
    /// has room for `batch` rows of `rows()` results.
    pub fn check_product(&self, x: &[f32], batch: usize, out: &[f32]) -> Result<(), QuantError> {
        let nx = batch.checked_mul(self.cols).ok_or(QuantError::Overflow)?;
        let nout = batch.checked_mul(self.rows).ok_or(QuantError::Overflow)?;
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
}

/// What one [`matmul`] computes: `outs[i] = weights[i] x` for `batch` rows
/// of `x`, every matrix as wide as a row of `x`. Matrices that share `x` (a
/// layer's query, key and value projections) go in one product: `x` is
/// quantized once per activation type, and their rows are shared out in
/// one parallel operation. Each result is the same to the bit as the
/// matrix's product alone.
pub struct Product<'a> {
    /// The weight matrices; up to four run as one operation.
    pub weights: &'a [&'a Matrix<'a>],
    /// `batch` rows of activations, one after another.
    pub x: &'a [f32],
    /// Rows of `x` multiplied.
    pub batch: usize,
    /// `x` quantized ahead (by [`PreparedActs::make_rows`] or a gated
    /// product's [`Gate::next`]), taken where it is in the form these
    /// weights read, `x` quantized afresh otherwise: the same numbers
    /// either way. It serves this one product and is empty after it.
    pub prepared: Option<&'a mut PreparedActs>,
    /// A gated MLP's first half: `weights` are the gate and up matrices.
    pub gate: Option<Gate<'a>>,
}

/// The gating of a [`Product`] of a gate and an up matrix: `outs[0] =
/// act(gate x, up x)` row by row, with `outs[1] = up x` kept.
pub struct Gate<'a> {
    /// Applied to each row of gate outputs with its row of up outputs; it
    /// must act element by element (it is handed pieces of rows).
    pub act: &'a (dyn Fn(&mut [f32], &[f32]) + Sync),
    /// The product of `outs[0]` that comes next: where it pays, the tasks
    /// that compute `outs[0]` also quantize it for that matrix, into the
    /// value given, while it is in their cache.
    pub next: Option<(&'a Matrix<'a>, &'a mut PreparedActs)>,
}

impl<'a> Product<'a> {
    /// The plain product of `weights` over `batch` rows of `x`.
    pub fn new(weights: &'a [&'a Matrix<'a>], x: &'a [f32], batch: usize) -> Self {
        Product {
            weights,
            x,
            batch,
            prepared: None,
            gate: None,
        }
    }
}

/// Computes `product` into `outs` (one per matrix, `batch` rows of the
/// matrix's `rows()` each).
///
/// `scratch` holds quantized activations and is reused across calls: it
/// only grows, so once it is big enough there is no allocation. Operands
/// shorter than the shapes imply, or a gate over other than two matrices of
/// one shape, are an error, never a panic.
#[track_caller]
pub fn matmul(
    pool: &ThreadPool,
    product: Product<'_>,
    outs: &mut [&mut [f32]],
    scratch: &mut Vec<u8>,
) -> Result<(), QuantError> {
    let Product {
        weights: ws,
        x,
        batch,
        prepared,
        gate,
    } = product;
    // Prepared activations serve one product, whatever follows.
    let input = prepared.and_then(PreparedActs::take);
    let mut gate = gate;
    if let Some((_, next)) = gate.as_mut().and_then(|g| g.next.as_mut()) {
        next.clear();
    }
    check_shapes(ws, x, batch, outs, gate.is_some())?;
    if batch == 0 {
        return Ok(());
    }
    match gate {
        Some(gate) => gated::product(pool, [ws[0], ws[1]], x, batch, outs, scratch, input, gate),
        None => products(pool, ws, x, batch, outs, scratch, input),
    }
}

/// Checks every operand of a product (see [`Matrix::check_product`]), and
/// that a gated one is of two matrices of one shape.
fn check_shapes(
    ws: &[&Matrix],
    x: &[f32],
    batch: usize,
    outs: &[&mut [f32]],
    gated: bool,
) -> Result<(), QuantError> {
    if ws.len() != outs.len() {
        return Err(QuantError::Shape(format!(
            "{} matrices for {} outputs",
            ws.len(),
            outs.len()
        )));
    }
    if gated && !(ws.len() == 2 && ws[0].rows == ws[1].rows && ws[0].cols == ws[1].cols) {
        return Err(QuantError::Shape(
            "a gated product takes a gate and an up matrix of one shape".into(),
        ));
    }
    for (w, out) in ws.iter().zip(outs) {
        w.check_product(x, batch, out)?;
    }
    Ok(())
}

/// The ungated products of `ws` over `x` (shapes checked, `batch > 0`): a
/// prefill batch as panel products, grouped by activation format (see
/// [`panels::products`]); the few rows of a decode step of quantized
/// weights in one operation (see [`rows::products`]); anything else one
/// matrix at a time.
#[track_caller]
fn products(
    pool: &ThreadPool,
    ws: &[&Matrix],
    x: &[f32],
    batch: usize,
    outs: &mut [&mut [f32]],
    scratch: &mut Vec<u8>,
    input: Option<Ready<'_>>,
) -> Result<(), QuantError> {
    let k = simd::best();
    let integer = |w: &&Matrix| k.quantized(w.ty);
    if ws.len() <= MAX_FUSED && batch >= GEMM_MIN_BATCH {
        return panels::products(pool, k, ws, x, batch, outs, scratch, input.as_ref());
    }
    if ws.len() <= MAX_FUSED && ws.iter().all(integer) {
        return rows::products(pool, k, ws, x, batch, outs, scratch, input.as_ref());
    }
    for (w, out) in ws.iter().zip(outs.iter_mut()) {
        single(pool, k, w, x, batch, out, scratch)?;
    }
    Ok(())
}

/// One matrix's product (shapes checked): float weights through the float
/// kernels, integer ones as a panel product where the batch takes one, else
/// row by row.
#[track_caller]
fn single(
    pool: &ThreadPool,
    k: &simd::Kernels,
    w: &Matrix,
    x: &[f32],
    batch: usize,
    out: &mut [f32],
    scratch: &mut Vec<u8>,
) -> Result<(), QuantError> {
    let x = &x[..batch * w.cols];
    if simd::is_float(w.ty) {
        return rows::float_product(pool, k, w, x, batch, out);
    }
    if !k.quantized(w.ty) {
        return Err(QuantError::Unsupported(w.ty));
    }
    if batch >= GEMM_MIN_BATCH && crate::gemm::group_len(w.ty).is_some() {
        let shared = SharedOut::of(out, batch * w.rows);
        panels::gemm_panels(pool, k.gemm, &[w], x, batch, std::slice::from_ref(&shared));
        return Ok(());
    }
    rows::products(pool, k, &[w], x, batch, &mut [out], scratch, None)
}
