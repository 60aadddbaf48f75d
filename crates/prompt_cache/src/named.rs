//! State files a client names: llama.cpp's `/slots/{id}?action=save` and
//! `restore`. The same format as the store's files, written the same
//! crash-safe way, read back only into the namespace that wrote them.

use crate::{file, Namespace};
use engine::SavedPrompt;
use std::io::{self, BufWriter, Read};
use std::path::Path;

/// Why a named state file was not read.
#[derive(Debug, thiserror::Error)]
pub enum NamedFileError {
    /// No file of that name.
    #[error("there is no saved state of that name")]
    Missing,
    /// Longer than any state of this model can be.
    #[error("the file is {len} bytes, more than a state of this model takes ({limit})")]
    TooLarge {
        /// The file's length.
        len: u64,
        /// The most a state may take.
        limit: u64,
    },
    /// Cut short, damaged, or not a state file.
    #[error("the file is not a whole state: {0}")]
    Damaged(io::Error),
    /// Written by another model, other options, or another API key.
    #[error("the state was saved by another model, other settings or another API key")]
    OtherNamespace,
    /// Could not be read.
    #[error("cannot read the file: {0}")]
    Io(io::Error),
}

/// Most files a folder of named states may hold: each save reads the
/// folder to keep its bound, so their number is bounded too.
const MAX_NAMED_FILES: usize = 4096;

/// Writes `saved` of namespace `ns` to `path` under a temporary name,
/// synced, then renamed over it; returns the bytes written. Refused
/// (`StorageFull`) when the folder's files, less the one it replaces, would
/// pass `folder_limit` bytes with it, or [`MAX_NAMED_FILES`] files.
pub fn save_named(
    path: &Path,
    ns: &Namespace,
    saved: &SavedPrompt,
    folder_limit: u64,
) -> io::Result<u64> {
    let len = file::file_len(saved);
    let (used, others) = folder_use(path)?;
    if others >= MAX_NAMED_FILES {
        return Err(io::Error::new(
            io::ErrorKind::StorageFull,
            format!("the folder holds {others} files, the most it may"),
        ));
    }
    if used.saturating_add(len) > folder_limit {
        return Err(io::Error::new(
            io::ErrorKind::StorageFull,
            format!(
                "the folder holds {used} bytes of files; with this state's {len} it would pass its {folder_limit}"
            ),
        ));
    }
    let pending = durable::PendingFile::create(path)?;
    let mut out = BufWriter::with_capacity(1 << 20, pending);
    file::write(&mut out, ns, saved)?;
    out.into_inner().map_err(|e| e.into_error())?.commit()
}

/// Bytes and number of the files in `path`'s folder other than `path`.
fn folder_use(path: &Path) -> io::Result<(u64, usize)> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let (mut used, mut files) = (0u64, 0usize);
    for item in std::fs::read_dir(dir)? {
        let item = item?;
        let meta = item.metadata()?;
        if meta.is_file() && item.path() != path {
            used = used.saturating_add(meta.len());
            files += 1;
        }
    }
    Ok((used, files))
}

/// Reads the state at `path`, refusing one longer than `limit` bytes (before
/// reading it), damaged, or of a namespace other than `ns`; returns it with
/// the bytes read.
pub fn load_named(
    path: &Path,
    ns: &Namespace,
    limit: u64,
) -> Result<(SavedPrompt, u64), NamedFileError> {
    let f = std::fs::File::open(path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => NamedFileError::Missing,
        _ => NamedFileError::Io(e),
    })?;
    let len = f.metadata().map_err(NamedFileError::Io)?.len();
    if len > limit {
        return Err(NamedFileError::TooLarge { len, limit });
    }
    let mut bytes = Vec::with_capacity(len as usize);
    // Bounded even if the file grows while it is read.
    f.take(limit)
        .read_to_end(&mut bytes)
        .map_err(NamedFileError::Io)?;
    let read = bytes.len() as u64;
    let (found, saved) = file::parse(&bytes).map_err(NamedFileError::Damaged)?;
    if found != *ns {
        return Err(NamedFileError::OtherNamespace);
    }
    Ok((saved, read))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> SavedPrompt {
        SavedPrompt {
            tokens: vec![2, 5, 6],
            media: Vec::new(),
            kv: engine::SavedKv::whole(vec![9; 64]),
        }
    }

    #[test]
    fn a_named_file_reads_back_only_into_its_namespace_and_within_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("slot.bin");
        let ns = Namespace([1; 32]);
        let written = save_named(&path, &ns, &sample(), 1 << 20).unwrap();
        // Replacing it needs no more room; a second file would pass the bound.
        assert_eq!(save_named(&path, &ns, &sample(), written).unwrap(), written);
        let full = save_named(&dir.path().join("b.bin"), &ns, &sample(), 2 * written - 1);
        assert_eq!(full.unwrap_err().kind(), io::ErrorKind::StorageFull);
        // Nor more files than the bound, however small.
        for i in 1..MAX_NAMED_FILES {
            std::fs::write(dir.path().join(format!("f{i}")), b"").unwrap();
        }
        let many = save_named(&dir.path().join("c.bin"), &ns, &sample(), u64::MAX);
        assert_eq!(many.unwrap_err().kind(), io::ErrorKind::StorageFull);
        // Replacing one it holds is still taken.
        assert_eq!(
            save_named(&path, &ns, &sample(), u64::MAX).unwrap(),
            written
        );
        assert_eq!(written, std::fs::metadata(&path).unwrap().len());
        let (saved, read) = load_named(&path, &ns, 1 << 20).unwrap();
        assert_eq!((saved, read), (sample(), written));
        assert!(matches!(
            load_named(&path, &Namespace([2; 32]), 1 << 20),
            Err(NamedFileError::OtherNamespace)
        ));
        assert!(matches!(
            load_named(&path, &ns, written - 1),
            Err(NamedFileError::TooLarge { .. })
        ));
        assert!(matches!(
            load_named(&dir.path().join("none.bin"), &ns, 1 << 20),
            Err(NamedFileError::Missing)
        ));
        std::fs::write(&path, b"HEARTHPC but cut").unwrap();
        assert!(matches!(
            load_named(&path, &ns, 1 << 20),
            Err(NamedFileError::Damaged(_))
        ));
    }
}
