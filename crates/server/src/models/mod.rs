//! The models a server serves: every one is listed whether loaded or not; a
//! request names one, and the first request for a model not in memory
//! loads it (concurrent ones wait for that one load). A model idle past its
//! keep-alive is unloaded, and the least recently used one makes room when
//! `max_loaded` or `max_memory` would be exceeded. With `-m` one model is
//! pinned: loaded at start and kept for the server's life.

mod backend;
mod exposition;
mod lineup;

use crate::error::ApiError;
use crate::metrics::Metrics;
pub(crate) use backend::Loaded;
pub use backend::{Backend, Lease};
use engine::{EngineError, SamplingParams, Speculation};
pub(crate) use exposition::render_metrics;
pub(crate) use lineup::keep_alive_of_secs;
pub use lineup::{parse_keep_alive, Lineup, LoadFn, RescanFn, Residency, ServedModel};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The registry the handlers ask for models.
pub(crate) struct Models {
    load: LoadFn,
    rescan: Option<RescanFn>,
    pinned: bool,
    sampling: SamplingParams,
    speculation: Option<Speculation>,
    residency: Residency,
    parallel: usize,
    queue: usize,
    metrics: Arc<Metrics>,
    /// The prompt states every model's slots keep, when the server keeps
    /// them.
    pub(crate) cache: Option<Arc<prompt_cache::PromptCache>>,
    table: Mutex<Table>,
    /// Models loaded since the start, and loads that failed.
    pub loads: AtomicU64,
    pub load_failures: AtomicU64,
    /// The LoRA scales `POST /lora-adapters` set, by model id: a model
    /// loaded again (after an unload) runs at them, not at its `--lora`
    /// scales.
    lora_scales: Mutex<std::collections::HashMap<String, Vec<(usize, f32)>>>,
}

/// The listed models, each with its load lock and its place in memory.
struct Table {
    models: Vec<ServedModel>,
    /// Held while the model loads: concurrent first requests wait on it
    /// and find the model loaded.
    loading: Vec<Arc<tokio::sync::Mutex<()>>>,
    loaded: Vec<Option<Arc<Loaded>>>,
}

impl Table {
    fn push(&mut self, model: ServedModel) {
        self.models.push(model);
        self.loading.push(Arc::new(tokio::sync::Mutex::new(())));
        self.loaded.push(None);
    }
}

/// A listed model and, when in memory, what it runs as.
pub(crate) struct Listed {
    pub model: ServedModel,
    pub loaded: Option<Arc<Loaded>>,
}

impl Models {
    pub(crate) fn new(
        lineup: Lineup,
        residency: Residency,
        parallel: usize,
        queue: usize,
        metrics: Arc<Metrics>,
        cache: Option<Arc<prompt_cache::PromptCache>>,
    ) -> Self {
        let mut table = Table {
            models: Vec::new(),
            loading: Vec::new(),
            loaded: Vec::new(),
        };
        for m in lineup.models {
            table.push(m);
        }
        Self {
            load: lineup.load,
            rescan: lineup.rescan,
            pinned: lineup.pinned,
            sampling: lineup.sampling,
            speculation: lineup.speculation,
            residency,
            parallel,
            queue,
            metrics,
            cache,
            table: Mutex::new(table),
            loads: AtomicU64::new(0),
            load_failures: AtomicU64::new(0),
            lora_scales: Mutex::default(),
        }
    }

    /// Sets the LoRA scales of the loaded model `lease` for every request
    /// without its own, and keeps them for its later loads.
    pub(crate) fn set_lora_scales(
        &self,
        lease: &Lease,
        scales: Vec<(usize, f32)>,
    ) -> Result<(), EngineError> {
        lease.engine.set_lora_scales(&scales)?;
        let mut kept = self.lora_scales.lock().unwrap_or_else(|e| e.into_inner());
        kept.insert(lease.0.id.clone(), scales);
        Ok(())
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        // Plain bookkeeping: a panic elsewhere cannot leave it half-written.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Add the models the folders hold now that are not listed yet.
    pub(crate) async fn refresh(&self) {
        let Some(rescan) = self.rescan.clone() else {
            return;
        };
        let Ok(found) = tokio::task::spawn_blocking(move || rescan()).await else {
            return;
        };
        let mut table = self.table();
        for model in found {
            if !table.models.iter().any(|m| m.path == model.path) {
                table.push(model);
            }
        }
    }

    /// The sampling defaults of requests that set none.
    pub(crate) fn sampling(&self) -> &SamplingParams {
        &self.sampling
    }

    /// Whether the server answers requests: with a pinned model, once it
    /// is loaded; otherwise always (models load on demand).
    pub(crate) fn ready(&self) -> bool {
        !self.pinned || self.table().loaded.first().is_some_and(Option::is_some)
    }

    /// Whether models load on request (not one pinned at start).
    pub(crate) fn on_demand(&self) -> bool {
        !self.pinned
    }

    /// Every model, loaded or not, in listing order.
    pub(crate) fn list(&self) -> Vec<Listed> {
        let table = self.table();
        table
            .models
            .iter()
            .zip(&table.loaded)
            .map(|(model, l)| Listed {
                model: model.clone(),
                loaded: l.clone(),
            })
            .collect()
    }

    /// The models in memory, most recently used first.
    pub(crate) fn in_memory(&self) -> Vec<Arc<Loaded>> {
        let mut v: Vec<Arc<Loaded>> = self.table().loaded.iter().flatten().cloned().collect();
        v.sort_by_key(|l| std::cmp::Reverse(l.last_used()));
        v
    }

    /// The index of the model `asked` names (Ollama's `NAME:latest` too);
    /// with no name, the most recently used model in memory, else the first.
    /// A name not listed sends the folders to be searched again first.
    pub(crate) async fn find(&self, asked: Option<&str>) -> Result<usize, ApiError> {
        let asked = asked.map(|a| a.trim()).filter(|a| !a.is_empty());
        let Some(asked) = asked else {
            if self.table().models.is_empty() {
                return Err(ApiError::model_not_found("", &[]));
            }
            let recent = self.in_memory().first().map(|l| l.index);
            return Ok(recent.unwrap_or(0));
        };
        if let Some(i) = self.position(asked) {
            return Ok(i);
        }
        self.refresh().await;
        self.position(asked)
            .ok_or_else(|| ApiError::model_not_found(asked, &self.ids()))
    }

    fn position(&self, asked: &str) -> Option<usize> {
        let bare = asked.strip_suffix(":latest").unwrap_or(asked);
        self.table().models.iter().position(|m| {
            m.names
                .iter()
                .any(|n| n.eq_ignore_ascii_case(asked) || n.eq_ignore_ascii_case(bare))
        })
    }

    /// The first listed model's id (the pinned one, with `-m`).
    pub(crate) fn first_id(&self) -> String {
        self.table()
            .models
            .first()
            .map_or_else(String::new, |m| m.id().to_string())
    }

    fn ids(&self) -> Vec<String> {
        let table = self.table();
        table.models.iter().map(|m| m.id().to_string()).collect()
    }

    /// The id of the model `asked` names.
    pub(crate) async fn resolve(&self, asked: Option<&str>) -> Result<String, ApiError> {
        let index = self.find(asked).await?;
        Ok(self.table().models[index].id().to_string())
    }

    /// The model `asked` names, loading it first when it is not in memory.
    pub(crate) async fn lease(&self, asked: Option<&str>) -> Result<Lease, ApiError> {
        let index = self.find(asked).await?;
        let lock = {
            let table = self.table();
            if let Some(l) = &table.loaded[index] {
                return Ok(Lease(Arc::clone(l)));
            }
            Arc::clone(&table.loading[index])
        };
        if !self.on_demand() {
            return Err(ApiError::unavailable("The model is loading.", 1));
        }
        let _loading = lock.lock().await;
        // Whoever held the lock before us may have loaded it.
        let model = {
            let table = self.table();
            if let Some(l) = &table.loaded[index] {
                return Ok(Lease(Arc::clone(l)));
            }
            table.models[index].clone()
        };
        self.make_room(model.disk_bytes()).await;
        let loaded = self.load_at(index, model).await?;
        Ok(Lease(loaded))
    }

    /// Load model `index` on a blocking thread and put it in its slot.
    async fn load_at(&self, index: usize, model: ServedModel) -> Result<Arc<Loaded>, ApiError> {
        let load = Arc::clone(&self.load);
        let (parallel, queue) = (self.parallel, self.queue);
        let (metrics, spec) = (Arc::clone(&self.metrics), self.speculation.clone());
        let cache = self.cache.clone();
        let started = Instant::now();
        let id = model.id().to_string();
        let built = tokio::task::spawn_blocking(move || {
            build(
                &load,
                &model,
                Serving {
                    parallel,
                    queue,
                    metrics: &metrics,
                    cache: cache.as_ref(),
                },
                spec.as_ref(),
                false,
            )
        })
        .await
        .unwrap_or_else(|e| {
            Err(EngineError::InvalidRequest(format!(
                "the loader stopped: {e}"
            )))
        });
        let kept = self
            .lora_scales
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id)
            .cloned();
        let built = built.and_then(|(backend, bytes)| {
            if let Some(scales) = kept {
                backend.engine.set_lora_scales(&scales)?;
            }
            Ok((backend, bytes))
        });
        let (backend, bytes) = match built {
            Ok(b) => b,
            Err(why) => {
                self.load_failures.fetch_add(1, Ordering::Relaxed);
                eprintln!("hearth serve: cannot load {id}: {why}");
                return Err(ApiError {
                    code: Some("model_load_failed"),
                    ..ApiError::internal(format!(
                        "The model `{id}` could not be loaded: {}",
                        crate::error::redact_paths(&why.to_string())
                    ))
                });
            }
        };
        eprintln!(
            "hearth serve: {} (first request waited {:.2?})",
            backend.describe(&id, parallel, queue),
            started.elapsed()
        );
        Ok(self.install(index, id, backend, bytes))
    }

    /// Load the pinned model (`-m`), blocking: the server's start.
    pub(crate) fn load_pinned(&self) -> Result<(), EngineError> {
        let Some(model) = self.table().models.first().cloned() else {
            return Err(EngineError::InvalidOptions("no model to serve".into()));
        };
        let spec = self.speculation.as_ref();
        let serving = Serving {
            parallel: self.parallel,
            queue: self.queue,
            metrics: &self.metrics,
            cache: self.cache.as_ref(),
        };
        let (backend, bytes) = build(&self.load, &model, serving, spec, true)?;
        eprintln!(
            "hearth serve: {}",
            backend.describe(model.id(), self.parallel, self.queue)
        );
        self.install(0, model.id().to_string(), backend, bytes);
        Ok(())
    }

    /// Put a started model in slot `index` and count the load.
    fn install(&self, index: usize, id: String, backend: Backend, bytes: u64) -> Arc<Loaded> {
        let keep_alive = if self.pinned {
            None
        } else {
            self.residency.keep_alive
        };
        let loaded = Arc::new(Loaded::new(
            backend,
            index,
            id,
            bytes,
            self.pinned,
            keep_alive,
        ));
        self.table().loaded[index] = Some(Arc::clone(&loaded));
        self.loads.fetch_add(1, Ordering::Relaxed);
        self.metrics.loaded.store(true, Ordering::Relaxed);
        loaded
    }

    /// Unload the least recently used models until one more of `incoming`
    /// bytes fits under `max_loaded` and `max_memory`. An evicted model's
    /// running requests finish first, so memory is bounded.
    async fn make_room(&self, incoming: u64) {
        loop {
            let victim = {
                let mut table = self.table();
                let live: Vec<&Arc<Loaded>> = table.loaded.iter().flatten().collect();
                let used: u64 = live.iter().map(|l| l.bytes).sum();
                let over_count = live.len() >= self.residency.max_loaded.max(1);
                let over_memory = self
                    .residency
                    .max_memory
                    .is_some_and(|max| used + incoming > max);
                if !(over_count || over_memory) {
                    return;
                }
                let Some(index) = live
                    .iter()
                    .filter(|l| !l.pinned)
                    .min_by_key(|l| l.last_used())
                    .map(|l| l.index)
                else {
                    return;
                };
                table.loaded[index].take()
            };
            if let Some(v) = victim {
                eprintln!("hearth serve: unloading {} to make room", v.id);
                unload(v).await;
            }
        }
    }

    /// Unload every model idle past its keep-alive at `now`.
    pub(crate) async fn reap(&self, now: Instant) {
        let expired: Vec<Arc<Loaded>> = {
            let mut table = self.table();
            table
                .loaded
                .iter_mut()
                .filter(|s| {
                    s.as_ref().is_some_and(|l| {
                        // Only the registry holds it: no request is using it.
                        Arc::strong_count(l) == 1 && l.expires().is_some_and(|t| t <= now)
                    })
                })
                .filter_map(Option::take)
                .collect()
        };
        for l in expired {
            eprintln!(
                "hearth serve: unloading {} (idle past its keep-alive)",
                l.id
            );
            unload(l).await;
        }
    }

    /// Stop every loaded model's scheduler: with `cancel`, ending what runs.
    pub(crate) fn shutdown(&self, cancel: bool) {
        for l in self.table().loaded.iter().flatten() {
            l.backend.scheduler.shutdown(cancel);
        }
    }

    /// Wait for every scheduler thread to end (cancelling what still runs).
    pub(crate) fn join(&self) {
        let all: Vec<Arc<Loaded>> = self.table().loaded.iter().flatten().cloned().collect();
        for l in all {
            l.backend.scheduler.join();
        }
    }

    /// The idle check's period: a tenth of the keep-alive, within 50 ms–1 s.
    pub(crate) fn reap_period(&self) -> Duration {
        self.residency
            .keep_alive
            .map_or(Duration::from_secs(1), |k| k / 10)
            .clamp(Duration::from_millis(50), Duration::from_secs(1))
    }
}

/// How a loaded model is served: its slots, queue, metrics and the
/// server's prompt-state store.
struct Serving<'a> {
    parallel: usize,
    queue: usize,
    metrics: &'a Arc<Metrics>,
    cache: Option<&'a Arc<prompt_cache::PromptCache>>,
}

/// Load `model` and start the threads that serve it (blocking): its
/// backend, and what it takes (its files and every slot's cache). The
/// server's `speculation` is the model's where it applies to it; a draft
/// model of another vocabulary does not, and is an error when `strict` (the
/// one model served), else the model is served without.
fn build(
    load: &LoadFn,
    model: &ServedModel,
    serving: Serving<'_>,
    speculation: Option<&Speculation>,
    strict: bool,
) -> Result<(Backend, u64), EngineError> {
    // The files' identity (for the prompt states) is read beside the load.
    let (engine, files) = std::thread::scope(|s| {
        let files =
            s.spawn(|| prompt_cache::ModelFiles::identify(&model.path, model.mmproj.as_deref()));
        let engine = load(model);
        let files = files
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("the identity reader stopped")));
        (engine, files)
    });
    let engine = engine?;
    let speculation = match speculation.map(|s| s.for_target(&engine)).transpose() {
        Ok(s) => s,
        Err(why) if !strict => {
            eprintln!(
                "hearth serve: {}: served without speculation: {why}",
                model.id()
            );
            None
        }
        Err(why) => return Err(why),
    };
    if let Some(why) = engine.template().refused() {
        eprintln!(
            "hearth serve: {}: its chat template is not used ({why}); chatting in the built-in Gemma format",
            model.id()
        );
    }
    let Serving {
        parallel,
        queue,
        metrics,
        cache,
    } = serving;
    let namespace = states_namespace(model, files, &engine, cache.is_some());
    let cache = cache
        .zip(namespace)
        .map(|(c, ns)| crate::scheduler::SlotCache {
            cache: Arc::clone(c),
            model: ns,
        });
    let bytes = model.disk_bytes() + engine.serving_bytes(parallel.max(1)) as u64;
    let mut backend = Backend::start(engine, speculation, parallel, queue, metrics, cache)
        .map_err(|e| EngineError::InvalidRequest(format!("cannot start the scheduler: {e}")))?;
    backend.namespace = namespace;
    Ok((backend, bytes))
}

/// The namespace of `model`'s prompt states: its `files` and the options of
/// `engine` that change its numbers. Files that could not be read leave
/// none (said where the server keeps states: the model is then served
/// without them).
fn states_namespace(
    model: &ServedModel,
    files: std::io::Result<prompt_cache::ModelFiles>,
    engine: &engine::Engine,
    kept: bool,
) -> Option<prompt_cache::Namespace> {
    match files {
        Ok(files) => Some(files.namespace(engine)),
        Err(e) => {
            if kept {
                eprintln!(
                    "hearth serve: {}: prompt states are not kept ({e})",
                    model.id()
                );
            }
            None
        }
    }
}

/// Let `model`'s requests finish, stop its threads, and drop it.
async fn unload(model: Arc<Loaded>) {
    let _ = tokio::task::spawn_blocking(move || {
        model.backend.scheduler.drain();
        drop(model);
    })
    .await;
}
