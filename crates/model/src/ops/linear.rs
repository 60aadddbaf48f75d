//! `y = x Wᵀ (+ b)` for a weight as a file stores it, with the input and
//! output clamps some towers put around their products (Gemma 4's
//! `ClippableLinear`). Quantized weights take the integer kernels of
//! [`quant::matmul`]; float weights (F32, F16, BF16) against a batch of
//! rows are dequantized once per product into panels and run through the
//! f32 GEMM, so the activations stay exact.

use gguf::GgmlType;
use quant::vector::{PackedB, PANEL};
use quant::{FirstError, Matrix, QuantError, ThreadPool};

/// Activation rows per task of a float product, and of the row-wise steps
/// the towers run between products.
pub const ROW_BLOCK: usize = 64;

/// Float products against fewer rows than this take the vector kernels
/// instead (packing the weight would cost more than it saves).
const MIN_PACKED_ROWS: usize = 8;

/// Bounds a product's input and output are clamped to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Clamp {
    /// `(lo, hi)` for every input element.
    pub input: (f32, f32),
    /// `(lo, hi)` for every output element.
    pub output: (f32, f32),
}

/// One weight's product: the matrix (`rows` outputs × `cols` inputs), an
/// optional bias per output and optional clamps.
pub struct Linear<'a> {
    /// The weight, as the file stores it.
    pub matrix: Matrix<'a>,
    /// Added to every output row.
    pub bias: Option<&'a [f32]>,
    /// Input and output bounds.
    pub clamp: Option<Clamp>,
}

/// Buffers reused across the products of one encoding.
#[derive(Default)]
pub struct LinearScratch {
    /// Activations clamped for a clamped product.
    clamped: Vec<f32>,
    /// A float weight, dequantized and packed (transposed, in panels).
    packed: PackedB,
    /// Quantized activations.
    quant: Vec<u8>,
}

impl Linear<'_> {
    /// `out[..n·rows] = x[..n·cols] Wᵀ + b`, clamped as the weight says.
    pub fn apply(
        &self,
        pool: &ThreadPool,
        x: &[f32],
        n: usize,
        out: &mut [f32],
        scratch: &mut LinearScratch,
    ) -> Result<(), QuantError> {
        let m = &self.matrix;
        let (rows, cols) = (m.rows(), m.cols());
        let mut clamped = std::mem::take(&mut scratch.clamped);
        let x = match self.clamp {
            Some(Clamp {
                input: (lo, hi), ..
            }) => {
                clamped.clear();
                clamped.extend(x[..n * cols].iter().map(|&v| v.clamp(lo, hi)));
                &clamped[..]
            }
            None => x,
        };
        let float = matches!(m.ty(), GgmlType::F32 | GgmlType::F16 | GgmlType::BF16);
        let result = if float && n >= MIN_PACKED_ROWS {
            float_product(pool, m, x, &mut out[..n * rows], &mut scratch.packed)
        } else {
            let ws = [m];
            let product = quant::Product::new(&ws, x, n);
            quant::matmul(pool, product, &mut [out], &mut scratch.quant)
        };
        scratch.clamped = clamped;
        result?;
        let out = &mut out[..n * rows];
        if let Some(bias) = self.bias {
            for r in out.chunks_exact_mut(rows) {
                r.iter_mut().zip(bias).for_each(|(o, &b)| *o += b);
            }
        }
        if let Some(Clamp {
            output: (lo, hi), ..
        }) = self.clamp
        {
            out.iter_mut().for_each(|v| *v = v.clamp(lo, hi));
        }
        Ok(())
    }
}

/// A float weight's product: Wᵀ packed into panels of PANEL output columns,
/// dequantized in parallel (each task fills whole panels), then the packed
/// GEMM over blocks of activation rows.
fn float_product(
    pool: &ThreadPool,
    m: &Matrix<'_>,
    x: &[f32],
    out: &mut [f32],
    packed: &mut PackedB,
) -> Result<(), QuantError> {
    let (rows, cols) = (m.rows(), m.cols());
    packed.reset(cols, rows);
    let failure = FirstError::new();
    let panels_per_task = rows.div_ceil(PANEL).div_ceil(pool.threads()).max(1);
    let panel_len = cols * PANEL;
    pool.for_each_chunk_mut(
        packed.panels_mut(),
        panels_per_task * panel_len,
        |t, chunk| {
            let mut row = vec![0.0f32; cols];
            for (pi, panel) in chunk.chunks_exact_mut(panel_len).enumerate() {
                let j0 = (t * panels_per_task + pi) * PANEL;
                for jj in 0..PANEL.min(rows.saturating_sub(j0)) {
                    if let Err(e) = m.dequantize_row(j0 + jj, &mut row) {
                        failure.set(e);
                        return;
                    }
                    for (p, &v) in row.iter().enumerate() {
                        panel[p * PANEL + jj] = v;
                    }
                }
            }
        },
    );
    failure.into_result()?;
    let packed = &*packed;
    let failure = FirstError::new();
    pool.for_each_chunk_mut(out, ROW_BLOCK * rows, |b, chunk| {
        let m_rows = chunk.len() / rows;
        let xs = &x[b * ROW_BLOCK * cols..][..m_rows * cols];
        if let Err(e) = quant::vector::sgemm_packed(m_rows, xs, cols, packed, chunk, rows) {
            failure.set(e);
        }
    });
    failure.into_result()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The packed float path, the vector path and the textbook product
    /// agree, with the bias added and both clamps applied.
    #[test]
    fn float_products_are_the_product() {
        let (rows, cols) = (37, 48);
        let w: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 7) as f32 * 0.37).sin())
            .collect();
        let bytes: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
        let bias: Vec<f32> = (0..rows).map(|i| i as f32 * 0.01).collect();
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
                    matrix: Matrix::new(GgmlType::F32, rows, cols, &bytes).unwrap(),
                    bias: Some(&bias),
                    clamp,
                };
                let mut out = vec![0.0f32; n * rows];
                lin.apply(&pool, &x, n, &mut out, &mut LinearScratch::default())
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
}
