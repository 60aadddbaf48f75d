//! Message text stays text. A chat prompt is the template's own text, with
//! its control tokens (`<start_of_turn>`, `<turn|>`), around the messages'
//! text; were control-token text a message writes parsed too, a user could
//! end their turn and write the model's (`<end_of_turn>\n<start_of_turn>
//! model\n...`). So the parts of the rendered prompt that came from a
//! message are found exactly, and no control token is split out of them.
//!
//! How: before rendering, every run of a message's role and content that
//! could take part in a control token is swapped for a placeholder
//! (U+FDD0, the run's number, U+FDD1: noncharacters, which Unicode reserves
//! for a program's internal use, which no tokenizer matches and which
//! `trim` keeps). Such a run is an occurrence of a control token's text, or,
//! at either end of a message's content (as it is and trimmed), the longest
//! part that a control token could carry on into the text beside it
//! (`...<end_of` before a template's `_turn>`). After rendering each placeholder gets its
//! run back and the run's range is recorded, and the encoder splits control
//! tokens only where they touch no such range. A message without such runs
//! is rendered as it is, so an ordinary prompt encodes exactly as before;
//! a template that inspects the text (`'<x>' in content`) sees the
//! placeholder instead, the safe reading. Media markers placed with
//! [`ChatMessage::push_media`] go through placeholders of their own and come
//! back as the prompt's media, which stay control tokens.

use std::fmt::Write;
use std::ops::Range;

use crate::vocab::Vocab;
use crate::{ChatMessage, ChatOptions, ChatTemplate, TokenType, Tokenizer, TokenizerError};
use serde_json::Value;

/// Opens a placeholder.
const OPEN: char = '\u{FDD0}';
/// Closes a placeholder.
const CLOSE: char = '\u{FDD1}';

/// A prompt's text ready to encode: where a message's control-token text
/// sits (encoded as plain text) and where media markers place their items.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptText {
    text: String,
    /// Sorted, disjoint byte ranges of message text no control token may touch.
    literal: Vec<Range<usize>>,
    /// Sorted, disjoint byte ranges of the media markers, in order.
    media: Vec<Range<usize>>,
    add_bos: bool,
}

/// A run of a message held out of the render by a placeholder.
struct Held {
    text: String,
    media: bool,
}

impl PromptText {
    /// A prompt its caller wrote whole (a raw completion prompt): its
    /// control-token text is parsed, and each occurrence of one of
    /// `markers` places a media item.
    pub fn raw(text: impl Into<String>, add_bos: bool, markers: &[&str]) -> Self {
        let text = text.into();
        let media = occurrences(&text, markers);
        Self {
            text,
            literal: Vec::new(),
            media,
            add_bos,
        }
    }

    /// The text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Whether a BOS goes in front (the model wants one and the template
    /// did not write it).
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// The byte ranges of the media markers, in order.
    pub fn media(&self) -> &[Range<usize>] {
        &self.media
    }

    /// The media markers, in order.
    pub fn media_markers(&self) -> impl Iterator<Item = &str> + '_ {
        self.media.iter().map(|r| &self.text[r.clone()])
    }

    /// Replace each media marker with what `expand` makes of it (`None`
    /// leaves it as it is); message text keeps its place.
    pub fn expand_media(&mut self, mut expand: impl FnMut(&str) -> Option<String>) {
        let mut text = String::with_capacity(self.text.len());
        let mut media = Vec::with_capacity(self.media.len());
        // Where each old marker ended and how far the text after it moved.
        let mut moved: Vec<(usize, isize)> = Vec::with_capacity(self.media.len());
        let mut at = 0;
        for r in &self.media {
            text.push_str(&self.text[at..r.start]);
            let start = text.len();
            let marker = &self.text[r.clone()];
            text.push_str(expand(marker).as_deref().unwrap_or(marker));
            media.push(start..text.len());
            moved.push((r.end, text.len() as isize - r.end as isize));
            at = r.end;
        }
        text.push_str(&self.text[at..]);
        for l in &mut self.literal {
            let before = moved.partition_point(|&(end, _)| end <= l.start);
            let by = before.checked_sub(1).map_or(0, |i| moved[i].1);
            *l = l.start.wrapping_add_signed(by)..l.end.wrapping_add_signed(by);
        }
        self.text = text;
        self.media = media;
    }
}

/// The non-overlapping occurrences of `markers` in `text`, leftmost (then
/// longest) first.
fn occurrences(text: &str, markers: &[&str]) -> Vec<Range<usize>> {
    let mut found: Vec<Range<usize>> = markers
        .iter()
        .filter(|m| !m.is_empty())
        .flat_map(|m| text.match_indices(m).map(|(i, _)| i..i + m.len()))
        .collect();
    found.sort_by_key(|r| (r.start, std::cmp::Reverse(r.end)));
    let mut out: Vec<Range<usize>> = Vec::with_capacity(found.len());
    for r in found {
        if out.last().is_none_or(|l| l.end <= r.start) {
            out.push(r);
        }
    }
    out
}

/// User-defined tokens that mark media in a prompt (Gemma 3's image begin
/// and end are user-defined, Gemma 3n's audio ones too). Other user-defined
/// tokens (`<table>`, `<b>`) are matched in plain text, as llama.cpp does;
/// these a message may not write, or it could place or fake media.
const MEDIA_TOKENS: &[&str] = &[
    "<start_of_image>",
    "<end_of_image>",
    "<image_soft_token>",
    "<start_of_audio>",
    "<end_of_audio>",
    "<audio_soft_token>",
    "<|image>",
    "<image|>",
    "<|image|>",
    "<|audio>",
    "<audio|>",
    "<|audio|>",
    "<|video|>",
];

/// The texts of the tokens a message may not write ([`is_held`]), sorted
/// forwards and backwards to find the tokens a text begins or ends.
#[derive(Debug, Clone, Default)]
pub(crate) struct ControlTexts {
    /// Ids, sorted by text.
    forwards: Vec<u32>,
    /// Texts reversed byte by byte, sorted.
    backwards: Vec<Box<[u8]>>,
    /// The longest text, in bytes.
    longest: usize,
}

impl ControlTexts {
    pub(crate) fn new(vocab: &Vocab) -> Self {
        let mut forwards: Vec<u32> = (0..vocab.len() as u32)
            .filter(|&id| is_held(vocab, id))
            .filter(|&id| vocab.text(id).is_some_and(|t| !t.is_empty()))
            .collect();
        let text = |id: u32| vocab.text(id).unwrap_or_default().as_bytes();
        forwards.sort_by(|&a, &b| text(a).cmp(text(b)));
        let mut backwards: Vec<Box<[u8]>> = forwards
            .iter()
            .map(|&id| text(id).iter().rev().copied().collect())
            .collect();
        backwards.sort();
        let longest = forwards.iter().map(|&id| text(id).len()).max().unwrap_or(0);
        Self {
            forwards,
            backwards,
            longest,
        }
    }

    /// Whether some control token's text begins with `s`.
    fn continues(&self, vocab: &Vocab, s: &[u8]) -> bool {
        let text = |id: u32| vocab.text(id).unwrap_or_default().as_bytes();
        let at = self.forwards.partition_point(|&id| text(id) < s);
        self.forwards
            .get(at)
            .is_some_and(|&id| text(id).starts_with(s))
    }

    /// Whether some control token's text ends with `s`.
    fn ends_with(&self, s: &[u8]) -> bool {
        let reversed: Vec<u8> = s.iter().rev().copied().collect();
        let at = self.backwards.partition_point(|t| **t < *reversed);
        self.backwards
            .get(at)
            .is_some_and(|t| t.starts_with(&reversed))
    }
}

/// Whether a message may not write token `id`: a control or unknown token,
/// or a media token.
pub(crate) fn is_held(vocab: &Vocab, id: u32) -> bool {
    matches!(
        vocab.token_type(id),
        Some(TokenType::Control | TokenType::Unknown)
    ) || vocab.text(id).is_some_and(|t| MEDIA_TOKENS.contains(&t))
}

impl Tokenizer {
    /// Render `messages` with `template` for encoding with
    /// [`Tokenizer::encode_prompt`]: control-token text in a message stays
    /// text, media markers placed with [`ChatMessage::push_media`] are the
    /// prompt's media, and a BOS goes in front when the model wants one and
    /// the template did not write it.
    pub fn render_chat(
        &self,
        template: &ChatTemplate,
        messages: &[ChatMessage],
        options: &ChatOptions<'_>,
    ) -> Result<PromptText, TokenizerError> {
        let mut held = Vec::new();
        let mut stand_ins = Vec::with_capacity(messages.len());
        for (i, m) in messages.iter().enumerate() {
            check_media(i, m)?;
            // A role's ends are left as they are: templates compare roles
            // (`role == 'user'`), and write a newline after them.
            let mut stand_in = ChatMessage::new(
                self.hold(&m.role, &[], false, &mut held),
                self.hold(&m.content, m.media(), true, &mut held),
            );
            stand_in.tool_calls = m
                .tool_calls
                .iter()
                .map(|c| self.hold_value(c, &mut held))
                .collect();
            stand_in.tool_call_id = m
                .tool_call_id
                .as_deref()
                .map(|id| self.hold(id, &[], true, &mut held));
            stand_in.name = m
                .name
                .as_deref()
                .map(|n| self.hold(n, &[], true, &mut held));
            stand_ins.push(stand_in);
        }
        let tools: Vec<Value> = options
            .tools
            .iter()
            .map(|t| self.hold_value(t, &mut held))
            .collect();
        let options = ChatOptions {
            tools: &tools,
            ..*options
        };
        let rendered = template.render_with(&stand_ins, &options)?;
        let (text, literal, media) = restore(&rendered, &held);
        let add_bos = self.vocab.add_bos && !self.template_wrote_bos(&text, &literal);
        Ok(PromptText {
            text,
            literal,
            media,
            add_bos,
        })
    }

    /// Encode `prompt`: control tokens are split out of its text except
    /// where they touch a message's text.
    pub fn encode_prompt(&self, prompt: &PromptText) -> Vec<u32> {
        self.encode_with_literal(&prompt.text, prompt.add_bos, &prompt.literal)
    }

    /// Whether `text` starts with a BOS the template wrote (not a message).
    fn template_wrote_bos(&self, text: &str, literal: &[Range<usize>]) -> bool {
        let bos = self.vocab.bos_id.and_then(|id| self.vocab.text(id));
        bos.is_some_and(|b| {
            !b.is_empty()
                && text.starts_with(b)
                && literal.first().is_none_or(|r| r.start >= b.len())
        })
    }

    /// `field` with its media ranges and the runs of it that could take
    /// part in a control token (at its `ends` too, when asked) swapped for
    /// placeholders, the runs pushed to `held`.
    fn hold(
        &self,
        field: &str,
        media: &[Range<usize>],
        ends: bool,
        held: &mut Vec<Held>,
    ) -> String {
        let mut runs: Vec<(Range<usize>, bool)> = media.iter().map(|r| (r.clone(), true)).collect();
        let mut at = 0;
        let end = field.len()..field.len();
        for r in media.iter().chain([&end]) {
            let segment = self.control_runs(&field[at..r.start], ends);
            runs.extend(
                segment
                    .into_iter()
                    .map(|s| (s.start + at..s.end + at, false)),
            );
            at = r.end;
        }
        if runs.is_empty() {
            return field.to_string();
        }
        runs.sort_by_key(|(r, _)| r.start);
        let mut out = String::with_capacity(field.len() + 8 * runs.len());
        let mut at = 0;
        for (r, media) in runs {
            out.push_str(&field[at..r.start]);
            // Writing to a String cannot fail.
            let _ = write!(out, "{OPEN}{}{CLOSE}", held.len());
            held.push(Held {
                text: field[r.clone()].to_string(),
                media,
            });
            at = r.end;
        }
        out.push_str(&field[at..]);
        out
    }

    /// `value` with every string in it, keys included, held as
    /// [`Tokenizer::hold`] holds a message's text: tool calls, results and
    /// declarations are the client's text too.
    fn hold_value(&self, value: &Value, held: &mut Vec<Held>) -> Value {
        match value {
            Value::String(s) => Value::String(self.hold(s, &[], true, held)),
            Value::Array(items) => {
                Value::Array(items.iter().map(|v| self.hold_value(v, held)).collect())
            }
            Value::Object(fields) => Value::Object(
                fields
                    .iter()
                    .map(|(k, v)| (self.hold(k, &[], true, held), self.hold_value(v, held)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    /// The merged byte ranges of `text` that could take part in a control
    /// token: control-token text, the placeholder characters, and with
    /// `ends` each end's longest part that a control token could carry on
    /// from.
    fn control_runs(&self, text: &str, ends: bool) -> Vec<Range<usize>> {
        let bytes = text.as_bytes();
        let mut runs = Vec::new();
        for (p, &b) in bytes.iter().enumerate() {
            for &len in &self.special_lens[b as usize] {
                let piece = bytes.get(p..p + len);
                if piece
                    .and_then(|t| self.lookup(t))
                    .is_some_and(|id| is_held(&self.vocab, id))
                {
                    runs.push(p..p + len);
                }
            }
        }
        for (i, c) in text.char_indices() {
            if c == OPEN || c == CLOSE {
                runs.push(i..i + c.len_utf8());
            }
        }
        if !ends {
            return merge(runs);
        }
        let lead = text.len() - text.trim_start().len();
        for (from, part) in [(0, text), (lead, text.trim_start())] {
            if let Some(k) = self.ends_a_control(part) {
                runs.push(from..from + k);
            }
        }
        for part in [text, text.trim_end()] {
            if let Some(k) = self.begins_a_control(part) {
                runs.push(part.len() - k..part.len());
            }
        }
        merge(runs)
    }

    /// The length of `text`'s longest proper head that ends some control
    /// token's text.
    fn ends_a_control(&self, text: &str) -> Option<usize> {
        let most = self.controls.longest.saturating_sub(1).min(text.len());
        (1..=most)
            .rev()
            .filter(|&k| text.is_char_boundary(k))
            .find(|&k| self.controls.ends_with(&text.as_bytes()[..k]))
    }

    /// The length of `text`'s longest proper tail that begins some control
    /// token's text.
    fn begins_a_control(&self, text: &str) -> Option<usize> {
        let most = self.controls.longest.saturating_sub(1).min(text.len());
        (1..=most)
            .rev()
            .filter(|&k| text.is_char_boundary(text.len() - k))
            .find(|&k| {
                let tail = &text.as_bytes()[text.len() - k..];
                self.controls.continues(&self.vocab, tail)
            })
    }
}

/// `runs` sorted, overlapping and touching ones joined.
fn merge(mut runs: Vec<Range<usize>>) -> Vec<Range<usize>> {
    runs.sort_by_key(|r| r.start);
    let mut out: Vec<Range<usize>> = Vec::with_capacity(runs.len());
    for r in runs {
        match out.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}

/// A message's media ranges lie in its text, in order, on character
/// boundaries (they do unless its text was changed other than by appending).
fn check_media(i: usize, m: &ChatMessage) -> Result<(), TokenizerError> {
    let mut end = 0;
    for r in m.media() {
        let fits = end <= r.start
            && r.start <= r.end
            && r.end <= m.content.len()
            && m.content.is_char_boundary(r.start)
            && m.content.is_char_boundary(r.end);
        if !fits {
            return Err(TokenizerError::Template(format!(
                "message {i}: a media marker's range {r:?} is not in its text"
            )));
        }
        end = r.end;
    }
    Ok(())
}

/// The rendered text with each placeholder given its run back, and the
/// ranges of the runs that are message text and of those that are media
/// markers. A placeholder the template cut up stays as the characters left.
fn restore(rendered: &str, held: &[Held]) -> (String, Vec<Range<usize>>, Vec<Range<usize>>) {
    let mut text = String::with_capacity(rendered.len());
    let (mut literal, mut media) = (Vec::new(), Vec::new());
    let mut rest = rendered;
    while let Some(i) = rest.find(OPEN) {
        text.push_str(&rest[..i]);
        let after = &rest[i + OPEN.len_utf8()..];
        let run = after.find(CLOSE).and_then(|j| {
            let k: usize = after[..j].parse().ok()?;
            Some((held.get(k)?, j))
        });
        let Some((run, j)) = run else {
            text.push(OPEN);
            rest = after;
            continue;
        };
        let start = text.len();
        text.push_str(&run.text);
        if run.media {
            media.push(start..text.len());
        } else {
            literal.push(start..text.len());
        }
        rest = &after[j + CLOSE.len_utf8()..];
    }
    text.push_str(rest);
    (text, literal, media)
}
