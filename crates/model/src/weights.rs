//! Binding GGUF tensors to the roles the forward pass gives them.

use crate::{Config, ModelError};
use gguf::{GgmlType, GgufFile, TensorInfo};

/// A weight matrix left in the mapped file: `rows` outputs of `cols` inputs.
#[derive(Debug, Clone)]
pub struct Linear {
    info: TensorInfo,
    /// Output features.
    pub rows: usize,
    /// Input features.
    pub cols: usize,
}

impl Linear {
    fn bind(file: &GgufFile, name: &str, cols: usize, rows: usize) -> Result<Self, ModelError> {
        let info = tensor(file, name)?;
        let expected = vec![cols as u64, rows as u64];
        if info.dims != expected {
            return Err(ModelError::TensorShape {
                name: name.to_string(),
                found: info.dims.clone(),
                expected,
            });
        }
        if !quant::is_supported(info.ty) {
            return Err(ModelError::UnsupportedTensorType {
                name: name.to_string(),
                ty: info.ty,
            });
        }
        Ok(Self { info, rows, cols })
    }

    /// The element type.
    pub fn ty(&self) -> GgmlType {
        self.info.ty
    }

    /// A kernel view over the file's bytes.
    pub fn matrix<'a>(&self, file: &'a GgufFile) -> Result<quant::Matrix<'a>, ModelError> {
        Ok(quant::Matrix::new(
            self.info.ty,
            self.rows,
            self.cols,
            file.tensor_data(&self.info),
        )?)
    }
}

fn tensor(file: &GgufFile, name: &str) -> Result<TensorInfo, ModelError> {
    file.tensor(name)
        .cloned()
        .ok_or_else(|| ModelError::MissingTensor(name.to_string()))
}

/// A 1-D tensor read into f32 once at load (norm weights are tiny).
fn vector(file: &GgufFile, name: &str, len: usize) -> Result<Vec<f32>, ModelError> {
    let info = tensor(file, name)?;
    if info.dims != [len as u64] {
        return Err(ModelError::TensorShape {
            name: name.to_string(),
            found: info.dims,
            expected: vec![len as u64],
        });
    }
    if !quant::is_supported(info.ty) {
        return Err(ModelError::UnsupportedTensorType {
            name: name.to_string(),
            ty: info.ty,
        });
    }
    let mut out = vec![0.0; len];
    quant::dequantize(info.ty, file.tensor_data(&info), &mut out)?;
    Ok(out)
}

/// The weights of one decoder layer.
#[derive(Debug, Clone)]
pub struct LayerWeights {
    /// Norm before attention.
    pub attn_norm: Vec<f32>,
    /// Query projection.
    pub q: Linear,
    /// Key projection.
    pub k: Linear,
    /// Value projection.
    pub v: Linear,
    /// Attention output projection.
    pub o: Linear,
    /// Per-head query norm.
    pub q_norm: Vec<f32>,
    /// Per-head key norm.
    pub k_norm: Vec<f32>,
    /// Norm after attention, before the residual add.
    pub post_attn_norm: Vec<f32>,
    /// Norm before the FFN.
    pub ffn_norm: Vec<f32>,
    /// FFN gate projection.
    pub gate: Linear,
    /// FFN up projection.
    pub up: Linear,
    /// FFN down projection.
    pub down: Linear,
    /// Norm after the FFN, before the residual add.
    pub post_ffn_norm: Vec<f32>,
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
    /// Decoder layers.
    pub layers: Vec<LayerWeights>,
}

impl Weights {
    /// Find, shape-check and type-check every tensor the configuration needs.
    pub fn bind(file: &GgufFile, cfg: &Config) -> Result<Self, ModelError> {
        let h = cfg.hidden;
        let q_dim = cfg.n_heads * cfg.head_dim;
        let k_dim = cfg.n_kv_heads * cfg.head_dim;
        let v_dim = cfg.n_kv_heads * cfg.value_dim;
        let token_embd = Linear::bind(file, "token_embd.weight", h, cfg.vocab)?;
        let output = if file.tensor("output.weight").is_some() {
            Linear::bind(file, "output.weight", h, cfg.vocab)?
        } else {
            token_embd.clone()
        };
        let layers = (0..cfg.n_layers)
            .map(|i| {
                let n = |s: &str| format!("blk.{i}.{s}.weight");
                Ok(LayerWeights {
                    attn_norm: vector(file, &n("attn_norm"), h)?,
                    q: Linear::bind(file, &n("attn_q"), h, q_dim)?,
                    k: Linear::bind(file, &n("attn_k"), h, k_dim)?,
                    v: Linear::bind(file, &n("attn_v"), h, v_dim)?,
                    o: Linear::bind(file, &n("attn_output"), cfg.n_heads * cfg.value_dim, h)?,
                    q_norm: vector(file, &n("attn_q_norm"), cfg.head_dim)?,
                    k_norm: vector(file, &n("attn_k_norm"), cfg.head_dim)?,
                    post_attn_norm: vector(file, &n("post_attention_norm"), h)?,
                    ffn_norm: vector(file, &n("ffn_norm"), h)?,
                    gate: Linear::bind(file, &n("ffn_gate"), h, cfg.ffn_dim)?,
                    up: Linear::bind(file, &n("ffn_up"), h, cfg.ffn_dim)?,
                    down: Linear::bind(file, &n("ffn_down"), cfg.ffn_dim, h)?,
                    post_ffn_norm: vector(file, &n("post_ffw_norm"), h)?,
                })
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        Ok(Self {
            token_embd,
            output_norm: vector(file, "output_norm.weight", h)?,
            output,
            layers,
        })
    }
}
