//! OpenAI request bodies, parsed and checked into a [`Request`] in the
//! engine's terms: the chat body in `chat`, the fields every generating
//! body shares (sampling, limits, grammars, thinking) in `common`. The
//! other APIs translate their bodies into these.

use crate::error::ApiError;
pub use crate::media::ImageSource;
pub use engine::tools::ToolMode;
use engine::{ChatMessage, GenerateOptions, Grammar, SamplingParams};
use serde_json::{json, Value};

mod chat;
mod common;
mod speculative;

use chat::chat_request;
pub(crate) use chat::reply_grammar;
use common::completion_request;
pub(crate) use common::LlamaSamplers;
pub(crate) use common::{lora_pairs, LoraEntry};
pub use common::{MAX_CHOICES, MAX_TOP_LOGPROBS};
pub use speculative::SpeculationChoice;

/// What a request asks for, in the engine's terms, before tokenization.
#[derive(Debug)]
pub struct Request {
    /// The model name asked for, if any.
    pub model: Option<String>,
    /// Stream the answer as server-sent events.
    pub stream: bool,
    /// Send a last chunk with `usage` when streaming.
    pub include_usage: bool,
    /// The prompt.
    pub input: Input,
    /// Sampling settings.
    pub params: SamplingParams,
    /// Whether the request chose its seed (else `params.seed` is fresh).
    pub seed_given: bool,
    /// Tokens asked for at most (None: until the context is full).
    pub max_tokens: Option<usize>,
    /// Stop strings.
    pub stop: Vec<String>,
    /// The grammar the output must match, and the request field it came
    /// from (for the message when it does not compile).
    pub grammar: Option<(Grammar, &'static str)>,
    /// The tools a chat reply may call, when calls are on.
    pub tools: Option<ToolMode>,
    /// Whether the model should think before answering (models that do
    /// not think ignore it).
    pub thinking: bool,
    /// Most thought tokens.
    pub thinking_budget: Option<usize>,
    /// The guards the request asked for (`None`: the server's default).
    pub guard: Option<guard::GuardSet>,
    /// The images of a chat, in the order their markers appear.
    pub images: Vec<ImageSource>,
    /// The audio clips of a chat (file bytes), in the order their markers
    /// appear.
    pub audio: Vec<Vec<u8>>,
    /// Return each token's log-probability with this many alternatives.
    pub logprobs: Option<usize>,
    /// How many choices to generate from the prompt.
    pub n: usize,
    /// What the request chose of speculation (llama.cpp's
    /// `speculative.n_max` and `speculative.p_min`).
    pub speculation: SpeculationChoice,
    /// llama.cpp's `lora`: the adapters to run, by id, each at its scale
    /// (those not listed off); `None`: the server's current scales.
    pub lora: Option<Vec<(usize, f32)>>,
}

/// The prompt of a request.
#[derive(Debug)]
pub enum Input {
    /// A conversation for the chat template.
    Chat(Vec<ChatMessage>),
    /// Raw text.
    Text(String),
    /// Token ids.
    Ids(Vec<u32>),
    /// A gap in code to fill (llama.cpp's `/infill`, OpenAI's `suffix`).
    Infill(InfillInput),
}

/// The parts of a fill-in-the-middle prompt (see [`engine::Infill`]).
#[derive(Debug, Clone, Default)]
pub struct InfillInput {
    /// The code before the gap.
    pub prefix: String,
    /// The code after the gap.
    pub suffix: String,
    /// Files of the project, for context.
    pub extra: Vec<engine::InfillFile>,
    /// The start of the middle, already written.
    pub middle: String,
}

impl InfillInput {
    /// Bytes of text it holds.
    pub fn bytes(&self) -> usize {
        let files: usize = self
            .extra
            .iter()
            .map(|f| f.filename.len() + f.text.len())
            .sum();
        self.prefix.len() + self.suffix.len() + self.middle.len() + files
    }
}

impl Request {
    /// The engine's generation options, `room` being the context left after
    /// the prompt, speculating as `default` says unless the request chose.
    pub fn generate_options(
        &self,
        room: usize,
        default: Option<&engine::Speculation>,
    ) -> GenerateOptions {
        GenerateOptions {
            max_tokens: self.max_tokens.unwrap_or(room).min(room),
            stop: self.stop.clone(),
            stop_on_eog: true,
            // Calls in a model's own syntax are read from their tokens.
            render_special: self.tools.as_ref().is_some_and(|t| t.native().is_some()),
            speculation: self.speculation.apply(default),
        }
    }
}

pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request(
            "The request body is empty; send a JSON object.",
        ));
    }
    // Check the syntax first so a syntax error is not reported as a schema one.
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("The body is not valid JSON: {e}")))?;
    if !value.is_object() {
        return Err(ApiError::bad_request(
            "The request body must be a JSON object.",
        ));
    }
    from_value(value)
}

/// Parse and check a `/v1/chat/completions` body.
pub fn parse_chat(body: &[u8], defaults: &SamplingParams) -> Result<Request, ApiError> {
    chat_request(parse_json(body)?, defaults)
}

/// Check a chat body already read as JSON (the other APIs translate their
/// requests into this one, their answer's format into `response_format`,
/// which errors then call `format_field`, as that API spells it).
pub(crate) fn parse_chat_value(
    body: Value,
    defaults: &SamplingParams,
    format_field: &'static str,
) -> Result<Request, ApiError> {
    let mut req = chat_request(from_value(body)?, defaults)?;
    name_format(&mut req, format_field);
    Ok(req)
}

/// Call the request's `response_format` `field` in what its compile says.
pub(crate) fn name_format(req: &mut Request, field: &'static str) {
    if let Some((_, named)) = &mut req.grammar {
        if *named == "response_format" {
            *named = field;
        }
    }
}

pub(crate) fn from_value<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, ApiError> {
    T::deserialize(v).map_err(|e| ApiError::bad_request(format!("Invalid request: {e}")))
}

/// What a llama.cpp `/completion` answer carries beside the text.
#[derive(Debug, Clone, Copy, Default)]
pub struct NativeExtras {
    /// The generated ids (`return_tokens`).
    pub ids: bool,
    /// Each token's probability and the likeliest others (`n_probs`).
    pub probs: bool,
}

/// Parse and check a `/completion` body (llama.cpp's): the request and
/// what its answer carries beside the text.
pub fn parse_native_completion(
    body: &[u8],
    defaults: &SamplingParams,
) -> Result<(Request, NativeExtras), ApiError> {
    common::native_completion_request(parse_json(body)?, defaults)
}

/// Parse and check an `/infill` body (llama.cpp's).
pub fn parse_infill(body: &[u8], defaults: &SamplingParams) -> Result<Request, ApiError> {
    common::infill_request(parse_json(body)?, defaults)
}

/// Parse and check a `/v1/completions` body.
pub fn parse_completion(body: &[u8], defaults: &SamplingParams) -> Result<Request, ApiError> {
    // OpenAI's default for the legacy endpoint.
    completion_request(parse_json(body)?, Some(16), defaults)
}

/// Check a legacy completion body already read as JSON.
/// `default_max` applies when the body gives no limit.
pub(crate) fn parse_completion_value(
    body: Value,
    default_max: Option<usize>,
    defaults: &SamplingParams,
) -> Result<Request, ApiError> {
    completion_request(from_value(body)?, default_max, defaults)
}

/// `usage`.
pub fn usage_json(prompt: usize, completion: usize, cached: usize) -> Value {
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": { "cached_tokens": cached },
    })
}

/// Seconds since the Unix epoch.
pub fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
