//! A generation in progress ([`Decoding`]): the text state it owns, its
//! accessors and options, what it produced ([`Generation`]), and the
//! stop-string search; the session that advances it is in `generate.rs`.

use crate::thinking::ThinkState;
use crate::{Constraint, ConstraintStats, FinishReason, GenerateOptions, PromptMedia};
use std::time::{Duration, Instant};
use tokenizer::StreamDecoder;

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
    pub(crate) opts: GenerateOptions,
    pub(crate) decoder: StreamDecoder,
    pub(crate) ids: Vec<u32>,
    pub(crate) text: String,
    pub(crate) piece: String,
    /// Bytes of `text` already handed out; the rest might start a stop string.
    pub(crate) emitted: usize,
    pub(crate) max_stop: usize,
    /// Sampled but not yet fed to the model.
    pub(crate) pending: Option<u32>,
    /// Prompt tokens still to evaluate (after the reused prefix), and how
    /// many of them are in.
    pub(crate) prefill: Vec<u32>,
    pub(crate) prefilled: usize,
    /// The prompt's images (positions in the whole prompt).
    pub(crate) images: Vec<PromptMedia>,
    pub(crate) finish: Option<FinishReason>,
    pub(crate) evaluated: usize,
    pub(crate) reused: usize,
    pub(crate) prompt_time: Duration,
    pub(crate) gen_start: Instant,
    /// The grammar the output must match, if any.
    pub(crate) constraint: Option<Constraint>,
    /// The thought channel, when thinking is on.
    pub(crate) think: Option<ThinkState>,
    /// Which of `opts.stop` ended the generation, if one did.
    pub(crate) stopped_by: Option<usize>,
    /// With how many alternatives each sampled token's log-probability is
    /// recorded, when it is.
    pub(crate) logprobs: Option<usize>,
    /// The recorded log-probabilities not yet taken.
    pub(crate) log: Vec<crate::TokenLogprob>,
    /// Speculation, when the options ask for it.
    pub(crate) spec: Option<crate::speculate::SpecState>,
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
