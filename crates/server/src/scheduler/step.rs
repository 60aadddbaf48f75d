//! The scheduler thread's rounds: take queued jobs into free slots,
//! end the abandoned ones, prefill prompts a chunk per round, and advance
//! every decoding slot one token per step in one batched forward.

use super::slot::{
    admit, cancel, deliver, finish, fork, pick_slot, prefill_left, prefill_slot, save_unsaved,
    Slot, StepOutcome,
};
use super::{slot_actions, Event, Job, Shared};
use crate::metrics::GaugeShare;
use engine::{BatchDecoder, BatchItem, FinishReason, Scratch};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Prompt tokens one slot prefills per round while others are decoding.
const PREFILL_CHUNK: usize = 128;

/// The scheduler thread's loop: each round takes queued jobs into free
/// slots, ends the requests whose client left or whose time ran out,
/// prefills prompts, and decodes one token for every prefilled slot.
pub(super) fn run(shared: &Shared, slots: Vec<Slot>, lent: Scratch, decoder: BatchDecoder) {
    let mut rounds = Rounds {
        shared,
        slots,
        lent,
        decoder,
        tick: 0,
        busy_share: GaugeShare::default(),
    };
    while let Some(taken) = rounds.take_jobs() {
        rounds.admit_all(taken);
        rounds.end_abandoned();
        rounds.prefill();
        rounds.decode();
    }
}

/// The scheduler's state from round to round.
struct Rounds<'s> {
    shared: &'s Shared,
    slots: Vec<Slot>,
    /// The prefill buffers the slots' prompts go through in turn.
    lent: Scratch,
    decoder: BatchDecoder,
    /// Jobs admitted so far: orders the slots by last use.
    tick: u64,
    /// This scheduler's part of `hearth_slots_busy` (one per loaded model).
    busy_share: GaugeShare,
}

impl Rounds<'_> {
    /// Waits until there is work, then takes queued jobs for the free
    /// slots, first come first served, each paired with its slot; `None`
    /// once the server shuts down with nothing left to do.
    fn take_jobs(&mut self) -> Option<Vec<(usize, Job)>> {
        let metrics = &self.shared.metrics;
        let mut q = self.shared.lock();
        loop {
            if !q.actions.is_empty() {
                let asked = std::mem::take(&mut q.actions);
                drop(q);
                for request in asked {
                    slot_actions::serve(&mut self.slots, self.shared.cache.as_ref(), request);
                }
                q = self.shared.lock();
                continue;
            }
            if q.cancel_all {
                for job in q.jobs.drain(..) {
                    cancel(&job.events, metrics);
                }
                for slot in self.slots.iter_mut() {
                    if let Some(a) = slot.active.take() {
                        cancel(&a.job.events, metrics);
                    }
                }
            }
            if self.slots.iter().any(|s| s.active.is_some()) || !q.jobs.is_empty() {
                break;
            }
            self.busy_share.set(&metrics.slots_busy, 0);
            // Idle: the finished conversations' states go to the store,
            // with the queue open to new jobs meanwhile.
            if self.slots.iter().any(|s| s.unsaved) {
                drop(q);
                for slot in self.slots.iter_mut() {
                    save_unsaved(slot, self.shared.cache.as_ref());
                }
                q = self.shared.lock();
                continue;
            }
            if q.shutdown {
                q.report_depth(metrics);
                return None;
            }
            q = self
                .shared
                .wake
                .wait_timeout(q, Duration::from_millis(500))
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
        let mut taken = Vec::new();
        let mut free: Vec<bool> = self.slots.iter().map(|s| s.active.is_none()).collect();
        while free.iter().any(|f| *f) {
            let Some(job) = q.jobs.pop_front() else { break };
            if job.events.is_closed() {
                metrics.cancelled.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let Some(i) = pick_slot(&self.slots, &free, &job) else {
                q.jobs.push_front(job);
                break;
            };
            free[i] = false;
            taken.push((i, job));
        }
        q.report_depth(metrics);
        Some(taken)
    }

    /// Admits each job into its slot: the slot's cache rewinds to the
    /// prefix it shares with the prompt; the rest is prefilled a chunk per
    /// round.
    fn admit_all(&mut self, taken: Vec<(usize, Job)>) {
        for (i, job) in taken {
            self.tick += 1;
            admit(&mut self.slots[i], job, self.shared, self.tick);
        }
        let busy = self.slots.iter().filter(|s| s.active.is_some()).count();
        self.busy_share
            .set(&self.shared.metrics.slots_busy, busy as u64);
    }

    /// Ends the requests whose client left or whose time ran out.
    fn end_abandoned(&mut self) {
        let metrics = &self.shared.metrics;
        let now = Instant::now();
        for slot in self.slots.iter_mut() {
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
                finish(slot, self.shared, FinishReason::Length);
            }
        }
    }

    /// Prompts, first come first served: with nothing decoding, the oldest
    /// goes in whole and starts streaming; beside decoding streams, a
    /// round prefills `PREFILL_CHUNK` tokens per waiting prompt, oldest
    /// first, so the decoding streams keep flowing and the waiting prompts'
    /// first tokens come one after another rather than all at the end. A
    /// job whose prompt is in starts its forks.
    fn prefill(&mut self) {
        let decoding = self
            .slots
            .iter()
            .filter(|s| s.active.as_ref().is_some_and(|a| a.decoding.prefill_done()))
            .count();
        let mut waiting: Vec<usize> = (0..self.slots.len())
            .filter(|&i| prefill_left(&self.slots[i]) > 0)
            .collect();
        waiting.sort_by_key(|&i| self.slots[i].last_used);
        let mut budget = if decoding == 0 {
            usize::MAX
        } else {
            PREFILL_CHUNK * waiting.len()
        };
        let mut prefilled = Vec::new();
        for i in waiting {
            let slot = &mut self.slots[i];
            let before = prefill_left(slot);
            if prefill_slot(slot, budget, &mut self.lent, &self.shared.metrics) {
                prefilled.push(i);
            }
            let left = prefill_left(slot);
            budget = budget.saturating_sub(before - left);
            if budget == 0 || (decoding == 0 && left == 0) {
                break;
            }
        }
        for i in prefilled {
            fork(&mut self.slots, i, self.shared, &mut self.tick);
        }
    }

    /// One token for every prefilled slot, all in one batched forward,
    /// then each slot's output sent on.
    fn decode(&mut self) {
        let metrics = &self.shared.metrics;
        let mut stepped: Vec<usize> = Vec::with_capacity(self.slots.len());
        let mut before: Vec<usize> = Vec::with_capacity(self.slots.len());
        let mut items: Vec<BatchItem<'_>> = Vec::with_capacity(self.slots.len());
        for (i, slot) in self.slots.iter_mut().enumerate() {
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
            return;
        }
        let mut outcomes: Vec<Option<StepOutcome>> = (0..items.len()).map(|_| None).collect();
        let ts = Instant::now();
        let decoder = &mut self.decoder;
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
                if let Some(a) = self.slots[i].active.take() {
                    let _ = a
                        .job
                        .events
                        .send(Event::Failed(crate::error::ApiError::internal(
                            "internal error during decoding",
                        )));
                }
                self.slots[i].session.reset();
            }
            return;
        }
        let mut produced = 0u64;
        for ((&i, &before), outcome) in stepped.iter().zip(&before).zip(outcomes) {
            produced += deliver(&mut self.slots[i], before, outcome, self.shared);
        }
        if produced > 0 {
            metrics.record_decode(produced, decode_time);
        }
    }
}
