//! Slots and the scheduler: one OS thread owns `parallel` sessions and
//! advances every active one a token per step, all of them in one batched
//! forward ([`engine::BatchDecoder`]), so the weights are read once per step
//! however many requests run; a bounded first-come-first-served queue holds
//! the rest.
//!
//! A request joins or leaves between steps. Prompts are prefilled per slot,
//! a chunk per round while others decode, so a long prompt does not stall
//! their streams.

use crate::metrics::Metrics;
use engine::{
    BatchDecoder, BatchItem, Decoding, Engine, EngineError, FinishReason, GenerateOptions, Sampler,
    SamplingParams, Session,
};
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedSender;

/// One generation request, already tokenized and validated.
#[derive(Debug)]
pub struct Job {
    /// Prompt ids (BOS and chat template applied).
    pub prompt: Vec<u32>,
    /// Sampling settings.
    pub params: SamplingParams,
    /// Limits and stop conditions.
    pub opts: GenerateOptions,
    /// Where the output goes; a closed receiver cancels the job.
    pub events: UnboundedSender<Event>,
    /// When the request must be over, queueing included: generation stops
    /// there with `FinishReason::Length`. `None`: no limit.
    pub deadline: Option<Instant>,
}

/// What the scheduler tells a request's handler.
#[derive(Debug)]
pub enum Event {
    /// The prompt is in the cache and generation begins.
    Started,
    /// Text to show.
    Text(String),
    /// Generation ended.
    Done(Usage),
    /// Generation failed (after it was admitted).
    Failed(String),
}

/// Token counts and the finish reason of a finished generation.
#[derive(Debug, Clone, Copy)]
pub struct Usage {
    /// Why it ended.
    pub finish: FinishReason,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Generated tokens.
    pub completion_tokens: usize,
    /// Prompt tokens taken from the slot's cache instead of recomputed.
    pub cached_tokens: usize,
}

/// Why a job was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejected {
    /// The queue is at capacity.
    QueueFull,
    /// The server is shutting down.
    ShuttingDown,
}

struct Queue {
    jobs: VecDeque<Job>,
    shutdown: bool,
    cancel_all: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
    capacity: usize,
    metrics: Arc<Metrics>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // A panic while holding the lock cannot leave the queue half-updated.
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The handle the HTTP side uses to queue jobs and to stop the scheduler.
pub struct Scheduler {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("capacity", &self.shared.capacity)
            .finish()
    }
}

impl Scheduler {
    /// Start the scheduler thread with `parallel` slots (each a session of
    /// the engine's context) and a queue of `capacity` waiting jobs.
    pub fn start(
        engine: Arc<Engine>,
        parallel: usize,
        capacity: usize,
        metrics: Arc<Metrics>,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                jobs: VecDeque::new(),
                shutdown: false,
                cancel_all: false,
            }),
            wake: Condvar::new(),
            capacity,
            metrics,
        });
        let slots = (0..parallel.max(1))
            .map(|_| Slot {
                session: engine.session(),
                active: None,
                last_used: 0,
            })
            .collect();
        let decoder = engine.batch_decoder(parallel.max(1));
        let thread = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("hearth-scheduler".into())
                .spawn(move || run(&shared, slots, decoder))?
        };
        Ok(Self {
            shared,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Queue a job, or say why not.
    pub fn submit(&self, job: Job) -> Result<(), Rejected> {
        let mut q = self.shared.lock();
        if q.shutdown {
            return Err(Rejected::ShuttingDown);
        }
        if q.jobs.len() >= self.shared.capacity {
            self.shared.metrics.rejected.fetch_add(1, Ordering::Relaxed);
            return Err(Rejected::QueueFull);
        }
        q.jobs.push_back(job);
        self.shared
            .metrics
            .queue_depth
            .store(q.jobs.len() as u64, Ordering::Relaxed);
        drop(q);
        self.shared.wake.notify_one();
        Ok(())
    }

    /// Refuse new jobs; with `cancel`, also end the running and queued ones.
    pub fn shutdown(&self, cancel: bool) {
        let mut q = self.shared.lock();
        q.shutdown = true;
        q.cancel_all |= cancel;
        drop(q);
        self.shared.wake.notify_all();
    }

    /// Stop (cancelling what runs) and wait for the thread to end.
    pub fn join(&self) {
        self.shutdown(true);
        let handle = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(h) = handle {
            let _ = h.join();
        }
    }
}

struct Active {
    job: Job,
    sampler: Sampler,
    decoding: Decoding,
}

struct Slot {
    session: Session,
    active: Option<Active>,
    /// When the slot last took a job (a counter): the least recently used
    /// slot is the one to overwrite when no cached prefix helps.
    last_used: u64,
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

fn run(shared: &Shared, mut slots: Vec<Slot>, mut decoder: BatchDecoder) {
    let metrics = &shared.metrics;
    let mut tick = 0u64;
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
                metrics.slots_busy.store(0, Ordering::Relaxed);
                if q.shutdown {
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
            metrics
                .queue_depth
                .store(q.jobs.len() as u64, Ordering::Relaxed);
        }

        // Admit: rewind each slot's cache to the prefix it shares with the
        // prompt; the rest is prefilled below, a chunk per round.
        for (i, job) in admitted {
            tick += 1;
            let slot = &mut slots[i];
            slot.last_used = tick;
            let sampler = Sampler::new(job.params.clone());
            let session = &mut slot.session;
            let begun = catch_unwind(AssertUnwindSafe(|| {
                session.begin(&job.prompt, &sampler, &job.opts)
            }));
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

        let busy = slots.iter().filter(|s| s.active.is_some()).count();
        metrics.slots_busy.store(busy as u64, Ordering::Relaxed);

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
        for slot in slots.iter_mut() {
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
                outcomes[i] = Some(step.map(|s| (s.text.to_owned(), s.finish)));
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
            match outcome {
                Some(Ok((text, finish_reason))) => {
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

/// What one slot's step produced: the text to show and the finish, if any.
type StepOutcome = Result<(String, Option<FinishReason>), EngineError>;

/// Report the end of a slot's generation and free the slot.
fn finish(slot: &mut Slot, metrics: &Metrics, reason: FinishReason) {
    let Some(active) = slot.active.take() else {
        return;
    };
    let usage = Usage {
        finish: reason,
        prompt_tokens: active.job.prompt.len(),
        completion_tokens: active.decoding.ids().len(),
        cached_tokens: active.decoding.prompt_tokens_reused(),
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
