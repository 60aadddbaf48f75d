//! Synthetic Gemma 2, 3 and 4 models (and EmbeddingGemma): real shapes and
//! metadata, random weights.
//! They load and run like the real sizes, so speed and memory can be measured
//! (and llama.cpp compared) for sizes whose weights we do not ship.
//!
//! The vocabulary is the tokenizer donor's (Gemma 3's 262,144 tokens by
//! default), so a synthetic Gemma 2 has a slightly larger embedding than the
//! real one (256,000 tokens): 2% more weight bytes in a 2B Q4_K_M.

use crate::plan::{llama_order, plan_types, ModelShape, TensorSpec};
use crate::rng::hash_name;
use crate::synth_gemma4::Gemma4Layout;
use crate::tensors::{metadata_writer, produce, Rows, TensorReport};
use crate::{ConvertError, FileType};
use gguf::{GgmlType, GgufFile, GgufWriter, MetaValue};

/// The hyper-parameters of one Gemma size, as its Hugging Face config has them.
#[derive(Debug, Clone, PartialEq)]
pub struct Preset {
    /// The preset name (`270m`, `1b`, `4b`, `gemma2-2b`).
    pub name: &'static str,
    /// The GGUF architecture (`gemma3`, `gemma2` or `gemma-embedding`).
    pub arch: &'static str,
    /// `general.size_label`.
    pub size_label: &'static str,
    /// Hidden size.
    pub hidden: usize,
    /// Transformer blocks (tests may lower it for speed).
    pub layers: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Dimension of one head.
    pub head_dim: usize,
    /// FFN hidden size.
    pub ffn: usize,
    /// Trained context length.
    pub context_length: u32,
    /// Window of the sliding-window layers.
    pub sliding_window: u32,
    /// Linear RoPE scaling factor of the global layers, if any.
    pub rope_linear_factor: Option<f32>,
    /// An embedding model's dense projections after pooling (width of the
    /// first's output; the second maps back to `hidden`); 0 for none.
    pub dense: usize,
    /// Gemma 4's per-layer inputs, global heads and KV sharing, for `gemma4`.
    pub gemma4: Option<Gemma4Layout>,
}

/// Where a synthetic tensor's values come from.
#[derive(Debug, Clone)]
pub(crate) enum Fill {
    /// `mean + std * N(0, 1)`-ish values.
    Random { mean: f32, std: f32 },
    /// These values (a tensor with a meaning, such as RoPE's divisors).
    Values(Vec<f32>),
}

impl Fill {
    /// Matrices: N(0, 0.02²), the usual initialiser scale, which keeps random
    /// activations in range.
    pub(crate) const MATRIX: Fill = Fill::Random {
        mean: 0.0,
        std: 0.02,
    };
    /// Norm weights sit near 1 (stored as 1 + w, the GGUF convention for Gemma).
    pub(crate) const NORM: Fill = Fill::Random {
        mean: 1.0,
        std: 0.05,
    };
}

/// Gemma 4 E2B's additions (google/gemma-4-E2B's text config).
const E2B_LAYOUT: Gemma4Layout = Gemma4Layout {
    global_head_dim: 512,
    global_every: 5,
    per_layer_input: 256,
    shared_kv_layers: 20,
    double_wide_shared_ffn: true,
    global_rotary_fraction: 0.25,
    final_softcap: 30.0,
};

/// A synthetic tensor: made in F32 (the plan picks its stored type) from `fill`.
pub(crate) fn f32_spec(name: String, dims: Vec<u64>, fill: &Fill) -> (TensorSpec, Fill) {
    let ty = GgmlType::F32;
    (TensorSpec { name, dims, ty }, fill.clone())
}

/// Block `l`'s tensors from the attention output to the MLP's closing norm,
/// which every Gemma shares (query width `q`, MLP width `f`).
pub(crate) fn block_tail(l: usize, h: u64, q: u64, f: u64) -> [(TensorSpec, Fill); 7] {
    let (mat, norm) = (Fill::MATRIX, Fill::NORM);
    let n = |s: &str| format!("blk.{l}.{s}.weight");
    [
        f32_spec(n("attn_output"), vec![q, h], &mat),
        f32_spec(n("post_attention_norm"), vec![h], &norm),
        f32_spec(n("ffn_norm"), vec![h], &norm),
        f32_spec(n("ffn_gate"), vec![h, f], &mat),
        f32_spec(n("ffn_up"), vec![h, f], &mat),
        f32_spec(n("ffn_down"), vec![f, h], &mat),
        f32_spec(n("post_ffw_norm"), vec![h], &norm),
    ]
}

/// Gemma 2's attention and final logit softcaps.
const GEMMA2_SOFTCAPS: (f32, f32) = (50.0, 30.0);

impl Preset {
    /// Names accepted by [`Preset::by_name`].
    pub const NAMES: [&'static str; 7] = [
        "270m",
        "1b",
        "4b",
        "gemma2-2b",
        "embeddinggemma-300m",
        "gemma4-e2b",
        "gemma4-e4b",
    ];

    /// Gemma 3 270M.
    pub fn gemma3_270m() -> Preset {
        Preset {
            name: "270m",
            arch: "gemma3",
            size_label: "270M",
            hidden: 640,
            layers: 18,
            heads: 4,
            kv_heads: 1,
            head_dim: 256,
            ffn: 2048,
            context_length: 32768,
            sliding_window: 512,
            rope_linear_factor: None,
            dense: 0,
            gemma4: None,
        }
    }

    /// Gemma 3 1B.
    pub fn gemma3_1b() -> Preset {
        Preset {
            name: "1b",
            arch: "gemma3",
            size_label: "1B",
            hidden: 1152,
            layers: 26,
            heads: 4,
            kv_heads: 1,
            head_dim: 256,
            ffn: 6912,
            context_length: 32768,
            sliding_window: 512,
            rope_linear_factor: None,
            dense: 0,
            gemma4: None,
        }
    }

    /// Gemma 3 4B (its text tower).
    pub fn gemma3_4b() -> Preset {
        Preset {
            name: "4b",
            arch: "gemma3",
            size_label: "4B",
            hidden: 2560,
            layers: 34,
            heads: 8,
            kv_heads: 4,
            head_dim: 256,
            ffn: 10240,
            context_length: 131072,
            sliding_window: 1024,
            rope_linear_factor: Some(8.0),
            dense: 0,
            gemma4: None,
        }
    }

    /// EmbeddingGemma 300M: Gemma 3's layers attending both ways, mean
    /// pooled, then projected 768 → 3072 → 768.
    pub fn embeddinggemma_300m() -> Preset {
        Preset {
            name: "embeddinggemma-300m",
            arch: "gemma-embedding",
            size_label: "300M",
            hidden: 768,
            layers: 24,
            heads: 3,
            kv_heads: 1,
            head_dim: 256,
            ffn: 1152,
            context_length: 2048,
            sliding_window: 512,
            rope_linear_factor: None,
            dense: 3072,
            gemma4: None,
        }
    }

    /// Gemma 2 2B: every other layer slides over 4,096 tokens, no query/key
    /// norms, softcapped attention and logits.
    pub fn gemma2_2b() -> Preset {
        Preset {
            name: "gemma2-2b",
            arch: "gemma2",
            size_label: "2B",
            hidden: 2304,
            layers: 26,
            heads: 8,
            kv_heads: 4,
            head_dim: 256,
            ffn: 9216,
            context_length: 8192,
            sliding_window: 4096,
            rope_linear_factor: None,
            dense: 0,
            gemma4: None,
        }
    }

    /// Gemma 4 E2B's text model: 35 layers, every fifth global with heads
    /// of 512, the last 20 reading earlier layers' keys and values with a
    /// doubled MLP, and per-layer inputs of 256.
    pub fn gemma4_e2b() -> Preset {
        Preset {
            name: "gemma4-e2b",
            arch: "gemma4",
            size_label: "E2B",
            hidden: 1536,
            layers: 35,
            heads: 8,
            kv_heads: 1,
            head_dim: 256,
            ffn: 6144,
            context_length: 131072,
            sliding_window: 512,
            rope_linear_factor: None,
            dense: 0,
            gemma4: Some(E2B_LAYOUT),
        }
    }

    /// Gemma 4 E4B's text model: 42 layers, every sixth global, two KV
    /// heads, the last 18 layers sharing KV, one MLP width.
    pub fn gemma4_e4b() -> Preset {
        Preset {
            name: "gemma4-e4b",
            size_label: "E4B",
            hidden: 2560,
            layers: 42,
            kv_heads: 2,
            ffn: 10240,
            gemma4: Some(Gemma4Layout {
                global_every: 6,
                shared_kv_layers: 18,
                double_wide_shared_ffn: false,
                ..E2B_LAYOUT
            }),
            ..Self::gemma4_e2b()
        }
    }

    /// The preset called `name` (case-insensitive).
    pub fn by_name(name: &str) -> Result<Preset, ConvertError> {
        match name.trim().to_ascii_lowercase().as_str() {
            "270m" => Ok(Self::gemma3_270m()),
            "1b" => Ok(Self::gemma3_1b()),
            "4b" => Ok(Self::gemma3_4b()),
            "gemma2-2b" => Ok(Self::gemma2_2b()),
            "embeddinggemma-300m" => Ok(Self::embeddinggemma_300m()),
            "gemma4-e2b" => Ok(Self::gemma4_e2b()),
            "gemma4-e4b" => Ok(Self::gemma4_e4b()),
            _ => Err(ConvertError::UnknownPreset(name.to_string())),
        }
    }

    /// The tensors of this preset (F32) with a vocabulary of `vocab`, named
    /// and shaped as in llama.cpp's Gemma files.
    pub fn tensor_specs(&self, vocab: u64) -> Vec<TensorSpec> {
        self.tensors(vocab).into_iter().map(|(s, _)| s).collect()
    }

    /// [`Preset::tensor_specs`], each with where its values come from.
    fn tensors(&self, vocab: u64) -> Vec<(TensorSpec, Fill)> {
        if let Some(layout) = &self.gemma4 {
            return layout.tensors(self, vocab);
        }
        let (h, q, kv, hd, f) = (
            self.hidden as u64,
            (self.heads * self.head_dim) as u64,
            (self.kv_heads * self.head_dim) as u64,
            self.head_dim as u64,
            self.ffn as u64,
        );
        let (mat, norm) = (Fill::MATRIX, Fill::NORM);
        let spec = f32_spec;
        let mut out = vec![
            spec("token_embd.weight".into(), vec![h, vocab], &mat),
            spec("output_norm.weight".into(), vec![h], &norm),
        ];
        if self.dense > 0 {
            let d = self.dense as u64;
            out.push(spec("dense_2.weight".into(), vec![h, d], &mat));
            out.push(spec("dense_3.weight".into(), vec![d, h], &mat));
        }
        let qk_norms = self.arch != "gemma2";
        for l in 0..self.layers {
            let n = |s: &str| format!("blk.{l}.{s}.weight");
            out.extend([
                spec(n("attn_norm"), vec![h], &norm),
                spec(n("attn_q"), vec![h, q], &mat),
                spec(n("attn_k"), vec![h, kv], &mat),
                spec(n("attn_v"), vec![h, kv], &mat),
            ]);
            if qk_norms {
                out.extend([
                    spec(n("attn_q_norm"), vec![hd], &norm),
                    spec(n("attn_k_norm"), vec![hd], &norm),
                ]);
            }
            out.extend(block_tail(l, h, q, f));
        }
        out
    }

    /// The `general.*` and architecture metadata llama.cpp's converter writes
    /// for this model, in its order.
    fn metadata(&self, seed: u64) -> Vec<(String, MetaValue)> {
        let u32v = |v: usize| MetaValue::U32(v as u32);
        let a = self.arch;
        let family = match a {
            "gemma2" => "Gemma 2",
            "gemma-embedding" => "EmbeddingGemma",
            "gemma4" => "Gemma 4",
            _ => "Gemma 3",
        };
        let mut m: Vec<(String, MetaValue)> = vec![
            ("general.architecture".into(), MetaValue::String(a.into())),
            ("general.type".into(), MetaValue::String("model".into())),
            (
                "general.name".into(),
                MetaValue::String(format!(
                    "Hearth synthetic {family} {} (random weights, seed {seed})",
                    self.size_label
                )),
            ),
            (
                "general.size_label".into(),
                MetaValue::String(self.size_label.into()),
            ),
        ];
        let mut put = |k: &str, v: MetaValue| m.push((format!("{a}.{k}"), v));
        put("block_count", u32v(self.layers));
        put("context_length", MetaValue::U32(self.context_length));
        put("embedding_length", u32v(self.hidden));
        if let Some(layout) = &self.gemma4 {
            layout.metadata(self, &mut put);
            return m;
        }
        put("feed_forward_length", u32v(self.ffn));
        put("attention.head_count", u32v(self.heads));
        put("attention.head_count_kv", u32v(self.kv_heads));
        if let Some(factor) = self.rope_linear_factor {
            put("rope.scaling.type", MetaValue::String("linear".into()));
            put("rope.scaling.factor", MetaValue::F32(factor));
        }
        if a != "gemma2" {
            put("rope.freq_base", MetaValue::F32(1_000_000.0));
            put("rope.freq_base_swa", MetaValue::F32(10_000.0));
        }
        put("attention.layer_norm_rms_epsilon", MetaValue::F32(1e-6));
        put("attention.key_length", u32v(self.head_dim));
        put("attention.value_length", u32v(self.head_dim));
        if a == "gemma2" {
            put("attn_logit_softcapping", MetaValue::F32(GEMMA2_SOFTCAPS.0));
            put("final_logit_softcapping", MetaValue::F32(GEMMA2_SOFTCAPS.1));
        }
        put(
            "attention.sliding_window",
            MetaValue::U32(self.sliding_window),
        );
        if self.dense > 0 {
            put("dense_2_feat_in", u32v(self.hidden));
            put("dense_2_feat_out", u32v(self.dense));
            put("dense_3_feat_in", u32v(self.dense));
            put("dense_3_feat_out", u32v(self.hidden));
            put("pooling_type", MetaValue::U32(1));
        }
        m
    }
}

/// A random-weight Gemma model of `preset`'s shape in `ftype`, with the
/// tokenizer (every `tokenizer.*` key) of `tokenizer_donor`, whose vocabulary
/// size sets the embedding's. The same seed gives the same file.
pub fn synth(
    preset: &Preset,
    ftype: FileType,
    tokenizer_donor: &GgufFile,
    seed: u64,
) -> Result<GgufWriter, ConvertError> {
    synth_with(preset, ftype, tokenizer_donor, seed, &mut |_| {})
}

/// [`synth`], calling `progress` after each tensor.
pub fn synth_with(
    preset: &Preset,
    ftype: FileType,
    tokenizer_donor: &GgufFile,
    seed: u64,
    progress: &mut dyn FnMut(&TensorReport),
) -> Result<GgufWriter, ConvertError> {
    if preset.hidden == 0 || preset.heads == 0 || preset.kv_heads == 0 || preset.head_dim == 0 {
        return Err(ConvertError::Invalid(format!(
            "preset {} has a zero dimension",
            preset.name
        )));
    }
    let vocab = tokenizer_donor
        .get_str_array("tokenizer.ggml.tokens")
        .map(|t| t.len())
        .filter(|&n| n > 0)
        .ok_or_else(|| {
            ConvertError::Invalid(
                "the tokenizer donor has no tokenizer.ggml.tokens: pass a GGUF model with a tokenizer"
                    .into(),
            )
        })?;
    let mut metadata = preset.metadata(seed);
    metadata.extend(
        tokenizer_donor
            .metadata()
            .iter()
            .filter(|(k, _)| k.starts_with("tokenizer."))
            .filter(|(k, _)| preset.dense == 0 || k != "tokenizer.ggml.add_eos_token")
            .cloned(),
    );
    if preset.dense > 0 {
        // EmbeddingGemma's tokenizer closes each text with <eos>.
        metadata.push(("tokenizer.ggml.add_eos_token".into(), MetaValue::Bool(true)));
    }
    let mut w = metadata_writer(&metadata, ftype);
    let tensors = preset.tensors(vocab as u64);
    let specs: Vec<TensorSpec> = tensors.iter().map(|(s, _)| s.clone()).collect();
    let shape = ModelShape {
        arch: preset.arch.into(),
        n_layer: preset.layers,
        n_head: preset.heads,
        n_head_kv: preset.kv_heads,
    };
    let types = plan_types(&specs, ftype, &shape);
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    for i in llama_order(&names) {
        let (spec, fill) = &tensors[i];
        let values: Vec<u8>;
        let rows = match fill {
            Fill::Random { mean, std } => Rows::Random {
                stream: seed ^ hash_name(&spec.name),
                mean: *mean,
                std: *std,
            },
            Fill::Values(v) => {
                values = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                Rows::Stored {
                    ty: GgmlType::F32,
                    data: &values,
                }
            }
        };
        let data = produce(&spec.name, &spec.dims, &rows, types[i])?;
        let report = TensorReport {
            name: spec.name.clone(),
            dims: spec.dims.clone(),
            from: GgmlType::F32,
            to: types[i],
            bytes: data.len(),
        };
        w.add_tensor(spec.name.clone(), &spec.dims, types[i], data)?;
        progress(&report);
    }
    Ok(w)
}
