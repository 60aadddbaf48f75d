//! Synthetic Gemma 3 models: real shapes and metadata, random weights. They
//! load and run like the real sizes, so speed and memory can be measured (and
//! llama.cpp compared) for sizes whose weights we do not ship.

use crate::plan::{llama_order, plan_types, ModelShape, TensorSpec};
use crate::rng::hash_name;
use crate::tensors::{metadata_writer, produce, Rows, TensorReport};
use crate::{ConvertError, FileType};
use gguf::{GgmlType, GgufFile, GgufWriter, MetaValue};

/// The hyper-parameters of one Gemma 3 size, as its Hugging Face config has them.
#[derive(Debug, Clone, PartialEq)]
pub struct Preset {
    /// The preset name (`270m`, `1b`, `4b`).
    pub name: &'static str,
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
}

impl Preset {
    /// Names accepted by [`Preset::by_name`].
    pub const NAMES: [&'static str; 3] = ["270m", "1b", "4b"];

    /// Gemma 3 270M.
    pub fn gemma3_270m() -> Preset {
        Preset {
            name: "270m",
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
        }
    }

    /// Gemma 3 1B.
    pub fn gemma3_1b() -> Preset {
        Preset {
            name: "1b",
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
        }
    }

    /// Gemma 3 4B (its text tower).
    pub fn gemma3_4b() -> Preset {
        Preset {
            name: "4b",
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
        }
    }

    /// The preset called `name` (case-insensitive).
    pub fn by_name(name: &str) -> Result<Preset, ConvertError> {
        match name.trim().to_ascii_lowercase().as_str() {
            "270m" => Ok(Self::gemma3_270m()),
            "1b" => Ok(Self::gemma3_1b()),
            "4b" => Ok(Self::gemma3_4b()),
            _ => Err(ConvertError::UnknownPreset(name.to_string())),
        }
    }

    /// The tensors of this preset (F32) with a vocabulary of `vocab`, named
    /// and shaped as in llama.cpp's Gemma 3 files.
    pub fn tensor_specs(&self, vocab: u64) -> Vec<TensorSpec> {
        self.tensors(vocab).into_iter().map(|(s, _, _)| s).collect()
    }

    /// [`Preset::tensor_specs`], each with the mean and spread of its values.
    fn tensors(&self, vocab: u64) -> Vec<(TensorSpec, f32, f32)> {
        let (h, q, kv, hd, f) = (
            self.hidden as u64,
            (self.heads * self.head_dim) as u64,
            (self.kv_heads * self.head_dim) as u64,
            self.head_dim as u64,
            self.ffn as u64,
        );
        // Matrices: N(0, 0.02²), the usual initialiser scale, which keeps random
        // activations in range. Norm weights are stored as 1 + w (the GGUF
        // convention for Gemma), so they sit near 1.
        let (mat, norm) = ((0.0, 0.02), (1.0, 0.05));
        let spec = |name: String, dims: Vec<u64>, (mean, std): (f32, f32)| {
            (
                TensorSpec {
                    name,
                    dims,
                    ty: GgmlType::F32,
                },
                mean,
                std,
            )
        };
        let mut out = vec![
            spec("token_embd.weight".into(), vec![h, vocab], mat),
            spec("output_norm.weight".into(), vec![h], norm),
        ];
        for l in 0..self.layers {
            let n = |s: &str| format!("blk.{l}.{s}.weight");
            out.extend([
                spec(n("attn_norm"), vec![h], norm),
                spec(n("attn_q"), vec![h, q], mat),
                spec(n("attn_k"), vec![h, kv], mat),
                spec(n("attn_v"), vec![h, kv], mat),
                spec(n("attn_q_norm"), vec![hd], norm),
                spec(n("attn_k_norm"), vec![hd], norm),
                spec(n("attn_output"), vec![q, h], mat),
                spec(n("post_attention_norm"), vec![h], norm),
                spec(n("ffn_norm"), vec![h], norm),
                spec(n("ffn_gate"), vec![h, f], mat),
                spec(n("ffn_up"), vec![h, f], mat),
                spec(n("ffn_down"), vec![f, h], mat),
                spec(n("post_ffw_norm"), vec![h], norm),
            ]);
        }
        out
    }

    /// The `general.*` and `gemma3.*` metadata llama.cpp's converter writes for
    /// this model, in its order.
    fn metadata(&self, seed: u64) -> Vec<(String, MetaValue)> {
        let u32v = |v: usize| MetaValue::U32(v as u32);
        let mut m = vec![
            ("general.architecture", MetaValue::String("gemma3".into())),
            ("general.type", MetaValue::String("model".into())),
            (
                "general.name",
                MetaValue::String(format!(
                    "Hearth synthetic Gemma 3 {} (random weights, seed {seed})",
                    self.size_label
                )),
            ),
            (
                "general.size_label",
                MetaValue::String(self.size_label.into()),
            ),
            ("gemma3.block_count", u32v(self.layers)),
            ("gemma3.context_length", MetaValue::U32(self.context_length)),
            ("gemma3.embedding_length", u32v(self.hidden)),
            ("gemma3.feed_forward_length", u32v(self.ffn)),
            ("gemma3.attention.head_count", u32v(self.heads)),
            ("gemma3.attention.head_count_kv", u32v(self.kv_heads)),
        ];
        if let Some(factor) = self.rope_linear_factor {
            m.push((
                "gemma3.rope.scaling.type",
                MetaValue::String("linear".into()),
            ));
            m.push(("gemma3.rope.scaling.factor", MetaValue::F32(factor)));
        }
        m.extend([
            ("gemma3.rope.freq_base", MetaValue::F32(1_000_000.0)),
            ("gemma3.rope.freq_base_swa", MetaValue::F32(10_000.0)),
            (
                "gemma3.attention.layer_norm_rms_epsilon",
                MetaValue::F32(1e-6),
            ),
            ("gemma3.attention.key_length", u32v(self.head_dim)),
            ("gemma3.attention.value_length", u32v(self.head_dim)),
            (
                "gemma3.attention.sliding_window",
                MetaValue::U32(self.sliding_window),
            ),
        ]);
        m.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }
}

/// A random-weight Gemma 3 model of `preset`'s shape in `ftype`, with the
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
            .cloned(),
    );
    let mut w = metadata_writer(&metadata, ftype);
    let tensors = preset.tensors(vocab as u64);
    let specs: Vec<TensorSpec> = tensors.iter().map(|(s, _, _)| s.clone()).collect();
    let shape = ModelShape {
        arch: "gemma3".into(),
        n_layer: preset.layers,
        n_head: preset.heads,
        n_head_kv: preset.kv_heads,
    };
    let types = plan_types(&specs, ftype, &shape);
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    for i in llama_order(&names) {
        let (spec, mean, std) = &tensors[i];
        let rows = Rows::Random {
            stream: seed ^ hash_name(&spec.name),
            mean: *mean,
            std: *std,
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
