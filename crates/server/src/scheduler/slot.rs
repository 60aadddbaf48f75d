//! A scheduler slot (a session and the job it runs) and what happens to
//! one: admitted, prefilled, forked, handed each step's output, finished.

use super::{Event, Job, Shared, SlotCache, Usage};
use crate::error::ApiError;
use crate::metrics::Metrics;
use engine::{Decoding, EngineError, FinishReason, GenerationRequest, Sampler, Scratch, Session};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;

/// A job in a slot: its sampler and its generation's state.
pub(super) struct Active {
    pub(super) job: Job,
    pub(super) sampler: Sampler,
    pub(super) decoding: Decoding,
}

/// A session and the job it runs, if any.
pub(super) struct Slot {
    pub(super) session: Session,
    pub(super) active: Option<Active>,
    /// When the slot last took a job (a counter): the least recently used
    /// slot is the one to overwrite when no cached prefix helps.
    pub(super) last_used: u64,
    /// The caller whose conversation the session holds ([`Job::cache_scope`]):
    /// another caller's job starts from an empty session.
    pub(super) scope: Option<[u8; 32]>,
    /// Whether the session holds a finished generation's state not yet in
    /// the store: it goes there when the slot is idle, or before another
    /// conversation takes the slot (not before the same conversation's next
    /// turn, which leaves a longer one).
    pub(super) unsaved: bool,
}

/// Puts the slot's finished state in the store, if it has one not there.
pub(super) fn save_unsaved(slot: &mut Slot, cache: Option<&SlotCache>) {
    if std::mem::take(&mut slot.unsaved) {
        if let Some(cache) = cache {
            slot.session.leave_in(&cache.scoped(slot.scope.as_ref()));
        }
    }
}

fn shared_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// The free slot for `job`: the longest cached prefix of its caller's,
/// then the least recently used.
pub(super) fn pick_slot(slots: &[Slot], free: &[bool], job: &Job) -> Option<usize> {
    slots
        .iter()
        .enumerate()
        .filter(|(i, _)| free[*i])
        .max_by_key(|(_, s)| {
            let shared = match s.scope == job.cache_scope {
                true => shared_prefix(s.session.tokens(), &job.prompt),
                false => 0,
            };
            (shared, std::cmp::Reverse(s.last_used))
        })
        .map(|(i, _)| i)
}

/// Tells a job's client it was cancelled because the server is shutting
/// down.
pub(super) fn cancel(events: &tokio::sync::mpsc::UnboundedSender<Event>, metrics: &Metrics) {
    let _ = events.send(Event::Failed(ApiError::unavailable(
        "The server is shutting down.",
        5,
    )));
    metrics.cancelled.fetch_add(1, Ordering::Relaxed);
}

/// Prompt tokens the slot's job still has to prefill (none without a job).
pub(super) fn prefill_left(slot: &Slot) -> usize {
    slot.active
        .as_ref()
        .map_or(0, |a| a.decoding.prefill_left())
}

/// Prefills up to `chunk` more prompt tokens of the slot's job, if it has
/// one still prefilling, in the `lent` buffers; returns whether its prompt
/// just went in and it has forks to start. A failure ends the job.
pub(super) fn prefill_slot(
    slot: &mut Slot,
    chunk: usize,
    lent: &mut Scratch,
    metrics: &Metrics,
) -> bool {
    let Some(active) = slot.active.as_mut() else {
        return false;
    };
    if active.decoding.prefill_done() {
        return false;
    }
    let session = &mut slot.session;
    let filled = catch_unwind(AssertUnwindSafe(|| {
        session.prefill_in(&mut active.decoding, chunk, lent)
    }));
    match filled {
        Ok(Ok(true)) => {
            let _ = active.job.events.send(Event::Started);
            return !active.job.forks.is_empty();
        }
        Ok(Ok(false)) => {}
        Ok(Err(e)) => {
            let _ = active.job.events.send(Event::Failed(engine_error(&e)));
            slot.active = None;
        }
        Err(_) => {
            metrics.panics.fetch_add(1, Ordering::Relaxed);
            let _ = active.job.events.send(Event::Failed(ApiError::internal(
                "internal error during prefill",
            )));
            slot.active = None;
            slot.session.reset();
        }
    }
    false
}

/// Sends what one decode step produced for the slot's job (its
/// log-probabilities, thought and text) and ends the job where it
/// finished, failed or its client left; returns the tokens it sampled
/// (`before` is how many it had).
pub(super) fn deliver(
    slot: &mut Slot,
    before: usize,
    outcome: Option<StepOutcome>,
    shared: &Shared,
) -> u64 {
    let metrics = &shared.metrics;
    let Some(active) = slot.active.as_mut() else {
        return 0;
    };
    let sampled = active.decoding.ids().len().saturating_sub(before) as u64;
    metrics
        .completion_tokens
        .fetch_add(sampled, Ordering::Relaxed);
    let logprobs = active.decoding.take_logprobs();
    if !logprobs.is_empty() {
        let _ = active.job.events.send(Event::Logprobs(logprobs));
    }
    let events = &active.job.events;
    match outcome {
        Some(Ok((text, thought, finish_reason))) => {
            let gone = (!thought.is_empty() && events.send(Event::Thought(thought)).is_err())
                || (!text.is_empty() && events.send(Event::Text(text)).is_err());
            if gone {
                metrics.cancelled.fetch_add(1, Ordering::Relaxed);
                slot.active = None;
            } else if let Some(reason) = finish_reason {
                finish(slot, shared, reason);
            }
        }
        Some(Err(e)) => {
            let _ = events.send(Event::Failed(engine_error(&e)));
            slot.active = None;
        }
        None => {
            let _ = events.send(Event::Failed(ApiError::internal(
                "internal error: no step result",
            )));
            slot.active = None;
        }
    }
    sampled
}

/// What one slot's step produced: the text to show, the thought, and the
/// finish, if any.
pub(super) type StepOutcome = Result<(String, String, Option<FinishReason>), EngineError>;

/// Start `job` in `slot`: the slot's session (emptied first when it holds
/// another caller's conversation) starts from the stored state that serves
/// more of the prompt than it holds, if there is one, and rewinds to the
/// prefix it shares with the prompt (the rest is prefilled a chunk per
/// round).
pub(super) fn admit(slot: &mut Slot, job: Job, shared: &Shared, tick: u64) {
    let metrics = &shared.metrics;
    slot.last_used = tick;
    let media: Vec<engine::MediaSpan> = job.images.iter().map(engine::PromptMedia::span).collect();
    // The same conversation's next turn, by the store's rule for a state
    // that replaces another: its finish leaves the longer state.
    let continues = slot.scope == job.cache_scope
        && slot.session.adapters() == &job.adapters
        && slot.session.reusable(&job.prompt, &media) + prompt_cache::SUPERSEDED_TAIL
            >= slot.session.tokens().len();
    if continues {
        slot.unsaved = false;
    } else {
        save_unsaved(slot, shared.cache.as_ref());
    }
    if slot.scope != job.cache_scope {
        slot.session.reset();
        slot.scope = job.cache_scope;
    }
    slot.session.use_adapters(&job.adapters);
    if let Some(cache) = &shared.cache {
        let store = cache.scoped(job.cache_scope.as_ref());
        slot.session.resume_from(&store, &job.prompt, &job.images);
    }
    let sampler = Sampler::new(job.params.clone());
    let session = &mut slot.session;
    let mut job = job;
    let request = GenerationRequest {
        prompt: &job.prompt,
        media: &job.images,
        options: &job.opts,
        constraint: job.constraint.take(),
        thinking: job.thinking,
        logprobs: job.logprobs,
    };
    let begun = catch_unwind(AssertUnwindSafe(|| session.begin(request, &sampler)));
    match begun {
        Ok(Ok(decoding)) => {
            metrics
                .prefill_evaluated
                .fetch_add(decoding.prompt_tokens_evaluated() as u64, Ordering::Relaxed);
            metrics
                .prefill_saved
                .fetch_add(decoding.prompt_tokens_reused() as u64, Ordering::Relaxed);
            metrics
                .prompt_tokens
                .fetch_add(job.prompt.len() as u64, Ordering::Relaxed);
            slot.active = Some(Active {
                job,
                sampler,
                decoding,
            });
        }
        Ok(Err(e)) => {
            let _ = job.events.send(Event::Failed(engine_error(&e)));
        }
        Err(_) => {
            slot.session.reset();
            metrics.panics.fetch_add(1, Ordering::Relaxed);
            let _ = job.events.send(Event::Failed(ApiError::internal(
                "internal error while admitting",
            )));
        }
    }
}

/// Start the forks of the job in slot `from`, whose prompt is in: each
/// takes a free slot with a copy of the cache, so its prompt is not
/// prefilled again; those that find no free slot wait in the queue.
pub(super) fn fork(slots: &mut [Slot], from: usize, shared: &Shared, tick: &mut u64) {
    let Some(active) = slots[from].active.as_mut() else {
        return;
    };
    let forks = std::mem::take(&mut active.job.forks);
    let job = &active.job;
    let jobs: Vec<Job> = forks
        .into_iter()
        .map(|f| Job {
            prompt: job.prompt.clone(),
            images: job.images.clone(),
            params: f.params,
            opts: job.opts.clone(),
            constraint: f.constraint,
            thinking: job.thinking,
            events: f.events,
            deadline: job.deadline,
            logprobs: job.logprobs,
            forks: Vec::new(),
            hold: job.hold.clone(),
            cache_scope: job.cache_scope,
            adapters: job.adapters.clone(),
        })
        .collect();
    for job in jobs {
        let Some(to) = slots.iter().position(|s| s.active.is_none()) else {
            shared.lock().jobs.push_front(job);
            continue;
        };
        // Two slots at once: split around the later index.
        let (a, b) = slots.split_at_mut(from.max(to));
        let (src, dst) = if from < to {
            (&a[from], &mut b[0])
        } else {
            (&b[0], &mut a[to])
        };
        save_unsaved(dst, shared.cache.as_ref());
        dst.session.copy_cache_from(&src.session);
        dst.scope = src.scope;
        *tick += 1;
        admit(dst, job, shared, *tick);
    }
}

/// Report the end of a slot's generation, free the slot, and mark its
/// state for the store.
pub(super) fn finish(slot: &mut Slot, shared: &Shared, reason: FinishReason) {
    let metrics = &shared.metrics;
    let Some(active) = slot.active.take() else {
        return;
    };
    let (prompt_time, gen_time) = active.decoding.timings();
    let usage = Usage {
        stop_string: active.decoding.stop_string().map(str::to_owned),
        prompt_time,
        gen_time,
        finish: reason,
        prompt_tokens: active.job.prompt.len(),
        completion_tokens: active.decoding.ids().len(),
        cached_tokens: active.decoding.prompt_tokens_reused(),
        speculation: active.decoding.spec_stats(),
    };
    metrics.completed.fetch_add(1, Ordering::Relaxed);
    let _ = active.job.events.send(Event::Done(usage));
    // Its state (the prompt and the answer) goes to the store once the
    // slot is idle or another conversation takes it.
    slot.unsaved = shared.cache.is_some();
}

/// The answer to a generation that failed with `e`: a grammar past the
/// parser's limits is the request's fault (400, naming the limit), the rest
/// the server's.
pub(crate) fn engine_error(e: &EngineError) -> ApiError {
    match e {
        EngineError::GrammarLimit(_) => ApiError {
            code: Some("invalid_grammar"),
            ..ApiError::bad_request(e.to_string())
        },
        _ => ApiError::internal(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grammar_past_the_parsers_limits_is_the_clients_error() {
        let limit = engine_error(&EngineError::GrammarLimit("max is 2000".into()));
        assert_eq!(limit.status.as_u16(), 400);
        assert_eq!(limit.code, Some("invalid_grammar"));
        assert!(limit.message.contains("max is 2000"), "{}", limit.message);
        let bug = engine_error(&EngineError::Constraint("a dead end".into()));
        assert_eq!(bug.status.as_u16(), 500);
    }

    #[test]
    fn prefix_length() {
        assert_eq!(shared_prefix(&[1, 2, 3], &[1, 2, 4]), 2);
        assert_eq!(shared_prefix(&[], &[1]), 0);
        assert_eq!(shared_prefix(&[1, 2], &[1, 2, 3]), 2);
    }
}
