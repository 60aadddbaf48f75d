//! The audio tower of a Gemma 3n or Gemma 4 checkpoint, converted in memory
//! for the `media` crate: the tower's tensors under `a.` and the embedder's
//! under `mm.a.` (their Hugging Face names, prefix replaced, stored
//! precision kept; Gemma 4's clamped products lose the `.linear` before
//! `.weight`, so their clamps sit beside the weight as the vision tower's
//! do), its hyper-parameters under `hearth.audio.`. llama.cpp runs no
//! Gemma 3n audio, so there is no `mmproj` layout to match for it.

use crate::processor::Processor;
use crate::tensors::{stored_type, Checkpoint};
use crate::{read_json, HfError};
use gguf::{GgufWriter, MetaValue};
use serde_json::Value;
use std::path::Path;

/// The families whose audio towers convert.
const FAMILIES: [&str; 2] = ["gemma3n", "gemma4"];

/// Whether `dir` is a checkpoint with a Gemma 3n or Gemma 4 audio tower.
pub fn has_audio_tower(dir: &Path) -> bool {
    dir.is_dir()
        && read_json(&dir.join("config.json")).is_ok_and(|root| {
            root.get("audio_config").is_some_and(|a| !a.is_null())
                && root
                    .get("model_type")
                    .and_then(Value::as_str)
                    .is_some_and(|m| FAMILIES.contains(&m))
        })
}

fn uint(v: &Value, key: &str, default: u64) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(default)
}

fn float(v: &Value, key: &str, default: f64) -> f32 {
    v.get(key).and_then(Value::as_f64).unwrap_or(default) as f32
}

/// The two sub-sampling convolutions' channels (128 and 32 when absent).
fn two_channels(audio: &Value, field: &str) -> Result<[u64; 2], HfError> {
    let Some(list) = audio.get(field) else {
        return Ok([128, 32]);
    };
    let values: Vec<u64> = list
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    <[u64; 2]>::try_from(values).map_err(|_| {
        HfError::Config(format!(
            "audio_config.{field} = {list}; two channel counts expected"
        ))
    })
}

fn key(s: &str) -> String {
    format!("hearth.audio.{s}")
}

fn u32_value(v: u64) -> MetaValue {
    MetaValue::U32(u32::try_from(v).unwrap_or(u32::MAX))
}

/// Convert the audio tower and embedder of a Gemma 3n or Gemma 4
/// checkpoint; `None` when its `config.json` has no `audio_config`.
pub fn convert_audio_dir(dir: &Path) -> Result<Option<GgufWriter>, HfError> {
    let root = read_json(&dir.join("config.json"))?;
    let Some(audio) = root.get("audio_config").filter(|a| !a.is_null()) else {
        return Ok(None);
    };
    let model_type = root.get("model_type").and_then(Value::as_str).unwrap_or("");
    let text = root.get("text_config").unwrap_or(&root);
    let text_hidden = text
        .get("hidden_size")
        .and_then(Value::as_u64)
        .ok_or_else(|| HfError::Config("text_config.hidden_size is missing".into()))?;
    let mut w = match model_type {
        "gemma3n" => gemma3n_keys(&root, audio, text_hidden)?,
        "gemma4" => gemma4_keys(dir, audio, text_hidden)?,
        _ => {
            return Err(HfError::UnsupportedModel(format!(
                "{model_type} (audio towers: {})",
                FAMILIES.join(", ")
            )))
        }
    };
    copy_tensors(dir, &mut w)?;
    Ok(Some(w))
}

/// Gemma 3n's hyper-parameters.
fn gemma3n_keys(root: &Value, audio: &Value, text_hidden: u64) -> Result<GgufWriter, HfError> {
    // The sub-sampling convolutions must be the 3×3, stride-2 pair every
    // Gemma 3n uses; the encoder assumes them.
    for (key, want) in [("sscp_conv_kernel_size", 3), ("sscp_conv_stride_size", 2)] {
        if let Some(a) = audio.get(key).and_then(Value::as_array) {
            let all = a.len() == 2
                && a.iter().all(|p| {
                    p.as_array()
                        .is_some_and(|p| p.iter().all(|x| x.as_u64() == Some(want)))
                });
            if !all {
                return Err(HfError::Config(format!(
                    "audio_config.{key} = {a:?}; only two {want}s per convolution are supported"
                )));
            }
        }
    }
    let channels = two_channels(audio, "sscp_conv_channel_size")?;
    let mut w = GgufWriter::new();
    w.set(
        "general.architecture",
        MetaValue::String("gemma3n_audio".into()),
    );
    for (name, value) in [
        ("hidden", uint(audio, "hidden_size", 1536)),
        ("heads", uint(audio, "conf_num_attention_heads", 8)),
        ("layers", uint(audio, "conf_num_hidden_layers", 12)),
        ("mel_bins", uint(audio, "input_feat_size", 128)),
        ("channels0", channels[0]),
        ("channels1", channels[1]),
        (
            "context_left",
            uint(audio, "conf_attention_context_left", 13),
        ),
        (
            "context_right",
            uint(audio, "conf_attention_context_right", 0),
        ),
        ("reduction", uint(audio, "conf_reduction_factor", 4)),
        ("conv_kernel", uint(audio, "conf_conv_kernel_size", 5)),
        ("vocab", uint(audio, "vocab_size", 128)),
        ("vocab_offset", uint(audio, "vocab_offset", 262_272)),
        ("text_hidden", text_hidden),
        (
            "soft_tokens",
            uint(root, "audio_soft_tokens_per_image", 188),
        ),
    ] {
        w.set(key(name), u32_value(value));
    }
    for (name, value) in [
        ("logit_cap", float(audio, "conf_attention_logit_cap", 50.0)),
        ("residual_weight", float(audio, "conf_residual_weight", 0.5)),
        (
            "group_norm_eps",
            float(audio, "sscp_conv_group_norm_eps", 1e-3),
        ),
        ("eps", float(audio, "rms_norm_eps", 1e-6)),
        ("clip", float(audio, "gradient_clipping", 1e10)),
    ] {
        w.set(key(name), MetaValue::F32(value));
    }
    Ok(w)
}

/// Gemma 4's hyper-parameters; the most tokens a clip may give is the
/// processor's `audio_seq_length` (`processor_config.json`, 750 when
/// absent); the mel bins are the feature extractor's (nested there, or in
/// `preprocessor_config.json`).
fn gemma4_keys(dir: &Path, audio: &Value, text_hidden: u64) -> Result<GgufWriter, HfError> {
    let channels = two_channels(audio, "subsampling_conv_channels")?;
    let processor = Processor::open(dir)?;
    let max_tokens = processor
        .own("audio_seq_length")
        .and_then(Value::as_u64)
        .unwrap_or(750);
    let mel_bins = processor
        .feature_extractor()
        .map_or(128, |f| uint(f, "feature_size", 128));
    let mut w = GgufWriter::new();
    w.set(
        "general.architecture",
        MetaValue::String("gemma4_audio".into()),
    );
    for (name, value) in [
        ("hidden", uint(audio, "hidden_size", 1024)),
        ("heads", uint(audio, "num_attention_heads", 8)),
        ("layers", uint(audio, "num_hidden_layers", 12)),
        ("mel_bins", mel_bins),
        ("channels0", channels[0]),
        ("channels1", channels[1]),
        ("context_left", uint(audio, "attention_context_left", 13)),
        ("context_right", uint(audio, "attention_context_right", 0)),
        ("conv_kernel", uint(audio, "conv_kernel_size", 5)),
        ("output_dims", uint(audio, "output_proj_dims", 1536)),
        ("text_hidden", text_hidden),
        ("max_tokens", max_tokens),
    ] {
        w.set(key(name), u32_value(value));
    }
    for (name, value) in [
        ("logit_cap", float(audio, "attention_logit_cap", 50.0)),
        ("residual_weight", float(audio, "residual_weight", 0.5)),
        ("eps", float(audio, "rms_norm_eps", 1e-6)),
        ("clip", float(audio, "gradient_clipping", 1e10)),
    ] {
        w.set(key(name), MetaValue::F32(value));
    }
    if audio
        .get("hidden_act")
        .and_then(Value::as_str)
        .is_some_and(|a| a != "silu")
    {
        return Err(HfError::Config(format!(
            "audio_config.hidden_act = {}; only silu is supported",
            audio["hidden_act"]
        )));
    }
    Ok(w)
}

/// Copy the tower's and embedder's tensors.
fn copy_tensors(dir: &Path, w: &mut GgufWriter) -> Result<(), HfError> {
    let ckpt = Checkpoint::open(dir)?;
    let parsed = ckpt.parsed()?;
    let mut names: Vec<(String, usize)> = Vec::new();
    for (si, (_, st)) in parsed.iter().enumerate() {
        names.extend(st.names().into_iter().map(|n| (n.to_string(), si)));
    }
    names.sort();
    let mut found = 0;
    for (name, si) in names {
        let target = if let Some(rest) = name.strip_prefix("model.audio_tower.") {
            match rest.strip_suffix(".linear.weight") {
                Some(product) => format!("a.{product}.weight"),
                None => format!("a.{rest}"),
            }
        } else if let Some(rest) = name.strip_prefix("model.embed_audio.") {
            format!("mm.a.{rest}")
        } else {
            continue;
        };
        let view = parsed[si]
            .1
            .tensor(&name)
            .map_err(|e| HfError::Tensor(format!("{name}: {e}")))?;
        let mut dims: Vec<u64> = view.shape().iter().rev().map(|&d| d as u64).collect();
        // A scalar (a clamp bound) is stored as one element.
        if dims.is_empty() {
            dims.push(1);
        }
        let ty = stored_type(view.dtype(), &name)?;
        w.add_tensor(target, &dims, ty, view.data().to_vec())?;
        found += 1;
    }
    if found == 0 {
        return Err(HfError::Tensor(format!(
            "{}: no model.audio_tower.* tensors",
            dir.display()
        )));
    }
    Ok(())
}
