//! One stored state as a file: a header that says whose state it is and
//! which tokens and media it holds, the cache's bytes, and a CRC-32 of
//! everything before it, so a damaged file is recognized and never loaded.
//!
//! ```text
//! "HEARTHPC" u32 version | namespace [32] | n u64, n tokens u32
//! | m u64, m × (pos u64, tokens u64, key [32]) | kv_len u64, kv | crc32 u32
//! ```
//! Numbers are little-endian.

use crate::Namespace;
use engine::{MediaSpan, SavedKv, SavedPrompt};
use std::io::{self, Read, Write};

const MAGIC: &[u8; 8] = b"HEARTHPC";
/// 2: each layer of a saved cache says its row widths.
const VERSION: u32 = 2;
/// Bytes of a media span in the header.
const SPAN_BYTES: usize = 48;
/// The most tokens a header may claim (far past any context): a corrupt
/// count must not make a reader allocate without bound.
const MAX_TOKENS: u64 = 1 << 24;

/// What a file's header says: whose state, which tokens and media, and how
/// long its cache bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Header {
    pub ns: Namespace,
    pub tokens: Vec<u32>,
    pub media: Vec<MediaSpan>,
    pub kv_len: u64,
}

impl Header {
    /// The file's whole length: header, cache bytes and checksum.
    pub fn file_len(&self) -> u64 {
        length(self.tokens.len(), self.media.len(), self.kv_len)
    }
}

/// The length of `saved`'s file.
pub(crate) fn file_len(saved: &SavedPrompt) -> u64 {
    length(saved.tokens.len(), saved.media.len(), saved.kv.len() as u64)
}

/// The length of a file of `tokens`, `media` spans and `kv` cache bytes.
fn length(tokens: usize, media: usize, kv: u64) -> u64 {
    let header = 8 + 4 + 32 + 8 + 4 * tokens + 8 + SPAN_BYTES * media + 8;
    header as u64 + kv + 4
}

/// Writes `saved` of namespace `ns` to `out`, checksum last.
pub(crate) fn write(out: &mut impl Write, ns: &Namespace, saved: &SavedPrompt) -> io::Result<()> {
    let mut hashed = Hashed {
        inner: out,
        crc: crc32fast::Hasher::new(),
    };
    let w = &mut hashed;
    w.write_all(MAGIC)?;
    w.write_all(&VERSION.to_le_bytes())?;
    w.write_all(&ns.0)?;
    w.write_all(&(saved.tokens.len() as u64).to_le_bytes())?;
    let tokens: Vec<u8> = saved.tokens.iter().flat_map(|t| t.to_le_bytes()).collect();
    w.write_all(&tokens)?;
    w.write_all(&(saved.media.len() as u64).to_le_bytes())?;
    for m in &saved.media {
        w.write_all(&(m.pos as u64).to_le_bytes())?;
        w.write_all(&(m.tokens as u64).to_le_bytes())?;
        w.write_all(&m.key)?;
    }
    w.write_all(&(saved.kv.len() as u64).to_le_bytes())?;
    for part in saved.kv.parts() {
        w.write_all(part)?;
    }
    let sum = hashed.crc.finalize();
    out.write_all(&sum.to_le_bytes())
}

/// A writer that checksums what passes through it.
struct Hashed<'w, W> {
    inner: &'w mut W,
    crc: crc32fast::Hasher,
}

impl<W: Write> Write for Hashed<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.crc.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

fn read_u64(r: &mut impl Read) -> io::Result<u64> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b)?;
    Ok(u64::from_le_bytes(b))
}

/// Reads a header from the start of a file of `file_len` bytes, checking
/// that its counts fit that length (the checksum is checked on load).
pub(crate) fn read_header(r: &mut impl Read, file_len: u64) -> io::Result<Header> {
    let mut magic = [0u8; 12];
    r.read_exact(&mut magic)?;
    if &magic[..8] != MAGIC || magic[8..] != VERSION.to_le_bytes() {
        return Err(bad("not a prompt state of this version"));
    }
    let mut ns = [0u8; 32];
    r.read_exact(&mut ns)?;
    let n = read_u64(r)?;
    if n > MAX_TOKENS || 4 * n > file_len {
        return Err(bad("a token count past the file's end"));
    }
    let mut raw = vec![0u8; 4 * n as usize];
    r.read_exact(&mut raw)?;
    let tokens = raw
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let m = read_u64(r)?;
    if m > n {
        return Err(bad("more media than tokens"));
    }
    let mut media = Vec::with_capacity(m as usize);
    for _ in 0..m {
        let pos = read_u64(r)?;
        let tokens = read_u64(r)?;
        let mut key = [0u8; 32];
        r.read_exact(&mut key)?;
        if pos.checked_add(tokens).is_none_or(|end| end > n) {
            return Err(bad("a media span past the tokens"));
        }
        media.push(MediaSpan {
            pos: pos as usize,
            tokens: tokens as usize,
            key,
        });
    }
    let kv_len = read_u64(r)?;
    let header = Header {
        ns: Namespace(ns),
        tokens,
        media,
        kv_len,
    };
    if kv_len > file_len || header.file_len() != file_len {
        return Err(bad("its length is not what its header says"));
    }
    Ok(header)
}

/// Parses a whole file: its header, cache bytes and checksum.
pub(crate) fn parse(bytes: &[u8]) -> io::Result<(Namespace, SavedPrompt)> {
    read(&mut &bytes[..], bytes.len() as u64)
}

/// Reads a whole file of `file_len` bytes from `r`, its cache bytes
/// straight into the parts a store shares, and checks its checksum.
pub(crate) fn read(r: &mut impl Read, file_len: u64) -> io::Result<(Namespace, SavedPrompt)> {
    let mut hashed = Checked {
        inner: r,
        crc: crc32fast::Hasher::new(),
    };
    let header = read_header(&mut hashed, file_len)?;
    let kv_len = usize::try_from(header.kv_len).map_err(|_| bad("too long"))?;
    let kv = SavedKv::read_cut(&mut hashed, kv_len)?;
    let mut sum = [0u8; 4];
    hashed.inner.read_exact(&mut sum)?;
    if hashed.crc.finalize() != u32::from_le_bytes(sum) {
        return Err(bad("its checksum does not match"));
    }
    if hashed.inner.read(&mut [0u8; 1])? != 0 {
        return Err(bad("bytes follow its checksum"));
    }
    let saved = SavedPrompt {
        tokens: header.tokens,
        media: header.media,
        kv,
    };
    Ok((header.ns, saved))
}

/// A reader that checksums what passes through it.
struct Checked<'r, R> {
    inner: &'r mut R,
    crc: crc32fast::Hasher,
}

impl<R: Read> Read for Checked<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.crc.update(&buf[..n]);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> SavedPrompt {
        SavedPrompt {
            tokens: vec![2, 10, 11, 12, 13],
            media: vec![MediaSpan {
                pos: 1,
                tokens: 3,
                key: [7; 32],
            }],
            kv: SavedKv::from_parts(vec![(0..150u8).collect(), (150..200u8).collect()]),
        }
    }

    #[test]
    fn a_file_reads_back_and_any_damage_is_refused() {
        let ns = Namespace([3; 32]);
        let mut bytes = Vec::new();
        write(&mut bytes, &ns, &sample()).unwrap();
        let header = read_header(&mut bytes.as_slice(), bytes.len() as u64).unwrap();
        assert_eq!(header.file_len(), bytes.len() as u64);
        let (read_ns, read) = parse(&bytes).unwrap();
        assert_eq!(read_ns, ns);
        assert_eq!(read.kv.to_vec(), sample().kv.to_vec());
        assert_eq!((read.tokens, read.media), (sample().tokens, sample().media));
        // Every cut and every flipped byte is refused.
        for cut in 0..bytes.len() {
            assert!(parse(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x40;
            assert!(parse(&bad).is_err(), "byte {i} flipped");
        }
    }

    #[test]
    fn huge_counts_in_a_header_are_refused_before_allocating() {
        let mut bytes = Vec::new();
        write(&mut bytes, &Namespace([0; 32]), &sample()).unwrap();
        // The token count (after magic, version and namespace).
        bytes[44..52].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(read_header(&mut bytes.as_slice(), bytes.len() as u64).is_err());
    }
}
