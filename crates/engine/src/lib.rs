//! Sessions over a loaded model: prompt processing, sampling, stop conditions
//! and streaming; plus the scoring tools built on them (per-position logits,
//! perplexity).
//!
//! Front ends talk to this crate only; it hides kernels and tensors.

mod batch;
pub mod bench;
mod sampling;
mod score;

pub use batch::{BatchDecoder, BatchItem};
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
    /// Load a GGUF model (or a Hugging Face checkpoint directory) and its
    /// tokenizer.
    pub fn load(path: impl AsRef<Path>, opts: &EngineOptions) -> Result<Self, EngineError> {
        let start = Instant::now();
        let file = model::open_model_file(path.as_ref())?;
        let mut engine = Self::from_file(Arc::new(file), opts)?;
        engine.load_time = start.elapsed();
        Ok(engine)
    }

    /// Build an engine on an already opened (or in-memory) GGUF: a converted
    /// checkpoint, or weights requantized at load.
    pub fn from_file(file: Arc<gguf::GgufFile>, opts: &EngineOptions) -> Result<Self, EngineError> {
        let start = Instant::now();
        let model = Model::from_gguf(
            file,
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

/// One step of a generation.
#[derive(Debug, Clone, Copy)]
pub struct Step<'a> {
    /// The id sampled in this step (on a final step that sampled nothing,
    /// the last id sampled before, if any).
    pub id: Option<u32>,
    /// Text that became safe to show with this step (may be empty).
    pub text: &'a str,
    /// Set when the generation has ended.
    pub finish: Option<FinishReason>,
}

/// A generation in progress, advanced a token at a time by
/// [`Session::step`]; it owns the text state, the session owns the cache.
#[derive(Debug)]
pub struct Decoding {
    opts: GenerateOptions,
    decoder: StreamDecoder,
    ids: Vec<u32>,
    text: String,
    piece: String,
    /// Bytes of `text` already handed out; the rest might start a stop string.
    emitted: usize,
    max_stop: usize,
    /// Sampled but not yet fed to the model.
    pending: Option<u32>,
    /// Prompt tokens still to evaluate (after the reused prefix), and how
    /// many of them are in.
    prefill: Vec<u32>,
    prefilled: usize,
    finish: Option<FinishReason>,
    evaluated: usize,
    reused: usize,
    prompt_time: Duration,
    gen_start: Instant,
}

impl Decoding {
    /// Why it ended, once it has.
    pub fn finish(&self) -> Option<FinishReason> {
        self.finish
    }

    /// Whether it has ended.
    pub fn is_done(&self) -> bool {
        self.finish.is_some()
    }

    /// Whether the whole prompt is in the cache.
    pub fn prefill_done(&self) -> bool {
        self.prefilled >= self.prefill.len()
    }

    /// Prompt tokens still to evaluate.
    pub fn prefill_left(&self) -> usize {
        self.prefill.len() - self.prefilled.min(self.prefill.len())
    }

    /// Ids sampled so far.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// Prompt tokens evaluated by `start` (after the reused prefix).
    pub fn prompt_tokens_evaluated(&self) -> usize {
        self.evaluated
    }

    /// Prompt tokens reused from the session's cache.
    pub fn prompt_tokens_reused(&self) -> usize {
        self.reused
    }

    /// Stop here because the caller asked to; no more text is emitted.
    pub fn cancel(&mut self) {
        if self.finish.is_none() {
            self.finish = Some(FinishReason::Cancelled);
            self.pending = None;
        }
    }

    /// End with `reason`, flushing the decoder's held bytes into the text so
    /// the step that ends it can hand out the rest.
    fn end(&mut self, reason: FinishReason) {
        self.pending = None;
        // As before the step API: an end-of-generation token with nothing
        // held back drops the decoder's incomplete bytes.
        if reason != FinishReason::Stop || self.emitted < self.text.len() {
            let tail = self.decoder.finish();
            self.text.push_str(&tail);
        }
        self.emitted = self.text.len();
        self.finish = Some(reason);
    }

    /// The finished (or cancelled) generation.
    pub fn into_generation(self) -> Generation {
        Generation {
            ids: self.ids,
            text: self.text,
            finish: self.finish.unwrap_or(FinishReason::Cancelled),
            prompt_tokens_evaluated: self.evaluated,
            prompt_tokens_reused: self.reused,
            prompt_time: self.prompt_time,
            gen_time: self.gen_start.elapsed(),
        }
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
        let shared = self.reuse_prefix(prompt);
        let rest = &prompt[shared..];
        self.forward_prompt(rest)?;
        Ok((rest.len(), shared))
    }

    /// Rewind the cache to the longest prefix it shares with `prompt` (when
    /// the cache can rewind that far; else clear it) and return its length.
    fn reuse_prefix(&mut self, prompt: &[u32]) -> usize {
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
        shared
    }

    /// Evaluate tokens after what the cache holds and record them; a failed
    /// batch leaves the cache in an unknown state, so it clears the session.
    fn forward_prompt(&mut self, ids: &[u32]) -> Result<(), EngineError> {
        if let Err(e) = self.model.forward(&mut self.cache, &mut self.scratch, ids) {
            self.reset();
            return Err(e.into());
        }
        self.tokens.extend_from_slice(ids);
        Ok(())
    }

    /// Append `ids` to what the session holds, with no prefix matching, and
    /// return the logits of the last one (the work of one llama-bench step).
    pub fn feed_batch(&mut self, ids: &[u32]) -> Result<&mut [f32], EngineError> {
        let needed = self.tokens.len() + ids.len();
        if needed > self.n_ctx() {
            return Err(EngineError::PromptTooLong {
                prompt: needed,
                n_ctx: self.n_ctx(),
            });
        }
        self.forward_prompt(ids)?;
        self.last_logits()
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
        let mut decoding = self.start(prompt, sampler, opts)?;
        loop {
            let step = self.step(&mut decoding, sampler)?;
            let done = step.finish.is_some();
            let wants_more = match step.id {
                Some(id) if !step.text.is_empty() || !done => on_token(TokenEvent {
                    id,
                    text: step.text,
                }),
                _ => true,
            };
            if done {
                break;
            }
            if !wants_more {
                decoding.cancel();
                break;
            }
        }
        Ok(decoding.into_generation())
    }

    /// Check the request and feed `prompt`, reusing the cached prefix: the
    /// first half of a step-wise generation that [`Session::step`] advances.
    pub fn start(
        &mut self,
        prompt: &[u32],
        sampler: &Sampler,
        opts: &GenerateOptions,
    ) -> Result<Decoding, EngineError> {
        let mut d = self.begin(prompt, sampler, opts)?;
        self.prefill(&mut d, usize::MAX)?;
        Ok(d)
    }

    /// Check the request and rewind the cache to the prefix it shares with
    /// `prompt`, evaluating nothing yet: [`Session::prefill`] then evaluates
    /// the rest in chunks, so a scheduler can interleave a long prompt with
    /// other sequences' decoding.
    pub fn begin(
        &mut self,
        prompt: &[u32],
        sampler: &Sampler,
        opts: &GenerateOptions,
    ) -> Result<Decoding, EngineError> {
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
        let reused = self.reuse_prefix(prompt);
        let rest = prompt[reused..].to_vec();
        Ok(Decoding {
            decoder: StreamDecoder::new(opts.render_special),
            ids: Vec::with_capacity(opts.max_tokens.min(4096)),
            text: String::new(),
            piece: String::new(),
            emitted: 0,
            max_stop: opts.stop.iter().map(|s| s.len()).max().unwrap_or(0),
            opts: opts.clone(),
            pending: None,
            finish: None,
            evaluated: rest.len(),
            reused,
            prefill: rest,
            prefilled: 0,
            prompt_time: Duration::ZERO,
            gen_start: Instant::now(),
        })
    }

    /// Evaluate up to `max_tokens` more prompt tokens of a generation made
    /// by [`Session::begin`]; returns whether the whole prompt is in.
    pub fn prefill(&mut self, d: &mut Decoding, max_tokens: usize) -> Result<bool, EngineError> {
        if d.prefilled < d.prefill.len() {
            let t0 = Instant::now();
            let end = d
                .prefill
                .len()
                .min(d.prefilled.saturating_add(max_tokens.max(1)));
            let chunk = &d.prefill[d.prefilled..end];
            if end == d.prefill.len() && chunk.len() > 1 {
                // The last prompt token goes alone. A prompt found in the
                // cache has its last token evaluated alone too, and long
                // batches take other kernels (rounded differently, then
                // amplified by 8-bit activations), so this keeps a seeded
                // sample the same whether the prompt was cached or not.
                self.forward_prompt(&chunk[..chunk.len() - 1])?;
                self.forward_prompt(&chunk[chunk.len() - 1..])?;
            } else {
                self.forward_prompt(chunk)?;
            }
            d.prefilled = end;
            d.prompt_time += t0.elapsed();
            if d.prefilled == d.prefill.len() {
                d.prefill = Vec::new();
                d.prefilled = 0;
                d.gen_start = Instant::now();
            }
        }
        Ok(d.prefill_done())
    }

    /// Advance a generation by one token: feed the token sampled last (if
    /// any), then sample the next one and apply the stop conditions.
    ///
    /// A batched scheduler would split this in two: one forward over the
    /// pending tokens of many sessions ([`Session::accept_pending`] here),
    /// then [`Session::sample_next`] for each.
    pub fn step<'d>(
        &mut self,
        d: &'d mut Decoding,
        sampler: &mut Sampler,
    ) -> Result<Step<'d>, EngineError> {
        self.prefill(d, usize::MAX)?;
        self.accept_pending(d)?;
        self.sample_next(d, sampler)
    }

    /// Feed the token that the last [`Session::sample_next`] produced into the
    /// cache, so the logits for the next one are ready. Ends the generation
    /// with `Length` when the context is full.
    pub fn accept_pending(&mut self, d: &mut Decoding) -> Result<(), EngineError> {
        let Some(id) = d.pending.take() else {
            return Ok(());
        };
        if d.finish.is_some() {
            return Ok(());
        }
        if self.tokens.len() + 1 > self.n_ctx() {
            // Full: `sample_next` ends the generation with `Length`.
            return Ok(());
        }
        self.forward_prompt(&[id])
    }

    /// Sample the next token from the current logits and apply the stop
    /// conditions; the returned text is what can be shown now.
    pub fn sample_next<'d>(
        &mut self,
        d: &'d mut Decoding,
        sampler: &mut Sampler,
    ) -> Result<Step<'d>, EngineError> {
        self.sample_from(d, sampler, None)
    }

    /// [`Session::sample_next`] from `logits` when given (this session's
    /// row of a batched step), else from the session's own last batch.
    fn sample_from<'d>(
        &mut self,
        d: &'d mut Decoding,
        sampler: &mut Sampler,
        logits: Option<&mut [f32]>,
    ) -> Result<Step<'d>, EngineError> {
        if d.finish.is_some() {
            return Ok(Step {
                id: None,
                text: "",
                finish: d.finish,
            });
        }
        if !d.prefill_done() {
            return Err(EngineError::InvalidRequest(
                "sample_next before the prompt was prefilled".into(),
            ));
        }
        if d.ids.len() >= d.opts.max_tokens || self.tokens.len() >= self.n_ctx() {
            let from = d.emitted;
            d.end(FinishReason::Length);
            return Ok(Step {
                id: d.ids.last().copied(),
                text: &d.text[from..],
                finish: d.finish,
            });
        }
        let logits = match logits {
            Some(row) => row,
            None => {
                let rows = self.scratch.batch();
                self.model
                    .logits(&mut self.scratch, rows.saturating_sub(1)..rows)?
            }
        };
        let id = sampler.sample(logits, &self.tokens);
        d.ids.push(id);
        let from = d.emitted;
        if d.opts.stop_on_eog && self.tokenizer.is_eog(id) {
            d.end(FinishReason::Stop);
            return Ok(Step {
                id: Some(id),
                text: &d.text[from..],
                finish: d.finish,
            });
        }
        d.piece.clear();
        d.decoder.push_into(&self.tokenizer, id, &mut d.piece);
        d.text.push_str(&d.piece);
        if let Some(cut) = find_stop(&d.text, &d.opts.stop, d.emitted) {
            d.text.truncate(cut);
            d.emitted = d.text.len();
            d.finish = Some(FinishReason::Stop);
            return Ok(Step {
                id: Some(id),
                text: &d.text[from.min(cut)..],
                finish: d.finish,
            });
        }
        // Emit what can no longer become part of a stop string.
        let safe = if d.max_stop == 0 {
            d.text.len()
        } else {
            floor_char_boundary(&d.text, d.text.len().saturating_sub(d.max_stop - 1)).max(from)
        };
        d.emitted = safe;
        d.pending = Some(id);
        Ok(Step {
            id: Some(id),
            text: &d.text[from..safe],
            finish: None,
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
            self.forward_prompt(chunk)?;
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
