//! Text -> id lookup over the packed vocabulary.
//!
//! An open-addressing table of ids whose keys live in the vocabulary itself:
//! building it allocates one `Vec<u32>` and copies no strings, which keeps
//! construction for 262 144 tokens in the low milliseconds.

use crate::vocab::Vocab;

const EMPTY: u64 = u64::MAX;

/// Maps token text to id; on duplicate texts the highest id wins, as in
/// llama.cpp's `token_to_id` map which is filled in id order.
///
/// Each slot holds the id in the low 32 bits and the upper half of the
/// text's hash in the high 32 bits, so probes reject most non-matching
/// slots without touching the token text (a cache miss).
#[derive(Debug, Clone)]
pub(crate) struct TokenIndex {
    slots: Vec<u64>,
    mask: usize,
    /// This index's key for [`hash`], drawn at random when it is built: the
    /// texts come from a model file, which could otherwise be written so
    /// that they all share a slot (every insert and lookup then walks them
    /// all, minutes for a full vocabulary).
    key: u64,
}

/// A fast non-cryptographic hash (FxHash-style over 8-byte words, Murmur3's
/// finaliser) keyed by `key`, which a file's author cannot know.
fn hash(bytes: &[u8], key: u64) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mut h: u64 = bytes.len() as u64 ^ key;
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        h = (h.rotate_left(5) ^ w).wrapping_mul(K);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut buf = [0u8; 8];
        buf[..rest.len()].copy_from_slice(rest);
        h = (h.rotate_left(5) ^ u64::from_le_bytes(buf)).wrapping_mul(K);
    }
    // Murmur3's finaliser: the multiply above only carries low bits upward,
    // and the table index takes the low bits.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h
}

/// Tokens whose first slots are read together before they are inserted.
const AHEAD: usize = 16;

impl TokenIndex {
    /// Index every token of `vocab`.
    pub(crate) fn build(vocab: &Vocab) -> Self {
        use std::hash::{BuildHasher, Hasher};
        let n = vocab.len();
        let cap = (n * 2).next_power_of_two().max(16);
        let mut index = Self {
            slots: vec![EMPTY; cap],
            mask: cap - 1,
            key: std::hash::RandomState::new().build_hasher().finish(),
        };
        let text = |id: u32| vocab.text(id).unwrap_or_default().as_bytes();
        let hashes: Vec<u64> = (0..n as u32).map(|id| hash(text(id), index.key)).collect();
        for (r, run) in hashes.chunks(AHEAD).enumerate() {
            // Each insert's first read is a cache miss in a table of
            // megabytes; reading a run's slots first lets them overlap.
            let warm = run
                .iter()
                .fold(0u64, |acc, &h| acc ^ index.slots[h as usize & index.mask]);
            std::hint::black_box(warm);
            for (k, &h) in run.iter().enumerate() {
                let id = (r * AHEAD + k) as u32;
                // A later duplicate text takes the earlier one's slot.
                let (Ok(i) | Err(i)) = index.slot(vocab, text(id), h);
                index.slots[i] = (h & 0xffff_ffff_0000_0000) | u64::from(id);
            }
        }
        index
    }

    /// The slot holding the id of `key` (whose hash is `h`), or the empty
    /// slot where it would go.
    fn slot(&self, vocab: &Vocab, key: &[u8], h: u64) -> Result<usize, usize> {
        let mut i = h as usize & self.mask;
        loop {
            let s = self.slots[i];
            if s == EMPTY {
                return Err(i);
            }
            if (s ^ h) >> 32 == 0 && vocab.text(s as u32).unwrap_or_default().as_bytes() == key {
                return Ok(i);
            }
            i = (i + 1) & self.mask;
        }
    }

    /// The id whose text is exactly `key`.
    pub(crate) fn get(&self, vocab: &Vocab, key: &[u8]) -> Option<u32> {
        let i = self.slot(vocab, key, hash(key, self.key)).ok()?;
        Some(self.slots[i] as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two indexes of one vocabulary are keyed apart (a file cannot be
    /// written against the key), and both find every token.
    #[test]
    fn indexes_are_keyed_at_random_and_find_every_token() {
        let texts: Vec<String> = (0..5000).map(|i| format!("t{i}")).collect();
        let vocab = Vocab::new(texts.iter().map(String::as_str).collect(), None, None).unwrap();
        let (a, b) = (TokenIndex::build(&vocab), TokenIndex::build(&vocab));
        assert_ne!(a.key, b.key);
        assert_ne!(a.slots, b.slots);
        for (id, t) in texts.iter().enumerate() {
            assert_eq!(a.get(&vocab, t.as_bytes()), Some(id as u32));
            assert_eq!(b.get(&vocab, t.as_bytes()), Some(id as u32));
        }
        assert_eq!(a.get(&vocab, b"absent"), None);
    }
}
