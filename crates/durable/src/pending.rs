//! Whole files: a temporary name beside the destination, fsync, rename.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::{parent_of, sync_dir};

/// Tells temporary files of one process apart.
static NEXT: AtomicU64 = AtomicU64::new(0);

/// A temporary file of an earlier, interrupted write, removed by
/// [`sweep_leftovers`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftover {
    /// Where it was.
    pub path: PathBuf,
    /// How many bytes it held.
    pub bytes: u64,
}

impl std::fmt::Display for Leftover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "found {} ({} bytes), the unfinished output of an earlier run that was killed or crashed: it is removed",
            self.path.display(),
            self.bytes
        )
    }
}

/// A file written under a temporary name next to its destination and moved
/// into place by [`PendingFile::commit`], so the destination is never seen
/// half-written. Dropped without a commit, the temporary file is removed;
/// killed, it is left for the next [`sweep_leftovers`] of the destination.
#[derive(Debug)]
pub struct PendingFile {
    tmp: PathBuf,
    dest: PathBuf,
    file: Option<File>,
    swept: Vec<Leftover>,
    committed: bool,
}

/// The folder of `dest` and the prefix of its temporary names (`.NAME.`).
fn tmp_prefix(dest: &Path) -> io::Result<(&Path, String)> {
    let name = dest.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} has no file name", dest.display()),
        )
    })?;
    Ok((parent_of(dest), format!(".{}.", name.to_string_lossy())))
}

/// `.NAME.<pid>-<n>.tmp`: a temporary name of `prefix`'s destination.
fn is_tmp_name(name: &str, prefix: &str) -> bool {
    name.strip_prefix(prefix)
        .and_then(|r| r.strip_suffix(".tmp"))
        .is_some_and(|mid| !mid.is_empty() && mid.chars().all(|c| c.is_ascii_digit() || c == '-'))
}

/// Whether the open `file` is still the one named `path` (a sweep may have
/// removed the name between our create and our lock).
fn same_file(file: &File, path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        match (file.metadata(), std::fs::symlink_metadata(path)) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = file;
        path.exists()
    }
}

impl PendingFile {
    /// Creates (and locks) the temporary file for `dest` now, so an
    /// unwritable destination fails before any work; first removes the
    /// temporary files that killed writers of `dest` left (see
    /// [`PendingFile::swept`]).
    pub fn create(dest: &Path) -> io::Result<Self> {
        let mut swept = Vec::new();
        let mut p = Self::create_saying(dest, |l| swept.push(l.clone()))?;
        p.swept = swept;
        Ok(p)
    }

    /// [`PendingFile::create`], telling `say` of each leftover *before* it is
    /// removed: a crash in between then only makes the next run say it again,
    /// and nothing is ever removed unsaid.
    pub fn create_saying(dest: &Path, say: impl FnMut(&Leftover)) -> io::Result<Self> {
        if dest.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is a directory", dest.display()),
            ));
        }
        let (dir, prefix) = tmp_prefix(dest)?;
        sweep_leftovers_saying(dest, say);
        for _ in 0..64 {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let tmp = dir.join(format!("{prefix}{}-{n}.tmp", std::process::id()));
            let file = match OpenOptions::new().write(true).create_new(true).open(&tmp) {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            };
            // Where the filesystem has no locks, go on unlocked: a sweep
            // cannot lock it either, and so never removes it.
            let _ = file.lock();
            if same_file(&file, &tmp) {
                return Ok(Self {
                    tmp,
                    dest: dest.to_path_buf(),
                    file: Some(file),
                    swept: Vec::new(),
                    committed: false,
                });
            }
        }
        Err(io::Error::other(format!(
            "cannot create a temporary file beside {}",
            dest.display()
        )))
    }

    /// The destination.
    pub fn dest(&self) -> &Path {
        &self.dest
    }

    /// The temporary file's path.
    pub fn tmp_path(&self) -> &Path {
        &self.tmp
    }

    /// Leftovers of interrupted writes of the same destination, removed by
    /// [`PendingFile::create`] (not [`PendingFile::create_saying`]); a tool
    /// should say so.
    pub fn swept(&self) -> &[Leftover] {
        &self.swept
    }

    fn file(&mut self) -> io::Result<&mut File> {
        self.file
            .as_mut()
            .ok_or_else(|| io::Error::other("the file was already committed"))
    }

    /// Makes the bytes durable, renames the file over the destination and
    /// syncs the folder; returns the file's size.
    pub fn commit(mut self) -> io::Result<u64> {
        let file = self.file()?;
        file.flush()?;
        file.sync_all()?;
        let len = file.metadata()?.len();
        let file = self.file.take();
        // Windows cannot rename a file that is open; elsewhere the lock is
        // held until the new name is in place.
        #[cfg(not(unix))]
        drop(file);
        std::fs::rename(&self.tmp, &self.dest)?;
        self.committed = true;
        // Best effort: the file is in place either way.
        let _ = sync_dir(parent_of(&self.dest));
        #[cfg(unix)]
        drop(file);
        Ok(len)
    }
}

impl Write for PendingFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file()?.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file()?.flush()
    }
}

impl Drop for PendingFile {
    fn drop(&mut self) {
        if !self.committed {
            self.file.take();
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Writes `bytes` to `dest` through a [`PendingFile`]; returns the leftovers
/// of interrupted writes it removed.
pub fn write_atomic(dest: &Path, bytes: &[u8]) -> io::Result<Vec<Leftover>> {
    let mut swept = Vec::new();
    write_atomic_saying(dest, bytes, |l| swept.push(l.clone()))?;
    Ok(swept)
}

/// [`write_atomic`], telling `say` of each leftover before it is removed.
pub fn write_atomic_saying(
    dest: &Path,
    bytes: &[u8],
    say: impl FnMut(&Leftover),
) -> io::Result<()> {
    let mut p = PendingFile::create_saying(dest, say)?;
    p.write_all(bytes)?;
    p.commit()?;
    Ok(())
}

/// Removes the temporary files of `dest` whose writers are gone (killed,
/// crashed): those no live process holds locked. Errors only skip files.
pub fn sweep_leftovers(dest: &Path) -> Vec<Leftover> {
    let mut out = Vec::new();
    sweep_leftovers_saying(dest, |l| out.push(l.clone()));
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// [`sweep_leftovers`], telling `say` of each leftover just before it is
/// removed.
pub fn sweep_leftovers_saying(dest: &Path, mut say: impl FnMut(&Leftover)) {
    let Ok((dir, prefix)) = tmp_prefix(dest) else {
        return;
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_str().is_some_and(|n| is_tmp_name(n, &prefix)) {
            continue;
        }
        let path = entry.path();
        let Ok(f) = File::open(&path) else { continue };
        // Locked: its writer is alive. An error: no locks here, so no way
        // to tell; leave it.
        if f.try_lock().is_err() || !same_file(&f, &path) {
            continue;
        }
        let left = Leftover {
            bytes: f.metadata().map_or(0, |m| m.len()),
            path,
        };
        say(&left);
        #[cfg(not(unix))]
        drop(f);
        let _ = std::fs::remove_file(&left.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_commit_replaces_the_destination_whole() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("out.gguf");
        std::fs::write(&dest, b"old").unwrap();
        let mut p = PendingFile::create(&dest).unwrap();
        p.write_all(b"new bytes").unwrap();
        assert!(p.tmp_path().starts_with(dir.path()));
        // Until the commit the old file is untouched.
        assert_eq!(std::fs::read(&dest).unwrap(), b"old");
        assert_eq!(p.commit().unwrap(), 9);
        assert_eq!(std::fs::read(&dest).unwrap(), b"new bytes");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }

    #[test]
    fn a_dropped_file_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("r.json");
        let mut p = PendingFile::create(&dest).unwrap();
        p.write_all(b"half").unwrap();
        drop(p);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn leftovers_of_dead_writers_are_swept_and_live_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("m.gguf");
        // A killed writer's file: nobody holds its lock.
        let dead = dir.path().join(".m.gguf.999999-0.tmp");
        std::fs::write(&dead, b"12345").unwrap();
        // Not ours: another file's temporary name, and a user's file.
        let other = dir.path().join(".n.gguf.1-0.tmp");
        std::fs::write(&other, b"x").unwrap();
        let user = dir.path().join(".m.gguf.backup.tmp");
        std::fs::write(&user, b"x").unwrap();
        // A live writer of the same destination.
        let mut live = PendingFile::create(&dest).unwrap();
        assert_eq!(
            live.swept(),
            [Leftover {
                path: dead.clone(),
                bytes: 5
            }]
        );
        live.write_all(b"in progress").unwrap();
        assert!(sweep_leftovers(&dest).is_empty());
        assert!(live.tmp_path().exists() && other.exists() && user.exists());
        let swept = write_atomic(&dest, b"whole").unwrap();
        assert!(swept.is_empty());
        assert_eq!(std::fs::read(&dest).unwrap(), b"whole");
        live.commit().unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"in progress");
        assert!(Leftover {
            path: dead,
            bytes: 5
        }
        .to_string()
        .contains("5 bytes"));
    }

    #[test]
    fn a_directory_or_a_nameless_path_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert!(PendingFile::create(dir.path()).is_err());
        assert!(PendingFile::create(Path::new("/")).is_err());
    }
}
