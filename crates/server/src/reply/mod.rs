//! A reply as the scheduler produces it, in the terms every API shares:
//! text and thought as they come, a tool call once the reply is known to be
//! one, then the end. Each API (OpenAI, Ollama, Anthropic) only shapes
//! these pieces into its own wire format.

mod calls;

use crate::api::ToolMode;
use crate::error::ApiError;
use crate::scheduler::{Event, Usage};
use engine::tools::ToolCall;
use engine::{Engine, FinishReason};
use serde_json::Value;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Why a reply ended, as the APIs tell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// The model stopped on its own or a stop string was met.
    Stop,
    /// The token limit, the context or the time limit.
    Length,
    /// The reply is a tool call.
    ToolCalls,
}

/// One thing to tell the client.
#[derive(Debug)]
pub(crate) enum Piece {
    /// The prompt is in and generation begins.
    Started,
    /// Text to show.
    Text(String),
    /// Thought text.
    Thought(String),
    /// Tool call `index` to `name` begins (only when the reply streams its
    /// calls, see [`Reply::streaming_calls`]).
    CallBegin { index: usize, name: String },
    /// More of call `index`'s arguments, as JSON text.
    CallArgs { index: usize, fragment: String },
    /// The reply is these tool calls, whole, once it has ended (after a
    /// `CallBegin` and its `CallArgs` for each when calls stream).
    Calls(Vec<ToolCall>),
    /// What the guardrails did.
    Guard(Value),
    /// Log-probabilities of the tokens sampled since the last ones, sent
    /// before their text.
    Logprobs(Vec<TokenLp>),
    /// The end, with the counts and timings.
    Done(Ended, Usage),
    /// The generation failed after it was admitted.
    Failed(ApiError),
}

/// A token as the APIs show it: its text (lossy where its bytes are not
/// UTF-8 on their own) and its bytes.
#[derive(Debug, Clone)]
pub(crate) struct TokenText {
    pub id: u32,
    pub text: String,
    pub bytes: Vec<u8>,
}

/// One sampled token's log-probability and the likeliest alternatives.
#[derive(Debug, Clone)]
pub(crate) struct TokenLp {
    pub token: TokenText,
    pub logprob: f32,
    pub top: Vec<(TokenText, f32)>,
}

impl TokenLp {
    /// `{"id", "token", "bytes", "logprob", "top_logprobs"}` (`id` as
    /// llama.cpp's server adds it): a token as
    /// OpenAI's chat logprobs and llama.cpp's `completion_probabilities`
    /// show it.
    pub(crate) fn json(&self) -> Value {
        let entry = |t: &TokenText, lp: f32| serde_json::json!({"id": t.id, "token": t.text, "logprob": lp, "bytes": t.bytes});
        let mut e = entry(&self.token, self.logprob);
        e["top_logprobs"] = self.top.iter().map(|(t, lp)| entry(t, *lp)).collect();
        e
    }
}

/// Whether text streams as it comes, or is held because the reply may be
/// (or must be) a tool call.
#[derive(Debug, PartialEq)]
enum Mode {
    Text,
    Undecided,
    Call,
}

/// The pieces of one reply, read from the scheduler's events.
pub(crate) struct Reply {
    rx: mpsc::UnboundedReceiver<Event>,
    /// For the tokens' text, when log-probabilities come.
    engine: Arc<Engine>,
    tools: Option<ToolMode>,
    mode: Mode,
    held: String,
    done: bool,
    /// Reads calls as they are written, when they stream.
    calls: Option<calls::CallReader>,
}

impl Reply {
    /// The reply whose events arrive on `rx`; `tools` when it may be a call.
    pub(crate) fn new(
        rx: mpsc::UnboundedReceiver<Event>,
        tools: Option<ToolMode>,
        engine: Arc<Engine>,
    ) -> Self {
        let mode = match &tools {
            None => Mode::Text,
            Some(t) if t.call_required() => Mode::Call,
            Some(_) => Mode::Undecided,
        };
        Self {
            rx,
            engine,
            tools,
            mode,
            held: String::new(),
            done: false,
            calls: None,
        }
    }

    /// Stream tool calls as they are written: `CallBegin` and `CallArgs`
    /// pieces before the whole `Calls`.
    pub(crate) fn streaming_calls(mut self) -> Self {
        let native = self.tools.as_ref().and_then(ToolMode::native);
        self.calls = Some(calls::CallReader::new(native));
        self
    }

    /// The next pieces (possibly none for this event), or `None` once the
    /// reply has ended.
    pub(crate) async fn next(&mut self) -> Option<Vec<Piece>> {
        if self.done {
            return None;
        }
        let pieces = match self.rx.recv().await {
            Some(Event::Started) => vec![Piece::Started],
            Some(Event::Guard(trace)) => vec![Piece::Guard(trace)],
            Some(Event::Thought(t)) => vec![Piece::Thought(t)],
            Some(Event::Logprobs(lps)) => vec![Piece::Logprobs(
                lps.iter().map(|lp| self.render(lp)).collect(),
            )],
            Some(Event::Text(t)) => self.text(t),
            Some(Event::Done(usage)) => {
                self.done = true;
                self.end(usage)
            }
            Some(Event::Failed(err)) => {
                self.done = true;
                vec![Piece::Failed(err)]
            }
            None => {
                self.done = true;
                vec![Piece::Failed(ApiError::internal(
                    "The generation ended without a result.",
                ))]
            }
        };
        Some(pieces)
    }

    fn token(&self, id: u32) -> TokenText {
        let bytes = self.engine.tokenizer().token_bytes(id, true).to_vec();
        TokenText {
            id,
            text: String::from_utf8_lossy(&bytes).into_owned(),
            bytes,
        }
    }

    fn render(&self, lp: &engine::TokenLogprob) -> TokenLp {
        TokenLp {
            token: self.token(lp.id),
            logprob: lp.logprob,
            top: lp.top.iter().map(|&(id, l)| (self.token(id), l)).collect(),
        }
    }

    /// The text that may be shown now: under `auto` calls are a reply that
    /// begins with `{` or `[` (or, in a model's own syntax, its call
    /// token), so its beginning decides.
    fn text(&mut self, t: String) -> Vec<Piece> {
        match self.mode {
            Mode::Text => return vec![Piece::Text(t)],
            Mode::Call => self.held.push_str(&t),
            Mode::Undecided => {
                self.held.push_str(&t);
                match self.decide() {
                    None => return Vec::new(),
                    Some(Mode::Call) => self.mode = Mode::Call,
                    Some(_) => {
                        self.mode = Mode::Text;
                        return vec![Piece::Text(std::mem::take(&mut self.held))];
                    }
                }
                // The held text so far is the call's beginning.
                return self.read_calls(&self.held.clone());
            }
        }
        self.read_calls(&t)
    }

    /// Whether the held text begins a call or text, when it shows.
    fn decide(&self) -> Option<Mode> {
        let native = self.tools.as_ref().and_then(ToolMode::native);
        match (native, self.held.chars().next()) {
            (_, None) => None,
            (Some(n), _) if self.held.starts_with(n.call_open) => Some(Mode::Call),
            (Some(n), _) if n.call_open.starts_with(self.held.as_str()) => None,
            (Some(_), _) => Some(Mode::Text),
            (None, Some('{' | '[')) => Some(Mode::Call),
            (None, Some(_)) => Some(Mode::Text),
        }
    }

    /// The call pieces in `t`, the next text of a call, when calls stream.
    fn read_calls(&mut self, t: &str) -> Vec<Piece> {
        let Some(reader) = self.calls.as_mut() else {
            return Vec::new();
        };
        let mut parts = Vec::new();
        reader.feed(t, &mut parts);
        parts
            .into_iter()
            .map(|p| match p {
                calls::CallPart::Begin { index, name } => Piece::CallBegin { index, name },
                calls::CallPart::Args { index, fragment } => Piece::CallArgs { index, fragment },
            })
            .collect()
    }

    /// The held text as a call (only when the reply ended on its own: a
    /// cut-off call is not claimed complete) or as text, then the end.
    fn end(&mut self, usage: Usage) -> Vec<Piece> {
        let mut out = Vec::new();
        let mut ended = match usage.finish {
            FinishReason::Stop | FinishReason::Cancelled => Ended::Stop,
            FinishReason::Length => Ended::Length,
        };
        let held = std::mem::take(&mut self.held);
        let call = match (&self.tools, usage.finish) {
            (Some(t), FinishReason::Stop) => t.parse(&held),
            _ => None,
        };
        match call {
            Some(calls) => {
                // When calls stream, any the reader did not see written are
                // told now as if they had been, so the streams need no
                // second path.
                if let Some(reader) = &self.calls {
                    for (index, call) in calls.iter().enumerate().skip(reader.begun()) {
                        let name = call.name.clone();
                        out.push(Piece::CallBegin { index, name });
                        let fragment = call.arguments.to_string();
                        out.push(Piece::CallArgs { index, fragment });
                    }
                }
                out.push(Piece::Calls(calls));
                ended = Ended::ToolCalls;
            }
            // A call cut off after it began to stream was told as a call.
            None if self.calls.as_ref().is_some_and(|c| c.begun() > 0) => {}
            None if !held.is_empty() => out.push(Piece::Text(held)),
            None => {}
        }
        out.push(Piece::Done(ended, usage));
        out
    }
}

/// A whole reply, for the APIs that answer in one body.
#[derive(Debug, Default)]
pub(crate) struct Whole {
    /// The text (empty for a call).
    pub text: String,
    /// The thought, when thinking was on.
    pub thought: String,
    /// The tool calls, when the reply is one.
    pub calls: Vec<ToolCall>,
    /// What the guardrails did.
    pub guard: Option<Value>,
    /// Each token's log-probability, when asked for.
    pub logprobs: Vec<TokenLp>,
}

/// Read the whole reply: its pieces, why it ended and its usage.
pub(crate) async fn collect(mut reply: Reply) -> Result<(Whole, Ended, Usage), ApiError> {
    let mut whole = Whole::default();
    while let Some(pieces) = reply.next().await {
        for piece in pieces {
            match piece {
                Piece::Started | Piece::CallBegin { .. } | Piece::CallArgs { .. } => {}
                Piece::Text(t) => whole.text.push_str(&t),
                Piece::Thought(t) => whole.thought.push_str(&t),
                Piece::Calls(c) => whole.calls.extend(c),
                Piece::Guard(g) => whole.guard = Some(g),
                Piece::Logprobs(l) => whole.logprobs.extend(l),
                Piece::Done(ended, usage) => return Ok((whole, ended, usage)),
                Piece::Failed(e) => return Err(e),
            }
        }
    }
    Err(ApiError::internal("The generation ended without a result."))
}

/// `fut` (a whole answer being read) within `timeout`, else a 504 that says
/// to stream instead.
pub(crate) async fn within<T>(
    timeout: std::time::Duration,
    fut: impl std::future::Future<Output = Result<T, ApiError>>,
) -> Result<T, ApiError> {
    tokio::time::timeout(timeout, fut).await.map_err(|_| {
        ApiError::timed_out(format!(
            "The request did not finish within {} s; ask for fewer tokens or stream.",
            timeout.as_secs()
        ))
    })?
}
