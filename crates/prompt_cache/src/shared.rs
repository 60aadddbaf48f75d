//! Rows several states hold alike, kept once in RAM. A state's cache bytes
//! are cut, layer by layer, into blocks of [`BLOCK_ROWS`] positions; a
//! block is keyed by the namespace, the tokens and media up to its end, its
//! layer and whether it holds keys or values, and shared by the states
//! whose block has that key and the same bytes. Conversations that start
//! with one system prompt or document hold its rows once.
//!
//! The bytes are compared, not only the keys: the same tokens computed in
//! other batches can round differently, and a state must load exactly the
//! bits its own session held.

use crate::Namespace;
use engine::{saved_rows, MediaSpan, SavedKv, SavedPrompt};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Arc;

/// Positions in a block of rows states may share.
const BLOCK_ROWS: usize = SavedKv::BLOCK_ROWS;

/// Which rows a shared block holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct BlockKey {
    /// A digest of the namespace, the block's index, and the tokens and
    /// media before its end.
    prefix: [u8; 32],
    layer: u32,
    values: bool,
}

/// A state's cache bytes cut into parts, each with its key when it is a
/// whole block others may hold too. Made outside the cache's lock.
#[derive(Debug)]
pub(crate) struct Cut {
    parts: Vec<(Arc<[u8]>, Option<BlockKey>)>,
}

impl Cut {
    /// `saved`'s cache bytes, its whole blocks keyed: the parts as they
    /// are where they are cut at the blocks ([`engine::SavedKv`] cuts them
    /// so), else a copy cut so; one part shared with nothing when they are
    /// not a saved cache's.
    pub fn of(ns: &Namespace, saved: &SavedPrompt) -> Self {
        let Ok((n, layers)) = saved_rows(&saved.kv) else {
            let parts = saved.kv.parts().iter().map(|p| (Arc::clone(p), None));
            return Self {
                parts: parts.collect(),
            };
        };
        let held = &saved.tokens[..n.min(saved.tokens.len())];
        let mut blocks: HashMap<usize, (usize, BlockKey)> = HashMap::new();
        for (b, prefix) in block_prefixes(ns, held, &saved.media)
            .into_iter()
            .enumerate()
        {
            let (lo, hi) = (b * BLOCK_ROWS, (b + 1) * BLOCK_ROWS);
            for (layer, rows) in layers.iter().enumerate().filter(|(_, r)| r.first <= lo) {
                let halves = [
                    (false, rows.keys_at, rows.key_row),
                    (true, rows.values_at, rows.value_row),
                ];
                for (values, at, width) in halves.into_iter().filter(|h| h.2 > 0) {
                    let start = at + (lo - rows.first) * width;
                    let key = BlockKey {
                        prefix,
                        layer: layer as u32,
                        values,
                    };
                    blocks.insert(start, (start + (hi - lo) * width, key));
                }
            }
        }
        let keyed = |kv: &SavedKv| {
            let mut at = 0;
            let mut parts = Vec::with_capacity(kv.parts().len());
            for p in kv.parts() {
                let key = blocks
                    .get(&at)
                    .filter(|(end, _)| *end == at + p.len())
                    .map(|(_, key)| *key);
                parts.push((Arc::clone(p), key));
                at += p.len();
            }
            parts
        };
        let mut parts = keyed(&saved.kv);
        if parts.iter().filter(|(_, k)| k.is_some()).count() < blocks.len() {
            parts = keyed(&SavedKv::cut_from(&saved.kv.to_vec()));
        }
        Self { parts }
    }

    /// Bytes in all.
    pub fn len(&self) -> u64 {
        self.parts.iter().map(|(p, _)| p.len() as u64).sum()
    }
}

/// The digest of each whole block of `tokens` (with the media that start
/// within it or before): what its rows were computed from.
fn block_prefixes(ns: &Namespace, tokens: &[u32], media: &[MediaSpan]) -> Vec<[u8; 32]> {
    let mut sha = Sha256::new();
    sha.update(ns.0);
    let mut out = Vec::with_capacity(tokens.len() / BLOCK_ROWS);
    for (b, block) in tokens.chunks_exact(BLOCK_ROWS).enumerate() {
        for t in block {
            sha.update(t.to_le_bytes());
        }
        let end = (b + 1) * BLOCK_ROWS;
        let mut at_end = sha.clone();
        at_end.update((b as u64).to_le_bytes());
        for m in media.iter().filter(|m| m.pos < end) {
            at_end.update((m.pos as u64).to_le_bytes());
            at_end.update((m.tokens as u64).to_le_bytes());
            at_end.update(m.key);
        }
        out.push(at_end.finalize().into());
    }
    out
}

/// A state's cache bytes as the table holds them.
#[derive(Debug)]
pub(crate) struct Held {
    /// The parts, shared ones among them.
    pub kv: SavedKv,
    /// The blocks it shares (each counted once in the table).
    pub keys: Vec<BlockKey>,
    /// Bytes of its parts no other state holds.
    pub own: u64,
    /// Bytes of blocks it is the first to hold.
    pub new_blocks: u64,
}

/// The blocks held, with how many states hold each.
#[derive(Debug, Default)]
pub(crate) struct Blocks {
    table: HashMap<BlockKey, (Arc<[u8]>, usize)>,
}

impl Blocks {
    /// Takes each block of `cut` from the table where it holds the same
    /// bytes under that key, and enters the others; a block whose key is
    /// there with other bytes stays the state's own.
    pub fn share(&mut self, cut: Cut) -> Held {
        let mut held = Held {
            kv: SavedKv::default(),
            keys: Vec::new(),
            own: 0,
            new_blocks: 0,
        };
        let mut parts = Vec::with_capacity(cut.parts.len());
        for (bytes, key) in cut.parts {
            let Some(key) = key else {
                held.own += bytes.len() as u64;
                parts.push(bytes);
                continue;
            };
            match self.table.get_mut(&key) {
                Some((there, users)) if **there == *bytes => {
                    *users += 1;
                    held.keys.push(key);
                    parts.push(Arc::clone(there));
                }
                Some(_) => {
                    held.own += bytes.len() as u64;
                    parts.push(bytes);
                }
                None => {
                    held.new_blocks += bytes.len() as u64;
                    self.table.insert(key, (Arc::clone(&bytes), 1));
                    held.keys.push(key);
                    parts.push(bytes);
                }
            }
        }
        held.kv = SavedKv::from_parts(parts);
        held
    }

    /// Lets go of the blocks `keys` (one state's); returns the bytes of
    /// those no state holds any more, which leave the table.
    pub fn release(&mut self, keys: &[BlockKey]) -> u64 {
        let mut freed = 0;
        for key in keys {
            if let Some((bytes, users)) = self.table.get_mut(key) {
                *users -= 1;
                if *users == 0 {
                    freed += bytes.len() as u64;
                    self.table.remove(key);
                }
            }
        }
        freed
    }

    /// Bytes of the blocks `keys`.
    pub fn bytes_of(&self, keys: &[BlockKey]) -> u64 {
        keys.iter()
            .filter_map(|k| self.table.get(k))
            .map(|(b, _)| b.len() as u64)
            .sum()
    }
}
