//! The one way tools above the engine (the guard pipeline, the eval harness)
//! ask a model for a reply: [`ChatModel`]. The engine implements it over a
//! session ([`LocalChat`]); the server implements it over its scheduler; a
//! test implements it with replayed replies, so every tool is testable
//! without weights.

use crate::{
    ChatMessage, Engine, EngineError, FinishReason, GenerateOptions, Grammar, Sampler,
    SamplingParams, Session,
};

/// One request for a reply.
#[derive(Debug, Clone)]
pub struct ModelCall {
    /// The conversation so far; the reply is the next assistant turn.
    pub messages: Vec<ChatMessage>,
    /// The grammar the reply must match, if any.
    pub grammar: Option<Grammar>,
    /// Most tokens of the reply.
    pub max_tokens: usize,
    /// Pick the most likely token at every step: tools ask for programs and
    /// yes/no answers, where a sampled slip costs a whole call.
    pub greedy: bool,
}

impl ModelCall {
    /// A call with no grammar, sampled as the model is configured.
    pub fn new(messages: Vec<ChatMessage>, max_tokens: usize) -> Self {
        Self {
            messages,
            grammar: None,
            max_tokens,
            greedy: false,
        }
    }

    /// The same call, held to `grammar` and decoded greedily.
    pub fn constrained(mut self, grammar: Grammar) -> Self {
        self.grammar = Some(grammar);
        self.greedy = true;
        self
    }
}

/// A reply and what it cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelReply {
    /// The reply's text (thought, if any, left out).
    pub text: String,
    /// Prompt tokens of the call.
    pub prompt_tokens: usize,
    /// Tokens generated.
    pub completion_tokens: usize,
    /// Why the reply ended.
    pub finish: FinishReason,
}

/// Something that answers a conversation with the next assistant turn.
pub trait ChatModel {
    /// Generate the reply to `call`.
    fn reply(&mut self, call: &ModelCall) -> Result<ModelReply, EngineError>;
}

/// [`ChatModel`] over one session of a loaded engine (the CLI's model).
pub struct LocalChat<'e> {
    engine: &'e Engine,
    session: Session,
    sampler: Sampler,
    greedy: Sampler,
}

impl<'e> LocalChat<'e> {
    /// A chat over a fresh session of `engine`, sampling with its options.
    pub fn new(engine: &'e Engine) -> Self {
        let params = engine.options().sampling.clone();
        let greedy = SamplingParams {
            temperature: 0.0,
            ..params.clone()
        };
        Self {
            engine,
            session: engine.session(),
            sampler: Sampler::new(params),
            greedy: Sampler::new(greedy),
        }
    }
}

impl ChatModel for LocalChat<'_> {
    fn reply(&mut self, call: &ModelCall) -> Result<ModelReply, EngineError> {
        let prompt = self.engine.encode_chat(&call.messages)?;
        let constraint = match &call.grammar {
            Some(g) => Some(self.engine.constraint(g)?),
            None => None,
        };
        let opts = GenerateOptions {
            max_tokens: call.max_tokens,
            stop: Vec::new(),
            stop_on_eog: true,
            render_special: false,
        };
        let sampler = if call.greedy {
            &mut self.greedy
        } else {
            &mut self.sampler
        };
        let g =
            self.session
                .generate_constrained(&prompt, sampler, &opts, constraint, None, |_| true)?;
        Ok(ModelReply {
            text: g.text,
            prompt_tokens: prompt.len(),
            completion_tokens: g.ids.len(),
            finish: g.finish,
        })
    }
}
