//! [`RunOptions`]: everything a front end decides about running a model, in
//! one type. The CLI and the server each build one from their flags; the
//! loader resolves its defaults once, and nothing downstream resolves them
//! again.

use crate::{EngineError, KvType, Precision, SamplingParams};

/// Prefill batch size when none is asked for: long prompts are processed
/// this many tokens per forward pass.
pub const DEFAULT_BATCH: usize = 512;

/// The largest default context: a model's training context can be 128K
/// tokens, whose KV cache would not fit the machines we run on.
pub const MAX_DEFAULT_CTX: usize = 4096;

/// How to load and run a model. `None` fields take their defaults when the
/// engine is loaded (see [`crate::Engine::options`] for the resolved values).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunOptions {
    /// Kernel threads (default: the physical cores).
    pub threads: Option<usize>,
    /// Context size of a session in tokens (default: the model's training
    /// context, at most [`MAX_DEFAULT_CTX`]).
    pub ctx: Option<usize>,
    /// Most prompt tokens per forward pass (default: [`DEFAULT_BATCH`], at
    /// most the context).
    pub batch: Option<usize>,
    /// Activation precision of the matrix products.
    pub precision: Precision,
    /// How the KV cache stores keys and values (default: f16, or f32 with
    /// [`Precision::Exact`]).
    pub kv_cache: Option<KvType>,
    /// Requantize the weights at load to this llama-quantize type (`q8_0`,
    /// `q4_k_m`, ...); `None` runs them as stored.
    pub quant: Option<String>,
    /// Sampling of requests that set none of their own.
    pub sampling: SamplingParams,
    /// The projector (llama.cpp's `mmproj` GGUF) to read images with, and
    /// on Gemma 4 to hear with when it holds the audio encoder; a
    /// checkpoint directory with its towers needs none.
    pub mmproj: Option<std::path::PathBuf>,
    /// Gemma 4: the most soft tokens one image may take (70 to 1120;
    /// default: the checkpoint processor's, else 280).
    pub image_tokens: Option<usize>,
    /// How much work one request's own grammar, template render, picture
    /// or clip may cost.
    pub limits: InputLimits,
    /// A draft model's head: logits only for the first `n` token ids and
    /// every single character, the others -inf (see
    /// [`crate::DRAFT_HEAD_ROWS`]); `None`: the whole vocabulary.
    pub draft_vocab: Option<usize>,
    /// When the load makes the decode layout: before it returns (the
    /// default), or after, on a background thread (a server answering the
    /// request that loads the model).
    pub layout: model::LayoutTiming,
    /// LoRA adapters to load, in order (their ids), each at its starting
    /// scale.
    pub lora: Vec<crate::LoraSpec>,
}

/// Bounds on the work a request's inputs can make the engine do, so that a
/// hostile grammar, chat template, picture or clip is refused with an error
/// that names the bound instead of taking the machine's memory or time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputLimits {
    /// Largest grammar source (a JSON Schema as JSON, a regex, Lark or
    /// GBNF) in bytes.
    pub grammar_bytes: usize,
    /// Most steps (minijinja's fuel: one per instruction) a chat template
    /// may take to render one conversation.
    pub template_steps: u64,
    /// Most pixels (width times height) of a picture, checked from its
    /// header before anything is decoded.
    pub image_pixels: u64,
    /// Longest audio clip accepted, in seconds (the encoders hear the first
    /// [`media::MAX_SECONDS`] of it).
    pub clip_seconds: u32,
    /// Most memory decoding one picture or clip may take, worked out from
    /// its header before it is decoded (the server's per-request budget,
    /// `--request-memory`).
    pub decode_bytes: u64,
}

impl Default for InputLimits {
    fn default() -> Self {
        Self {
            grammar_bytes: crate::MAX_GRAMMAR_BYTES,
            template_steps: tokenizer::DEFAULT_TEMPLATE_STEPS,
            image_pixels: media::DEFAULT_MAX_PIXELS,
            clip_seconds: media::DEFAULT_MAX_CLIP_SECONDS,
            decode_bytes: media::DEFAULT_MAX_DECODE_BYTES,
        }
    }
}

impl RunOptions {
    /// Refuse zero sizes and bad sampling defaults before anything is loaded.
    pub fn validate(&self) -> Result<(), EngineError> {
        for (name, v) in [
            ("threads", self.threads),
            ("ctx", self.ctx),
            ("batch", self.batch),
        ] {
            if v == Some(0) {
                return Err(EngineError::InvalidOptions(format!(
                    "{name} must be at least 1"
                )));
            }
        }
        if let Some(q) = &self.quant {
            quant_type(q)?;
        }
        self.sampling
            .validate()
            .map_err(EngineError::InvalidOptions)
    }

    /// The kernel threads: as asked, else the physical cores.
    pub(crate) fn threads_or_default(&self) -> usize {
        self.threads.unwrap_or_else(threads::default_threads)
    }

    /// These options with every default filled in for a model trained on
    /// `context_length` tokens.
    pub(crate) fn resolved(&self, context_length: usize) -> RunOptions {
        let ctx = self
            .ctx
            .unwrap_or_else(|| context_length.clamp(1, MAX_DEFAULT_CTX));
        RunOptions {
            threads: Some(self.threads_or_default()),
            ctx: Some(ctx),
            batch: Some(self.batch.unwrap_or(DEFAULT_BATCH).min(ctx)),
            ..self.clone()
        }
    }
}

/// The llama-quantize type named `name` (`q8_0`, `q4_k_m`, ...).
pub(crate) fn quant_type(name: &str) -> Result<convert::FileType, EngineError> {
    convert::FileType::from_name(name).ok_or_else(|| {
        EngineError::InvalidOptions(format!(
            "unknown quantization type `{name}` (known: {})",
            convert::FileType::names()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_resolve_once_and_zeros_are_refused() {
        let r = RunOptions::default().resolved(32768);
        assert_eq!(r.ctx, Some(MAX_DEFAULT_CTX));
        assert_eq!(r.batch, Some(DEFAULT_BATCH));
        assert!(r.threads.unwrap() >= 1);
        let small = RunOptions {
            ctx: Some(100),
            ..RunOptions::default()
        }
        .resolved(32768);
        assert_eq!(small.batch, Some(100));
        assert!(RunOptions {
            threads: Some(0),
            ..RunOptions::default()
        }
        .validate()
        .is_err());
        let bad_quant = RunOptions {
            quant: Some("q9_9".into()),
            ..RunOptions::default()
        };
        let err = bad_quant.validate().unwrap_err().to_string();
        assert!(err.contains("q9_9") && err.contains("q8_0"), "{err}");
        assert!(RunOptions::default().validate().is_ok());
    }
}
