//! The vision tower of a multimodal checkpoint, converted in memory into
//! llama.cpp's `mmproj` layout (`clip.*` keys, `v.*` and `mm.*` tensors), so
//! the `media` crate reads one format whichever way the model came.

use crate::processor::Processor;
use crate::tensors::{f32_bytes, stored_type, to_f32, Checkpoint};
use crate::{read_json, HfError};
use gguf::{GgmlType, GgufWriter, MetaArray, MetaValue};
use serde_json::Value;
use std::path::Path;

/// The model types whose vision towers convert.
const VISION_TYPES: [&str; 2] = ["gemma3", "gemma4"];

/// The key that carries a Gemma 4 processor's token budget
/// (`max_soft_tokens`) into the converted file; `media` reads it.
const MAX_TOKENS_KEY: &str = "hearth.vision.max_soft_tokens";

/// Whether `dir` is a checkpoint directory whose vision tower converts (a
/// `vision_config` of a supported model type).
pub fn has_vision_tower(dir: &Path) -> bool {
    dir.is_dir()
        && read_json(&dir.join("config.json")).is_ok_and(|root| {
            root.get("vision_config").is_some_and(|v| !v.is_null())
                && root
                    .get("model_type")
                    .and_then(Value::as_str)
                    .is_some_and(|t| VISION_TYPES.contains(&t))
        })
}

/// Whether a Gemma 4 checkpoint directory's images see their own tokens
/// both ways (`text_config.use_bidirectional_attention == "vision"`, the
/// larger models); `None` when `dir` is not a Gemma 4 checkpoint.
pub fn image_attention_bidirectional(dir: &Path) -> Option<bool> {
    if !dir.is_dir() {
        return None;
    }
    let root = read_json(&dir.join("config.json")).ok()?;
    let text = root.get("text_config").unwrap_or(&root);
    let model_type = text
        .get("model_type")
        .or_else(|| root.get("model_type"))
        .and_then(Value::as_str)?;
    if !model_type.starts_with("gemma4") {
        return None;
    }
    Some(
        text.get("use_bidirectional_attention")
            .and_then(Value::as_str)
            == Some("vision"),
    )
}

/// Convert the vision tower and projector of a checkpoint directory; `None`
/// when its `config.json` has no `vision_config`.
pub fn convert_vision_dir(dir: &Path) -> Result<Option<GgufWriter>, HfError> {
    let root = read_json(&dir.join("config.json"))?;
    // A null `vision_config` (an audio-only Gemma 4) is no vision tower.
    let Some(vision) = root.get("vision_config").filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let model_type = root.get("model_type").and_then(Value::as_str).unwrap_or("");
    if !VISION_TYPES.contains(&model_type) {
        return Err(HfError::UnsupportedModel(format!(
            "{model_type} (vision towers: gemma3, gemma4)"
        )));
    }
    if model_type == "gemma4" {
        return convert_gemma4(dir, &root, vision).map(Some);
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
    let (mean, std) = normalisation(dir)?;
    let mut w = ClipHeader {
        projector: "gemma3",
        image_size,
        patch_size,
        hidden,
        ffn: uint(vision, "intermediate_size")?,
        layers: uint(vision, "num_hidden_layers")?,
        heads: uint(vision, "num_attention_heads")?,
        eps: vision
            .get("layer_norm_eps")
            .and_then(Value::as_f64)
            .unwrap_or(1e-6) as f32,
        text_hidden,
        pool: scale,
        mean,
        std,
    }
    .writer();
    w.set("clip.use_gelu", MetaValue::Bool(true));
    write_tensors(&mut w, &Checkpoint::open(dir)?, target)?;
    Ok(Some(w))
}

/// The `clip.*` keys both converted layouts carry.
struct ClipHeader {
    projector: &'static str,
    image_size: u64,
    patch_size: u64,
    hidden: u64,
    ffn: u64,
    layers: u64,
    heads: u64,
    eps: f32,
    text_hidden: u64,
    pool: u64,
    mean: [f32; 3],
    std: [f32; 3],
}

impl ClipHeader {
    /// A writer holding these keys, for the tensors to follow.
    fn writer(&self) -> GgufWriter {
        let mut w = GgufWriter::new();
        w.set("general.architecture", MetaValue::String("clip".into()));
        w.set("clip.has_vision_encoder", MetaValue::Bool(true));
        w.set(
            "clip.projector_type",
            MetaValue::String(self.projector.into()),
        );
        for (key, v) in [
            ("clip.vision.image_size", self.image_size),
            ("clip.vision.patch_size", self.patch_size),
            ("clip.vision.embedding_length", self.hidden),
            ("clip.vision.feed_forward_length", self.ffn),
            ("clip.vision.block_count", self.layers),
            ("clip.vision.attention.head_count", self.heads),
            ("clip.vision.projection_dim", self.text_hidden),
            ("clip.vision.projector.scale_factor", self.pool),
        ] {
            w.set(key, u32v(v));
        }
        w.set(
            "clip.vision.attention.layer_norm_epsilon",
            MetaValue::F32(self.eps),
        );
        w.set(
            "clip.vision.image_mean",
            MetaValue::Array(MetaArray::F32(self.mean.to_vec())),
        );
        w.set(
            "clip.vision.image_std",
            MetaValue::Array(MetaArray::F32(self.std.to_vec())),
        );
        w
    }
}

/// A count as a `u32` metadata value (saturating: the readers bound it).
fn u32v(v: u64) -> MetaValue {
    MetaValue::U32(v.min(u64::from(u32::MAX)) as u32)
}

/// Gemma 4's vision tower and embedder in llama.cpp's `gemma4v` layout.
fn convert_gemma4(dir: &Path, root: &Value, vision: &Value) -> Result<GgufWriter, HfError> {
    let uint = |key: &str| -> Result<u64, HfError> {
        vision
            .get(key)
            .and_then(Value::as_u64)
            .ok_or_else(|| HfError::Config(format!("vision_config: `{key}` is missing")))
    };
    let text = root.get("text_config").unwrap_or(root);
    let text_hidden = text
        .get("hidden_size")
        .and_then(Value::as_u64)
        .ok_or_else(|| HfError::Config("text_config: `hidden_size` is missing".into()))?;
    let hidden = uint("hidden_size")?;
    let heads = uint("num_attention_heads")?;
    if vision.get("num_key_value_heads").and_then(Value::as_u64) != Some(heads) {
        return Err(HfError::UnsupportedModel(
            "a Gemma 4 vision tower with grouped key-value heads".into(),
        ));
    }
    if let Some(hd) = vision.get("head_dim").and_then(Value::as_u64) {
        if hd * heads != hidden {
            return Err(HfError::UnsupportedModel(format!(
                "a Gemma 4 vision tower whose heads ({heads} x {hd}) are not its width {hidden}"
            )));
        }
    }
    let mut w = ClipHeader {
        projector: "gemma4v",
        // llama.cpp's converter writes this placeholder; the input size
        // follows each picture.
        image_size: 224,
        patch_size: uint("patch_size")?,
        hidden,
        ffn: uint("intermediate_size")?,
        layers: uint("num_hidden_layers")?,
        heads,
        eps: vision
            .get("rms_norm_eps")
            .and_then(Value::as_f64)
            .unwrap_or(1e-6) as f32,
        text_hidden,
        pool: vision
            .get("pooling_kernel_size")
            .and_then(Value::as_u64)
            .unwrap_or(3),
        // The model takes pixels in 0..1 (no normalisation) and scales them
        // itself.
        mean: [0.0; 3],
        std: [1.0; 3],
    }
    .writer();
    let theta = vision
        .get("rope_parameters")
        .and_then(|r| r.get("rope_theta"))
        .and_then(Value::as_f64)
        .unwrap_or(100.0);
    w.set("clip.vision.rope_theta", MetaValue::F32(theta as f32));
    if let Some(t) = Processor::open(dir)?
        .image()
        .and_then(|p| p.get("max_soft_tokens"))
        .and_then(Value::as_u64)
    {
        w.set(MAX_TOKENS_KEY, u32v(t));
    }
    write_tensors(&mut w, &Checkpoint::open(dir)?, target_gemma4)?;
    Ok(w)
}

/// Where a Gemma 4 tower tensor goes, and how it is stored.
fn target_gemma4(name: &str) -> Option<(String, Kind)> {
    let name = name.strip_prefix("model.").unwrap_or(name);
    if name == "embed_vision.embedding_projection.weight" {
        return Some(("mm.input_projection.weight".into(), Kind::Matrix));
    }
    let rest = name.strip_prefix("vision_tower.")?;
    let fixed = match rest {
        "patch_embedder.input_proj.weight" => Some(("v.patch_embd.weight", Kind::Patch)),
        "patch_embedder.position_embedding_table" => Some(("v.position_embd.weight", Kind::Vector)),
        "std_bias" => Some(("v.std_bias", Kind::Vector)),
        "std_scale" => Some(("v.std_scale", Kind::Vector)),
        _ => None,
    };
    if let Some((n, k)) = fixed {
        return Some((n.to_string(), k));
    }
    let layer = rest.strip_prefix("encoder.layers.")?;
    let (idx, part) = layer.split_once('.')?;
    let idx: usize = idx.parse().ok()?;
    let (module, suffix) = part.rsplit_once('.')?;
    let module = module.strip_suffix(".linear").unwrap_or(module);
    let gname = match module {
        "input_layernorm" => "ln1",
        "post_attention_layernorm" => "attn_post_norm",
        "pre_feedforward_layernorm" => "ln2",
        "post_feedforward_layernorm" => "ffn_post_norm",
        "self_attn.q_proj" => "attn_q",
        "self_attn.k_proj" => "attn_k",
        "self_attn.v_proj" => "attn_v",
        "self_attn.o_proj" => "attn_out",
        "self_attn.q_norm" => "attn_q_norm",
        "self_attn.k_norm" => "attn_k_norm",
        "mlp.gate_proj" => "ffn_gate",
        "mlp.up_proj" => "ffn_up",
        "mlp.down_proj" => "ffn_down",
        _ => return None,
    };
    let kind = match suffix {
        "weight" if gname.contains("norm") || gname.starts_with("ln") => Kind::Vector,
        "weight" => Kind::Matrix,
        "input_min" | "input_max" | "output_min" | "output_max" => Kind::Vector,
        _ => return None,
    };
    Some((format!("v.blk.{idx}.{gname}.{suffix}"), kind))
}

/// The image processor's per-channel mean and std (nested in
/// `processor_config.json` or in `preprocessor_config.json`; SigLIP's 0.5
/// when absent).
fn normalisation(dir: &Path) -> Result<([f32; 3], [f32; 3]), HfError> {
    let processor = Processor::open(dir)?;
    let Some(v) = processor.image() else {
        return Ok(([0.5; 3], [0.5; 3]));
    };
    let triple = |key: &str| -> Result<[f32; 3], HfError> {
        match v.get(key).and_then(Value::as_array) {
            None => Ok([0.5; 3]),
            Some(a) if a.len() == 3 && a.iter().all(Value::is_number) => {
                let f = |i: usize| a[i].as_f64().unwrap_or(0.5) as f32;
                Ok([f(0), f(1), f(2)])
            }
            Some(_) => Err(HfError::Config(format!(
                "the image processor's `{key}` is not three numbers"
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
    /// A bias, norm weight, clamp bound, position table or
    /// standardisation vector, in F32 (a scalar becomes one element).
    Vector,
    /// The projector's RMSNorm weight, stored as `1 + w` in F32.
    Norm,
    /// The projection, F32.
    Projection,
    /// Gemma 4's patch embedding, its columns reordered from (y, x,
    /// channel) to the convolution's (channel, y, x), in its checkpoint
    /// precision.
    Patch,
}

/// Every tensor name of the checkpoint's files, sorted, with the index of
/// the file that holds it.
fn sorted_names(parsed: &[(impl Sized, safetensors::SafeTensors<'_>)]) -> Vec<(String, usize)> {
    let mut names: Vec<(String, usize)> = parsed
        .iter()
        .enumerate()
        .flat_map(|(si, (_, st))| st.names().into_iter().map(move |n| (n.to_string(), si)))
        .collect();
    names.sort();
    names
}

/// Write the tensors `target` places (a GGUF name and how it is stored).
fn write_tensors(
    w: &mut GgufWriter,
    ckpt: &Checkpoint,
    target: fn(&str) -> Option<(String, Kind)>,
) -> Result<(), HfError> {
    let parsed = ckpt.parsed()?;
    let mut found = 0;
    for (name, si) in sorted_names(&parsed) {
        let Some((gname, kind)) = target(&name) else {
            continue;
        };
        let view = parsed[si]
            .1
            .tensor(&name)
            .map_err(|e| HfError::Tensor(format!("{name}: {e}")))?;
        let mut dims: Vec<u64> = view.shape().iter().rev().map(|&d| d as u64).collect();
        if dims.is_empty() {
            dims.push(1);
        }
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
            Kind::Patch => {
                let ty = stored_type(view.dtype(), &name)?;
                let out = conv_order(view.data(), &dims, &name)?;
                w.add_tensor(gname, &dims, ty, out)?;
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

/// A patch embedding's rows (`dims` = [columns, rows]) with each row's
/// columns moved from (y, x, channel) order to (channel, y, x).
fn conv_order(src: &[u8], dims: &[u64], name: &str) -> Result<Vec<u8>, HfError> {
    let (cols, rows) = match dims {
        &[c, r] if c > 0 && r > 0 => (c as usize, r as usize),
        _ => {
            return Err(HfError::Tensor(format!(
                "{name}: expected a non-empty matrix, found {dims:?}"
            )))
        }
    };
    let p = ((cols / 3) as f64).sqrt().round() as usize;
    if p * p * 3 != cols || !src.len().is_multiple_of(rows * cols) {
        return Err(HfError::Tensor(format!(
            "{name}: {cols} columns are not 3 channels of square patches"
        )));
    }
    let size = src.len() / (rows * cols);
    let mut out = vec![0u8; src.len()];
    for r in 0..rows {
        for y in 0..p {
            for x in 0..p {
                for c in 0..3 {
                    let from = r * cols + (y * p + x) * 3 + c;
                    let to = r * cols + (c * p + y) * p + x;
                    out[to * size..][..size].copy_from_slice(&src[from * size..][..size]);
                }
            }
        }
    }
    Ok(out)
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
        let t = target_gemma4;
        assert_eq!(
            t("model.vision_tower.encoder.layers.1.mlp.gate_proj.linear.weight"),
            Some(("v.blk.1.ffn_gate.weight".into(), Kind::Matrix))
        );
        assert_eq!(
            t("model.vision_tower.encoder.layers.0.self_attn.o_proj.output_max"),
            Some(("v.blk.0.attn_out.output_max".into(), Kind::Vector))
        );
        assert_eq!(
            t("model.vision_tower.encoder.layers.0.self_attn.k_norm.weight"),
            Some(("v.blk.0.attn_k_norm.weight".into(), Kind::Vector))
        );
        assert_eq!(
            t("model.embed_vision.embedding_projection.weight"),
            Some(("mm.input_projection.weight".into(), Kind::Matrix))
        );
        assert!(t("model.language_model.layers.0.mlp.up_proj.weight").is_none());
        assert!(target("vision_tower.vision_model.head.attention.in_proj_weight").is_none());
    }
}
