//! hearth-prompt-cache: prompt states kept beyond the slots.
//!
//! A server slot keeps one conversation's cache; the next conversation in
//! the slot overwrites it, and an unloaded model or a restarted server loses
//! them all. A [`PromptCache`] keeps the states ([`engine::SavedPrompt`])
//! sessions leave behind, bounded in bytes, in RAM and, with a folder, in
//! files that outlive the process. A prompt finds the state it can reuse
//! the most of ([`engine::usable_prefix`], the session's own rule), within
//! its [`Namespace`]: states never cross models, options that change the
//! numbers, or (unless the operator shares them) API keys.
//!
//! Files are written in the background after a turn, under a temporary name
//! then renamed (`hearth-durable`), and carry a checksum: a damaged or
//! half-written file is ignored, removed and reported, never loaded.

#![warn(missing_docs)]

mod disk;
mod file;
mod identity;
mod index;
mod named;
mod shared;

pub use disk::{default_ram_bytes, DEFAULT_DISK_BYTES};
pub use identity::file_identity;
pub use index::{EntryInfo, SUPERSEDED_TAIL};
pub use named::{load_named, save_named, NamedFileError};

use engine::{MediaSpan, SavedPrompt};
use sha2::{Digest, Sha256};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Who may reuse a state: a digest of the model file's identity, the
/// options that change its numbers, and the caller's key where states are
/// not shared. Two requests reuse each other's states only within one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Namespace(pub [u8; 32]);

impl Namespace {
    /// The namespace of `parts`, each length-prefixed so that no two lists
    /// of parts give the same bytes.
    pub fn of(parts: &[&[u8]]) -> Self {
        let mut sha = Sha256::new();
        for p in parts {
            sha.update((p.len() as u64).to_le_bytes());
            sha.update(p);
        }
        Self(sha.finalize().into())
    }

    /// This namespace narrowed to the states computed with the adapters
    /// whose key is `adapters` ([`engine::Adapters::key`]; empty: none,
    /// left as it is).
    pub fn with_adapters(self, adapters: &[u8]) -> Self {
        match adapters.is_empty() {
            true => self,
            false => Self::of(&[b"adapters", &self.0, adapters]),
        }
    }

    /// This namespace narrowed to one caller (`None`: left as it is).
    pub fn for_caller(self, caller: Option<&[u8; 32]>) -> Self {
        match caller {
            Some(c) => Self::of(&[&self.0, c]),
            None => self,
        }
    }
}

/// A cache seen through one namespace: what a session resumes from and
/// leaves its state in ([`engine::PromptStore`]).
#[derive(Debug, Clone)]
pub struct ScopedCache {
    /// The cache.
    pub cache: Arc<PromptCache>,
    /// The namespace its states are found and kept in.
    pub ns: Namespace,
}

impl engine::PromptStore for ScopedCache {
    fn find(
        &self,
        adapters: &[u8],
        prompt: &[u32],
        media: &[MediaSpan],
        held: usize,
    ) -> Option<(Arc<SavedPrompt>, usize)> {
        self.cache
            .lookup(&self.ns.with_adapters(adapters), prompt, media, held)
            .map(|hit| (hit.saved, hit.keep))
    }

    fn keep(&self, adapters: &[u8], saved: SavedPrompt) {
        self.cache.store(self.ns.with_adapters(adapters), saved);
    }

    fn unloadable(&self, why: &str) {
        self.cache.note_unloadable(why);
    }

    fn flush(&self) {
        self.cache.flush();
    }
}

/// The identity of a model's files: the weights' and the projector's, by
/// [`file_identity`]. Worked out apart from the load, so a loader can read
/// it beside the weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelFiles {
    weights: [u8; 32],
    projector: [u8; 32],
}

impl ModelFiles {
    /// Reads the identity of `weights` and of `projector`, if there is one.
    pub fn identify(
        weights: &std::path::Path,
        projector: Option<&std::path::Path>,
    ) -> std::io::Result<Self> {
        Ok(Self {
            weights: file_identity(weights)?,
            projector: projector
                .map(file_identity)
                .transpose()?
                .unwrap_or_default(),
        })
    }

    /// The namespace of the states of these files run by `engine`: with
    /// the options of `engine` that change its numbers, and this version of
    /// Hearth (a newer one may compute other bits).
    pub fn namespace(&self, engine: &engine::Engine) -> Namespace {
        Namespace::of(&[
            b"hearth prompt state",
            env!("CARGO_PKG_VERSION").as_bytes(),
            &self.weights,
            &self.projector,
            engine.numbers_fingerprint().as_bytes(),
        ])
    }
}

/// The namespace of a model's states: its files ([`ModelFiles`]) and the
/// options of `engine` that change its numbers.
pub fn model_namespace(
    engine: &engine::Engine,
    weights: &std::path::Path,
    projector: Option<&std::path::Path>,
) -> std::io::Result<Namespace> {
    Ok(ModelFiles::identify(weights, projector)?.namespace(engine))
}

/// How much the cache may hold.
#[derive(Debug, Clone)]
pub struct CacheConfig {
    /// Bytes of states kept in RAM.
    pub ram_bytes: u64,
    /// Where states are written to outlive the process (`None`: RAM only).
    pub dir: Option<PathBuf>,
    /// Bytes of state files kept in `dir`.
    pub disk_bytes: u64,
}

/// Counters of what the cache did, for `/metrics`.
#[derive(Debug, Default)]
pub struct Stats {
    /// Lookups served a state from RAM.
    pub ram_hits: AtomicU64,
    /// Lookups served a state read from its file.
    pub disk_hits: AtomicU64,
    /// Lookups that found nothing to reuse beyond what the slot held.
    pub misses: AtomicU64,
    /// States stored.
    pub stored: AtomicU64,
    /// States dropped from RAM to stay within its bound.
    pub ram_evictions: AtomicU64,
    /// State files removed to stay within the disk bound.
    pub disk_evictions: AtomicU64,
    /// State files written.
    pub files_written: AtomicU64,
    /// Damaged or unreadable state files found, ignored and removed.
    pub files_ignored: AtomicU64,
    /// Bytes of states in RAM now.
    pub ram_bytes: AtomicU64,
    /// Bytes of state files now.
    pub disk_bytes: AtomicU64,
    /// States found that would not load into the session (a ring that
    /// cannot rewind as far as the prompt needed): computed afresh.
    pub unloadable: AtomicU64,
}

/// A state that serves a prompt: load its first `keep` tokens
/// ([`engine::Session::load_prompt`]).
#[derive(Debug, Clone)]
pub struct Hit {
    /// The state.
    pub saved: Arc<SavedPrompt>,
    /// How many of its tokens the prompt reuses.
    pub keep: usize,
}

/// Prompt states kept in RAM and, with a folder, on disk. Shared by every
/// scheduler of a server (each model's states in its own namespaces).
#[derive(Debug)]
pub struct PromptCache {
    index: Arc<Mutex<index::Index>>,
    disk: Option<disk::Disk>,
    stats: Arc<Stats>,
}

/// Locks the index; every change to it is whole before anything in it can
/// panic, so a poisoned lock holds a consistent index.
pub(crate) fn lock(index: &Mutex<index::Index>) -> MutexGuard<'_, index::Index> {
    index.lock().unwrap_or_else(|e| e.into_inner())
}

impl PromptCache {
    /// A cache within `config`'s bounds; with a folder, the state files
    /// already there are indexed (their headers read; damaged ones removed
    /// and reported on stderr).
    pub fn open(config: &CacheConfig) -> std::io::Result<Self> {
        let mut cache = Self::in_ram(config.ram_bytes);
        if let Some(dir) = &config.dir {
            let disk = disk::Disk::open(dir, config.disk_bytes, &cache.index, &cache.stats)?;
            cache.disk = Some(disk);
        }
        Ok(cache)
    }

    /// A cache of `ram_bytes` in RAM, without files.
    pub fn in_ram(ram_bytes: u64) -> Self {
        Self {
            index: Arc::new(Mutex::new(index::Index::new(ram_bytes))),
            disk: None,
            stats: Arc::new(Stats::default()),
        }
    }

    /// What the cache did so far.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The state of `ns` that serves the most of `prompt` (with `media`),
    /// if it serves enough more than the `held` tokens the caller already
    /// has to be worth loading (32).
    pub fn lookup(
        &self,
        ns: &Namespace,
        prompt: &[u32],
        media: &[MediaSpan],
        held: usize,
    ) -> Option<Hit> {
        let found = lock(&self.index).best(ns, prompt, media, held);
        let hit = match found {
            Some(index::Found::Ram(saved, keep)) => {
                self.stats.ram_hits.fetch_add(1, Ordering::Relaxed);
                Some(Hit { saved, keep })
            }
            Some(index::Found::Disk(id, keep)) => self
                .disk
                .as_ref()
                .and_then(|disk| disk.load(id, &self.index, &self.stats))
                .map(|saved| {
                    self.stats.disk_hits.fetch_add(1, Ordering::Relaxed);
                    Hit { saved, keep }
                }),
            None => None,
        };
        if hit.is_none() {
            self.stats.misses.fetch_add(1, Ordering::Relaxed);
        }
        hit
    }

    /// Keeps `saved` for later prompts of `ns`, in place of the states it
    /// extends (the same conversation's earlier turns), and queues its file.
    pub fn store(&self, ns: Namespace, saved: SavedPrompt) {
        if saved.tokens.is_empty() {
            return;
        }
        // Cut outside the lock: it copies the whole state.
        let cut = shared::Cut::of(&ns, &saved);
        let mut index = lock(&self.index);
        let in_ram = index.fits_ram(index::ram_bytes(&saved));
        let on_disk = self.disk.as_ref().is_some_and(|d| d.fits(&saved));
        if !in_ram && !on_disk {
            return;
        }
        let (id, held) = index.insert(ns, &saved, in_ram.then_some(cut), on_disk, &self.stats);
        self.stats.stored.fetch_add(1, Ordering::Relaxed);
        if let Some(disk) = self.disk.as_ref().filter(|_| on_disk) {
            let saved = held.unwrap_or_else(|| Arc::new(saved));
            disk.queue_write(id, ns, saved, &mut index);
        }
    }

    /// Counts a hit that would not load (`why`, said on stderr once): the
    /// prompt is computed afresh.
    pub fn note_unloadable(&self, why: &str) {
        if self.stats.unloadable.fetch_add(1, Ordering::Relaxed) == 0 {
            eprintln!(
                "hearth: prompt cache: a stored state did not load ({why}); computing the prompt"
            );
        }
    }

    /// The states held, most recently used first.
    pub fn entries(&self) -> Vec<EntryInfo> {
        lock(&self.index).entries()
    }

    /// Forgets every state, removing its file.
    pub fn clear(&self) {
        let mut index = lock(&self.index);
        for id in index.ids() {
            index.remove(id, &self.stats);
        }
    }

    /// Waits until every file write queued so far is done (for tests, and
    /// before a planned exit, so a state written after the last turn is not
    /// lost).
    pub fn flush(&self) {
        if let Some(disk) = &self.disk {
            disk.flush();
        }
    }
}
