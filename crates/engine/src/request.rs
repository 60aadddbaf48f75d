//! [`GenerationRequest`]: everything one generation asks for, and
//! [`Session::begin`], the one way a generation starts (the CLI, the
//! server's scheduler, the shared chat behind the bot and the eval runner,
//! and the benchmarks all go through it).

use crate::{
    Constraint, Decoding, EngineError, GenerateOptions, PromptMedia, Sampler, Session, Thinking,
};

/// One generation's request: the prompt (chat template applied, see
/// [`crate::Engine::encode_chat`]) with the media it places, the limits and
/// stop rules, and what the output is held to. The sampler is the
/// caller's, so that a conversation keeps its random stream from turn to
/// turn.
#[derive(Debug)]
pub struct GenerationRequest<'a> {
    /// Prompt ids.
    pub prompt: &'a [u32],
    /// The images and audio among the prompt's ids (see
    /// [`crate::Engine::image_prompt`]).
    pub media: &'a [PromptMedia],
    /// Limits, stop rules and speculation.
    pub options: &'a GenerateOptions,
    /// The grammar the answer must match, compiled: tokens that keep the
    /// output a prefix of a match are sampled, an end-of-generation token
    /// only where the match may end, and the generation stops once the
    /// grammar allows nothing more.
    pub constraint: Option<Constraint>,
    /// Keep the model's thought apart from its answer (the prompt must have
    /// thinking on): tokens inside the thought channel go to
    /// [`crate::Step::thought`], never to the text nor to the constraint,
    /// and the budget closes the channel when spent.
    pub thinking: Option<Thinking>,
    /// Record each sampled token's log-probability with this many most
    /// likely alternatives (see [`Decoding::take_logprobs`]).
    pub logprobs: Option<usize>,
}

impl<'a> GenerationRequest<'a> {
    /// A plain request: `prompt` under `options`, nothing else.
    pub fn new(prompt: &'a [u32], options: &'a GenerateOptions) -> Self {
        Self {
            prompt,
            media: &[],
            options,
            constraint: None,
            thinking: None,
            logprobs: None,
        }
    }
}

impl Session {
    /// Checks `request` and rewinds the cache to the prefix it shares with
    /// the prompt, evaluating nothing yet: [`Session::step`] (or
    /// [`Session::prefill`], a chunk at a time, for a scheduler that
    /// interleaves a long prompt with other sequences' decoding) goes on
    /// from there, and [`Session::run`] to the end.
    pub fn begin(
        &mut self,
        request: GenerationRequest<'_>,
        sampler: &Sampler,
    ) -> Result<Decoding, EngineError> {
        let GenerationRequest {
            prompt,
            media,
            options: opts,
            constraint,
            thinking,
            logprobs,
        } = request;
        self.check(prompt, sampler, opts)?;
        let reused = self.reuse_prefix(prompt, media);
        let rest = prompt[reused..].to_vec();
        Ok(Decoding::new(crate::decoding::Start {
            opts,
            rest,
            reused,
            media,
            constraint,
            thinking,
            logprobs,
        }))
    }

    /// The request's errors before anything is evaluated: an empty prompt,
    /// one that fills the context, bad sampling or speculation settings.
    fn check(
        &self,
        prompt: &[u32],
        sampler: &Sampler,
        opts: &GenerateOptions,
    ) -> Result<(), EngineError> {
        if prompt.is_empty() {
            return Err(EngineError::InvalidRequest("the prompt is empty".into()));
        }
        if prompt.len() >= self.n_ctx() {
            return Err(EngineError::PromptTooLong {
                prompt: prompt.len(),
                n_ctx: self.n_ctx(),
            });
        }
        sampler
            .params()
            .validate()
            .map_err(EngineError::InvalidRequest)?;
        if let Some(s) = &opts.speculation {
            s.validate().map_err(EngineError::InvalidRequest)?;
        }
        Ok(())
    }
}
