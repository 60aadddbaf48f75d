//! Hugging Face checkpoint directories as GGUF.
//!
//! A directory holding `config.json`, `model.safetensors` (or shards listed in
//! `model.safetensors.index.json`) and `tokenizer.model` / `tokenizer.json` is
//! converted in memory into the GGUF llama.cpp's `convert_hf_to_gguf.py` would
//! write for it: the same tensor names, shapes and metadata keys, norm weights
//! shifted by one where the architecture stores `w` and computes `x * (1 + w)`.
//! Everything downstream (the model, the tokenizer, `hearth quantize`) then has
//! one input format.

mod audio;
mod lora;
mod processor;
mod sentence;
mod spm;
mod tensors;
mod vision;
mod vocab;

pub use audio::{convert_audio_dir, has_audio_tower};
pub use lora::{convert_adapter_dir, is_adapter_dir};
pub use vision::{convert_vision_dir, has_vision_tower, image_attention_bidirectional};

use gguf::{GgufWriter, MetaArray, MetaValue};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Why a checkpoint directory cannot be converted.
#[derive(Debug, thiserror::Error)]
pub enum HfError {
    /// A file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A JSON file is malformed.
    #[error("{path}: {message}")]
    Json {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The checkpoint is for a model we do not convert.
    #[error("unsupported model_type `{0}` in config.json (supported: gemma, gemma2, gemma3, gemma3_text, gemma3n, gemma3n_text, gemma4, gemma4_text)")]
    UnsupportedModel(String),
    /// A required config value is missing or of the wrong kind.
    #[error("config.json: {0}")]
    Config(String),
    /// A safetensors file is malformed or holds an unexpected tensor.
    #[error("{0}")]
    Tensor(String),
    /// The vocabulary files are missing or malformed.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// Building the GGUF failed.
    #[error(transparent)]
    Gguf(#[from] gguf::GgufError),
}

/// Whether `path` looks like a Hugging Face checkpoint directory.
pub fn is_checkpoint_dir(path: &Path) -> bool {
    path.is_dir() && path.join("config.json").is_file()
}

/// The Gemma generations this crate converts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Family {
    /// Gemma 1 and CodeGemma.
    Gemma,
    Gemma2,
    Gemma3,
    Gemma3n,
    Gemma4,
    /// EmbeddingGemma: a Gemma 3 text model attending both ways, in a
    /// sentence-transformers directory.
    GemmaEmbedding,
}

impl Family {
    fn gguf_arch(self) -> &'static str {
        match self {
            Family::GemmaEmbedding => "gemma-embedding",
            Family::Gemma => "gemma",
            Family::Gemma2 => "gemma2",
            Family::Gemma3 => "gemma3",
            Family::Gemma3n => "gemma3n",
            Family::Gemma4 => "gemma4",
        }
    }

    /// Gemma 1, 2 and 3 store RMSNorm weights as `w` and scale by `1 + w`;
    /// GGUF stores `1 + w`. Gemma 3n and 4 scale by `w` itself.
    fn norm_offset(self) -> f32 {
        match self {
            Family::Gemma | Family::Gemma2 | Family::Gemma3 | Family::GemmaEmbedding => 1.0,
            Family::Gemma3n | Family::Gemma4 => 0.0,
        }
    }

    /// Whether the last `num_kv_shared_layers` layers reuse earlier KV.
    fn shares_kv(self) -> bool {
        matches!(self, Family::Gemma3n | Family::Gemma4)
    }
}

/// `read_json` of a file that may be absent (`None` then).
pub(crate) fn read_json_if_present(path: &Path) -> Result<Option<Value>, HfError> {
    if path.is_file() {
        read_json(path).map(Some)
    } else {
        Ok(None)
    }
}

pub(crate) fn read_json(path: &Path) -> Result<Value, HfError> {
    let text = std::fs::read_to_string(path).map_err(|source| HfError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|e| HfError::Json {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

/// The text-model part of `config.json` (multimodal checkpoints nest it).
pub(crate) struct TextConfig<'a> {
    v: &'a Value,
}

impl TextConfig<'_> {
    fn uint(&self, key: &str) -> Result<u64, HfError> {
        self.opt_uint(key)
            .ok_or_else(|| HfError::Config(format!("`{key}` is missing or not an integer")))
    }
    fn opt_uint(&self, key: &str) -> Option<u64> {
        self.v.get(key).and_then(Value::as_u64)
    }
    fn opt_f32(&self, key: &str) -> Option<f32> {
        self.v.get(key).and_then(Value::as_f64).map(|x| x as f32)
    }
    fn layer_types(&self) -> Option<Vec<bool>> {
        let arr = self.v.get("layer_types")?.as_array()?;
        arr.iter()
            .map(|t| t.as_str().map(|s| s == "sliding_attention"))
            .collect()
    }
    /// Which layers slide (`layer_types`), one per layer.
    fn sliding_layers(&self, n_layers: u64) -> Result<Vec<bool>, HfError> {
        let sliding = self
            .layer_types()
            .ok_or_else(|| HfError::Config("`layer_types` is missing".into()))?;
        if sliding.len() as u64 != n_layers {
            return Err(HfError::Config(format!(
                "{} layer types for {n_layers} layers",
                sliding.len()
            )));
        }
        Ok(sliding)
    }
    /// `rope_parameters[kind][key]` (transformers 5) or the flat
    /// `rope_theta` / `rope_local_base_freq` of older configs.
    fn rope(&self, kind: &str, key: &str) -> Option<&Value> {
        self.v
            .get("rope_parameters")
            .and_then(|p| p.get(kind).or(Some(p)))
            .and_then(|p| p.get(key))
    }
}

/// Convert a checkpoint directory into a GGUF held in memory, tensors in
/// their stored precision (F32, F16 or BF16; norms in F32).
pub fn convert_dir(dir: &Path) -> Result<GgufWriter, HfError> {
    let root = read_json(&dir.join("config.json"))?;
    let text = root.get("text_config").unwrap_or(&root);
    let family = family_of(&root)?;
    let cfg = TextConfig { v: text };
    let mut w = GgufWriter::new();
    let arch = family.gguf_arch();
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| arch.to_string());
    w.set("general.architecture", MetaValue::String(arch.into()));
    w.set("general.name", MetaValue::String(name));
    write_hparams(&mut w, family, &cfg)?;
    let store = tensors::Checkpoint::open(dir)?;
    let file_type = tensors::write_tensors(&mut w, &store, family, &cfg)?;
    w.set("general.file_type", MetaValue::U32(file_type));
    w.set("general.quantization_version", MetaValue::U32(2));
    vocab::write_tokenizer(&mut w, dir, family, &root)?;
    if family == Family::GemmaEmbedding {
        sentence::write_modules(&mut w, dir, arch)?;
    }
    Ok(w)
}

/// Only the `tokenizer.*` metadata `convert_dir` writes for a checkpoint
/// directory (its `config.json` and tokenizer files; no weights read).
pub fn convert_tokenizer(dir: &Path) -> Result<GgufWriter, HfError> {
    let root = read_json(&dir.join("config.json"))?;
    let mut w = GgufWriter::new();
    vocab::write_tokenizer(&mut w, dir, family_of(&root)?, &root)?;
    Ok(w)
}

/// The Gemma generation `config.json` names.
fn family_of(root: &Value) -> Result<Family, HfError> {
    let text = root.get("text_config").unwrap_or(root);
    let model_type = text
        .get("model_type")
        .or_else(|| root.get("model_type"))
        .and_then(Value::as_str)
        .unwrap_or("");
    match model_type {
        "gemma" => Ok(Family::Gemma),
        "gemma2" => Ok(Family::Gemma2),
        // transformers' EmbeddingGemma is a Gemma 3 text model attending both ways.
        "gemma3" | "gemma3_text"
            if text
                .get("use_bidirectional_attention")
                .and_then(Value::as_bool)
                == Some(true) =>
        {
            Ok(Family::GemmaEmbedding)
        }
        "gemma3" | "gemma3_text" => Ok(Family::Gemma3),
        "gemma3n" | "gemma3n_text" => Ok(Family::Gemma3n),
        "gemma4" | "gemma4_text" => Ok(Family::Gemma4),
        other => Err(HfError::UnsupportedModel(other.to_string())),
    }
}

fn u32_of(v: u64, key: &str) -> Result<MetaValue, HfError> {
    u32::try_from(v)
        .map(MetaValue::U32)
        .map_err(|_| HfError::Config(format!("`{key}` = {v} is too large")))
}

/// The `<arch>.*` hyper-parameter keys, as llama.cpp's converter names them.
fn write_hparams(w: &mut GgufWriter, family: Family, cfg: &TextConfig) -> Result<(), HfError> {
    let arch = family.gguf_arch();
    let k = |s: &str| format!("{arch}.{s}");
    let hidden = cfg.uint("hidden_size")?;
    let n_layers = cfg.uint("num_hidden_layers")?;
    let heads = cfg.uint("num_attention_heads")?;
    let kv_heads = cfg.opt_uint("num_key_value_heads").unwrap_or(heads);
    let head_dim = cfg.opt_uint("head_dim").unwrap_or(hidden / heads.max(1));
    let ctx = cfg.opt_uint("max_position_embeddings").unwrap_or(8192);
    let eps = cfg.opt_f32("rms_norm_eps").unwrap_or(1e-6);
    w.set(k("context_length"), u32_of(ctx, "max_position_embeddings")?);
    w.set(k("embedding_length"), u32_of(hidden, "hidden_size")?);
    w.set(k("block_count"), u32_of(n_layers, "num_hidden_layers")?);
    w.set(
        k("attention.head_count"),
        u32_of(heads, "num_attention_heads")?,
    );
    w.set(
        k("attention.head_count_kv"),
        u32_of(kv_heads, "num_key_value_heads")?,
    );
    w.set(k("attention.layer_norm_rms_epsilon"), MetaValue::F32(eps));
    if let Some(c) = cfg.opt_f32("final_logit_softcapping") {
        w.set(k("final_logit_softcapping"), MetaValue::F32(c));
    }
    if let Some(win) = cfg.opt_uint("sliding_window") {
        w.set(
            k("attention.sliding_window"),
            u32_of(win, "sliding_window")?,
        );
    }
    match family {
        Family::Gemma | Family::Gemma2 | Family::Gemma3 | Family::GemmaEmbedding => {
            write_gemma23_hparams(w, family, cfg, head_dim)
        }
        Family::Gemma3n => write_gemma3n_hparams(w, cfg, n_layers, head_dim),
        Family::Gemma4 => write_gemma4_hparams(w, cfg, n_layers, head_dim, kv_heads),
    }
}

/// Gemma 1's, 2's and 3's keys: one FFN width and head size, the query
/// scale, the RoPE bases (and Gemma 3's linear scaling), Gemma 2's
/// soft-cap.
fn write_gemma23_hparams(
    w: &mut GgufWriter,
    family: Family,
    cfg: &TextConfig,
    head_dim: u64,
) -> Result<(), HfError> {
    let arch = family.gguf_arch();
    let k = |s: &str| format!("{arch}.{s}");
    let rope_theta = |kind: &str| cfg.rope(kind, "rope_theta").and_then(Value::as_f64);
    w.set(
        k("feed_forward_length"),
        u32_of(cfg.uint("intermediate_size")?, "intermediate_size")?,
    );
    w.set(k("attention.key_length"), u32_of(head_dim, "head_dim")?);
    w.set(k("attention.value_length"), u32_of(head_dim, "head_dim")?);
    if let Some(s) = cfg.opt_f32("query_pre_attn_scalar").filter(|s| *s > 0.0) {
        w.set(k("attention.scale"), MetaValue::F32(1.0 / s.sqrt()));
    }
    if matches!(family, Family::Gemma | Family::Gemma2) {
        if let Some(c) = cfg.opt_f32("attn_logit_softcapping") {
            w.set(k("attn_logit_softcapping"), MetaValue::F32(c));
        }
        if let Some(t) = rope_theta("default").or_else(|| rope_theta("full_attention")) {
            w.set(k("rope.freq_base"), MetaValue::F32(t as f32));
        }
        return Ok(());
    }
    if let Some(t) = rope_theta("full_attention") {
        w.set(k("rope.freq_base"), MetaValue::F32(t as f32));
    }
    let local = rope_theta("sliding_attention")
        .or_else(|| cfg.v.get("rope_local_base_freq").and_then(Value::as_f64));
    if let Some(t) = local {
        w.set(k("rope.freq_base_swa"), MetaValue::F32(t as f32));
    }
    let rope_type = cfg
        .rope("full_attention", "rope_type")
        .and_then(Value::as_str);
    let factor = cfg.rope("full_attention", "factor").and_then(Value::as_f64);
    if let (Some("linear"), Some(f)) = (rope_type, factor) {
        w.set(k("rope.scaling.type"), MetaValue::String("linear".into()));
        w.set(k("rope.scaling.factor"), MetaValue::F32(f as f32));
    }
    Ok(())
}

/// Gemma 4's keys: FFN widths (doubled on KV-sharing layers when the
/// checkpoint says so), global and sliding head sizes and RoPE, the layer
/// pattern, KV sharing and the global layers' KV heads, experts, per-layer
/// inputs.
fn write_gemma4_hparams(
    w: &mut GgufWriter,
    cfg: &TextConfig,
    n_layers: u64,
    head_dim: u64,
    kv_heads: u64,
) -> Result<(), HfError> {
    let arch = Family::Gemma4.gguf_arch();
    let k = |s: &str| format!("{arch}.{s}");
    let rope_theta = |kind: &str| cfg.rope(kind, "rope_theta").and_then(Value::as_f64);
    let sliding = cfg.sliding_layers(n_layers)?;
    let global_dim = gemma4_global_head_dim(cfg, &sliding).unwrap_or(head_dim);
    let shared = cfg
        .opt_uint("num_kv_shared_layers")
        .unwrap_or(0)
        .min(n_layers);
    w.set(k("feed_forward_length"), gemma4_ffn(cfg, n_layers, shared)?);
    for (key, value, what) in [
        ("attention.key_length", global_dim, "global_head_dim"),
        ("attention.value_length", global_dim, "global_head_dim"),
        ("attention.key_length_swa", head_dim, "head_dim"),
        ("attention.value_length_swa", head_dim, "head_dim"),
        ("rope.dimension_count", global_dim, "global_head_dim"),
        ("rope.dimension_count_swa", head_dim, "head_dim"),
    ] {
        w.set(k(key), u32_of(value, what)?);
    }
    w.set(
        k("rope.freq_base"),
        MetaValue::F32(rope_theta("full_attention").unwrap_or(1e6) as f32),
    );
    w.set(
        k("rope.freq_base_swa"),
        MetaValue::F32(rope_theta("sliding_attention").unwrap_or(1e4) as f32),
    );
    w.set(
        k("attention.sliding_window_pattern"),
        MetaValue::Array(MetaArray::Bool(sliding.clone())),
    );
    w.set(
        k("attention.shared_kv_layers"),
        u32_of(shared, "num_kv_shared_layers")?,
    );
    if let Some(per_layer) = gemma4_kv_heads(cfg, &sliding, kv_heads)? {
        w.set(k("attention.head_count_kv"), per_layer);
    }
    for (key, name) in [
        ("expert_count", "num_experts"),
        ("expert_used_count", "top_k_experts"),
        ("expert_feed_forward_length", "moe_intermediate_size"),
    ] {
        if let Some(n) = cfg.opt_uint(name) {
            w.set(k(key), u32_of(n, name)?);
        }
    }
    let ple = cfg.opt_uint("hidden_size_per_layer_input").unwrap_or(0);
    w.set(
        k("embedding_length_per_layer_input"),
        u32_of(ple, "hidden_size_per_layer_input")?,
    );
    Ok(())
}

/// Gemma 4's FFN width: one, or per layer with the last `shared` (the
/// KV-sharing layers) doubled under `use_double_wide_mlp`.
fn gemma4_ffn(cfg: &TextConfig, n_layers: u64, shared: u64) -> Result<MetaValue, HfError> {
    let ffn = cfg.uint("intermediate_size")?;
    if cfg.v.get("use_double_wide_mlp").and_then(Value::as_bool) != Some(true) {
        return u32_of(ffn, "intermediate_size");
    }
    let per_layer: Vec<i32> = (0..n_layers)
        .map(|i| {
            let wide = i >= n_layers - shared;
            i32::try_from(if wide { 2 * ffn } else { ffn })
                .map_err(|_| HfError::Config("intermediate_size is too large".into()))
        })
        .collect::<Result<_, _>>()?;
    Ok(MetaValue::Array(MetaArray::I32(per_layer)))
}

/// Gemma 4's KV heads per layer where its global layers have their own
/// count (`num_global_key_value_heads`, or the first global layer's
/// `per_layer_config`); `None` when they do not.
fn gemma4_kv_heads(
    cfg: &TextConfig,
    sliding: &[bool],
    kv_heads: u64,
) -> Result<Option<MetaValue>, HfError> {
    let global_kv = cfg.opt_uint("num_global_key_value_heads").or_else(|| {
        let first_global = sliding.iter().position(|s| !s)?;
        cfg.v
            .get("per_layer_config")?
            .get(first_global.to_string())?
            .get("num_key_value_heads")?
            .as_u64()
    });
    let Some(g) = global_kv else {
        return Ok(None);
    };
    let per_layer: Vec<i32> = sliding
        .iter()
        .map(|&s| i32::try_from(if s { kv_heads } else { g }))
        .collect::<Result<_, _>>()
        .map_err(|_| HfError::Config("key/value head count too large".into()))?;
    Ok(Some(MetaValue::Array(MetaArray::I32(per_layer))))
}

/// Gemma 3n's keys: per-layer FFN widths, the layer pattern, KV sharing,
/// per-layer inputs, AltUp and the activation sparsity's normal quantiles,
/// as llama.cpp's converter writes them.
fn write_gemma3n_hparams(
    w: &mut GgufWriter,
    cfg: &TextConfig,
    n_layers: u64,
    head_dim: u64,
) -> Result<(), HfError> {
    let k = |s: &str| format!("gemma3n.{s}");
    w.set(k("feed_forward_length"), gemma3n_ffn(cfg, n_layers)?);
    w.set(k("attention.key_length"), u32_of(head_dim, "head_dim")?);
    w.set(k("attention.value_length"), u32_of(head_dim, "head_dim")?);
    w.set(
        k("rope.freq_base"),
        MetaValue::F32(gemma3n_rope_theta(cfg, "full_attention", "rope_theta", 1e6) as f32),
    );
    w.set(
        k("rope.freq_base_swa"),
        MetaValue::F32(
            gemma3n_rope_theta(cfg, "sliding_attention", "rope_local_base_freq", 1e4) as f32,
        ),
    );
    let sliding = cfg.sliding_layers(n_layers)?;
    w.set(
        k("attention.sliding_window_pattern"),
        MetaValue::Array(MetaArray::Bool(sliding)),
    );
    let shared = cfg.opt_uint("num_kv_shared_layers").unwrap_or(0);
    w.set(
        k("attention.shared_kv_layers"),
        u32_of(shared.min(n_layers), "num_kv_shared_layers")?,
    );
    let ple = cfg.uint("hidden_size_per_layer_input")?;
    w.set(
        k("embedding_length_per_layer_input"),
        u32_of(ple, "hidden_size_per_layer_input")?,
    );
    w.set(
        k("altup.num_inputs"),
        u32_of(
            cfg.opt_uint("altup_num_inputs").unwrap_or(4),
            "altup_num_inputs",
        )?,
    );
    w.set(
        k("altup.active_idx"),
        u32_of(
            cfg.opt_uint("altup_active_idx").unwrap_or(0),
            "altup_active_idx",
        )?,
    );
    w.set(
        k("activation_sparsity_scale"),
        MetaValue::Array(MetaArray::F32(gemma3n_sparsity_scales(cfg, n_layers)?)),
    );
    Ok(())
}

/// A Gemma 3n per-layer integer: `key` as an array of one value per layer,
/// or as one value for every layer.
fn per_layer_uints(cfg: &TextConfig, key: &str, n_layers: u64) -> Result<Vec<u64>, HfError> {
    match cfg.v.get(key) {
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| x.as_u64())
            .collect::<Option<Vec<_>>>()
            .filter(|v| v.len() as u64 == n_layers)
            .ok_or_else(|| HfError::Config(format!("`{key}` needs {n_layers} integers"))),
        Some(v) => v
            .as_u64()
            .map(|x| vec![x; n_layers as usize])
            .ok_or_else(|| HfError::Config(format!("`{key}` is not an integer"))),
        None => Err(HfError::Config(format!("`{key}` is missing"))),
    }
}

/// Gemma 3n's FFN width of each layer.
fn gemma3n_ffn(cfg: &TextConfig, n_layers: u64) -> Result<MetaValue, HfError> {
    let ffn = per_layer_uints(cfg, "intermediate_size", n_layers)?
        .into_iter()
        .map(|f| {
            i32::try_from(f).map_err(|_| HfError::Config("intermediate_size is too large".into()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(MetaValue::Array(MetaArray::I32(ffn)))
}

/// Gemma 3n's RoPE base for the `kind` layers: from `rope_parameters`, else
/// the flat key `flat`, else `default`.
fn gemma3n_rope_theta(cfg: &TextConfig, kind: &str, flat: &str, default: f64) -> f64 {
    cfg.rope(kind, "rope_theta")
        .and_then(Value::as_f64)
        .or_else(|| cfg.v.get(flat).and_then(Value::as_f64))
        .unwrap_or(default)
}

/// Gemma 3n's activation sparsity per layer as the normal quantile of its
/// target (`-inf`, no sparsity, where the config gives no pattern).
fn gemma3n_sparsity_scales(cfg: &TextConfig, n_layers: u64) -> Result<Vec<f32>, HfError> {
    match cfg.v.get("activation_sparsity_pattern") {
        Some(Value::Array(a)) if a.len() as u64 == n_layers => a
            .iter()
            .map(|x| {
                x.as_f64()
                    .filter(|p| (0.0..1.0).contains(p))
                    .map(|p| normal_quantile(p) as f32)
                    .ok_or_else(|| {
                        HfError::Config("activation_sparsity_pattern needs values in [0, 1)".into())
                    })
            })
            .collect(),
        None | Some(Value::Null) => Ok(vec![f32::NEG_INFINITY; n_layers as usize]),
        Some(_) => Err(HfError::Config(format!(
            "`activation_sparsity_pattern` needs {n_layers} numbers"
        ))),
    }
}

/// The standard normal's quantile `Φ⁻¹(p)` (`-inf` at 0): Acklam's rational
/// approximation, within 1.2e-9 relative, far below the f32 the file keeps
/// (transformers computes it in f32 through `erfinv`).
pub(crate) fn normal_quantile(p: f64) -> f64 {
    if p <= 0.0 {
        return f64::NEG_INFINITY;
    }
    if p >= 1.0 {
        return f64::INFINITY;
    }
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < 0.024_25 {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - 0.024_25 {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

/// Gemma 4's global-layer head size: `per_layer_config` of a full-attention
/// layer, else `global_head_dim`.
pub(crate) fn gemma4_global_head_dim(cfg: &TextConfig, sliding: &[bool]) -> Option<u64> {
    let first_global = sliding.iter().position(|s| !s)?;
    cfg.v
        .get("per_layer_config")
        .and_then(|p| p.get(first_global.to_string()))
        .and_then(|l| l.get("head_dim"))
        .and_then(Value::as_u64)
        .or_else(|| cfg.opt_uint("global_head_dim"))
}

#[cfg(test)]
mod tests;
