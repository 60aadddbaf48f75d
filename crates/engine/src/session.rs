//! A session: one sequence's KV cache, buffers and the tokens it holds, with
//! the prefix cache (a new prompt reuses what it shares with the last one) and
//! teacher-forced scoring.

use crate::EngineError;
use model::{KvCache, Model, Scratch};
use std::sync::Arc;
use tokenizer::Tokenizer;

/// One sequence: its KV cache, buffers and the tokens it holds.
pub struct Session {
    pub(crate) model: Arc<Model>,
    pub(crate) tokenizer: Arc<Tokenizer>,
    pub(crate) cache: KvCache,
    pub(crate) scratch: Scratch,
    pub(crate) tokens: Vec<u32>,
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
    pub(crate) fn reuse_prefix(&mut self, prompt: &[u32]) -> usize {
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
    pub(crate) fn forward_prompt(&mut self, ids: &[u32]) -> Result<(), EngineError> {
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
