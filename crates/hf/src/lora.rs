//! PEFT LoRA adapter directories (`adapter_config.json` and
//! `adapter_model.safetensors`) as the GGUF adapter llama.cpp's
//! `convert_lora_to_gguf.py` writes: the same names, shapes and metadata,
//! so one loader reads both.

use crate::tensors::{map_file, target_name, to_f32};
use crate::{read_json, HfError};
use gguf::{GgmlType, GgufWriter, MetaValue};
use safetensors::SafeTensors;
use serde_json::Value;
use std::path::Path;

/// PEFT's file names.
const CONFIG: &str = "adapter_config.json";
const WEIGHTS: &str = "adapter_model.safetensors";

/// Whether `path` is a PEFT adapter directory.
pub fn is_adapter_dir(path: &Path) -> bool {
    path.join(CONFIG).is_file()
}

/// The LoRA adapter in the PEFT directory `dir`, for a model of the GGUF
/// architecture `arch`, as an adapter GGUF in memory. Refuses what a GGUF
/// adapter cannot say: DoRA, per-module alphas, fully trained modules,
/// trained biases and embedding adapters.
pub fn convert_adapter_dir(dir: &Path, arch: &str) -> Result<GgufWriter, HfError> {
    let path = dir.join(CONFIG);
    let cfg = read_json(&path)?;
    let alpha = adapter_alpha(&cfg).map_err(|m| HfError::Json {
        path: path.clone(),
        message: m,
    })?;
    let weights = dir.join(WEIGHTS);
    if !weights.is_file() {
        return Err(HfError::Tensor(format!(
            "{}: no {WEIGHTS} (save the adapter with safe_serialization=True; pickled weights are not read)",
            dir.display()
        )));
    }
    let map = map_file(&weights)?;
    let st = SafeTensors::deserialize(&map)
        .map_err(|e| HfError::Tensor(format!("{}: {e}", weights.display())))?;
    let mut w = GgufWriter::new();
    w.set("general.architecture", MetaValue::String(arch.into()));
    w.set("general.type", MetaValue::String("adapter".into()));
    w.set("adapter.type", MetaValue::String("lora".into()));
    w.set("adapter.lora.alpha", MetaValue::F32(alpha));
    let mut names: Vec<String> = st.names().into_iter().map(str::to_string).collect();
    names.sort();
    for name in names {
        let view = st
            .tensor(&name)
            .map_err(|e| HfError::Tensor(format!("{name}: {e}")))?;
        let (gname, dims) = adapter_tensor(&name, view.shape())?;
        let values = to_f32(view.dtype(), view.data(), &name)?;
        let bytes = crate::tensors::f32_bytes(&values);
        w.add_tensor(&gname, &dims, GgmlType::F32, bytes)?;
    }
    Ok(w)
}

/// The alpha a GGUF adapter states for the config's LoRA: PEFT scales a
/// rank-`r` update by `lora_alpha / r`, or `lora_alpha / √r` with rsLoRA
/// (stated as `lora_alpha · √r`, which the loader divides by `r`).
fn adapter_alpha(cfg: &Value) -> Result<f32, String> {
    let text = |k: &str| cfg.get(k).and_then(Value::as_str).unwrap_or("");
    let truthy = |k: &str| cfg.get(k).and_then(Value::as_bool).unwrap_or(false);
    let nonempty = |k: &str| match cfg.get(k) {
        None | Some(Value::Null) => false,
        Some(Value::Object(m)) => !m.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(_) => true,
    };
    if !text("peft_type").eq_ignore_ascii_case("lora") {
        return Err(format!(
            "a `{}` adapter: only LoRA is supported",
            text("peft_type")
        ));
    }
    let refused = [
        (truthy("use_dora"), "DoRA (use_dora) is not supported"),
        (
            truthy("fan_in_fan_out"),
            "fan_in_fan_out weights are not supported",
        ),
        (
            nonempty("alpha_pattern"),
            "per-module alphas (alpha_pattern) are not supported",
        ),
        (
            nonempty("modules_to_save"),
            "fully trained modules (modules_to_save) are not supported",
        ),
        (
            !matches!(text("bias"), "" | "none"),
            "trained biases (bias) are not supported",
        ),
        (
            truthy("use_rslora") && nonempty("rank_pattern"),
            "rsLoRA with per-module ranks is not supported",
        ),
    ];
    if let Some((_, why)) = refused.iter().find(|(bad, _)| *bad) {
        return Err((*why).to_string());
    }
    let number = |k: &str| cfg.get(k).and_then(Value::as_f64);
    let (Some(r), Some(alpha)) = (number("r"), number("lora_alpha")) else {
        return Err("`r` and `lora_alpha` must be numbers".into());
    };
    if !(r >= 1.0 && alpha.is_finite()) {
        return Err(format!("r {r} and lora_alpha {alpha} are not a LoRA's"));
    }
    Ok(match truthy("use_rslora") {
        true => (alpha * r.sqrt()) as f32,
        false => alpha as f32,
    })
}

/// The GGUF name and ggml dims of PEFT's tensor `name` of `shape`:
/// `<base>.lora_A.weight` `[r, in]` becomes `<gguf base>.lora_a`
/// `[in, r]`, and `lora_B` `[out, r]` becomes `lora_b` `[r, out]`.
fn adapter_tensor(name: &str, shape: &[usize]) -> Result<(String, Vec<u64>), HfError> {
    let refuse = |why: &str| HfError::Tensor(format!("adapter tensor `{name}`: {why}"));
    let bare = name.strip_prefix("base_model.model.").unwrap_or(name);
    let (module, suffix) = [(".lora_A.weight", "lora_a"), (".lora_B.weight", "lora_b")]
        .into_iter()
        .find_map(|(peft, gguf)| bare.strip_suffix(peft).map(|m| (m, gguf)))
        .ok_or_else(|| {
            refuse("not a LoRA A or B matrix (embedding adapters and DoRA are not supported)")
        })?;
    let base = target_name(&format!("{module}.weight"))
        .ok_or_else(|| refuse("it changes no weight of the text model"))?;
    let [rows, cols] = shape else {
        return Err(refuse("not a matrix"));
    };
    Ok((format!("{base}.{suffix}"), vec![*cols as u64, *rows as u64]))
}
