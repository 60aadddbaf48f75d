//! Per-layer metadata: values stored once or once per layer, and Gemma 4's
//! layer pattern (sliding/global, head sizes, KV sharing).

use super::LayerKind;
use crate::ModelError;
use gguf::GgufFile;

/// A metadata value that is either one integer for every layer or an array
/// with one per layer (Gemma 4 stores FFN widths and KV heads both ways).
pub(super) fn per_layer_uint(
    file: &GgufFile,
    key: &str,
    n_layers: usize,
) -> Result<Option<Vec<usize>>, ModelError> {
    let Some(v) = file.get(key) else {
        return Ok(None);
    };
    if let Some(one) = v.as_u64() {
        let one = usize::try_from(one)
            .map_err(|_| ModelError::Metadata(format!("`{key}` = {one} does not fit")))?;
        return Ok(Some(vec![one; n_layers]));
    }
    let arr = v.as_array().and_then(|a| a.to_i64_vec()).ok_or_else(|| {
        ModelError::Metadata(format!("`{key}` is not an integer or integer array"))
    })?;
    if arr.len() != n_layers {
        return Err(ModelError::Metadata(format!(
            "`{key}` has {} entries for {n_layers} layers",
            arr.len()
        )));
    }
    arr.into_iter()
        .map(|x| {
            usize::try_from(x)
                .map_err(|_| ModelError::Metadata(format!("`{key}` has a negative entry {x}")))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// Gemma 4's layers: the sliding pattern and head sizes come from the file,
/// global layers get their own head size and RoPE, and the last
/// `shared_kv_layers` layers reuse the KV of the last earlier layer of the
/// same kind.
pub(super) fn gemma4_layers(
    file: &GgufFile,
    arch: &str,
    n_layers: usize,
    kv_heads: &[usize],
    ffn: &[usize],
) -> Result<Vec<LayerKind>, ModelError> {
    let key = |k: &str| format!("{arch}.{k}");
    let uint = |k: &str| file.get_u64(&key(k)).and_then(|v| usize::try_from(v).ok());
    let need =
        |k: &str| uint(k).ok_or_else(|| ModelError::Metadata(format!("`{}` is missing", key(k))));
    let pattern = match file
        .get(&key("attention.sliding_window_pattern"))
        .and_then(|v| v.as_array())
        .and_then(|a| a.to_i64_vec())
    {
        Some(p) => p,
        // Gemma 3n files from before the key: four sliding layers, then a
        // global one, as llama.cpp assumes.
        None if arch == "gemma3n" => (0..n_layers).map(|i| i64::from(i % 5 != 4)).collect(),
        None => {
            return Err(ModelError::Metadata(format!(
                "`{}` is missing",
                key("attention.sliding_window_pattern")
            )))
        }
    };
    if pattern.len() != n_layers {
        return Err(ModelError::Metadata(format!(
            "sliding-window pattern has {} entries for {n_layers} layers",
            pattern.len()
        )));
    }
    let window = need("attention.sliding_window")?;
    let head_global = need("attention.key_length")?;
    let value_global = uint("attention.value_length").unwrap_or(head_global);
    let head_local = uint("attention.key_length_swa").unwrap_or(head_global);
    let value_local = uint("attention.value_length_swa").unwrap_or(head_local);
    let rope_global = uint("rope.dimension_count").unwrap_or(head_global);
    let rope_local = uint("rope.dimension_count_swa").unwrap_or(head_local);
    let base_global = file.get_f32(&key("rope.freq_base")).unwrap_or(1_000_000.0);
    let base_local = file.get_f32(&key("rope.freq_base_swa")).unwrap_or(10_000.0);
    let shared = uint("attention.shared_kv_layers")
        .unwrap_or(0)
        .min(n_layers);
    let first_shared = n_layers - shared;

    let mut layers: Vec<LayerKind> = (0..n_layers)
        .map(|i| {
            let sliding = pattern[i] != 0;
            LayerKind {
                window: sliding.then_some(window),
                rope_base: if sliding { base_local } else { base_global },
                rope_scale: 1.0,
                rope_dims: if sliding { rope_local } else { rope_global },
                head_dim: if sliding { head_local } else { head_global },
                value_dim: if sliding { value_local } else { value_global },
                n_kv_heads: kv_heads[i],
                ffn_dim: ffn[i],
                kv_source: None,
                sparsity: None,
            }
        })
        .collect();
    for i in first_shared..n_layers {
        let sliding = layers[i].window.is_some();
        let source = (0..first_shared)
            .rev()
            .find(|&j| layers[j].window.is_some() == sliding)
            .ok_or_else(|| {
                ModelError::Metadata(format!(
                    "layer {i} shares KV but no earlier layer of its kind computes any"
                ))
            })?;
        layers[i].kv_source = Some(source);
    }
    Ok(layers)
}

/// Gemma 3n's activation sparsity per layer: the normal quantile of each
/// layer's target sparsity, as the converter stores it (`-inf` for a dense
/// layer). Files without the key get llama.cpp's assumption: the first ten
/// layers at 95%.
pub(super) fn gemma3n_sparsity(
    file: &GgufFile,
    n_layers: usize,
) -> Result<Vec<Option<f32>>, ModelError> {
    /// The standard normal's 95% quantile, `Φ⁻¹(0.95)`.
    const QUANTILE_95: f32 = 1.644_853_4;
    const LLAMA_CPP_SPARSE_LAYERS: usize = 10;
    let key = "gemma3n.activation_sparsity_scale";
    if file.get(key).is_none() {
        return Ok((0..n_layers)
            .map(|i| (i < LLAMA_CPP_SPARSE_LAYERS).then_some(QUANTILE_95))
            .collect());
    }
    let values = file
        .get_f32_array(key)
        .ok_or_else(|| ModelError::Metadata(format!("`{key}` is not a float array")))?;
    if values.len() != n_layers {
        return Err(ModelError::Metadata(format!(
            "`{key}` has {} entries for {n_layers} layers",
            values.len()
        )));
    }
    // A sparsity of 0 is a quantile of -inf: no cut. A sparsity of 1
    // (+inf, every activation cut) and NaN are refused.
    values
        .iter()
        .map(|&m| match m {
            m if m.is_finite() => Ok(Some(m)),
            m if m == f32::NEG_INFINITY => Ok(None),
            m => Err(ModelError::Metadata(format!("`{key}` has an entry {m}"))),
        })
        .collect()
}
