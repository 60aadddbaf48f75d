//! Tool calls for models whose chat template defines no tool format (Gemma 2
//! and 3): a documented JSON convention, enforced by a grammar.
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

use crate::Grammar;
use serde_json::{json, Value};

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
    let allowed: Vec<&Tool> = match choice {
        ToolChoice::None => return Ok(None),
        ToolChoice::Function(name) => match tools.iter().find(|t| &t.name == name) {
            Some(t) => vec![t],
            None => {
                return Err(format!(
                    "tool_choice names `{name}`, which is not in `tools`"
                ))
            }
        },
        ToolChoice::Auto | ToolChoice::Required => tools.iter().collect(),
    };
    if allowed.is_empty() {
        return Err("tool_choice asks for a call but `tools` is empty".into());
    }
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
