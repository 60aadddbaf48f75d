//! Architecture hyper-parameters, read from GGUF metadata and validated once.

use crate::ModelError;
use gguf::GgufFile;

/// The architectures this crate runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    /// Gemma 3 text models (270M to 27B).
    Gemma3,
}

impl Arch {
    /// The `general.architecture` string.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Gemma3 => "gemma3",
        }
    }

    /// Every supported architecture name, for error messages.
    pub const SUPPORTED: &'static [&'static str] = &["gemma3"];

    fn from_name(name: &str) -> Option<Self> {
        match name {
            "gemma3" => Some(Arch::Gemma3),
            _ => None,
        }
    }
}

/// How one decoder layer attends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LayerKind {
    /// `Some(w)`: a query sees only the last `w` positions (itself included).
    pub window: Option<usize>,
    /// RoPE base frequency for this layer.
    pub rope_base: f32,
    /// RoPE position scale (1 / linear scaling factor).
    pub rope_scale: f32,
}

/// The single source of truth for a model's shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Architecture.
    pub arch: Arch,
    /// Residual stream width.
    pub hidden: usize,
    /// Number of decoder layers.
    pub n_layers: usize,
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads (grouped-query attention).
    pub n_kv_heads: usize,
    /// Dimension of each query/key head.
    pub head_dim: usize,
    /// Dimension of each value head.
    pub value_dim: usize,
    /// FFN inner width.
    pub ffn_dim: usize,
    /// Vocabulary size (rows of the embedding table).
    pub vocab: usize,
    /// RMSNorm epsilon.
    pub norm_eps: f32,
    /// Training context length.
    pub context_length: usize,
    /// Multiplier applied to queries before the dot product with keys.
    pub attn_scale: f32,
    /// Soft-cap applied to attention scores (Gemma 2).
    pub attn_softcap: Option<f32>,
    /// Soft-cap applied to the final logits (Gemma 2).
    pub final_softcap: Option<f32>,
    /// Per-layer attention kind.
    pub layers: Vec<LayerKind>,
}

/// Gemma 3 GGUFs do not store the local/global pattern; llama.cpp assumes five
/// sliding-window layers then one global layer, and so must we.
const GEMMA3_SWA_PATTERN: usize = 6;
/// Gemma 3's local layers always use this RoPE base unless the file says otherwise.
const GEMMA3_LOCAL_ROPE_BASE: f32 = 10_000.0;

impl Config {
    /// Read and validate the configuration of a GGUF model.
    pub fn from_gguf(file: &GgufFile) -> Result<Self, ModelError> {
        let arch_name = file
            .architecture()
            .ok_or_else(|| ModelError::Metadata("general.architecture is missing".into()))?;
        let arch = Arch::from_name(arch_name).ok_or_else(|| ModelError::UnknownArchitecture {
            name: arch_name.to_string(),
        })?;
        let key = |k: &str| format!("{arch_name}.{k}");
        let uint = |k: &str| -> Result<usize, ModelError> {
            let full = key(k);
            file.get_u64(&full)
                .and_then(|v| usize::try_from(v).ok())
                .ok_or_else(|| {
                    ModelError::Metadata(format!("`{full}` is missing or not an integer"))
                })
        };
        let float = |k: &str| -> Option<f32> { file.get_f32(&key(k)) };

        let hidden = uint("embedding_length")?;
        let n_layers = uint("block_count")?;
        let n_heads = uint("attention.head_count")?;
        let n_kv_heads = uint("attention.head_count_kv").unwrap_or(n_heads);
        let head_dim =
            uint("attention.key_length").unwrap_or(hidden.checked_div(n_heads).unwrap_or(0));
        let value_dim = uint("attention.value_length").unwrap_or(head_dim);
        let ffn_dim = uint("feed_forward_length")?;
        let context_length = uint("context_length")?;
        let norm_eps = float("attention.layer_norm_rms_epsilon").unwrap_or(1e-6);
        let vocab = file
            .tensor("token_embd.weight")
            .and_then(|t| t.dims.get(1).copied())
            .and_then(|v| usize::try_from(v).ok())
            .ok_or_else(|| ModelError::MissingTensor("token_embd.weight".into()))?;

        let layers = match arch {
            Arch::Gemma3 => {
                let window = uint("attention.sliding_window")?;
                let global_base = float("rope.freq_base").unwrap_or(1_000_000.0);
                let local_base = float("rope.freq_base_swa").unwrap_or(GEMMA3_LOCAL_ROPE_BASE);
                let global_scale = match file.get_str(&key("rope.scaling.type")) {
                    Some("linear") => float("rope.scaling.factor")
                        .filter(|f| *f > 0.0)
                        .map_or(1.0, |f| 1.0 / f),
                    _ => 1.0,
                };
                (0..n_layers)
                    .map(|i| {
                        if (i + 1) % GEMMA3_SWA_PATTERN == 0 {
                            LayerKind {
                                window: None,
                                rope_base: global_base,
                                rope_scale: global_scale,
                            }
                        } else {
                            LayerKind {
                                window: Some(window),
                                rope_base: local_base,
                                rope_scale: 1.0,
                            }
                        }
                    })
                    .collect()
            }
        };
        // Gemma 3 27B was trained with query_pre_attn_scalar = hidden / heads
        // rather than head_dim; llama.cpp keys that on the model size, and we
        // follow the file's `attention.scale` when present.
        let attn_scale = float("attention.scale").unwrap_or(1.0 / (head_dim as f32).sqrt());

        let cfg = Config {
            arch,
            hidden,
            n_layers,
            n_heads,
            n_kv_heads,
            head_dim,
            value_dim,
            ffn_dim,
            vocab,
            norm_eps,
            context_length,
            attn_scale,
            attn_softcap: float("attn_logit_softcapping").filter(|c| *c > 0.0),
            final_softcap: float("final_logit_softcapping").filter(|c| *c > 0.0),
            layers,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    fn validate(&self) -> Result<(), ModelError> {
        let bad = |m: String| Err(ModelError::Metadata(m));
        if self.hidden == 0 || self.n_layers == 0 || self.n_heads == 0 || self.n_kv_heads == 0 {
            return bad(format!(
                "zero-sized model: hidden {}, layers {}, heads {}, kv heads {}",
                self.hidden, self.n_layers, self.n_heads, self.n_kv_heads
            ));
        }
        if !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return bad(format!(
                "{} heads are not a multiple of {} kv heads",
                self.n_heads, self.n_kv_heads
            ));
        }
        if self.head_dim == 0 || !self.head_dim.is_multiple_of(2) || self.value_dim == 0 {
            return bad(format!(
                "head dims {}/{} must be even and non-zero",
                self.head_dim, self.value_dim
            ));
        }
        if self.layers.iter().any(|l| l.window == Some(0)) {
            return bad("sliding window of 0".into());
        }
        if self.vocab == 0 || self.ffn_dim == 0 || self.context_length == 0 {
            return bad("vocabulary, FFN width and context length must be non-zero".into());
        }
        Ok(())
    }
}
