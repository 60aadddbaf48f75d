//! What answers a chat: the loaded model, shared by every chat through the
//! batched engine, with the guardrails when the chat has them on. Behind a
//! trait so the bot's behaviour is testable with scripted replies.

use engine::{ChatMessage, ChatModel, Engine, ModelCall, PromptStore, SharedChat};
use guard::{GuardConfig, GuardSet};
use std::sync::Arc;

/// A reply and what it cost.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BrainReply {
    /// The text to send.
    pub text: String,
    /// Prompt tokens of the answer.
    pub prompt_tokens: usize,
    /// Tokens generated for the answer.
    pub completion_tokens: usize,
    /// Milliseconds it took.
    pub ms: u64,
    /// Whether the guardrails changed the model's answer.
    pub guard_changed: bool,
}

/// Something that answers conversations. Called from blocking threads,
/// several at once (one per chat being answered).
pub trait Brain: Send + Sync + 'static {
    /// The next assistant turn of `messages` (the last is the user's);
    /// `guard`: run the guardrails over it.
    fn reply(&self, messages: &[ChatMessage], guard: bool) -> Result<BrainReply, String>;
    /// Whether a prompt of `messages` leaves room for a whole reply.
    fn fits(&self, messages: &[ChatMessage]) -> bool;
    /// The model's name, for `/start` and `/stats`.
    fn name(&self) -> String;
    /// Whether the model reads photos (a vision tower is loaded).
    fn reads_images(&self) -> bool {
        false
    }
    /// The next assistant turn of `messages`, whose last message places
    /// `image` (a photo file's bytes) with an image marker. No guardrails:
    /// they judge text.
    fn reply_image(&self, messages: &[ChatMessage], image: &[u8]) -> Result<BrainReply, String> {
        let _ = (messages, image);
        Err("the loaded model reads text only".into())
    }
    /// [`Brain::fits`] for `messages` that also carry one image.
    fn fits_image(&self, messages: &[ChatMessage]) -> bool {
        self.fits(messages)
    }
    /// Whether the model hears voice notes (an audio tower is loaded).
    fn hears(&self) -> bool {
        false
    }
    /// The next assistant turn of `messages`, whose last message places
    /// `clip` (a voice note's bytes) with an audio marker. No guardrails.
    fn reply_audio(&self, messages: &[ChatMessage], clip: &[u8]) -> Result<BrainReply, String> {
        let _ = (messages, clip);
        Err("the loaded model does not hear".into())
    }
    /// [`Brain::fits`] for `messages` that also carry one clip.
    fn fits_audio(&self, messages: &[ChatMessage]) -> bool {
        self.fits(messages)
    }
}

/// The reply of a call that took no guardrails, started at `start`.
fn unguarded(r: engine::ModelReply, start: std::time::Instant) -> BrainReply {
    BrainReply {
        text: r.text,
        prompt_tokens: r.prompt_tokens,
        completion_tokens: r.completion_tokens,
        ms: start.elapsed().as_millis() as u64,
        guard_changed: false,
    }
}

/// [`Brain`] over a loaded engine.
pub struct EngineBrain {
    engine: Arc<Engine>,
    chat: SharedChat,
    max_tokens: usize,
    guard: GuardConfig,
    name: String,
}

impl EngineBrain {
    /// Answer with `engine`, `slots` chats decoded together (each chat's
    /// prompt state kept in `states`, when given, so its next message is not
    /// prefilled again after another chat took its slot or the bot
    /// restarted), replies of at most `max_tokens`; `guards` are the guards
    /// `/guard on` runs.
    pub fn new(
        engine: Arc<Engine>,
        slots: usize,
        states: Option<Arc<dyn PromptStore>>,
        max_tokens: usize,
        guards: GuardSet,
        name: String,
    ) -> std::io::Result<Self> {
        let chat = SharedChat::start(Arc::clone(&engine), slots, states)?;
        let guard = GuardConfig {
            guards,
            max_tokens,
            ..GuardConfig::default()
        };
        Ok(Self {
            engine,
            chat,
            max_tokens,
            guard,
            name,
        })
    }
}

impl Brain for EngineBrain {
    fn reply(&self, messages: &[ChatMessage], guard: bool) -> Result<BrainReply, String> {
        let start = std::time::Instant::now();
        let mut model = self.chat.clone();
        if guard && !self.guard.guards.is_empty() {
            let g = guard::answer(&mut model, messages, &self.guard).map_err(|e| e.to_string())?;
            return Ok(BrainReply {
                guard_changed: g.text != g.draft,
                text: g.text,
                prompt_tokens: g.answer_prompt_tokens,
                completion_tokens: g.answer_completion_tokens,
                ms: start.elapsed().as_millis() as u64,
            });
        }
        let r = model
            .reply(&ModelCall::new(messages.to_vec(), self.max_tokens))
            .map_err(|e| e.to_string())?;
        Ok(unguarded(r, start))
    }

    fn fits(&self, messages: &[ChatMessage]) -> bool {
        self.fits_with(messages, 0)
    }

    fn name(&self) -> String {
        self.name.clone()
    }

    fn reads_images(&self) -> bool {
        self.engine.has_vision()
    }

    fn reply_image(&self, messages: &[ChatMessage], image: &[u8]) -> Result<BrainReply, String> {
        self.reply_media(messages, |call| {
            call.images = vec![self.engine.encode_image(image)?];
            Ok(())
        })
    }

    fn fits_image(&self, messages: &[ChatMessage]) -> bool {
        // The marker is one token of the text; the image takes its soft
        // tokens (on Gemma 4 at most this many) and the wrapping ones.
        self.fits_with(messages, self.engine.image_tokens().unwrap_or(0) + 4)
    }

    fn hears(&self) -> bool {
        self.engine.has_audio()
    }

    fn reply_audio(&self, messages: &[ChatMessage], clip: &[u8]) -> Result<BrainReply, String> {
        self.reply_media(messages, |call| {
            call.audio = vec![self.engine.encode_audio(clip)?];
            Ok(())
        })
    }

    fn fits_audio(&self, messages: &[ChatMessage]) -> bool {
        self.fits_with(messages, self.engine.audio_tokens().unwrap_or(0) + 6)
    }
}

impl EngineBrain {
    /// An unguarded reply to `messages` whose call `attach` gives its
    /// encoded media (encoding time counts in the reply's).
    fn reply_media(
        &self,
        messages: &[ChatMessage],
        attach: impl FnOnce(&mut ModelCall) -> Result<(), engine::EngineError>,
    ) -> Result<BrainReply, String> {
        let start = std::time::Instant::now();
        let mut call = ModelCall::new(messages.to_vec(), self.max_tokens);
        attach(&mut call).map_err(|e| e.to_string())?;
        let r = self.chat.clone().reply(&call).map_err(|e| e.to_string())?;
        Ok(unguarded(r, start))
    }

    /// Whether `messages` plus `extra` tokens leave room for a whole reply.
    fn fits_with(&self, messages: &[ChatMessage], extra: usize) -> bool {
        self.engine
            .prompt(&engine::PromptRequest::chat(messages))
            .is_ok_and(|p| p.ids.len() + extra + self.max_tokens <= self.engine.n_ctx())
    }
}
