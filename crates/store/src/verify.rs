//! Hashing, and the marker that spares re-hashing a verified file on every run.
//!
//! After a file is verified we write `FILE.verified` holding its sha256, size and mtime.
//! A later check trusts the file when all three still match, so `resolve` stays cheap;
//! anything else (no marker, file touched) triggers one full hash.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use sha2::{Digest, Sha256};

use crate::StoreError;

/// What a look at a cached file found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Cached {
    /// The file is there and has the expected hash.
    Verified,
    /// No file.
    Missing,
    /// A file with other bytes.
    Mismatch { actual: String },
}

/// Lower-case hex of a byte slice's sha256.
#[cfg(test)]
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Lower-case hex of a digest.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The marker path for a cached file.
pub(crate) fn marker_path(file: &Path) -> PathBuf {
    let mut name = file.file_name().unwrap_or_default().to_os_string();
    name.push(".verified");
    file.with_file_name(name)
}

/// Streams a file through sha256.
pub(crate) fn sha256_file(path: &Path) -> Result<String, StoreError> {
    let mut f = std::fs::File::open(path).map_err(|e| StoreError::io("cannot open", path, e))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f
            .read(&mut buf)
            .map_err(|e| StoreError::io("cannot read", path, e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

/// The size+mtime fingerprint stored in the marker.
fn fingerprint(path: &Path) -> Option<String> {
    let md = std::fs::metadata(path).ok()?;
    let mtime = md.modified().ok()?.duration_since(UNIX_EPOCH).ok()?;
    Some(format!(
        "size {}\nmtime {}.{:09}\n",
        md.len(),
        mtime.as_secs(),
        mtime.subsec_nanos()
    ))
}

/// Records that `file` hashes to `sha256` as of its current size and mtime.
///
/// Best effort: the marker only saves time, so a read-only cache (or a platform without
/// mtimes) must not turn a verified model into an error; we simply hash again next time.
pub(crate) fn write_marker(file: &Path, sha256: &str) {
    if let Some(fp) = fingerprint(file) {
        // Whole or not at all: a torn marker would only cost a re-hash, but a
        // half-written file under its final name is what this crate never leaves.
        let _ = durable::write_atomic(
            &marker_path(file),
            format!("sha256 {sha256}\n{fp}").as_bytes(),
        );
    }
}

/// True when the marker says `file` was verified against `sha256` and it is unchanged since.
fn marker_matches(file: &Path, sha256: &str) -> bool {
    let (Ok(text), Some(fp)) = (
        std::fs::read_to_string(marker_path(file)),
        fingerprint(file),
    ) else {
        return false;
    };
    text == format!("sha256 {sha256}\n{fp}")
}

/// Checks a cached file against its expected hash, hashing at most once per change.
pub(crate) fn check_cached(file: &Path, sha256: &str) -> Result<Cached, StoreError> {
    if !file.is_file() {
        return Ok(Cached::Missing);
    }
    if marker_matches(file, sha256) {
        return Ok(Cached::Verified);
    }
    let actual = sha256_file(file)?;
    if actual.eq_ignore_ascii_case(sha256) {
        write_marker(file, sha256);
        Ok(Cached::Verified)
    } else {
        Ok(Cached::Mismatch { actual })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_hash() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn marker_skips_rehash_until_file_changes() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("m.bin");
        std::fs::write(&f, b"abc").unwrap();
        let good = sha256_hex(b"abc");
        assert_eq!(check_cached(&f, &good).unwrap(), Cached::Verified);
        assert!(marker_matches(&f, &good));
        assert!(!marker_matches(&f, &sha256_hex(b"other")));
        std::fs::write(&f, b"abcd").unwrap();
        assert!(!marker_matches(&f, &good));
        assert!(matches!(
            check_cached(&f, &good).unwrap(),
            Cached::Mismatch { .. }
        ));
        assert_eq!(
            check_cached(&dir.path().join("none"), &good).unwrap(),
            Cached::Missing
        );
    }
}
