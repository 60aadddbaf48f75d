//! Weights bound from a tower's GGUF file by name and checked against the
//! shapes the tower expects, and the products they take part in (run by
//! the shared [`nn`] layer).

use crate::MediaError;
use gguf::{GgmlType, GgufFile, TensorInfo};
use nn::attention::full::HeadOperands;
use nn::{Clamp, Input, Linear, Precision, ProductBuffers, Products, Weight};
use threads::ThreadPool;

/// Activation rows per task of the row-wise steps between products.
pub(crate) const PRODUCT_BLOCK: usize = nn::linear::ROW_BLOCK;

/// `{name}.weight` of `rows` outputs by `cols` inputs and `{name}.bias`.
pub(crate) fn bind(
    file: &GgufFile,
    name: &str,
    rows: usize,
    cols: usize,
) -> Result<Linear, MediaError> {
    let mut w = bind_plain(file, name, rows, cols)?;
    w.bias = Some(vector(file, &format!("{name}.bias"), rows)?);
    Ok(w)
}

/// `{name}.weight` with no bias, and the clamps `{name}.input_min` (and
/// `input_max`, `output_min`, `output_max`) where the file has them
/// (a missing one does not clamp, as llama.cpp reads them).
pub(crate) fn bind_clamped(
    file: &GgufFile,
    name: &str,
    rows: usize,
    cols: usize,
) -> Result<Linear, MediaError> {
    let mut w = bind_plain(file, name, rows, cols)?;
    let bound = |suffix: &str, default: f32| -> Result<Option<f32>, MediaError> {
        let key = format!("{name}.{suffix}");
        if file.tensor(&key).is_none() {
            return Ok(None);
        }
        let v = vector(file, &key, 1)?[0];
        Ok(Some(if v.is_nan() { default } else { v }))
    };
    let (a, b, c, d) = (
        bound("input_min", f32::NEG_INFINITY)?,
        bound("input_max", f32::INFINITY)?,
        bound("output_min", f32::NEG_INFINITY)?,
        bound("output_max", f32::INFINITY)?,
    );
    if [a, b, c, d].iter().any(Option::is_some) {
        w.clamp = Some(Clamp {
            input: (a.unwrap_or(f32::NEG_INFINITY), b.unwrap_or(f32::INFINITY)),
            output: (c.unwrap_or(f32::NEG_INFINITY), d.unwrap_or(f32::INFINITY)),
        });
    }
    Ok(w)
}

/// `{name}.weight` of `rows` outputs by `cols` inputs, no bias.
pub(crate) fn bind_plain(
    file: &GgufFile,
    name: &str,
    rows: usize,
    cols: usize,
) -> Result<Linear, MediaError> {
    let info = tensor(file, &format!("{name}.weight"))?;
    // A convolution kernel (`[P, P, 3, d]`) is a matrix of d rows of
    // 3·P·P; rows of a quantized type must be whole ggml rows.
    let whole_rows = info.dims.first() == Some(&(cols as u64))
        || matches!(info.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16);
    if info.n_elements() != (rows * cols) as u64
        || info.dims.last() != Some(&(rows as u64))
        || !whole_rows
    {
        return Err(MediaError::TensorShape {
            name: info.name.clone(),
            found: info.dims.clone(),
            expected: vec![cols as u64, rows as u64],
        });
    }
    if !quant::is_supported(info.ty) {
        return Err(MediaError::Unsupported(format!(
            "tensor `{}` is {}, which has no kernels",
            info.name,
            info.ty.name()
        )));
    }
    Ok(Linear::new(Weight::new(info, rows, cols)?))
}

/// A LayerNorm's weight and bias.
#[derive(Debug, Clone)]
pub(crate) struct LayerNorm {
    weight: Vec<f32>,
    bias: Vec<f32>,
}

impl LayerNorm {
    pub(crate) fn bind(file: &GgufFile, name: &str, width: usize) -> Result<Self, MediaError> {
        Ok(Self {
            weight: vector(file, &format!("{name}.weight"), width)?,
            bias: vector(file, &format!("{name}.bias"), width)?,
        })
    }

    /// `out = LayerNorm(x)` row by row.
    pub(crate) fn rows(&self, pool: &ThreadPool, x: &[f32], out: &mut [f32], eps: f32) {
        nn::layer_norm_rows(pool, x, out, &self.weight, Some(&self.bias), eps);
    }
}

/// `out = x Wᵀ + b` for `n` rows of `x`, clamped where the weight says so
/// (activations quantized for quantized weights, as llama.cpp's towers).
pub(crate) fn product(
    pool: &ThreadPool,
    file: &GgufFile,
    w: &Linear,
    x: &[f32],
    n: usize,
    out: &mut [f32],
    bufs: &mut Buffers,
) -> Result<(), MediaError> {
    let ctx = Products {
        file,
        pool,
        precision: Precision::Quantized,
        adapters: None,
    };
    Ok(w.apply(ctx, x, n, out, &mut bufs.linear, Input::Plain)?)
}

/// Buffers reused across the products and attention of one encoding.
#[derive(Default)]
pub(crate) struct Buffers {
    /// The products' scratch.
    linear: ProductBuffers,
    /// Each head's keys and transposed values, for attention.
    pub(crate) heads: Vec<HeadOperands>,
}

/// The tensor `name`, required.
pub(crate) fn tensor(file: &GgufFile, name: &str) -> Result<TensorInfo, MediaError> {
    file.tensor(name)
        .cloned()
        .ok_or_else(|| MediaError::MissingTensor(name.to_string()))
}

/// A tensor of `len` elements, dequantized to f32.
pub(crate) fn vector(file: &GgufFile, name: &str, len: usize) -> Result<Vec<f32>, MediaError> {
    let info = tensor(file, name)?;
    if info.n_elements() != len as u64 {
        return Err(MediaError::TensorShape {
            name: info.name.clone(),
            found: info.dims.clone(),
            expected: vec![len as u64],
        });
    }
    let mut out = vec![0.0f32; len];
    quant::dequantize(info.ty, file.tensor_data(&info), &mut out)?;
    Ok(out)
}
