//! The states the cache knows, in RAM or in files: found by the prefix a
//! prompt can reuse, dropped by recency to stay within the byte bounds.

use crate::shared::{BlockKey, Blocks, Cut};
use crate::{Namespace, Stats};
use engine::{usable_prefix, MediaSpan, SavedPrompt};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Fewer tokens than this more than the caller holds are not worth a
/// state's load (a copy of all of it, or a read of its file): they are
/// computed instead.
pub(crate) const MIN_GAIN: usize = 32;

/// Tokens of an older state a newer one may leave unserved and still
/// replace it: reloading the older conversation through the newer state
/// then computes at most this many tokens more.
pub const SUPERSEDED_TAIL: usize = 64;

/// Where an entry's file stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FileState {
    /// No file (RAM only, or its write failed or was skipped).
    None,
    /// Queued or being written.
    Pending,
    /// On disk, this many bytes.
    Written(u64),
}

/// One state the cache knows.
#[derive(Debug)]
pub(crate) struct Entry {
    pub ns: Namespace,
    pub tokens: Vec<u32>,
    pub media: Vec<MediaSpan>,
    /// The whole state, while it is in RAM.
    pub saved: Option<Arc<SavedPrompt>>,
    /// Bytes of it in RAM no other state holds.
    pub own: u64,
    /// The blocks of rows it shares with other states in RAM.
    pub blocks: Vec<BlockKey>,
    pub file: FileState,
    /// Its file's name in the cache's folder.
    pub name: String,
    /// When it was last stored or served (a counter).
    pub last_used: u64,
}

impl Entry {
    /// An entry of `ns` for a state of `tokens` and `media`, not yet in
    /// RAM.
    pub fn new(
        ns: Namespace,
        (tokens, media): (Vec<u32>, Vec<MediaSpan>),
        file: FileState,
        name: String,
    ) -> Self {
        Self {
            ns,
            tokens,
            media,
            saved: None,
            own: 0,
            blocks: Vec::new(),
            file,
            name,
            last_used: 0,
        }
    }
}

/// Bytes a state takes in RAM when it shares nothing.
pub(crate) fn ram_bytes(s: &SavedPrompt) -> u64 {
    (s.kv.len() + 4 * s.tokens.len() + 48 * s.media.len()) as u64
}

/// What a state the cache holds looks like, for `hearth cache ls`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryInfo {
    /// The first bytes of its namespace, in hex.
    pub namespace: String,
    /// Tokens it holds.
    pub tokens: usize,
    /// Media items among them.
    pub media: usize,
    /// Bytes in RAM it alone holds (0 when only its file is left).
    pub ram_bytes: u64,
    /// Bytes in RAM of the rows it shares with other states (a system
    /// prompt's, say): held once for all of them.
    pub shared_bytes: u64,
    /// Bytes of its file (0 without one).
    pub disk_bytes: u64,
}

/// The best state for a prompt: in RAM, or to be read from its file.
pub(crate) enum Found {
    Ram(Arc<SavedPrompt>, usize),
    Disk(u64, usize),
}

/// Every entry, by id.
#[derive(Debug)]
pub(crate) struct Index {
    pub entries: HashMap<u64, Entry>,
    /// The blocks of rows states in RAM share.
    blocks: Blocks,
    next_id: u64,
    tick: u64,
    ram_limit: u64,
    /// The folder of the entries' files and its bound, when there is one.
    pub dir: Option<(PathBuf, u64)>,
}

impl Index {
    pub fn new(ram_limit: u64) -> Self {
        Self {
            entries: HashMap::new(),
            blocks: Blocks::default(),
            next_id: 0,
            tick: 0,
            ram_limit,
            dir: None,
        }
    }

    fn touch(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    /// Adds an entry (read from a file, or just stored); returns its id.
    pub fn add(&mut self, mut entry: Entry, stats: &Stats) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        entry.last_used = self.touch();
        if let FileState::Written(n) = entry.file {
            stats.disk_bytes.fetch_add(n, Ordering::Relaxed);
        }
        self.entries.insert(id, entry);
        id
    }

    /// The entry of `ns` that serves the most of `prompt`, if at least
    /// [`MIN_GAIN`] more than `held` tokens, most recent first among
    /// equals; marks it used.
    pub fn best(
        &mut self,
        ns: &Namespace,
        prompt: &[u32],
        media: &[MediaSpan],
        held: usize,
    ) -> Option<Found> {
        let (id, keep) = self
            .entries
            .iter()
            .filter(|(_, e)| {
                e.ns == *ns && (e.saved.is_some() || matches!(e.file, FileState::Written(_)))
            })
            .map(|(id, e)| {
                let keep = usable_prefix(&e.tokens, &e.media, prompt, media);
                let past = e.tokens.len() - keep;
                (*id, keep, std::cmp::Reverse(past), e.last_used)
            })
            .filter(|(_, keep, _, _)| *keep >= held + MIN_GAIN)
            .max_by_key(|(_, keep, past, used)| (*keep, *past, *used))
            .map(|(id, keep, _, _)| (id, keep))?;
        let tick = self.touch();
        let entry = self.entries.get_mut(&id)?;
        entry.last_used = tick;
        Some(match &entry.saved {
            Some(saved) => Found::Ram(Arc::clone(saved), keep),
            None => Found::Disk(id, keep),
        })
    }

    /// Stores `saved` in `ns`, removing the entries it supersedes, in RAM
    /// as `cut` (none: on disk only); returns its id and the state as held
    /// (its shared rows the table's). An entry is superseded when the new
    /// state serves all but at most [`SUPERSEDED_TAIL`] of its tokens: the
    /// same conversation's earlier turn (whose answer the next prompt
    /// re-tokenizes, so it differs near its end), or a branch of it just
    /// regenerated.
    pub fn insert(
        &mut self,
        ns: Namespace,
        saved: &SavedPrompt,
        cut: Option<Cut>,
        on_disk: bool,
        stats: &Stats,
    ) -> (u64, Option<Arc<SavedPrompt>>) {
        let superseded: Vec<u64> = self
            .entries
            .iter()
            .filter(|(_, e)| {
                e.ns == ns
                    && usable_prefix(&saved.tokens, &saved.media, &e.tokens, &e.media)
                        + SUPERSEDED_TAIL
                        >= e.tokens.len()
            })
            .map(|(id, _)| *id)
            .collect();
        for id in superseded {
            self.remove(id, stats);
        }
        let file = match on_disk {
            true => FileState::Pending,
            false => FileState::None,
        };
        let held = (saved.tokens.clone(), saved.media.clone());
        let id = self.add(Entry::new(ns, held, file, file_name(&ns, saved)), stats);
        let held = cut.and_then(|cut| self.hold(id, cut, stats));
        // Neither in RAM nor on its way to a file: nothing to keep.
        if held.is_none() && !on_disk {
            self.remove(id, stats);
        }
        (id, held)
    }

    /// Puts entry `id`'s state, cut at its blocks, in RAM (others go first
    /// to make room for all of it, shared or not); returns it as held.
    pub fn hold(&mut self, id: u64, cut: Cut, stats: &Stats) -> Option<Arc<SavedPrompt>> {
        let entry = self.entries.get(&id).filter(|e| e.saved.is_none())?;
        let extra = (4 * entry.tokens.len() + 48 * entry.media.len()) as u64;
        if !self.fits_ram(cut.len() + extra) {
            return None;
        }
        self.evict_ram(cut.len() + extra, stats);
        let held = self.blocks.share(cut);
        let entry = self.entries.get_mut(&id)?;
        let saved = Arc::new(SavedPrompt {
            tokens: entry.tokens.clone(),
            media: entry.media.clone(),
            kv: held.kv,
        });
        entry.own = held.own + extra;
        entry.blocks = held.keys;
        entry.saved = Some(Arc::clone(&saved));
        stats
            .ram_bytes
            .fetch_add(entry.own + held.new_blocks, Ordering::Relaxed);
        Some(saved)
    }

    /// Drops entry `id`'s state from RAM, letting go of its blocks.
    fn drop_ram(&mut self, id: u64, stats: &Stats) {
        let Some(entry) = self.entries.get_mut(&id) else {
            return;
        };
        let (own, keys) = (entry.own, std::mem::take(&mut entry.blocks));
        (entry.own, entry.saved) = (0, None);
        let freed = own + self.blocks.release(&keys);
        stats.ram_bytes.fetch_sub(freed, Ordering::Relaxed);
    }

    /// Whether a state of `bytes` can be held in RAM at all.
    pub fn fits_ram(&self, bytes: u64) -> bool {
        bytes <= self.ram_limit
    }

    /// Forgets an entry, removing its file if it is written (one being
    /// written is removed by the writer when it finds the entry gone).
    pub fn remove(&mut self, id: u64, stats: &Stats) {
        self.drop_ram(id, stats);
        let Some(entry) = self.entries.remove(&id) else {
            return;
        };
        if let FileState::Written(n) = entry.file {
            stats.disk_bytes.fetch_sub(n, Ordering::Relaxed);
            if let Some((dir, _)) = &self.dir {
                let _ = std::fs::remove_file(dir.join(&entry.name));
            }
        }
    }

    /// Drops the least recently used states from RAM until `incoming` more
    /// bytes fit its bound: those with a file (or one on its way) stay
    /// known, read again on their next hit; the others are forgotten.
    pub fn evict_ram(&mut self, incoming: u64, stats: &Stats) {
        while stats.ram_bytes.load(Ordering::Relaxed) + incoming > self.ram_limit {
            let Some((&id, _)) = self
                .entries
                .iter()
                .filter(|(_, e)| e.saved.is_some())
                .min_by_key(|(_, e)| e.last_used)
            else {
                return;
            };
            stats.ram_evictions.fetch_add(1, Ordering::Relaxed);
            match self.entries.get(&id).map(|e| e.file) {
                Some(FileState::None) => self.remove(id, stats),
                _ => self.drop_ram(id, stats),
            }
        }
    }

    /// Removes the least recently used files until `incoming` more bytes
    /// fit the disk bound; an entry left with neither RAM nor file is
    /// forgotten.
    pub fn evict_disk(&mut self, incoming: u64, stats: &Stats) {
        let Some((dir, limit)) = self.dir.clone() else {
            return;
        };
        while stats.disk_bytes.load(Ordering::Relaxed) + incoming > limit {
            let Some((&id, _)) = self
                .entries
                .iter()
                .filter(|(_, e)| matches!(e.file, FileState::Written(_)))
                .min_by_key(|(_, e)| e.last_used)
            else {
                return;
            };
            stats.disk_evictions.fetch_add(1, Ordering::Relaxed);
            let Some(entry) = self.entries.get_mut(&id) else {
                return;
            };
            if entry.saved.is_none() {
                self.remove(id, stats);
            } else if let FileState::Written(n) = entry.file {
                entry.file = FileState::None;
                stats.disk_bytes.fetch_sub(n, Ordering::Relaxed);
                let _ = std::fs::remove_file(dir.join(&entry.name));
            }
        }
    }

    /// Every id.
    pub fn ids(&self) -> Vec<u64> {
        self.entries.keys().copied().collect()
    }

    /// What each entry holds, most recently used first.
    pub fn entries(&self) -> Vec<EntryInfo> {
        let mut all: Vec<&Entry> = self.entries.values().collect();
        all.sort_by_key(|e| std::cmp::Reverse(e.last_used));
        all.into_iter()
            .map(|e| EntryInfo {
                namespace: e.ns.0[..6].iter().map(|b| format!("{b:02x}")).collect(),
                tokens: e.tokens.len(),
                media: e.media.len(),
                ram_bytes: e.own,
                shared_bytes: self.blocks.bytes_of(&e.blocks),
                disk_bytes: match e.file {
                    FileState::Written(n) => n,
                    _ => 0,
                },
            })
            .collect()
    }
}

/// A state's file name: a digest of its namespace, tokens and media.
pub(crate) fn file_name(ns: &Namespace, saved: &SavedPrompt) -> String {
    use sha2::{Digest, Sha256};
    let mut sha = Sha256::new();
    sha.update(ns.0);
    for t in &saved.tokens {
        sha.update(t.to_le_bytes());
    }
    for m in &saved.media {
        sha.update((m.pos as u64).to_le_bytes());
        sha.update((m.tokens as u64).to_le_bytes());
        sha.update(m.key);
    }
    let digest = sha.finalize();
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("{hex}.{}", crate::disk::EXTENSION)
}
