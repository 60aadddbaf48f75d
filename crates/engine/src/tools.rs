//! Tool calls. A model whose chat template writes calls in its own syntax
//! (Gemma 4, FunctionGemma) gets its tools, calls and results from that
//! template and calls in that syntax ([`native`], [`ToolFormat::Native`]).
//! The others (Gemma 2 and 3, whose templates know no tools) use a
//! documented JSON convention, enforced by a grammar:
//!
//! - The tools are described to the model in the system turn
//!   ([`tools_prompt`]).
//! - A call is the whole reply, one JSON object:
//!   `{"name": "get_weather", "arguments": {"city": "Paris"}}`, its
//!   `arguments` matching the tool's parameter schema; with parallel calls
//!   allowed, several calls are a JSON array of such objects. With
//!   `tool_choice` `required` or a named function the reply is constrained
//!   to exactly that ([`tool_grammar`]); with `auto` the reply is either
//!   calls or text that does not begin with `{` or `[`, so the first
//!   character decides which.
//! - With `auto` and a format for the answer (`response_format`), the
//!   reply is calls or JSON held to that format
//!   ([`calls_or_format_grammar`]).
//! - An earlier call goes back into the conversation as that same JSON in
//!   the assistant's turn ([`call_text`]); a tool's result as a user turn
//!   ([`result_text`]), since the template knows only user and model turns.

use crate::{Engine, Grammar, OrInstead};
use serde_json::{json, Value};
use tokenizer::ChatMessage;

pub mod native;

pub use native::{NativeSyntax, NativeTools};

/// How a model writes tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ToolFormat {
    /// The JSON convention, described in the system turn.
    #[default]
    Json,
    /// The syntax its chat template writes calls in.
    Native(NativeTools),
}

impl Engine {
    /// How this model writes tool calls: in its own syntax when its chat
    /// template writes calls in one we know and its vocabulary has that
    /// syntax's tokens, else the JSON convention.
    pub fn tool_format(&self) -> ToolFormat {
        let Some(syntax) = self.template().source().and_then(NativeSyntax::of_template) else {
            return ToolFormat::Json;
        };
        let tok = self.tokenizer();
        let ids = syntax.tokens().map(|t| tok.token_id(t));
        match ids {
            [Some(open), Some(close), Some(quote)] => ToolFormat::Native(NativeTools {
                syntax,
                ids: [open, close, quote],
            }),
            _ => ToolFormat::Json,
        }
    }
}

/// Tool calling in a chat request.
#[derive(Debug, Clone)]
pub struct ToolMode {
    /// The tools.
    pub tools: Vec<Tool>,
    /// Whether a call is required, and of which tool.
    pub choice: ToolChoice,
    /// Whether one reply may hold several calls.
    pub parallel: bool,
    /// How the model writes calls (the JSON convention until the model is
    /// known).
    pub format: ToolFormat,
}

impl ToolMode {
    /// The reply as calls, when it is.
    pub fn parse(&self, text: &str) -> Option<Vec<ToolCall>> {
        match &self.format {
            ToolFormat::Json => parse_tool_calls(text, &self.tools),
            ToolFormat::Native(n) => native::parse_calls(n.syntax, text, &self.tools),
        }
    }

    /// Whether the reply must be a call (so nothing streams as text).
    pub fn call_required(&self) -> bool {
        matches!(self.choice, ToolChoice::Required | ToolChoice::Function(_))
    }

    /// The native syntax calls are written in, when it is one.
    pub fn native(&self) -> Option<&'static NativeSyntax> {
        match &self.format {
            ToolFormat::Native(n) => Some(n.syntax),
            ToolFormat::Json => None,
        }
    }

    /// The tools as a template declares them (OpenAI's shape), when they
    /// are declared by the template: a native format, and a choice that
    /// allows calls.
    pub fn declarations(&self) -> Vec<Value> {
        if self.native().is_none() || self.choice == ToolChoice::None {
            return Vec::new();
        }
        self.tools
            .iter()
            .map(|t| {
                let mut function = json!({"name": t.name, "parameters": t.parameters});
                if let Some(d) = &t.description {
                    function["description"] = json!(d);
                }
                json!({"type": "function", "function": function})
            })
            .collect()
    }

    /// Whether these tools and `format` can make a reply's grammar, before
    /// the model (and so the call syntax) is known: the errors of
    /// [`ToolMode::reply_grammar`] but those of a native syntax, without
    /// building anything.
    pub fn check(&self, format: Option<&Grammar>) -> Result<(), ToolsError> {
        match (&self.choice, format) {
            (ToolChoice::None, _) => Ok(()),
            (ToolChoice::Auto, Some(Grammar::JsonSchema(_) | Grammar::JsonObject) | None)
            | (ToolChoice::Required | ToolChoice::Function(_), _) => {
                allowed_tools(&self.tools, &self.choice)
                    .map(|_| ())
                    .map_err(ToolsError::Choice)
            }
            (ToolChoice::Auto, Some(_)) => Err(ToolsError::FormatNotJson),
        }
    }

    /// The grammar of a reply that may call these tools, beside the
    /// `format` the request asks for its answer: `none` holds the reply to
    /// the format; `required` or a named function to a call (the format is
    /// for answers, not calls); `auto` to a call or the format's JSON (or
    /// text, without a format). Fails as [`ToolMode::check`] says, or on
    /// schemas the native syntax cannot hold.
    pub fn reply_grammar(&self, format: Option<Grammar>) -> Result<Option<Grammar>, ToolsError> {
        self.check(format.as_ref())?;
        let answer = match (&self.choice, format) {
            (ToolChoice::None, format) => return Ok(format),
            (ToolChoice::Auto, Some(Grammar::JsonSchema(schema))) => Some(schema),
            (ToolChoice::Auto, Some(Grammar::JsonObject)) => Some(json!({"type": "object"})),
            (ToolChoice::Auto, Some(_)) => return Err(ToolsError::FormatNotJson),
            _ => None,
        };
        let ToolFormat::Native(native) = &self.format else {
            return match answer {
                Some(answer) => calls_or_format_grammar(&self.tools, self.parallel, &answer)
                    .map(Some)
                    .map_err(ToolsError::Choice),
                None => tool_grammar(&self.tools, &self.choice, self.parallel)
                    .map_err(ToolsError::Choice),
            };
        };
        let allowed = allowed_tools(&self.tools, &self.choice).map_err(ToolsError::Choice)?;
        let calls =
            native::calls_lark(native, &allowed, self.parallel).map_err(ToolsError::Schema)?;
        let or = match (&self.choice, answer) {
            (ToolChoice::Auto, Some(answer)) => OrInstead::Json(answer),
            (ToolChoice::Auto, None) => OrInstead::Text,
            _ => OrInstead::Nothing,
        };
        Ok(Some(Grammar::NativeCalls { calls, or }))
    }
}

/// Why tools and a format cannot make a reply's grammar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolsError {
    /// The tool choice cannot be met (the message says why).
    Choice(String),
    /// The tools' parameter schemas cannot be held in the model's call
    /// syntax (the message says why).
    Schema(String),
    /// Under `auto` the answer's format is not JSON, so a reply could not
    /// be told apart from a call.
    FormatNotJson,
}

/// The tools a reply may call under `choice` (all of them, or the one
/// named); fails when a named tool is missing or none are given.
fn allowed_tools<'a>(tools: &'a [Tool], choice: &ToolChoice) -> Result<Vec<&'a Tool>, String> {
    let allowed: Vec<&Tool> = match choice {
        ToolChoice::Function(name) => match tools.iter().find(|t| &t.name == name) {
            Some(t) => vec![t],
            None => {
                return Err(format!(
                    "tool_choice names `{name}`, which is not in `tools`"
                ))
            }
        },
        _ => tools.iter().collect(),
    };
    if allowed.is_empty() {
        return Err("tool_choice asks for a call but `tools` is empty".into());
    }
    Ok(allowed)
}

/// The conversation as a model that uses the JSON convention reads it:
/// each call written into its assistant turn as the model writes one
/// ([`calls_text`]), each result a user turn ([`result_text`], merged with
/// the user turn before it: the templates know user and model turns only),
/// and with `mode` the tools described in the system turn
/// ([`tools_prompt`]; `json_answer` when an answer is JSON in a format the
/// request gives). Media markers stay where they are.
pub fn json_conversation(
    messages: &[ChatMessage],
    mode: Option<&ToolMode>,
    json_answer: bool,
) -> Vec<ChatMessage> {
    let mut out: Vec<ChatMessage> = Vec::with_capacity(messages.len() + 1);
    let mut names = std::collections::HashMap::new();
    for m in messages {
        if m.role == "tool" {
            let name = m.name.clone().or_else(|| {
                m.tool_call_id
                    .as_ref()
                    .and_then(|id| names.get(id).cloned())
            });
            let mut text = ChatMessage::new("user", result_prefix(name.as_deref()));
            text.append(&bare(m));
            match out.last_mut() {
                Some(last) if last.role == "user" => {
                    last.content.push_str("\n\n");
                    last.append(&text);
                }
                _ => out.push(text),
            }
            continue;
        }
        let mut message = bare(m);
        if !m.tool_calls.is_empty() {
            let calls: Vec<ToolCall> = m
                .tool_calls
                .iter()
                .map(|c| {
                    let name = c
                        .pointer("/function/name")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    if let Some(id) = c.get("id").and_then(Value::as_str) {
                        names.insert(id.to_string(), name.to_string());
                    }
                    ToolCall {
                        name: name.to_string(),
                        arguments: c
                            .pointer("/function/arguments")
                            .cloned()
                            .unwrap_or(json!({})),
                    }
                })
                .collect();
            if !message.content.is_empty() {
                message.content.push('\n');
            }
            message.content.push_str(&calls_text(&calls));
        }
        out.push(message);
    }
    let prompt = mode.and_then(|t| tools_prompt(&t.tools, &t.choice, t.parallel, json_answer));
    if let Some(prompt) = prompt {
        match out.first_mut() {
            Some(first) if first.role == "system" => {
                first.content.push_str("\n\n");
                first.content.push_str(&prompt);
            }
            _ => out.insert(0, ChatMessage::new("system", prompt)),
        }
    }
    out
}

/// `m`'s role, text and media, without its calls or result fields.
fn bare(m: &ChatMessage) -> ChatMessage {
    let mut out = ChatMessage::new(m.role.clone(), "");
    out.append(m);
    out
}

/// A call in OpenAI's shape, as an assistant message carries it for a
/// template.
pub fn call_value(id: Option<&str>, call: &ToolCall) -> Value {
    let mut v =
        json!({"type": "function", "function": {"name": call.name, "arguments": call.arguments}});
    if let Some(id) = id {
        v["id"] = json!(id);
    }
    v
}

/// A function the model may call.
#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    /// Its name (what a call names).
    pub name: String,
    /// What it does, for the model.
    pub description: Option<String>,
    /// The JSON Schema of its arguments (an object schema).
    pub parameters: Value,
}

/// Whether and which tool the model must call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides: a call or a text reply.
    Auto,
    /// No call: a text reply (the tools are not even described).
    None,
    /// A call to one of the tools.
    Required,
    /// A call to this tool.
    Function(String),
}

/// A call the model made.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The tool's name.
    pub name: String,
    /// Its arguments, a JSON object matching the tool's parameters.
    pub arguments: Value,
}

/// The schema of a call to `tool`.
fn call_schema(tool: &Tool) -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"const": tool.name},
            "arguments": tool.parameters,
        },
        "required": ["name", "arguments"],
        "additionalProperties": false,
    })
}

/// Most calls one reply may hold when parallel calls are allowed.
pub const MAX_PARALLEL_CALLS: usize = 16;

/// The grammar a reply must match under `choice`, or `None` when the reply
/// is free (`none`); with `parallel`, a JSON array of calls is allowed too.
/// Fails when a named tool is not among `tools`.
pub fn tool_grammar(
    tools: &[Tool],
    choice: &ToolChoice,
    parallel: bool,
) -> Result<Option<Grammar>, String> {
    if *choice == ToolChoice::None {
        return Ok(None);
    }
    let allowed = allowed_tools(tools, choice)?;
    let schema = calls_schema(&allowed, parallel);
    // Compiling prepares the schema (closes its objects, holds
    // `uniqueItems`) within the grammar limits, text allowed or not.
    Ok(Some(match choice {
        ToolChoice::Auto => Grammar::JsonOrText(schema),
        _ => Grammar::JsonSchema(schema),
    }))
}

/// The schema of a reply that is a call to one of `allowed`, or with
/// `parallel` an array of such calls.
fn calls_schema(allowed: &[&Tool], parallel: bool) -> Value {
    let schemas: Vec<Value> = allowed.iter().map(|t| call_schema(t)).collect();
    let one = if schemas.len() == 1 {
        schemas.into_iter().next().unwrap_or(Value::Null)
    } else {
        json!({"anyOf": schemas})
    };
    if parallel {
        json!({"anyOf": [one, {"type": "array", "items": one, "minItems": 1, "maxItems": MAX_PARALLEL_CALLS}]})
    } else {
        one
    }
}

/// The grammar of a reply under `tool_choice` `auto` whose answer, when it
/// is not a call, is held to `format` (a JSON Schema): calls to any of
/// `tools`, or the format's JSON. The format's `$defs` and `definitions`
/// move to the root, where its `#/$defs/...` references look for them.
/// Fails when `tools` is empty.
pub fn calls_or_format_grammar(
    tools: &[Tool],
    parallel: bool,
    format: &Value,
) -> Result<Grammar, String> {
    let allowed: Vec<&Tool> = tools.iter().collect();
    if allowed.is_empty() {
        return Err("tool_choice asks for a call but `tools` is empty".into());
    }
    let mut answer = format.clone();
    let mut root = serde_json::Map::new();
    if let Value::Object(fields) = &mut answer {
        for key in ["$defs", "definitions"] {
            if let Some(defs) = fields.remove(key) {
                root.insert(key.into(), defs);
            }
        }
    }
    root.insert(
        "anyOf".into(),
        json!([calls_schema(&allowed, parallel), answer]),
    );
    Ok(Grammar::JsonSchema(Value::Object(root)))
}

/// The text that describes `tools` to the model, for the system turn;
/// `json_answer` when an answer that is not a call is JSON in a format the
/// request gives.
pub fn tools_prompt(
    tools: &[Tool],
    choice: &ToolChoice,
    parallel: bool,
    json_answer: bool,
) -> Option<String> {
    if tools.is_empty() || *choice == ToolChoice::None {
        return None;
    }
    let list: Vec<Value> = tools
        .iter()
        .map(|t| {
            json!({
                "name": t.name,
                "description": t.description.as_deref().unwrap_or(""),
                "parameters": t.parameters,
            })
        })
        .collect();
    let list = serde_json::to_string(&list).unwrap_or_default();
    let mut how = "To call a function, reply with only a JSON object of the form \
               {\"name\": <function name>, \"arguments\": <an object matching its parameters>}."
        .to_string();
    if parallel {
        how.push_str(" To call several at once, reply with a JSON array of such objects.");
    }
    let when = match choice {
        ToolChoice::Function(name) => format!("You must call the function `{name}`."),
        ToolChoice::Required => "You must call one of these functions.".into(),
        _ if json_answer => {
            "Call a function when it helps answer; otherwise reply with only the JSON answer \
             asked for."
                .into()
        }
        _ => "Call a function when it helps answer; otherwise reply in plain text.".into(),
    };
    Some(format!(
        "You can call these functions:\n{list}\n{how} {when} \
         Function results come back in a message that starts with \"Result of\"."
    ))
}

/// A reply that is calls (a call object, or an array of them, each to a
/// tool in `tools`), else `None`.
pub fn parse_tool_calls(text: &str, tools: &[Tool]) -> Option<Vec<ToolCall>> {
    let trimmed = text.trim();
    if !trimmed.starts_with(['{', '[']) {
        return None;
    }
    match serde_json::from_str::<Value>(trimmed).ok()? {
        Value::Array(items) if !items.is_empty() => {
            items.iter().map(|v| call_of(v, tools)).collect()
        }
        v @ Value::Object(_) => call_of(&v, tools).map(|c| vec![c]),
        _ => None,
    }
}

/// A reply that is one call, else `None`.
pub fn parse_tool_call(text: &str, tools: &[Tool]) -> Option<ToolCall> {
    let trimmed = text.trim();
    if !trimmed.starts_with('{') {
        return None;
    }
    call_of(&serde_json::from_str(trimmed).ok()?, tools)
}

/// `v` as a call to one of `tools`.
fn call_of(v: &Value, tools: &[Tool]) -> Option<ToolCall> {
    let name = v.get("name")?.as_str()?;
    if !tools.iter().any(|t| t.name == name) {
        return None;
    }
    let arguments = v.get("arguments")?.clone();
    arguments.is_object().then(|| ToolCall {
        name: name.to_string(),
        arguments,
    })
}

/// How an earlier call is written in the assistant's turn.
pub fn call_text(call: &ToolCall) -> String {
    json!({"name": call.name, "arguments": call.arguments}).to_string()
}

/// How earlier calls of one turn are written: one call alone, several as
/// an array.
pub fn calls_text(calls: &[ToolCall]) -> String {
    match calls {
        [one] => call_text(one),
        _ => Value::Array(
            calls
                .iter()
                .map(|c| json!({"name": c.name, "arguments": c.arguments}))
                .collect(),
        )
        .to_string(),
    }
}

/// How a tool's result is written in the conversation.
pub fn result_text(name: Option<&str>, content: &str) -> String {
    result_prefix(name) + content
}

/// What goes before a tool's result in the conversation.
pub fn result_prefix(name: Option<&str>) -> String {
    match name {
        Some(n) => format!("Result of {n}: "),
        None => "Result of the function call: ".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weather() -> Tool {
        Tool {
            name: "get_weather".into(),
            description: Some("Weather in a city".into()),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        }
    }

    #[test]
    fn calls_parse_only_when_they_name_a_tool() {
        let tools = [weather()];
        let call = parse_tool_call(
            r#" {"name": "get_weather", "arguments": {"city": "Oslo"}}"#,
            &tools,
        )
        .unwrap();
        assert_eq!(call.arguments["city"], "Oslo");
        assert_eq!(
            parse_tool_call(&call_text(&call), &tools),
            Some(call.clone())
        );
        assert!(parse_tool_call(r#"{"name": "other", "arguments": {}}"#, &tools).is_none());
        assert!(parse_tool_call("It is sunny.", &tools).is_none());
        assert!(parse_tool_call(r#"{"name": "get_weather", "arguments": 3}"#, &tools).is_none());
        let two = calls_text(&[call.clone(), call.clone()]);
        assert_eq!(
            parse_tool_calls(&two, &tools),
            Some(vec![call.clone(), call.clone()])
        );
        assert_eq!(
            parse_tool_calls(&call_text(&call), &tools),
            Some(vec![call])
        );
        assert!(parse_tool_calls("[]", &tools).is_none());
        assert!(parse_tool_calls(r#"[{"name": "other", "arguments": {}}]"#, &tools).is_none());
    }

    #[test]
    fn grammars_follow_the_choice() {
        let tools = [weather()];
        assert_eq!(tool_grammar(&tools, &ToolChoice::None, true), Ok(None));
        assert!(matches!(
            tool_grammar(&tools, &ToolChoice::Required, false),
            Ok(Some(Grammar::JsonSchema(_)))
        ));
        assert!(matches!(
            tool_grammar(&tools, &ToolChoice::Auto, true),
            Ok(Some(Grammar::JsonOrText(_)))
        ));
        assert!(
            tool_grammar(&tools, &ToolChoice::Function("nope".into()), true)
                .unwrap_err()
                .contains("nope")
        );
        assert!(tool_grammar(&[], &ToolChoice::Required, true).is_err());
        assert!(tools_prompt(&tools, &ToolChoice::Required, true, false)
            .unwrap()
            .contains("get_weather"));
        assert!(tools_prompt(&tools, &ToolChoice::None, false, false).is_none());
    }
}
