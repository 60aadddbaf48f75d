//! A session: one sequence's KV cache, buffers and the tokens it holds, with
//! the prefix cache (a new prompt reuses what it shares with the last one) and
//! teacher-forced scoring.

use crate::saved::MediaSpan;
use crate::{EngineError, PromptMedia};
use model::{Embedded, KvCache, Model, Scratch};
use std::sync::Arc;
use tokenizer::Tokenizer;

/// One sequence: its KV cache, buffers and the tokens it holds.
pub struct Session {
    pub(crate) model: Arc<Model>,
    pub(crate) tokenizer: Arc<Tokenizer>,
    pub(crate) cache: KvCache,
    pub(crate) scratch: Scratch,
    pub(crate) tokens: Vec<u32>,
    /// The images among `tokens`, in order.
    pub(crate) images: Vec<PromptMedia>,
    /// A draft model's sequence, from the last generation that speculated
    /// with one: kept, so that the next one feeds it only what is new.
    pub(crate) drafter: Option<Box<Session>>,
}

impl Session {
    /// The context size.
    pub fn n_ctx(&self) -> usize {
        self.cache.n_ctx()
    }

    /// Whether this session runs `model` (so its rows can share a batch
    /// with others of it).
    pub(crate) fn runs(&self, model: &Arc<Model>) -> bool {
        Arc::ptr_eq(&self.model, model)
    }

    /// Whether the context has room for another token.
    pub(crate) fn has_room(&self) -> bool {
        self.tokens.len() < self.n_ctx()
    }

    /// The last row its own buffers hold (a prompt's last hidden state,
    /// waiting for the head), when they hold one.
    pub(crate) fn last_hidden(&self) -> Option<&[f32]> {
        self.scratch.hidden(self.scratch.batch().checked_sub(1)?)
    }

    /// This session's share of a batched forward step: `tokens` into its
    /// cache.
    pub(crate) fn batch_input<'a>(&'a mut self, tokens: &'a [u32]) -> model::SeqInput<'a> {
        model::SeqInput {
            cache: &mut self.cache,
            tokens,
            embedded: &[],
        }
    }

    /// `id` went into the cache in a batched forward step.
    pub(crate) fn fed(&mut self, id: u32) {
        self.tokens.push(id);
    }

    /// Take `other`'s cache (its ids, images, keys and values) as this
    /// session's, so a generation sharing its prompt starts without
    /// prefilling it again. Sessions of different models or context sizes
    /// are left as they are; returns whether the copy happened.
    pub fn copy_cache_from(&mut self, other: &Session) -> bool {
        if !Arc::ptr_eq(&self.model, &other.model) || self.n_ctx() != other.n_ctx() {
            return false;
        }
        self.cache.clone_from(&other.cache);
        self.tokens.clone_from(&other.tokens);
        self.images.clone_from(&other.images);
        true
    }

    /// [`Session::prefill`] in `lent`'s buffers (see
    /// [`crate::Engine::slot_session`]): they are this session's for the
    /// chunk, and the prompt's last row stays here for the first sample.
    pub fn prefill_in(
        &mut self,
        d: &mut crate::Decoding,
        max_tokens: usize,
        lent: &mut Scratch,
    ) -> Result<bool, EngineError> {
        std::mem::swap(&mut self.scratch, lent);
        // The buffers go back to their owner even when the chunk panics.
        let filled =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.prefill(d, max_tokens)));
        std::mem::swap(&mut self.scratch, lent);
        let filled = filled.unwrap_or_else(|p| std::panic::resume_unwind(p));
        self.scratch.adopt_last_row(lent);
        filled
    }

    /// Tokens currently in the cache.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Forget everything.
    pub fn reset(&mut self) {
        self.cache.clear();
        self.tokens.clear();
        self.images.clear();
    }

    /// Make the cache hold exactly `prompt`, reusing the longest shared prefix
    /// when the cache allows rewinding to it. Returns (evaluated, reused).
    pub fn feed(&mut self, prompt: &[u32]) -> Result<(usize, usize), EngineError> {
        self.feed_images(prompt, &[])
    }

    /// [`Session::feed`] for a prompt holding `images` (see
    /// [`crate::Engine::image_prompt`]): a cached prefix is reused only up to
    /// the first image that differs.
    pub fn feed_images(
        &mut self,
        prompt: &[u32],
        images: &[PromptMedia],
    ) -> Result<(usize, usize), EngineError> {
        if prompt.len() > self.n_ctx() {
            return Err(EngineError::PromptTooLong {
                prompt: prompt.len(),
                n_ctx: self.n_ctx(),
            });
        }
        let shared = self.reuse_prefix(prompt, images);
        self.forward_prompt(&prompt[shared..], images)?;
        Ok((prompt.len() - shared, shared))
    }

    /// Rewind the cache to the longest prefix it shares with `prompt` and
    /// its `images` (when the cache can rewind that far; else clear it) and
    /// return its length. The same ids with a different picture are not
    /// shared, and an image is never cut: its tokens go in one batch.
    pub(crate) fn reuse_prefix(&mut self, prompt: &[u32], images: &[PromptMedia]) -> usize {
        let wanted: Vec<MediaSpan> = images.iter().map(PromptMedia::span).collect();
        let mut shared = self.reusable(prompt, &wanted);
        if !self.cache.truncate(shared) {
            self.cache.clear();
            shared = 0;
        }
        self.tokens.truncate(shared);
        self.images.retain(|i| i.end() <= shared);
        shared
    }

    /// Evaluate `ids` after what the cache holds and record them, with the
    /// images of the whole prompt `images` (positions in the session's
    /// tokens; those outside `ids` are skipped). A failed batch leaves the
    /// cache in an unknown state, so it clears the session.
    pub(crate) fn forward_prompt(
        &mut self,
        ids: &[u32],
        images: &[PromptMedia],
    ) -> Result<(), EngineError> {
        let base = self.tokens.len();
        let end = base + ids.len();
        // Items in this batch, whole or in part: only a causal item (a
        // clip) may be cut between batches, its rows fed a part at a time.
        let here: Vec<&PromptMedia> = images
            .iter()
            .filter(|i| i.pos < end && i.end() > base)
            .collect();
        if let Some(i) = here
            .iter()
            .find(|i| i.item.bidirectional && (i.pos < base || i.end() > end))
        {
            self.reset();
            return Err(EngineError::InvalidRequest(format!(
                "a batch would cut the image at tokens {}..{}",
                i.pos,
                i.end()
            )));
        }
        let max = self.scratch.max_batch();
        if let Some(i) = here
            .iter()
            .find(|i| i.item.bidirectional && i.item.tokens > max)
        {
            self.reset();
            return Err(EngineError::InvalidRequest(format!(
                "an image takes {} tokens, more than the batch of {max} (raise --batch)",
                i.item.tokens
            )));
        }
        let spans: Vec<Embedded<'_>> = here.iter().map(|i| i.part_in(base..end)).collect();
        let result = self
            .model
            .forward_embedded(&mut self.cache, &mut self.scratch, ids, &spans);
        if let Err(e) = result {
            self.reset();
            return Err(e.into());
        }
        self.tokens.extend_from_slice(ids);
        // An item is the session's once its last row is in.
        self.images
            .extend(here.into_iter().filter(|i| i.end() <= end).cloned());
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
        self.forward_prompt(ids, &[])?;
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
        each: impl FnMut(usize, &[f32]),
    ) -> Result<(), EngineError> {
        self.score_images(ids, &[], each)
    }

    /// [`Session::score`] for a sequence holding `images`.
    pub fn score_images(
        &mut self,
        ids: &[u32],
        images: &[PromptMedia],
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
        let mut done = 0;
        while done < ids.len() {
            let end = batch_end(done, ids.len(), batch, batch, images)?;
            let chunk = &ids[done..end];
            self.forward_prompt(chunk, images)?;
            for start in (0..chunk.len()).step_by(ROWS) {
                let stop = (start + ROWS).min(chunk.len());
                let logits = self.model.logits(&mut self.scratch, start..stop)?;
                for (r, row) in logits.chunks_exact(vocab).enumerate() {
                    each(done + start + r, row);
                }
            }
            done = end;
        }
        Ok(())
    }
}

/// Where a batch of about `want` tokens starting at `start` (of `len`)
/// ends: before an image it would cut, or, when the image starts the batch,
/// after the whole image, which must fit the scratch's `max_batch`.
pub(crate) fn batch_end(
    start: usize,
    len: usize,
    want: usize,
    max_batch: usize,
    images: &[PromptMedia],
) -> Result<usize, EngineError> {
    let end = start.saturating_add(want.max(1)).min(len);
    match images.iter().find(|i| i.pos < end && i.end() > end) {
        // A clip's rows are causal: a batch may end inside it.
        Some(i) if !i.item.bidirectional => Ok(end),
        Some(i) if i.pos > start => Ok(i.pos),
        Some(i) if i.item.tokens > max_batch => Err(EngineError::InvalidRequest(format!(
            "an image takes {} tokens, more than the batch of {max_batch} (raise --batch)",
            i.item.tokens
        ))),
        Some(i) => Ok(i.end()),
        None => Ok(end),
    }
}
