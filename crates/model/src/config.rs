//! Architecture hyper-parameters, read from GGUF metadata and validated once.
//!
//! Every Gemma generation runs through one forward pass; what differs between
//! them is data: which layers slide, each layer's head size, RoPE and FFN
//! width, which norms exist, soft-caps, and whether layers share KV or take
//! per-layer embeddings. This module turns a file's metadata into that data.

use crate::ModelError;
use gguf::GgufFile;

/// The architectures this crate runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    /// Gemma 1 and CodeGemma (2B, 7B): every layer global, no soft-caps,
    /// no norms after attention and the MLP.
    Gemma,
    /// Gemma 2 (2B, 9B, 27B): soft-capped attention, alternating local/global.
    Gemma2,
    /// Gemma 3 text models (270M to 27B): QK-norm, 5 local : 1 global.
    Gemma3,
    /// Gemma 3n text models (E2B, E4B): AltUp streams, LAuReL, per-layer
    /// embeddings, activation sparsity, V-norm, KV sharing.
    Gemma3n,
    /// Gemma 4 text models (E2B, E4B, 31B, 26B-A4B): per-layer embeddings,
    /// V-norm, KV sharing, proportional RoPE on global layers.
    Gemma4,
    /// EmbeddingGemma: a Gemma 3 text model that attends both ways over
    /// the whole text (sliding layers within half their window either
    /// side), pooled into one vector per text.
    GemmaEmbedding,
}

impl Arch {
    /// The `general.architecture` string.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Gemma => "gemma",
            Arch::Gemma2 => "gemma2",
            Arch::Gemma3 => "gemma3",
            Arch::Gemma3n => "gemma3n",
            Arch::Gemma4 => "gemma4",
            Arch::GemmaEmbedding => "gemma-embedding",
        }
    }

    /// Every supported architecture name, for error messages.
    pub const SUPPORTED: &'static [&'static str] = &[
        "gemma",
        "gemma2",
        "gemma3",
        "gemma3n",
        "gemma4",
        "gemma-embedding",
    ];

    /// The architecture named `name` in `general.architecture`.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "gemma" => Some(Arch::Gemma),
            "gemma2" => Some(Arch::Gemma2),
            "gemma3" => Some(Arch::Gemma3),
            "gemma3n" => Some(Arch::Gemma3n),
            "gemma4" => Some(Arch::Gemma4),
            "gemma-embedding" => Some(Arch::GemmaEmbedding),
            _ => None,
        }
    }
}

/// How one decoder layer attends, and how wide it is.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerKind {
    /// `Some(w)`: a query sees only the last `w` positions (itself included).
    pub window: Option<usize>,
    /// RoPE base frequency for this layer.
    pub rope_base: f32,
    /// RoPE position scale (1 / linear scaling factor).
    pub rope_scale: f32,
    /// Dimensions RoPE rotates (the head's leading `rope_dims`).
    pub rope_dims: usize,
    /// Dimension of each query/key head.
    pub head_dim: usize,
    /// Dimension of each value head.
    pub value_dim: usize,
    /// Key/value heads (grouped-query attention).
    pub n_kv_heads: usize,
    /// FFN inner width.
    pub ffn_dim: usize,
    /// `Some(j)`: this layer computes no keys or values and attends over
    /// layer `j`'s (Gemma 4's KV sharing).
    pub kv_source: Option<usize>,
    /// `Some(m)`: the FFN gate keeps only what exceeds its row's mean plus
    /// `m` standard deviations (Gemma 3n's activation sparsity; `m` is the
    /// normal quantile of the target sparsity).
    pub sparsity: Option<f32>,
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
    /// Largest key/value head count over layers (buffer sizing).
    pub n_kv_heads: usize,
    /// Largest query/key head dimension over layers (buffer sizing).
    pub head_dim: usize,
    /// Largest value head dimension over layers (buffer sizing).
    pub value_dim: usize,
    /// Largest FFN inner width over layers (buffer sizing).
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
    /// Soft-cap applied to the final logits (Gemma 2, Gemma 4).
    pub final_softcap: Option<f32>,
    /// Queries and keys are RMS-normed per head (Gemma 3, Gemma 4).
    pub qk_norm: bool,
    /// Values are RMS-normed per head without a weight (Gemma 4).
    pub v_norm: bool,
    /// Width of each layer's per-layer embedding; 0 when the model has none.
    pub per_layer_dim: usize,
    /// Experts in MoE layers (0: dense model).
    pub n_experts: usize,
    /// Experts each token is routed to.
    pub n_experts_used: usize,
    /// Inner width of each expert.
    pub expert_ffn_dim: usize,
    /// Gemma 3n's AltUp: parallel copies of the residual stream (0 when the
    /// model has none; the layers update stream 0 and predict the others).
    pub altup_streams: usize,
    /// Gemma 3n's LAuReL rank (0 when the model has none).
    pub laurel_rank: usize,
    /// Whether a token sees only the positions before it (every generative
    /// model); an embedding model's tokens see the whole text.
    pub causal: bool,
    /// How an embedding model pools its last hidden states into one vector
    /// per text; `None` for generative models.
    pub pooling: Option<Pooling>,
    /// Per-layer attention kind.
    pub layers: Vec<LayerKind>,
}

/// How an embedding model turns a text's last hidden states into one
/// vector (llama.cpp's `pooling_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    /// The mean over every token of the text (`pooling_type` 1).
    Mean,
}

/// Gemma 3 GGUFs do not store the local/global pattern; llama.cpp assumes five
/// sliding-window layers then one global layer, and so must we.
const GEMMA3_SWA_PATTERN: usize = 6;
/// Gemma 3's local layers always use this RoPE base unless the file says otherwise.
const GEMMA3_LOCAL_ROPE_BASE: f32 = 10_000.0;
/// Gemma 2's defaults when a file predates the soft-cap keys.
const GEMMA2_ATTN_SOFTCAP: f32 = 50.0;
const GEMMA2_FINAL_SOFTCAP: f32 = 30.0;
const GEMMA2_WINDOW: usize = 4096;

impl Config {
    /// Read and validate the configuration of a GGUF model.
    pub fn from_gguf(file: &GgufFile) -> Result<Self, ModelError> {
        let arch_name = file
            .architecture()
            .ok_or_else(|| ModelError::Metadata("general.architecture is missing".into()))?;
        let arch = Arch::from_name(arch_name).ok_or_else(|| ModelError::UnknownArchitecture {
            name: arch_name.to_string(),
        })?;
        let keys = Keys {
            file,
            arch: arch_name,
        };
        let dims = Dims::read(&keys)?;
        let vocab = file
            .tensor("token_embd.weight")
            .and_then(|t| t.dims.get(1).copied())
            .and_then(|v| usize::try_from(v).ok())
            .ok_or_else(|| ModelError::MissingTensor("token_embd.weight".into()))?;
        let mut scaling = Scaling {
            attn_softcap: keys.float("attn_logit_softcapping").filter(|c| *c > 0.0),
            final_softcap: keys.float("final_logit_softcapping").filter(|c| *c > 0.0),
            attn_scale: keys.float("attention.scale"),
        };
        let (layers, qk_norm, v_norm, per_layer_dim) =
            arch_layers(arch, &keys, &dims, &mut scaling)?;
        let (altup_streams, laurel_rank) = altup_of(arch, &keys)?;
        let attn_scale = match arch {
            Arch::Gemma4 | Arch::Gemma3n => scaling.attn_scale.unwrap_or(1.0),
            _ => scaling
                .attn_scale
                .unwrap_or(1.0 / (dims.head_dim as f32).sqrt()),
        };
        let max = |f: fn(&LayerKind) -> usize| layers.iter().map(f).max().unwrap_or(0);
        let cfg = Config {
            arch,
            hidden: dims.hidden,
            n_layers: dims.n_layers,
            n_heads: dims.n_heads,
            n_kv_heads: max(|l| l.n_kv_heads),
            head_dim: max(|l| l.head_dim),
            value_dim: max(|l| l.value_dim),
            ffn_dim: max(|l| l.ffn_dim),
            vocab,
            norm_eps: keys
                .float("attention.layer_norm_rms_epsilon")
                .unwrap_or(1e-6),
            context_length: keys.uint("context_length")?,
            attn_scale,
            attn_softcap: scaling.attn_softcap,
            final_softcap: scaling.final_softcap,
            qk_norm,
            v_norm,
            per_layer_dim,
            n_experts: keys.opt_uint("expert_count").unwrap_or(0),
            n_experts_used: keys.opt_uint("expert_used_count").unwrap_or(0),
            expert_ffn_dim: keys.opt_uint("expert_feed_forward_length").unwrap_or(0),
            altup_streams,
            laurel_rank,
            causal: arch != Arch::GemmaEmbedding,
            pooling: match arch {
                Arch::GemmaEmbedding => Some(pooling_of(keys.opt_uint("pooling_type"))?),
                _ => None,
            },
            layers,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    fn validate(&self) -> Result<(), ModelError> {
        let bad = |m: String| Err(ModelError::Metadata(m));
        if self.hidden == 0 || self.n_layers == 0 || self.n_heads == 0 {
            return bad(format!(
                "zero-sized model: hidden {}, layers {}, heads {}",
                self.hidden, self.n_layers, self.n_heads
            ));
        }
        for (i, l) in self.layers.iter().enumerate() {
            if l.n_kv_heads == 0 || !self.n_heads.is_multiple_of(l.n_kv_heads) {
                return bad(format!(
                    "layer {i}: {} heads are not a multiple of {} kv heads",
                    self.n_heads, l.n_kv_heads
                ));
            }
            if l.head_dim == 0 || !l.head_dim.is_multiple_of(2) || l.value_dim == 0 {
                return bad(format!(
                    "layer {i}: head dims {}/{} must be even and non-zero",
                    l.head_dim, l.value_dim
                ));
            }
            if l.rope_dims > l.head_dim || !l.rope_dims.is_multiple_of(2) {
                return bad(format!(
                    "layer {i}: RoPE over {} dims of a {}-dim head",
                    l.rope_dims, l.head_dim
                ));
            }
            if l.window == Some(0) {
                return bad(format!("layer {i}: sliding window of 0"));
            }
            if l.ffn_dim == 0 {
                return bad(format!("layer {i}: FFN width 0"));
            }
            if let Some(j) = l.kv_source {
                let src = &self.layers[j];
                if j >= i
                    || src.kv_source.is_some()
                    || src.head_dim != l.head_dim
                    || src.value_dim != l.value_dim
                    || src.n_kv_heads != l.n_kv_heads
                    || src.window != l.window
                {
                    return bad(format!("layer {i} cannot share the KV of layer {j}"));
                }
            }
        }
        if self.vocab == 0 || self.context_length == 0 {
            return bad("vocabulary and context length must be non-zero".into());
        }
        Ok(())
    }

    /// Whether some later layer attends over layer `i`'s keys and values.
    pub fn is_kv_source(&self, i: usize) -> bool {
        self.layers.iter().any(|l| l.kv_source == Some(i))
    }
}

/// The pooling llama.cpp's `pooling_type` names; EmbeddingGemma's mean when
/// the file does not say.
fn pooling_of(value: Option<usize>) -> Result<Pooling, ModelError> {
    match value {
        None | Some(1) => Ok(Pooling::Mean),
        Some(other) => Err(ModelError::Metadata(format!(
            "pooling_type {other} is not supported (1, mean, is)"
        ))),
    }
}

/// The architecture's keys of a GGUF file (`{arch}.{key}`).
struct Keys<'f> {
    file: &'f GgufFile,
    arch: &'f str,
}

impl Keys<'_> {
    fn name(&self, k: &str) -> String {
        format!("{}.{k}", self.arch)
    }

    fn opt_uint(&self, k: &str) -> Option<usize> {
        self.file
            .get_u64(&self.name(k))
            .and_then(|v| usize::try_from(v).ok())
    }

    fn uint(&self, k: &str) -> Result<usize, ModelError> {
        self.opt_uint(k).ok_or_else(|| {
            ModelError::Metadata(format!("`{}` is missing or not an integer", self.name(k)))
        })
    }

    fn float(&self, k: &str) -> Option<f32> {
        self.file.get_f32(&self.name(k))
    }
}

/// The sizes every architecture reads the same way.
struct Dims {
    hidden: usize,
    n_layers: usize,
    n_heads: usize,
    kv_heads: Vec<usize>,
    ffn: Vec<usize>,
    head_dim: usize,
    value_dim: usize,
    global_base: Option<f32>,
    local_base: Option<f32>,
}

impl Dims {
    fn read(keys: &Keys<'_>) -> Result<Self, ModelError> {
        let hidden = keys.uint("embedding_length")?;
        let n_layers = keys.uint("block_count")?;
        if n_layers > 4096 {
            return Err(ModelError::Metadata(format!(
                "{n_layers} layers is implausible"
            )));
        }
        let n_heads = keys.uint("attention.head_count")?;
        let kv_heads = per_layer_uint(keys.file, &keys.name("attention.head_count_kv"), n_layers)?
            .unwrap_or_else(|| vec![n_heads; n_layers]);
        let ffn = per_layer_uint(keys.file, &keys.name("feed_forward_length"), n_layers)?
            .ok_or_else(|| {
                ModelError::Metadata(format!("`{}` is missing", keys.name("feed_forward_length")))
            })?;
        let head_dim = keys
            .opt_uint("attention.key_length")
            .unwrap_or(hidden.checked_div(n_heads).unwrap_or(0));
        Ok(Self {
            hidden,
            n_layers,
            n_heads,
            kv_heads,
            ffn,
            head_dim,
            value_dim: keys.opt_uint("attention.value_length").unwrap_or(head_dim),
            global_base: keys.float("rope.freq_base"),
            local_base: keys.float("rope.freq_base_swa"),
        })
    }

    /// Layer `i` with one head size throughout (Gemma 2 and 3).
    fn plain(&self, i: usize, window: Option<usize>, base: f32, scale: f32) -> LayerKind {
        LayerKind {
            window,
            rope_base: base,
            rope_scale: scale,
            rope_dims: self.head_dim,
            head_dim: self.head_dim,
            value_dim: self.value_dim,
            n_kv_heads: self.kv_heads[i],
            ffn_dim: self.ffn[i],
            kv_source: None,
            sparsity: None,
        }
    }
}

/// Soft-caps and the query scale: the file's, or the architecture's
/// defaults where a file predates the keys.
struct Scaling {
    attn_softcap: Option<f32>,
    final_softcap: Option<f32>,
    attn_scale: Option<f32>,
}

/// The layers of `arch`, whether it norms queries and keys, and values,
/// and its per-layer input width.
fn arch_layers(
    arch: Arch,
    keys: &Keys<'_>,
    dims: &Dims,
    scaling: &mut Scaling,
) -> Result<(Vec<LayerKind>, bool, bool, usize), ModelError> {
    let (file, name, n) = (keys.file, keys.arch, dims.n_layers);
    Ok(match arch {
        Arch::Gemma => (gemma_layers(dims), false, false, 0),
        Arch::Gemma2 => (gemma2_layers(keys, dims, scaling), false, false, 0),
        Arch::Gemma3 | Arch::GemmaEmbedding => {
            (gemma3_layers(arch, keys, dims, scaling)?, true, false, 0)
        }
        Arch::Gemma4 => (
            gemma4_layers(file, name, n, &dims.kv_heads, &dims.ffn)?,
            true,
            true,
            keys.opt_uint("embedding_length_per_layer_input")
                .unwrap_or(0),
        ),
        Arch::Gemma3n => {
            let mut layers = gemma4_layers(file, name, n, &dims.kv_heads, &dims.ffn)?;
            for (l, m) in layers.iter_mut().zip(gemma3n_sparsity(file, n)?) {
                l.sparsity = m;
            }
            (
                layers,
                true,
                true,
                keys.uint("embedding_length_per_layer_input")?,
            )
        }
    })
}

/// Gemma 1: every layer sees everything; one RoPE base.
fn gemma_layers(dims: &Dims) -> Vec<LayerKind> {
    let base = dims.global_base.unwrap_or(10_000.0);
    (0..dims.n_layers)
        .map(|i| dims.plain(i, None, base, 1.0))
        .collect()
}

/// Gemma 2: even layers slide, odd layers see everything; one RoPE base.
fn gemma2_layers(keys: &Keys<'_>, dims: &Dims, scaling: &mut Scaling) -> Vec<LayerKind> {
    let window = keys
        .opt_uint("attention.sliding_window")
        .unwrap_or(GEMMA2_WINDOW);
    let base = dims.global_base.unwrap_or(10_000.0);
    scaling.attn_softcap = scaling.attn_softcap.or(Some(GEMMA2_ATTN_SOFTCAP));
    scaling.final_softcap = scaling.final_softcap.or(Some(GEMMA2_FINAL_SOFTCAP));
    // Gemma 2 27B scales queries by (hidden / heads)^-1/2, not
    // head_dim^-1/2 (query_pre_attn_scalar = 144); llama.cpp keys it on the
    // layer count and so do we.
    if dims.n_layers == 46 {
        let scale = 1.0 / ((dims.hidden / dims.n_heads) as f32).sqrt();
        scaling.attn_scale = scaling.attn_scale.or(Some(scale));
    }
    (0..dims.n_layers)
        .map(|i| {
            let w = (i % 2 == 0).then_some(window);
            let local = dims.local_base.filter(|_| w.is_some());
            dims.plain(i, w, local.unwrap_or(base), 1.0)
        })
        .collect()
}

/// Gemma 3 (and EmbeddingGemma): five sliding layers, then a global one
/// with its own RoPE base and scaling.
fn gemma3_layers(
    arch: Arch,
    keys: &Keys<'_>,
    dims: &Dims,
    scaling: &mut Scaling,
) -> Result<Vec<LayerKind>, ModelError> {
    let mut window = keys.uint("attention.sliding_window")?;
    if arch == Arch::GemmaEmbedding {
        // Both ways: positions within half the window either side
        // (transformers' `sliding_window // 2 + 1`, exclusive; llama.cpp's
        // symmetric mask), kept as the causal form's "the last `w`
        // positions" reach backwards.
        window = window / 2 + 1;
    }
    let global_base = dims.global_base.unwrap_or(1_000_000.0);
    let local_base = dims.local_base.unwrap_or(GEMMA3_LOCAL_ROPE_BASE);
    let global_scale = match keys.file.get_str(&keys.name("rope.scaling.type")) {
        Some("linear") => keys
            .float("rope.scaling.factor")
            .filter(|f| *f > 0.0)
            .map_or(1.0, |f| 1.0 / f),
        _ => 1.0,
    };
    // Gemma 3 27B: query_pre_attn_scalar = hidden / heads (168).
    if dims.n_layers == 62 {
        let scale = 1.0 / ((dims.hidden / dims.n_heads) as f32).sqrt();
        scaling.attn_scale = scaling.attn_scale.or(Some(scale));
    }
    Ok((0..dims.n_layers)
        .map(|i| {
            if (i + 1) % GEMMA3_SWA_PATTERN == 0 {
                dims.plain(i, None, global_base, global_scale)
            } else {
                dims.plain(i, Some(window), local_base, 1.0)
            }
        })
        .collect())
}

/// Gemma 3n's AltUp streams and LAuReL rank (none elsewhere), checked.
fn altup_of(arch: Arch, keys: &Keys<'_>) -> Result<(usize, usize), ModelError> {
    if arch != Arch::Gemma3n {
        return Ok((0, 0));
    }
    let altup_streams = keys.uint("altup.num_inputs")?;
    let laurel_rank = keys
        .file
        .tensor("blk.0.laurel_l.weight")
        .and_then(|t| t.dims.get(1).copied())
        .and_then(|r| usize::try_from(r).ok())
        .ok_or_else(|| ModelError::MissingTensor("blk.0.laurel_l.weight".into()))?;
    let active = keys.opt_uint("altup.active_idx");
    if !(2..=crate::altup::MAX_STREAMS).contains(&altup_streams) || active.unwrap_or(0) != 0 {
        return Err(ModelError::Metadata(format!(
            "AltUp with {altup_streams} streams and active stream {active:?} is not supported (2 to 16 streams, active 0)"
        )));
    }
    Ok((altup_streams, laurel_rank))
}

mod layers;

use layers::{gemma3n_sparsity, gemma4_layers, per_layer_uint};

#[cfg(test)]
mod tests;
