//! OpenAI request bodies: parsing and validation into engine settings, and
//! the response and chunk bodies.

use crate::error::ApiError;
use crate::media::{self, Part};
pub use crate::media::{ImageSource, MAX_CLIPS, MAX_IMAGES};
use engine::tools::{self, Tool, ToolCall, ToolChoice};
use engine::{ChatMessage, GenerateOptions, Grammar, SamplingParams};
use serde::Deserialize;
use serde_json::{json, Value};

/// Most stop strings a request may give.
const MAX_STOPS: usize = 16;

/// `stop`: one string or a list.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Stop {
    One(String),
    Many(Vec<String>),
}

/// `stream_options`.
#[derive(Debug, Default, Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

/// The sampling and limit fields both endpoints share.
#[derive(Debug, Default, Deserialize)]
struct Common {
    model: Option<String>,
    stream: Option<bool>,
    stream_options: Option<StreamOptions>,
    temperature: Option<f32>,
    top_p: Option<f32>,
    max_tokens: Option<i64>,
    max_completion_tokens: Option<i64>,
    stop: Option<Stop>,
    seed: Option<i64>,
    frequency_penalty: Option<f32>,
    presence_penalty: Option<f32>,
    n: Option<i64>,
    /// Chat: `true` to return each token's log-probability; legacy
    /// completions: how many alternatives to return with each.
    logprobs: Option<Value>,
    /// Chat: how many alternatives with each token (0 to 20).
    top_logprobs: Option<i64>,
    // Extensions that llama.cpp's server also takes.
    top_k: Option<i64>,
    min_p: Option<f32>,
    repeat_penalty: Option<f32>,
    /// How many recent tokens the repeat penalty looks at.
    repeat_last_n: Option<i64>,
    /// Token id (as a string) to a bias from -100 to 100.
    logit_bias: Option<std::collections::BTreeMap<String, f32>>,
    /// OpenAI: `{"type": "text" | "json_object" | "json_schema", ...}`.
    response_format: Option<Value>,
    /// llama.cpp's extension: a GBNF grammar.
    grammar: Option<String>,
    /// llama.cpp's extension: a JSON Schema.
    json_schema: Option<Value>,
    /// Hearth's extension: a regular expression.
    regex: Option<String>,
    /// Hearth's extension: a grammar in llguidance's Lark syntax.
    lark_grammar: Option<String>,
    /// vLLM's and llama.cpp's way to set template switches;
    /// `enable_thinking` turns thinking on or off.
    chat_template_kwargs: Option<Value>,
    /// Ollama's thinking switch.
    think: Option<bool>,
    /// OpenAI's reasoning effort: `none` turns thinking off, any other
    /// level on.
    reasoning_effort: Option<String>,
    /// Most thought tokens before the thought channel is closed.
    thinking_budget: Option<i64>,
}

/// `content`: a string, a list of parts, or null.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<Part>),
}

/// `function` of an assistant message's tool call.
#[derive(Debug, Deserialize)]
struct WireFunctionCall {
    name: String,
    /// The arguments as a JSON string, as OpenAI sends them.
    #[serde(default)]
    arguments: Option<String>,
}

/// One entry of an assistant message's `tool_calls`.
#[derive(Debug, Deserialize)]
struct WireToolCall {
    id: Option<String>,
    function: WireFunctionCall,
}

#[derive(Debug, Deserialize)]
struct Message {
    role: String,
    content: Option<Content>,
    #[serde(default)]
    tool_calls: Option<Vec<WireToolCall>>,
    #[serde(default)]
    tool_call_id: Option<String>,
    #[serde(default)]
    name: Option<String>,
}

/// `function` of a tool definition.
#[derive(Debug, Deserialize)]
struct WireFunction {
    name: String,
    description: Option<String>,
    parameters: Option<Value>,
}

/// One entry of `tools`.
#[derive(Debug, Deserialize)]
struct WireTool {
    #[serde(rename = "type")]
    kind: String,
    function: WireFunction,
}

#[derive(Debug, Deserialize)]
struct ChatBody {
    messages: Vec<Message>,
    /// Hearth's extension: the guardrails for this reply (`all`, `none` or
    /// a list such as `calc,logic`); the server's `--guard` when absent.
    guard: Option<String>,
    tools: Option<Vec<WireTool>>,
    tool_choice: Option<Value>,
    parallel_tool_calls: Option<bool>,
    #[serde(flatten)]
    common: Common,
}

/// `prompt` of the legacy completions endpoint.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Prompt {
    Text(String),
    Texts(Vec<String>),
    Ids(Vec<u32>),
}

#[derive(Debug, Deserialize)]
struct CompletionBody {
    prompt: Prompt,
    #[serde(flatten)]
    common: Common,
}

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
}

/// Tool calling in a chat request.
#[derive(Debug, Clone)]
pub struct ToolMode {
    /// The tools.
    pub tools: Vec<Tool>,
    /// Whether a call is required, and of which tool.
    pub choice: ToolChoice,
    /// Whether one reply may hold several calls (a JSON array of them).
    pub parallel: bool,
}

impl ToolMode {
    /// The reply as calls, when it is.
    pub fn parse(&self, text: &str) -> Option<Vec<ToolCall>> {
        tools::parse_tool_calls(text, &self.tools)
    }

    /// Whether the reply must be a call (so nothing streams as text).
    pub fn call_required(&self) -> bool {
        matches!(self.choice, ToolChoice::Required | ToolChoice::Function(_))
    }
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
}

impl Request {
    /// The engine's generation options, `room` being the context left after
    /// the prompt.
    pub fn generate_options(&self, room: usize) -> GenerateOptions {
        GenerateOptions {
            max_tokens: self.max_tokens.unwrap_or(room).min(room),
            stop: self.stop.clone(),
            stop_on_eog: true,
            render_special: false,
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
/// requests into this one).
pub(crate) fn parse_chat_value(
    body: Value,
    defaults: &SamplingParams,
) -> Result<Request, ApiError> {
    chat_request(from_value(body)?, defaults)
}

pub(crate) fn from_value<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, ApiError> {
    T::deserialize(v).map_err(|e| ApiError::bad_request(format!("Invalid request: {e}")))
}

fn chat_request(b: ChatBody, defaults: &SamplingParams) -> Result<Request, ApiError> {
    if b.messages.is_empty() {
        return Err(ApiError::bad_param(
            "messages",
            "`messages` must not be empty.",
        ));
    }
    let tool_mode = parse_tools(b.tools, b.tool_choice, b.parallel_tool_calls)?;
    let guard = match b.guard.as_deref() {
        None => None,
        Some(spec) => Some(
            guard::GuardSet::parse(spec)
                .map_err(|e| ApiError::bad_param("guard", format!("{e}.")))?,
        ),
    };
    // Call ids of earlier assistant turns, to name a tool's result.
    let mut call_names: std::collections::HashMap<String, String> = Default::default();
    let mut messages: Vec<ChatMessage> = Vec::with_capacity(b.messages.len() + 1);
    let mut images: Vec<ImageSource> = Vec::new();
    let mut audio: Vec<Vec<u8>> = Vec::new();
    for (i, m) in b.messages.into_iter().enumerate() {
        let role = match m.role.as_str() {
            "system" | "developer" => "system",
            "user" => "user",
            "assistant" | "model" => "assistant",
            "tool" | "function" => "tool",
            other => {
                return Err(ApiError::bad_param(
                    &format!("messages[{i}].role"),
                    format!(
                    "Unsupported role `{other}`; use system, developer, user, assistant or tool."
                ),
                ))
            }
        };
        let content = match m.content {
            None => String::new(),
            Some(Content::Text(t)) => t,
            Some(Content::Parts(parts)) => media::parts_text(parts, i, &mut images, &mut audio)?,
        };
        match role {
            "tool" => {
                // The template knows user and model turns only: a result is
                // a user turn, merged with the results right before it.
                let name = m.name.clone().or_else(|| {
                    m.tool_call_id
                        .as_ref()
                        .and_then(|id| call_names.get(id).cloned())
                });
                let text = tools::result_text(name.as_deref(), &content);
                match messages.last_mut() {
                    Some(last) if last.role == "user" => {
                        last.content.push_str("\n\n");
                        last.content.push_str(&text);
                    }
                    _ => messages.push(ChatMessage::new("user", text)),
                }
            }
            "assistant" if m.tool_calls.as_ref().is_some_and(|c| !c.is_empty()) => {
                let mut calls = Vec::new();
                for (j, c) in m.tool_calls.unwrap_or_default().into_iter().enumerate() {
                    let raw = c.function.arguments.unwrap_or_else(|| "{}".into());
                    let arguments = serde_json::from_str::<Value>(&raw).map_err(|e| {
                        ApiError::bad_param(
                            &format!("messages[{i}].tool_calls[{j}].function.arguments"),
                            format!("The arguments are not valid JSON: {e}"),
                        )
                    })?;
                    if let Some(id) = c.id {
                        call_names.insert(id, c.function.name.clone());
                    }
                    calls.push(ToolCall {
                        name: c.function.name,
                        arguments,
                    });
                }
                let mut text = content;
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str(&tools::calls_text(&calls));
                messages.push(ChatMessage::new("assistant", text));
            }
            _ => messages.push(ChatMessage::new(role, content)),
        }
    }
    if let Some(prompt) = tool_mode
        .as_ref()
        .and_then(|t| tools::tools_prompt(&t.tools, &t.choice, t.parallel))
    {
        match messages.first_mut() {
            Some(first) if first.role == "system" => {
                first.content.push_str("\n\n");
                first.content.push_str(&prompt);
            }
            _ => messages.insert(0, ChatMessage::new("system", prompt)),
        }
    }
    let mut req = common(b.common, Input::Chat(messages), None, defaults)?;
    req.guard = guard;
    req.images = images;
    req.audio = audio;
    if let Some(mode) = tool_mode {
        if let Some((_, field)) = &req.grammar {
            return Err(ApiError::bad_param(
                field,
                format!("`{field}` cannot be combined with `tools` (a call's arguments are already held to the tool's schema)."),
            ));
        }
        let grammar = tools::tool_grammar(&mode.tools, &mode.choice, mode.parallel)
            .map_err(|e| ApiError::bad_param("tool_choice", format!("{e}.")))?;
        req.grammar = grammar.map(|g| (g, "tools"));
        if mode.choice != ToolChoice::None {
            req.tools = Some(mode);
        }
    }
    Ok(req)
}

/// `tools` and `tool_choice`: `None` when no tools are given.
fn parse_tools(
    wire: Option<Vec<WireTool>>,
    choice: Option<Value>,
    parallel: Option<bool>,
) -> Result<Option<ToolMode>, ApiError> {
    let wire = wire.unwrap_or_default();
    let mut tools = Vec::with_capacity(wire.len());
    for (i, t) in wire.into_iter().enumerate() {
        if t.kind != "function" {
            return Err(ApiError::bad_param(
                &format!("tools[{i}].type"),
                format!(
                    "Tools of type `{}` are not supported; only `function`.",
                    t.kind
                ),
            ));
        }
        let name = t.function.name;
        let valid = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid {
            return Err(ApiError::bad_param(
                &format!("tools[{i}].function.name"),
                format!(
                    "`{name}` is not a valid function name (1 to 64 of a-z, A-Z, 0-9, _ and -)."
                ),
            ));
        }
        if tools.iter().any(|t: &Tool| t.name == name) {
            return Err(ApiError::bad_param(
                &format!("tools[{i}].function.name"),
                format!("The function `{name}` is defined twice."),
            ));
        }
        let parameters = match t.function.parameters {
            None => serde_json::json!({"type": "object", "properties": {}}),
            Some(p @ Value::Object(_)) => p,
            Some(_) => {
                return Err(ApiError::bad_param(
                    &format!("tools[{i}].function.parameters"),
                    "`parameters` must be a JSON Schema object.",
                ))
            }
        };
        tools.push(Tool {
            name,
            description: t.function.description,
            parameters,
        });
    }
    let choice = match choice {
        None | Some(Value::Null) => ToolChoice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "auto" => ToolChoice::Auto,
            "none" => ToolChoice::None,
            "required" => ToolChoice::Required,
            other => {
                return Err(ApiError::bad_param(
                    "tool_choice",
                    format!("Unknown tool_choice `{other}`; use auto, none, required or {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}."),
                ))
            }
        },
        Some(v) => match v.pointer("/function/name").and_then(Value::as_str) {
            Some(name) => ToolChoice::Function(name.to_string()),
            None => {
                return Err(ApiError::bad_param(
                    "tool_choice",
                    "A tool_choice object names a function: {\"type\": \"function\", \"function\": {\"name\": ...}}.",
                ))
            }
        },
    };
    if tools.is_empty() {
        return match choice {
            ToolChoice::Required | ToolChoice::Function(_) => Err(ApiError::bad_param(
                "tool_choice",
                "tool_choice asks for a call but no `tools` are given.",
            )),
            _ => Ok(None),
        };
    }
    Ok(Some(ToolMode {
        tools,
        choice,
        // Off unless asked for (OpenAI's default is on): small models
        // offered an array of calls tend to repeat one call to the limit.
        parallel: parallel.unwrap_or(false),
    }))
}

/// The one grammar a request asks for through `response_format`, `grammar`,
/// `json_schema`, `regex` or `lark_grammar`.
fn parse_grammar(c: &mut Common) -> Result<Option<(Grammar, &'static str)>, ApiError> {
    let mut found: Vec<(Grammar, &'static str)> = Vec::new();
    if let Some(rf) = c.response_format.take() {
        let kind = rf.get("type").and_then(Value::as_str).unwrap_or("");
        match kind {
            "text" => {}
            "json_object" => found.push((Grammar::JsonObject, "response_format")),
            "json_schema" => {
                let Some(js) = rf.get("json_schema") else {
                    return Err(ApiError::bad_param(
                        "response_format",
                        "`response_format` of type `json_schema` needs a `json_schema` object with a `schema`.",
                    ));
                };
                let Some(schema) = js.get("schema") else {
                    return Err(ApiError::bad_param(
                        "response_format.json_schema.schema",
                        "`response_format.json_schema` needs a `schema`.",
                    ));
                };
                found.push((Grammar::JsonSchema(schema.clone()), "response_format"));
            }
            other => {
                return Err(ApiError::bad_param(
                    "response_format.type",
                    format!(
                    "Unknown response_format type `{other}`; use text, json_object or json_schema."
                ),
                ))
            }
        }
    }
    if let Some(g) = c.grammar.take() {
        found.push((Grammar::Gbnf(g), "grammar"));
    }
    if let Some(s) = c.json_schema.take() {
        found.push((Grammar::JsonSchema(s), "json_schema"));
    }
    if let Some(r) = c.regex.take() {
        found.push((Grammar::Regex(r), "regex"));
    }
    if let Some(l) = c.lark_grammar.take() {
        found.push((Grammar::Lark(l), "lark_grammar"));
    }
    if found.len() > 1 {
        let names: Vec<&str> = found.iter().map(|(_, f)| *f).collect();
        return Err(ApiError::bad_param(
            found[1].1,
            format!("Give one constraint, not several: {}.", names.join(", ")),
        ));
    }
    Ok(found.pop())
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

fn completion_request(
    b: CompletionBody,
    default_max: Option<usize>,
    defaults: &SamplingParams,
) -> Result<Request, ApiError> {
    let input = match b.prompt {
        Prompt::Text(t) => Input::Text(t),
        Prompt::Texts(mut ts) if ts.len() == 1 => Input::Text(ts.remove(0)),
        Prompt::Texts(_) => {
            return Err(ApiError::bad_param(
                "prompt",
                "Only one prompt per request is supported.",
            ))
        }
        Prompt::Ids(ids) => Input::Ids(ids),
    };
    common(b.common, input, default_max, defaults)
}

fn common(
    mut c: Common,
    input: Input,
    default_max: Option<usize>,
    defaults: &SamplingParams,
) -> Result<Request, ApiError> {
    let grammar = parse_grammar(&mut c)?;
    let logprobs = parse_logprobs(c.logprobs.take(), c.top_logprobs)?;
    let kw_thinking = match c
        .chat_template_kwargs
        .as_ref()
        .map(|k| k.get("enable_thinking"))
    {
        Some(Some(Value::Bool(b))) => Some(*b),
        Some(Some(other)) => {
            return Err(ApiError::bad_param(
                "chat_template_kwargs.enable_thinking",
                format!("`enable_thinking` is true or false, not {other}."),
            ))
        }
        _ => None,
    };
    let effort_thinking = match c.reasoning_effort.as_deref() {
        None => None,
        Some("none") => Some(false),
        Some("minimal" | "low" | "medium" | "high") => Some(true),
        Some(other) => {
            return Err(ApiError::bad_param(
                "reasoning_effort",
                format!(
                    "Unknown reasoning_effort `{other}`; use none, minimal, low, medium or high."
                ),
            ))
        }
    };
    let thinking_budget = match c.thinking_budget {
        None => None,
        Some(b) if b < 0 => {
            return Err(ApiError::bad_param(
                "thinking_budget",
                "`thinking_budget` must not be negative.",
            ))
        }
        Some(b) => Some(usize::try_from(b).unwrap_or(usize::MAX)),
    };
    // Thinking is off unless asked for, as in the Gemma 4 template.
    let thinking = c.think.or(kw_thinking).or(effort_thinking).unwrap_or(false);
    let n = match c.n {
        None => 1,
        Some(n @ 1..=MAX_CHOICES) => n as usize,
        Some(n) => {
            return Err(ApiError::bad_param(
                "n",
                format!("`n` must be between 1 and {MAX_CHOICES}, got {n}."),
            ))
        }
    };
    let max = match (c.max_completion_tokens, c.max_tokens) {
        (Some(m), _) => Some(("max_completion_tokens", m)),
        (None, Some(m)) => Some(("max_tokens", m)),
        (None, None) => None,
    };
    let max_tokens = match max {
        Some((name, m)) if m < 1 => {
            return Err(ApiError::bad_param(
                name,
                format!("`{name}` must be at least 1."),
            ))
        }
        Some((_, m)) => Some(usize::try_from(m).unwrap_or(usize::MAX)),
        None => default_max,
    };
    let stop = match c.stop {
        None => Vec::new(),
        Some(Stop::One(s)) => vec![s],
        Some(Stop::Many(v)) => v,
    };
    if stop.len() > MAX_STOPS {
        return Err(ApiError::bad_param(
            "stop",
            format!("At most {MAX_STOPS} stop strings are supported."),
        ));
    }
    if stop.iter().any(String::is_empty) {
        return Err(ApiError::bad_param(
            "stop",
            "Stop strings must not be empty.",
        ));
    }
    let mut logit_bias = Vec::new();
    for (key, &bias) in c.logit_bias.iter().flatten() {
        let id = key.trim().parse::<u32>().map_err(|_| {
            ApiError::bad_param(
                "logit_bias",
                format!("`logit_bias` keys are token ids; `{key}` is not one."),
            )
        })?;
        logit_bias.push((id, bias));
    }
    let defaults = defaults.clone();
    let mut params = SamplingParams {
        temperature: c.temperature.unwrap_or(defaults.temperature),
        top_p: c.top_p.unwrap_or(defaults.top_p),
        min_p: c.min_p.unwrap_or(defaults.min_p),
        repeat_penalty: c.repeat_penalty.unwrap_or(defaults.repeat_penalty),
        frequency_penalty: c.frequency_penalty.unwrap_or(defaults.frequency_penalty),
        presence_penalty: c.presence_penalty.unwrap_or(defaults.presence_penalty),
        seed: c.seed.map(|s| s as u64).unwrap_or_else(fresh_seed),
        logit_bias,
        ..defaults
    };
    if let Some(n) = c.repeat_last_n {
        // llama.cpp and Ollama: -1 means the whole context.
        params.repeat_last_n = match n {
            -1 => usize::MAX,
            n if n < 0 => {
                return Err(ApiError::bad_param(
                    "repeat_last_n",
                    "`repeat_last_n` is -1 (the whole context) or at least 0.",
                ))
            }
            n => usize::try_from(n).unwrap_or(usize::MAX),
        };
    }
    if let Some(k) = c.top_k {
        if k < 0 {
            return Err(ApiError::bad_param(
                "top_k",
                "`top_k` must not be negative.",
            ));
        }
        params.top_k = usize::try_from(k).unwrap_or(usize::MAX);
    }
    if let Some(t) = c.temperature {
        if !(0.0..=2.0).contains(&t) {
            return Err(ApiError::bad_param(
                "temperature",
                format!("`temperature` must be between 0 and 2, got {t}."),
            ));
        }
    }
    for (name, v) in [
        ("frequency_penalty", params.frequency_penalty),
        ("presence_penalty", params.presence_penalty),
    ] {
        if !(-2.0..=2.0).contains(&v) {
            return Err(ApiError::bad_param(
                name,
                format!("`{name}` must be between -2 and 2, got {v}."),
            ));
        }
    }
    params.validate().map_err(|e| {
        let param = e.split_whitespace().next().unwrap_or("").to_string();
        ApiError::bad_param(&param, format!("Invalid sampling parameter: {e}."))
    })?;
    Ok(Request {
        seed_given: c.seed.is_some(),
        model: c.model,
        stream: c.stream.unwrap_or(false),
        include_usage: c
            .stream_options
            .and_then(|o| o.include_usage)
            .unwrap_or(false),
        input,
        params,
        max_tokens,
        stop,
        grammar,
        tools: None,
        thinking,
        thinking_budget,
        guard: None,
        images: Vec::new(),
        audio: Vec::new(),
        logprobs,
        n,
    })
}

/// Most choices one request may ask for (OpenAI's limit).
pub const MAX_CHOICES: i64 = 128;

/// Most alternatives a token's log-probability may come with (OpenAI's
/// limit).
pub const MAX_TOP_LOGPROBS: usize = 20;

/// `logprobs` (a switch for chats, a count for legacy completions) and
/// `top_logprobs` as the number of alternatives, `None` when off.
fn parse_logprobs(logprobs: Option<Value>, top: Option<i64>) -> Result<Option<usize>, ApiError> {
    let in_range = |name: &str, n: i64| match usize::try_from(n) {
        Ok(n) if n <= MAX_TOP_LOGPROBS => Ok(n),
        _ => Err(ApiError::bad_param(
            name,
            format!("`{name}` must be between 0 and {MAX_TOP_LOGPROBS}, got {n}."),
        )),
    };
    let top = top.map(|n| in_range("top_logprobs", n)).transpose()?;
    match logprobs {
        None | Some(Value::Null) | Some(Value::Bool(false)) => match top {
            Some(_) => Err(ApiError::bad_param(
                "top_logprobs",
                "`top_logprobs` needs `logprobs` set to true.",
            )),
            None => Ok(None),
        },
        Some(Value::Bool(true)) => Ok(Some(top.unwrap_or(0))),
        Some(Value::Number(n)) => match n.as_i64() {
            Some(n) => in_range("logprobs", n).map(Some),
            None => Err(ApiError::bad_param(
                "logprobs",
                "`logprobs` must be an integer.",
            )),
        },
        Some(other) => Err(ApiError::bad_param(
            "logprobs",
            format!("`logprobs` is true or false (chat) or a count (completions), not {other}."),
        )),
    }
}

/// A seed for requests that give none: differs from call to call.
fn fresh_seed() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    nanos
        ^ COUNTER
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
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
