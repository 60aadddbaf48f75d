//! The scheduler thread: admit queued jobs into free slots, prefill their
//! prompts a chunk per round, and advance every decoding slot one token per
//! step in one batched forward.

use super::{Event, Job, Shared, Usage};
use crate::metrics::{GaugeShare, Metrics};
use engine::{BatchDecoder, BatchItem, Decoding, EngineError, FinishReason, Sampler, Session};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

pub(super) struct Active {
    job: Job,
    sampler: Sampler,
    decoding: Decoding,
}

pub(super) struct Slot {
    pub(super) session: Session,
    pub(super) active: Option<Active>,
    /// When the slot last took a job (a counter): the least recently used
    /// slot is the one to overwrite when no cached prefix helps.
    pub(super) last_used: u64,
}

/// Prompt tokens one slot prefills per round while others are decoding.
const PREFILL_CHUNK: usize = 128;

fn shared_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// The free slot for `prompt`: the longest cached prefix, then the least
/// recently used.
fn pick_slot(slots: &[Slot], free: &[bool], prompt: &[u32]) -> Option<usize> {
    slots
        .iter()
        .enumerate()
        .filter(|(i, _)| free[*i])
        .max_by_key(|(_, s)| {
            (
                shared_prefix(s.session.tokens(), prompt),
                std::cmp::Reverse(s.last_used),
            )
        })
        .map(|(i, _)| i)
}

pub(super) fn run(shared: &Shared, mut slots: Vec<Slot>, mut decoder: BatchDecoder) {
    let metrics = &shared.metrics;
    let mut tick = 0u64;
    // This scheduler's part of `hearth_slots_busy` (one per loaded model).
    let mut busy_share = GaugeShare::default();
    loop {
        // Admit queued jobs into free slots, first come first served.
        let mut admitted = Vec::new();
        {
            let mut q = shared.lock();
            loop {
                if q.cancel_all {
                    for job in q.jobs.drain(..) {
                        let _ = job
                            .events
                            .send(Event::Failed("the server is shutting down".into()));
                        metrics.cancelled.fetch_add(1, Ordering::Relaxed);
                    }
                    for slot in slots.iter_mut() {
                        if let Some(a) = slot.active.take() {
                            let _ = a
                                .job
                                .events
                                .send(Event::Failed("the server is shutting down".into()));
                            metrics.cancelled.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                let busy = slots.iter().any(|s| s.active.is_some());
                if busy || !q.jobs.is_empty() {
                    break;
                }
                busy_share.set(&metrics.slots_busy, 0);
                if q.shutdown {
                    q.report_depth(metrics);
                    return;
                }
                q = shared
                    .wake
                    .wait_timeout(q, Duration::from_millis(500))
                    .map(|(g, _)| g)
                    .unwrap_or_else(|e| e.into_inner().0);
            }
            let mut free: Vec<bool> = slots.iter().map(|s| s.active.is_none()).collect();
            while free.iter().any(|f| *f) {
                let Some(job) = q.jobs.pop_front() else { break };
                if job.events.is_closed() {
                    metrics.cancelled.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                let Some(i) = pick_slot(&slots, &free, &job.prompt) else {
                    q.jobs.push_front(job);
                    break;
                };
                free[i] = false;
                admitted.push((i, job));
            }
            q.report_depth(metrics);
        }

        // Admit: rewind each slot's cache to the prefix it shares with the
        // prompt; the rest is prefilled below, a chunk per round.
        for (i, job) in admitted {
            tick += 1;
            admit(&mut slots[i], job, metrics, tick);
        }

        let busy = slots.iter().filter(|s| s.active.is_some()).count();
        busy_share.set(&metrics.slots_busy, busy as u64);

        // Requests whose client left or whose time ran out end here.
        let now = Instant::now();
        for slot in slots.iter_mut() {
            let Some(active) = slot.active.as_mut() else {
                continue;
            };
            if active.job.events.is_closed() {
                active.decoding.cancel();
                metrics.cancelled.fetch_add(1, Ordering::Relaxed);
                slot.active = None;
            } else if active.job.deadline.is_some_and(|d| now >= d) {
                if !active.decoding.prefill_done() {
                    let _ = active.job.events.send(Event::Started);
                }
                let text = active.decoding.end_with_length().text.to_owned();
                if !text.is_empty() {
                    let _ = active.job.events.send(Event::Text(text));
                }
                metrics.time_limited.fetch_add(1, Ordering::Relaxed);
                finish(slot, metrics, FinishReason::Length);
            }
        }

        // Prompts: alone, a prompt goes in whole; beside sequences that are
        // decoding, a chunk per round keeps their tokens flowing.
        let decoding_slots = slots
            .iter()
            .filter(|s| s.active.as_ref().is_some_and(|a| a.decoding.prefill_done()))
            .count();
        let chunk = if decoding_slots == 0 {
            usize::MAX
        } else {
            PREFILL_CHUNK
        };
        let mut prefilled = Vec::new();
        for (i, slot) in slots.iter_mut().enumerate() {
            let Some(active) = slot.active.as_mut() else {
                continue;
            };
            if active.decoding.prefill_done() {
                continue;
            }
            let session = &mut slot.session;
            let filled = catch_unwind(AssertUnwindSafe(|| {
                session.prefill(&mut active.decoding, chunk)
            }));
            match filled {
                Ok(Ok(true)) => {
                    let _ = active.job.events.send(Event::Started);
                    if !active.job.forks.is_empty() {
                        prefilled.push(i);
                    }
                }
                Ok(Ok(false)) => {}
                Ok(Err(e)) => {
                    let _ = active.job.events.send(Event::Failed(engine_error(&e)));
                    slot.active = None;
                }
                Err(_) => {
                    metrics.panics.fetch_add(1, Ordering::Relaxed);
                    let _ = active
                        .job
                        .events
                        .send(Event::Failed("internal error during prefill".into()));
                    slot.active = None;
                    slot.session.reset();
                }
            }
        }

        for i in prefilled {
            fork(&mut slots, i, shared, &mut tick);
        }

        // One token for every prefilled slot, all in one batched forward.
        let mut stepped: Vec<usize> = Vec::with_capacity(slots.len());
        let mut before: Vec<usize> = Vec::with_capacity(slots.len());
        let mut items: Vec<BatchItem<'_>> = Vec::with_capacity(slots.len());
        for (i, slot) in slots.iter_mut().enumerate() {
            let Slot {
                session,
                active: Some(active),
                ..
            } = slot
            else {
                continue;
            };
            if !active.decoding.prefill_done() {
                continue;
            }
            stepped.push(i);
            before.push(active.decoding.ids().len());
            items.push(BatchItem {
                session,
                decoding: &mut active.decoding,
                sampler: &mut active.sampler,
            });
        }
        if items.is_empty() {
            continue;
        }
        let mut outcomes: Vec<Option<StepOutcome>> = (0..items.len()).map(|_| None).collect();
        let ts = Instant::now();
        let ran = catch_unwind(AssertUnwindSafe(|| {
            decoder.step(&mut items, |i, step| {
                outcomes[i] =
                    Some(step.map(|s| (s.text.to_owned(), s.thought.to_owned(), s.finish)));
            })
        }));
        let decode_time = ts.elapsed();
        drop(items);
        if ran.is_err() {
            metrics.panics.fetch_add(1, Ordering::Relaxed);
            for &i in &stepped {
                if let Some(a) = slots[i].active.take() {
                    let _ = a
                        .job
                        .events
                        .send(Event::Failed("internal error during decoding".into()));
                }
                slots[i].session.reset();
            }
            continue;
        }
        let mut produced = 0u64;
        for ((&i, &before), outcome) in stepped.iter().zip(&before).zip(outcomes) {
            let slot = &mut slots[i];
            let Some(active) = slot.active.as_mut() else {
                continue;
            };
            let sampled = active.decoding.ids().len().saturating_sub(before) as u64;
            produced += sampled;
            metrics
                .completion_tokens
                .fetch_add(sampled, Ordering::Relaxed);
            let logprobs = active.decoding.take_logprobs();
            if !logprobs.is_empty() {
                let _ = active.job.events.send(Event::Logprobs(logprobs));
            }
            match outcome {
                Some(Ok((text, thought, finish_reason))) => {
                    if !thought.is_empty()
                        && active.job.events.send(Event::Thought(thought)).is_err()
                    {
                        metrics.cancelled.fetch_add(1, Ordering::Relaxed);
                        slot.active = None;
                        continue;
                    }
                    if !text.is_empty() && active.job.events.send(Event::Text(text)).is_err() {
                        metrics.cancelled.fetch_add(1, Ordering::Relaxed);
                        slot.active = None;
                        continue;
                    }
                    if let Some(reason) = finish_reason {
                        finish(slot, metrics, reason);
                    }
                }
                Some(Err(e)) => {
                    let _ = active.job.events.send(Event::Failed(engine_error(&e)));
                    slot.active = None;
                }
                None => {
                    let _ = active
                        .job
                        .events
                        .send(Event::Failed("internal error: no step result".into()));
                    slot.active = None;
                }
            }
        }
        if produced > 0 {
            metrics.record_decode(produced, decode_time);
        }
    }
}

/// What one slot's step produced: the text to show, the thought, and the
/// finish, if any.
type StepOutcome = Result<(String, String, Option<FinishReason>), EngineError>;

/// Start `job` in `slot`: rewind the slot's cache to the prefix it shares
/// with the prompt (the rest is prefilled a chunk per round).
fn admit(slot: &mut Slot, job: Job, metrics: &Metrics, tick: u64) {
    slot.last_used = tick;
    let sampler = Sampler::new(job.params.clone());
    let session = &mut slot.session;
    let begun = catch_unwind(AssertUnwindSafe(|| {
        session.begin_images(&job.prompt, &job.images, &sampler, &job.opts)
    }));
    let mut job = job;
    match begun {
        Ok(Ok(mut decoding)) => {
            if let Some(c) = job.constraint.take() {
                decoding.constrain(c);
            }
            if let Some(t) = job.thinking {
                decoding.enable_thinking(t);
            }
            if let Some(top) = job.logprobs {
                decoding.record_logprobs(top);
            }
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
            let _ = job.events.send(Event::Failed(e.to_string()));
        }
        Err(_) => {
            slot.session.reset();
            metrics.panics.fetch_add(1, Ordering::Relaxed);
            let _ = job
                .events
                .send(Event::Failed("internal error while admitting".into()));
        }
    }
}

/// Start the forks of the job in slot `from`, whose prompt is in: each
/// takes a free slot with a copy of the cache, so its prompt is not
/// prefilled again; those that find no free slot wait in the queue.
fn fork(slots: &mut [Slot], from: usize, shared: &Shared, tick: &mut u64) {
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
        dst.session.copy_cache_from(&src.session);
        *tick += 1;
        admit(dst, job, &shared.metrics, *tick);
    }
}

/// Report the end of a slot's generation and free the slot.
fn finish(slot: &mut Slot, metrics: &Metrics, reason: FinishReason) {
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
}

fn engine_error(e: &EngineError) -> String {
    e.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_length() {
        assert_eq!(shared_prefix(&[1, 2, 3], &[1, 2, 4]), 2);
        assert_eq!(shared_prefix(&[], &[1]), 0);
        assert_eq!(shared_prefix(&[1, 2], &[1, 2, 3]), 2);
    }
}
