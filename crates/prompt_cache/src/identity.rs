//! Which model file a state belongs to, without reading the whole file at
//! every load: its size, its first 16 MiB (the GGUF header, metadata and
//! tensor table, and the first weights), and 64 KiB at 64 places spread
//! over the rest. A re-quantized, re-converted or edited file differs in
//! these; a folder is the same over its files, in name order.

use sha2::{Digest, Sha256};
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

const HEAD: u64 = 16 << 20;
const SAMPLES: u64 = 64;
const SAMPLE: u64 = 64 << 10;

/// A digest that tells model files (or checkpoint folders) apart.
pub fn file_identity(path: &Path) -> io::Result<[u8; 32]> {
    let mut sha = Sha256::new();
    if path.is_dir() {
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
            sha.update(file_identity(&p)?);
        }
    } else {
        hash_file(path, &mut sha)?;
    }
    Ok(sha.finalize().into())
}

fn hash_file(path: &Path, sha: &mut Sha256) -> io::Result<()> {
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
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
}
