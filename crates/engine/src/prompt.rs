//! The one way a prompt is made: a [`PromptRequest`] (a conversation for
//! the chat template, text written whole, or a gap in code to fill; the
//! images and clips its
//! markers place; the chat's thinking switch and tools) into a [`Prompt`]
//! (the ids, and where each media item's rows go).

use crate::images::raw_prompt;
use crate::{Engine, EngineError, MediaEmbedding, PromptMedia};
use tokenizer::{ChatMessage, ChatOptions};

/// What a prompt is made of.
#[derive(Debug, Clone, Copy)]
pub struct PromptRequest<'a> {
    /// The conversation or the text.
    pub input: PromptInput<'a>,
    /// The images the image markers place, in order.
    pub images: &'a [MediaEmbedding],
    /// The clips the audio markers place, in order.
    pub clips: &'a [MediaEmbedding],
}

/// A prompt's words.
#[derive(Debug, Clone, Copy)]
pub enum PromptInput<'a> {
    /// A conversation, rendered by the model's chat template as `options`
    /// say (its text stays text; see [`tokenizer::Tokenizer::render_chat`]).
    Chat {
        /// The messages; media markers their builders placed.
        messages: &'a [ChatMessage],
        /// The generation prompt, thinking and tools.
        options: ChatOptions<'a>,
    },
    /// Text its caller wrote whole: its control tokens are parsed, its
    /// media markers place media.
    Text {
        /// The text.
        text: &'a str,
        /// Whether a BOS goes in front.
        add_bos: bool,
    },
    /// A gap in code for a code model to fill (no media).
    Infill(crate::Infill<'a>),
}

/// A prompt ready to feed.
#[derive(Debug, Clone)]
pub struct Prompt {
    /// The token ids, media items' placeholder tokens included.
    pub ids: Vec<u32>,
    /// Where each media item's rows go, in order.
    pub media: Vec<PromptMedia>,
}

impl<'a> PromptRequest<'a> {
    /// A conversation the model answers (its turn opened, thinking off, no
    /// tools, no media).
    pub fn chat(messages: &'a [ChatMessage]) -> Self {
        Self::chat_with(messages, ChatOptions::reply(false))
    }

    /// A conversation rendered as `options` say, no media.
    pub fn chat_with(messages: &'a [ChatMessage], options: ChatOptions<'a>) -> Self {
        Self {
            input: PromptInput::Chat { messages, options },
            images: &[],
            clips: &[],
        }
    }

    /// Text written whole, no media.
    pub fn text(text: &'a str, add_bos: bool) -> Self {
        Self {
            input: PromptInput::Text { text, add_bos },
            images: &[],
            clips: &[],
        }
    }

    /// The same request with these images and clips for its markers.
    pub fn with_media(self, images: &'a [MediaEmbedding], clips: &'a [MediaEmbedding]) -> Self {
        Self {
            images,
            clips,
            ..self
        }
    }
}

impl Engine {
    /// The prompt `request` makes. With media, each marker takes its item
    /// (as many markers of a kind as items of it, else an error) and a
    /// model without the tower a kind needs refuses it; without media the
    /// text is encoded as it is.
    pub fn prompt(&self, request: &PromptRequest<'_>) -> Result<Prompt, EngineError> {
        let tok = self.tokenizer();
        let text = match request.input {
            PromptInput::Infill(infill) => {
                if !request.images.is_empty() || !request.clips.is_empty() {
                    return Err(EngineError::InvalidRequest(
                        "a fill-in-the-middle prompt takes no images or clips".into(),
                    ));
                }
                return Ok(Prompt {
                    ids: self.infill_ids(&infill)?,
                    media: Vec::new(),
                });
            }
            PromptInput::Chat { messages, options } => {
                tok.render_chat(self.template(), messages, &options)?
            }
            PromptInput::Text { text, add_bos }
                if request.images.is_empty() && request.clips.is_empty() =>
            {
                return Ok(Prompt {
                    ids: tok.encode(text, add_bos, true),
                    media: Vec::new(),
                })
            }
            PromptInput::Text { text, add_bos } => raw_prompt(text, add_bos),
        };
        if request.images.is_empty() && request.clips.is_empty() {
            return Ok(Prompt {
                ids: tok.encode_prompt(&text),
                media: Vec::new(),
            });
        }
        let (ids, media) = self.place_mixed(text, request.images, request.clips)?;
        Ok(Prompt { ids, media })
    }
}
