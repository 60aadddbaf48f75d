//! What the bot must not lose, in one embedded database (redb, crash-safe
//! transactions): each chat's memory, the updates received but not yet
//! answered (the inbox), the replies not yet delivered (the outbox) and the
//! next update id to ask Telegram for.
//!
//! An update enters the inbox in the same transaction that advances the
//! stored offset, and leaves it in the same transaction that stores its
//! reply in the outbox and the turn in the chat's memory; a reply leaves the
//! outbox only once Telegram has it. So a crash or restart at any point
//! redoes at most the work in flight, and loses nothing.

use crate::conversation::ChatState;
use crate::incoming::Incoming;
use redb::{Database, ReadableTable, ReadableTableMetadata, TableDefinition};
use serde::{Deserialize, Serialize};
use std::path::Path;

const CHATS: TableDefinition<i64, &[u8]> = TableDefinition::new("chats");
const INBOX: TableDefinition<u64, &[u8]> = TableDefinition::new("inbox");
const OUTBOX: TableDefinition<u64, &[u8]> = TableDefinition::new("outbox");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// The next update id to ask for.
const OFFSET: &str = "offset";
/// The next outbox key.
const OUTBOX_SEQ: &str = "outbox_seq";
/// 1 while a bot has the database open; 0 once it stopped cleanly.
const OPEN: &str = "open";

/// A failure of the state database.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database could not be opened, read or written (boxed: redb's
    /// error is large and this one travels through every result).
    #[error("state database: {0}")]
    Db(Box<redb::Error>),
    /// A stored record does not decode (written by another version?).
    #[error("state database: a stored record does not decode: {0}")]
    Decode(#[from] serde_json::Error),
}

/// Every redb error kind converts into [`StoreError`].
macro_rules! db_errors {
    ($($t:ty),*) => {$(
        impl From<$t> for StoreError {
            fn from(e: $t) -> Self {
                StoreError::Db(Box::new(e.into()))
            }
        }
    )*};
}
db_errors!(
    redb::Error,
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError
);

/// A message waiting to be sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outgoing {
    /// The chat it goes to.
    pub chat_id: i64,
    /// Its text (at most Telegram's limit).
    pub text: String,
}

/// The bot's database.
pub struct Store {
    db: Database,
    repaired: bool,
    unclean: bool,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Store")
    }
}

/// A write transaction as every one of ours is: two-phase commit with the
/// allocator state saved (redb's quick repair). redb 2's default one-phase
/// commit relies on checksums and a full repair after a crash, and a second
/// crash during that repair could leave a file that never opens again ("All
/// roots are corrupted", or a panic inside redb): a SIGKILL at the wrong
/// instant of a restart did it. With two phases the primary slot is always
/// a whole commit, and reopening after a crash needs no repair walk.
fn begin(db: &Database) -> Result<redb::WriteTransaction, StoreError> {
    let mut txn = db.begin_write()?;
    txn.set_quick_repair(true);
    Ok(txn)
}

impl Store {
    /// Open (or create) the database at `path`. A database the last
    /// process did not close (it was killed, the machine lost power) is
    /// recovered by redb first: committed transactions are kept, the one in
    /// flight is rolled back ([`Store::was_repaired`] when that took a full
    /// repair); whether the last bot stopped cleanly at all is
    /// [`Store::was_unclean`].
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        Self::open_with(|builder| builder.create(path))
    }

    /// Open the database `create` makes from a builder with our repair
    /// callback (a file, or a test's simulated disk).
    fn open_with(
        create: impl FnOnce(&mut redb::Builder) -> Result<Database, redb::DatabaseError>,
    ) -> Result<Self, StoreError> {
        let repaired = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = std::sync::Arc::clone(&repaired);
        let mut builder = Database::builder();
        builder.set_repair_callback(move |_| flag.store(true, std::sync::atomic::Ordering::SeqCst));
        let db = create(&mut builder)?;
        // Tables exist from the start, so readers never meet a missing one.
        let txn = begin(&db)?;
        txn.open_table(CHATS)?;
        txn.open_table(INBOX)?;
        txn.open_table(OUTBOX)?;
        let unclean = {
            let mut meta = txn.open_table(META)?;
            let was_open = meta.get(OPEN)?.is_some_and(|v| v.value() == 1);
            meta.insert(OPEN, 1)?;
            was_open
        };
        txn.commit()?;
        Ok(Self {
            db,
            repaired: repaired.load(std::sync::atomic::Ordering::SeqCst),
            unclean,
        })
    }

    /// Whether the last process that opened the database never stopped
    /// cleanly ([`Store::close_cleanly`]): it was killed, crashed, or the
    /// machine stopped. Its committed changes are all there; what it had in
    /// flight is redone.
    pub fn was_unclean(&self) -> bool {
        self.unclean
    }

    /// Records a clean stop: the next [`Store::open`] will not report an
    /// unclean one.
    pub fn close_cleanly(&self) -> Result<(), StoreError> {
        let txn = begin(&self.db)?;
        txn.open_table(META)?.insert(OPEN, 0)?;
        txn.commit()?;
        Ok(())
    }

    /// Whether [`Store::open`] found the database not closed cleanly and
    /// had redb repair it (only the transaction in flight is lost).
    pub fn was_repaired(&self) -> bool {
        self.repaired
    }

    /// The next update id to ask Telegram for (0 at first).
    pub fn offset(&self) -> Result<u64, StoreError> {
        let txn = self.db.begin_read()?;
        let meta = txn.open_table(META)?;
        Ok(meta.get(OFFSET)?.map_or(0, |v| v.value()))
    }

    /// Record a received update: `item` (when it needs work) enters the
    /// inbox under `update_id`, `notices` (lines that need no model) enter
    /// the outbox, and the offset moves past it. Returns false, changing
    /// nothing, when the update was seen before (a webhook delivery
    /// Telegram repeats).
    pub fn receive(
        &self,
        update_id: u64,
        item: Option<&Incoming>,
        notices: &[Outgoing],
    ) -> Result<bool, StoreError> {
        let txn = begin(&self.db)?;
        {
            let mut meta = txn.open_table(META)?;
            let offset = meta.get(OFFSET)?.map_or(0, |v| v.value());
            if update_id < offset {
                return Ok(false);
            }
            meta.insert(OFFSET, update_id + 1)?;
            if let Some(item) = item {
                let bytes = serde_json::to_vec(item)?;
                txn.open_table(INBOX)?.insert(update_id, bytes.as_slice())?;
            }
        }
        push_outgoing(&txn, notices)?;
        txn.commit()?;
        Ok(true)
    }

    /// The inbox, oldest first.
    pub fn inbox(&self) -> Result<Vec<(u64, Incoming)>, StoreError> {
        let txn = self.db.begin_read()?;
        let t = txn.open_table(INBOX)?;
        let mut out = Vec::new();
        for row in t.iter()? {
            let (k, v) = row?;
            out.push((k.value(), serde_json::from_slice(v.value())?));
        }
        Ok(out)
    }

    /// A chat's memory (empty when unknown).
    pub fn chat(&self, chat_id: i64) -> Result<ChatState, StoreError> {
        let txn = self.db.begin_read()?;
        let t = txn.open_table(CHATS)?;
        Ok(match t.get(chat_id)? {
            Some(v) => serde_json::from_slice(v.value())?,
            None => ChatState::default(),
        })
    }

    /// Finish inbox item `update_id`: store the chat's new memory (if
    /// any), queue `replies` and drop the item, in one transaction.
    pub fn finish(
        &self,
        update_id: u64,
        chat: Option<(i64, &ChatState)>,
        replies: &[Outgoing],
    ) -> Result<(), StoreError> {
        let txn = begin(&self.db)?;
        {
            if let Some((id, state)) = chat {
                let bytes = serde_json::to_vec(state)?;
                txn.open_table(CHATS)?.insert(id, bytes.as_slice())?;
            }
            push_outgoing(&txn, replies)?;
            txn.open_table(INBOX)?.remove(update_id)?;
        }
        txn.commit()?;
        Ok(())
    }

    /// The oldest queued reply, with its key.
    pub fn next_outgoing(&self) -> Result<Option<(u64, Outgoing)>, StoreError> {
        let txn = self.db.begin_read()?;
        let t = txn.open_table(OUTBOX)?;
        let first = t.first()?;
        match first {
            Some((k, v)) => Ok(Some((k.value(), serde_json::from_slice(v.value())?))),
            None => Ok(None),
        }
    }

    /// Replies still queued.
    pub fn outbox_len(&self) -> Result<u64, StoreError> {
        let txn = self.db.begin_read()?;
        Ok(txn.open_table(OUTBOX)?.len()?)
    }

    /// Drop a reply once delivered (or undeliverable for good).
    pub fn sent(&self, key: u64) -> Result<(), StoreError> {
        let txn = begin(&self.db)?;
        txn.open_table(OUTBOX)?.remove(key)?;
        txn.commit()?;
        Ok(())
    }
}

/// Append `replies` to the outbox inside `txn`.
fn push_outgoing(txn: &redb::WriteTransaction, replies: &[Outgoing]) -> Result<(), StoreError> {
    if replies.is_empty() {
        return Ok(());
    }
    let mut meta = txn.open_table(META)?;
    let mut seq = meta.get(OUTBOX_SEQ)?.map_or(0, |v| v.value());
    let mut out = txn.open_table(OUTBOX)?;
    for r in replies {
        let bytes = serde_json::to_vec(r)?;
        out.insert(seq, bytes.as_slice())?;
        seq += 1;
    }
    meta.insert(OUTBOX_SEQ, seq)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::incoming::Incoming;
    use std::sync::atomic::{AtomicI64, Ordering};
    use std::sync::{Arc, Mutex};

    /// A disk that dies as a SIGKILLed process does: the first `budget`
    /// writes (and resizes) land whole, every one after fails and changes
    /// nothing (what a killed process wrote stays in the page cache; what it
    /// had not written yet never comes).
    #[derive(Debug, Clone)]
    struct KilledDisk {
        image: Arc<Mutex<Vec<u8>>>,
        budget: Arc<AtomicI64>,
    }

    impl KilledDisk {
        fn new(image: Vec<u8>, budget: i64) -> Self {
            Self {
                image: Arc::new(Mutex::new(image)),
                budget: Arc::new(AtomicI64::new(budget)),
            }
        }

        fn spend(&self) -> std::io::Result<()> {
            if self.budget.fetch_sub(1, Ordering::SeqCst) > 0 {
                Ok(())
            } else {
                Err(std::io::Error::other("killed"))
            }
        }

        /// Writes and resizes done so far, for a disk started with `budget`.
        fn spent(&self, budget: i64) -> i64 {
            budget - self.budget.load(Ordering::SeqCst).max(0)
        }

        fn image(&self) -> Vec<u8> {
            self.image.lock().unwrap().clone()
        }
    }

    impl redb::StorageBackend for KilledDisk {
        fn len(&self) -> std::io::Result<u64> {
            Ok(self.image.lock().unwrap().len() as u64)
        }
        fn read(&self, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
            let image = self.image.lock().unwrap();
            let end = offset as usize + len;
            if end > image.len() {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            Ok(image[offset as usize..end].to_vec())
        }
        fn set_len(&self, len: u64) -> std::io::Result<()> {
            self.spend()?;
            self.image.lock().unwrap().resize(len as usize, 0);
            Ok(())
        }
        fn sync_data(&self, _: bool) -> std::io::Result<()> {
            Ok(())
        }
        fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
            self.spend()?;
            let mut image = self.image.lock().unwrap();
            let end = offset as usize + data.len();
            if end > image.len() {
                image.resize(end, 0);
            }
            image[offset as usize..end].copy_from_slice(data);
            Ok(())
        }
    }

    /// `f`'s result, a panic inside redb (opening, writing or closing) as
    /// an error.
    fn guarded<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
            .unwrap_or_else(|_| Err("redb panicked".into()))
    }

    fn open_on(disk: &KilledDisk) -> Result<Store, String> {
        let d = disk.clone();
        Store::open_with(|b| b.create_with_backend(d)).map_err(|e| e.to_string())
    }

    /// The bot's writes for updates `from..from + count` until the disk
    /// dies; the last update whose answer was committed.
    fn bot_work(disk: &KilledDisk, from: u64, count: u64) -> Result<Option<u64>, String> {
        let store = open_on(disk)?;
        let mut done = None;
        for id in from..from + count {
            let chat = (id % 3) as i64;
            let answered = (|| {
                store.receive(id, Some(&text(chat, &"q".repeat(300))), &[])?;
                let mut state = store.chat(chat)?;
                state.stats.replies += 1;
                let reply = Outgoing {
                    chat_id: chat,
                    text: "r".repeat(500),
                };
                store.finish(id, Some((chat, &state)), &[reply])?;
                if let Some((key, _)) = store.next_outgoing()? {
                    store.sent(key)?;
                }
                Ok::<_, StoreError>(())
            })();
            if answered.is_err() {
                break;
            }
            done = Some(id);
        }
        Ok(done)
    }

    /// Answers remembered over the three chats.
    fn answers(disk: &KilledDisk) -> Result<u64, String> {
        let store = open_on(disk)?;
        (0..3).try_fold(0, |n, c| {
            Ok(n + store.chat(c).map_err(|e| e.to_string())?.stats.replies)
        })
    }

    /// A SIGKILL at every write of the bot's work, then another at every
    /// write of the restart that recovers from it: the third start opens,
    /// and every answer committed before the first kill is there. (With
    /// redb 2's one-phase commits this broke: "All roots are corrupted",
    /// or redb panicked, `cached_file.rs:23` among others.)
    #[test]
    fn a_kill_during_the_recovery_from_a_kill_loses_nothing() {
        // A database with some history, left open (as a killed bot leaves it).
        let base = KilledDisk::new(Vec::new(), i64::MAX);
        assert_eq!(bot_work(&base, 0, 12), Ok(Some(11)));
        let base = base.image();
        let whole = KilledDisk::new(base.clone(), i64::MAX);
        assert_eq!(bot_work(&whole, 100, 2), Ok(Some(101)));
        let mut failures = Vec::new();
        for first in 0..whole.spent(i64::MAX) {
            let killed = KilledDisk::new(base.clone(), first);
            let committed = guarded(|| bot_work(&killed, 100, 2)).unwrap_or(None);
            let want = 12 + committed.map_or(0, |id| id - 99);
            let after_first = killed.image();
            let restart = KilledDisk::new(after_first.clone(), i64::MAX);
            let _ = guarded(|| open_on(&restart).map(drop));
            for second in 0..=restart.spent(i64::MAX) {
                let disk = KilledDisk::new(after_first.clone(), second);
                let _ = guarded(|| open_on(&disk).map(drop));
                // The third start, on what the second left.
                disk.budget.store(i64::MAX, Ordering::SeqCst);
                match guarded(|| answers(&disk)) {
                    Ok(n) if n >= want => {}
                    Ok(n) => failures.push(format!(
                        "kill at write {first}, then {second}: {n} answers kept of {want}"
                    )),
                    Err(e) => failures.push(format!("kill at write {first}, then {second}: {e}")),
                }
            }
        }
        assert!(
            failures.is_empty(),
            "{} kill pairs broke the database, e.g. {:?}",
            failures.len(),
            &failures[..failures.len().min(4)]
        );
    }

    fn text(chat: i64, t: &str) -> Incoming {
        Incoming::Text {
            chat_id: chat,
            text: t.into(),
        }
    }

    #[test]
    fn an_update_is_received_once_and_survives_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bot.redb");
        {
            let s = Store::open(&path).unwrap();
            assert_eq!(s.offset().unwrap(), 0);
            assert!(s.receive(7, Some(&text(1, "hi")), &[]).unwrap());
            assert!(
                !s.receive(7, Some(&text(1, "hi")), &[]).unwrap(),
                "a repeat"
            );
            assert!(!s.receive(3, None, &[]).unwrap(), "an older id");
            assert!(s.receive(9, None, &[]).unwrap());
            assert_eq!(s.offset().unwrap(), 10);
        }
        let s = Store::open(&path).unwrap();
        assert_eq!(s.offset().unwrap(), 10);
        assert_eq!(s.inbox().unwrap(), vec![(7, text(1, "hi"))]);
    }

    #[test]
    fn a_stop_without_close_cleanly_is_reported_at_the_next_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bot.redb");
        let s = Store::open(&path).unwrap();
        assert!(!s.was_unclean() && !s.was_repaired(), "a new database");
        drop(s); // as a killed bot would leave it: never closed cleanly
        let s = Store::open(&path).unwrap();
        assert!(s.was_unclean());
        s.close_cleanly().unwrap();
        drop(s);
        let s = Store::open(&path).unwrap();
        assert!(!s.was_unclean());
    }

    #[test]
    fn finishing_moves_an_item_to_the_outbox_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(&dir.path().join("bot.redb")).unwrap();
        s.receive(1, Some(&text(5, "a")), &[]).unwrap();
        let state = ChatState {
            system: Some("be brief".into()),
            ..ChatState::default()
        };
        let replies = [
            Outgoing {
                chat_id: 5,
                text: "one".into(),
            },
            Outgoing {
                chat_id: 5,
                text: "two".into(),
            },
        ];
        s.finish(1, Some((5, &state)), &replies).unwrap();
        assert!(s.inbox().unwrap().is_empty());
        assert_eq!(s.chat(5).unwrap().system.as_deref(), Some("be brief"));
        assert_eq!(s.outbox_len().unwrap(), 2);
        let (k, first) = s.next_outgoing().unwrap().unwrap();
        assert_eq!(first.text, "one");
        s.sent(k).unwrap();
        assert_eq!(s.next_outgoing().unwrap().unwrap().1.text, "two");
        assert_eq!(s.chat(6).unwrap(), ChatState::default());
    }
}
