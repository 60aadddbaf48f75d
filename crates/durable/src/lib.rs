//! hearth-durable: files that a crash leaves whole or not at all.
//!
//! Two shapes of file cover everything Hearth writes:
//!
//! - **Whole files** (a quantized model, a report, a cache marker) go through
//!   [`PendingFile`] or [`write_atomic`]: written under a temporary name in
//!   the destination's folder, fsynced, renamed over the destination, and the
//!   folder fsynced. A reader, or a restart after a crash, sees the old file
//!   or the new one, never a mix. A temporary file left by a killed process
//!   is found and removed by the next writer of the same destination
//!   ([`sweep_leftovers`]), which says so ([`Leftover`]).
//! - **Append-only logs** of JSON lines (the MT-Bench tape, judgments) append
//!   one whole line per record and fsync it ([`append_line`]); a crash can
//!   only leave the last line unfinished, and [`repair_tail`] cuts it off
//!   (or closes it, when it is a whole record) before the next append.
//!
//! Locks: a writer holds an exclusive lock ([`std::fs::File::lock`]) on its
//! temporary file until it is renamed, so a sweep never removes the file of
//! a writer that is still alive; the lock dies with its process.

#![warn(missing_docs)]

mod log;
mod pending;

pub use log::{append_line, inspect_tail, open_append, repair_tail, Tail};
pub use pending::{
    sweep_leftovers, sweep_leftovers_saying, write_atomic, write_atomic_saying, Leftover,
    PendingFile,
};

use std::path::Path;

/// Makes `dir`'s entries durable (a rename or a new file in it survives a
/// power cut). A no-op where folders cannot be opened as files.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        std::fs::File::open(dir)?.sync_all()
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}

/// The folder `path` is in (`.` for a bare file name).
pub(crate) fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}
