//! The vision tower of a multimodal checkpoint, converted in memory into
//! llama.cpp's `mmproj` layout (`clip.*` keys, `v.*` and `mm.*` tensors), so
//! the `media` crate reads one format whichever way the model came.

use crate::tensors::{f32_bytes, stored_type, to_f32, Checkpoint};
use crate::{read_json, HfError};
use gguf::{GgmlType, GgufWriter, MetaArray, MetaValue};
use serde_json::Value;
use std::path::Path;

/// The model types whose vision towers convert.
const VISION_TYPES: [&str; 1] = ["gemma3"];

/// Whether `dir` is a checkpoint directory whose vision tower converts (a
/// `vision_config` of a supported model type; Gemma 4's does not yet).
pub fn has_vision_tower(dir: &Path) -> bool {
    dir.is_dir()
        && read_json(&dir.join("config.json")).is_ok_and(|root| {
            root.get("vision_config").is_some()
                && root
                    .get("model_type")
                    .and_then(Value::as_str)
                    .is_some_and(|t| VISION_TYPES.contains(&t))
        })
}

/// Convert the vision tower and projector of a checkpoint directory; `None`
/// when its `config.json` has no `vision_config`.
pub fn convert_vision_dir(dir: &Path) -> Result<Option<GgufWriter>, HfError> {
    let root = read_json(&dir.join("config.json"))?;
    let Some(vision) = root.get("vision_config") else {
        return Ok(None);
    };
    let model_type = root.get("model_type").and_then(Value::as_str).unwrap_or("");
    if !VISION_TYPES.contains(&model_type) {
        return Err(HfError::UnsupportedModel(format!(
            "{model_type} (vision towers: gemma3)"
        )));
    }
    let uint = |v: &Value, key: &str| -> Result<u64, HfError> {
        v.get(key)
            .and_then(Value::as_u64)
            .ok_or_else(|| HfError::Config(format!("`{key}` is missing or not an integer")))
    };
    let image_size = uint(vision, "image_size")?;
    let patch_size = uint(vision, "patch_size")?;
    let hidden = uint(vision, "hidden_size")?;
    let text_hidden = uint(root.get("text_config").unwrap_or(&root), "hidden_size")?;
    let tokens = root
        .get("mm_tokens_per_image")
        .and_then(Value::as_u64)
        .unwrap_or(256);
    let per_side = (tokens as f64).sqrt().round() as u64;
    if patch_size == 0 || per_side == 0 || per_side * per_side != tokens {
        return Err(HfError::Config(format!(
            "mm_tokens_per_image = {tokens} is not a square, or patch_size is 0"
        )));
    }
    let scale = (image_size / patch_size) / per_side;
    let mut w = GgufWriter::new();
    let u32v = |v: u64| MetaValue::U32(v.min(u64::from(u32::MAX)) as u32);
    w.set("general.architecture", MetaValue::String("clip".into()));
    w.set("clip.has_vision_encoder", MetaValue::Bool(true));
    w.set("clip.projector_type", MetaValue::String("gemma3".into()));
    w.set("clip.use_gelu", MetaValue::Bool(true));
    w.set("clip.vision.image_size", u32v(image_size));
    w.set("clip.vision.patch_size", u32v(patch_size));
    w.set("clip.vision.embedding_length", u32v(hidden));
    w.set(
        "clip.vision.feed_forward_length",
        u32v(uint(vision, "intermediate_size")?),
    );
    w.set(
        "clip.vision.block_count",
        u32v(uint(vision, "num_hidden_layers")?),
    );
    w.set(
        "clip.vision.attention.head_count",
        u32v(uint(vision, "num_attention_heads")?),
    );
    let eps = vision
        .get("layer_norm_eps")
        .and_then(Value::as_f64)
        .unwrap_or(1e-6) as f32;
    w.set(
        "clip.vision.attention.layer_norm_epsilon",
        MetaValue::F32(eps),
    );
    w.set("clip.vision.projection_dim", u32v(text_hidden));
    w.set("clip.vision.projector.scale_factor", u32v(scale));
    let (mean, std) = normalisation(dir)?;
    w.set(
        "clip.vision.image_mean",
        MetaValue::Array(MetaArray::F32(mean.to_vec())),
    );
    w.set(
        "clip.vision.image_std",
        MetaValue::Array(MetaArray::F32(std.to_vec())),
    );
    write_tensors(&mut w, &Checkpoint::open(dir)?)?;
    Ok(Some(w))
}

/// The processor's per-channel mean and std (`preprocessor_config.json`;
/// SigLIP's 0.5 when absent).
fn normalisation(dir: &Path) -> Result<([f32; 3], [f32; 3]), HfError> {
    let path = dir.join("preprocessor_config.json");
    if !path.is_file() {
        return Ok(([0.5; 3], [0.5; 3]));
    }
    let v = read_json(&path)?;
    let triple = |key: &str| -> Result<[f32; 3], HfError> {
        match v.get(key).and_then(Value::as_array) {
            None => Ok([0.5; 3]),
            Some(a) if a.len() == 3 && a.iter().all(Value::is_number) => {
                let f = |i: usize| a[i].as_f64().unwrap_or(0.5) as f32;
                Ok([f(0), f(1), f(2)])
            }
            Some(_) => Err(HfError::Config(format!(
                "preprocessor_config.json: `{key}` is not three numbers"
            ))),
        }
    };
    Ok((triple("image_mean")?, triple("image_std")?))
}

/// Where a tower tensor goes, and whether it is a vector kept in F32.
fn target(name: &str) -> Option<(String, Kind)> {
    let proj = ["multi_modal_projector.", "model.multi_modal_projector."];
    if let Some(rest) = proj.iter().find_map(|p| name.strip_prefix(p)) {
        return match rest {
            "mm_soft_emb_norm.weight" => Some(("mm.soft_emb_norm.weight".into(), Kind::Norm)),
            "mm_input_projection_weight" => {
                Some(("mm.input_projection.weight".into(), Kind::Projection))
            }
            _ => None,
        };
    }
    let tower = [
        "vision_tower.vision_model.",
        "model.vision_tower.vision_model.",
        "vision_tower.",
        "model.vision_tower.",
    ];
    let rest = tower.iter().find_map(|p| name.strip_prefix(p))?;
    let kind = |n: &str| {
        if n.ends_with(".weight") && !n.contains("layer_norm") && !n.contains("layernorm") {
            Kind::Matrix
        } else {
            Kind::Vector
        }
    };
    let fixed = match rest {
        "embeddings.patch_embedding.weight" => Some("v.patch_embd.weight".to_string()),
        "embeddings.patch_embedding.bias" => Some("v.patch_embd.bias".to_string()),
        "embeddings.position_embedding.weight" => Some("v.position_embd.weight".to_string()),
        "post_layernorm.weight" => Some("v.post_ln.weight".to_string()),
        "post_layernorm.bias" => Some("v.post_ln.bias".to_string()),
        _ => None,
    };
    if let Some(n) = fixed {
        let k = kind(rest);
        return Some((n, k));
    }
    let layer = rest.strip_prefix("encoder.layers.")?;
    let (idx, part) = layer.split_once('.')?;
    let idx: usize = idx.parse().ok()?;
    let (module, suffix) = part.rsplit_once('.')?;
    let gname = match module {
        "layer_norm1" => "ln1",
        "layer_norm2" => "ln2",
        "self_attn.q_proj" => "attn_q",
        "self_attn.k_proj" => "attn_k",
        "self_attn.v_proj" => "attn_v",
        "self_attn.out_proj" => "attn_out",
        "mlp.fc1" => "ffn_up",
        "mlp.fc2" => "ffn_down",
        _ => return None,
    };
    Some((format!("v.blk.{idx}.{gname}.{suffix}"), kind(rest)))
}

/// How a tower tensor is stored.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    /// In its checkpoint precision.
    Matrix,
    /// A bias, LayerNorm weight or table entry, in F32.
    Vector,
    /// The projector's RMSNorm weight, stored as `1 + w` in F32.
    Norm,
    /// The projection, F32.
    Projection,
}

fn write_tensors(w: &mut GgufWriter, ckpt: &Checkpoint) -> Result<(), HfError> {
    let parsed = ckpt.parsed()?;
    let mut names: Vec<(String, usize)> = parsed
        .iter()
        .enumerate()
        .flat_map(|(si, (_, st))| st.names().into_iter().map(move |n| (n.to_string(), si)))
        .collect();
    names.sort();
    let mut found = 0;
    for (name, si) in names {
        let Some((gname, kind)) = target(&name) else {
            continue;
        };
        let view = parsed[si]
            .1
            .tensor(&name)
            .map_err(|e| HfError::Tensor(format!("{name}: {e}")))?;
        let dims: Vec<u64> = view.shape().iter().rev().map(|&d| d as u64).collect();
        found += 1;
        match kind {
            Kind::Matrix => {
                let ty = stored_type(view.dtype(), &name)?;
                w.add_tensor(gname, &dims, ty, view.data().to_vec())?;
            }
            Kind::Vector | Kind::Projection => {
                let v = to_f32(view.dtype(), view.data(), &name)?;
                w.add_tensor(gname, &dims, GgmlType::F32, f32_bytes(&v))?;
            }
            Kind::Norm => {
                let v: Vec<f32> = to_f32(view.dtype(), view.data(), &name)?
                    .into_iter()
                    .map(|x| x + 1.0)
                    .collect();
                w.add_tensor(gname, &dims, GgmlType::F32, f32_bytes(&v))?;
            }
        }
    }
    if found == 0 {
        return Err(HfError::Tensor(
            "config.json has a vision_config but the checkpoint holds no vision tensors".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hub_and_transformers_names_map_alike() {
        for prefix in ["vision_tower.vision_model.", "model.vision_tower."] {
            let (n, k) = target(&format!("{prefix}encoder.layers.3.mlp.fc1.weight")).unwrap();
            assert_eq!((n.as_str(), k), ("v.blk.3.ffn_up.weight", Kind::Matrix));
            let (n, k) = target(&format!("{prefix}encoder.layers.0.layer_norm2.bias")).unwrap();
            assert_eq!((n.as_str(), k), ("v.blk.0.ln2.bias", Kind::Vector));
            let (n, k) = target(&format!("{prefix}post_layernorm.weight")).unwrap();
            assert_eq!((n.as_str(), k), ("v.post_ln.weight", Kind::Vector));
        }
        assert_eq!(
            target("multi_modal_projector.mm_soft_emb_norm.weight").map(|t| t.1),
            Some(Kind::Norm)
        );
        assert!(target("language_model.model.layers.0.mlp.up_proj.weight").is_none());
        assert!(target("vision_tower.vision_model.head.attention.in_proj_weight").is_none());
    }
}
