//! SentencePiece (SPM) encoding of one piece of plain text, the way llama.cpp
//! does it for `tokenizer.ggml.model = llama`.
//!
//! Start from one symbol per UTF-8 character, repeatedly merge the adjacent
//! pair whose concatenation is the vocabulary entry with the highest score
//! (ties: leftmost first), then emit each final symbol as its id, or as
//! `<0xNN>` byte tokens when the symbol is not in the vocabulary.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::Tokenizer;

const NONE: usize = usize::MAX;

#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: usize,
    next: usize,
}

/// A candidate merge of `left` with its right neighbour `right`; `size` is the
/// byte length at the time it was queued, so stale entries can be recognised.
struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    size: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bigram {
    // Max-heap: higher score first; on equal scores the smaller `left` (the
    // leftmost pair) first. Scores are never NaN (sanitised in `Vocab::new`).
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .partial_cmp(&other.score)
            .unwrap_or(Ordering::Equal)
            .then_with(|| other.left.cmp(&self.left))
    }
}

/// Encode `text` (spaces already replaced by U+2581) and append the ids to `out`.
pub(crate) fn encode_piece(tok: &Tokenizer, text: &str, out: &mut Vec<u32>) {
    if text.is_empty() {
        return;
    }
    let bytes = text.as_bytes();
    let mut symbols: Vec<Symbol> = Vec::with_capacity(text.len());
    for (start, ch) in text.char_indices() {
        let idx = symbols.len();
        let len = ch.len_utf8();
        symbols.push(Symbol {
            start,
            len,
            prev: if idx == 0 { NONE } else { idx - 1 },
            next: if start + len == text.len() {
                NONE
            } else {
                idx + 1
            },
        });
    }

    let mut queue = BinaryHeap::with_capacity(symbols.len());
    let try_add =
        |symbols: &[Symbol], queue: &mut BinaryHeap<Bigram>, left: usize, right: usize| {
            if left == NONE || right == NONE {
                return;
            }
            let l = symbols[left];
            let size = l.len + symbols[right].len;
            let piece = &bytes[l.start..l.start + size];
            if let Some(id) = tok.lookup(piece) {
                queue.push(Bigram {
                    score: tok.vocab.score(id).unwrap_or(f32::MIN),
                    left,
                    right,
                    size,
                });
            }
        };

    for i in 1..symbols.len() {
        try_add(&symbols, &mut queue, i - 1, i);
    }

    while let Some(b) = queue.pop() {
        let (l, r) = (symbols[b.left], symbols[b.right]);
        // Skip pairs where either side was merged away or grew since queued.
        if l.len == 0 || r.len == 0 || l.len + r.len != b.size {
            continue;
        }
        symbols[b.left].len += r.len;
        symbols[b.right].len = 0;
        symbols[b.left].next = r.next;
        if r.next != NONE {
            symbols[r.next].prev = b.left;
        }
        try_add(&symbols, &mut queue, l.prev, b.left);
        try_add(&symbols, &mut queue, b.left, r.next);
    }

    // Every merged symbol is a vocabulary entry by construction, so only
    // single characters can be missing; llama.cpp's reverse-merge table is
    // never consulted for them and they go straight to byte fallback.
    let mut i = 0;
    while i != NONE {
        let s = symbols[i];
        let piece = &bytes[s.start..s.start + s.len];
        match tok.lookup(piece) {
            Some(id) => out.push(id),
            None => {
                for &byte in piece {
                    if let Some(id) = tok.byte_token(byte) {
                        out.push(id);
                    }
                }
            }
        }
        i = s.next;
    }
}
