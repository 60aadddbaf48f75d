//! Slots and the scheduler: one OS thread owns `parallel` sessions and
//! advances every active one a token per step, all of them in one batched
//! forward ([`engine::BatchDecoder`]), so the weights are read once per step
//! however many requests run; a bounded first-come-first-served queue holds
//! the rest.
//!
//! A request joins or leaves between steps. Prompts are prefilled first
//! come, first served, a chunk per round while others decode, so a long
//! prompt does not stall their streams.

mod slot;
mod slot_actions;
mod step;

use crate::metrics::{GaugeShare, Metrics};
use engine::{Constraint, Engine, FinishReason, GenerateOptions, SamplingParams, Thinking};
pub(crate) use slot::engine_error;
use slot::Slot;
pub use slot_actions::{SlotAction, SlotAnswer, SlotChange, SlotRequest, SlotView};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Instant;
use step::run;
use tokio::sync::mpsc::UnboundedSender;

/// One generation request, already tokenized and validated.
#[derive(Debug)]
pub struct Job {
    /// Prompt ids (BOS and chat template applied).
    pub prompt: Vec<u32>,
    /// The images among the prompt's ids.
    pub images: Vec<engine::PromptMedia>,
    /// Sampling settings.
    pub params: SamplingParams,
    /// Limits and stop conditions.
    pub opts: GenerateOptions,
    /// The grammar the output must match, compiled, if any.
    pub constraint: Option<Constraint>,
    /// The thought channel to keep apart, when the prompt has thinking on.
    pub thinking: Option<Thinking>,
    /// Where the output goes; a closed receiver cancels the job.
    pub events: UnboundedSender<Event>,
    /// More generations from the same prompt (`n` > 1): once this job's
    /// prompt is in, each takes a free slot with a copy of its cache.
    pub forks: Vec<Fork>,
    /// Record each token's log-probability with this many alternatives
    /// (`None`: not recorded).
    pub logprobs: Option<usize>,
    /// When the request must be over, queueing included: generation stops
    /// there with `FinishReason::Length`. `None`: no limit.
    pub deadline: Option<Instant>,
    /// Keeps the job's model loaded (and counted as in use) until the job
    /// and its forks end; `None` where nothing unloads models.
    pub hold: Option<Hold>,
    /// The caller whose prompt states the job may reuse and leaves behind
    /// (a digest of its API key); `None`: states shared by every caller.
    pub cache_scope: Option<[u8; 32]>,
    /// The LoRA adapters the job runs with.
    pub adapters: engine::Adapters,
}

/// The store of prompt states a scheduler's slots load from and save to,
/// and the namespace of its model (the callers' scopes narrow it).
#[derive(Debug, Clone)]
pub struct SlotCache {
    /// The server's store.
    pub cache: Arc<prompt_cache::PromptCache>,
    /// The model's namespace ([`prompt_cache::model_namespace`]).
    pub model: prompt_cache::Namespace,
}

impl SlotCache {
    /// The store as a job of the caller `scope` sees it.
    fn scoped(&self, scope: Option<&[u8; 32]>) -> prompt_cache::ScopedCache {
        prompt_cache::ScopedCache {
            cache: Arc::clone(&self.cache),
            ns: self.model.for_caller(scope),
        }
    }
}

/// What a job holds to keep its model in memory (the server's lease on
/// it), released when the job and every fork of it are done.
pub type Hold = Arc<dyn std::any::Any + Send + Sync>;

/// One more generation from a job's prompt, with its own sampling,
/// grammar state and channel.
#[derive(Debug)]
pub struct Fork {
    /// Sampling settings (its own seed).
    pub params: SamplingParams,
    /// Its own compiled grammar, when the job has one.
    pub constraint: Option<Constraint>,
    /// Where its output goes.
    pub events: UnboundedSender<Event>,
}

/// What the scheduler tells a request's handler.
#[derive(Debug)]
pub enum Event {
    /// The prompt is in the cache and generation begins.
    Started,
    /// Text to show.
    Text(String),
    /// Thought text (thinking on).
    Thought(String),
    /// Generation ended.
    Done(Usage),
    /// Generation failed (after it was admitted): the answer's error.
    Failed(crate::error::ApiError),
    /// What the guardrails did (before `Done`, for a guarded reply).
    Guard(serde_json::Value),
    /// The log-probabilities of the tokens sampled since the last event
    /// (when the job asked for them), sent before their text.
    Logprobs(Vec<engine::TokenLogprob>),
}

/// Token counts and the finish reason of a finished generation.
#[derive(Debug, Clone)]
pub struct Usage {
    /// The stop string that ended it, if one did.
    pub stop_string: Option<String>,
    /// Why it ended.
    pub finish: FinishReason,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Generated tokens.
    pub completion_tokens: usize,
    /// Prompt tokens taken from the slot's cache instead of recomputed.
    pub cached_tokens: usize,
    /// Time spent on the prompt (its evaluated part).
    pub prompt_time: std::time::Duration,
    /// Time from the end of the prompt to the last token.
    pub gen_time: std::time::Duration,
    /// What speculation drafted and kept, when it was on.
    pub speculation: Option<engine::SpecStats>,
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
    /// Requests about the slots themselves, served between rounds.
    actions: Vec<SlotRequest>,
    shutdown: bool,
    cancel_all: bool,
    /// This scheduler's part of `hearth_queue_depth`.
    depth: GaugeShare,
}

impl Queue {
    /// Report the jobs waiting now to the queue-depth gauge.
    fn report_depth(&mut self, metrics: &Metrics) {
        let n = self.jobs.len() as u64;
        self.depth.set(&metrics.queue_depth, n);
    }
}

struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
    capacity: usize,
    metrics: Arc<Metrics>,
    /// Where finished prompts' states go and new prompts look for one.
    cache: Option<SlotCache>,
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
    /// the engine's context, their prompts prefilled in buffers they share;
    /// none for an embedding model) and a queue of `capacity` waiting jobs;
    /// with a `cache`, each finished prompt's state is kept there and each
    /// new prompt starts from the state that serves the most of it.
    pub fn start(
        engine: Arc<Engine>,
        parallel: usize,
        capacity: usize,
        metrics: Arc<Metrics>,
        cache: Option<SlotCache>,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                jobs: VecDeque::new(),
                actions: Vec::new(),
                shutdown: false,
                cancel_all: false,
                depth: GaugeShare::default(),
            }),
            wake: Condvar::new(),
            capacity,
            metrics,
            cache,
        });
        // An embedding model generates nothing: no sessions to hold.
        let n_slots = match engine.embedding_dim() {
            Some(_) => 0,
            None => parallel.max(1),
        };
        let slots = (0..n_slots)
            .map(|_| Slot {
                session: engine.slot_session(),
                active: None,
                last_used: 0,
                scope: None,
                unsaved: false,
            })
            .collect();
        // One set of prefill buffers, lent to each slot's prompt in turn.
        let lent = match n_slots {
            0 => engine::Scratch::default(),
            _ => engine.prefill_scratch(),
        };
        let decoder = engine.batch_decoder(parallel.max(1));
        let thread = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("hearth-scheduler".into())
                .spawn(move || run(&shared, slots, lent, decoder))?
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
        q.report_depth(&self.shared.metrics);
        drop(q);
        self.shared.wake.notify_one();
        Ok(())
    }

    /// Queue a request about the slots, answered between rounds.
    pub fn ask(&self, request: SlotRequest) -> Result<(), Rejected> {
        let mut q = self.shared.lock();
        if q.shutdown {
            return Err(Rejected::ShuttingDown);
        }
        // As many as there are jobs: each is a copy of a slot's state.
        if q.actions.len() >= self.shared.capacity.max(1) {
            return Err(Rejected::QueueFull);
        }
        q.actions.push(request);
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
        self.wait();
    }

    /// Refuse new jobs, let the running and queued ones finish, and wait
    /// for the thread to end (a model being unloaded).
    pub fn drain(&self) {
        self.shutdown(false);
        self.wait();
    }

    fn wait(&self) {
        let handle = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(h) = handle {
            let _ = h.join();
        }
    }
}
