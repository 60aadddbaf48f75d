//! Which type each tensor gets for a [`FileType`]: llama.cpp's
//! `llama_tensor_get_type` (src/llama-quant.cpp) for dense models without an
//! importance matrix or per-tensor overrides.
//!
//! The choice depends on order: attention-V and FFN-down counters advance as
//! tensors are visited, so tensors are visited in llama.cpp's order (by layer,
//! then by name; see [`llama_order`]).

use crate::FileType;
use gguf::{GgmlType, GgufFile};

/// A tensor as the planner sees it: name, ggml dimensions (innermost first) and
/// current type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorSpec {
    /// Tensor name, e.g. `blk.3.attn_v.weight`.
    pub name: String,
    /// Dimensions, innermost first.
    pub dims: Vec<u64>,
    /// The type the tensor has now.
    pub ty: GgmlType,
}

/// The model-level numbers the rules look at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelShape {
    /// `general.architecture` (only `falcon` changes a rule).
    pub arch: String,
    /// Transformer blocks (`{arch}.block_count`).
    pub n_layer: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads.
    pub n_head_kv: usize,
}

impl ModelShape {
    /// Reads the shape from a file's metadata; a missing block count is taken
    /// from the highest `blk.N.` tensor, missing head counts count as 1.
    pub fn from_gguf(file: &GgufFile) -> ModelShape {
        let arch = file.architecture().unwrap_or("").to_string();
        let get = |k: &str| file.get_u64(&format!("{arch}.{k}")).map(|v| v as usize);
        let from_names = file
            .tensors()
            .iter()
            .filter_map(|t| layer_of(&t.name))
            .max()
            .map_or(0, |l| l as usize + 1);
        let n_head = get("attention.head_count").unwrap_or(1);
        ModelShape {
            n_layer: get("block_count").unwrap_or(from_names),
            n_head,
            n_head_kv: get("attention.head_count_kv").unwrap_or(n_head),
            arch,
        }
    }

    /// Query heads per key/value head (`n_gqa`), 0 when there are no KV heads.
    fn n_gqa(&self) -> usize {
        self.n_head.checked_div(self.n_head_kv).unwrap_or(0)
    }
}

/// The layer of a `blk.N.` tensor name (sscanf's `blk.%d.`).
fn layer_of(name: &str) -> Option<i64> {
    let rest = name.strip_prefix("blk.")?;
    let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    if digits == 0 || rest.as_bytes().get(digits) != Some(&b'.') {
        return None;
    }
    rest[..digits].parse().ok()
}

/// llama.cpp's tensor order (its `weight_name_comparer`): tensors outside
/// blocks first, then block by block, names in byte order within each.
/// Returns the indices of `names` in that order.
pub fn llama_order<S: AsRef<str>>(names: &[S]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..names.len()).collect();
    idx.sort_by(|&a, &b| {
        let (a, b) = (names[a].as_ref(), names[b].as_ref());
        let (la, lb) = (layer_of(a).unwrap_or(-1), layer_of(b).unwrap_or(-1));
        la.cmp(&lb).then_with(|| a.cmp(b))
    });
    idx
}

/// Broad tensor roles, as llama.cpp's `tensor_get_category` assigns them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Category {
    TokenEmbd,
    AttnQ,
    AttnV,
    AttnK,
    AttnQkv,
    AttnKvB,
    AttnOutput,
    FfnUp,
    FfnGate,
    FfnDown,
    Output,
    Other,
}

fn category(name: &str) -> Category {
    use Category::*;
    if name == "output.weight" {
        return Output;
    }
    if name == "token_embd.weight" || name == "per_layer_token_embd.weight" {
        return TokenEmbd;
    }
    for (pat, cat) in [
        ("attn_qkv.weight", AttnQkv),
        ("attn_kv_b.weight", AttnKvB),
        ("attn_v.weight", AttnV),
        ("attn_k.weight", AttnK),
        ("attn_q.weight", AttnQ),
        ("attn_output.weight", AttnOutput),
        ("ffn_up", FfnUp),
        ("ffn_gate", FfnGate),
        ("ffn_down", FfnDown),
    ] {
        if name.contains(pat) {
            return cat;
        }
    }
    Other
}

fn is_attn_v(c: Category) -> bool {
    matches!(c, Category::AttnV | Category::AttnQkv | Category::AttnKvB)
}

/// ggml_n_dims: dimensions up to the last one larger than 1.
fn n_dims(dims: &[u64]) -> usize {
    dims.iter().rposition(|&d| d > 1).map_or(1, |i| i + 1)
}

/// Whether llama-quantize changes this tensor's type at all
/// (`tensor_allows_quantization`): 2-D and up weights, minus norms and the
/// small special tensors some architectures carry.
pub fn allows_quantization(spec: &TensorSpec) -> bool {
    let name = spec.name.as_str();
    if n_dims(&spec.dims) < 2 || !name.ends_with("weight") || name.contains("_norm.weight") {
        return false;
    }
    const SKIP_SUBSTR: [&str; 18] = [
        "ffn_gate_inp.weight",
        "ffn_gate_tid2eid.weight",
        "altup",
        "laurel",
        "per_layer_model_proj",
        "ssm_conv1d",
        "shortconv.conv.weight",
        "indexer.k_proj.weight",
        "indexer.q_proj.weight",
        "attn_rel_b.weight",
        ".position_embd",
        "sam.pos_embd",
        "sam.neck.",
        "sam.net_",
        ".rel_pos",
        ".patch_embd",
        ".patch_merger",
        "a.rvq.codebook",
    ];
    const SKIP_RWKV: [&str; 15] = [
        "time_mix_first.weight",
        "time_mix_w0.weight",
        "time_mix_w1.weight",
        "time_mix_w2.weight",
        "time_mix_v0.weight",
        "time_mix_v1.weight",
        "time_mix_v2.weight",
        "time_mix_a0.weight",
        "time_mix_a1.weight",
        "time_mix_a2.weight",
        "time_mix_g1.weight",
        "time_mix_g2.weight",
        "time_mix_decay_w1.weight",
        "time_mix_decay_w2.weight",
        "time_mix_lerp_fused.weight",
    ];
    if SKIP_SUBSTR
        .iter()
        .chain(&SKIP_RWKV)
        .any(|p| name.contains(p))
        || name.contains("mm.a.code_embd")
    {
        return false;
    }
    name != "position_embd.weight" && name != "token_types.weight"
}

/// llama.cpp's "use more bits" layers: the first and last eighth, and every
/// third layer in between.
fn use_more_bits(i_layer: usize, n_layers: usize) -> bool {
    let (i, n) = (i_layer as i64, n_layers as i64);
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

/// The type to use when a row's width is not a whole number of blocks of the
/// chosen type (`tensor_type_fallback`); F16 when even that does not fit.
fn fallback(ncols: u64, ty: GgmlType) -> GgmlType {
    if ncols.is_multiple_of(ty.block_len() as u64) {
        return ty;
    }
    let alt = match ty {
        GgmlType::Q2_K | GgmlType::Q3_K => GgmlType::Q4_0,
        GgmlType::Q4_K => GgmlType::Q5_0,
        GgmlType::Q5_K => GgmlType::Q5_1,
        GgmlType::Q6_K => GgmlType::Q8_0,
        GgmlType::IQ4_XS => GgmlType::IQ4_NL,
        other => other,
    };
    if ncols.is_multiple_of(alt.block_len() as u64) {
        alt
    } else {
        GgmlType::F16
    }
}

/// The visiting state: llama.cpp's `quantize_state_impl` counters.
struct State<'a> {
    shape: &'a ModelShape,
    ftype: FileType,
    tied_embeddings: bool,
    n_attention_wv: usize,
    i_attention_wv: usize,
    i_ffn_down: usize,
}

impl State<'_> {
    fn falcon(&self) -> bool {
        self.shape.arch == "falcon"
    }

    /// `llama_tensor_get_type_impl` for the file types of [`FileType`].
    fn refine(&mut self, spec: &TensorSpec, cat: Category, mut ty: GgmlType) -> GgmlType {
        use FileType as F;
        use GgmlType as T;
        let ftype = self.ftype;
        if cat == Category::Output || (self.tied_embeddings && cat == Category::TokenEmbd) {
            let nx = spec.dims.first().copied().unwrap_or(0);
            if self.falcon() || !nx.is_multiple_of(ty.block_len() as u64) {
                ty = T::Q8_0;
            } else if ty != T::Q8_0 {
                ty = T::Q6_K;
            }
        } else if cat == Category::TokenEmbd {
            // Untied embeddings keep the default type for these file types.
        } else if is_attn_v(cat) {
            let i = self.i_attention_wv;
            match ftype {
                F::Q2_K => {
                    ty = if self.shape.n_gqa() >= 4 {
                        T::Q4_K
                    } else {
                        T::Q3_K
                    }
                }
                F::Q3_K_M => ty = if i < 2 { T::Q5_K } else { T::Q4_K },
                F::Q3_K_L => ty = T::Q5_K,
                F::Q4_K_M | F::Q5_K_M if use_more_bits(i, self.n_attention_wv) => ty = T::Q6_K,
                F::Q4_K_S if i < 4 => ty = T::Q5_K,
                F::IQ4_NL | F::IQ4_XS if self.shape.n_gqa() >= 4 => ty = T::Q5_K,
                _ => {}
            }
            self.i_attention_wv += 1;
        } else if cat == Category::FfnDown {
            let (i, n) = (self.i_ffn_down, self.shape.n_layer);
            match ftype {
                F::Q2_K => ty = T::Q3_K,
                F::Q3_K_M => {
                    ty = if i < n / 16 {
                        T::Q5_K
                    } else if !self.falcon() || use_more_bits(i, n) {
                        T::Q4_K
                    } else {
                        T::Q3_K
                    }
                }
                F::Q3_K_L => ty = if self.falcon() { T::Q4_K } else { T::Q5_K },
                F::Q4_K_M => {
                    if self.falcon() {
                        ty = if i < n / 16 {
                            T::Q6_K
                        } else if use_more_bits(i, n) {
                            T::Q5_K
                        } else {
                            T::Q4_K
                        };
                    } else if use_more_bits(i, n) {
                        ty = T::Q6_K;
                    }
                }
                F::Q5_K_M if use_more_bits(i, n) => ty = T::Q6_K,
                F::Q4_K_S if !self.falcon() && i < n / 8 => ty = T::Q5_K,
                // Without an importance matrix, as every plan here is.
                F::IQ4_NL | F::IQ4_XS if i < n / 8 => ty = T::Q5_K,
                _ => {}
            }
            self.i_ffn_down += 1;
        } else if cat == Category::AttnOutput {
            match (self.falcon(), ftype) {
                (false, F::Q2_K) => ty = T::Q3_K,
                (false, F::Q3_K_M) => ty = T::Q4_K,
                (false, F::Q3_K_L) => ty = T::Q5_K,
                (true, F::Q3_K_L) => ty = T::Q4_K,
                _ => {}
            }
        }
        ty
    }
}

/// The type each tensor of `specs` gets for `ftype` (same indices as `specs`).
/// Tensors that are not quantized (norms, 1-D tensors) keep their type.
pub fn plan_types(specs: &[TensorSpec], ftype: FileType, shape: &ModelShape) -> Vec<GgmlType> {
    let cats: Vec<Category> = specs.iter().map(|s| category(&s.name)).collect();
    let mut state = State {
        shape,
        ftype,
        tied_embeddings: !cats.contains(&Category::Output),
        n_attention_wv: cats.iter().filter(|&&c| is_attn_v(c)).count(),
        i_attention_wv: 0,
        i_ffn_down: 0,
    };
    let default = ftype.default_type();
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    let mut out: Vec<GgmlType> = specs.iter().map(|s| s.ty).collect();
    for i in llama_order(&names) {
        let spec = &specs[i];
        if !allows_quantization(spec) {
            continue;
        }
        out[i] = if default.is_quantized() {
            let ty = state.refine(spec, cats[i], default);
            fallback(spec.dims.first().copied().unwrap_or(0), ty)
        } else {
            default
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_numbers_and_order_follow_llama() {
        assert_eq!(layer_of("blk.12.attn_q.weight"), Some(12));
        assert_eq!(layer_of("blk.x.attn_q.weight"), None);
        assert_eq!(layer_of("token_embd.weight"), None);
        let names = [
            "blk.10.ffn_up.weight",
            "blk.2.attn_v.weight",
            "token_embd.weight",
            "blk.2.attn_k.weight",
            "output_norm.weight",
        ];
        let order: Vec<&str> = llama_order(&names).iter().map(|&i| names[i]).collect();
        assert_eq!(
            order,
            [
                "output_norm.weight",
                "token_embd.weight",
                "blk.2.attn_k.weight",
                "blk.2.attn_v.weight",
                "blk.10.ffn_up.weight"
            ]
        );
    }

    #[test]
    fn more_bits_layers_match_llama_for_26_layers() {
        let layers: Vec<usize> = (0..26).filter(|&i| use_more_bits(i, 26)).collect();
        assert_eq!(layers, [0, 1, 2, 5, 8, 11, 14, 17, 20, 22, 23, 24, 25]);
    }

    #[test]
    fn fallbacks_follow_block_sizes() {
        assert_eq!(fallback(640, GgmlType::Q4_K), GgmlType::Q5_0);
        assert_eq!(fallback(640, GgmlType::Q5_K), GgmlType::Q5_1);
        assert_eq!(fallback(640, GgmlType::Q6_K), GgmlType::Q8_0);
        assert_eq!(fallback(640, GgmlType::Q3_K), GgmlType::Q4_0);
        assert_eq!(fallback(512, GgmlType::Q4_K), GgmlType::Q4_K);
        assert_eq!(fallback(100, GgmlType::Q4_K), GgmlType::F16);
        assert_eq!(fallback(100, GgmlType::Q8_0), GgmlType::F16);
    }

    #[test]
    fn norms_and_vectors_keep_their_type() {
        let spec = |name: &str, dims: &[u64]| TensorSpec {
            name: name.into(),
            dims: dims.to_vec(),
            ty: GgmlType::F32,
        };
        assert!(!allows_quantization(&spec(
            "blk.0.attn_norm.weight",
            &[640]
        )));
        assert!(!allows_quantization(&spec(
            "blk.0.attn_q_norm.weight",
            &[256]
        )));
        assert!(!allows_quantization(&spec(
            "blk.0.attn_q.weight",
            &[640, 1]
        )));
        assert!(!allows_quantization(&spec("blk.0.attn_q.bias", &[640, 4])));
        assert!(allows_quantization(&spec(
            "blk.0.attn_q.weight",
            &[640, 1024]
        )));
    }
}
