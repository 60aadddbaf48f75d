//! A scripted model: a [`ChatModel`] that replays replies it was given, so
//! every guard and the whole pipeline are testable without weights, and a
//! test can see exactly which calls the pipeline made.

use engine::{ChatModel, EngineError, FinishReason, ModelCall, ModelReply};
use std::collections::VecDeque;

/// What a scripted reply is chosen by.
enum Script {
    /// Replies in order.
    Queue(VecDeque<String>),
    /// A function of the call.
    Func(Box<dyn FnMut(&ModelCall) -> String + Send>),
}

/// A fake model that replays given outputs and records every call.
pub struct ScriptedModel {
    script: Script,
    /// Every call made, in order.
    pub calls: Vec<ModelCall>,
}

impl std::fmt::Debug for ScriptedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedModel")
            .field("calls", &self.calls.len())
            .finish()
    }
}

impl ScriptedModel {
    /// Replies `replies` in order; one call past the end is an error.
    pub fn new<S: Into<String>>(replies: impl IntoIterator<Item = S>) -> Self {
        Self {
            script: Script::Queue(replies.into_iter().map(Into::into).collect()),
            calls: Vec::new(),
        }
    }

    /// Replies whatever `f` says to each call.
    pub fn with(f: impl FnMut(&ModelCall) -> String + Send + 'static) -> Self {
        Self {
            script: Script::Func(Box::new(f)),
            calls: Vec::new(),
        }
    }
}

/// Rough tokens of a text (a word is about a token and a third) so traces
/// from scripted runs have plausible costs.
fn approx_tokens(text: &str) -> usize {
    text.split_whitespace().count() * 4 / 3
}

impl ChatModel for ScriptedModel {
    fn reply(&mut self, call: &ModelCall) -> Result<ModelReply, EngineError> {
        self.calls.push(call.clone());
        let text = match &mut self.script {
            Script::Queue(q) => q.pop_front().ok_or_else(|| {
                EngineError::InvalidRequest(format!(
                    "the scripted model has no reply left for call {}",
                    self.calls.len()
                ))
            })?,
            Script::Func(f) => f(call),
        };
        let prompt: usize = call
            .messages
            .iter()
            .map(|m| approx_tokens(&m.content))
            .sum();
        Ok(ModelReply {
            completion_tokens: approx_tokens(&text),
            text,
            prompt_tokens: prompt,
            finish: FinishReason::Stop,
            prompt_ms: 0,
            gen_ms: 0,
        })
    }
}
