//! Sessions over a loaded model: prompt processing, sampling, stop conditions
//! and streaming; plus the scoring tools built on them (per-position logits,
//! perplexity).
//!
//! Front ends talk to this crate only; it hides kernels and tensors.

mod sampling;
mod score;

pub use model::Precision;
pub use sampling::{argmax, Rng, Sampler, SamplingParams};
pub use score::{logsumexp, top_k, PerplexityReport};
pub use tokenizer::{ChatMessage, ChatTemplate, StreamDecoder, Tokenizer};

use model::{KvCache, Model, Scratch};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Loading or running the model failed.
    #[error(transparent)]
    Model(#[from] model::ModelError),
    /// The tokenizer could not be built or a template failed.
    #[error(transparent)]
    Tokenizer(#[from] tokenizer::TokenizerError),
    /// The prompt does not fit the context.
    #[error("prompt of {prompt} tokens does not fit the context of {n_ctx} tokens (leave room for at least one generated token)")]
    PromptTooLong {
        /// Prompt tokens.
        prompt: usize,
        /// Context size.
        n_ctx: usize,
    },
    /// The request itself is invalid (bad sampling parameter, empty prompt…).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
}

/// Options for loading a model into an engine.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Kernel threads.
    pub threads: usize,
    /// Activation precision of the matrix products.
    pub precision: Precision,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            threads: quant::default_threads(),
            precision: Precision::default(),
        }
    }
}

/// A model with its tokenizer and chat template, shared by sessions.
pub struct Engine {
    model: Arc<Model>,
    tokenizer: Arc<Tokenizer>,
    template: Arc<ChatTemplate>,
    load_time: Duration,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("model", &self.model)
            .finish()
    }
}

/// Prefill batch size: long prompts are processed this many tokens at a time.
pub const DEFAULT_BATCH: usize = 512;

impl Engine {
    /// Load a GGUF model and its tokenizer.
    pub fn load(path: impl AsRef<Path>, opts: &EngineOptions) -> Result<Self, EngineError> {
        let start = Instant::now();
        let model = Model::load(
            path,
            &model::LoadOptions {
                threads: opts.threads,
                precision: opts.precision,
            },
        )?;
        let tokenizer = Tokenizer::from_gguf(model.gguf())?;
        let template = tokenizer.chat_template();
        Ok(Self {
            model: Arc::new(model),
            tokenizer: Arc::new(tokenizer),
            template: Arc::new(template),
            load_time: start.elapsed(),
        })
    }

    /// The model.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The chat template.
    pub fn template(&self) -> &ChatTemplate {
        &self.template
    }

    /// How long `load` took.
    pub fn load_time(&self) -> Duration {
        self.load_time
    }

    /// The context size a session gets when none is asked for: the model's
    /// training context, capped to keep the default memory modest.
    pub fn default_ctx(&self) -> usize {
        self.model.config().context_length.min(4096)
    }

    /// A new session with a context of `n_ctx` tokens (0 = default).
    pub fn session(&self, n_ctx: usize) -> Session {
        let n_ctx = if n_ctx == 0 {
            self.default_ctx()
        } else {
            n_ctx
        };
        let batch = DEFAULT_BATCH.min(n_ctx);
        Session {
            model: Arc::clone(&self.model),
            tokenizer: Arc::clone(&self.tokenizer),
            cache: self.model.new_cache(n_ctx),
            scratch: self.model.new_scratch(n_ctx, batch),
            tokens: Vec::with_capacity(n_ctx),
        }
    }

    /// Bytes a session of `n_ctx` tokens takes (KV cache and buffers).
    pub fn session_bytes(&self, n_ctx: usize) -> usize {
        let n_ctx = if n_ctx == 0 {
            self.default_ctx()
        } else {
            n_ctx
        };
        self.model.session_bytes(n_ctx, DEFAULT_BATCH.min(n_ctx))
    }

    /// Bytes the KV cache of a session of `n_ctx` tokens takes.
    pub fn kv_bytes(&self, n_ctx: usize) -> usize {
        KvCache::bytes_for(self.model.config(), n_ctx)
    }

    /// Encode a conversation with the chat template, ready for generation.
    pub fn encode_chat(&self, messages: &[ChatMessage]) -> Result<Vec<u32>, EngineError> {
        Ok(self.tokenizer.encode_chat(&self.template, messages, true)?)
    }
}

/// Why generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-generation token or a stop string.
    Stop,
    /// The token limit or the context was reached.
    Length,
    /// The caller's callback asked to stop.
    Cancelled,
}

/// Limits and stop conditions of one generation.
#[derive(Debug, Clone, Default)]
pub struct GenerateOptions {
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// Stop strings: generation ends when the text contains one, which is cut.
    pub stop: Vec<String>,
    /// Stop on end-of-generation tokens (eos, `<end_of_turn>`).
    pub stop_on_eog: bool,
    /// Render control tokens in the streamed text.
    pub render_special: bool,
}

/// One streamed piece of output.
#[derive(Debug, Clone)]
pub struct TokenEvent<'a> {
    /// The sampled id.
    pub id: u32,
    /// Text that became complete with this token (may be empty).
    pub text: &'a str,
}

/// What a generation produced.
#[derive(Debug, Clone)]
pub struct Generation {
    /// Sampled ids, the end-of-generation token included when one ended it.
    pub ids: Vec<u32>,
    /// The text, stop string removed.
    pub text: String,
    /// Why it ended.
    pub finish: FinishReason,
    /// Prompt tokens processed (after the reused prefix).
    pub prompt_tokens_evaluated: usize,
    /// Prompt tokens reused from the session's cache.
    pub prompt_tokens_reused: usize,
    /// Time spent on the prompt.
    pub prompt_time: Duration,
    /// Time spent generating.
    pub gen_time: Duration,
}

impl Generation {
    /// Generated tokens per second.
    pub fn gen_tokens_per_s(&self) -> f64 {
        self.ids.len() as f64 / self.gen_time.as_secs_f64().max(1e-9)
    }

    /// Prompt tokens per second.
    pub fn prompt_tokens_per_s(&self) -> f64 {
        self.prompt_tokens_evaluated as f64 / self.prompt_time.as_secs_f64().max(1e-9)
    }
}

/// One sequence: its KV cache, buffers and the tokens it holds.
pub struct Session {
    model: Arc<Model>,
    tokenizer: Arc<Tokenizer>,
    cache: KvCache,
    scratch: Scratch,
    tokens: Vec<u32>,
}

impl Session {
    /// The context size.
    pub fn n_ctx(&self) -> usize {
        self.cache.n_ctx()
    }

    /// Tokens currently in the cache.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Forget everything.
    pub fn reset(&mut self) {
        self.cache.clear();
        self.tokens.clear();
    }

    /// Make the cache hold exactly `prompt`, reusing the longest shared prefix
    /// when the cache allows rewinding to it. Returns (evaluated, reused).
    pub fn feed(&mut self, prompt: &[u32]) -> Result<(usize, usize), EngineError> {
        if prompt.len() > self.n_ctx() {
            return Err(EngineError::PromptTooLong {
                prompt: prompt.len(),
                n_ctx: self.n_ctx(),
            });
        }
        let mut shared = self
            .tokens
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count();
        // At least the last prompt token must be evaluated to get its logits.
        if shared == prompt.len() {
            shared = shared.saturating_sub(1);
        }
        if !self.cache.truncate(shared) {
            self.cache.clear();
            shared = 0;
        }
        self.tokens.truncate(shared);
        let rest = &prompt[shared..];
        if let Err(e) = self.model.forward(&mut self.cache, &mut self.scratch, rest) {
            // A failed batch leaves the cache in an unknown state.
            self.reset();
            return Err(e.into());
        }
        self.tokens.extend_from_slice(rest);
        Ok((rest.len(), shared))
    }

    /// Logits after the last token fed.
    pub fn last_logits(&mut self) -> Result<&mut [f32], EngineError> {
        let rows = self.scratch.batch();
        Ok(self
            .model
            .logits(&mut self.scratch, rows.saturating_sub(1)..rows)?)
    }

    /// Feed `prompt` and sample up to `opts.max_tokens` tokens, calling
    /// `on_token` for each; the callback returns `false` to cancel.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        sampler: &mut Sampler,
        opts: &GenerateOptions,
        mut on_token: impl FnMut(TokenEvent<'_>) -> bool,
    ) -> Result<Generation, EngineError> {
        if prompt.is_empty() {
            return Err(EngineError::InvalidRequest("the prompt is empty".into()));
        }
        if prompt.len() >= self.n_ctx() {
            return Err(EngineError::PromptTooLong {
                prompt: prompt.len(),
                n_ctx: self.n_ctx(),
            });
        }
        sampler
            .params()
            .validate()
            .map_err(EngineError::InvalidRequest)?;
        let t0 = Instant::now();
        let (evaluated, reused) = self.feed(prompt)?;
        let prompt_time = t0.elapsed();
        let t1 = Instant::now();

        let tokenizer = Arc::clone(&self.tokenizer);
        let mut decoder = StreamDecoder::new(opts.render_special);
        let mut ids = Vec::with_capacity(opts.max_tokens.min(4096));
        let mut text = String::new();
        let mut piece = String::new();
        let mut finish = FinishReason::Length;
        let max_stop = opts.stop.iter().map(|s| s.len()).max().unwrap_or(0);
        // Text held back because it might be the start of a stop string.
        let mut emitted = 0usize;
        while ids.len() < opts.max_tokens {
            if self.tokens.len() >= self.n_ctx() {
                break;
            }
            let rows = self.scratch.batch();
            let logits = self
                .model
                .logits(&mut self.scratch, rows.saturating_sub(1)..rows)?;
            let id = sampler.sample(logits, &self.tokens);
            ids.push(id);
            if opts.stop_on_eog && tokenizer.is_eog(id) {
                finish = FinishReason::Stop;
                break;
            }
            piece.clear();
            decoder.push_into(&tokenizer, id, &mut piece);
            text.push_str(&piece);
            if let Some(cut) = find_stop(&text, &opts.stop, emitted) {
                text.truncate(cut);
                if cut > emitted
                    && !on_token(TokenEvent {
                        id,
                        text: &text[emitted..],
                    })
                {
                    finish = FinishReason::Cancelled;
                } else {
                    finish = FinishReason::Stop;
                }
                emitted = text.len();
                break;
            }
            // Emit what can no longer become part of a stop string.
            let safe = if max_stop == 0 {
                text.len()
            } else {
                floor_char_boundary(&text, text.len().saturating_sub(max_stop - 1)).max(emitted)
            };
            if !on_token(TokenEvent {
                id,
                text: &text[emitted..safe],
            }) {
                emitted = safe;
                finish = FinishReason::Cancelled;
                break;
            }
            emitted = safe;
            if self.tokens.len() + 1 > self.n_ctx() {
                break;
            }
            self.model
                .forward(&mut self.cache, &mut self.scratch, &[id])
                .inspect_err(|_| self.reset())?;
            self.tokens.push(id);
        }
        if finish != FinishReason::Stop || emitted < text.len() {
            let tail = decoder.finish();
            text.push_str(&tail);
            if emitted < text.len() && finish != FinishReason::Cancelled {
                let last = ids.last().copied().unwrap_or(0);
                on_token(TokenEvent {
                    id: last,
                    text: &text[emitted..],
                });
            }
        }
        Ok(Generation {
            ids,
            text,
            finish,
            prompt_tokens_evaluated: evaluated,
            prompt_tokens_reused: reused,
            prompt_time,
            gen_time: t1.elapsed(),
        })
    }

    /// Evaluate `ids` from an empty cache and call `each` with the logits of
    /// every position (in order). Used by `logits` and `perplexity`.
    pub fn score(
        &mut self,
        ids: &[u32],
        mut each: impl FnMut(usize, &[f32]),
    ) -> Result<(), EngineError> {
        self.reset();
        if ids.len() > self.n_ctx() {
            return Err(EngineError::PromptTooLong {
                prompt: ids.len(),
                n_ctx: self.n_ctx(),
            });
        }
        let batch = self.scratch.max_batch();
        let vocab = self.model.config().vocab;
        // Logits rows are computed a few at a time to bound memory.
        const ROWS: usize = 16;
        for (ci, chunk) in ids.chunks(batch).enumerate() {
            self.model
                .forward(&mut self.cache, &mut self.scratch, chunk)
                .inspect_err(|_| self.reset())?;
            self.tokens.extend_from_slice(chunk);
            for start in (0..chunk.len()).step_by(ROWS) {
                let end = (start + ROWS).min(chunk.len());
                let logits = self.model.logits(&mut self.scratch, start..end)?;
                for (r, row) in logits.chunks_exact(vocab).enumerate() {
                    each(ci * batch + start + r, row);
                }
            }
        }
        Ok(())
    }
}

/// The byte offset of the first stop string in `text` that ends after
/// `from`, if any.
fn find_stop(text: &str, stops: &[String], from: usize) -> Option<usize> {
    stops
        .iter()
        .filter(|s| !s.is_empty())
        .filter_map(|s| {
            let search_from = floor_char_boundary(text, from.saturating_sub(s.len()));
            text[search_from..]
                .find(s.as_str())
                .map(|i| search_from + i)
        })
        .min()
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_strings_are_found_across_pieces() {
        let stops = vec!["END".to_string(), "\n\n".to_string()];
        assert_eq!(find_stop("abc EN", &stops, 0), None);
        assert_eq!(find_stop("abc END more", &stops, 5), Some(4));
        assert_eq!(find_stop("a\n\nb", &stops, 0), Some(1));
        assert_eq!(find_stop("héllo", &["l".into()], 2), Some(3));
    }

    #[test]
    fn char_boundaries() {
        assert_eq!(floor_char_boundary("é", 1), 0);
        assert_eq!(floor_char_boundary("ab", 9), 2);
    }
}
