//! Generation: a [`Decoding`] advanced a token at a time over a [`Session`],
//! with sampling, stop strings, end-of-generation tokens and streaming of the
//! text that is safe to show.

use crate::decoding::Blocker;
use crate::{Decoding, EngineError, Generation, Sampler, Session};
use std::time::Instant;

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
    /// Draft tokens ahead and verify them in one batch (off under a
    /// constraint or with thinking on).
    pub speculation: Option<crate::Speculation>,
}

/// One streamed piece of output.
#[derive(Debug, Clone)]
pub struct TokenEvent<'a> {
    /// The sampled id.
    pub id: u32,
    /// Text that became complete with this token (may be empty).
    pub text: &'a str,
    /// Thought text that came with this token, when thinking is on.
    pub thought: &'a str,
}

/// One step of a generation.
#[derive(Debug, Clone, Copy)]
pub struct Step<'a> {
    /// The id sampled in this step (on a final step that sampled nothing,
    /// the last id sampled before, if any).
    pub id: Option<u32>,
    /// Text that became safe to show with this step (may be empty).
    pub text: &'a str,
    /// Thought text this step added, when thinking is on (may be empty).
    pub thought: &'a str,
    /// Set when the generation has ended.
    pub finish: Option<FinishReason>,
}

impl Session {
    /// Drives `decoding` (made by [`Session::begin`]) to its end, calling
    /// `on_token` for each token sampled; the callback returns `false` to
    /// cancel.
    pub fn run(
        &mut self,
        mut decoding: Decoding,
        sampler: &mut Sampler,
        mut on_token: impl FnMut(TokenEvent<'_>) -> bool,
    ) -> Result<Generation, EngineError> {
        loop {
            let step = self.step(&mut decoding, sampler)?;
            let done = step.finish.is_some();
            let wants_more = match step.id {
                Some(id) if !step.text.is_empty() || !step.thought.is_empty() || !done => {
                    on_token(TokenEvent {
                        id,
                        text: step.text,
                        thought: step.thought,
                    })
                }
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

    /// Evaluate up to `max_tokens` more prompt tokens of a generation made
    /// by [`Session::begin`]; returns whether the whole prompt is in.
    pub fn prefill(&mut self, d: &mut Decoding, max_tokens: usize) -> Result<bool, EngineError> {
        let (prefill, prefilled, images) = d.prefill_state();
        if prefilled < prefill.len() {
            let t0 = Instant::now();
            // Prompt positions of the chunk: the session holds the rest.
            let base = self.tokens.len() - prefilled;
            let end = crate::session::batch_end(
                base + prefilled,
                base + prefill.len(),
                max_tokens,
                self.scratch.max_batch(),
                images,
            )? - base;
            let chunk = &prefill[prefilled..end];
            let last_is_image = images.last().is_some_and(|i| i.end() == base + end);
            if end == prefill.len() && chunk.len() > 1 && !last_is_image {
                // The last prompt token goes alone. A prompt found in the
                // cache has its last token evaluated alone too, and long
                // batches take other kernels (rounded differently, then
                // amplified by 8-bit activations), so this keeps a seeded
                // sample the same whether the prompt was cached or not.
                self.forward_prompt(&chunk[..chunk.len() - 1], images)?;
                self.forward_prompt(&chunk[chunk.len() - 1..], images)?;
            } else {
                self.forward_prompt(chunk, images)?;
            }
            d.prefilled_through(end, t0.elapsed());
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
        if d.speculates() {
            return self.step_speculative(d, sampler);
        }
        self.accept_pending(d)?;
        self.sample_next(d, sampler)
    }

    /// Feed the token that the last [`Session::sample_next`] produced into the
    /// cache, so the logits for the next one are ready. Ends the generation
    /// with `Length` when the context is full.
    pub fn accept_pending(&mut self, d: &mut Decoding) -> Result<(), EngineError> {
        let Some(id) = d.take_pending() else {
            return Ok(());
        };
        if self.tokens.len() + 1 > self.n_ctx() {
            // Full: `sample_next` ends the generation with `Length`.
            return Ok(());
        }
        self.forward_prompt(&[id], &[])
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
    pub(crate) fn sample_from<'d>(
        &mut self,
        d: &'d mut Decoding,
        sampler: &mut Sampler,
        logits: Option<&mut [f32]>,
    ) -> Result<Step<'d>, EngineError> {
        match d.blocker(self.tokens.len() >= self.n_ctx()) {
            Some(Blocker::Ended) => return Ok(d.ended()),
            Some(Blocker::Length) => return Ok(d.end_at_length()),
            Some(Blocker::NotPrefilled) => {
                return Err(EngineError::InvalidRequest(
                    "sample_next before the prompt was prefilled".into(),
                ))
            }
            None => {}
        }
        let logits = match logits {
            Some(row) => row,
            None => {
                let rows = self.scratch.batch();
                self.model
                    .logits(&mut self.scratch, rows.saturating_sub(1)..rows)?
            }
        };
        let id = d.draw(sampler, logits, &self.tokens)?;
        Ok(d.take(id, &self.tokenizer))
    }
}
