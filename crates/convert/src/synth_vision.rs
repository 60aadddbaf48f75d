//! Synthetic Gemma 3 vision projectors: llama.cpp's `mmproj` layout with the
//! real SigLIP shapes (896-pixel input, 14-pixel patches, 27 blocks of width
//! 1152) and random weights, so image encoding can be timed, and compared
//! with llama.cpp's `llama-mtmd-cli`, without the real weights.

use crate::rng::hash_name;
use crate::tensors::{produce, Rows, TensorReport};
use crate::ConvertError;
use gguf::{GgmlType, GgufWriter, MetaArray, MetaValue};

/// The shape of a vision tower (Gemma 3's by [`VisionPreset::gemma3`]).
#[derive(Debug, Clone, PartialEq)]
pub struct VisionPreset {
    /// Input side in pixels.
    pub image_size: u32,
    /// Patch side in pixels.
    pub patch_size: u32,
    /// Encoder width.
    pub hidden: usize,
    /// MLP width.
    pub ffn: usize,
    /// Encoder blocks (tests lower it).
    pub layers: usize,
    /// Attention heads.
    pub heads: u32,
    /// Width of the text model the projector maps into.
    pub text_hidden: usize,
}

impl VisionPreset {
    /// Gemma 3's SigLIP-So400m tower, projecting into `text_hidden`
    /// (2560 for the 4B, 3840 for the 12B, 5376 for the 27B).
    pub fn gemma3(text_hidden: usize) -> Self {
        Self {
            image_size: 896,
            patch_size: 14,
            hidden: 1152,
            ffn: 4304,
            layers: 27,
            heads: 16,
            text_hidden,
        }
    }
}

/// A random `mmproj` GGUF of `preset`'s shape: encoder matrices in `matrix`
/// (F16, BF16, F32 or Q8_0), the rest as llama.cpp's converter stores them
/// (embeddings, norms and biases F32, the projection F16). `progress` runs
/// after each tensor.
pub fn synth_vision(
    preset: &VisionPreset,
    matrix: GgmlType,
    seed: u64,
    progress: &mut dyn FnMut(&TensorReport),
) -> Result<GgufWriter, ConvertError> {
    let side = patch_grid_side(preset, matrix)?;
    let mut w = GgufWriter::new();
    write_clip_metadata(&mut w, preset, matrix);
    for spec in tensor_specs(preset, matrix, side) {
        write_random_tensor(&mut w, spec, seed, progress)?;
    }
    Ok(w)
}

/// The side of the patch grid, once `matrix` is a type the projector's
/// matrices may have and the grid pools by 4 and the width splits into the
/// heads.
fn patch_grid_side(p: &VisionPreset, matrix: GgmlType) -> Result<u64, ConvertError> {
    if !matches!(
        matrix,
        GgmlType::F16 | GgmlType::BF16 | GgmlType::F32 | GgmlType::Q8_0
    ) {
        return Err(ConvertError::Invalid(format!(
            "a vision projector's matrices are f16, bf16, f32 or q8_0, not {matrix}"
        )));
    }
    let side = u64::from(p.image_size / p.patch_size.max(1));
    if side == 0 || !side.is_multiple_of(4) || !p.hidden.is_multiple_of(p.heads as usize) {
        return Err(ConvertError::Invalid(
            "the patch grid must pool by 4 and the width split into the heads".into(),
        ));
    }
    Ok(side)
}

/// The `general.*` and `clip.*` keys llama.cpp reads from a Gemma 3 `mmproj`.
fn write_clip_metadata(w: &mut GgufWriter, p: &VisionPreset, matrix: GgmlType) {
    let u32v = |v: usize| MetaValue::U32(v as u32);
    w.set("general.architecture", MetaValue::String("clip".into()));
    w.set(
        "general.name",
        MetaValue::String("synthetic Gemma 3 vision".into()),
    );
    w.set(
        "general.file_type",
        MetaValue::U32(if matrix == GgmlType::Q8_0 { 7 } else { 1 }),
    );
    w.set("clip.has_vision_encoder", MetaValue::Bool(true));
    w.set("clip.projector_type", MetaValue::String("gemma3".into()));
    w.set("clip.use_gelu", MetaValue::Bool(true));
    w.set("clip.vision.image_size", MetaValue::U32(p.image_size));
    w.set("clip.vision.patch_size", MetaValue::U32(p.patch_size));
    w.set("clip.vision.embedding_length", u32v(p.hidden));
    w.set("clip.vision.feed_forward_length", u32v(p.ffn));
    w.set("clip.vision.block_count", u32v(p.layers));
    w.set("clip.vision.attention.head_count", MetaValue::U32(p.heads));
    w.set(
        "clip.vision.attention.layer_norm_epsilon",
        MetaValue::F32(1e-6),
    );
    w.set("clip.vision.projection_dim", u32v(p.text_hidden));
    w.set(
        "clip.vision.image_mean",
        MetaValue::Array(MetaArray::F32(vec![0.5; 3])),
    );
    w.set(
        "clip.vision.image_std",
        MetaValue::Array(MetaArray::F32(vec![0.5; 3])),
    );
}

/// One tensor to synthesise: its name, dimensions, storage type and the
/// normal distribution its values are drawn from.
struct TensorSpec {
    name: String,
    dims: Vec<u64>,
    ty: GgmlType,
    mean: f32,
    std: f32,
}

impl TensorSpec {
    fn new(name: impl Into<String>, dims: Vec<u64>, ty: GgmlType, mean: f32, std: f32) -> Self {
        Self {
            name: name.into(),
            dims,
            ty,
            mean,
            std,
        }
    }
}

/// Every tensor of the projector, in the order they are written: the patch
/// and position embeddings, each encoder block, the final norm and the
/// projection into the text model.
fn tensor_specs(p: &VisionPreset, matrix: GgmlType, side: u64) -> Vec<TensorSpec> {
    let (d, ps) = (p.hidden as u64, u64::from(p.patch_size));
    let mut specs = vec![
        TensorSpec::new(
            "v.patch_embd.weight",
            vec![ps, ps, 3, d],
            GgmlType::F32,
            0.0,
            0.02,
        ),
        TensorSpec::new("v.patch_embd.bias", vec![d], GgmlType::F32, 0.0, 0.02),
        TensorSpec::new(
            "v.position_embd.weight",
            vec![d, side * side],
            GgmlType::F32,
            0.0,
            0.02,
        ),
    ];
    for i in 0..p.layers {
        push_block_specs(&mut specs, p, matrix, i);
    }
    specs.push(TensorSpec::new(
        "v.post_ln.weight",
        vec![d],
        GgmlType::F32,
        1.0,
        0.05,
    ));
    specs.push(TensorSpec::new(
        "v.post_ln.bias",
        vec![d],
        GgmlType::F32,
        0.0,
        0.02,
    ));
    specs.push(TensorSpec::new(
        "mm.soft_emb_norm.weight",
        vec![d],
        GgmlType::F32,
        1.0,
        0.05,
    ));
    let th = p.text_hidden as u64;
    let proj_std = 1.0 / (d as f32).sqrt();
    specs.push(TensorSpec::new(
        "mm.input_projection.weight",
        vec![th, d],
        GgmlType::F16,
        0.0,
        proj_std,
    ));
    specs
}

/// Encoder block `i`'s tensors: the attention and MLP matrices with their
/// biases, then the two layer norms.
fn push_block_specs(specs: &mut Vec<TensorSpec>, p: &VisionPreset, matrix: GgmlType, i: usize) {
    let (d, f) = (p.hidden as u64, p.ffn as u64);
    let b = |n: &str| format!("v.blk.{i}.{n}");
    for (n, cols, rows) in [
        ("attn_q", d, d),
        ("attn_k", d, d),
        ("attn_v", d, d),
        ("attn_out", d, d),
        ("ffn_up", d, f),
        ("ffn_down", f, d),
    ] {
        let std = 1.0 / (cols as f32).sqrt();
        // Rows that are not whole Q8_0 blocks (the MLP's 4304) stay F16,
        // as llama.cpp's converter leaves them.
        let ty = if matrix == GgmlType::Q8_0 && cols % 32 != 0 {
            GgmlType::F16
        } else {
            matrix
        };
        specs.push(TensorSpec::new(
            b(&format!("{n}.weight")),
            vec![cols, rows],
            ty,
            0.0,
            std,
        ));
        specs.push(TensorSpec::new(
            b(&format!("{n}.bias")),
            vec![rows],
            GgmlType::F32,
            0.0,
            0.02,
        ));
    }
    for n in ["ln1", "ln2"] {
        specs.push(TensorSpec::new(
            b(&format!("{n}.weight")),
            vec![d],
            GgmlType::F32,
            1.0,
            0.05,
        ));
        specs.push(TensorSpec::new(
            b(&format!("{n}.bias")),
            vec![d],
            GgmlType::F32,
            0.0,
            0.02,
        ));
    }
}

/// Draw `spec`'s values from its own random stream (the seed mixed with the
/// name's hash), add the tensor to `w` and report it.
fn write_random_tensor(
    w: &mut GgufWriter,
    spec: TensorSpec,
    seed: u64,
    progress: &mut dyn FnMut(&TensorReport),
) -> Result<(), ConvertError> {
    let TensorSpec {
        name,
        dims,
        ty,
        mean,
        std,
    } = spec;
    let rows = Rows::Random {
        stream: seed ^ hash_name(&name),
        mean,
        std,
    };
    let data = produce(&name, &dims, &rows, ty)?;
    let report = TensorReport {
        name: name.clone(),
        dims: dims.clone(),
        from: GgmlType::F32,
        to: ty,
        bytes: data.len(),
    };
    w.add_tensor(name, &dims, ty, data)?;
    progress(&report);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_tower_has_the_mmproj_layout() {
        let preset = VisionPreset {
            image_size: 56,
            patch_size: 14,
            hidden: 32,
            ffn: 64,
            layers: 2,
            heads: 2,
            text_hidden: 48,
        };
        let mut n = 0;
        let w = synth_vision(&preset, GgmlType::Q8_0, 1, &mut |_| n += 1).unwrap();
        let f = gguf::GgufFile::from_bytes(w.to_bytes()).unwrap();
        assert_eq!(f.architecture(), Some("clip"));
        assert_eq!(f.tensors().len(), n);
        assert_eq!(
            f.tensor("v.blk.1.ffn_up.weight").unwrap().ty,
            GgmlType::Q8_0
        );
        assert_eq!(f.tensor("v.blk.1.ffn_up.weight").unwrap().dims, [32, 64]);
        assert_eq!(f.tensor("v.position_embd.weight").unwrap().dims, [32, 16]);
        assert!(synth_vision(&preset, GgmlType::Q4_K, 1, &mut |_| {}).is_err());
    }
}
