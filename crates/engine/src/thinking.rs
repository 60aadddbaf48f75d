//! Thinking: models that reason before they answer (Gemma 4) write the
//! reasoning in a thought channel, `<|channel>thought\n … <channel|>`, then
//! the answer. A generation with thinking on keeps the two apart, so a
//! front end can show the thought dimmed and the server can send it as
//! `reasoning_content`; a budget closes the channel when the thought runs
//! long.

use tokenizer::{StreamDecoder, Tokenizer};

/// The thought channel's markers and a budget for one generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thinking {
    /// The token that opens the thought channel (`<|channel>`).
    pub open: u32,
    /// The token that closes it (`<channel|>`).
    pub close: u32,
    /// Most thought tokens; the channel is closed for the model when they
    /// are spent (`None`: no limit but the generation's own).
    pub budget: Option<usize>,
}

/// The name the model writes after opening the channel.
const CHANNEL_HEADER: &str = "thought\n";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Nothing generated yet: the model may open the channel.
    Before,
    /// The channel is open; its name (`thought\n`) is being written.
    Header,
    /// Thinking.
    Thought,
    /// Answering.
    Answer,
}

/// Where a generation is in its thinking, and the thought so far.
#[derive(Debug, Clone)]
pub(crate) struct ThinkState {
    pub(crate) spec: Thinking,
    phase: Phase,
    tokens: usize,
    header: String,
    decoder: StreamDecoder,
    /// The thought text so far.
    pub(crate) text: String,
}

impl ThinkState {
    pub(crate) fn new(spec: Thinking) -> Self {
        Self {
            spec,
            phase: Phase::Before,
            tokens: 0,
            header: String::new(),
            decoder: StreamDecoder::new(false),
            text: String::new(),
        }
    }

    /// Whether sampling now is part of the thought (a grammar on the
    /// answer does not apply yet).
    pub(crate) fn thinking(&self) -> bool {
        self.phase != Phase::Answer
    }

    /// Whether nothing has been generated yet.
    pub(crate) fn before(&self) -> bool {
        self.phase == Phase::Before
    }

    /// The token to force now: the channel's close once the budget is spent.
    pub(crate) fn forced(&self) -> Option<u32> {
        let open = matches!(self.phase, Phase::Header | Phase::Thought);
        (open && self.spec.budget.is_some_and(|b| self.tokens >= b)).then_some(self.spec.close)
    }

    /// Take `id` into the thought when it belongs there: returns the
    /// thought text it adds (possibly empty), or `None` when it is answer
    /// text.
    pub(crate) fn take(&mut self, id: u32, tokenizer: &Tokenizer) -> Option<String> {
        match self.phase {
            Phase::Before if id == self.spec.open => {
                self.phase = Phase::Header;
                Some(String::new())
            }
            Phase::Before => {
                self.phase = Phase::Answer;
                None
            }
            Phase::Header | Phase::Thought if id == self.spec.close => {
                self.phase = Phase::Answer;
                let mut tail = std::mem::take(&mut self.header);
                tail.push_str(&self.decoder.finish());
                self.text.push_str(&tail);
                Some(tail)
            }
            Phase::Header | Phase::Thought if id == self.spec.open => {
                // Opening it again adds nothing, but spends the budget.
                self.tokens += 1;
                Some(String::new())
            }
            Phase::Header => {
                self.tokens += 1;
                self.header.push_str(&self.decoder.push(tokenizer, id));
                if CHANNEL_HEADER.starts_with(self.header.as_str()) {
                    if self.header == CHANNEL_HEADER {
                        self.header.clear();
                        self.phase = Phase::Thought;
                    }
                    Some(String::new())
                } else {
                    // No channel name after all: all of it is thought.
                    self.phase = Phase::Thought;
                    let piece = std::mem::take(&mut self.header);
                    self.text.push_str(&piece);
                    Some(piece)
                }
            }
            Phase::Thought => {
                self.tokens += 1;
                let piece = self.decoder.push(tokenizer, id);
                self.text.push_str(&piece);
                Some(piece)
            }
            Phase::Answer => None,
        }
    }
}
