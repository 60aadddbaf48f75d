//! Producing tensors in a target type, row-parallel: from stored data of any
//! type we can decode (dequantize, then quantize) or from a random stream; and
//! [`quantize_gguf`], which does that for every tensor of a file.

use crate::plan::{llama_order, plan_types, ModelShape, TensorSpec};
use crate::rng::Rng;
use crate::{ConvertError, FileType, QUANTIZATION_VERSION};
use gguf::{GgmlType, GgufFile, GgufWriter, MetaValue};
use rayon::prelude::*;

/// What happened to one tensor, for progress output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorReport {
    /// Tensor name.
    pub name: String,
    /// Dimensions, innermost first.
    pub dims: Vec<u64>,
    /// Type it had (F32 for generated tensors).
    pub from: GgmlType,
    /// Type it has now.
    pub to: GgmlType,
    /// Bytes it takes now.
    pub bytes: usize,
}

/// Where a tensor's values come from.
pub(crate) enum Rows<'a> {
    /// Data in a file, of the given type.
    Stored { ty: GgmlType, data: &'a [u8] },
    /// `mean + std * N(0, 1)`-ish values from the stream `stream`.
    Random { stream: u64, mean: f32, std: f32 },
}

/// Elements per parallel task: enough to amortise the task, small enough to
/// spread a 640-wide tensor over the cores.
const TASK_ELEMENTS: usize = 1 << 15;

fn invalid(name: &str, what: impl std::fmt::Display) -> ConvertError {
    ConvertError::Invalid(format!("tensor `{name}`: {what}"))
}

/// Row width and row count of a tensor shape, checked against overflow.
fn geometry(name: &str, dims: &[u64]) -> Result<(usize, usize), ConvertError> {
    let too_big = || invalid(name, format!("shape {dims:?} is too large"));
    let ncols = usize::try_from(dims.first().copied().unwrap_or(1)).map_err(|_| too_big())?;
    let nrows = dims
        .iter()
        .skip(1)
        .try_fold(1u64, |a, &d| a.checked_mul(d))
        .and_then(|r| usize::try_from(r).ok())
        .ok_or_else(too_big)?;
    ncols.checked_mul(nrows).ok_or_else(too_big)?;
    Ok((ncols, nrows))
}

/// The tensor `name` of shape `dims` in type `to`.
pub(crate) fn produce(
    name: &str,
    dims: &[u64],
    rows: &Rows<'_>,
    to: GgmlType,
) -> Result<Vec<u8>, ConvertError> {
    let (ncols, nrows) = geometry(name, dims)?;
    let quant_err = |source| ConvertError::Quant {
        tensor: name.to_string(),
        source,
    };
    let dst_row = quant::row_size(to, ncols).map_err(quant_err)?;
    if let Rows::Stored { ty, data } = *rows {
        let src_row = quant::row_size(ty, ncols).map_err(quant_err)?;
        let need = src_row
            .checked_mul(nrows)
            .ok_or_else(|| invalid(name, "size overflows"))?;
        if data.len() != need {
            return Err(invalid(
                name,
                format!(
                    "{ty} {dims:?} needs {need} bytes, the file has {}",
                    data.len()
                ),
            ));
        }
        if ty == to {
            // llama-quantize copies a tensor already in its target type.
            return Ok(data.to_vec());
        }
        if !quant::is_supported(ty) {
            return Err(invalid(name, format!("cannot decode type {ty}")));
        }
    }
    if !quant::can_quantize(to) {
        return Err(invalid(name, format!("cannot encode type {to}")));
    }
    let total = dst_row
        .checked_mul(nrows)
        .ok_or_else(|| invalid(name, "size overflows"))?;
    let mut out = vec![0u8; total];
    if total == 0 {
        return Ok(out);
    }
    let rows_per_task = (TASK_ELEMENTS / ncols.max(1)).max(1);
    out.par_chunks_mut(dst_row * rows_per_task)
        .enumerate()
        .try_for_each_init(
            || vec![0f32; ncols * rows_per_task],
            |buf, (task, chunk)| {
                let first = task * rows_per_task;
                let n = chunk.len() / dst_row;
                let values = &mut buf[..n * ncols];
                fill(rows, ncols, first, values).map_err(quant_err)?;
                quant::quantize(to, values, chunk).map_err(quant_err)
            },
        )?;
    Ok(out)
}

/// Writes rows `first..` (as many as fit `values`) of `rows` as f32.
fn fill(
    rows: &Rows<'_>,
    ncols: usize,
    first: usize,
    values: &mut [f32],
) -> Result<(), quant::QuantError> {
    match *rows {
        Rows::Stored { ty, data } => {
            let row_bytes = quant::row_size(ty, ncols)?;
            let start = first * row_bytes;
            let n = values.len() / ncols.max(1);
            let src = data.get(start..start + n * row_bytes).ok_or(
                quant::QuantError::BufferTooShort {
                    what: "source",
                    need: start + n * row_bytes,
                    have: data.len(),
                },
            )?;
            quant::dequantize(ty, src, values)
        }
        Rows::Random { stream, mean, std } => {
            for (r, row) in values.chunks_exact_mut(ncols).enumerate() {
                let mut rng = Rng::for_row(stream, (first + r) as u64);
                for v in row {
                    *v = mean + std * rng.normalish();
                }
            }
            Ok(())
        }
    }
}

/// Keys llama-quantize drops from the input (it sets the first two anew, at
/// the end; the split keys describe the input's shards).
const REPLACED_KEYS: [&str; 5] = [
    "general.quantization_version",
    "general.file_type",
    "split.no",
    "split.count",
    "split.tensors.count",
];

/// Copies `metadata` into a writer the way llama-quantize does: everything but
/// [`REPLACED_KEYS`], then the quantization version and file type last.
pub(crate) fn metadata_writer<'a>(
    metadata: impl IntoIterator<Item = &'a (String, MetaValue)>,
    ftype: FileType,
) -> GgufWriter {
    let mut w = GgufWriter::new();
    for (k, v) in metadata {
        if !REPLACED_KEYS.contains(&k.as_str()) {
            w.set(k.clone(), v.clone());
        }
    }
    w.set(
        "general.quantization_version",
        MetaValue::U32(QUANTIZATION_VERSION),
    );
    w.set("general.file_type", MetaValue::U32(ftype.llama_ftype()));
    w
}

/// Requantizes every tensor of `input` for `ftype`, choosing per-tensor types
/// as llama-quantize does and writing tensors in its order.
pub fn quantize_gguf(input: &GgufFile, ftype: FileType) -> Result<GgufWriter, ConvertError> {
    quantize_gguf_with(input, ftype, &mut |_| {})
}

/// [`quantize_gguf`], calling `progress` after each tensor.
pub fn quantize_gguf_with(
    input: &GgufFile,
    ftype: FileType,
    progress: &mut dyn FnMut(&TensorReport),
) -> Result<GgufWriter, ConvertError> {
    let specs: Vec<TensorSpec> = input
        .tensors()
        .iter()
        .map(|t| TensorSpec {
            name: t.name.clone(),
            dims: t.dims.clone(),
            ty: t.ty,
        })
        .collect();
    let types = plan_types(&specs, ftype, &ModelShape::from_gguf(input));
    let mut w = metadata_writer(input.metadata(), ftype);
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    for i in llama_order(&names) {
        let (info, to) = (&input.tensors()[i], types[i]);
        let rows = Rows::Stored {
            ty: info.ty,
            data: input.tensor_data(info),
        };
        let data = produce(&info.name, &info.dims, &rows, to)?;
        let report = TensorReport {
            name: info.name.clone(),
            dims: info.dims.clone(),
            from: info.ty,
            to,
            bytes: data.len(),
        };
        w.add_tensor(info.name.clone(), &info.dims, to, data)?;
        progress(&report);
    }
    Ok(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_rows_convert_and_copy() {
        let x: Vec<f32> = (0..512).map(|i| (i as f32 * 0.37).sin()).collect();
        let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        let rows = Rows::Stored {
            ty: GgmlType::F32,
            data: &bytes,
        };
        let q = produce("t", &[256, 2], &rows, GgmlType::Q8_0).unwrap();
        let mut want = vec![0u8; q.len()];
        quant::quantize(GgmlType::Q8_0, &x, &mut want).unwrap();
        assert_eq!(q, want);
        // Already the target type: copied byte for byte.
        let again = Rows::Stored {
            ty: GgmlType::Q8_0,
            data: &q,
        };
        assert_eq!(produce("t", &[256, 2], &again, GgmlType::Q8_0).unwrap(), q);
        // Wrong sizes and undecodable types are errors, not panics.
        assert!(produce("t", &[256, 3], &rows, GgmlType::Q8_0).is_err());
        assert!(produce("t", &[100, 2], &rows, GgmlType::Q8_0).is_err());
        let ints = Rows::Stored {
            ty: GgmlType::I32,
            data: &bytes,
        };
        assert!(produce("t", &[256, 2], &ints, GgmlType::Q8_0).is_err());
        assert!(produce("t", &[u64::MAX, 2], &rows, GgmlType::F32).is_err());
    }

    #[test]
    fn random_rows_do_not_depend_on_task_split() {
        let rows = Rows::Random {
            stream: 5,
            mean: 0.0,
            std: 0.02,
        };
        // One row per task for a wide tensor, many rows per task for a narrow one:
        // the same rows come out either way.
        let wide = produce("t", &[TASK_ELEMENTS as u64, 3], &rows, GgmlType::F32).unwrap();
        let narrow = produce(
            "t",
            &[1024, 3 * (TASK_ELEMENTS as u64 / 1024)],
            &rows,
            GgmlType::F32,
        );
        let narrow = narrow.unwrap();
        assert_eq!(wide.len(), narrow.len());
        // Row 0 of the narrow tensor equals the first 1024 values of wide row 0.
        assert_eq!(&wide[..4096], &narrow[..4096]);
        let vals: Vec<f32> = wide
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let std = (vals.iter().map(|v| v * v).sum::<f32>() / vals.len() as f32).sqrt();
        assert!((std - 0.02).abs() < 0.001, "std {std}");
    }
}
