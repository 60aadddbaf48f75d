//! One loaded model: its engine, the scheduler that generates with it (or
//! the batcher that embeds with it), and the lease a request holds on it.

use crate::embeddings::batcher::Batcher;
use crate::metrics::Metrics;
use crate::scheduler::{Scheduler, SlotCache};
use engine::{Engine, Speculation};
use std::ops::Deref;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the handlers need of a loaded model.
pub struct Backend {
    pub(crate) engine: Arc<Engine>,
    /// The speculation its requests get unless they turn it off.
    pub(crate) speculation: Option<Speculation>,
    pub(crate) scheduler: Scheduler,
    /// The embedding queue, when the model embeds (its scheduler then has
    /// no slots: an embedding model does not generate).
    pub(crate) embedder: Option<Batcher>,
    /// The namespace of its prompt states, which saved slot files carry
    /// (`None`: its files could not be identified).
    pub(crate) namespace: Option<prompt_cache::Namespace>,
}

impl Backend {
    /// Start the threads that serve `engine`: `parallel` slots (keeping
    /// their prompts' states in `cache`, when there is one) and a queue of
    /// `queue` jobs.
    pub(crate) fn start(
        engine: Engine,
        speculation: Option<Speculation>,
        parallel: usize,
        queue: usize,
        metrics: &Arc<Metrics>,
        cache: Option<SlotCache>,
    ) -> std::io::Result<Self> {
        let engine = Arc::new(engine);
        let scheduler = Scheduler::start(
            Arc::clone(&engine),
            parallel,
            queue,
            Arc::clone(metrics),
            cache,
        )?;
        let embedder = match engine.embedding_dim() {
            Some(_) => Some(Batcher::start(
                Arc::clone(&engine),
                queue,
                Arc::clone(metrics),
            )?),
            None => None,
        };
        Ok(Self {
            engine,
            speculation,
            scheduler,
            embedder,
            namespace: None,
        })
    }

    /// One line for the log: what was loaded and how it runs.
    pub(crate) fn describe(&self, id: &str, parallel: usize, queue: usize) -> String {
        let e = &self.engine;
        let o = e.options();
        let adapters: String = e.lora_adapters().iter().map(|a| format!("; {a}")).collect();
        let line = match e.embedding_dim() {
            Some(dim) => format!(
                "embedding model {id} ({}, {dim} dimensions, {} threads) loaded in {:.2?}; texts of up to {} tokens, queue {queue}",
                e.weight_type().unwrap_or("unknown type"),
                o.threads.unwrap_or(1),
                e.load_time(),
                e.n_ctx(),
            ),
            None => {
                let mib = |bytes: usize| bytes as f64 / (1024.0 * 1024.0);
                let drafts = match &self.speculation {
                    Some(Speculation::Draft(m)) => format!(
                        "; each slot keeps a draft sequence of {:.1} MiB once it speculates",
                        mib(m.sequence_bytes(e.n_ctx()))
                    ),
                    _ => String::new(),
                };
                format!(
                    "model {id} ({}, {:?} precision, {} threads) loaded in {:.2?}; {parallel} slot(s) of {} tokens ({:.1} MiB with their shared prefill buffers){drafts}, queue {queue}",
                    e.weight_type().unwrap_or("unknown type"),
                    o.precision,
                    o.threads.unwrap_or(1),
                    e.load_time(),
                    e.n_ctx(),
                    mib(e.serving_bytes(parallel.max(1))),
                )
            }
        };
        format!("{line}{adapters}")
    }
}

/// A model in memory, with its bookkeeping.
pub(crate) struct Loaded {
    pub backend: Backend,
    /// Its place in the lineup.
    pub index: usize,
    /// The id requests see.
    pub id: String,
    /// What it takes: the weights' files and every slot's cache.
    pub bytes: u64,
    /// When it last finished serving a request (or was loaded).
    last_used: Mutex<Instant>,
    /// Loaded for the server's life (`-m`): never unloaded.
    pub pinned: bool,
    /// How long it stays once idle (`None`: for ever).
    keep_alive: Mutex<Option<Duration>>,
}

impl Loaded {
    pub(crate) fn new(
        backend: Backend,
        index: usize,
        id: String,
        bytes: u64,
        pinned: bool,
        keep_alive: Option<Duration>,
    ) -> Self {
        Self {
            backend,
            index,
            id,
            bytes,
            pinned,
            last_used: Mutex::new(Instant::now()),
            keep_alive: Mutex::new(keep_alive),
        }
    }

    pub(crate) fn last_used(&self) -> Instant {
        *self.last_used.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn touch(&self) {
        *self.last_used.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    pub(crate) fn keep_alive(&self) -> Option<Duration> {
        *self.keep_alive.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// When it will be unloaded if nothing uses it (`None`: never).
    pub(crate) fn expires(&self) -> Option<Instant> {
        if self.pinned {
            return None;
        }
        self.keep_alive()
            .and_then(|k| self.last_used().checked_add(k))
    }
}

/// A request's hold on a loaded model: while any lease lives the model is
/// in use and is not unloaded for idleness; dropping the last one starts
/// its keep-alive time.
#[derive(Clone)]
pub struct Lease(pub(crate) Arc<Loaded>);

impl Lease {
    /// Keep the model this long after this request (Ollama's per-request
    /// `keep_alive`; `None`: for ever). Ignored for a pinned model.
    pub(crate) fn set_keep_alive(&self, keep: Option<Duration>) {
        *self.0.keep_alive.lock().unwrap_or_else(|e| e.into_inner()) = keep;
    }
}

impl Deref for Lease {
    type Target = Backend;
    fn deref(&self) -> &Backend {
        &self.0.backend
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.0.touch();
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Lease").field(&self.0.id).finish()
    }
}
