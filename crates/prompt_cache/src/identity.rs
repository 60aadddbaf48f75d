//! Which model file a state belongs to, without reading the whole file at
//! every load: its size, its first 16 MiB (the GGUF header, metadata and
//! tensor table, and the first weights), and 64 KiB at 64 places spread
//! over the rest. A re-quantized, re-converted or edited file differs in
//! these; a folder is the same over its files, in name order.

use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, SystemTime};

const HEAD: u64 = 16 << 20;
const SAMPLES: u64 = 64;
const SAMPLE: u64 = 64 << 10;

/// How long before its hashing a file must have last changed for its digest
/// to be remembered: a later write then gives it a later modification time,
/// even on a clock that ticks in milliseconds.
const SETTLED: Duration = Duration::from_secs(2);

/// What says a file is the one that was hashed: its length, modification
/// time, and on Unix its device and inode (a file replaced by a rename).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
    dev: u64,
    ino: u64,
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Self {
        #[cfg(unix)]
        let (dev, ino) = {
            use std::os::unix::fs::MetadataExt;
            (meta.dev(), meta.ino())
        };
        #[cfg(not(unix))]
        let (dev, ino) = (0, 0);
        Self {
            len: meta.len(),
            modified: meta.modified().ok(),
            dev,
            ino,
        }
    }
}

/// Files hashed before, by path: each one's stamp then and digest.
type Hashed = HashMap<PathBuf, (Stamp, [u8; 32])>;

/// Digests of files hashed before: a model loaded again (after an unload)
/// is not read again while its file is unchanged.
static HASHED: LazyLock<Mutex<Hashed>> = LazyLock::new(Mutex::default);

/// A digest that tells model files (or checkpoint folders) apart.
pub fn file_identity(path: &Path) -> io::Result<[u8; 32]> {
    if !path.is_dir() {
        return file_digest(path);
    }
    let mut sha = Sha256::new();
    let mut names: Vec<_> = std::fs::read_dir(path)?
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| e.path())
        .collect();
    names.sort();
    for p in names {
        sha.update(
            p.file_name()
                .map(|n| n.as_encoded_bytes())
                .unwrap_or_default(),
        );
        sha.update(file_digest(&p)?);
    }
    Ok(sha.finalize().into())
}

/// One file's digest, remembered while the file keeps its [`Stamp`] (and
/// only once it had settled when hashed).
fn file_digest(path: &Path) -> io::Result<[u8; 32]> {
    let mut f = std::fs::File::open(path)?;
    let meta = f.metadata()?;
    let stamp = Stamp::of(&meta);
    let seen = HASHED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(path)
        .copied();
    if let Some((s, digest)) = seen {
        if s == stamp {
            return Ok(digest);
        }
    }
    let hashed_at = SystemTime::now();
    let mut sha = Sha256::new();
    hash_file(&mut f, stamp.len, &mut sha)?;
    let digest: [u8; 32] = sha.finalize().into();
    let settled = stamp
        .modified
        .and_then(|m| hashed_at.duration_since(m).ok())
        .is_some_and(|age| age >= SETTLED);
    if settled {
        HASHED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(path.to_path_buf(), (stamp, digest));
    }
    Ok(digest)
}

fn hash_file(f: &mut std::fs::File, len: u64, sha: &mut Sha256) -> io::Result<()> {
    sha.update(len.to_le_bytes());
    let mut buf = vec![0u8; HEAD.min(len) as usize];
    f.read_exact(&mut buf)?;
    sha.update(&buf);
    if len > HEAD {
        let step = (len - HEAD) / SAMPLES;
        let mut sample = vec![0u8; SAMPLE.min(step) as usize];
        for i in 0..SAMPLES {
            f.seek(SeekFrom::Start(HEAD + i * step))?;
            f.read_exact(&mut sample)?;
            sha.update(&sample);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_that_differ_in_a_sampled_byte_or_their_size_differ() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.gguf");
        let mut bytes = vec![7u8; (HEAD + 10 * SAMPLE * SAMPLES) as usize];
        std::fs::write(&path, &bytes).unwrap();
        let first = file_identity(&path).unwrap();
        assert_eq!(file_identity(&path).unwrap(), first);
        for at in [0, HEAD as usize - 1, HEAD as usize] {
            bytes[at] ^= 1;
            std::fs::write(&path, &bytes).unwrap();
            assert_ne!(file_identity(&path).unwrap(), first, "byte {at}");
            bytes[at] ^= 1;
        }
        bytes.push(0);
        std::fs::write(&path, &bytes).unwrap();
        assert_ne!(file_identity(&path).unwrap(), first);
        // A small file is read whole.
        std::fs::write(&path, b"tiny").unwrap();
        let tiny = file_identity(&path).unwrap();
        std::fs::write(&path, b"tinz").unwrap();
        assert_ne!(file_identity(&path).unwrap(), tiny);
    }

    #[test]
    fn a_settled_file_is_remembered_until_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.gguf");
        std::fs::write(&path, b"first").unwrap();
        // Settled: last written long before it is hashed.
        let old = SystemTime::now() - Duration::from_secs(60);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let first = file_identity(&path).unwrap();
        assert!(HASHED.lock().unwrap().contains_key(&path));
        assert_eq!(file_identity(&path).unwrap(), first);
        // The same length rewritten: another time, another digest.
        std::fs::write(&path, b"secnd").unwrap();
        assert_ne!(file_identity(&path).unwrap(), first);
        // A file just written is not remembered.
        let fresh = dir.path().join("n.gguf");
        std::fs::write(&fresh, b"new").unwrap();
        file_identity(&fresh).unwrap();
        assert!(!HASHED.lock().unwrap().contains_key(&fresh));
    }
}
