//! Speculative decoding: a cheap guess of the next few tokens (a draft) is
//! fed with the token sampled last in one batch, and the target model's
//! logits for every position of that batch come from one product with the
//! output head. The tokens sampled from those rows are kept up to the first
//! one that differs from the draft; the cache forgets the rest.
//!
//! A draft is deterministic (a lookup in the text so far, or a smaller
//! model's greedy choices), so sampling each
//! row with the generation's own sampler and comparing with the draft is the
//! standard acceptance rule for a point-mass proposal: a drafted token is
//! kept with exactly its target probability, and a rejected position gets a
//! draw from the target's distribution with the draft excluded. Each output
//! token costs one draw, as without speculation, and short batches compute
//! every row as a decode step does (same kernels, keys and values rounded
//! to the cache's type before they are attended to), so greedy and seeded
//! outputs are the same token for token as without it.

mod draft_model;

pub(crate) use draft_model::draft_vocab;
pub use draft_model::{DraftModel, DEFAULT_DRAFT_P_MIN, DRAFT_HEAD_ROWS};

use crate::{Decoding, Engine, EngineError, Sampler, Session, Step, TokenLogprob};
use std::collections::VecDeque;
use std::sync::Arc;

/// How a generation guesses tokens ahead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Speculation {
    /// Prompt lookup: the tokens that followed the last earlier occurrence
    /// of the text's last few tokens (no second model).
    Ngram(NgramOptions),
    /// A smaller model with the same vocabulary drafts greedily.
    Draft(DraftModel),
}

/// Settings of n-gram (prompt lookup) drafting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NgramOptions {
    /// Most tokens drafted at a time.
    pub max_draft: usize,
    /// Shortest suffix of the text looked up.
    pub min_ngram: usize,
    /// Longest suffix looked up (tried first).
    pub max_ngram: usize,
}

/// Most tokens a round drafts unless the caller says otherwise.
pub const DEFAULT_DRAFT: usize = 8;

impl Default for NgramOptions {
    fn default() -> Self {
        Self {
            max_draft: DEFAULT_DRAFT,
            min_ngram: 2,
            max_ngram: 4,
        }
    }
}

impl Speculation {
    /// The same drafter, drafting at most `n` tokens at a time.
    pub fn with_max_draft(&self, n: usize) -> Self {
        match self {
            Speculation::Ngram(o) => Speculation::Ngram(NgramOptions { max_draft: n, ..*o }),
            Speculation::Draft(d) => Speculation::Draft(DraftModel {
                max_draft: n,
                ..d.clone()
            }),
        }
    }

    /// The same drafter, a draft model drafting only guesses of probability
    /// `p_min` or more (n-gram drafting as it is).
    pub fn with_p_min(&self, p_min: f32) -> Self {
        match self {
            Speculation::Draft(d) => Speculation::Draft(DraftModel { p_min, ..d.clone() }),
            Speculation::Ngram(_) => self.clone(),
        }
    }

    /// This speculation for `target`: n-gram drafting as it is, a draft
    /// model only where its vocabulary is the target's (see
    /// [`DraftModel::new`]).
    pub fn for_target(&self, target: &Engine) -> Result<Self, EngineError> {
        match self {
            Speculation::Ngram(_) => Ok(self.clone()),
            Speculation::Draft(d) => Ok(Speculation::Draft(DraftModel {
                p_min: d.p_min,
                ..DraftModel::new(Arc::clone(&d.engine), target, d.max_draft)?
            })),
        }
    }

    /// Refuse settings that cannot draft (zero sizes, an empty n-gram range).
    pub fn validate(&self) -> Result<(), String> {
        match self {
            Speculation::Draft(d) if !(0.0..=1.0).contains(&d.p_min) => Err(format!(
                "a draft's least probability is between 0 and 1, got {}",
                d.p_min
            )),
            Speculation::Draft(d) => check_draft_len(d.max_draft),
            Speculation::Ngram(o) => {
                if o.max_draft == 0 || o.min_ngram == 0 || o.min_ngram > o.max_ngram {
                    return Err(format!(
                        "n-gram speculation needs a draft of at least 1 token and 1 <= min n-gram <= max n-gram (got draft {}, n-grams {}..{})",
                        o.max_draft, o.min_ngram, o.max_ngram
                    ));
                }
                check_draft_len(o.max_draft)
            }
        }
    }
}

fn check_draft_len(n: usize) -> Result<(), String> {
    match n {
        0 => Err("a draft needs at least 1 token".into()),
        n if n > MAX_DRAFT => Err(format!(
            "a draft of {n} tokens is more than the {MAX_DRAFT} a verifying batch takes"
        )),
        _ => Ok(()),
    }
}

/// Most tokens one round drafts: the verifying batch (one more row) stays
/// short enough that its products compute each row as a decode step does
/// ([`quant::ROW_BATCH_MAX`]; a batch of 16 took the panel product and a
/// greedy reply parted from the plain one), and the cache can always rewind
/// this far, a wrapped sliding-window ring included.
pub const MAX_DRAFT: usize = quant::ROW_BATCH_MAX - 1;

/// What speculation did in one generation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpecStats {
    /// Verifying batches that carried a draft.
    pub rounds: usize,
    /// Tokens drafted.
    pub drafted: usize,
    /// Drafted tokens the target kept.
    pub accepted: usize,
    /// Tokens the draft model was fed besides its own drafts: what its
    /// sequence did not hold yet of the prompt and the kept tokens.
    pub fed: usize,
}

impl SpecStats {
    /// Kept drafted tokens over drafted ones (0 when nothing was drafted).
    pub fn acceptance(&self) -> f64 {
        if self.drafted == 0 {
            0.0
        } else {
            self.accepted as f64 / self.drafted as f64
        }
    }
}

/// A generation's speculation: its drafter, and the tokens already verified
/// but not yet handed out.
pub(crate) struct SpecState {
    how: Speculation,
    /// Verified ids, with their log-probabilities when recorded. All but the
    /// last are in the cache.
    queue: VecDeque<(u32, Option<TokenLogprob>)>,
    draft: Vec<u32>,
    /// Most tokens the next round drafts: doubled after a round whose
    /// draft was kept whole, cut to one past what was kept after one that
    /// was not, so rows that would likely be thrown away are not computed.
    cap: usize,
    pub(crate) stats: SpecStats,
}

impl std::fmt::Debug for SpecState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpecState")
            .field("how", &self.how)
            .field("queued", &self.queue.len())
            .field("stats", &self.stats)
            .finish()
    }
}

impl SpecState {
    pub(crate) fn new(how: Speculation) -> Self {
        Self {
            how,
            queue: VecDeque::new(),
            draft: Vec::new(),
            cap: MAX_DRAFT,
            stats: SpecStats::default(),
        }
    }

    /// Whether the token just handed out has later verified ones after it
    /// (so it is in the cache already).
    pub(crate) fn holds_more(&self) -> bool {
        !self.queue.is_empty()
    }

    /// Into `out`, up to `limit` tokens guessed to follow `history`, for a
    /// target of `n_ctx` tokens of context whose draft model's sequence is
    /// kept in `drafter`.
    fn draft(
        &mut self,
        history: &[u32],
        limit: usize,
        n_ctx: usize,
        drafter: &mut Option<Box<Session>>,
        out: &mut Vec<u32>,
    ) -> Result<(), EngineError> {
        out.clear();
        match &self.how {
            Speculation::Ngram(o) => ngram_draft(history, o, limit.min(o.max_draft), out),
            Speculation::Draft(m) => {
                let limit = limit.min(m.max_draft);
                // The draft's context is the target's: the verifying batch
                // fits there, so the draft does too.
                let s = m.drafter(drafter, n_ctx);
                if limit == 0 || history.len() + limit > s.n_ctx() {
                    return Ok(());
                }
                self.stats.fed += s.feed(history)?.0;
                m.guess(s, limit, out)?;
            }
        }
        Ok(())
    }
}

/// Into `out`, up to `limit` tokens that followed the most recent earlier
/// occurrence of `history`'s last n tokens, for the longest n in
/// `o.min_ngram..=o.max_ngram` that occurs.
pub fn ngram_draft(history: &[u32], o: &NgramOptions, limit: usize, out: &mut Vec<u32>) {
    out.clear();
    let len = history.len();
    if limit == 0 {
        return;
    }
    for n in (o.min_ngram.max(1)..=o.max_ngram).rev() {
        if n >= len {
            continue;
        }
        let tail = &history[len - n..];
        // Starts before `len - n`: the occurrence is followed by a token.
        if let Some(start) = (0..len - n).rev().find(|&s| &history[s..s + n] == tail) {
            let from = start + n;
            out.extend_from_slice(&history[from..(from + limit).min(len)]);
            return;
        }
    }
}

impl Session {
    /// [`Session::step`] of a speculating generation: hand out the next
    /// verified token, or run a round (draft, one batch, verify) first.
    pub(crate) fn step_speculative<'d>(
        &mut self,
        d: &'d mut Decoding,
        sampler: &mut Sampler,
    ) -> Result<Step<'d>, EngineError> {
        let queued = d.spec_mut().and_then(|s| s.queue.pop_front());
        if let Some((id, logprob)) = queued {
            if d.is_done() {
                return self.sample_from(d, sampler, None);
            }
            // Where a plain decode would stop: its cache is full one token
            // before a round's verifying batch is.
            if d.tokens_left() == 0 || d.fed_len() >= self.n_ctx() {
                return Ok(d.end_at_length());
            }
            d.record_logprob(logprob);
            return Ok(d.take(id, &self.tokenizer));
        }
        let Some(pending) = d.pending() else {
            return self.sample_next(d, sampler);
        };
        let base = self.tokens.len();
        if d.is_done() || base + 1 > self.n_ctx() {
            // Nothing to verify: the plain step ends the generation.
            self.accept_pending(d)?;
            return self.sample_next(d, sampler);
        }
        d.take_pending();
        self.verify_round(d, sampler, pending, base)?;
        self.step_speculative(d, sampler)
    }

    /// Feed `pending` and a draft in one batch, sample each row until one
    /// differs from the draft, queue the sampled ids and rewind the cache
    /// past the rejected ones.
    fn verify_round(
        &mut self,
        d: &mut Decoding,
        sampler: &mut Sampler,
        pending: u32,
        base: usize,
    ) -> Result<(), EngineError> {
        let (tokens_left, logprobs) = (d.tokens_left(), d.logprobs_asked());
        let Some(spec) = d.spec_mut() else {
            return Ok(());
        };
        // Room: the context, the tokens still to produce (a round makes one
        // more than it drafts), and the scratch's batch.
        let limit = (self.n_ctx() - base - 1)
            .min(tokens_left.saturating_sub(1))
            .min(self.scratch.max_batch().saturating_sub(1))
            .min(spec.cap);
        let mut batch = std::mem::take(&mut spec.draft);
        let n_ctx = self.n_ctx();
        self.tokens.push(pending);
        let result = spec.draft(&self.tokens, limit, n_ctx, &mut self.drafter, &mut batch);
        self.tokens.pop();
        result?;
        let drafted = batch.len();
        batch.insert(0, pending);
        self.forward_prompt(&batch, &[])?;
        let vocab = self.model.config().vocab;
        let logits = self.model.logits(&mut self.scratch, 0..batch.len())?;
        for (j, row) in logits.chunks_exact_mut(vocab).enumerate() {
            let raw = logprobs.map(|top| (row.to_vec(), top));
            let id = sampler.sample(row, &self.tokens[..base + 1 + j]);
            let logprob = raw.map(|(raw, top)| crate::token_logprob(&raw, id, top));
            spec.queue.push_back((id, logprob));
            if batch.get(j + 1) != Some(&id) {
                break;
            }
        }
        let keep = base + spec.queue.len();
        if !self.cache.truncate(keep) {
            self.reset();
            return Err(EngineError::InvalidRequest(
                "the cache could not rewind past a rejected draft".into(),
            ));
        }
        self.tokens.truncate(keep);
        if drafted > 0 {
            let kept = spec.queue.len() - 1;
            spec.stats.rounds += 1;
            spec.stats.drafted += drafted;
            spec.stats.accepted += kept;
            spec.cap = if kept == drafted {
                (spec.cap * 2).min(MAX_DRAFT)
            } else {
                kept + 1
            };
        }
        batch.clear();
        spec.draft = batch;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ngram_draft_takes_what_followed_the_latest_longest_match() {
        let o = NgramOptions {
            max_draft: 3,
            min_ngram: 1,
            max_ngram: 3,
        };
        let mut out = Vec::new();
        // "1 2 3" occurred at 0 and 5; the later one wins.
        ngram_draft(&[1, 2, 3, 4, 9, 1, 2, 3, 5, 6, 7, 1, 2, 3], &o, 3, &mut out);
        assert_eq!(out, [5, 6, 7]);
        // The limit cuts the draft, and a match near the end gives what is left.
        ngram_draft(&[1, 2, 3, 4, 9, 1, 2, 3, 5, 6, 7, 1, 2, 3], &o, 2, &mut out);
        assert_eq!(out, [5, 6]);
        ngram_draft(&[7, 8, 7, 8], &o, 3, &mut out);
        assert_eq!(out, [7, 8]);
        // Only a shorter suffix occurs.
        ngram_draft(&[4, 2, 5, 1, 3, 2], &o, 3, &mut out);
        assert_eq!(out, [5, 1, 3]);
        // Nothing occurs, or nothing may be drafted.
        ngram_draft(&[1, 2, 3, 4], &o, 3, &mut out);
        assert!(out.is_empty());
        ngram_draft(&[1, 1, 1], &o, 0, &mut out);
        assert!(out.is_empty());
        ngram_draft(&[], &o, 3, &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn bad_settings_are_refused() {
        let ok = NgramOptions::default();
        assert!(Speculation::Ngram(ok).validate().is_ok());
        for bad in [
            NgramOptions { max_draft: 0, ..ok },
            NgramOptions { min_ngram: 0, ..ok },
            NgramOptions {
                min_ngram: 5,
                max_ngram: 4,
                ..ok
            },
            NgramOptions {
                max_draft: MAX_DRAFT + 1,
                ..ok
            },
        ] {
            assert!(Speculation::Ngram(bad).validate().is_err(), "{bad:?}");
        }
    }
}
