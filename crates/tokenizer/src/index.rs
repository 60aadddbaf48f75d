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
}

/// A fast non-cryptographic hash (FxHash-style over 8-byte words); token
/// texts come from the model file, not from an adversary choosing collisions.
fn hash(bytes: &[u8]) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mut h: u64 = bytes.len() as u64;
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

impl TokenIndex {
    /// Index every token of `vocab`.
    pub(crate) fn build(vocab: &Vocab) -> Self {
        let n = vocab.len();
        let cap = (n * 2).next_power_of_two().max(16);
        let mask = cap - 1;
        let mut slots = vec![EMPTY; cap];
        for id in 0..n as u32 {
            let text = vocab.text(id).unwrap_or_default().as_bytes();
            let h = hash(text);
            let entry = (h & 0xffff_ffff_0000_0000) | id as u64;
            let mut i = h as usize & mask;
            loop {
                let s = slots[i];
                if s == EMPTY {
                    slots[i] = entry;
                    break;
                }
                if (s ^ h) >> 32 == 0 && vocab.text(s as u32).unwrap_or_default().as_bytes() == text
                {
                    slots[i] = entry;
                    break;
                }
                i = (i + 1) & mask;
            }
        }
        Self { slots, mask }
    }

    /// The id whose text is exactly `key`.
    pub(crate) fn get(&self, vocab: &Vocab, key: &[u8]) -> Option<u32> {
        let h = hash(key);
        let mut i = h as usize & self.mask;
        loop {
            let s = self.slots[i];
            if s == EMPTY {
                return None;
            }
            if (s ^ h) >> 32 == 0 && vocab.text(s as u32).unwrap_or_default().as_bytes() == key {
                return Some(s as u32);
            }
            i = (i + 1) & self.mask;
        }
    }
}
