//! The cache's folder: state files indexed at start, written by a
//! background thread after each turn (temporary name, fsync, rename), read
//! back on a hit and checked before they are trusted.

use crate::index::{Entry, FileState, Index};
use crate::shared::Cut;
use crate::{file, lock, Namespace, Stats};
use engine::SavedPrompt;
use std::io::{self, BufWriter};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex};

/// The extension of state files.
pub(crate) const EXTENSION: &str = "hpc";

/// The writer thread's nice value (the server's prep threads' too).
#[cfg(target_os = "linux")]
const WRITER_NICE: i32 = 10;

/// Bytes of state files a folder keeps unless told otherwise.
pub const DEFAULT_DISK_BYTES: u64 = 4 << 30;

/// Bytes of states waiting for the writer at most (one state is queued
/// whatever its size): more are not written (their states stay in RAM
/// only), so a slow disk cannot hold evicted states in memory without
/// bound.
const QUEUED_BYTES: u64 = 256 << 20;

/// Bytes of RAM states kept unless told otherwise: an eighth of the memory
/// available now, at most 2 GiB (llama.cpp keeps up to 8 GiB; a server left
/// running beside other work should not grow by that much unasked), 256 MiB
/// where the available memory cannot be read.
pub fn default_ram_bytes() -> u64 {
    let available = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines()
            .find_map(|l| l.strip_prefix("MemAvailable:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
    });
    match available {
        Some(kib) => (kib * 1024 / 8).min(2 << 30),
        None => 256 << 20,
    }
}

/// A file to write: the entry it belongs to, checked again once written.
struct Write1 {
    id: u64,
    name: String,
    ns: Namespace,
    saved: Arc<SavedPrompt>,
}

/// Writes queued and not yet done (how many, how many bytes), for the
/// queue's bound and [`Disk::flush`].
#[derive(Debug, Default)]
struct Queued {
    count: Mutex<(usize, u64)>,
    done: Condvar,
}

/// The folder and its writer thread.
#[derive(Debug)]
pub(crate) struct Disk {
    dir: PathBuf,
    /// Bytes of files the folder keeps.
    limit: u64,
    writes: Mutex<Sender<Write1>>,
    queued: Arc<Queued>,
}

fn say(what: std::fmt::Arguments<'_>) {
    eprintln!("hearth: prompt cache: {what}");
}

impl Disk {
    /// Opens (creating) `dir`, indexes its state files into `index` and
    /// starts the writer.
    pub fn open(
        dir: &Path,
        limit: u64,
        index: &Arc<Mutex<Index>>,
        stats: &Arc<Stats>,
    ) -> io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        {
            let mut index = lock(index);
            index.dir = Some((dir.to_path_buf(), limit));
            scan(dir, &mut index, stats)?;
            index.evict_disk(0, stats);
        }
        let (tx, rx) = channel::<Write1>();
        let queued = Arc::new(Queued::default());
        let writer = {
            let (index, stats, queued, dir) = (
                Arc::clone(index),
                Arc::clone(stats),
                Arc::clone(&queued),
                dir.to_path_buf(),
            );
            move || {
                // Below the threads that answer requests: a file written
                // after a turn does not slow the next one. (On Linux a nice
                // value is a thread's own; elsewhere it would be the
                // process's, so the default is kept.)
                #[cfg(target_os = "linux")]
                let _ = rustix::process::setpriority_process(
                    Some(rustix::thread::gettid()),
                    WRITER_NICE,
                );
                for w in rx {
                    write_one(&dir, &w, &index, &stats);
                    let mut n = queued.count.lock().unwrap_or_else(|e| e.into_inner());
                    n.0 -= 1;
                    n.1 -= crate::index::ram_bytes(&w.saved);
                    queued.done.notify_all();
                }
            }
        };
        std::thread::Builder::new()
            .name("hearth-prompt-cache".into())
            .spawn(writer)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            limit,
            writes: Mutex::new(tx),
            queued,
        })
    }

    /// Whether `saved`'s file fits the folder's bound at all.
    pub fn fits(&self, saved: &SavedPrompt) -> bool {
        file::file_len(saved) <= self.limit
    }

    /// Queues the file of entry `id`; with the queue full it is not
    /// written (the state stays in RAM only).
    pub fn queue_write(&self, id: u64, ns: Namespace, saved: Arc<SavedPrompt>, index: &mut Index) {
        let Some(name) = index.entries.get(&id).map(|e| e.name.clone()) else {
            return;
        };
        let bytes = crate::index::ram_bytes(&saved);
        let mut count = self.queued.count.lock().unwrap_or_else(|e| e.into_inner());
        let room = count.0 == 0 || count.1 + bytes <= QUEUED_BYTES;
        let tx = self.writes.lock().unwrap_or_else(|e| e.into_inner());
        if room
            && tx
                .send(Write1 {
                    id,
                    name,
                    ns,
                    saved,
                })
                .is_ok()
        {
            count.0 += 1;
            count.1 += bytes;
        } else if let Some(e) = index.entries.get_mut(&id) {
            e.file = FileState::None;
        }
    }

    /// Reads entry `id`'s file back into RAM; a file that is damaged, gone
    /// or not the entry's state is reported, removed and forgotten.
    pub fn load(&self, id: u64, index: &Mutex<Index>, stats: &Stats) -> Option<Arc<SavedPrompt>> {
        let (name, ns, tokens) = {
            let index = lock(index);
            let e = index.entries.get(&id)?;
            (e.name.clone(), e.ns, e.tokens.clone())
        };
        let path = self.dir.join(&name);
        let read = std::fs::File::open(&path).and_then(|f| {
            let len = f.metadata()?.len();
            // Small: the cache's blocks are read past it, straight into
            // their parts.
            file::read(&mut io::BufReader::with_capacity(8 << 10, f), len)
        });
        let cut = read.as_ref().ok().map(|(ns, saved)| Cut::of(ns, saved));
        let mut index = lock(index);
        match read {
            Ok((file_ns, saved)) if file_ns == ns && saved.tokens == tokens => {
                let held = cut.and_then(|cut| index.hold(id, cut, stats));
                Some(held.unwrap_or_else(|| Arc::new(saved)))
            }
            Ok(_) => {
                ignore(&path, &io::Error::other("it holds another state"), stats);
                index.remove(id, stats);
                None
            }
            Err(e) => {
                ignore(&path, &e, stats);
                index.remove(id, stats);
                None
            }
        }
    }

    /// Waits until the writer has done every write queued so far.
    pub fn flush(&self) {
        let mut n = self.queued.count.lock().unwrap_or_else(|e| e.into_inner());
        while n.0 > 0 {
            n = self.queued.done.wait(n).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Reports a state file that cannot be trusted (it is removed after).
fn ignore(path: &Path, e: &io::Error, stats: &Stats) {
    stats.files_ignored.fetch_add(1, Ordering::Relaxed);
    say(format_args!(
        "ignoring {} ({e}); it is removed and the prompt computed afresh",
        path.display()
    ));
}

/// Writes one state's file, then records it on its entry, or removes it
/// when the entry is gone (replaced or cleared while it was being written).
fn write_one(dir: &Path, w: &Write1, index: &Mutex<Index>, stats: &Stats) {
    let path = dir.join(&w.name);
    // Room first, so the files written never pass the bound.
    lock(index).evict_disk(file::file_len(&w.saved), stats);
    let written = durable::PendingFile::create_saying(&path, |l| say(format_args!("{l}")))
        .and_then(|pending| {
            let mut out = BufWriter::with_capacity(1 << 20, pending);
            file::write(&mut out, &w.ns, &w.saved)?;
            out.into_inner().map_err(|e| e.into_error())?.commit()
        });
    let mut index = lock(index);
    let entry = index
        .entries
        .get_mut(&w.id)
        .filter(|e| e.name == w.name && e.file == FileState::Pending);
    match (written, entry) {
        (Ok(len), Some(e)) => {
            e.file = FileState::Written(len);
            stats.disk_bytes.fetch_add(len, Ordering::Relaxed);
            stats.files_written.fetch_add(1, Ordering::Relaxed);
        }
        (Ok(_), None) => {
            let _ = std::fs::remove_file(&path);
        }
        (Err(e), entry) => {
            say(format_args!("cannot write {}: {e}", path.display()));
            if let Some(e) = entry {
                e.file = FileState::None;
                if e.saved.is_none() {
                    index.remove(w.id, stats);
                }
            }
        }
    }
}

/// Indexes the state files in `dir`, oldest first so that recency follows
/// their times; removes, saying so, the temporary files of killed writers
/// and the files whose header cannot be read.
fn scan(dir: &Path, index: &mut Index, stats: &Stats) -> io::Result<()> {
    let mut found = Vec::new();
    for item in std::fs::read_dir(dir)? {
        let item = item?;
        let name = item.file_name().to_string_lossy().into_owned();
        if let Some(dest) = leftover_of(&name) {
            durable::sweep_leftovers_saying(&dir.join(dest), |l| say(format_args!("{l}")));
            continue;
        }
        if !name.ends_with(&format!(".{EXTENSION}")) {
            continue;
        }
        let modified = item.metadata().and_then(|m| m.modified()).ok();
        found.push((modified, name));
    }
    found.sort();
    for (_, name) in found {
        let path = dir.join(&name);
        match read_header(&path) {
            Ok((header, len)) => {
                let held = (header.tokens, header.media);
                let entry = Entry::new(header.ns, held, FileState::Written(len), name);
                index.add(entry, stats);
            }
            Err(e) => {
                ignore(&path, &e, stats);
                let _ = std::fs::remove_file(&path);
            }
        }
    }
    Ok(())
}

fn read_header(path: &Path) -> io::Result<(file::Header, u64)> {
    let f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    let header = file::read_header(&mut io::BufReader::new(f), len)?;
    Ok((header, len))
}

/// The state file a temporary name (`.NAME.<pid>-<n>.tmp`) was for.
fn leftover_of(name: &str) -> Option<&str> {
    let inner = name.strip_prefix('.')?.strip_suffix(".tmp")?;
    let (dest, _) = inner.rsplit_once('.')?;
    dest.ends_with(&format!(".{EXTENSION}")).then_some(dest)
}
