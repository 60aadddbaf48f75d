//! Binding a LoRA adapter file to a model: the GGUF llama.cpp's
//! `convert_lora_to_gguf.py` writes (`general.type` `adapter`,
//! `adapter.type` `lora`, `adapter.lora.alpha`, and per changed weight
//! `<weight>.lora_a` of ggml shape `[cols, rank]` and `<weight>.lora_b` of
//! `[rank, rows]`), checked against the weights it changes.
//!
//! An adapter may change a layer's attention projections and MLP; anything
//! else (embeddings, the output head, experts, Gemma 3n's and Gemma 4's
//! side paths) is refused by name rather than applied in part.

use crate::{Model, ModelError};
use gguf::{GgufFile, TensorInfo};
use nn::{Adapter, LoraPair};
use std::collections::HashMap;

/// The adapter's tensor suffixes for `A` and `B`.
const SUFFIX_A: &str = ".lora_a";
const SUFFIX_B: &str = ".lora_b";

/// The weight roles an adapter may change, as GGUF names them after
/// `blk.N.`: a layer's attention projections and MLP.
const ADAPTABLE: [&str; 7] = [
    "attn_q",
    "attn_k",
    "attn_v",
    "attn_output",
    "ffn_gate",
    "ffn_up",
    "ffn_down",
];

/// `(rows, cols)` of the weight `name` of `base`, if an adapter may change
/// it: a layer's attention or MLP matrix.
fn adaptable(base: &GgufFile, name: &str) -> Option<(usize, usize)> {
    let (layer, role) = name
        .strip_prefix("blk.")?
        .strip_suffix(".weight")?
        .split_once('.')?;
    layer.parse::<usize>().ok()?;
    if !ADAPTABLE.contains(&role) {
        return None;
    }
    match base.tensor(name)?.dims.as_slice() {
        [cols, rows] => Some((usize::try_from(*rows).ok()?, usize::try_from(*cols).ok()?)),
        _ => None,
    }
}

impl Model {
    /// Binds the LoRA adapter in `file` to this model (see
    /// [`bind_adapter`]).
    pub fn bind_adapter(&self, file: &GgufFile, id: [u8; 32]) -> Result<Adapter, ModelError> {
        bind_adapter(&self.file, file, id)
    }
}

/// Binds the LoRA adapter in `file` to the model in `base`, its updates
/// dequantized to f32; `id` identifies its contents (see
/// [`nn::Adapter::id`]). Refuses a file that is not a LoRA adapter, is for
/// another architecture, or changes a weight the model lacks, in another
/// shape, or one adapters may not change.
pub fn bind_adapter(base: &GgufFile, file: &GgufFile, id: [u8; 32]) -> Result<Adapter, ModelError> {
    let bad = |m: String| ModelError::Metadata(m);
    if file.get_str("general.type") != Some("adapter") {
        return Err(bad(
            "not an adapter (its general.type is not `adapter`)".into()
        ));
    }
    let kind = file.get_str("adapter.type").unwrap_or("");
    if kind != "lora" {
        return Err(bad(format!(
            "a `{kind}` adapter: only LoRA adapters are supported"
        )));
    }
    let (ours, theirs) = (
        base.get_str("general.architecture").unwrap_or(""),
        file.get_str("general.architecture").unwrap_or(""),
    );
    if ours != theirs {
        return Err(bad(format!(
            "the adapter is for `{theirs}`, the model is `{ours}`"
        )));
    }
    let mut pairs = HashMap::new();
    for info in file.tensors() {
        let Some(name) = info.name.strip_suffix(SUFFIX_A) else {
            if !info.name.ends_with(SUFFIX_B) {
                return Err(bad(format!(
                    "the adapter's tensor `{}` is neither a LoRA A nor B",
                    info.name
                )));
            }
            continue;
        };
        let Some((rows, cols)) = adaptable(base, name) else {
            return Err(bad(format!(
                "the adapter changes `{name}`, which is not an attention or MLP weight of this model"
            )));
        };
        let b = file
            .tensor(&format!("{name}{SUFFIX_B}"))
            .ok_or_else(|| ModelError::MissingTensor(format!("{name}{SUFFIX_B}")))?;
        pairs.insert(name.to_string(), pair(file, info, b, rows, cols)?);
    }
    let orphan = file.tensors().iter().find(|t| {
        t.name
            .strip_suffix(SUFFIX_B)
            .is_some_and(|name| !pairs.contains_key(name))
    });
    if let Some(t) = orphan {
        return Err(ModelError::MissingTensor(
            t.name.replace(SUFFIX_B, SUFFIX_A),
        ));
    }
    if pairs.is_empty() {
        return Err(bad("the adapter changes no weight".into()));
    }
    Ok(Adapter::new(id, file.get_f32("adapter.lora.alpha"), pairs))
}

/// The update of a `rows × cols` weight from its tensors `a` (ggml shape
/// `[cols, rank]`) and `b` (`[rank, rows]`), checked before anything is
/// allocated.
fn pair(
    file: &GgufFile,
    a: &TensorInfo,
    b: &TensorInfo,
    rows: usize,
    cols: usize,
) -> Result<LoraPair, ModelError> {
    let rank = match a.dims.as_slice() {
        [c, r] if *c == cols as u64 => *r,
        _ => u64::MAX,
    };
    // A rank above the weight's smaller side changes nothing a full
    // update could not, and would only cost memory.
    let fits = rank > 0 && rank <= rows.min(cols) as u64 && b.dims == [rank, rows as u64];
    if !fits {
        return Err(ModelError::Metadata(format!(
            "`{}` and `{}` have shapes {:?} and {:?}: a {rows}×{cols} weight's update needs \
             [{cols}, r] and [r, {rows}] with 1 ≤ r ≤ {}",
            a.name,
            b.name,
            a.dims,
            b.dims,
            rows.min(cols)
        )));
    }
    let rank = rank as usize;
    let values = |t: &TensorInfo, n: usize| -> Result<Vec<f32>, ModelError> {
        let mut out = vec![0.0f32; n];
        quant::dequantize(t.ty, file.tensor_data(t), &mut out).map_err(|_| {
            ModelError::UnsupportedTensorType {
                name: t.name.clone(),
                ty: t.ty,
            }
        })?;
        Ok(out)
    };
    let (av, bv) = (values(a, rank * cols)?, values(b, rows * rank)?);
    Ok(LoraPair::new(&av, &bv, rows, cols)?)
}
