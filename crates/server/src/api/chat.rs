//! `/v1/chat/completions` bodies: messages (text, images, audio, tool calls
//! and results) into the chat the template reads, and the tools.

use super::common::{common, Common};
use super::{ImageSource, Input, Request, ToolMode};
use crate::error::ApiError;
use crate::media::{self, Part};
use engine::tools::{self, Tool, ToolCall, ToolChoice, ToolsError};
use engine::{ChatMessage, Grammar, SamplingParams};
use serde::Deserialize;
use serde_json::Value;

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
pub(super) struct ChatBody {
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

pub(super) fn chat_request(b: ChatBody, defaults: &SamplingParams) -> Result<Request, ApiError> {
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
    let mut chat = Conversation::default();
    for (i, m) in b.messages.into_iter().enumerate() {
        chat.push(i, m)?;
    }
    let Conversation {
        messages,
        images,
        audio,
        ..
    } = chat;
    let mut req = common(b.common, Input::Chat(messages), None, defaults)?;
    req.guard = guard;
    req.images = images;
    req.audio = audio;
    if let Some(mode) = tool_mode {
        // Checked now, made once the model (and so the call syntax) is
        // known: `req.grammar` stays the answer's format until then.
        let format = req.grammar.as_ref();
        mode.check(format.map(|(g, _)| g))
            .map_err(|e| tools_error(e, error_field(&mode, format)))?;
        if mode.choice != ToolChoice::None {
            req.tools = Some(mode);
        }
    }
    Ok(req)
}

/// The grammar of a reply that may call `mode`'s tools, beside the
/// `format` the request asks for its answer (as OpenAI's API takes both):
/// `none` holds the reply to the format; `required` or a named function to
/// a call (the format is for answers, not calls); `auto` to a call or the
/// format's JSON. A format that is not JSON (a Hearth grammar or regex)
/// cannot share a reply with calls under `auto`.
pub(crate) fn reply_grammar(
    mode: &ToolMode,
    format: Option<(Grammar, &'static str)>,
) -> Result<Option<(Grammar, &'static str)>, ApiError> {
    let field = error_field(mode, format.as_ref());
    mode.reply_grammar(format.map(|(g, _)| g))
        .map(|grammar| grammar.map(|g| (g, field)))
        .map_err(|e| tools_error(e, field))
}

/// The field a grammar error names: the format's while it holds the
/// answer, else the tools'.
fn error_field(mode: &ToolMode, format: Option<&(Grammar, &'static str)>) -> &'static str {
    match (&mode.choice, format) {
        (ToolChoice::None | ToolChoice::Auto, Some((_, field))) => field,
        _ => "tools",
    }
}

/// A tools error as the API tells it, naming `field` where the format is
/// at fault.
fn tools_error(e: ToolsError, field: &str) -> ApiError {
    match e {
        ToolsError::Choice(e) => ApiError::bad_param("tool_choice", format!("{e}.")),
        ToolsError::Schema(e) => ApiError::bad_param("tools", format!("{e}.")),
        ToolsError::FormatNotJson => ApiError::bad_param(
            field,
            format!(
                "`{field}` is not JSON, so a reply cannot be either it or a tool call; \
                 use tool_choice `none` or `required`, or a JSON format."
            ),
        ),
    }
}

/// The chat the template reads, built message by message.
#[derive(Default)]
struct Conversation {
    messages: Vec<ChatMessage>,
    images: Vec<ImageSource>,
    audio: Vec<Vec<u8>>,
}

impl Conversation {
    /// Add message `i`.
    fn push(&mut self, i: usize, m: Message) -> Result<(), ApiError> {
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
            None => ChatMessage::new(role, ""),
            Some(Content::Text(t)) => ChatMessage::new(role, t),
            Some(Content::Parts(parts)) => {
                media::parts_message(role, parts, i, &mut self.images, &mut self.audio)?
            }
        };
        match (role, m.tool_calls) {
            ("tool", _) => {
                // Named as the client named it: a template that wants the
                // name finds it from the call id (as llama.cpp leaves it).
                let mut result = content;
                result.name = m.name;
                result.tool_call_id = m.tool_call_id;
                self.messages.push(result);
            }
            ("assistant", Some(calls)) if !calls.is_empty() => {
                self.assistant_calls(i, content, calls)?
            }
            _ => self.messages.push(content),
        }
        Ok(())
    }

    /// An assistant turn with calls: its text, and the calls, their
    /// arguments read as JSON (how the model's format writes them is
    /// decided with the model).
    fn assistant_calls(
        &mut self,
        i: usize,
        content: ChatMessage,
        wire: Vec<WireToolCall>,
    ) -> Result<(), ApiError> {
        let mut message = content;
        for (j, c) in wire.into_iter().enumerate() {
            let raw = c.function.arguments.unwrap_or_else(|| "{}".into());
            let arguments = serde_json::from_str::<Value>(&raw).map_err(|e| {
                ApiError::bad_param(
                    &format!("messages[{i}].tool_calls[{j}].function.arguments"),
                    format!("The arguments are not valid JSON: {e}"),
                )
            })?;
            let call = ToolCall {
                name: c.function.name,
                arguments,
            };
            message
                .tool_calls
                .push(tools::call_value(c.id.as_deref(), &call));
        }
        self.messages.push(message);
        Ok(())
    }
}

/// Most tools one request may offer (OpenAI's limit): each is described in
/// the prompt and held in the call grammar, and names are checked against
/// each other.
const MAX_TOOLS: usize = 128;

/// `tools` and `tool_choice`: `None` when no tools are given.
fn parse_tools(
    wire: Option<Vec<WireTool>>,
    choice: Option<Value>,
    parallel: Option<bool>,
) -> Result<Option<ToolMode>, ApiError> {
    let wire = wire.unwrap_or_default();
    if wire.len() > MAX_TOOLS {
        return Err(ApiError::bad_param(
            "tools",
            format!(
                "{} tools are given; at most {MAX_TOOLS} are supported.",
                wire.len()
            ),
        ));
    }
    let mut tools = Vec::with_capacity(wire.len());
    for (i, t) in wire.into_iter().enumerate() {
        let tool = parse_tool(i, t)?;
        if tools.iter().any(|t: &Tool| t.name == tool.name) {
            return Err(ApiError::bad_param(
                &format!("tools[{i}].function.name"),
                format!("The function `{}` is defined twice.", tool.name),
            ));
        }
        tools.push(tool);
    }
    let choice = parse_tool_choice(choice)?;
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
        format: tools::ToolFormat::Json,
    }))
}

/// Tool `i` of the request, checked: a function with a valid name and an
/// object schema.
fn parse_tool(i: usize, t: WireTool) -> Result<Tool, ApiError> {
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
            format!("`{name}` is not a valid function name (1 to 64 of a-z, A-Z, 0-9, _ and -)."),
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
    Ok(Tool {
        name,
        description: t.function.description,
        parameters,
    })
}

/// `tool_choice`: `auto` when absent.
fn parse_tool_choice(choice: Option<Value>) -> Result<ToolChoice, ApiError> {
    Ok(match choice {
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
    })
}
