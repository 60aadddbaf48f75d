//! A generation in progress ([`Decoding`]) and its state machine: the
//! prompt still to prefill, the token to feed, how the next token is drawn
//! (a forced thought close, the grammar, the thought channel), the text it
//! makes and when it stops (end-of-generation tokens, stop strings, a
//! complete grammar, the limits); what it produced ([`Generation`]). Its
//! fields are its own: the session (`generate.rs`, `speculate.rs`,
//! `batch.rs`) runs the model and moves it only through these methods.

use crate::thinking::{ThinkState, Thinking};
use crate::{
    Constraint, ConstraintStats, EngineError, FinishReason, GenerateOptions, PromptMedia, Sampler,
    Step, TokenLogprob,
};
use std::time::{Duration, Instant};
use tokenizer::{StreamDecoder, Tokenizer};

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
    /// What the constraint cost, when the output had one.
    pub constraint: Option<ConstraintStats>,
    /// The thought, when thinking was on (may be empty).
    pub thought: Option<String>,
    /// What speculation drafted and kept, when it was on.
    pub speculation: Option<crate::SpecStats>,
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

/// A generation in progress, advanced a token at a time by
/// [`Session::step`](crate::Session::step); it owns the text state, the
/// session owns the cache.
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
    /// The prompt's images (positions in the whole prompt).
    images: Vec<PromptMedia>,
    finish: Option<FinishReason>,
    evaluated: usize,
    reused: usize,
    prompt_time: Duration,
    gen_start: Instant,
    /// The grammar the output must match, if any.
    constraint: Option<Constraint>,
    /// The thought channel, when thinking is on.
    think: Option<ThinkState>,
    /// Which of `opts.stop` ended the generation, if one did.
    stopped_by: Option<usize>,
    /// With how many alternatives each sampled token's log-probability is
    /// recorded, when it is.
    logprobs: Option<usize>,
    /// The recorded log-probabilities not yet taken.
    log: Vec<crate::TokenLogprob>,
    /// Speculation, when the options ask for it.
    spec: Option<crate::speculate::SpecState>,
}

/// What stands before sampling a token ([`Decoding::blocker`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Blocker {
    /// The generation has ended.
    Ended,
    /// The token limit or the context is reached: it ends with `Length`.
    Length,
    /// The prompt is not in yet.
    NotPrefilled,
}

/// How a [`Decoding`] starts: its options, the prompt tokens still to
/// evaluate after `reused` were found in the cache, the prompt's media,
/// the grammar, the thought channel and the log-probabilities asked for.
pub(crate) struct Start<'a> {
    pub(crate) opts: &'a GenerateOptions,
    pub(crate) rest: Vec<u32>,
    pub(crate) reused: usize,
    pub(crate) media: &'a [PromptMedia],
    pub(crate) constraint: Option<Constraint>,
    pub(crate) thinking: Option<Thinking>,
    pub(crate) logprobs: Option<usize>,
}

impl Decoding {
    /// A generation that has evaluated nothing yet.
    pub(crate) fn new(start: Start<'_>) -> Self {
        let opts = start.opts;
        Self {
            decoder: StreamDecoder::new(opts.render_special),
            ids: Vec::with_capacity(opts.max_tokens.min(4096)),
            text: String::new(),
            piece: String::new(),
            emitted: 0,
            max_stop: opts.stop.iter().map(|s| s.len()).max().unwrap_or(0),
            opts: opts.clone(),
            pending: None,
            finish: None,
            evaluated: start.rest.len(),
            reused: start.reused,
            prefill: start.rest,
            prefilled: 0,
            images: start.media.to_vec(),
            prompt_time: Duration::ZERO,
            gen_start: Instant::now(),
            constraint: start.constraint,
            think: start.thinking.map(ThinkState::new),
            stopped_by: None,
            logprobs: start.logprobs,
            log: Vec::new(),
            spec: opts
                .speculation
                .clone()
                .map(crate::speculate::SpecState::new),
        }
    }

    /// The prompt tokens still to evaluate, how many of them are in, and
    /// the prompt's media (positions in the whole prompt).
    pub(crate) fn prefill_state(&self) -> (&[u32], usize, &[PromptMedia]) {
        (&self.prefill, self.prefilled, &self.images)
    }

    /// The prompt is in through `end` of its remaining tokens, which took
    /// `took`; once all of it is, generation's clock starts.
    pub(crate) fn prefilled_through(&mut self, end: usize, took: Duration) {
        self.prefilled = end;
        self.prompt_time += took;
        if self.prefilled == self.prefill.len() {
            self.prefill = Vec::new();
            self.prefilled = 0;
            self.gen_start = Instant::now();
        }
    }

    /// The token sampled last and not yet fed, taken: `None` when there is
    /// none or the generation has ended.
    pub(crate) fn take_pending(&mut self) -> Option<u32> {
        let id = self.pending.take();
        id.filter(|_| self.finish.is_none())
    }

    /// The token to feed, left in place.
    pub(crate) fn pending(&self) -> Option<u32> {
        self.pending
    }

    /// How many more tokens the options allow.
    pub(crate) fn tokens_left(&self) -> usize {
        self.opts.max_tokens.saturating_sub(self.ids.len())
    }

    /// What stands before sampling a token, if anything: the end has come,
    /// the token limit is reached or `context_full`, or the prompt is not
    /// in yet.
    pub(crate) fn blocker(&self, context_full: bool) -> Option<Blocker> {
        if self.finish.is_some() {
            Some(Blocker::Ended)
        } else if !self.prefill_done() {
            Some(Blocker::NotPrefilled)
        } else if self.ids.len() >= self.opts.max_tokens || context_full {
            Some(Blocker::Length)
        } else {
            None
        }
    }

    /// The step of a generation that has ended: nothing more.
    pub(crate) fn ended(&self) -> Step<'_> {
        Step {
            id: None,
            text: "",
            thought: "",
            finish: self.finish,
        }
    }

    /// Draw the next token from `logits` after `history`: the thought's
    /// close when its budget is spent, else under the grammar (which holds
    /// the answer, not the thought), else freely; its log-probability
    /// recorded when asked for.
    pub(crate) fn draw(
        &mut self,
        sampler: &mut Sampler,
        logits: &mut [f32],
        history: &[u32],
    ) -> Result<u32, EngineError> {
        // The model's own distribution, before the sampler changes it.
        let raw = self.logprobs.map(|_| logits.to_vec());
        let forced = self.think.as_ref().and_then(ThinkState::forced);
        let thinking = self.think.as_ref().is_some_and(ThinkState::thinking);
        let id = match (forced, self.constraint.as_mut()) {
            (Some(id), _) => id,
            (None, None) => sampler.sample(logits, history),
            (None, Some(c)) if thinking => {
                // Draw freely, and under the grammar only when the first
                // token does not open the thought channel.
                sampler.prepare(logits, history);
                let id = sampler.pick(logits);
                let opens = self.think.as_ref().is_some_and(|t| id == t.spec.open);
                let before = self.think.as_ref().is_some_and(ThinkState::before);
                if before && !opens {
                    c.sample(sampler, logits)?
                } else {
                    id
                }
            }
            (None, Some(c)) => {
                sampler.prepare(logits, history);
                c.sample(sampler, logits)?
            }
        };
        if let (Some(top), Some(raw)) = (self.logprobs, raw) {
            self.log.push(crate::token_logprob(&raw, id, top));
        }
        Ok(id)
    }

    /// With how many alternatives log-probabilities are recorded, when
    /// they are.
    pub(crate) fn logprobs_asked(&self) -> Option<usize> {
        self.logprobs
    }

    /// Record a token's log-probability worked out elsewhere (a verified
    /// draft's).
    pub(crate) fn record_logprob(&mut self, lp: Option<TokenLogprob>) {
        self.log.extend(lp);
    }

    /// Speculation's state, when it is on.
    pub(crate) fn spec_mut(&mut self) -> Option<&mut crate::speculate::SpecState> {
        self.spec.as_mut()
    }

    /// Add the sampled `id` and apply the stop conditions; the returned
    /// step's text is what can be shown now.
    pub(crate) fn take(&mut self, id: u32, tokenizer: &Tokenizer) -> Step<'_> {
        self.ids.push(id);
        let eog = tokenizer.is_eog(id);
        if let Some(from) = self.take_thought(id, eog, tokenizer) {
            let thought = self.think.as_ref().map_or("", |t| &t.text[from..]);
            return Step {
                id: Some(id),
                text: "",
                thought,
                finish: None,
            };
        }
        let from = self.emitted;
        // Under a grammar an end-of-generation token is only drawn where the
        // output may end, and it always ends it.
        if (self.opts.stop_on_eog || self.constraint.is_some()) && eog {
            self.end(FinishReason::Stop);
            return self.ended_step(id, from);
        }
        self.piece.clear();
        self.decoder.push_into(tokenizer, id, &mut self.piece);
        self.text.push_str(&self.piece);
        if let Some((cut, which)) = find_stop(&self.text, &self.opts.stop, self.emitted) {
            self.stopped_by = Some(which);
            self.text.truncate(cut);
            self.emitted = self.text.len();
            self.finish = Some(FinishReason::Stop);
            return self.ended_step(id, from.min(cut));
        }
        if self.constraint.as_ref().is_some_and(Constraint::is_done) {
            // The grammar is complete and allows nothing more.
            let tail = self.decoder.finish();
            self.text.push_str(&tail);
            self.end(FinishReason::Stop);
            return self.ended_step(id, from);
        }
        // Emit what can no longer become part of a stop string.
        let safe = if self.max_stop == 0 {
            self.text.len()
        } else {
            floor_char_boundary(
                &self.text,
                self.text.len().saturating_sub(self.max_stop - 1),
            )
            .max(from)
        };
        self.emitted = safe;
        self.pending = self.unfed(id);
        Step {
            id: Some(id),
            text: &self.text[from..safe],
            thought: "",
            finish: None,
        }
    }

    /// `id` (an end-of-generation token or not) into the thought, when it
    /// belongs there: where in the thought's text the piece it adds begins.
    fn take_thought(&mut self, id: u32, eog: bool, tokenizer: &Tokenizer) -> Option<usize> {
        if eog {
            return None;
        }
        let t = self.think.as_mut()?;
        let from = t.text.len();
        t.take(id, tokenizer)?;
        self.pending = self.unfed(id);
        Some(from)
    }

    /// The step that ends with `id`, handing out the text from `from`.
    fn ended_step(&self, id: u32, from: usize) -> Step<'_> {
        Step {
            id: Some(id),
            text: &self.text[from..],
            thought: "",
            finish: self.finish,
        }
    }

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

    /// The log-probabilities recorded since the last call.
    pub fn take_logprobs(&mut self) -> Vec<crate::TokenLogprob> {
        std::mem::take(&mut self.log)
    }

    /// The stop string that ended the generation, if one did.
    pub fn stop_string(&self) -> Option<&str> {
        self.stopped_by
            .and_then(|k| self.opts.stop.get(k))
            .map(String::as_str)
    }

    /// Time spent on the prompt, and since generation began.
    pub fn timings(&self) -> (Duration, Duration) {
        (self.prompt_time, self.gen_start.elapsed())
    }

    /// The thought so far, when thinking is on.
    pub fn thought(&self) -> Option<&str> {
        self.think.as_ref().map(|t| t.text.as_str())
    }

    /// What the constraint cost so far, when there is one.
    pub fn constraint_stats(&self) -> Option<ConstraintStats> {
        self.constraint.as_ref().map(Constraint::stats)
    }

    /// What speculation drafted and kept so far, when it is on.
    pub fn spec_stats(&self) -> Option<crate::SpecStats> {
        self.spec.as_ref().map(|s| s.stats)
    }

    /// Whether this generation speculates: asked to, and neither under a
    /// constraint nor thinking (those decode a token at a time).
    pub(crate) fn speculates(&self) -> bool {
        self.spec.is_some() && self.constraint.is_none() && self.think.is_none()
    }

    /// `id` as the token still to feed, unless speculation verified it
    /// with later ones (then the cache holds it already).
    pub(crate) fn unfed(&self, id: u32) -> Option<u32> {
        match &self.spec {
            Some(s) if s.holds_more() => None,
            _ => Some(id),
        }
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
    pub(crate) fn end(&mut self, reason: FinishReason) {
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

    /// End with `Length` (the token limit or the context is reached),
    /// handing out the text held back.
    pub(crate) fn end_at_length(&mut self) -> crate::Step<'_> {
        let from = self.emitted;
        self.end(FinishReason::Length);
        crate::Step {
            id: self.ids.last().copied(),
            text: &self.text[from..],
            thought: "",
            finish: self.finish,
        }
    }

    /// End now with `Length` (a time limit ran out), handing out the text
    /// held back for stop strings; a generation that has ended already
    /// stays as it is.
    pub fn end_with_length(&mut self) -> Step<'_> {
        let from = self.emitted;
        if self.finish.is_none() {
            self.end(FinishReason::Length);
        }
        Step {
            id: self.ids.last().copied(),
            text: &self.text[from.min(self.text.len())..],
            thought: "",
            finish: self.finish,
        }
    }

    /// Tokens a plain decode would hold in the cache now: the prompt and
    /// every sampled id (speculation may hold verified ones beyond).
    pub(crate) fn fed_len(&self) -> usize {
        self.reused + self.evaluated + self.ids.len()
    }

    /// The finished (or cancelled) generation.
    pub fn into_generation(self) -> Generation {
        let constraint = self.constraint_stats();
        Generation {
            constraint,
            speculation: self.spec_stats(),
            thought: self.think.map(|t| t.text),
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

/// The byte offset of the first stop string in `text` that ends after
/// `from`, and which of `stops` it is.
pub(crate) fn find_stop(text: &str, stops: &[String], from: usize) -> Option<(usize, usize)> {
    stops
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.is_empty())
        .filter_map(|(k, s)| {
            let search_from = floor_char_boundary(text, from.saturating_sub(s.len()));
            text[search_from..]
                .find(s.as_str())
                .map(|i| (search_from + i, k))
        })
        .min()
}

pub(crate) fn floor_char_boundary(s: &str, mut i: usize) -> usize {
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
        assert_eq!(find_stop("abc END more", &stops, 5), Some((4, 0)));
        assert_eq!(find_stop("a\n\nb", &stops, 0), Some((1, 1)));
        assert_eq!(find_stop("héllo", &["l".into()], 2), Some((3, 0)));
    }

    #[test]
    fn char_boundaries() {
        assert_eq!(floor_char_boundary("é", 1), 0);
        assert_eq!(floor_char_boundary("ab", 9), 2);
    }
}
