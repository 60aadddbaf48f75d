//! Binding GGUF tensors to the roles the forward pass gives them.

use crate::{Arch, Config, ModelError};
use gguf::{GgufFile, TensorInfo};
use nn::{Linear, Weight};

/// The matrix `name` of `rows` outputs by `cols` inputs, as a product
/// without bias.
pub(crate) fn bind(
    file: &GgufFile,
    name: &str,
    cols: usize,
    rows: usize,
) -> Result<Linear, ModelError> {
    let info = checked_tensor(file, name, &[cols as u64, rows as u64])?;
    Ok(Linear::new(Weight::new(info, rows, cols)?))
}

/// The `count` matrices of `rows` × `cols` stacked in the 3-D tensor
/// `name` (Gemma 3n's AltUp projections).
pub(crate) fn bind_stack(
    file: &GgufFile,
    name: &str,
    cols: usize,
    rows: usize,
    count: usize,
) -> Result<Vec<Linear>, ModelError> {
    let info = checked_tensor(file, name, &[cols as u64, rows as u64, count as u64])?;
    Ok(Weight::stack(&info, rows, cols, count)?
        .into_iter()
        .map(Linear::new)
        .collect())
}

/// The tensor `name`, required to have shape `dims` and a type the kernels
/// support.
pub(crate) fn checked_tensor(
    file: &GgufFile,
    name: &str,
    dims: &[u64],
) -> Result<TensorInfo, ModelError> {
    let info = file
        .tensor(name)
        .cloned()
        .ok_or_else(|| ModelError::MissingTensor(name.to_string()))?;
    if info.dims != dims {
        return Err(ModelError::TensorShape {
            name: name.to_string(),
            found: info.dims,
            expected: dims.to_vec(),
        });
    }
    if !quant::is_supported(info.ty) {
        return Err(ModelError::UnsupportedTensorType {
            name: name.to_string(),
            ty: info.ty,
        });
    }
    Ok(info)
}

/// A 1-D tensor read into f32 once at load (norm weights are tiny).
pub(crate) fn vector(file: &GgufFile, name: &str, len: usize) -> Result<Vec<f32>, ModelError> {
    let info = checked_tensor(file, name, &[len as u64])?;
    let mut out = vec![0.0; len];
    quant::dequantize(info.ty, file.tensor_data(&info), &mut out)?;
    Ok(out)
}

/// A small matrix (`rows` of `cols`) read into f32 once at load.
pub(crate) fn dense(
    file: &GgufFile,
    name: &str,
    cols: usize,
    rows: usize,
) -> Result<Vec<f32>, ModelError> {
    let info = checked_tensor(file, name, &[cols as u64, rows as u64])?;
    let mut out = vec![0.0; rows * cols];
    quant::dequantize(info.ty, file.tensor_data(&info), &mut out)?;
    Ok(out)
}

/// One Gemma 3n layer's AltUp: how it predicts every stream from all of
/// them before the layer, and corrects them from the active stream's
/// output after it. Both are steered by a router reading the active stream.
#[derive(Debug, Clone)]
pub struct AltUpLayer {
    /// Norm of the router's input.
    pub router_norm: Vec<f32>,
    /// Router: `streams` rows of `hidden`.
    pub router: Vec<f32>,
    /// Prediction coefficients: `streams²` rows of `streams`.
    pub predict: Vec<f32>,
    /// Correction coefficients: `streams` rows of `streams`.
    pub correct: Vec<f32>,
    /// Scale of the corrected active stream before the per-layer input gate.
    pub correct_scale: Vec<f32>,
}

/// LAuReL, Gemma 3n's learned low-rank residual beside attention:
/// `x + post_norm(right(left(x)))` of the attention block's normed input.
#[derive(Debug, Clone)]
pub struct Laurel {
    /// Hidden → rank.
    pub left: Linear,
    /// Rank → hidden.
    pub right: Linear,
    /// Norm of the low-rank path.
    pub post_norm: Vec<f32>,
}

/// Gemma 3n's model-level AltUp projections: the extra streams made from
/// the embeddings, and mapped back before the final norm.
#[derive(Debug, Clone)]
pub struct AltUpProjections {
    /// Embeddings → stream `i + 1`.
    pub embed: Vec<Linear>,
    /// Stream `i + 1` → residual stream, before the streams are averaged.
    pub unembed: Vec<Linear>,
}

/// The per-layer-embedding block of one Gemma 4 layer.
#[derive(Debug, Clone)]
pub struct PerLayerInput {
    /// Residual stream → per-layer width, before GELU.
    pub gate: Linear,
    /// Per-layer width → residual stream.
    pub proj: Linear,
    /// Norm on the projection before the residual add.
    pub post_norm: Vec<f32>,
}

/// A decoder layer's attention: the norms around it and its projections.
#[derive(Debug, Clone)]
pub struct Attention {
    /// Norm before attention.
    pub norm: Vec<f32>,
    /// Query projection.
    pub q: Linear,
    /// Key projection; `None` on layers that reuse another layer's KV.
    pub k: Option<Linear>,
    /// Value projection; `None` when values are the keys' projection
    /// (Gemma 4 global layers with k = v) or the layer reuses another's KV.
    pub v: Option<Linear>,
    /// Output projection.
    pub o: Linear,
    /// Per-head query norm (Gemma 3 and 4).
    pub q_norm: Option<Vec<f32>>,
    /// Per-head key norm (Gemma 3 and 4, layers computing keys).
    pub k_norm: Option<Vec<f32>>,
    /// Norm after attention, before the residual add (all but Gemma 1).
    pub post_norm: Option<Vec<f32>>,
    /// RoPE frequency divisors for this layer (Gemma 4's proportional RoPE).
    pub rope_freqs: Option<Vec<f32>>,
}

/// A decoder layer's gated MLP and the norms around it.
#[derive(Debug, Clone)]
pub struct Mlp {
    /// Norm before the MLP.
    pub norm: Vec<f32>,
    /// Gate projection.
    pub gate: Linear,
    /// Up projection.
    pub up: Linear,
    /// Down projection.
    pub down: Linear,
    /// Norm after the MLP, before the residual add (all but Gemma 1).
    pub post_norm: Option<Vec<f32>>,
}

/// One decoder layer: its parts, each owning its weights. Every layer has
/// attention and an MLP; the rest belong to some Gemma variants.
#[derive(Debug, Clone)]
pub struct DecoderLayer {
    /// Attention, with its norms.
    pub attention: Attention,
    /// The gated MLP, with its norms.
    pub mlp: Mlp,
    /// Mixture-of-experts block beside the MLP (Gemma 4 26B-A4B).
    pub moe: Option<crate::moe::MoeWeights>,
    /// Per-layer embedding block (Gemma 4, and Gemma 3n inside AltUp's
    /// correction).
    pub per_layer: Option<PerLayerInput>,
    /// AltUp prediction and correction (Gemma 3n).
    pub altup: Option<AltUpLayer>,
    /// Low-rank residual beside attention (Gemma 3n).
    pub laurel: Option<Laurel>,
    /// Scalar the whole residual stream is multiplied by after the layer.
    pub out_scale: Option<f32>,
}

/// Gemma 4's per-layer embedding tables.
#[derive(Debug, Clone)]
pub struct PerLayerEmbeddings {
    /// `vocab` rows of `n_layers * per_layer_dim`.
    pub token_embd: Linear,
    /// Residual stream → `n_layers * per_layer_dim`.
    pub model_proj: Linear,
    /// Norm on each layer's slice of the projection.
    pub proj_norm: Vec<f32>,
}

/// All weights of a model.
#[derive(Debug, Clone)]
pub struct Weights {
    /// Token embeddings, `vocab` rows of `hidden`.
    pub token_embd: Linear,
    /// Final norm.
    pub output_norm: Vec<f32>,
    /// Output head; the embeddings when tied.
    pub output: Linear,
    /// Per-layer embeddings (Gemma 4).
    pub per_layer: Option<PerLayerEmbeddings>,
    /// AltUp's stream projections (Gemma 3n).
    pub altup: Option<AltUpProjections>,
    /// Decoder layers.
    pub layers: Vec<DecoderLayer>,
    /// The dense projections of an embedding model.
    pub embedding: Option<crate::embed::EmbeddingHead>,
}

impl Weights {
    /// Find, shape-check and type-check every tensor the configuration needs.
    pub fn bind(file: &GgufFile, cfg: &Config) -> Result<Self, ModelError> {
        let h = cfg.hidden;
        let token_embd = bind(file, "token_embd.weight", h, cfg.vocab)?;
        let output = if file.tensor("output.weight").is_some() {
            bind(file, "output.weight", h, cfg.vocab)?
        } else {
            token_embd.clone()
        };
        let pd = cfg.per_layer_dim;
        let per_layer = if pd > 0 {
            let width = cfg.n_layers * pd;
            Some(PerLayerEmbeddings {
                token_embd: bind(file, "per_layer_token_embd.weight", width, cfg.vocab)?,
                model_proj: bind(file, "per_layer_model_proj.weight", h, width)?,
                proj_norm: vector(file, "per_layer_proj_norm.weight", pd)?,
            })
        } else {
            None
        };
        let layers = (0..cfg.layers.len())
            .map(|i| DecoderLayer::bind(file, cfg, i))
            .collect::<Result<Vec<_>, ModelError>>()?;
        let altup = if cfg.altup_streams > 0 {
            let extra = cfg.altup_streams - 1;
            Some(AltUpProjections {
                embed: bind_stack(file, "altup_proj.weight", h, h, extra)?,
                unembed: bind_stack(file, "altup_unembd_proj.weight", h, h, extra)?,
            })
        } else {
            None
        };
        Ok(Self {
            token_embd,
            output_norm: vector(file, "output_norm.weight", h)?,
            output,
            per_layer,
            altup,
            layers,
            embedding: crate::embed::EmbeddingHead::bind(file, cfg)?,
        })
    }
}

/// The vector `name` of `len` values where the file has it.
fn optional(file: &GgufFile, name: &str, len: usize) -> Result<Option<Vec<f32>>, ModelError> {
    if file.tensor(name).is_some() {
        vector(file, name, len).map(Some)
    } else {
        Ok(None)
    }
}

impl DecoderLayer {
    /// Layer `i`'s parts, as the configuration says the layer has them.
    fn bind(file: &GgufFile, cfg: &Config, i: usize) -> Result<Self, ModelError> {
        let (h, pd) = (cfg.hidden, cfg.per_layer_dim);
        let n = |s: &str| format!("blk.{i}.{s}.weight");
        let per_layer = if pd > 0 {
            Some(PerLayerInput {
                gate: bind(file, &n("inp_gate"), h, pd)?,
                proj: bind(file, &n("proj"), pd, h)?,
                post_norm: vector(file, &n("post_norm"), h)?,
            })
        } else {
            None
        };
        let (altup, laurel) = if cfg.altup_streams > 0 {
            let ns = cfg.altup_streams;
            let rank = cfg.laurel_rank;
            (
                Some(AltUpLayer {
                    router_norm: vector(file, &n("altup_router_norm"), h)?,
                    router: dense(file, &n("altup_router"), h, ns)?,
                    predict: dense(file, &n("altup_predict_coef"), ns, ns * ns)?,
                    correct: dense(file, &n("altup_correct_coef"), ns, ns)?,
                    correct_scale: vector(file, &n("altup_correct_scale"), h)?,
                }),
                Some(Laurel {
                    left: bind(file, &n("laurel_l"), h, rank)?,
                    right: bind(file, &n("laurel_r"), rank, h)?,
                    post_norm: vector(file, &n("laurel_post_norm"), h)?,
                }),
            )
        } else {
            (None, None)
        };
        Ok(DecoderLayer {
            attention: Attention::bind(file, cfg, i)?,
            mlp: Mlp::bind(file, cfg, i)?,
            per_layer,
            out_scale: optional(file, &n("layer_output_scale"), 1)?.map(|v| v[0]),
            moe: crate::moe::MoeWeights::bind(
                file,
                i,
                h,
                cfg.n_experts,
                cfg.n_experts_used,
                cfg.expert_ffn_dim,
            )?,
            altup,
            laurel,
        })
    }
}

impl Attention {
    /// Layer `i`'s attention weights: a layer that reuses another's KV has
    /// no key or value projection, and a Gemma 4 global layer may take its
    /// values from the keys' projection.
    fn bind(file: &GgufFile, cfg: &Config, i: usize) -> Result<Self, ModelError> {
        let (h, kind) = (cfg.hidden, &cfg.layers[i]);
        let n = |s: &str| format!("blk.{i}.{s}.weight");
        let hd = kind.head_dim;
        let q_dim = cfg.n_heads * hd;
        let k_dim = kind.n_kv_heads * hd;
        let v_dim = kind.n_kv_heads * kind.value_dim;
        let computes_kv = kind.kv_source.is_none();
        let k = computes_kv
            .then(|| bind(file, &n("attn_k"), h, k_dim))
            .transpose()?;
        let v = if computes_kv && (cfg.arch != Arch::Gemma4 || file.tensor(&n("attn_v")).is_some())
        {
            Some(bind(file, &n("attn_v"), h, v_dim)?)
        } else {
            None
        };
        if computes_kv && v.is_none() && kind.value_dim != hd {
            return Err(ModelError::MissingTensor(n("attn_v")));
        }
        // Gemma 4 stores one `rope_freqs` for all global layers.
        let rope_freqs = if cfg.arch == Arch::Gemma4 && kind.window.is_none() {
            match optional(file, &n("rope_freqs"), kind.rope_dims / 2)? {
                Some(f) => Some(f),
                None => optional(file, "rope_freqs.weight", kind.rope_dims / 2)?,
            }
        } else {
            None
        };
        Ok(Attention {
            norm: vector(file, &n("attn_norm"), h)?,
            q: bind(file, &n("attn_q"), h, q_dim)?,
            k,
            v,
            o: bind(file, &n("attn_output"), cfg.n_heads * kind.value_dim, h)?,
            q_norm: cfg
                .qk_norm
                .then(|| vector(file, &n("attn_q_norm"), hd))
                .transpose()?,
            k_norm: (cfg.qk_norm && computes_kv)
                .then(|| vector(file, &n("attn_k_norm"), hd))
                .transpose()?,
            post_norm: post_norm(file, cfg, &n("post_attention_norm"))?,
            rope_freqs,
        })
    }
}

impl Mlp {
    /// Layer `i`'s gated MLP.
    fn bind(file: &GgufFile, cfg: &Config, i: usize) -> Result<Self, ModelError> {
        let (h, ffn) = (cfg.hidden, cfg.layers[i].ffn_dim);
        let n = |s: &str| format!("blk.{i}.{s}.weight");
        Ok(Mlp {
            norm: vector(file, &n("ffn_norm"), h)?,
            gate: bind(file, &n("ffn_gate"), h, ffn)?,
            up: bind(file, &n("ffn_up"), h, ffn)?,
            down: bind(file, &n("ffn_down"), ffn, h)?,
            post_norm: post_norm(file, cfg, &n("post_ffw_norm"))?,
        })
    }
}

/// The norm `name` after a block, which every architecture but Gemma 1
/// has.
fn post_norm(file: &GgufFile, cfg: &Config, name: &str) -> Result<Option<Vec<f32>>, ModelError> {
    (cfg.arch != crate::Arch::Gemma)
        .then(|| vector(file, name, cfg.hidden))
        .transpose()
}
