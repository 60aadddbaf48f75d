//! Ids back to bytes and text, including incremental (streaming) decode.

use std::borrow::Cow;

use crate::{TokenType, Tokenizer};

impl Tokenizer {
    /// The bytes a token stands for: U+2581 becomes a space, `<0xNN>` that
    /// byte; control and unknown tokens give their text only when
    /// `render_special`; unused, undefined and invalid ids give nothing.
    pub fn token_bytes(&self, id: u32, render_special: bool) -> Cow<'_, [u8]> {
        let (Some(text), Some(ty)) = (self.vocab.text(id), self.vocab.token_type(id)) else {
            return Cow::Borrowed(&[]);
        };
        match ty {
            TokenType::Normal => {
                if text.contains('\u{2581}') {
                    Cow::Owned(text.replace('\u{2581}', " ").into_bytes())
                } else {
                    Cow::Borrowed(text.as_bytes())
                }
            }
            TokenType::UserDefined => Cow::Borrowed(text.as_bytes()),
            TokenType::Control | TokenType::Unknown if render_special => {
                Cow::Borrowed(text.as_bytes())
            }
            TokenType::Byte => match parse_byte_token(text) {
                Some(b) => Cow::Owned(vec![b]),
                None => Cow::Borrowed(&[]),
            },
            _ => Cow::Borrowed(&[]),
        }
    }

    /// Decode ids to text; invalid UTF-8 (e.g. a character cut off at the
    /// end) is replaced by U+FFFD and invalid ids are skipped.
    pub fn decode(&self, ids: &[u32], render_special: bool) -> String {
        let mut bytes = Vec::with_capacity(ids.len() * 4);
        for (i, &id) in ids.iter().enumerate() {
            let piece = self.token_bytes(id, render_special);
            // Undo the space the encoder put in front (llama.cpp strips one
            // leading space of the first piece when add_space_prefix is set).
            let piece: &[u8] = if i == 0 && self.vocab.add_space_prefix {
                piece.strip_prefix(b" ").unwrap_or(&piece)
            } else {
                &piece
            };
            bytes.extend_from_slice(piece);
        }
        match String::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        }
    }
}

/// `<0xNN>` -> NN.
fn parse_byte_token(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

/// Turns generated ids into text one id at a time, never emitting half a
/// UTF-8 character: byte-fallback tokens can split one character over
/// several ids, so incomplete sequences wait for the next id.
#[derive(Debug, Clone, Default)]
pub struct StreamDecoder {
    pending: Vec<u8>,
    render_special: bool,
}

impl StreamDecoder {
    /// A decoder; `render_special` as in [`Tokenizer::decode`].
    pub fn new(render_special: bool) -> Self {
        Self {
            pending: Vec::with_capacity(8),
            render_special,
        }
    }

    /// Feed one id; returns the text that is now complete (possibly empty).
    pub fn push(&mut self, tokenizer: &Tokenizer, id: u32) -> String {
        let mut out = String::new();
        self.push_into(tokenizer, id, &mut out);
        out
    }

    /// Feed one id and append the completed text to `out`, allocating nothing
    /// once `out` has capacity (for the decode loop).
    pub fn push_into(&mut self, tokenizer: &Tokenizer, id: u32, out: &mut String) {
        let piece = tokenizer.token_bytes(id, self.render_special);
        if self.pending.is_empty() {
            // Fast path: the whole piece is valid text.
            if let Ok(s) = std::str::from_utf8(&piece) {
                out.push_str(s);
                return;
            }
        }
        self.pending.extend_from_slice(&piece);
        self.drain(out, false);
    }

    /// Emit whatever is still buffered (an incomplete character becomes U+FFFD).
    pub fn finish(&mut self) -> String {
        let mut out = String::new();
        self.drain(&mut out, true);
        out
    }

    /// Whether bytes of an incomplete character are waiting.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Forget buffered bytes (start of a new generation).
    pub fn reset(&mut self) {
        self.pending.clear();
    }

    fn drain(&mut self, out: &mut String, flush: bool) {
        let mut start = 0;
        loop {
            match std::str::from_utf8(&self.pending[start..]) {
                Ok(s) => {
                    out.push_str(s);
                    start = self.pending.len();
                    break;
                }
                Err(e) => {
                    let valid = start + e.valid_up_to();
                    // The prefix up to valid_up_to was just validated.
                    out.push_str(std::str::from_utf8(&self.pending[start..valid]).unwrap_or(""));
                    match e.error_len() {
                        // Bytes that can never become valid: replace them now.
                        Some(n) => {
                            out.push('\u{FFFD}');
                            start = valid + n;
                        }
                        // An incomplete character at the end: wait for more,
                        // unless the stream is over.
                        None => {
                            if flush {
                                out.push('\u{FFFD}');
                                start = self.pending.len();
                            } else {
                                start = valid;
                            }
                            break;
                        }
                    }
                }
            }
        }
        self.pending.drain(..start);
    }
}
