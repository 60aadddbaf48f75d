//! `y = x Wᵀ (+ b)`: the one product of a weight, for the text model and
//! every media tower alike.
//!
//! A [`Weight`] is a matrix left in the mapped file (or rearranged at load
//! into the decode layout); a [`Linear`] is a weight with an optional bias
//! and the clamps some towers put around their products (Gemma 4's
//! `ClippableLinear`). Every product goes through [`quant::matmul`] in the
//! model's [`Precision`]: the integer kernels for quantized weights (and
//! the f32 GEMM for float ones, which widens a block of the weight's rows
//! at a time, so the activations stay exact), or f32 activations against
//! dequantized weights with [`Precision::Exact`]. [`Linear::apply_many`]
//! and [`Linear::apply_gated`] run several weights over one input in one
//! pass, with the same numbers as one [`Linear::apply`] after another.

use crate::lora::RowAdapters;
use gguf::{GgmlType, GgufFile, TensorInfo};
use quant::{Matrix, PreparedActs, QuantError};
use std::sync::{Arc, OnceLock};
use threads::{FirstError, ThreadPool};

/// Activation rows per task of the row-wise steps the towers run between
/// products.
pub const ROW_BLOCK: usize = 64;

/// How matrix products treat activations.
///
/// Gemma's residual stream carries a few channels hundreds of times larger
/// than the rest. Quantizing activations to 8 bits (as llama.cpp does, and as
/// `Quantized` does, with its exact rounding rules) then leaves the other
/// channels of such a block with a step so coarse that a change in the last
/// bit of an input can flip roundings and move logits by a few tenths. `Exact`
/// keeps activations in f32 and dequantizes weights instead: deterministic to
/// the last digits, slower.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    /// 8-bit activations and integer dot products (llama.cpp's scheme).
    #[default]
    Quantized,
    /// f32 activations against dequantized weights.
    Exact,
}

/// Bounds a product's input and output are clamped to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Clamp {
    /// `(lo, hi)` for every input element.
    pub input: (f32, f32),
    /// `(lo, hi)` for every output element.
    pub output: (f32, f32),
}

/// A weight matrix left in the mapped file: `rows` outputs of `cols`
/// inputs, optionally rearranged at load into the decode layout of
/// [`quant::interleave`].
#[derive(Debug, Clone)]
pub struct Weight {
    info: TensorInfo,
    /// Where the matrix starts in the tensor's bytes: 0, or one slice of a
    /// stack of matrices stored as one 3-D tensor.
    offset: usize,
    /// The matrix's bytes from `offset`.
    len: usize,
    /// Output features.
    pub rows: usize,
    /// Input features.
    pub cols: usize,
    /// The matrix in the decode layout, where the kernels read it once it
    /// is made (at load, or by a background thread after it: clones of the
    /// weight share it).
    interleaved: Arc<OnceLock<Vec<u8>>>,
    /// The matrix made at load as f32 rows, read instead of the file (a
    /// tensor the file stores transposed).
    held: Option<Arc<[u8]>>,
}

impl Weight {
    /// The tensor `info` as a matrix of `rows` × `cols` (the caller has
    /// checked its shape).
    pub fn new(info: TensorInfo, rows: usize, cols: usize) -> Result<Self, QuantError> {
        let len = rows * quant::row_size(info.ty, cols)?;
        Ok(Self {
            info,
            offset: 0,
            len,
            rows,
            cols,
            interleaved: Arc::default(),
            held: None,
        })
    }

    /// The float tensor `info`, stored as `cols` rows of `rows` values (a
    /// projection the reference multiplies as `x · P`, Gemma 3's vision
    /// projector), made at load into f32 rows of `rows` outputs by `cols`
    /// inputs, so that its product is `x Wᵀ` like every other weight's.
    pub fn transposed(
        file: &GgufFile,
        info: TensorInfo,
        rows: usize,
        cols: usize,
    ) -> Result<Self, QuantError> {
        let mut stored = vec![0.0f32; rows * cols];
        quant::dequantize(info.ty, file.tensor_data(&info), &mut stored)?;
        let mut held = Vec::with_capacity(rows * cols * 4);
        for r in 0..rows {
            for c in 0..cols {
                held.extend_from_slice(&stored[c * rows + r].to_le_bytes());
            }
        }
        Ok(Self {
            len: held.len(),
            info: TensorInfo {
                ty: GgmlType::F32,
                ..info
            },
            offset: 0,
            rows,
            cols,
            interleaved: Arc::default(),
            held: Some(held.into()),
        })
    }

    /// The `count` matrices of `rows` × `cols` stacked in the 3-D tensor
    /// `info` (Gemma 3n's AltUp projections).
    pub fn stack(
        info: &TensorInfo,
        rows: usize,
        cols: usize,
        count: usize,
    ) -> Result<Vec<Self>, QuantError> {
        let bytes = rows * quant::row_size(info.ty, cols)?;
        Ok((0..count)
            .map(|i| Self {
                info: info.clone(),
                offset: i * bytes,
                len: bytes,
                rows,
                cols,
                interleaved: Arc::default(),
                held: None,
            })
            .collect())
    }

    /// The name of the tensor it is (or is a slice of).
    pub fn name(&self) -> &str {
        &self.info.name
    }

    /// Whether `other` is bound to the same bytes of the same tensor (tied
    /// embeddings and head).
    pub fn same_tensor(&self, other: &Weight) -> bool {
        self.info.name == other.info.name && self.offset == other.offset
    }

    /// The element type.
    pub fn ty(&self) -> GgmlType {
        self.info.ty
    }

    /// A kernel view over the file's bytes, or over the decode layout made
    /// at load.
    pub fn matrix<'a>(&'a self, file: &'a GgufFile) -> Result<Matrix<'a>, QuantError> {
        let (ty, rows, cols) = (self.info.ty, self.rows, self.cols);
        if let Some(data) = &self.held {
            return Matrix::new(ty, rows, cols, data);
        }
        if let Some(data) = self.interleaved.get() {
            return Matrix::interleaved(ty, rows, cols, data);
        }
        Matrix::new(ty, rows, cols, self.file_bytes(file))
    }

    /// The matrix's bytes in the file.
    fn file_bytes<'a>(&self, file: &'a GgufFile) -> &'a [u8] {
        let data = file.tensor_data(&self.info);
        data.get(self.offset..self.offset + self.len)
            .unwrap_or_default()
    }

    /// Rearranges the matrix into the decode layout of
    /// [`quant::interleave`] where the kernels in use read it; with
    /// `give_back`, gives the file's pages of it back as they are read
    /// (they are not read again once it is made, but products running
    /// meanwhile read them: see [`Weight::give_back`]). Returns the bytes
    /// rearranged. Products running meanwhile read the file's layout, with
    /// the same results.
    pub fn interleave(&self, file: &GgufFile, give_back: bool) -> Result<usize, QuantError> {
        let made = self.interleaved.get().is_some() || self.held.is_some();
        if made || !quant::interleaves(self.info.ty) {
            return Ok(0);
        }
        let bytes = self.file_bytes(file);
        let release = |read: &[u8]| {
            if give_back {
                file.release(read);
            }
        };
        let Some(packed) = quant::interleave(self.info.ty, self.rows, self.cols, bytes, release)?
        else {
            return Ok(0);
        };
        // Another clone of this weight may have made it meanwhile.
        match self.interleaved.set(packed) {
            Ok(()) => Ok(bytes.len()),
            Err(_) => Ok(0),
        }
    }

    /// Gives the file's pages of the matrix back once its decode layout is
    /// made (nothing before: they are still read).
    pub fn give_back(&self, file: &GgufFile) {
        if self.interleaved.get().is_some() {
            file.release(self.file_bytes(file));
        }
    }
}

/// A weight, an optional bias per output and optional clamps: the one
/// product every model and tower runs.
#[derive(Debug, Clone)]
pub struct Linear {
    /// The matrix.
    pub weight: Weight,
    /// Added to every output row.
    pub bias: Option<Vec<f32>>,
    /// Input and output bounds.
    pub clamp: Option<Clamp>,
}

/// Where and how products run: the file the weights live in, the pool and
/// the precision.
#[derive(Clone, Copy)]
pub struct Products<'a> {
    /// The mapped file the weights are bound in.
    pub file: &'a GgufFile,
    /// The threads that run the product.
    pub pool: &'a ThreadPool,
    /// How activations are treated.
    pub precision: Precision,
    /// The adapters each row of the batch runs with, beside the weights
    /// (`None`: none, as for the towers and the output head).
    pub adapters: Option<&'a RowAdapters>,
}

impl Products<'_> {
    /// Whether some row's adapters change `w`.
    fn adapted(&self, w: &Linear) -> bool {
        self.adapters.is_some_and(|a| a.changes(w.weight.name()))
    }

    /// Adds each row's adapter updates of `w` to `out`.
    fn add_updates(
        &self,
        w: &Linear,
        x: &[f32],
        n: usize,
        out: &mut [f32],
        bufs: &mut ProductBuffers,
    ) -> Result<(), QuantError> {
        match self.adapters {
            Some(a) => a.add_updates(*self, w.weight.name(), x, n, out, bufs),
            None => Ok(()),
        }
    }
}

/// The activations a product takes, beside their f32 values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    /// Quantized by the product itself where it needs them so.
    Plain,
    /// The output of [`Linear::apply_gated`], with the activations it
    /// quantized for its `next` weight where it did.
    AfterGate,
}

/// Buffers reused across the products of a forward pass or an encoding.
#[derive(Debug, Default)]
pub struct ProductBuffers {
    /// Activations quantized to the weights' dot type.
    qbuf: Vec<u8>,
    /// Transposed outputs of the exact-precision product.
    wide: Vec<f32>,
    /// Activations clamped for a clamped product.
    clamped: Vec<f32>,
    /// A block's input, quantized once for the block's first products
    /// ([`Linear::apply_many`], [`Linear::apply_gated`]).
    pub block_input: PreparedActs,
    /// A gated MLP's output, quantized by the gated product for the down
    /// projection where that pays.
    gated: PreparedActs,
    /// An adapter update's low-rank rows and its full-width rows.
    pub(crate) lora: (Vec<f32>, Vec<f32>),
}

impl Linear {
    /// A weight with no bias and no clamps.
    pub fn new(weight: Weight) -> Self {
        Self {
            weight,
            bias: None,
            clamp: None,
        }
    }

    /// Output features.
    pub fn rows(&self) -> usize {
        self.weight.rows
    }

    /// Input features.
    pub fn cols(&self) -> usize {
        self.weight.cols
    }

    /// `out[..n·rows] = x[..n·cols] Wᵀ + b`, clamped as the weight says.
    pub fn apply(
        &self,
        ctx: Products,
        x: &[f32],
        n: usize,
        out: &mut [f32],
        bufs: &mut ProductBuffers,
        input: Input,
    ) -> Result<(), QuantError> {
        let matrix = self.weight.matrix(ctx.file)?;
        let mut clamped = std::mem::take(&mut bufs.clamped);
        let x = match self.clamp {
            Some(Clamp {
                input: (lo, hi), ..
            }) => {
                clamped.clear();
                // `take`, not a slice: a short input reaches the product's
                // shape check as an error instead of panicking here.
                let take = n * matrix.cols();
                clamped.extend(x.iter().take(take).map(|&v| v.clamp(lo, hi)));
                &clamped[..]
            }
            None => x,
        };
        let result = product(ctx, &matrix, x, n, out, bufs, input)
            .and_then(|()| ctx.add_updates(self, x, n, out, bufs));
        bufs.clamped = clamped;
        result?;
        self.finish(&mut out[..n * matrix.rows()]);
        Ok(())
    }

    /// The bias and the output clamp, over whole output rows.
    fn finish(&self, out: &mut [f32]) {
        if let Some(bias) = &self.bias {
            for r in out.chunks_exact_mut(bias.len().max(1)) {
                r.iter_mut().zip(bias).for_each(|(o, &b)| *o += b);
            }
        }
        if let Some(Clamp {
            output: (lo, hi), ..
        }) = self.clamp
        {
            out.iter_mut().for_each(|v| *v = v.clamp(lo, hi));
        }
    }

    /// `outs[i] = x ws[i]ᵀ` for one input: in one pass (see
    /// [`quant::Product`]) where the activations are quantized, which also
    /// leaves them in `bufs.block_input` for the block's later products;
    /// one product after another in exact precision or where a weight
    /// clamps its input. The same numbers either way as [`Self::apply`] on
    /// each.
    pub fn apply_many<const N: usize>(
        ctx: Products,
        ws: [&Linear; N],
        x: &[f32],
        n: usize,
        outs: &mut [&mut [f32]; N],
        bufs: &mut ProductBuffers,
    ) -> Result<(), QuantError> {
        let Some(first) = ws.first() else {
            return Ok(());
        };
        let fused = ctx.precision == Precision::Quantized && ws.iter().all(|w| w.clamp.is_none());
        if !fused {
            for (w, out) in ws.iter().zip(outs.iter_mut()) {
                w.apply(ctx, x, n, out, bufs, Input::Plain)?;
            }
            return Ok(());
        }
        // Matrix views in a fixed array: this runs a few times per step.
        let mut matrices = [first.weight.matrix(ctx.file)?; N];
        for (m, w) in matrices.iter_mut().zip(ws).skip(1) {
            *m = w.weight.matrix(ctx.file)?;
        }
        let refs: [&Matrix; N] = std::array::from_fn(|i| &matrices[i]);
        let product = quant::Product {
            prepared: Some(&mut bufs.block_input),
            ..quant::Product::new(&refs, x, n)
        };
        quant::matmul(ctx.pool, product, outs, &mut bufs.qbuf)?;
        for ((w, m), out) in ws.iter().zip(&matrices).zip(outs.iter_mut()) {
            ctx.add_updates(w, x, n, out, bufs)?;
            w.finish(&mut out[..n * m.rows()]);
        }
        Ok(())
    }

    /// `outs[0] = act(x gateᵀ, x upᵀ)` row by row, with `outs[1] = x upᵀ`
    /// (a gated MLP's first half; `act` acts element by element), as one
    /// parallel operation where the activations are quantized (see
    /// [`quant::Gate`]), which also quantizes `outs[0]` for `next` where it
    /// can ([`Input::AfterGate`]). The same numbers as
    /// [`Self::apply_many`] followed by `act`. The weights have no bias or
    /// clamps (the text model's).
    #[allow(clippy::too_many_arguments)]
    pub fn apply_gated(
        ctx: Products,
        [gate, up]: [&Linear; 2],
        x: &[f32],
        n: usize,
        [out_gate, out_up]: [&mut [f32]; 2],
        bufs: &mut ProductBuffers,
        act: &(dyn Fn(&mut [f32], &[f32]) + Sync),
        next: &Linear,
    ) -> Result<(), QuantError> {
        let (g, u) = (gate.weight.matrix(ctx.file)?, up.weight.matrix(ctx.file)?);
        // An adapter changes the gate or up rows before the activation.
        let adapted = ctx.adapted(gate) || ctx.adapted(up);
        match ctx.precision {
            Precision::Quantized if !adapted => {
                let (next, ws) = (next.weight.matrix(ctx.file)?, [&g, &u]);
                let product = quant::Product {
                    prepared: Some(&mut bufs.block_input),
                    gate: Some(quant::Gate {
                        act,
                        next: Some((&next, &mut bufs.gated)),
                    }),
                    ..quant::Product::new(&ws, x, n)
                };
                quant::matmul(ctx.pool, product, &mut [out_gate, out_up], &mut bufs.qbuf)
            }
            _ => {
                bufs.gated.clear();
                let rows = g.rows();
                let outs = &mut [&mut out_gate[..n * rows], &mut out_up[..n * rows]];
                Self::apply_many(ctx, [gate, up], x, n, outs, bufs)?;
                crate::par_rows(ctx.pool, &mut out_gate[..n * rows], rows, |i, r| {
                    act(r, &out_up[i * rows..(i + 1) * rows])
                });
                Ok(())
            }
        }
    }
}

/// `out = x Wᵀ` for `n` rows through the kernel view `w`, in the
/// precision of `ctx`: what [`Linear::apply`] runs between its clamps, and
/// the product of a matrix that is not a whole tensor's (one expert of a
/// stack, a slice of the head).
pub fn product(
    ctx: Products,
    w: &Matrix,
    x: &[f32],
    n: usize,
    out: &mut [f32],
    bufs: &mut ProductBuffers,
    input: Input,
) -> Result<(), QuantError> {
    match ctx.precision {
        Precision::Quantized => {
            let ws = [w];
            let product = quant::Product {
                prepared: (input == Input::AfterGate).then_some(&mut bufs.gated),
                ..quant::Product::new(&ws, x, n)
            };
            quant::matmul(ctx.pool, product, &mut [out], &mut bufs.qbuf)
        }
        Precision::Exact => matmul_exact(ctx.pool, w, x, n, out, &mut bufs.wide),
    }
}

/// Weight rows [`matmul_exact`] takes out of the matrix at a time.
const EXACT_ROWS: usize = 32;

/// `out = x Wᵀ` with f32 activations: each weight row is dequantized once
/// and dotted with every row of the batch. Slower than the integer kernels,
/// but free of activation-quantization error (see [`Precision`]).
fn matmul_exact(
    pool: &ThreadPool,
    w: &Matrix,
    x: &[f32],
    batch: usize,
    out: &mut [f32],
    transposed: &mut Vec<f32>,
) -> Result<(), QuantError> {
    let (rows, cols) = (w.rows(), w.cols());
    w.check_product(x, batch, out)?;
    transposed.resize(rows * batch, 0.0);
    let per_worker = rows.div_ceil(pool.threads());
    let failure = FirstError::new();
    pool.for_each_chunk_mut(
        &mut transposed[..rows * batch],
        per_worker * batch,
        |worker, chunk| {
            let (mut row, mut raw) = (vec![0.0f32; cols], Vec::new());
            // Rows come out of an interleaved layout a group at a time:
            // block by block (as one row's lookup takes them) costs more
            // than the dot products.
            for (g, group) in chunk.chunks_mut(EXACT_ROWS * batch).enumerate() {
                let (first, rb) = (worker * per_worker + g * EXACT_ROWS, w.row_bytes());
                let rows = match w.is_interleaved() {
                    true => {
                        w.rows_into(first, EXACT_ROWS, &mut raw);
                        raw.chunks_exact(rb)
                    }
                    false => w.data()[first * rb..].chunks_exact(rb),
                };
                for (bytes, outs) in rows.zip(group.chunks_exact_mut(batch)) {
                    if let Err(e) = quant::dequantize(w.ty(), bytes, &mut row) {
                        return failure.set(e);
                    }
                    for (b, o) in outs.iter_mut().enumerate() {
                        *o = quant::vector::dot(&row, &x[b * cols..(b + 1) * cols]);
                    }
                }
            }
        },
    );
    failure.into_result()?;
    for r in 0..rows {
        for b in 0..batch {
            out[b * rows + r] = transposed[r * batch + b];
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gguf::{GgmlType, GgufWriter};

    /// Float products of a few rows (the per-row kernels) and of many (the
    /// f32 GEMM) are the textbook product, with the bias added and both
    /// clamps applied.
    #[test]
    fn float_products_are_the_product() {
        let (rows, cols) = (37, 48);
        let w: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 7) as f32 * 0.37).sin())
            .collect();
        let bytes: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
        let bias: Vec<f32> = (0..rows).map(|i| i as f32 * 0.01).collect();
        let mut gguf = GgufWriter::new();
        gguf.add_tensor("w", &[cols as u64, rows as u64], GgmlType::F32, bytes)
            .unwrap();
        let file = GgufFile::from_bytes(gguf.to_bytes()).unwrap();
        let weight = Weight::new(file.tensor("w").unwrap().clone(), rows, cols).unwrap();
        let pool = ThreadPool::new(2);
        for n in [1usize, 3, 8, 70] {
            let x: Vec<f32> = (0..n * cols)
                .map(|i| ((i * 5) as f32 * 0.21).cos() * 3.0)
                .collect();
            for clamp in [
                None,
                Some(Clamp {
                    input: (-1.0, 2.0),
                    output: (-0.5, 0.5),
                }),
            ] {
                let lin = Linear {
                    weight: weight.clone(),
                    bias: Some(bias.clone()),
                    clamp,
                };
                let ctx = Products {
                    file: &file,
                    pool: &pool,
                    precision: Precision::Quantized,
                    adapters: None,
                };
                let mut out = vec![0.0f32; n * rows];
                let mut bufs = ProductBuffers::default();
                lin.apply(ctx, &x, n, &mut out, &mut bufs, Input::Plain)
                    .unwrap();
                for i in 0..n {
                    for r in 0..rows {
                        let mut want: f32 = (0..cols)
                            .map(|c| {
                                let v = x[i * cols + c];
                                let v = clamp.map_or(v, |k| v.clamp(k.input.0, k.input.1));
                                v * w[r * cols + c]
                            })
                            .sum::<f32>()
                            + bias[r];
                        if let Some(k) = clamp {
                            want = want.clamp(k.output.0, k.output.1);
                        }
                        let got = out[i * rows + r];
                        assert!(
                            (got - want).abs() < 1e-4,
                            "n {n} ({i}, {r}): {got} vs {want}"
                        );
                    }
                }
            }
        }
    }

    /// An input shorter than `n` rows is a shape error, clamped or not,
    /// never a panic.
    #[test]
    fn a_short_input_is_an_error() {
        let (rows, cols) = (4, 8);
        let bytes = vec![0u8; rows * cols * 4];
        let mut gguf = GgufWriter::new();
        gguf.add_tensor("w", &[cols as u64, rows as u64], GgmlType::F32, bytes)
            .unwrap();
        let file = GgufFile::from_bytes(gguf.to_bytes()).unwrap();
        let weight = Weight::new(file.tensor("w").unwrap().clone(), rows, cols).unwrap();
        let pool = ThreadPool::new(1);
        let ctx = Products {
            file: &file,
            pool: &pool,
            precision: Precision::Quantized,
            adapters: None,
        };
        for clamp in [
            None,
            Some(Clamp {
                input: (-1.0, 1.0),
                output: (-1.0, 1.0),
            }),
        ] {
            let lin = Linear {
                weight: weight.clone(),
                bias: None,
                clamp,
            };
            let mut out = vec![0.0f32; 2 * rows];
            let mut bufs = ProductBuffers::default();
            let short = vec![0.5f32; cols + 3];
            assert!(lin
                .apply(ctx, &short, 2, &mut out, &mut bufs, Input::Plain)
                .is_err());
        }
    }
}
