//! Gemma 4's BPE (`tokenizer.ggml.model = gemma4`), giving the ids
//! llama.cpp's BPE tokenizer gives with its Gemma 4 pre-tokenizer.
//!
//! The caller has already replaced spaces by U+2581. The text is cut into
//! runs of newlines and runs of anything else, and each run is encoded on
//! its own: it starts as one symbol per character, then the adjacent pair
//! with the lowest merge rank is merged until no listed pair remains (equal
//! ranks: leftmost first). A symbol that is not a vocabulary entry at the end
//! becomes `<0xNN>` byte tokens.
//!
//! Merges are looked up by the ids of their two sides rather than by text,
//! so the hot loop hashes two integers and allocates nothing per pair.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::index::TokenIndex;
use crate::vocab::Vocab;
use crate::Tokenizer;

/// No neighbour in the symbol list.
const NONE: usize = usize::MAX;
/// A symbol whose text is not a vocabulary entry. Real ids stay below
/// `u32::MAX / 2` (`Vocab::new` refuses more tokens).
const NO_ID: u32 = u32::MAX;
/// An unused slot; no key can equal it because both halves are real ids.
const EMPTY: u64 = u64::MAX;

/// The merge rules keyed by the ids of the two sides: `(left, right)` ->
/// `(rank, id of the merged text or NO_ID)`, in an open-addressing table.
#[derive(Debug, Clone)]
pub(crate) struct MergeTable {
    /// `(left << 32 | right, rank << 32 | result)`.
    slots: Vec<(u64, u64)>,
    mask: usize,
}

fn mix(key: u64) -> u64 {
    // Murmur3's finaliser: ids are small and dense, so their bits need
    // spreading before the low bits pick a slot.
    let mut h = key;
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    h
}

impl MergeTable {
    /// Resolve every merge of `vocab` to token ids. An entry without a space
    /// after its first byte, or whose sides are not tokens, is an error:
    /// Hugging Face refuses such files too, and accepting them would make
    /// the merge silently unreachable.
    ///
    /// A merged text that is not itself a token is accepted, as llama.cpp
    /// does: the merge still happens and the result falls back to bytes.
    pub(crate) fn build(vocab: &Vocab, index: &TokenIndex) -> Result<Self, String> {
        let n = vocab.n_merges();
        let cap = (n * 2).next_power_of_two().max(16);
        let mut table = Self {
            slots: vec![(EMPTY, 0); cap],
            mask: cap - 1,
        };
        let mut joined = String::new();
        for rank in 0..n {
            let entry = vocab.merge(rank).unwrap_or_default();
            // The separator is the first space after the first byte, so a
            // left side may itself begin with a space (llama.cpp's rule).
            let Some(sep) = entry.bytes().skip(1).position(|b| b == b' ').map(|p| p + 1) else {
                return Err(format!(
                    "merge {rank} {entry:?} has no space separating two tokens"
                ));
            };
            // `sep` is an ASCII byte, so both slices are on char boundaries.
            let (left, right) = (&entry[..sep], &entry[sep + 1..]);
            let id = |side: &str| {
                index.get(vocab, side.as_bytes()).ok_or_else(|| {
                    format!("merge {rank} {entry:?}: {side:?} is not in the vocabulary")
                })
            };
            let (l, r) = (id(left)?, id(right)?);
            joined.clear();
            joined.push_str(left);
            joined.push_str(right);
            let result = index.get(vocab, joined.as_bytes()).unwrap_or(NO_ID);
            table.insert(l, r, rank as u32, result);
        }
        Ok(table)
    }

    /// Add a rule unless the pair already has one: a repeated pair keeps its
    /// first (best) rank, as in llama.cpp.
    fn insert(&mut self, left: u32, right: u32, rank: u32, result: u32) {
        let key = (left as u64) << 32 | right as u64;
        let mut i = mix(key) as usize & self.mask;
        loop {
            let (k, _) = self.slots[i];
            if k == EMPTY {
                self.slots[i] = (key, (rank as u64) << 32 | result as u64);
                return;
            }
            if k == key {
                return;
            }
            i = (i + 1) & self.mask;
        }
    }

    /// `(rank, merged id or NO_ID)` for the pair, if it is a rule.
    fn get(&self, left: u32, right: u32) -> Option<(u32, u32)> {
        if left == NO_ID || right == NO_ID {
            return None;
        }
        let key = (left as u64) << 32 | right as u64;
        let mut i = mix(key) as usize & self.mask;
        loop {
            let (k, v) = self.slots[i];
            if k == key {
                return Some(((v >> 32) as u32, v as u32));
            }
            if k == EMPTY {
                return None;
            }
            i = (i + 1) & self.mask;
        }
    }
}

#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: usize,
    next: usize,
    id: u32,
}

/// A queued merge of `left` with its right neighbour `right`; `size` is
/// their combined length when queued, which no longer matches once either
/// side has changed, so stale entries are recognised when popped.
struct Candidate {
    rank: u32,
    left: usize,
    right: usize,
    size: usize,
    result: u32,
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Candidate {}
impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Candidate {
    // BinaryHeap pops the greatest: make that the lowest rank, then the
    // leftmost pair.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .rank
            .cmp(&self.rank)
            .then_with(|| other.left.cmp(&self.left))
    }
}

/// Buffers reused across the runs of one `encode` call.
#[derive(Default)]
struct Scratch {
    symbols: Vec<Symbol>,
    queue: BinaryHeap<Candidate>,
}

/// Encode `text` (spaces already replaced by U+2581) and append the ids.
pub(crate) fn encode_text(tok: &Tokenizer, merges: &MergeTable, text: &str, out: &mut Vec<u32>) {
    let mut scratch = Scratch::default();
    let bytes = text.as_bytes();
    let mut start = 0;
    while start < bytes.len() {
        let newline = bytes[start] == b'\n';
        let len = bytes[start..]
            .iter()
            .position(|&b| (b == b'\n') != newline)
            .unwrap_or(bytes.len() - start);
        // '\n' is ASCII, so run boundaries are char boundaries.
        let run = &text[start..start + len];
        encode_run(tok, merges, run, newline, &mut scratch, out);
        start += len;
    }
}

fn encode_run(
    tok: &Tokenizer,
    merges: &MergeTable,
    run: &str,
    newlines: bool,
    scratch: &mut Scratch,
    out: &mut Vec<u32>,
) {
    // A run of newlines that is a token as a whole is taken whole even when
    // the merges would build it differently (llama.cpp's Gemma 4 rule; the
    // model was trained on such runs as single tokens).
    if newlines {
        if let Some(id) = tok.lookup(run.as_bytes()) {
            out.push(id);
            return;
        }
    }
    let bytes = run.as_bytes();
    let symbols = &mut scratch.symbols;
    let queue = &mut scratch.queue;
    symbols.clear();
    queue.clear();
    for (start, ch) in run.char_indices() {
        let idx = symbols.len();
        let len = ch.len_utf8();
        symbols.push(Symbol {
            start,
            len,
            prev: if idx == 0 { NONE } else { idx - 1 },
            next: if start + len == run.len() {
                NONE
            } else {
                idx + 1
            },
            id: tok.lookup(&bytes[start..start + len]).unwrap_or(NO_ID),
        });
    }

    let push =
        |symbols: &[Symbol], queue: &mut BinaryHeap<Candidate>, left: usize, right: usize| {
            if left == NONE || right == NONE {
                return;
            }
            let (l, r) = (symbols[left], symbols[right]);
            if let Some((rank, result)) = merges.get(l.id, r.id) {
                queue.push(Candidate {
                    rank,
                    left,
                    right,
                    size: l.len + r.len,
                    result,
                });
            }
        };
    for i in 1..symbols.len() {
        push(symbols, queue, i - 1, i);
    }

    while let Some(c) = queue.pop() {
        let (l, r) = (symbols[c.left], symbols[c.right]);
        if l.len == 0 || r.len == 0 || l.len + r.len != c.size {
            continue;
        }
        let merged = &mut symbols[c.left];
        merged.len += r.len;
        merged.id = c.result;
        merged.next = r.next;
        symbols[c.right].len = 0;
        if r.next != NONE {
            symbols[r.next].prev = c.left;
        }
        push(symbols, queue, l.prev, c.left);
        push(symbols, queue, c.left, r.next);
    }

    let mut i = if symbols.is_empty() { NONE } else { 0 };
    while i != NONE {
        let s = symbols[i];
        if s.id != NO_ID {
            out.push(s.id);
        } else {
            // Only `<0xNN>` entries serve as fallback here (no single-byte
            // or unknown token), and a byte without one is dropped, as in
            // llama.cpp.
            for &b in &bytes[s.start..s.start + s.len] {
                if let Some(id) = tok.byte_token(b) {
                    out.push(id);
                }
            }
        }
        i = s.next;
    }
}
