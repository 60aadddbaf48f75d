//! The one way tools above the engine (the guard pipeline, the eval harness)
//! ask a model for a reply: [`ChatModel`]. The engine implements it over a
//! session ([`LocalChat`]); the server implements it over its scheduler; a
//! test implements it with replayed replies, so every tool is testable
//! without weights.

use crate::{
    ChatMessage, Engine, EngineError, FinishReason, GenerateOptions, GenerationRequest, Grammar,
    Sampler, SamplingParams, Session,
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
    /// The temperature of this call, when it differs from the model's
    /// (MT-Bench sets one per category); `greedy` overrides it.
    pub temperature: Option<f32>,
    /// Encoded images the messages place with image markers, in order
    /// (see [`Engine::image_prompt`]); empty for text.
    pub images: Vec<crate::MediaEmbedding>,
    /// Encoded audio clips the messages place with audio markers, in
    /// order (see [`Engine::audio_prompt`]); a call may carry both kinds
    /// (see [`Engine::mixed_prompt`]).
    pub audio: Vec<crate::MediaEmbedding>,
}

impl ModelCall {
    /// A call with no grammar, sampled as the model is configured.
    pub fn new(messages: Vec<ChatMessage>, max_tokens: usize) -> Self {
        Self {
            messages,
            grammar: None,
            max_tokens,
            greedy: false,
            temperature: None,
            images: Vec::new(),
            audio: Vec::new(),
        }
    }

    /// The same call at `temperature` (None: the model's own).
    pub fn at_temperature(mut self, temperature: Option<f32>) -> Self {
        self.temperature = temperature;
        self
    }

    /// The sampling settings of this call, given the model's.
    pub fn sampling(&self, base: &SamplingParams) -> SamplingParams {
        let temperature = if self.greedy {
            0.0
        } else {
            self.temperature.unwrap_or(base.temperature)
        };
        SamplingParams {
            temperature,
            ..base.clone()
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
    /// Milliseconds spent on the prompt.
    pub prompt_ms: u64,
    /// Milliseconds spent generating.
    pub gen_ms: u64,
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
}

impl<'e> LocalChat<'e> {
    /// A chat over a fresh session of `engine`, sampling with its options.
    pub fn new(engine: &'e Engine) -> Self {
        Self {
            engine,
            session: engine.session(),
            sampler: Sampler::new(engine.options().sampling.clone()),
        }
    }
}

impl ChatModel for LocalChat<'_> {
    fn reply(&mut self, call: &ModelCall) -> Result<ModelReply, EngineError> {
        if !call.images.is_empty() || !call.audio.is_empty() {
            return Err(EngineError::InvalidRequest(
                "a local chat takes no images or audio; use SharedChat".into(),
            ));
        }
        let prompt = self
            .engine
            .prompt(&crate::PromptRequest::chat(&call.messages))?
            .ids;
        let constraint = match &call.grammar {
            Some(g) => Some(self.engine.constraint(g)?),
            None => None,
        };
        let opts = call_options(call);
        let base = &self.engine.options().sampling;
        // The conversation's sampler keeps its random stream; a call with
        // other settings gets its own.
        let mut own;
        let sampler = if call.greedy || call.temperature.is_some() {
            own = Sampler::new(call.sampling(base));
            &mut own
        } else {
            &mut self.sampler
        };
        let request = GenerationRequest {
            constraint,
            ..GenerationRequest::new(&prompt, &opts)
        };
        let decoding = self.session.begin(request, sampler)?;
        let g = self.session.run(decoding, sampler, |_| true)?;
        Ok(reply_of(g, prompt.len()))
    }
}

/// Generation options of a call: its token limit, ending at end-of-turn.
pub(crate) fn call_options(call: &ModelCall) -> GenerateOptions {
    GenerateOptions {
        max_tokens: call.max_tokens,
        stop: Vec::new(),
        stop_on_eog: true,
        render_special: false,
        speculation: None,
    }
}

/// The reply a finished generation makes.
pub(crate) fn reply_of(g: crate::Generation, prompt_tokens: usize) -> ModelReply {
    ModelReply {
        completion_tokens: g.ids.len(),
        prompt_tokens,
        finish: g.finish,
        prompt_ms: g.prompt_time.as_millis() as u64,
        gen_ms: g.gen_time.as_millis() as u64,
        text: g.text,
    }
}
