//! Append-only logs of lines: one whole line per record, fsynced; a torn
//! last line is repaired before the next append.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

use crate::{parent_of, sync_dir};

/// What [`repair_tail`] found at the end of a log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Tail {
    /// Nothing to repair: no file, an empty one, or one ending in a newline.
    #[default]
    Clean,
    /// The last line (1-based number `line`) was a whole record without its
    /// newline: the newline was added and the record kept.
    Closed {
        /// The line's number.
        line: usize,
    },
    /// The last line (1-based number `line`) was unfinished (a write cut
    /// off by a crash): its `bytes` were removed.
    Cut {
        /// The line's number.
        line: usize,
        /// How many bytes were cut off.
        bytes: u64,
    },
}

/// What [`repair_tail`] would do to the log at `path`, without doing it (so
/// a tool can say it before it happens: a crash in between then only makes
/// the next start say it again).
pub fn inspect_tail(path: &Path, whole: impl FnOnce(&[u8]) -> bool) -> io::Result<Tail> {
    let data = match std::fs::read(path) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Tail::Clean),
        Err(e) => return Err(e),
    };
    Ok(classify(&data, whole))
}

fn classify(data: &[u8], whole: impl FnOnce(&[u8]) -> bool) -> Tail {
    if data.is_empty() || data.ends_with(b"\n") {
        return Tail::Clean;
    }
    let keep = data.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let line = data[..keep].iter().filter(|&&b| b == b'\n').count() + 1;
    let tail = &data[keep..];
    if !tail.iter().all(u8::is_ascii_whitespace) && whole(tail) {
        Tail::Closed { line }
    } else {
        Tail::Cut {
            line,
            bytes: tail.len() as u64,
        }
    }
}

/// Makes the log at `path` end on a whole line before it is appended to:
/// text after the last newline is kept (and closed with a newline) when
/// `whole` says it is a complete record, and cut off otherwise. The repair
/// is fsynced.
pub fn repair_tail(path: &Path, whole: impl FnOnce(&[u8]) -> bool) -> io::Result<Tail> {
    let data = match std::fs::read(path) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Tail::Clean),
        Err(e) => return Err(e),
    };
    let tail = classify(&data, whole);
    match tail {
        Tail::Clean => {}
        Tail::Closed { .. } => {
            let mut f = OpenOptions::new().append(true).open(path)?;
            f.write_all(b"\n")?;
            f.sync_data()?;
        }
        Tail::Cut { bytes, .. } => {
            let f = OpenOptions::new().write(true).open(path)?;
            f.set_len(data.len() as u64 - bytes)?;
            f.sync_all()?;
        }
    }
    Ok(tail)
}

/// Opens (creating) a log for appending; a new file's folder entry is
/// fsynced, so the log itself survives a power cut.
pub fn open_append(path: &Path) -> io::Result<File> {
    let existed = path.exists();
    let f = OpenOptions::new().create(true).append(true).open(path)?;
    if !existed {
        f.sync_all()?;
        let _ = sync_dir(parent_of(path));
    }
    Ok(f)
}

/// Appends one record (`line`, ending in a newline) and fsyncs it: once this
/// returns the record survives a crash. A failed write is rolled back, so
/// the next record still starts on a line of its own.
pub fn append_line(mut f: &File, line: &[u8]) -> io::Result<()> {
    debug_assert!(line.ends_with(b"\n"));
    let before = f.metadata()?.len();
    if let Err(e) = f.write_all(line).and_then(|()| f.sync_data()) {
        let _ = f.set_len(before);
        return Err(e);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_json_object(b: &[u8]) -> bool {
        b.starts_with(b"{") && b.ends_with(b"}")
    }

    #[test]
    fn a_torn_line_is_cut_and_a_whole_one_closed() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log.jsonl");
        assert_eq!(repair_tail(&p, is_json_object).unwrap(), Tail::Clean);
        std::fs::write(&p, "{\"a\":1}\n{\"a\":2}\n{\"a\":\"h\u{e9}").unwrap();
        // Cut inside the two-byte é: the tail is not even UTF-8.
        let len = std::fs::metadata(&p).unwrap().len();
        let f = OpenOptions::new().write(true).open(&p).unwrap();
        f.set_len(len - 1).unwrap();
        assert_eq!(
            inspect_tail(&p, is_json_object).unwrap(),
            Tail::Cut { line: 3, bytes: 8 }
        );
        assert_eq!(
            repair_tail(&p, is_json_object).unwrap(),
            Tail::Cut { line: 3, bytes: 8 }
        );
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            "{\"a\":1}\n{\"a\":2}\n"
        );
        assert_eq!(repair_tail(&p, is_json_object).unwrap(), Tail::Clean);

        std::fs::write(&p, "{\"a\":1}").unwrap();
        assert_eq!(
            repair_tail(&p, is_json_object).unwrap(),
            Tail::Closed { line: 1 }
        );
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "{\"a\":1}\n");
    }

    #[test]
    fn appends_are_whole_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("new/log.jsonl");
        assert!(open_append(&p).is_err());
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        let f = open_append(&p).unwrap();
        append_line(&f, b"one\n").unwrap();
        append_line(&f, b"two\n").unwrap();
        drop(f);
        let f = open_append(&p).unwrap();
        append_line(&f, b"three\n").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "one\ntwo\nthree\n");
    }
}
