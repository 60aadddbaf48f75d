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
#[expect(
    clippy::too_many_lines,
    reason = "longer than a screen; issue 91 splits it"
)]
pub fn synth_vision(
    preset: &VisionPreset,
    matrix: GgmlType,
    seed: u64,
    progress: &mut dyn FnMut(&TensorReport),
) -> Result<GgufWriter, ConvertError> {
    if !matches!(
        matrix,
        GgmlType::F16 | GgmlType::BF16 | GgmlType::F32 | GgmlType::Q8_0
    ) {
        return Err(ConvertError::Invalid(format!(
            "a vision projector's matrices are f16, bf16, f32 or q8_0, not {matrix}"
        )));
    }
    let p = preset;
    let side = u64::from(p.image_size / p.patch_size.max(1));
    if side == 0 || !side.is_multiple_of(4) || !p.hidden.is_multiple_of(p.heads as usize) {
        return Err(ConvertError::Invalid(
            "the patch grid must pool by 4 and the width split into the heads".into(),
        ));
    }
    let mut w = GgufWriter::new();
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
    let (d, f, ps) = (p.hidden as u64, p.ffn as u64, u64::from(p.patch_size));
    // (name, dims, type, mean, std)
    let mut specs: Vec<(String, Vec<u64>, GgmlType, f32, f32)> = vec![
        (
            "v.patch_embd.weight".into(),
            vec![ps, ps, 3, d],
            GgmlType::F32,
            0.0,
            0.02,
        ),
        (
            "v.patch_embd.bias".into(),
            vec![d],
            GgmlType::F32,
            0.0,
            0.02,
        ),
        (
            "v.position_embd.weight".into(),
            vec![d, side * side],
            GgmlType::F32,
            0.0,
            0.02,
        ),
    ];
    for i in 0..p.layers {
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
            specs.push((b(&format!("{n}.weight")), vec![cols, rows], ty, 0.0, std));
            specs.push((
                b(&format!("{n}.bias")),
                vec![rows],
                GgmlType::F32,
                0.0,
                0.02,
            ));
        }
        for n in ["ln1", "ln2"] {
            specs.push((b(&format!("{n}.weight")), vec![d], GgmlType::F32, 1.0, 0.05));
            specs.push((b(&format!("{n}.bias")), vec![d], GgmlType::F32, 0.0, 0.02));
        }
    }
    specs.push(("v.post_ln.weight".into(), vec![d], GgmlType::F32, 1.0, 0.05));
    specs.push(("v.post_ln.bias".into(), vec![d], GgmlType::F32, 0.0, 0.02));
    specs.push((
        "mm.soft_emb_norm.weight".into(),
        vec![d],
        GgmlType::F32,
        1.0,
        0.05,
    ));
    let th = p.text_hidden as u64;
    let proj_std = 1.0 / (d as f32).sqrt();
    specs.push((
        "mm.input_projection.weight".into(),
        vec![th, d],
        GgmlType::F16,
        0.0,
        proj_std,
    ));
    for (name, dims, ty, mean, std) in specs {
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
    }
    Ok(w)
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
