//! The audio tower of a Gemma 3n checkpoint, converted in memory for the
//! `media` crate: the tower's tensors under `a.` and the embedder's under
//! `mm.a.` (their Hugging Face names, prefix replaced, stored precision
//! kept), its hyper-parameters under `hearth.audio.`. llama.cpp runs no
//! Gemma 3n audio, so there is no `mmproj` layout to match.

use crate::tensors::{stored_type, Checkpoint};
use crate::{read_json, HfError};
use gguf::{GgufWriter, MetaValue};
use serde_json::Value;
use std::path::Path;

/// Whether `dir` is a checkpoint with a Gemma 3n audio tower.
pub fn has_audio_tower(dir: &Path) -> bool {
    dir.is_dir()
        && read_json(&dir.join("config.json")).is_ok_and(|root| {
            root.get("audio_config").is_some()
                && root.get("model_type").and_then(Value::as_str) == Some("gemma3n")
        })
}

/// Convert the audio tower and embedder of a Gemma 3n checkpoint; `None`
/// when its `config.json` has no `audio_config`.
pub fn convert_audio_dir(dir: &Path) -> Result<Option<GgufWriter>, HfError> {
    let root = read_json(&dir.join("config.json"))?;
    let Some(audio) = root.get("audio_config") else {
        return Ok(None);
    };
    let model_type = root.get("model_type").and_then(Value::as_str).unwrap_or("");
    if model_type != "gemma3n" {
        return Err(HfError::UnsupportedModel(format!(
            "{model_type} (audio towers: gemma3n)"
        )));
    }
    let text = root.get("text_config").unwrap_or(&root);
    let uint =
        |v: &Value, key: &str, default: u64| v.get(key).and_then(Value::as_u64).unwrap_or(default);
    let float = |v: &Value, key: &str, default: f64| {
        v.get(key).and_then(Value::as_f64).unwrap_or(default) as f32
    };
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
    let channels: Vec<u64> = audio
        .get("sscp_conv_channel_size")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_else(|| vec![128, 32]);
    if channels.len() != 2 {
        return Err(HfError::Config(
            "sscp_conv_channel_size needs two entries".into(),
        ));
    }
    let text_hidden = text
        .get("hidden_size")
        .and_then(Value::as_u64)
        .ok_or_else(|| HfError::Config("text_config.hidden_size is missing".into()))?;
    let mut w = GgufWriter::new();
    let k = |s: &str| format!("hearth.audio.{s}");
    let u = |v: u64| MetaValue::U32(u32::try_from(v).unwrap_or(u32::MAX));
    w.set(
        "general.architecture",
        MetaValue::String("gemma3n_audio".into()),
    );
    for (key, value) in [
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
            uint(&root, "audio_soft_tokens_per_image", 188),
        ),
    ] {
        w.set(k(key), u(value));
    }
    for (key, value) in [
        ("logit_cap", float(audio, "conf_attention_logit_cap", 50.0)),
        ("residual_weight", float(audio, "conf_residual_weight", 0.5)),
        (
            "group_norm_eps",
            float(audio, "sscp_conv_group_norm_eps", 1e-3),
        ),
        ("eps", float(audio, "rms_norm_eps", 1e-6)),
        ("clip", float(audio, "gradient_clipping", 1e10)),
    ] {
        w.set(k(key), MetaValue::F32(value));
    }
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
            format!("a.{rest}")
        } else if let Some(rest) = name.strip_prefix("model.embed_audio.") {
            format!("mm.a.{rest}")
        } else {
            continue;
        };
        let view = parsed[si]
            .1
            .tensor(&name)
            .map_err(|e| HfError::Tensor(format!("{name}: {e}")))?;
        let dims: Vec<u64> = view.shape().iter().rev().map(|&d| d as u64).collect();
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
    Ok(Some(w))
}
