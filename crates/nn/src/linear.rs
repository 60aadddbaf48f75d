//! `y = x Wᵀ (+ b)` for a weight as a file stores it, with the input and
//! output clamps some towers put around their products (Gemma 4's
//! `ClippableLinear`). Every weight goes through [`quant::matmul`]: the
//! integer kernels for quantized weights, and for float weights (F32, F16,
//! BF16) against a batch of rows the f32 GEMM, which widens a block of the
//! weight's rows at a time, so the activations stay exact.

use quant::{Matrix, QuantError};
use threads::ThreadPool;

/// Activation rows per task of the row-wise steps the towers run between
/// products.
pub const ROW_BLOCK: usize = 64;

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
        let ws = [m];
        let product = quant::Product::new(&ws, x, n);
        let result = quant::matmul(pool, product, &mut [out], &mut scratch.quant);
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

#[cfg(test)]
mod tests {
    use super::*;
    use gguf::GgmlType;

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
