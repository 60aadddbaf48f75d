//! Matrix products in the precision the model was loaded with.

use crate::scratch::ProductBuffers;
use crate::weights::Linear;
use crate::{Model, ModelError, Precision};
use threads::FirstError;

impl Model {
    /// `out = W x` for `batch` rows through the weight matrix `w`.
    #[track_caller]
    pub(crate) fn linear(
        &self,
        w: &Linear,
        x: &[f32],
        batch: usize,
        out: &mut [f32],
        bufs: &mut ProductBuffers,
    ) -> Result<(), ModelError> {
        self.matmul(&w.matrix(&self.file)?, x, batch, out, bufs)
    }

    /// `outs[i] = ws[i] x` for a batch of block inputs (`x`, made by
    /// [`Self::block_input_for`], which may have quantized it for these
    /// products): in one pass (see [`quant::Product`]) where the
    /// activations are quantized, one product after another in exact
    /// precision. The same numbers either way as [`Self::linear`] on each.
    #[track_caller]
    pub(crate) fn linear_many<const N: usize>(
        &self,
        ws: [&Linear; N],
        x: &[f32],
        batch: usize,
        outs: &mut [&mut [f32]; N],
        bufs: &mut ProductBuffers,
    ) -> Result<(), ModelError> {
        // Matrix views in a fixed array: this runs a few times per step.
        let Some(first) = ws.first() else {
            return Ok(());
        };
        let mut matrices = [first.matrix(&self.file)?; N];
        for (m, w) in matrices.iter_mut().zip(ws).skip(1) {
            *m = w.matrix(&self.file)?;
        }
        match self.precision {
            Precision::Quantized => {
                let refs: [&quant::Matrix; N] = std::array::from_fn(|i| &matrices[i]);
                let product = quant::Product {
                    prepared: Some(&mut bufs.block_input),
                    ..quant::Product::new(&refs, x, batch)
                };
                quant::matmul(&self.pool, product, outs, &mut bufs.qbuf)?
            }
            Precision::Exact => {
                for (m, out) in matrices.iter().zip(outs.iter_mut()) {
                    matmul_exact(&self.pool, m, x, batch, out, &mut bufs.wide)?;
                }
            }
        }
        Ok(())
    }

    /// `outs[0] = act(gate x, up x)` row by row, with `outs[1] = up x`, over
    /// a batch of block inputs (as [`Self::linear_many`]): a gated MLP's
    /// first half, as one parallel operation where the activations are
    /// quantized (see [`quant::Gate`]); `act` acts element by element. The
    /// same numbers as [`Self::linear_many`] followed by `act`. Where it
    /// can, the operation also quantizes `outs[0]` for `next`, which
    /// [`Self::linear_after_gate`] takes.
    #[track_caller]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn linear_gated(
        &self,
        [gate, up]: [&Linear; 2],
        x: &[f32],
        batch: usize,
        [out_gate, out_up]: [&mut [f32]; 2],
        bufs: &mut ProductBuffers,
        act: &(dyn Fn(&mut [f32], &[f32]) + Sync),
        next: &Linear,
    ) -> Result<(), ModelError> {
        let (g, u) = (gate.matrix(&self.file)?, up.matrix(&self.file)?);
        match self.precision {
            Precision::Quantized => {
                let (next, ws) = (next.matrix(&self.file)?, [&g, &u]);
                let product = quant::Product {
                    prepared: Some(&mut bufs.block_input),
                    gate: Some(quant::Gate {
                        act,
                        next: Some((&next, &mut bufs.gated)),
                    }),
                    ..quant::Product::new(&ws, x, batch)
                };
                quant::matmul(&self.pool, product, &mut [out_gate, out_up], &mut bufs.qbuf)?
            }
            Precision::Exact => {
                matmul_exact(&self.pool, &g, x, batch, out_gate, &mut bufs.wide)?;
                matmul_exact(&self.pool, &u, x, batch, out_up, &mut bufs.wide)?;
                let rows = g.rows();
                nn::par_rows(&self.pool, &mut out_gate[..batch * rows], rows, |i, r| {
                    act(r, &out_up[i * rows..(i + 1) * rows])
                });
            }
        }
        Ok(())
    }

    /// `out = W x` for a batch, in the precision the model was loaded with.
    #[track_caller]
    pub(crate) fn matmul(
        &self,
        w: &quant::Matrix,
        x: &[f32],
        batch: usize,
        out: &mut [f32],
        bufs: &mut ProductBuffers,
    ) -> Result<(), ModelError> {
        self.product(w, x, batch, out, bufs, false)
    }

    /// [`Self::linear`] of the output of [`Self::linear_gated`] (`x`), with
    /// the activations it quantized for `w` where it did.
    #[track_caller]
    pub(crate) fn linear_after_gate(
        &self,
        w: &Linear,
        x: &[f32],
        batch: usize,
        out: &mut [f32],
        bufs: &mut ProductBuffers,
    ) -> Result<(), ModelError> {
        self.product(&w.matrix(&self.file)?, x, batch, out, bufs, true)
    }

    /// `out = W x`, taking the gated product's prepared activations when
    /// `after_gate` says `x` is its output.
    #[track_caller]
    fn product(
        &self,
        w: &quant::Matrix,
        x: &[f32],
        batch: usize,
        out: &mut [f32],
        bufs: &mut ProductBuffers,
        after_gate: bool,
    ) -> Result<(), ModelError> {
        match self.precision {
            Precision::Quantized => {
                let ws = [w];
                let product = quant::Product {
                    prepared: after_gate.then_some(&mut bufs.gated),
                    ..quant::Product::new(&ws, x, batch)
                };
                quant::matmul(&self.pool, product, &mut [out], &mut bufs.qbuf)?
            }
            Precision::Exact => matmul_exact(&self.pool, w, x, batch, out, &mut bufs.wide)?,
        }
        Ok(())
    }
}

/// `out = W x` with f32 activations: each weight row is dequantized once and
/// dotted with every row of the batch. Slower than the integer kernels, but
/// free of activation-quantization error (see [`Precision`]).
#[track_caller]
fn matmul_exact(
    pool: &threads::ThreadPool,
    w: &quant::Matrix,
    x: &[f32],
    batch: usize,
    out: &mut [f32],
    transposed: &mut Vec<f32>,
) -> Result<(), quant::QuantError> {
    let (rows, cols) = (w.rows(), w.cols());
    w.check_product(x, batch, out)?;
    transposed.resize(rows * batch, 0.0);
    let per_worker = rows.div_ceil(pool.threads());
    let failure = FirstError::new();
    pool.for_each_chunk_mut(
        &mut transposed[..rows * batch],
        per_worker * batch,
        |worker, chunk| {
            let mut row = vec![0.0f32; cols];
            for (i, outs) in chunk.chunks_exact_mut(batch).enumerate() {
                if let Err(e) = w.dequantize_row(worker * per_worker + i, &mut row) {
                    return failure.set(e);
                }
                for (b, o) in outs.iter_mut().enumerate() {
                    *o = quant::vector::dot(&row, &x[b * cols..(b + 1) * cols]);
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
