//! Text <-> token ids for GGUF models: the SentencePiece tokenizer as llama.cpp
//! implements `tokenizer.ggml.model = llama`, Gemma 4's BPE
//! (`tokenizer.ggml.model = gemma4`), special tokens, streaming decode, and
//! chat templates.
//!
//! The core works on a [`Vocab`] and does not need a GGUF file; only
//! [`Vocab::from_gguf`] and [`Tokenizer::from_gguf`] read one.

#![warn(missing_docs)]

mod bpe;
mod chat;
mod decode;
mod index;
mod message_text;
mod spm;
mod vocab;

pub use chat::{ChatMessage, ChatOptions, ChatTemplate, DEFAULT_TEMPLATE_STEPS, MAX_RENDER_BYTES};
pub use decode::StreamDecoder;
pub use message_text::PromptText;
pub use vocab::{FimTokens, TokenType, TokenizerModel, Vocab};

use index::TokenIndex;
use message_text::ControlTexts;
use std::ops::Range;

/// Everything that can go wrong building a tokenizer or rendering a chat.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// A metadata key the tokenizer needs is absent.
    #[error("GGUF metadata key `{0}` is missing")]
    MissingKey(String),
    /// A metadata key has the wrong type or an impossible value.
    #[error("GGUF metadata key `{key}` is invalid: {reason}")]
    InvalidKey {
        /// The key.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `tokenizer.ggml.model` names an algorithm this crate does not implement.
    #[error(
        "tokenizer model `{0}` is not supported (only `llama`, i.e. SentencePiece, and `gemma4`)"
    )]
    UnsupportedModel(String),
    /// The vocabulary itself is inconsistent.
    #[error("invalid vocabulary: {0}")]
    InvalidVocab(String),
    /// A chat template failed to compile or render.
    #[error("chat template: {0}")]
    Template(String),
}

/// Token texts that end a generation when present in the vocabulary, taken
/// from the list llama.cpp consults (Gemma 2 and 3 end turns with
/// `<end_of_turn>`, Gemma 4 with `<turn|>`, and Gemma 4 stops to wait for a
/// tool's answer at `<|tool_response>`). Gemma 3 also ends a generation at
/// `</s>` (id 212); see [`GEMMA4_MARKER`] for the exception.
pub(crate) const EOG_TEXTS: &[&str] = &[
    "<end_of_turn>",
    "</s>",
    "<turn|>",
    "<|tool_response>",
    "<eos>",
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<EOT>",
    "<|endoftext|>",
    "<end_of_utterance>",
];

/// A token only Gemma 4's vocabulary has.
const GEMMA4_MARKER: &str = "<|tool_response>";

/// A tokenizer over a [`Vocab`]: SentencePiece or Gemma 4 BPE, as the
/// vocabulary's [`TokenizerModel`] says.
#[derive(Debug, Clone)]
pub struct Tokenizer {
    vocab: Vocab,
    index: TokenIndex,
    /// The merge rules, for [`TokenizerModel::Gemma4`] only.
    merges: Option<bpe::MergeTable>,
    /// `<0xNN>` id for each byte value (SentencePiece also falls back to a
    /// single-character token, then to the unknown token).
    byte_ids: [Option<u32>; 256],
    /// Control, user-defined and unknown tokens, longest text first, the
    /// order in which llama.cpp splits them out of text.
    specials: Vec<u32>,
    /// For each first byte, the distinct lengths of specials starting with it
    /// (longest first); lets `encode` find candidate specials in one pass.
    special_lens: Vec<Vec<usize>>,
    /// The texts a message may not write as control tokens.
    controls: ControlTexts,
    eog: Vec<u32>,
}

impl Tokenizer {
    /// Build the lookup structures for `vocab` (validates the special ids
    /// and, for Gemma 4, that every merge names two tokens).
    pub fn new(vocab: Vocab) -> Result<Self, TokenizerError> {
        Self::build(vocab, None)
    }

    /// `new`, reporting bad merges against `merges_key` when they come from
    /// a GGUF key.
    fn build(mut vocab: Vocab, merges_key: Option<&str>) -> Result<Self, TokenizerError> {
        if vocab.model == TokenizerModel::Gemma4 {
            // Converted Gemma 4 files may say add_bos_token = false, but the
            // model needs BOS; llama.cpp overrides the flag the same way.
            vocab.add_bos = true;
        }
        check_special_ids(&vocab)?;
        let n = vocab.len();
        let index = TokenIndex::build(&vocab);
        let merges = match vocab.model {
            TokenizerModel::Llama => None,
            TokenizerModel::Gemma4 => Some(bpe::MergeTable::build(&vocab, &index).map_err(
                |reason| match merges_key {
                    Some(key) => TokenizerError::InvalidKey {
                        key: key.to_string(),
                        reason,
                    },
                    None => TokenizerError::InvalidVocab(reason),
                },
            )?),
        };

        let (specials, special_lens) = specials_by_length(&vocab, n);

        let controls = ControlTexts::new(&vocab);
        let mut tok = Self {
            vocab,
            index,
            merges,
            byte_ids: [None; 256],
            specials,
            special_lens,
            controls,
            eog: Vec::new(),
        };
        tok.byte_ids = tok.byte_fallbacks();
        tok.eog = tok.end_of_generation();
        Ok(tok)
    }

    /// Each byte's token for byte fallback: `<0xNN>`, else (SentencePiece,
    /// as llama.cpp) the single-character token, else unknown.
    fn byte_fallbacks(&self) -> [Option<u32>; 256] {
        let mut ids = [None; 256];
        for b in 0..=255u8 {
            let name = format!("<0x{b:02X}>");
            let byte_token = self.lookup(name.as_bytes());
            ids[b as usize] = match self.vocab.model {
                // llama.cpp's SentencePiece falls back to the single-character
                // token when the vocabulary has no byte token for this value.
                TokenizerModel::Llama => byte_token
                    .or_else(|| self.lookup(&[b]))
                    .or(self.vocab.unk_id),
                TokenizerModel::Gemma4 => byte_token,
            };
        }
        ids
    }

    /// The tokens that end a generation: EOS, EOT and the texts of
    /// [`EOG_TEXTS`] the vocabulary holds, sorted.
    fn end_of_generation(&self) -> Vec<u32> {
        let mut eog: Vec<u32> = [self.vocab.eos_id, self.vocab.eot_id]
            .into_iter()
            .flatten()
            .collect();
        // Gemma 4's vocabulary has `</s>` as ordinary text (llama.cpp takes it
        // back out of the list there too).
        let gemma4 = self.lookup(GEMMA4_MARKER.as_bytes()).is_some();
        for t in EOG_TEXTS {
            if gemma4 && *t == "</s>" {
                continue;
            }
            if let Some(id) = self.lookup(t.as_bytes()) {
                eog.push(id);
            }
        }
        eog.sort_unstable();
        eog.dedup();
        eog
    }

    /// Read the vocabulary from a GGUF file and build the tokenizer.
    pub fn from_gguf(file: &gguf::GgufFile) -> Result<Self, TokenizerError> {
        Self::build(Vocab::from_gguf(file)?, Some("tokenizer.ggml.merges"))
    }

    /// The vocabulary this tokenizer was built from.
    pub fn vocab(&self) -> &Vocab {
        &self.vocab
    }

    pub(crate) fn lookup(&self, text: &[u8]) -> Option<u32> {
        self.index.get(&self.vocab, text)
    }

    pub(crate) fn byte_token(&self, b: u8) -> Option<u32> {
        self.byte_ids[b as usize]
    }

    /// Number of tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.vocab.len()
    }

    /// Beginning-of-sequence id, if the model has one.
    pub fn bos_id(&self) -> Option<u32> {
        self.vocab.bos_id
    }

    /// End-of-sequence id, if the model has one.
    pub fn eos_id(&self) -> Option<u32> {
        self.vocab.eos_id
    }

    /// Whether the model asks for BOS in front of prompts (always for Gemma 4).
    pub fn add_bos(&self) -> bool {
        self.vocab.add_bos
    }

    /// Whether generating `id` ends the generation (EOS, end-of-turn, ...).
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.binary_search(&id).is_ok()
    }

    /// Also end generations at the control token `template` writes right
    /// after an assistant message (its end-of-turn marker), when there is
    /// one; returns it.
    pub fn add_template_eog(&mut self, template: &ChatTemplate) -> Option<u32> {
        const MARK: &str = "\u{1}hearth-end-of-message\u{1}";
        let messages = [ChatMessage::user("Hi"), ChatMessage::assistant(MARK)];
        let text = template.render(&messages, false).ok()?;
        let after = &text[text.find(MARK)? + MARK.len()..];
        let id = *self.encode(after, false, true).first()?;
        let special = matches!(
            self.vocab.token_type(id),
            Some(TokenType::Control | TokenType::UserDefined)
        );
        if !special {
            return None;
        }
        if let Err(at) = self.eog.binary_search(&id) {
            self.eog.insert(at, id);
        }
        Some(id)
    }

    /// All end-of-generation ids, sorted.
    pub fn eog_ids(&self) -> &[u32] {
        &self.eog
    }

    /// The raw vocabulary text of a token (U+2581 for spaces, `<0xNN>` for bytes).
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.vocab.text(id)
    }

    /// The id whose vocabulary text is exactly `text`.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.lookup(text.as_bytes())
    }

    /// The type of a token, `None` for an id outside the vocabulary.
    pub fn token_type(&self, id: u32) -> Option<TokenType> {
        self.vocab.token_type(id)
    }

    /// Encode `text`; with `parse_special` control tokens written in the text
    /// (`<start_of_turn>`) become single ids, otherwise they are plain text.
    /// User-defined tokens are matched whole either way, as in llama.cpp.
    pub fn encode(&self, text: &str, add_bos: bool, parse_special: bool) -> Vec<u32> {
        self.encode_spans(text, add_bos, parse_special, &[])
    }

    /// [`Tokenizer::encode`] with special tokens parsed, except that no
    /// control token is split out where it would touch one of the sorted
    /// byte ranges `literal` (a message's text, see [`PromptText`]).
    fn encode_with_literal(&self, text: &str, add_bos: bool, literal: &[Range<usize>]) -> Vec<u32> {
        self.encode_spans(text, add_bos, true, literal)
    }

    fn encode_spans(
        &self,
        text: &str,
        add_bos: bool,
        parse_special: bool,
        literal: &[Range<usize>],
    ) -> Vec<u32> {
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_bos {
            if let Some(bos) = self.vocab.bos_id {
                out.push(bos);
            }
        }
        let mut prev_special = true;
        let mut escaped = String::new();
        for frag in self.partition(text, parse_special, literal) {
            match frag {
                Fragment::Token(id) => {
                    out.push(id);
                    prev_special = true;
                }
                Fragment::Text(s, e) => {
                    escaped.clear();
                    // Only SentencePiece adds the prefix space; llama.cpp's
                    // BPE never does, whatever the flag says.
                    if self.vocab.add_space_prefix
                        && prev_special
                        && self.vocab.model == TokenizerModel::Llama
                    {
                        escaped.push('\u{2581}');
                    }
                    for ch in text[s..e].chars() {
                        escaped.push(if ch == ' ' { '\u{2581}' } else { ch });
                    }
                    match &self.merges {
                        None => spm::encode_piece(self, &escaped, &mut out),
                        Some(merges) => bpe::encode_text(self, merges, &escaped, &mut out),
                    }
                    prev_special = false;
                }
            }
        }
        out
    }

    /// Split `text` into plain-text ranges and special-token ids exactly as
    /// llama.cpp's `tokenizer_st_partition`: for each special token, longest
    /// first, split every remaining text fragment at its occurrences, except
    /// control tokens that would touch a `literal` range.
    fn partition(
        &self,
        text: &str,
        parse_special: bool,
        literal: &[Range<usize>],
    ) -> Vec<Fragment> {
        let mut frags = Vec::new();
        if text.is_empty() {
            return frags;
        }
        frags.push(Fragment::Text(0, text.len()));
        let found = self.specials_in(text, parse_special);
        if found.is_empty() {
            return frags;
        }
        // Apply in the global longest-first order; only specials present in
        // the original text can match a substring of it, so the result is
        // the same as trying all of them.
        let mut order: Vec<(usize, u32)> = found
            .into_iter()
            .map(|id| {
                let pos = self.specials.iter().position(|&s| s == id).unwrap_or(0);
                (pos, id)
            })
            .collect();
        order.sort_unstable();
        for (_, id) in order {
            let pat = self.vocab.text(id).unwrap_or_default();
            let held = message_text::is_held(&self.vocab, id);
            let literal = if held { literal } else { &[] };
            let mut next = Vec::with_capacity(frags.len() + 2);
            for f in frags {
                match f {
                    Fragment::Text(s, e) => split_at_token(text, s..e, pat, id, literal, &mut next),
                    token => next.push(token),
                }
            }
            frags = next;
        }
        frags
    }

    /// The distinct special ids that occur anywhere in `text`.
    fn specials_in(&self, text: &str, parse_special: bool) -> Vec<u32> {
        let bytes = text.as_bytes();
        let mut found = Vec::new();
        for (p, &b) in bytes.iter().enumerate() {
            for &len in &self.special_lens[b as usize] {
                let Some(piece) = bytes.get(p..p + len) else {
                    continue;
                };
                let Some(id) = self.lookup(piece) else {
                    continue;
                };
                let ty = self.vocab.token_type(id).unwrap_or(TokenType::Undefined);
                // Without parse_special only user-defined tokens are split
                // out (llama.cpp skips control and unknown ones).
                let wanted = if parse_special {
                    ty.is_special()
                } else {
                    ty == TokenType::UserDefined
                };
                if wanted && !found.contains(&id) {
                    found.push(id);
                }
            }
        }
        found
    }

    /// Render `messages` with `template` and encode the result: the
    /// template's control tokens parsed, the messages' text as plain text
    /// (see [`Tokenizer::render_chat`]), BOS added only when the model
    /// wants it and the template did not write it.
    pub fn encode_chat(
        &self,
        template: &ChatTemplate,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<Vec<u32>, TokenizerError> {
        let options = ChatOptions {
            add_generation_prompt,
            ..ChatOptions::default()
        };
        self.encode_chat_with(template, messages, &options)
    }

    /// [`Tokenizer::encode_chat`] rendered as `options` say (thinking,
    /// tools).
    pub fn encode_chat_with(
        &self,
        template: &ChatTemplate,
        messages: &[ChatMessage],
        options: &ChatOptions<'_>,
    ) -> Result<Vec<u32>, TokenizerError> {
        let prompt = self.render_chat(template, messages, options)?;
        Ok(self.encode_prompt(&prompt))
    }

    /// The chat template from the GGUF metadata, or the built-in Gemma format
    /// when there is none or it does not compile.
    pub fn chat_template(&self) -> ChatTemplate {
        let text = |id: Option<u32>| {
            id.and_then(|id| self.vocab.text(id))
                .unwrap_or_default()
                .to_string()
        };
        if self.vocab.chat_template.is_none() && self.vocab.model == TokenizerModel::Gemma4 {
            return ChatTemplate::gemma4(text(self.vocab.bos_id));
        }
        ChatTemplate::new(
            self.vocab.chat_template.as_deref(),
            text(self.vocab.bos_id),
            text(self.vocab.eos_id),
        )
    }
}

/// Push the fragments of `text[range]` split at each occurrence of token
/// `id` (text `pat`) that touches none of the sorted ranges `literal`.
fn split_at_token(
    text: &str,
    range: Range<usize>,
    pat: &str,
    id: u32,
    literal: &[Range<usize>],
    out: &mut Vec<Fragment>,
) {
    let (mut cur, mut from, e) = (range.start, range.start, range.end);
    let step = pat.chars().next().map_or(1, char::len_utf8);
    while let Some(i) = text[from..e].find(pat) {
        let m = from + i;
        let end = m + pat.len();
        let at = literal.partition_point(|l| l.end <= m);
        if literal.get(at).is_some_and(|l| l.start < end) {
            // Touches a message's text: an occurrence may still start
            // inside this one.
            from = m + step;
            continue;
        }
        if m > cur {
            out.push(Fragment::Text(cur, m));
        }
        out.push(Fragment::Token(id));
        cur = end;
        from = end;
    }
    if cur < e {
        out.push(Fragment::Text(cur, e));
    }
}

/// A piece of input after special-token partitioning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fragment {
    /// A byte range of plain text.
    Text(usize, usize),
    /// A special token matched whole.
    Token(u32),
}

/// Every special id the vocabulary names lies within it.
fn check_special_ids(vocab: &Vocab) -> Result<(), TokenizerError> {
    let n = vocab.len();
    for (name, id) in [
        ("bos_id", vocab.bos_id),
        ("eos_id", vocab.eos_id),
        ("unk_id", vocab.unk_id),
        ("pad_id", vocab.pad_id),
        ("eot_id", vocab.eot_id),
    ] {
        if let Some(id) = id {
            if id as usize >= n {
                return Err(TokenizerError::InvalidVocab(format!(
                    "{name} {id} is outside the vocabulary of {n} tokens"
                )));
            }
        }
    }
    Ok(())
}

/// The special tokens with text, longest first, and per first byte the
/// lengths they come in (longest first), for the special-token scan.
fn specials_by_length(vocab: &Vocab, n: usize) -> (Vec<u32>, Vec<Vec<usize>>) {
    let mut specials: Vec<u32> = (0..n as u32)
        .filter(|&id| {
            vocab.token_type(id).is_some_and(TokenType::is_special)
                && !vocab.text(id).unwrap_or_default().is_empty()
        })
        .collect();
    // Stable sort: equal lengths keep id order, a deterministic choice
    // where llama.cpp's std::sort leaves it unspecified.
    specials.sort_by_key(|&id| std::cmp::Reverse(vocab.text(id).map_or(0, str::len)));
    let mut special_lens = vec![Vec::new(); 256];
    for &id in &specials {
        let t = vocab.text(id).unwrap_or_default().as_bytes();
        let lens: &mut Vec<usize> = &mut special_lens[t[0] as usize];
        if lens.last() != Some(&t.len()) {
            lens.push(t.len());
        }
    }
    (specials, special_lens)
}

#[cfg(test)]
mod tests;
