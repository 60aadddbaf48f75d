//! What Gemma 4's per-layer-embedding models (E2B, E4B) add to a synthetic
//! preset: per-layer inputs, global layers with their own head size and
//! proportional RoPE, the last layers reading an earlier layer's keys and
//! values, and (E2B) a doubled MLP on those layers. Tensors and metadata are
//! named, shaped and ordered as llama.cpp's converter writes them.

use crate::plan::TensorSpec;
use crate::synth::{block_tail, f32_spec, Fill, Preset};
use gguf::{MetaArray, MetaValue};

/// Gemma 4's additions to a [`Preset`] (the sliding layers' head size is
/// [`Preset::head_dim`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Gemma4Layout {
    /// Head size of the global layers.
    pub global_head_dim: usize,
    /// Every `global_every`-th layer attends to all positions.
    pub global_every: usize,
    /// Width of each layer's per-layer input.
    pub per_layer_input: usize,
    /// How many of the last layers reuse an earlier layer's keys and values.
    pub shared_kv_layers: usize,
    /// Whether the KV-sharing layers' MLP is twice [`Preset::ffn`] wide.
    pub double_wide_shared_ffn: bool,
    /// The part of a global head that RoPE rotates.
    pub global_rotary_fraction: f32,
    /// Final logit softcap.
    pub final_softcap: f32,
}

impl Gemma4Layout {
    /// Whether layer `l` attends to all positions.
    pub fn is_global(&self, l: usize) -> bool {
        (l + 1).is_multiple_of(self.global_every.max(1))
    }

    /// The first layer that reuses another's keys and values.
    fn first_shared(&self, layers: usize) -> usize {
        layers - self.shared_kv_layers.min(layers)
    }

    /// Each layer's MLP width.
    fn ffn_widths(&self, p: &Preset) -> Vec<usize> {
        let first_shared = self.first_shared(p.layers);
        (0..p.layers)
            .map(|l| match self.double_wide_shared_ffn && l >= first_shared {
                true => 2 * p.ffn,
                false => p.ffn,
            })
            .collect()
    }

    /// The tensors of `p` with this layout, as `(spec, values)`.
    pub(crate) fn tensors(&self, p: &Preset, vocab: u64) -> Vec<(TensorSpec, Fill)> {
        let (mat, norm) = (Fill::MATRIX, Fill::NORM);
        let spec = f32_spec;
        let (h, ple, layers) = (
            p.hidden as u64,
            self.per_layer_input as u64,
            p.layers as u64,
        );
        // Proportional RoPE as llama.cpp reads it: a divisor per pair of the
        // global head, 1 for the rotated leading pairs and one so large the
        // rest never turn.
        let pairs = self.global_head_dim / 2;
        let rotated =
            ((self.global_rotary_fraction * self.global_head_dim as f32) as usize / 2).min(pairs);
        let divisors = (0..pairs)
            .map(|i| if i < rotated { 1.0 } else { 1e30 })
            .collect();
        let mut out = vec![
            spec("output_norm.weight".into(), vec![h], &norm),
            spec(
                "per_layer_model_proj.weight".into(),
                vec![h, ple * layers],
                &mat,
            ),
            spec("per_layer_proj_norm.weight".into(), vec![ple], &norm),
            spec(
                "per_layer_token_embd.weight".into(),
                vec![ple * layers, vocab],
                &mat,
            ),
            spec(
                "rope_freqs.weight".into(),
                vec![pairs as u64],
                &Fill::Values(divisors),
            ),
            spec("token_embd.weight".into(), vec![h, vocab], &mat),
        ];
        let first_shared = self.first_shared(p.layers);
        for (l, f) in self.ffn_widths(p).into_iter().enumerate() {
            let n = |s: &str| format!("blk.{l}.{s}.weight");
            let hd = match self.is_global(l) {
                true => self.global_head_dim,
                false => p.head_dim,
            } as u64;
            let (q, kv, f) = (p.heads as u64 * hd, p.kv_heads as u64 * hd, f as u64);
            out.push(spec(n("attn_norm"), vec![h], &norm));
            out.push(spec(n("attn_q"), vec![h, q], &mat));
            out.push(spec(n("attn_q_norm"), vec![hd], &norm));
            if l < first_shared {
                out.push(spec(n("attn_k"), vec![h, kv], &mat));
                out.push(spec(n("attn_k_norm"), vec![hd], &norm));
                out.push(spec(n("attn_v"), vec![h, kv], &mat));
            }
            out.extend(block_tail(l, h, q, f));
            out.extend([
                spec(n("inp_gate"), vec![h, ple], &mat),
                spec(n("proj"), vec![ple, h], &mat),
                spec(n("post_norm"), vec![h], &norm),
                spec(n("layer_output_scale"), vec![1], &norm),
            ]);
        }
        out
    }

    /// The `gemma4.*` keys after the shared ones, in the converter's order.
    pub(crate) fn metadata(&self, p: &Preset, put: &mut dyn FnMut(&str, MetaValue)) {
        let u32v = |v: usize| MetaValue::U32(v as u32);
        let widths = self.ffn_widths(p).into_iter().map(|f| f as i32).collect();
        put(
            "feed_forward_length",
            MetaValue::Array(MetaArray::I32(widths)),
        );
        put("attention.head_count", u32v(p.heads));
        put("attention.head_count_kv", u32v(p.kv_heads));
        put("rope.freq_base", MetaValue::F32(1_000_000.0));
        put("rope.freq_base_swa", MetaValue::F32(10_000.0));
        put("attention.layer_norm_rms_epsilon", MetaValue::F32(1e-6));
        put("attention.key_length", u32v(self.global_head_dim));
        put("attention.value_length", u32v(self.global_head_dim));
        put(
            "final_logit_softcapping",
            MetaValue::F32(self.final_softcap),
        );
        put("attention.sliding_window", MetaValue::U32(p.sliding_window));
        put("attention.shared_kv_layers", u32v(self.shared_kv_layers));
        put(
            "embedding_length_per_layer_input",
            u32v(self.per_layer_input),
        );
        let pattern = (0..p.layers).map(|l| !self.is_global(l)).collect();
        put(
            "attention.sliding_window_pattern",
            MetaValue::Array(MetaArray::Bool(pattern)),
        );
        put("attention.key_length_swa", u32v(p.head_dim));
        put("attention.value_length_swa", u32v(p.head_dim));
        put("rope.dimension_count", u32v(self.global_head_dim));
        put("rope.dimension_count_swa", u32v(p.head_dim));
    }
}
