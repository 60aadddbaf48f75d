//! Safetensors checkpoints: reading the shards and renaming tensors to GGUF's
//! names.

use crate::{Family, HfError, TextConfig};
use gguf::{GgmlType, GgufWriter};
use memmap2::Mmap;
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;

/// The mapped safetensors files of one checkpoint.
pub(crate) struct Checkpoint {
    shards: Vec<(String, Mmap)>,
}

impl Checkpoint {
    /// Map `model.safetensors`, or every shard the index names.
    pub(crate) fn open(dir: &Path) -> Result<Self, HfError> {
        let index = dir.join("model.safetensors.index.json");
        let mut files: Vec<String> = if index.is_file() {
            let v = crate::read_json(&index)?;
            let map = v
                .get("weight_map")
                .and_then(Value::as_object)
                .ok_or_else(|| HfError::Tensor(format!("{}: no weight_map", index.display())))?;
            let mut f: Vec<String> = map
                .values()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect();
            f.sort();
            f.dedup();
            f
        } else {
            vec!["model.safetensors".to_string()]
        };
        files.retain(|f| !f.contains('/') && !f.contains('\\'));
        let shards = files
            .into_iter()
            .map(|f| {
                let map = map_file(&dir.join(&f))?;
                Ok((f, map))
            })
            .collect::<Result<Vec<_>, HfError>>()?;
        Ok(Self { shards })
    }

    /// Every tensor of every shard, parsed.
    pub(crate) fn parsed(&self) -> Result<Vec<(&str, SafeTensors<'_>)>, HfError> {
        self.shards
            .iter()
            .map(|(name, map)| {
                SafeTensors::deserialize(map)
                    .map(|st| (name.as_str(), st))
                    .map_err(|e| HfError::Tensor(format!("{name}: {e}")))
            })
            .collect()
    }
}

/// A checkpoint file, mapped read-only.
pub(crate) fn map_file(path: &Path) -> Result<Mmap, HfError> {
    let io = |source| HfError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    // SAFETY: the map is read-only and private to this process; like every
    // mmap reader we rely on the checkpoint not being truncated while it is
    // converted.
    unsafe { Mmap::map(&file) }.map_err(io)
}

/// One matrix of a stack: its index, type, dims and bytes.
type StackPart = (usize, GgmlType, Vec<u64>, Vec<u8>);

/// Where a checkpoint tensor goes in the GGUF.
enum Target {
    /// A matrix or table, kept in its stored precision.
    Matrix(String),
    /// An RMSNorm weight, in F32 with the family's offset added.
    Norm(String),
    /// A scalar or small vector kept as F32 verbatim.
    Vector(String),
    /// Slice `index` of a stack of matrices stored as one 3-D tensor.
    Stacked(String, usize),
    /// Not needed by the text model.
    Skip,
}

/// The HF name with the text model's prefix removed (or a bare one), or
/// `None` for tensors of other towers (vision, audio) and the tied head.
fn strip_prefix(name: &str) -> Option<&str> {
    for p in ["model.language_model.", "language_model.model.", "model."] {
        if let Some(rest) = name.strip_prefix(p) {
            return Some(rest);
        }
    }
    // A base model saved alone (sentence-transformers' EmbeddingGemma
    // holds a `Gemma3TextModel`) has no prefix.
    let bare = ["layers.", "embed_tokens.", "norm."];
    bare.iter().any(|p| name.starts_with(p)).then_some(name)
}

/// Where a checkpoint tensor goes in the GGUF (llama.cpp's names); layers
/// from `shared_from` on read an earlier layer's KV and skip their own.
fn target(name: &str, shared_from: u64, family: Family) -> Target {
    if name == "lm_head.weight" {
        return Target::Matrix("output.weight".into());
    }
    let Some(rest) = strip_prefix(name) else {
        return Target::Skip;
    };
    match rest {
        "embed_tokens.weight" => return Target::Matrix("token_embd.weight".into()),
        "norm.weight" => return Target::Norm("output_norm.weight".into()),
        "embed_tokens_per_layer.weight" => {
            return Target::Matrix("per_layer_token_embd.weight".into())
        }
        "per_layer_model_projection.weight" => {
            return Target::Matrix("per_layer_model_proj.weight".into())
        }
        // A norm of Gemma 4's, so no offset either way.
        "per_layer_projection_norm.weight" => {
            return Target::Norm("per_layer_proj_norm.weight".into())
        }
        _ => {}
    }
    // Gemma 3n's AltUp projections, one GGUF tensor per kind.
    for (prefix, gname) in [
        ("altup_projections.", "altup_proj.weight"),
        ("altup_unembed_projections.", "altup_unembd_proj.weight"),
    ] {
        if let Some(i) = rest
            .strip_prefix(prefix)
            .and_then(|r| r.strip_suffix(".weight"))
            .and_then(|i| i.parse::<usize>().ok())
        {
            return Target::Stacked(gname.into(), i);
        }
    }
    let Some(layer) = rest.strip_prefix("layers.") else {
        return Target::Skip;
    };
    let Some((idx, suffix)) = layer.split_once('.') else {
        return Target::Skip;
    };
    let Ok(i) = idx.parse::<u64>() else {
        return Target::Skip;
    };
    let kv_part = matches!(
        suffix,
        "self_attn.k_proj.weight" | "self_attn.v_proj.weight" | "self_attn.k_norm.weight"
    );
    if kv_part && i >= shared_from {
        // Layers that reuse an earlier layer's KV never read these.
        return Target::Skip;
    }
    layer_target(i, suffix, family)
}

/// The GGUF name of the checkpoint matrix `name`, if it is one of the
/// text model's (what a LoRA adapter may change).
pub(crate) fn target_name(name: &str) -> Option<String> {
    match target(name, u64::MAX, Family::Gemma3) {
        Target::Matrix(g) => Some(g),
        _ => None,
    }
}

/// Where layer `i`'s tensor `suffix` goes.
fn layer_target(i: u64, suffix: &str, family: Family) -> Target {
    let blk = |s: &str| format!("blk.{i}.{s}.weight");
    match suffix {
        // Gemma 1 names the MLP's input norm as Llama does.
        "post_attention_layernorm.weight" if family == Family::Gemma => {
            Target::Norm(blk("ffn_norm"))
        }
        "input_layernorm.weight" => Target::Norm(blk("attn_norm")),
        "self_attn.q_proj.weight" => Target::Matrix(blk("attn_q")),
        "self_attn.k_proj.weight" => Target::Matrix(blk("attn_k")),
        "self_attn.v_proj.weight" => Target::Matrix(blk("attn_v")),
        "self_attn.o_proj.weight" => Target::Matrix(blk("attn_output")),
        "self_attn.q_norm.weight" => Target::Norm(blk("attn_q_norm")),
        "self_attn.k_norm.weight" => Target::Norm(blk("attn_k_norm")),
        "post_attention_layernorm.weight" => Target::Norm(blk("post_attention_norm")),
        "pre_feedforward_layernorm.weight" => Target::Norm(blk("ffn_norm")),
        "post_feedforward_layernorm.weight" => Target::Norm(blk("post_ffw_norm")),
        "mlp.gate_proj.weight" => Target::Matrix(blk("ffn_gate")),
        "mlp.up_proj.weight" => Target::Matrix(blk("ffn_up")),
        "mlp.down_proj.weight" => Target::Matrix(blk("ffn_down")),
        "per_layer_input_gate.weight" => Target::Matrix(blk("inp_gate")),
        "per_layer_projection.weight" => Target::Matrix(blk("proj")),
        "post_per_layer_input_norm.weight" => Target::Norm(blk("post_norm")),
        "layer_scalar" => Target::Vector(blk("layer_output_scale")),
        "router.proj.weight" => Target::Matrix(blk("ffn_gate_inp")),
        "router.scale" => Target::Vector(format!("blk.{i}.ffn_gate_inp.scale")),
        "router.per_expert_scale" => Target::Vector(format!("blk.{i}.ffn_down_exps.scale")),
        "experts.gate_up_proj" => Target::Matrix(blk("ffn_gate_up_exps")),
        "experts.down_proj" => Target::Matrix(blk("ffn_down_exps")),
        "pre_feedforward_layernorm_2.weight" => Target::Norm(blk("pre_ffw_norm_2")),
        "post_feedforward_layernorm_1.weight" => Target::Norm(blk("post_ffw_norm_1")),
        "post_feedforward_layernorm_2.weight" => Target::Norm(blk("post_ffw_norm_2")),
        "altup.correct_output_scale" => Target::Vector(blk("altup_correct_scale")),
        "altup.correction_coefs.weight" => Target::Matrix(blk("altup_correct_coef")),
        "altup.prediction_coefs.weight" => Target::Matrix(blk("altup_predict_coef")),
        "altup.modality_router.weight" => Target::Matrix(blk("altup_router")),
        "altup.router_norm.weight" => Target::Norm(blk("altup_router_norm")),
        "laurel.linear_left.weight" => Target::Matrix(blk("laurel_l")),
        "laurel.linear_right.weight" => Target::Matrix(blk("laurel_r")),
        "laurel.post_laurel_norm.weight" => Target::Norm(blk("laurel_post_norm")),
        _ => Target::Skip,
    }
}

/// The tensor's elements as f32, whatever its stored float type.
pub(crate) fn to_f32(dtype: Dtype, data: &[u8], name: &str) -> Result<Vec<f32>, HfError> {
    let conv = |f: fn([u8; 2]) -> f32| {
        data.chunks_exact(2)
            .map(|c| f([c[0], c[1]]))
            .collect::<Vec<f32>>()
    };
    Ok(match dtype {
        Dtype::F32 => data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        Dtype::F16 => conv(|b| half::f16::from_le_bytes(b).to_f32()),
        Dtype::BF16 => conv(|b| half::bf16::from_le_bytes(b).to_f32()),
        other => {
            return Err(HfError::Tensor(format!(
            "tensor `{name}` has dtype {other:?}; only F32, F16 and BF16 checkpoints are supported"
        )))
        }
    })
}

/// The GGUF type a float checkpoint tensor keeps.
pub(crate) fn stored_type(dtype: Dtype, name: &str) -> Result<GgmlType, HfError> {
    match dtype {
        Dtype::F32 => Ok(GgmlType::F32),
        Dtype::F16 => Ok(GgmlType::F16),
        Dtype::BF16 => Ok(GgmlType::BF16),
        other => Err(HfError::Tensor(format!(
            "tensor `{name}` has dtype {other:?}; only F32, F16 and BF16 checkpoints are supported"
        ))),
    }
}

pub(crate) fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Add every text-model tensor to `w`; returns llama.cpp's file type number
/// for the precision most weights are stored in.
pub(crate) fn write_tensors(
    w: &mut GgufWriter,
    ckpt: &Checkpoint,
    family: Family,
    cfg: &TextConfig,
) -> Result<u32, HfError> {
    let mut text = TextTensors::new(family, cfg)?;
    let parsed = ckpt.parsed()?;
    for (name, si) in sorted_tensor_names(&parsed) {
        let view = parsed[si]
            .1
            .tensor(&name)
            .map_err(|e| HfError::Tensor(format!("{name}: {e}")))?;
        text.add(w, &name, &view)?;
    }
    for (gname, parts) in text.stacks {
        write_stack(w, gname, parts)?;
    }
    if family == Family::Gemma4 {
        add_gemma4_rope_freqs(w, cfg)?;
    }
    Ok(file_type(&text.counts))
}

/// Every tensor name of the checkpoint with the index of its shard, in a
/// stable order, so the same checkpoint always gives the same file.
fn sorted_tensor_names(parsed: &[(&str, SafeTensors<'_>)]) -> Vec<(String, usize)> {
    let mut names: Vec<(String, usize)> = Vec::new();
    for (si, (_, st)) in parsed.iter().enumerate() {
        for name in st.names() {
            names.push((name.to_string(), si));
        }
    }
    names.sort();
    names
}

/// What adding a checkpoint's text tensors one by one keeps: the settings
/// that decide where each goes, the experts' matrices waiting to be stacked,
/// and which GGUF names are taken.
struct TextTensors {
    family: Family,
    /// Layers from this one on share an earlier layer's keys and values.
    shared_from: u64,
    /// Whether the output matrix is the token embeddings (and so not kept).
    tied: bool,
    /// The vocabulary size the config states, which the per-layer table is
    /// padded to.
    vocab: Option<u64>,
    /// The parts of each stacked GGUF tensor, in the order first seen.
    stacks: Vec<(String, Vec<StackPart>)>,
    /// Matrices kept in F32, F16 and BF16 (or another type).
    counts: [usize; 3],
    /// Each GGUF name given so far, with the checkpoint tensor it came from.
    taken: HashMap<String, String>,
}

impl TextTensors {
    fn new(family: Family, cfg: &TextConfig) -> Result<Self, HfError> {
        let n_layers = cfg.uint("num_hidden_layers")?;
        let shared = cfg
            .opt_uint("num_kv_shared_layers")
            .unwrap_or(0)
            .min(n_layers);
        let shared_from = if family.shares_kv() {
            n_layers - shared
        } else {
            n_layers
        };
        Ok(Self {
            family,
            shared_from,
            tied: cfg.v.get("tie_word_embeddings").and_then(Value::as_bool) != Some(false),
            vocab: cfg.opt_uint("vocab_size"),
            stacks: Vec::new(),
            counts: [0; 3],
            taken: HashMap::new(),
        })
    }

    /// Two checkpoint tensors that become one GGUF tensor (a name in two
    /// shards, or under two prefixes) would make a file our reader refuses
    /// (found by fuzzing): refuse the checkpoint, naming both.
    fn claim(&mut self, gname: &str, name: &str) -> Result<(), HfError> {
        match self.taken.insert(gname.into(), name.into()) {
            Some(other) => Err(HfError::Tensor(format!(
                "`{other}` and `{name}` of the checkpoint are both `{gname}`"
            ))),
            None => Ok(()),
        }
    }

    /// Add checkpoint tensor `name` to `w` under its GGUF name, or keep it
    /// to be stacked, or pass it over.
    fn add(
        &mut self,
        w: &mut GgufWriter,
        name: &str,
        view: &TensorView<'_>,
    ) -> Result<(), HfError> {
        let target = match target(name, self.shared_from, self.family) {
            Target::Matrix(n) if n == "output.weight" && self.tied => Target::Skip,
            t => t,
        };
        let dims: Vec<u64> = view.shape().iter().rev().map(|&d| d as u64).collect();
        match target {
            Target::Skip => {}
            Target::Stacked(gname, i) => {
                let ty = stored_type(view.dtype(), name)?;
                let entry = match self.stacks.iter_mut().find(|(n, _)| *n == gname) {
                    Some(e) => e,
                    None => {
                        self.stacks.push((gname, Vec::new()));
                        self.stacks.last_mut().expect("just pushed")
                    }
                };
                entry.1.push((i, ty, dims, view.data().to_vec()));
            }
            Target::Matrix(gname) => {
                self.claim(&gname, name)?;
                self.add_matrix(w, gname, name, dims, view)?;
            }
            Target::Norm(gname) => {
                self.claim(&gname, name)?;
                let offset = self.family.norm_offset();
                let v: Vec<f32> = to_f32(view.dtype(), view.data(), name)?
                    .into_iter()
                    .map(|x| x + offset)
                    .collect();
                w.add_tensor(gname, &[v.len() as u64], GgmlType::F32, f32_bytes(&v))?;
            }
            Target::Vector(gname) => {
                self.claim(&gname, name)?;
                let v = to_f32(view.dtype(), view.data(), name)?;
                w.add_tensor(gname, &[v.len() as u64], GgmlType::F32, f32_bytes(&v))?;
            }
        }
        Ok(())
    }

    /// Add a matrix in its stored precision, counting that precision, the
    /// per-layer table padded to the vocabulary.
    fn add_matrix(
        &mut self,
        w: &mut GgufWriter,
        gname: String,
        name: &str,
        mut dims: Vec<u64>,
        view: &TensorView<'_>,
    ) -> Result<(), HfError> {
        let ty = stored_type(view.dtype(), name)?;
        self.counts[match ty {
            GgmlType::F32 => 0,
            GgmlType::F16 => 1,
            _ => 2,
        }] += 1;
        let mut data = view.data().to_vec();
        if gname == "per_layer_token_embd.weight" {
            pad_with_first_row(&mut dims, &mut data, self.vocab)?;
        }
        w.add_tensor(gname, &dims, ty, data)?;
        Ok(())
    }
}

/// Add the matrices numbered 0.. of one shape and type as one 3-D tensor
/// `gname`.
fn write_stack(
    w: &mut GgufWriter,
    gname: String,
    mut parts: Vec<StackPart>,
) -> Result<(), HfError> {
    parts.sort_by_key(|p| p.0);
    let first = &parts[0];
    let (ty, dims) = (first.1, first.2.clone());
    let in_order = parts.iter().enumerate().all(|(j, p)| p.0 == j);
    if !in_order || parts.iter().any(|p| p.1 != ty || p.2 != dims) || dims.len() != 2 {
        return Err(HfError::Tensor(format!(
            "the matrices of `{gname}` are not numbered 0.. with one shape and type"
        )));
    }
    let count = parts.len() as u64;
    let data: Vec<u8> = parts.into_iter().flat_map(|p| p.3).collect();
    w.add_tensor(gname, &[dims[0], dims[1], count], ty, data)?;
    Ok(())
}

/// llama.cpp's LLAMA_FTYPE number for the precision most matrices are kept
/// in (`counts` of F32, F16 and BF16): ALL_F32 0, MOSTLY_F16 1, MOSTLY_BF16 32.
fn file_type(counts: &[usize; 3]) -> u32 {
    let most = (0..3).max_by_key(|&i| counts[i]).unwrap_or(0);
    [0, 1, 32][most]
}

/// Gemma 3n's per-layer table covers fewer ids than the vocabulary (the
/// media tokens at the end have no row); transformers looks those ids up as
/// id 0, so the missing rows are copies of row 0.
fn pad_with_first_row(
    dims: &mut [u64],
    data: &mut Vec<u8>,
    vocab: Option<u64>,
) -> Result<(), HfError> {
    let (Some(vocab), [_, rows]) = (vocab, &mut *dims) else {
        return Ok(());
    };
    if *rows == 0 || *rows >= vocab {
        return Ok(());
    }
    // Gemma 3n misses a few hundred media ids; a `vocab_size` that would
    // more than double the table (10^12 asked for terabytes, found by
    // fuzzing) does not belong to these weights.
    if vocab - *rows > *rows {
        return Err(HfError::Config(format!(
            "`vocab_size` = {vocab} would pad the {rows}-row per-layer table past twice its size"
        )));
    }
    let row_bytes = data.len() / *rows as usize;
    let first = data[..row_bytes].to_vec();
    for _ in *rows..vocab {
        data.extend_from_slice(&first);
    }
    *rows = vocab;
    Ok(())
}

/// The largest head dimension a checkpoint may state (Gemma 4's global
/// layers have 512).
const MAX_HEAD_DIM: u64 = 1 << 16;

/// Gemma 4's proportional RoPE as the divisors llama.cpp reads from
/// `rope_freqs.weight`: 1 for the rotated leading pairs, a huge divisor
/// (angle ~0, no rotation) for the rest.
fn add_gemma4_rope_freqs(w: &mut GgufWriter, cfg: &TextConfig) -> Result<(), HfError> {
    let sliding = cfg.layer_types().unwrap_or_default();
    let head_dim = cfg.opt_uint("head_dim").unwrap_or(0);
    let global = crate::gemma4_global_head_dim(cfg, &sliding).unwrap_or(head_dim);
    if global == 0 {
        return Ok(());
    }
    // Gemma 4's is 512; 2 * 10^9 asked for a 4 GB vector (found by fuzzing).
    if global > MAX_HEAD_DIM {
        return Err(HfError::Config(format!(
            "`global_head_dim` (or the first global layer's `head_dim`) = {global} is implausible; at most {MAX_HEAD_DIM}"
        )));
    }
    let global = global as usize;
    let factor = cfg
        .rope("full_attention", "partial_rotary_factor")
        .and_then(Value::as_f64)
        .unwrap_or(1.0);
    let rotated = ((factor * global as f64) as usize / 2).min(global / 2);
    let freqs: Vec<f32> = (0..global / 2)
        .map(|i| if i < rotated { 1.0 } else { 1e30 })
        .collect();
    w.add_tensor(
        "rope_freqs.weight",
        &[freqs.len() as u64],
        GgmlType::F32,
        f32_bytes(&freqs),
    )?;
    Ok(())
}
