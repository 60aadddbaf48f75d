//! sentence-transformers directories (EmbeddingGemma): the modules after the
//! transformer, as llama.cpp's `convert_hf_to_gguf.py
//! --sentence-transformers-dense-modules` writes them: the pooling as
//! `pooling_type`, each `Dense` module as `dense_2` / `dense_3` with its
//! sizes. Any other module than these and `Normalize` is refused, so an
//! embedding never silently skips a step.

use crate::tensors::{map_file, stored_type};
use crate::{read_json, read_json_if_present, HfError};
use gguf::{GgufWriter, MetaValue};
use safetensors::SafeTensors;
use serde_json::Value;
use std::path::Path;

/// GGUF names of the dense projections, in the order of the modules.
const DENSE_NAMES: [&str; 2] = ["dense_2", "dense_3"];

/// Adds the pooling and dense projections `modules.json` lists (the
/// transformer itself is the checkpoint's own config and safetensors).
pub(crate) fn write_modules(w: &mut GgufWriter, dir: &Path, arch: &str) -> Result<(), HfError> {
    let path = dir.join("modules.json");
    let Some(modules) = read_json_if_present(&path)? else {
        return Err(HfError::Config(format!(
            "{} is missing: an embedding checkpoint is a sentence-transformers directory (Transformer, Pooling, Dense, Dense, Normalize)",
            path.display()
        )));
    };
    let list = modules
        .as_array()
        .ok_or_else(|| HfError::Config(format!("{}: not a list", path.display())))?;
    let mut dense = 0;
    let mut pooled = false;
    for m in list {
        let kind = m.get("type").and_then(Value::as_str).unwrap_or("");
        // The class's last name: 6.x writes `sentence_transformers.base.
        // modules.dense.Dense`, older versions `sentence_transformers.models.Dense`.
        let class = kind.rsplit('.').next().unwrap_or("");
        let sub = dir.join(m.get("path").and_then(Value::as_str).unwrap_or(""));
        if !sub.starts_with(dir)
            || m.get("path")
                .and_then(Value::as_str)
                .is_some_and(|p| p.contains(".."))
        {
            return Err(HfError::Config(format!(
                "module path {sub:?} leaves the directory"
            )));
        }
        match class {
            "Transformer" => {}
            "Pooling" => {
                w.set(format!("{arch}.pooling_type"), MetaValue::U32(pooling_type(&sub)?));
                pooled = true;
            }
            "Dense" => {
                let name = DENSE_NAMES.get(dense).ok_or_else(|| {
                    HfError::Config("more than two Dense modules are not supported".into())
                })?;
                write_dense(w, &sub, name, arch)?;
                dense += 1;
            }
            "Normalize" => {}
            other => {
                return Err(HfError::Config(format!(
                    "sentence-transformers module `{other}` is not supported (Transformer, Pooling, Dense and Normalize are)"
                )))
            }
        }
    }
    if !pooled {
        return Err(HfError::Config(format!(
            "{}: no Pooling module",
            path.display()
        )));
    }
    Ok(())
}

/// llama.cpp's `pooling_type` for a `Pooling` module's settings: mean (1)
/// over every token, prompt included, is the one supported.
fn pooling_type(dir: &Path) -> Result<u32, HfError> {
    let cfg = read_json(&dir.join("config.json"))?;
    let flag = |k: &str| cfg.get(k).and_then(Value::as_bool) == Some(true);
    // sentence-transformers 6 writes `pooling_mode`, older versions one flag per mode.
    let mode = match cfg.get("pooling_mode").and_then(Value::as_str) {
        Some(m) => m.to_string(),
        None if flag("pooling_mode_mean_tokens") => "mean".into(),
        None => "unknown".into(),
    };
    if mode != "mean" {
        return Err(HfError::Config(format!(
            "pooling `{mode}` is not supported (mean is)"
        )));
    }
    if cfg.get("include_prompt").and_then(Value::as_bool) == Some(false) {
        return Err(HfError::Config(
            "pooling that leaves the prompt out (`include_prompt: false`) is not supported".into(),
        ));
    }
    Ok(1)
}

/// A `Dense` module (no bias, identity activation) as the GGUF tensor
/// `name` with its sizes.
fn write_dense(w: &mut GgufWriter, dir: &Path, name: &str, arch: &str) -> Result<(), HfError> {
    let cfg = read_json(&dir.join("config.json"))?;
    let size = |k: &str| {
        cfg.get(k)
            .and_then(Value::as_u64)
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| HfError::Config(format!("{}: `{k}` is missing", dir.display())))
    };
    let (inputs, outputs) = (size("in_features")?, size("out_features")?);
    if cfg.get("bias").and_then(Value::as_bool) == Some(true) {
        return Err(HfError::Config(format!(
            "{}: Dense with a bias is not supported",
            dir.display()
        )));
    }
    let act = cfg
        .get("activation_function")
        .and_then(Value::as_str)
        .unwrap_or("torch.nn.modules.linear.Identity");
    if !act.ends_with("Identity") {
        return Err(HfError::Config(format!(
            "{}: Dense activation `{act}` is not supported (Identity is)",
            dir.display()
        )));
    }
    let path = dir.join("model.safetensors");
    let map = map_file(&path)?;
    let st = SafeTensors::deserialize(&map)
        .map_err(|e| HfError::Tensor(format!("{}: {e}", path.display())))?;
    let view = st
        .tensor("linear.weight")
        .map_err(|e| HfError::Tensor(format!("{}: linear.weight: {e}", path.display())))?;
    if view.shape() != [outputs as usize, inputs as usize] {
        return Err(HfError::Tensor(format!(
            "{}: linear.weight is {:?}, the config says {outputs} × {inputs}",
            path.display(),
            view.shape()
        )));
    }
    let ty = stored_type(view.dtype(), "linear.weight")?;
    w.add_tensor(
        format!("{name}.weight"),
        &[inputs as u64, outputs as u64],
        ty,
        view.data().to_vec(),
    )?;
    w.set(format!("{arch}.{name}_feat_in"), MetaValue::U32(inputs));
    w.set(format!("{arch}.{name}_feat_out"), MetaValue::U32(outputs));
    Ok(())
}
