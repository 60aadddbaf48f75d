//! Stored responses (`store`, `previous_response_id`, `GET` and `DELETE
//! /v1/responses/{id}`): each response kept with the conversation that led
//! to it, so the next turn can name it instead of sending the whole
//! conversation again.
//!
//! Bounded to [`MAX_STORED`] responses and [`MAX_STORED_BYTES`], the oldest
//! dropped first; kept in memory at once and, when the server has a file
//! for them, in an append-only JSON-lines log (one line a response stored
//! or deleted, appended and fsynced in order by a thread of its own, so no
//! request waits for the disk) that survives a crash (a torn last line is cut off on start)
//! and is rewritten whole, through a temporary file, when it holds more
//! than twice the live responses' bytes (so the file stays within about
//! twice the bound). A response is visible only to the API key that
//! made it (its SHA-256; the empty key when the server has none).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};

/// Most responses kept.
pub const MAX_STORED: usize = 1000;

/// Most bytes of stored conversations and responses kept.
pub const MAX_STORED_BYTES: usize = 64 << 20;

/// A response and the conversation that led to it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Stored {
    /// The SHA-256 of the key that made it.
    pub(crate) owner: String,
    /// The chat messages of the conversation, this response's output last.
    pub(crate) messages: Vec<Value>,
    /// The response object as it was answered.
    pub(crate) response: Value,
}

/// One line of the log.
#[derive(Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
enum Line {
    Put { id: String, stored: Stored },
    Delete { id: String },
}

/// The stored responses.
pub(crate) struct ResponseStore {
    inner: Arc<Mutex<Inner>>,
    /// The log's writer thread, when there is a log: lines go to it in
    /// the order they happened, so a put never lands after its delete, and
    /// no request's thread waits for a disk.
    log: Option<mpsc::Sender<Write>>,
}

struct Inner {
    by_id: HashMap<String, (Stored, usize)>,
    /// Ids from oldest to newest.
    order: VecDeque<String>,
    bytes: usize,
}

/// What the log's writer is asked to do.
enum Write {
    Line(Vec<u8>),
    /// Answer once everything sent before is written (for tests and a
    /// clean stop).
    Flush(mpsc::Sender<()>),
}

struct Log {
    path: PathBuf,
    file: File,
    /// The file's size, live lines or not.
    bytes: usize,
}

/// The owner a request's key makes: the SHA-256 of its `Authorization`
/// (or `x-api-key`) value.
pub(crate) fn owner_of(key: Option<&str>) -> String {
    let digest = Sha256::digest(key.unwrap_or("").as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// `line` as the log writes it: JSON and a newline.
fn encoded(line: &Line) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(line).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

impl ResponseStore {
    /// An empty store kept in memory only.
    pub(crate) fn in_memory() -> Self {
        Self {
            inner: Arc::new(Mutex::new(Inner {
                by_id: HashMap::new(),
                order: VecDeque::new(),
                bytes: 0,
            })),
            log: None,
        }
    }

    /// The store whose log is `path`: its lines replayed (a torn last line
    /// cut off), then appended to by a thread of its own.
    pub(crate) fn open(path: &Path) -> std::io::Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        durable::repair_tail(path, |line| serde_json::from_slice::<Line>(line).is_ok())?;
        let mut store = Self::in_memory();
        let mut bytes = 0;
        if let Ok(text) = std::fs::read(path) {
            bytes = text.len();
            let mut inner = store.lock();
            for line in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                match serde_json::from_slice::<Line>(line) {
                    Ok(Line::Put { id, stored }) => inner.insert(id, stored),
                    Ok(Line::Delete { id }) => inner.remove(&id),
                    Err(_) => {}
                }
            }
        }
        let log = Log {
            path: path.to_path_buf(),
            file: durable::open_append(path)?,
            bytes,
        };
        let (tx, rx) = mpsc::channel();
        let inner = Arc::clone(&store.inner);
        std::thread::Builder::new()
            .name("responses-log".into())
            .spawn(move || write_log(log, &rx, &inner))?;
        store.log = Some(tx);
        Ok(store)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        lock(&self.inner)
    }

    /// Response `id`, when `owner` made it.
    pub(crate) fn get(&self, id: &str, owner: &str) -> Option<Stored> {
        let inner = self.lock();
        let (stored, _) = inner.by_id.get(id)?;
        (stored.owner == owner).then(|| stored.clone())
    }

    /// Keep `stored` as `id`: at once in memory, soon in the log.
    pub(crate) fn put(&self, id: &str, stored: Stored) {
        let line = Line::Put {
            id: id.to_string(),
            stored,
        };
        let bytes = self.log.as_ref().map(|_| encoded(&line));
        let Line::Put { id, stored } = line else {
            unreachable!("built as a put above")
        };
        self.lock().insert(id, stored);
        self.send(bytes);
    }

    /// Forget response `id`, when `owner` made it; whether it was there.
    pub(crate) fn delete(&self, id: &str, owner: &str) -> bool {
        {
            let mut inner = self.lock();
            if inner.by_id.get(id).is_none_or(|(s, _)| s.owner != owner) {
                return false;
            }
            inner.remove(id);
        }
        let bytes = self
            .log
            .as_ref()
            .map(|_| encoded(&Line::Delete { id: id.to_string() }));
        self.send(bytes);
        true
    }

    fn send(&self, bytes: Option<Vec<u8>>) {
        if let (Some(log), Some(bytes)) = (&self.log, bytes) {
            let _ = log.send(Write::Line(bytes));
        }
    }

    /// Wait until every line sent so far is in the log.
    pub(crate) fn flush(&self) {
        if let Some(log) = &self.log {
            let (done, wait) = mpsc::channel();
            if log.send(Write::Flush(done)).is_ok() {
                let _ = wait.recv();
            }
        }
    }
}

fn lock(inner: &Mutex<Inner>) -> std::sync::MutexGuard<'_, Inner> {
    inner.lock().unwrap_or_else(|e| e.into_inner())
}

/// The log's writer: each line appended and fsynced in order, the log
/// rewritten from the live responses first when most of its bytes are no
/// longer live. A failed write is said and the next one tried: the
/// responses stay in memory.
fn write_log(mut log: Log, writes: &mpsc::Receiver<Write>, inner: &Mutex<Inner>) {
    for write in writes {
        let bytes = match write {
            Write::Line(bytes) => bytes,
            Write::Flush(done) => {
                let _ = done.send(());
                continue;
            }
        };
        if let Err(e) = append(&mut log, &bytes, inner) {
            eprintln!(
                "hearth serve: the response log {}: {e} (responses kept in memory)",
                log.path.display()
            );
        }
    }
}

fn append(log: &mut Log, bytes: &[u8], inner: &Mutex<Inner>) -> std::io::Result<()> {
    let live = lock(inner).bytes;
    if log.bytes > 2 * live + (1 << 20) {
        // A snapshot of the live responses, newest last, taken under the
        // lock and written without it.
        let whole: Vec<u8> = {
            let inner = lock(inner);
            inner
                .order
                .iter()
                .filter_map(|id| inner.by_id.get(id).map(|(stored, _)| (id, stored)))
                .flat_map(|(id, stored)| {
                    encoded(&Line::Put {
                        id: id.clone(),
                        stored: stored.clone(),
                    })
                })
                .collect()
        };
        durable::write_atomic(&log.path, &whole)?;
        log.file = durable::open_append(&log.path)?;
        log.bytes = whole.len();
    }
    durable::append_line(&log.file, bytes)?;
    log.bytes += bytes.len();
    Ok(())
}

impl Inner {
    fn insert(&mut self, id: String, stored: Stored) {
        self.remove(&id);
        let size = serde_json::to_vec(&stored).map_or(0, |v| v.len());
        self.bytes += size;
        self.order.push_back(id.clone());
        self.by_id.insert(id, (stored, size));
        while self.by_id.len() > MAX_STORED || self.bytes > MAX_STORED_BYTES {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            if let Some((_, size)) = self.by_id.remove(&oldest) {
                self.bytes -= size;
            }
        }
    }

    fn remove(&mut self, id: &str) {
        if let Some((_, size)) = self.by_id.remove(id) {
            self.bytes -= size;
            self.order.retain(|o| o != id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stored(owner: &str, n: usize) -> Stored {
        Stored {
            owner: owner_of(Some(owner)),
            messages: vec![json!({"role": "user", "content": "x".repeat(n)})],
            response: json!({"id": "r"}),
        }
    }

    #[test]
    fn a_response_is_seen_only_by_its_key_and_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("responses.jsonl");
        let s = ResponseStore::open(&path).unwrap();
        s.put("resp_a", stored("k1", 3));
        s.put("resp_b", stored("k1", 3));
        assert!(s.get("resp_a", &owner_of(Some("k1"))).is_some());
        assert!(s.get("resp_a", &owner_of(Some("k2"))).is_none());
        assert!(!s.delete("resp_b", &owner_of(Some("k2"))));
        assert!(s.delete("resp_b", &owner_of(Some("k1"))));
        s.flush();
        drop(s);
        // A torn last line (a crash mid-write) is cut off.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(b"{\"op\":\"put\",\"id\":\"resp_c\",\"sto");
        std::fs::write(&path, bytes).unwrap();
        let s = ResponseStore::open(&path).unwrap();
        let me = owner_of(Some("k1"));
        assert!(s.get("resp_a", &me).is_some());
        assert!(s.get("resp_b", &me).is_none());
        assert!(s.get("resp_c", &me).is_none());
        s.put("resp_d", stored("k1", 3));
        s.flush();
        assert!(ResponseStore::open(&path)
            .unwrap()
            .get("resp_d", &me)
            .is_some());
    }

    #[test]
    fn the_store_keeps_its_bounds_and_its_log_stays_small() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("responses.jsonl");
        let s = ResponseStore::open(&path).unwrap();
        for i in 0..MAX_STORED + 50 {
            s.put(&format!("resp_{i}"), stored("k", 10));
        }
        let me = owner_of(Some("k"));
        assert!(s.get("resp_0", &me).is_none(), "the oldest went first");
        assert!(s.get(&format!("resp_{}", MAX_STORED + 49), &me).is_some());
        assert_eq!(s.lock().by_id.len(), MAX_STORED);
        // Large responses are held to the byte bound.
        for i in 0..8 {
            s.put(&format!("big_{i}"), stored("k", 16 << 20));
        }
        assert!(s.lock().bytes <= MAX_STORED_BYTES);
        assert!(s.get("big_7", &me).is_some());
        s.flush();
        // The file stays within about twice the live bytes.
        let size = std::fs::metadata(&path).unwrap().len() as usize;
        assert!(size <= 2 * MAX_STORED_BYTES + (20 << 20), "{size} bytes");
    }
}
