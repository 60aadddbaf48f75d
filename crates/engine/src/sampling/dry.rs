//! DRY ("don't repeat yourself"): a penalty on each token that would
//! extend a sequence already repeated in the recent context, growing
//! exponentially with the repeat's length, as llama.cpp has it (after
//! Koboldcpp). Sequence breakers (by default a newline, a colon, a quote and
//! an asterisk) end a repeat, so a list's or a dialogue's own structure is
//! not penalized.

use std::collections::HashMap;
use std::sync::Arc;

/// llama.cpp's default sequence breakers.
pub const DEFAULT_SEQUENCE_BREAKERS: [&str; 4] = ["\n", ":", "\"", "*"];
/// A breaker is cut to this many bytes (llama.cpp's bound).
pub const MAX_BREAKER_BYTES: usize = 40;
/// The most breakers one request may give: each costs a pass over the
/// vocabulary when the sampler is made.
pub const MAX_BREAKERS: usize = 64;
/// Tokens kept of a breaker's tail (llama.cpp's bound), which keeps the
/// restart scan linear in the context.
const MAX_TAIL_TOKENS: usize = 20;
/// `ln(f32::MAX)`, llama.cpp's bound on the exponent.
const FLOAT_MAX_LOG: f32 = 88.722_84;

/// DRY's settings, with llama.cpp's names and defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct Dry {
    /// Strength of the penalty (0 = off).
    pub multiplier: f32,
    /// Growth of the penalty per token of repeat past `allowed_length`
    /// (below 1 = off).
    pub base: f32,
    /// Repeats up to this many tokens go unpenalized.
    pub allowed_length: usize,
    /// How many recent tokens are scanned for repeats (0 = off;
    /// `usize::MAX` = the whole context, llama.cpp's -1).
    pub penalty_last_n: usize,
    /// The sequence breakers as text.
    pub sequence_breakers: Vec<String>,
    /// The sequence breakers as tokens of the model's vocabulary, made from
    /// `sequence_breakers` by [`crate::Engine::bind_dry`] once the model is
    /// known (until then, none).
    pub breakers: Arc<SequenceBreakers>,
}

impl Default for Dry {
    fn default() -> Self {
        Self {
            multiplier: 0.0,
            base: 1.75,
            allowed_length: 2,
            penalty_last_n: 64,
            sequence_breakers: DEFAULT_SEQUENCE_BREAKERS.map(String::from).to_vec(),
            breakers: Arc::default(),
        }
    }
}

impl Dry {
    /// Whether the settings penalize anything.
    pub fn enabled(&self) -> bool {
        self.multiplier != 0.0 && self.base >= 1.0 && self.penalty_last_n != 0
    }
}

/// Sequence breakers as tokens: each head token with the tails that,
/// written after it, complete a breaker (the empty tail: the head alone
/// holds one). Tails are kept once and named by index, since one tail
/// (the rest of a breaker after its first byte) follows thousands of heads.
#[derive(Debug, Clone, PartialEq)]
pub struct SequenceBreakers {
    heads: HashMap<u32, Vec<u32>>,
    /// The distinct tails; the first is the empty one.
    tails: Vec<Vec<u32>>,
}

impl Default for SequenceBreakers {
    fn default() -> Self {
        Self {
            heads: HashMap::new(),
            tails: vec![Vec::new()],
        }
    }
}

impl SequenceBreakers {
    /// Breakers given directly as token sequences (head first); empty ones
    /// are skipped.
    pub fn from_tokens(seqs: &[Vec<u32>]) -> Self {
        let mut out = Self::default();
        for s in seqs {
            if let Some((&head, tail)) = s.split_first() {
                let index = out.tail_index(tail.to_vec());
                out.add(head, index);
            }
        }
        out
    }

    /// The breakers `texts` (each cut to [`MAX_BREAKER_BYTES`]) over a
    /// vocabulary of `vocab_len` tokens whose text `token_text` gives: every
    /// token holding a breaker is one alone; a token ending in the start of
    /// a breaker is a head whose tail is the rest, tokenized by `tokenize`.
    /// Empty breakers are skipped.
    pub fn resolve(
        texts: &[String],
        vocab_len: usize,
        token_text: impl Fn(u32) -> Vec<u8>,
        tokenize: impl Fn(&str) -> Vec<u32>,
    ) -> Self {
        let breakers: Vec<&[u8]> = texts
            .iter()
            .map(|t| &t.as_bytes()[..t.len().min(MAX_BREAKER_BYTES)])
            .filter(|b| !b.is_empty())
            .collect();
        let mut out = Self::default();
        // A tail is the same rest of a breaker for many heads: tokenize it once.
        let mut by_text: HashMap<&[u8], u32> = HashMap::new();
        for id in 0..vocab_len as u32 {
            let word = token_text(id);
            for &b in &breakers {
                if contains(&word, b) {
                    out.add(id, 0);
                    continue;
                }
                for pos in (0..word.len()).filter(|&p| word[p] == b[0]) {
                    let rest = &word[pos..];
                    if !b.starts_with(rest) {
                        continue;
                    }
                    let tail = &b[rest.len()..];
                    let index = match by_text.get(tail) {
                        Some(&i) => i,
                        None => {
                            let mut t = tokenize(&String::from_utf8_lossy(tail));
                            t.truncate(MAX_TAIL_TOKENS);
                            let i = out.tail_index(t);
                            by_text.insert(tail, i);
                            i
                        }
                    };
                    out.add(id, index);
                }
            }
        }
        out
    }

    fn tail_index(&mut self, tail: Vec<u32>) -> u32 {
        match self.tails.iter().position(|t| *t == tail) {
            Some(i) => i as u32,
            None => {
                self.tails.push(tail);
                (self.tails.len() - 1) as u32
            }
        }
    }

    fn add(&mut self, head: u32, tail: u32) {
        let tails = self.heads.entry(head).or_default();
        if !tails.contains(&tail) {
            tails.push(tail);
        }
    }

    /// The tails that complete a breaker after `head`.
    fn tails_of(&self, head: u32) -> impl Iterator<Item = &[u32]> {
        self.heads
            .get(&head)
            .into_iter()
            .flatten()
            .map(|&i| self.tails[i as usize].as_slice())
    }

    /// Whether `token` alone is a breaker.
    fn breaks_alone(&self, token: u32) -> bool {
        self.heads.get(&token).is_some_and(|t| t.contains(&0))
    }

    /// How many head tokens there are.
    pub fn heads(&self) -> usize {
        self.heads.len()
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// The buffers DRY works in, kept by a sampler from token to token.
#[derive(Debug, Clone, Default)]
pub(super) struct Scratch {
    /// How far the text before each place matches the text's end.
    repeat: Vec<usize>,
    /// The longest repeat each next token would extend.
    longest: HashMap<u32, usize>,
}

/// Apply DRY's penalties to `logits` after `history` (the prompt and the
/// tokens drawn so far, oldest first).
pub(super) fn apply(dry: &Dry, logits: &mut [f32], history: &[u32], scratch: &mut Scratch) {
    if !dry.enabled() {
        return;
    }
    let n = history.len().min(dry.penalty_last_n);
    if n <= dry.allowed_length {
        return;
    }
    let last = &history[history.len() - n..];
    // `back(i)`: the token `i` places from the end (0 = the last).
    let back = |i: usize| last[n - 1 - i];
    let limit = repeat_limit(&dry.breakers, n, back);
    if limit < dry.allowed_length {
        return;
    }
    let Scratch { repeat, longest } = scratch;
    suffix_repeats(n, limit, back, repeat);
    longest.clear();
    for (i, &len) in repeat.iter().enumerate().take(n - 1) {
        if len >= dry.allowed_length {
            let next = back(n - 2 - i);
            let e = longest.entry(next).or_insert(len);
            *e = (*e).max(len);
        }
    }
    let max_exponent = if dry.base > 1.000_001 {
        (FLOAT_MAX_LOG / dry.base.ln()) as usize
    } else {
        0
    };
    for (&token, &len) in longest.iter() {
        if dry.breakers.breaks_alone(token) {
            continue;
        }
        let Some(l) = logits.get_mut(token as usize) else {
            continue;
        };
        let mut exponent = len - dry.allowed_length;
        if max_exponent > 0 {
            exponent = exponent.min(max_exponent);
        }
        // As llama.cpp computes it: the power in double, the penalty a float.
        let penalty =
            (f64::from(dry.multiplier) * f64::from(dry.base).powf(exponent as f64)) as f32;
        *l -= penalty;
    }
}

/// How long a repeat may be counted: up to the most recent breaker (the
/// longest of those whose head is at one place), else the whole window.
fn repeat_limit(breakers: &SequenceBreakers, n: usize, back: impl Fn(usize) -> u32) -> usize {
    for i in 0..n {
        let longest = breakers
            .tails_of(back(i))
            .filter(|t| t.len() <= i)
            .filter(|t| t.iter().enumerate().all(|(o, &tok)| tok == back(i - o - 1)))
            .map(<[u32]>::len)
            .max();
        if let Some(len) = longest {
            return i - len;
        }
    }
    n
}

/// `repeat[n - 1 - k]` = how many of the last tokens also appear ending
/// `k` places before the end, at most `limit` (a Z-algorithm over the
/// reversed window, linear in `n`).
fn suffix_repeats(n: usize, limit: usize, back: impl Fn(usize) -> u32, repeat: &mut Vec<usize>) {
    repeat.clear();
    repeat.resize(n, 0);
    let last = n - 1;
    let (mut lt, mut rt) = (0usize, 0usize);
    for k in 1..n {
        if k > rt {
            let mut len = 0;
            while len + k < n && back(len) == back(len + k) {
                len += 1;
            }
            repeat[last - k] = len.min(limit);
            if len > 0 {
                lt = k;
                rt = k + len - 1;
            }
        } else {
            let p = k - lt;
            let right = rt - k + 1;
            if repeat[last - p] < right {
                repeat[last - k] = repeat[last - p].min(limit);
            } else {
                let mut i = rt + 1;
                while i < n && back(i) == back(i - k) {
                    i += 1;
                }
                repeat[last - k] = (i - k).min(limit);
                lt = k;
                rt = i - 1;
            }
        }
    }
}

#[cfg(test)]
mod tests;
