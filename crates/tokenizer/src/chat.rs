//! Chat templates: a GGUF's own Jinja template rendered with minijinja, or
//! the built-in Gemma turn format when the file has none.

use std::ops::Range;

use minijinja::ErrorKind;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::TokenizerError;

mod bounds;
mod deep_stack;
mod functions;
mod jinja;
mod namespaces;

/// One message of a conversation (`role` is `system`, `user` or `assistant`).
///
/// Its text is only ever text: control tokens written in it (`<end_of_turn>`)
/// are encoded as the characters they are made of, never as the control
/// ids (see [`crate::Tokenizer::render_chat`]). The one exception is the
/// media markers its builder placed with [`ChatMessage::push_media`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// Who speaks: `system`, `user`, `assistant` (Gemma writes it `model`).
    pub role: String,
    /// What they say. Append to it only: the media ranges index into it.
    pub content: String,
    /// Byte ranges of `content` holding a media marker the builder placed
    /// (not text the speaker wrote), in order.
    #[serde(skip)]
    media: Vec<Range<usize>>,
    /// An assistant turn's tool calls in OpenAI's shape (`{"id", "type":
    /// "function", "function": {"name", "arguments": {...}}}`, the
    /// arguments an object), for templates that write calls themselves.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<Value>,
    /// A tool result's call id (`role` `tool`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// A tool result's function name (`role` `tool`), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl ChatMessage {
    /// A message with any role.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
            media: Vec::new(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
        }
    }

    /// Append `marker`, the marker of a media item that goes here (an
    /// image's `<start_of_image>`): it stays a control token, where the same
    /// text written in `content` would be plain text.
    pub fn push_media(&mut self, marker: &str) {
        let start = self.content.len();
        self.content.push_str(marker);
        self.media.push(start..self.content.len());
    }

    /// Append `other`'s content, its media markers included.
    pub fn append(&mut self, other: &ChatMessage) {
        let shift = self.content.len();
        self.content.push_str(&other.content);
        self.media
            .extend(other.media.iter().map(|r| r.start + shift..r.end + shift));
    }

    /// The byte ranges of `content` that hold media markers placed with
    /// [`ChatMessage::push_media`], in order.
    pub fn media(&self) -> &[Range<usize>] {
        &self.media
    }

    /// A `system` message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::new("system", content)
    }

    /// A `user` message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::new("user", content)
    }

    /// An `assistant` message.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new("assistant", content)
    }
}

/// The default bound on a template's render steps (minijinja's fuel: one
/// per instruction, and one per 64 bytes of text or list the template
/// builds, so the default bounds a render's data to 128 MB). A real chat
/// template takes a few hundred steps per message, so this renders a
/// conversation of thousands of turns and stops a hostile loop within a
/// fraction of a second.
pub const DEFAULT_TEMPLATE_STEPS: u64 = 2_000_000;

/// The most text a render may write, and the most any value it prints
/// (`{{ }}`, `~`, `join`, `string`...) may print as. A prompt is bounded by
/// the context (Gemma's 128k tokens are well under a megabyte of text); a
/// template that writes more is looping. Printing is the one cost fuel does
/// not count, so this also bounds the time a render spends printing.
pub const MAX_RENDER_BYTES: usize = 8 << 20;

/// The stack a Jinja render runs on, per step of its limit. minijinja
/// prints, compares and drops nested values by recursion, and a template
/// can nest a value every few steps (`{% set ns.x = [ns.x] %}` in a loop):
/// the default limit builds about 200,000 levels, which overflowed a 2 MiB
/// thread stack (an abort). So the stack grows with the step limit (1 GiB
/// at the default); untouched stack costs only address space.
const RENDER_STACK_BYTES_PER_STEP: u64 = 512;

/// How a conversation is rendered, beside its messages.
#[derive(Debug, Clone, Copy, Default)]
pub struct ChatOptions<'a> {
    /// End with the opening of the model's turn.
    pub add_generation_prompt: bool,
    /// The template's thinking switch (`enable_thinking`; formats without
    /// one ignore it).
    pub thinking: bool,
    /// Functions the model may call, in OpenAI's shape (`{"type":
    /// "function", "function": {"name", "description", "parameters"}}`),
    /// for a template that declares them itself (`tools`); empty for none.
    pub tools: &'a [Value],
}

impl ChatOptions<'_> {
    /// A prompt that the model answers: its turn opened, thinking as given,
    /// no tools.
    pub fn reply(thinking: bool) -> Self {
        Self {
            add_generation_prompt: true,
            thinking,
            tools: &[],
        }
    }
}

#[derive(Clone)]
enum Kind {
    Jinja(std::sync::Arc<jinja::Jinja>),
    Gemma,
    Gemma4,
}

/// Turns a conversation into the prompt text the model was trained on.
#[derive(Clone)]
pub struct ChatTemplate {
    kind: Kind,
    /// The fuel a Jinja render gets.
    step_limit: u64,
    /// Why the model file's own template is not used, when it is not.
    refused: Option<String>,
    bos_token: String,
    eos_token: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("builtin", &self.is_builtin())
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .finish()
    }
}

impl ChatTemplate {
    /// The Jinja template `source` if given and it compiles, else the built-in
    /// Gemma format (a model file without a usable template still chats).
    pub fn new(
        source: Option<&str>,
        bos_token: impl Into<String>,
        eos_token: impl Into<String>,
    ) -> Self {
        let (bos_token, eos_token) = (bos_token.into(), eos_token.into());
        match source {
            Some(src) => {
                Self::jinja(src, bos_token.clone(), eos_token.clone()).unwrap_or_else(|e| Self {
                    refused: Some(e.to_string()),
                    ..Self::gemma(bos_token)
                })
            }
            None => Self::gemma(bos_token),
        }
    }

    /// Why the model file's template was set aside for the built-in format
    /// (it does not compile, or it is refused), so the load can say so.
    pub fn refused(&self) -> Option<&str> {
        self.refused.as_deref()
    }

    /// A Jinja template; fails if it does not compile.
    pub fn jinja(
        source: &str,
        bos_token: impl Into<String>,
        eos_token: impl Into<String>,
    ) -> Result<Self, TokenizerError> {
        let jinja = jinja::Jinja::new(source)?;
        Ok(Self {
            kind: Kind::Jinja(std::sync::Arc::new(jinja)),
            step_limit: DEFAULT_TEMPLATE_STEPS,
            refused: None,
            bos_token: bos_token.into(),
            eos_token: eos_token.into(),
        })
    }

    /// Bound the steps a render may take (a Jinja template; the built-in
    /// formats take a fixed, small number). A render past it fails with an
    /// error that says so.
    pub fn set_step_limit(&mut self, steps: u64) {
        // minijinja adds to the fuel it is given: keep clear of overflow.
        self.step_limit = steps.clamp(1, u64::MAX / 4);
        if let Kind::Jinja(jinja) = &mut self.kind {
            std::sync::Arc::make_mut(jinja)
                .env
                .set_fuel(Some(self.step_limit));
        }
    }

    /// The built-in Gemma format, as Gemma 3's own template writes it.
    pub fn gemma(bos_token: impl Into<String>) -> Self {
        Self {
            kind: Kind::Gemma,
            step_limit: DEFAULT_TEMPLATE_STEPS,
            refused: None,
            bos_token: bos_token.into(),
            eos_token: String::new(),
        }
    }

    /// The built-in Gemma 4 format, as Gemma 4's own template writes a
    /// conversation without tools or images (thinking off).
    pub fn gemma4(bos_token: impl Into<String>) -> Self {
        Self {
            kind: Kind::Gemma4,
            step_limit: DEFAULT_TEMPLATE_STEPS,
            refused: None,
            bos_token: bos_token.into(),
            eos_token: String::new(),
        }
    }

    /// Whether this is a built-in format rather than a Jinja template.
    pub fn is_builtin(&self) -> bool {
        matches!(self.kind, Kind::Gemma | Kind::Gemma4)
    }

    /// The conversation as prompt text; with `add_generation_prompt` it ends
    /// with the opening of the model's turn.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, TokenizerError> {
        self.render_with(
            messages,
            &ChatOptions {
                add_generation_prompt,
                ..ChatOptions::default()
            },
        )
    }

    /// Whether the format has a thinking switch: Gemma 4's, or a Jinja
    /// template that reads `enable_thinking`.
    pub fn supports_thinking(&self) -> bool {
        match &self.kind {
            Kind::Gemma => false,
            Kind::Gemma4 => true,
            Kind::Jinja(jinja) => jinja.source.contains("enable_thinking"),
        }
    }

    /// The Jinja source, when the format is a template (not built in).
    pub fn source(&self) -> Option<&str> {
        match &self.kind {
            Kind::Jinja(jinja) => Some(&jinja.source),
            Kind::Gemma | Kind::Gemma4 => None,
        }
    }

    /// The conversation as prompt text, rendered as `options` say (the
    /// built-in formats declare no tools: they ignore `options.tools`).
    pub fn render_with(
        &self,
        messages: &[ChatMessage],
        options: &ChatOptions<'_>,
    ) -> Result<String, TokenizerError> {
        let (add, thinking) = (options.add_generation_prompt, options.thinking);
        match &self.kind {
            Kind::Gemma => Ok(render_gemma(&self.bos_token, messages, add)),
            Kind::Gemma4 => Ok(render_gemma4(&self.bos_token, messages, add, thinking)),
            Kind::Jinja(jinja) => self.render_jinja(jinja, messages, options),
        }
    }

    /// The stack for a render within this template's step limit.
    fn render_stack_bytes(&self) -> usize {
        let bytes = self
            .step_limit
            .saturating_mul(RENDER_STACK_BYTES_PER_STEP)
            .clamp(64 << 20, 16 << 30);
        usize::try_from(bytes).unwrap_or(usize::MAX)
    }

    /// Renders the Jinja template on a thread with a deep stack
    /// ([`RENDER_STACK_BYTES_PER_STEP`], [`deep_stack`]), its panics turned
    /// into errors.
    fn render_jinja(
        &self,
        jinja: &std::sync::Arc<jinja::Jinja>,
        messages: &[ChatMessage],
        options: &ChatOptions<'_>,
    ) -> Result<String, TokenizerError> {
        let (jinja, messages) = (jinja.clone(), messages.to_vec());
        let (bos, eos) = (self.bos_token.clone(), self.eos_token.clone());
        let (add_generation_prompt, thinking) = (options.add_generation_prompt, options.thinking);
        // Absent, not empty, when there are none: templates test `tools is
        // defined` as often as `tools`.
        let tools = (!options.tools.is_empty()).then(|| options.tools.to_vec());
        let render = move || {
            use minijinja::value::{Serde, Value as Jv};
            let mut ctx = vec![
                ("messages", Jv::from(Serde(&messages))),
                ("bos_token", Jv::from(bos)),
                ("eos_token", Jv::from(eos)),
                ("add_generation_prompt", Jv::from(add_generation_prompt)),
                ("enable_thinking", Jv::from(thinking)),
            ];
            if let Some(tools) = &tools {
                ctx.push(("tools", Jv::from(Serde(tools))));
            }
            jinja.render(Jv::from_pairs(ctx))
        };
        // minijinja 2 panicked on some slices (`''[::-1]`, `[][::-1]`: an
        // index past the end, found by fuzzing); a template from a model
        // file must fail its render, not the thread.
        let rendered = deep_stack::run(self.render_stack_bytes(), render).map_err(
            |deep_stack::Panicked| {
                TokenizerError::Template(
                    "render failed: the template engine panicked (a slice such as `[][::-1]`?)"
                        .into(),
                )
            },
        )?;
        rendered.map_err(|e| {
            TokenizerError::Template(match e.kind() {
                ErrorKind::OutOfFuel => format!(
                    "render stopped: the template took more than its limit of {} steps \
                     (each also pays for 64 bytes of text or lists it builds)",
                    self.step_limit
                ),
                _ => format!("render failed: {e:#}"),
            })
        })
    }
}

/// Gemma's turn format. Gemma has no system role: system text goes in front
/// of the first turn followed by a blank line, and message text is trimmed,
/// exactly like Gemma 3's Hugging Face template. Unlike that template this
/// never fails: later system messages prefix the next turn, and a system
/// message with no turn after it becomes a user turn rather than vanishing.
fn render_gemma(bos: &str, messages: &[ChatMessage], add_generation_prompt: bool) -> String {
    let mut out = String::from(bos);
    let mut prefix = String::new();
    for m in messages {
        if m.role == "system" {
            prefix.push_str(&m.content);
            prefix.push_str("\n\n");
            continue;
        }
        let role = if m.role == "assistant" {
            "model"
        } else {
            &m.role
        };
        out.push_str("<start_of_turn>");
        out.push_str(role);
        out.push('\n');
        out.push_str(&prefix);
        prefix.clear();
        out.push_str(m.content.trim());
        out.push_str("<end_of_turn>\n");
    }
    if !prefix.is_empty() {
        out.push_str("<start_of_turn>user\n");
        out.push_str(&prefix);
        out.push_str("<end_of_turn>\n");
    }
    if add_generation_prompt {
        out.push_str("<start_of_turn>model\n");
    }
    out
}

/// Gemma 4's turn format: `<|turn>ROLE\n text <turn|>\n`, with a real
/// system role. Thinking off, an empty thought channel opens the model's
/// turn; thinking on, `<|think|>` opens the system turn (one is added when
/// there is none) and the model opens its own thought channel.
fn render_gemma4(
    bos: &str,
    messages: &[ChatMessage],
    add_generation_prompt: bool,
    thinking: bool,
) -> String {
    let mut out = String::from(bos);
    if thinking && messages.first().is_none_or(|m| m.role != "system") {
        out.push_str("<|turn>system\n<|think|><turn|>\n");
    }
    for (i, m) in messages.iter().enumerate() {
        let role = if m.role == "assistant" {
            "model"
        } else {
            &m.role
        };
        out.push_str("<|turn>");
        out.push_str(role);
        out.push('\n');
        if thinking && i == 0 && m.role == "system" {
            out.push_str("<|think|>\n");
        }
        out.push_str(m.content.trim());
        out.push_str("<turn|>\n");
    }
    if add_generation_prompt {
        out.push_str("<|turn>model\n");
        if !thinking {
            out.push_str("<|channel>thought\n<channel|>");
        }
    }
    out
}
