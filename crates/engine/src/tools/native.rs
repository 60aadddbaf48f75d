//! Tool calls in the syntax a model was trained on, for models whose chat
//! template writes calls itself: Gemma 4's
//! `<|tool_call>call:NAME{key:VALUE,…}<tool_call|>` and FunctionGemma's
//! `<start_function_call>call:NAME{…}<end_function_call>`.
//!
//! A value is JSON's, except that a string sits between two quote tokens
//! (`<|"|>`, `<escape>`) with its text as it is, and an object's keys are
//! bare (`{city:<|"|>Oslo<|"|>,days:3}`). The template renders the tools,
//! earlier calls and their results; this module holds a reply to the
//! syntax with a grammar built from each tool's parameter schema
//! ([`calls_lark`]), reads the calls back as JSON ([`parse_calls`]), and
//! turns a call's arguments into JSON text as they are written
//! ([`ArgsToJson`]), so calls stream as the JSON convention's do.

use super::{Tool, ToolCall, MAX_PARALLEL_CALLS};
use serde_json::{Map, Value};
use std::collections::{HashMap, HashSet};
use std::fmt::Write;

/// A model family's call syntax: the tokens around a call and a string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NativeSyntax {
    /// The family, for messages and docs.
    pub family: &'static str,
    /// The token that opens a call (`call:NAME{…}` follows).
    pub call_open: &'static str,
    /// The token that closes a call.
    pub call_close: &'static str,
    /// The token on each side of a string.
    pub quote: &'static str,
    /// What a template that writes calls in this syntax contains.
    sign: &'static str,
}

/// Gemma 4's syntax.
pub const GEMMA4: NativeSyntax = NativeSyntax {
    family: "Gemma 4",
    call_open: "<|tool_call>",
    call_close: "<tool_call|>",
    quote: "<|\"|>",
    sign: "<|tool_call>call:",
};

/// FunctionGemma's syntax.
pub const FUNCTION_GEMMA: NativeSyntax = NativeSyntax {
    family: "FunctionGemma",
    call_open: "<start_function_call>",
    call_close: "<end_function_call>",
    quote: "<escape>",
    sign: "<start_function_call>call:",
};

impl NativeSyntax {
    /// The syntax a chat template writes calls in, when it is one of ours.
    pub fn of_template(source: &str) -> Option<&'static NativeSyntax> {
        [&GEMMA4, &FUNCTION_GEMMA]
            .into_iter()
            .find(|s| source.contains(s.sign))
    }

    /// The three tokens, in the order the grammar takes their ids.
    pub fn tokens(&self) -> [&'static str; 3] {
        [self.call_open, self.call_close, self.quote]
    }
}

/// A syntax bound to a vocabulary: the ids of its three tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NativeTools {
    /// The syntax.
    pub syntax: &'static NativeSyntax,
    /// The ids of `call_open`, `call_close` and `quote`.
    pub ids: [u32; 3],
}

/// The most bytes of grammar the tools' schemas may make (the grammar
/// grows with the schemas; this bounds what a request can make it cost).
const MAX_LARK_BYTES: usize = 4 << 20;

/// Lark rules for `calls`: one call to one of `tools` (with `parallel`, up
/// to [`MAX_PARALLEL_CALLS`]), each call's arguments held to its tool's
/// parameter schema in the native syntax; properties in the order the
/// templates write them (`dictsort`: by name, ignoring case). Refused when
/// the schemas make a grammar past [`MAX_LARK_BYTES`].
pub fn calls_lark(native: &NativeTools, tools: &[&Tool], parallel: bool) -> Result<String, String> {
    let [open, close, quote] = native.ids;
    let mut rules = Rules::new(native.syntax, format!("<[{quote}]>"));
    let mut alternatives = Vec::with_capacity(tools.len());
    for (i, tool) in tools.iter().enumerate() {
        rules.root = &tool.parameters;
        rules.refs.clear();
        let args = rules.object_or_any(&tool.parameters)?;
        let name = format!("tool_{i}");
        rules.define(
            &name,
            &format!("{} {args}", lit(&format!("call:{}", tool.name))),
        )?;
        alternatives.push(name);
    }
    let many = if parallel {
        format!("call{{1,{MAX_PARALLEL_CALLS}}}")
    } else {
        "call".into()
    };
    let mut out = format!(
        "calls: {many}\ncall: <[{open}]> ({}) <[{close}]>\n",
        alternatives.join(" | ")
    );
    out.push_str(&rules.text);
    Ok(out)
}

/// Writes Lark rules for schemas in the native value syntax.
struct Rules<'a> {
    /// The syntax, for messages.
    syntax: &'static NativeSyntax,
    /// The rules so far.
    text: String,
    /// How a string's quote is written in Lark (`<[id]>`).
    quote: String,
    /// The regex of a string's text: anything without the quote in it.
    string_text: String,
    /// The quote's text, which no key or literal may hold.
    quote_text: String,
    /// The shared rules made so far.
    shared: HashSet<Shared>,
    /// The tool's parameter schema, which `$ref`s point into.
    root: &'a Value,
    /// Rules made for `$ref`s of this tool, by pointer.
    refs: HashMap<String, String>,
    next: usize,
    /// How deep in the schema (through `$ref`s too) the walk is.
    depth: usize,
}

/// The rules every schema shares, made once on first use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Shared {
    String,
    Integer,
    Number,
    Any,
    AnyDict,
    AnyArray,
}

impl Shared {
    /// The rule's name in the grammar.
    fn name(self) -> &'static str {
        match self {
            Shared::String => "string",
            Shared::Integer => "integer",
            Shared::Number => "number",
            Shared::Any => "any",
            Shared::AnyDict => "any_dict",
            Shared::AnyArray => "any_array",
        }
    }
}

/// The deepest a tool's schema may nest (through `$ref`s too) for the call
/// grammar: the walk recurses once a level.
const MAX_SCHEMA_DEPTH: usize = 128;

/// JSON Schema's type names.
const TYPES: [&str; 7] = [
    "string", "integer", "number", "boolean", "null", "array", "object",
];

impl<'a> Rules<'a> {
    fn new(syntax: &'static NativeSyntax, quote: String) -> Self {
        let quote_text = syntax.quote;
        Self {
            syntax,
            text: String::new(),
            quote,
            string_text: avoiding(quote_text),
            quote_text: quote_text.to_string(),
            shared: HashSet::new(),
            root: &Value::Null,
            refs: HashMap::new(),
            next: 0,
            depth: 0,
        }
    }

    fn define(&mut self, name: &str, body: &str) -> Result<(), String> {
        // Writing to a String cannot fail.
        let _ = writeln!(self.text, "{name}: {body}");
        if self.text.len() > MAX_LARK_BYTES {
            return Err(format!(
                "the tools' parameter schemas make a call grammar of more than {MAX_LARK_BYTES} bytes"
            ));
        }
        Ok(())
    }

    fn fresh(&mut self, kind: &str) -> String {
        self.next += 1;
        format!("{kind}_{}", self.next)
    }

    /// A rule shared by every schema, made on first use; its name.
    fn shared(&mut self, rule: Shared) -> Result<&'static str, String> {
        let name = rule.name();
        if !self.shared.insert(rule) {
            return Ok(name);
        }
        let q = self.quote.clone();
        match rule {
            Shared::String => {
                let text = self.string_text.clone();
                self.define(name, &format!("{q} {q} | {q} STRING_TEXT {q}"))?;
                self.define("STRING_TEXT", &format!("/{text}/"))?;
            }
            Shared::Any => {
                let (s, n, d, a) = (
                    self.shared(Shared::String)?,
                    self.shared(Shared::Number)?,
                    self.shared(Shared::AnyDict)?,
                    self.shared(Shared::AnyArray)?,
                );
                self.define(
                    name,
                    &format!("{s} | {n} | \"true\" | \"false\" | \"null\" | {d} | {a}"),
                )?;
            }
            Shared::AnyDict => {
                let any = self.shared(Shared::Any)?;
                self.define(name, "\"{\" (any_pair (\",\" any_pair)*)? \"}\"")?;
                self.define("any_pair", &format!("KEY \":\" {any}"))?;
                self.define("KEY", "/[A-Za-z_$][A-Za-z0-9_.$-]*/")?;
            }
            Shared::AnyArray => {
                let any = self.shared(Shared::Any)?;
                self.define(name, &format!("\"[\" ({any} (\",\" {any})*)? \"]\""))?;
            }
            Shared::Integer => self.define(name, "/-?(0|[1-9][0-9]*)/")?,
            Shared::Number => self.define(
                name,
                "/-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][+-]?[0-9]{1,2})?/",
            )?,
        }
        Ok(name)
    }

    /// Arguments: an object schema's rule (closed: only the properties it
    /// names, none when it names none), or any object when it names no
    /// `properties` at all.
    fn object_or_any(&mut self, schema: &Value) -> Result<String, String> {
        match schema.get("properties") {
            Some(Value::Object(_)) => self.value(schema),
            _ => Ok(self.shared(Shared::AnyDict)?.to_string()),
        }
    }

    /// The rule (or expression) of a value matching `schema`, refused past
    /// [`MAX_SCHEMA_DEPTH`].
    fn value(&mut self, schema: &Value) -> Result<String, String> {
        if self.depth >= MAX_SCHEMA_DEPTH {
            return Err(format!(
                "a tool's parameter schema nests deeper than {MAX_SCHEMA_DEPTH} levels"
            ));
        }
        self.depth += 1;
        let rule = self.value_within(schema);
        self.depth -= 1;
        rule
    }

    fn value_within(&mut self, schema: &Value) -> Result<String, String> {
        let Value::Object(s) = schema else {
            // `true`, `{}` or something we do not read: any value.
            return Ok(self.shared(Shared::Any)?.into());
        };
        if let Some(Value::String(pointer)) = s.get("$ref") {
            return self.reference(pointer);
        }
        if let Some(c) = s.get("const") {
            return self.literal(c);
        }
        if let Some(Value::Array(options)) = s.get("enum") {
            let alts = options
                .iter()
                .map(|v| self.literal(v))
                .collect::<Result<Vec<_>, _>>()?;
            return alternatives(alts, "enum");
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(Value::Array(options)) = s.get(key) {
                let alts = options
                    .iter()
                    .map(|o| self.value(o))
                    .collect::<Result<Vec<_>, _>>()?;
                return alternatives(alts, key);
            }
        }
        match s.get("type") {
            Some(Value::Array(types)) => {
                // Each type once, and only JSON Schema's: at most seven.
                let mut seen = Vec::with_capacity(TYPES.len());
                for t in types {
                    match t.as_str() {
                        Some(name) if TYPES.contains(&name) => {
                            if !seen.contains(&name) {
                                seen.push(name);
                            }
                        }
                        _ => {
                            return Err(format!(
                                "`type` lists {t}, which is not a JSON Schema type"
                            ))
                        }
                    }
                }
                let alts = seen
                    .into_iter()
                    .map(|t| self.typed(t, s))
                    .collect::<Result<Vec<_>, _>>()?;
                alternatives(alts, "type")
            }
            Some(Value::String(t)) => self.typed(t, s),
            _ if s.contains_key("properties") => self.typed("object", s),
            _ if s.contains_key("items") => self.typed("array", s),
            _ => Ok(self.shared(Shared::Any)?.into()),
        }
    }

    fn typed(&mut self, ty: &str, s: &Map<String, Value>) -> Result<String, String> {
        Ok(match ty {
            "string" => self.shared(Shared::String)?.into(),
            "integer" => self.shared(Shared::Integer)?.into(),
            "number" => self.shared(Shared::Number)?.into(),
            "boolean" => "(\"true\" | \"false\")".into(),
            "null" => "\"null\"".into(),
            "array" => {
                let item = match s.get("items") {
                    Some(items) => self.value(items)?,
                    None => self.shared(Shared::Any)?.into(),
                };
                let name = self.fresh("array");
                self.define(&name, &format!("\"[\" ({item} (\",\" {item})*)? \"]\""))?;
                name
            }
            "object" => match s.get("properties") {
                Some(Value::Object(props)) if props.is_empty() => "(\"{\" \"}\")".into(),
                Some(Value::Object(props)) => self.object(s, props)?,
                _ => self.shared(Shared::AnyDict)?.into(),
            },
            _ => self.shared(Shared::Any)?.into(),
        })
    }

    /// An object with these properties, in the template's order, each
    /// optional one present or not, separated by commas.
    fn object(
        &mut self,
        s: &Map<String, Value>,
        props: &Map<String, Value>,
    ) -> Result<String, String> {
        let required: std::collections::HashSet<&str> = match s.get("required") {
            Some(Value::Array(r)) => r.iter().filter_map(Value::as_str).collect(),
            _ => std::collections::HashSet::new(),
        };
        let mut names: Vec<&String> = props.keys().collect();
        names.sort_by_cached_key(|n| (n.to_lowercase(), n.as_str()));
        let mut pairs = Vec::with_capacity(names.len());
        for name in &names {
            self.check_key(name)?;
            let value = self.value(&props[name.as_str()])?;
            pairs.push((
                format!("{} {value}", lit(&format!("{name}:"))),
                required.contains(&name.as_str()),
            ));
        }
        let base = self.fresh("object");
        let rest = self.sequence(&base, &pairs)?;
        let name = base.clone();
        let body = match rest {
            Some((r, true)) => format!("\"{{\" {r}? \"}}\""),
            Some((r, false)) => format!("\"{{\" {r} \"}}\""),
            None => "\"{\" \"}\"".into(),
        };
        self.define(&name, &body)?;
        Ok(name)
    }

    /// Rules for the pairs from each position on, with and without one
    /// before (which puts a comma first): the rule of the whole sequence
    /// and whether it may be empty (then it holds only its nonempty forms).
    fn sequence(
        &mut self,
        base: &str,
        pairs: &[(String, bool)],
    ) -> Result<Option<(String, bool)>, String> {
        // From the last position back: `after[b]` is the rule from j+1 on.
        let mut after: [Option<(String, bool)>; 2] = [None, None];
        for (j, (pair, required)) in pairs.iter().enumerate().rev() {
            let mut now: [Option<(String, bool)>; 2] = [None, None];
            for before in [false, true] {
                let sep = if before { "\",\" " } else { "" };
                let tail = match &after[1] {
                    Some((r, true)) => format!(" {r}?"),
                    Some((r, false)) => format!(" {r}"),
                    None => String::new(),
                };
                let present = format!("{sep}{pair}{tail}");
                let name = format!("{base}_{j}_{}", u8::from(before));
                let (body, nullable) = match (required, &after[usize::from(before)]) {
                    (true, _) => (present, false),
                    (false, Some((r, _))) => (
                        format!("{present} | {r}"),
                        after[usize::from(before)].as_ref().is_some_and(|a| a.1),
                    ),
                    (false, None) => (present, true),
                };
                self.define(&name, &body)?;
                now[usize::from(before)] = Some((name, nullable));
            }
            after = now;
        }
        Ok(after[0].take())
    }

    /// A `$ref` into the tool's schema (`#/$defs/X`), made once per tool so
    /// a recursive schema is a recursive rule.
    fn reference(&mut self, pointer: &str) -> Result<String, String> {
        if let Some(name) = self.refs.get(pointer) {
            return Ok(name.clone());
        }
        let root: &'a Value = self.root;
        let target = pointer
            .strip_prefix('#')
            .and_then(|p| root.pointer(p))
            .ok_or_else(|| format!("`$ref` `{pointer}` points at nothing in the parameters"))?;
        let name = self.fresh("ref");
        self.refs.insert(pointer.to_string(), name.clone());
        let body = self.value(target)?;
        self.define(&name, &body)?;
        Ok(name)
    }

    /// A property name as a bare key: refused when the syntax could not
    /// read it back (empty, or holding a delimiter or the quote's text).
    fn check_key(&self, name: &str) -> Result<(), String> {
        let bad = name.is_empty()
            || name.contains(|c: char| ":,{}[]<>\"".contains(c) || c.is_control())
            || name.contains(&self.quote_text);
        match bad {
            true => Err(format!(
                "the property name {name:?} cannot be written as a bare key in {}'s call syntax",
                self.syntax.family
            )),
            false => Ok(()),
        }
    }

    /// `v` written in the native syntax, as a Lark expression; refused
    /// when a string holds the quote's text (it could not be read back).
    fn literal(&self, v: &Value) -> Result<String, String> {
        if self.depth >= MAX_SCHEMA_DEPTH {
            return Err(format!(
                "a literal nests deeper than {MAX_SCHEMA_DEPTH} levels"
            ));
        }
        Ok(match v {
            Value::String(s) if s.contains(&self.quote_text) => {
                return Err(format!(
                    "the value {s:?} holds the quote of {}'s call syntax",
                    self.syntax.family
                ))
            }
            Value::String(s) => format!("{} {} {}", self.quote, lit(s), self.quote),
            Value::Array(items) => {
                let mut parts = vec!["\"[\"".to_string()];
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        parts.push("\",\"".into());
                    }
                    parts.push(self.literal(item)?);
                }
                parts.push("\"]\"".into());
                parts.join(" ")
            }
            Value::Object(fields) => {
                let mut parts = vec!["\"{\"".to_string()];
                for (i, (k, item)) in fields.iter().enumerate() {
                    if i > 0 {
                        parts.push("\",\"".into());
                    }
                    self.check_key(k)?;
                    parts.push(lit(&format!("{k}:")));
                    parts.push(self.literal(item)?);
                }
                parts.push("\"}\"".into());
                parts.join(" ")
            }
            other => lit(&other.to_string()),
        })
    }
}

/// `alts` as one Lark expression; an empty list (`what` lists nothing)
/// matches nothing and is refused.
fn alternatives(alts: Vec<String>, what: &str) -> Result<String, String> {
    match alts.len() {
        0 => Err(format!(
            "`{what}` lists nothing, so no value could match it"
        )),
        1 => Ok(alts.into_iter().next().unwrap_or_default()),
        _ => Ok(format!("({})", alts.join(" | "))),
    }
}

/// `s` as a Lark string literal (DEL escaped too: Lark's lexer refuses it
/// raw).
fn lit(s: &str) -> String {
    serde_json::to_string(s)
        .unwrap_or_else(|_| "\"\"".into())
        .replace('\u{7f}', "\\u007f")
}

/// A regex for nonempty text in which `marker` (one `<`, at its start,
/// then text without `<`) never occurs: every `<` is followed by a proper
/// prefix of the rest and then something else, or by another `<`, or ends
/// the text.
fn avoiding(marker: &str) -> String {
    let rest: Vec<char> = marker.chars().skip(1).collect();
    let class = |c: char| {
        let mut out = String::from("[^<");
        push_class_char(&mut out, c);
        out.push(']');
        out
    };
    let prefix = |k: usize| {
        rest[..k]
            .iter()
            .map(|&c| escape_char(c))
            .collect::<String>()
    };
    // `<` and a proper prefix of the rest: a marker not (yet) finished.
    let pending = format!(
        "(<(?:{}))",
        (0..rest.len()).map(prefix).collect::<Vec<_>>().join("|")
    );
    // `<`, a proper prefix, then a character that leaves the marker.
    let broken = format!(
        "(<(?:{}))",
        (0..rest.len())
            .map(|k| format!("{}{}", prefix(k), class(rest[k])))
            .collect::<Vec<_>>()
            .join("|")
    );
    let unit = format!("([^<]|{pending}*{broken})");
    format!("{unit}+{pending}*|{pending}+")
}

fn escape_char(c: char) -> String {
    if c.is_ascii_alphanumeric() || c == '_' || c == ' ' || c == '>' || c == '"' || c == ':' {
        c.to_string()
    } else {
        format!("\\x{{{:x}}}", c as u32)
    }
}

fn push_class_char(out: &mut String, c: char) {
    if c.is_ascii_alphanumeric() {
        out.push(c);
    } else {
        let _ = write!(out, "\\x{{{:x}}}", c as u32);
    }
}

/// The calls in `text` (a reply whose special tokens are written out), each
/// to one of `tools`, or `None` when it is not calls from start to end.
pub fn parse_calls(syntax: &NativeSyntax, text: &str, tools: &[Tool]) -> Option<Vec<ToolCall>> {
    let mut rest = text.trim();
    let mut calls = Vec::new();
    while !rest.is_empty() {
        rest = rest.strip_prefix(syntax.call_open)?.strip_prefix("call:")?;
        let brace = rest.find('{')?;
        let name = &rest[..brace];
        if !tools.iter().any(|t| t.name == name) {
            return None;
        }
        let mut reader = ValueReader {
            text: &rest[brace..],
            quote: syntax.quote,
        };
        let arguments = reader.value(0)?;
        if !arguments.is_object() {
            return None;
        }
        rest = reader.text.strip_prefix(syntax.call_close)?.trim_start();
        calls.push(ToolCall {
            name: name.to_string(),
            arguments,
        });
    }
    (!calls.is_empty()).then_some(calls)
}

/// Most nesting a call's arguments may have when read back.
const MAX_VALUE_DEPTH: usize = 128;

/// Reads one native value from the front of `text`.
struct ValueReader<'a> {
    text: &'a str,
    quote: &'a str,
}

impl ValueReader<'_> {
    fn value(&mut self, depth: usize) -> Option<Value> {
        if depth > MAX_VALUE_DEPTH {
            return None;
        }
        if let Some(after) = self.text.strip_prefix(self.quote) {
            let end = after.find(self.quote)?;
            self.text = &after[end + self.quote.len()..];
            return Some(Value::String(after[..end].to_string()));
        }
        if let Some(after) = self.text.strip_prefix('{') {
            self.text = after;
            let mut fields = Map::new();
            if let Some(after) = self.text.strip_prefix('}') {
                self.text = after;
                return Some(Value::Object(fields));
            }
            loop {
                let colon = self.text.find(':')?;
                let key = self.text[..colon].to_string();
                self.text = &self.text[colon + 1..];
                let v = self.value(depth + 1)?;
                fields.insert(key, v);
                match self.text.chars().next()? {
                    ',' => self.text = &self.text[1..],
                    '}' => {
                        self.text = &self.text[1..];
                        return Some(Value::Object(fields));
                    }
                    _ => return None,
                }
            }
        }
        if let Some(after) = self.text.strip_prefix('[') {
            self.text = after;
            let mut items = Vec::new();
            if let Some(after) = self.text.strip_prefix(']') {
                self.text = after;
                return Some(Value::Array(items));
            }
            loop {
                items.push(self.value(depth + 1)?);
                match self.text.chars().next()? {
                    ',' => self.text = &self.text[1..],
                    ']' => {
                        self.text = &self.text[1..];
                        return Some(Value::Array(items));
                    }
                    _ => return None,
                }
            }
        }
        // A number, `true`, `false` or `null`: up to the next delimiter.
        let end = self
            .text
            .find([',', '}', ']', '<'])
            .unwrap_or(self.text.len());
        let v: Value = serde_json::from_str(&self.text[..end]).ok()?;
        matches!(v, Value::Number(_) | Value::Bool(_) | Value::Null).then(|| {
            self.text = &self.text[end..];
            v
        })
    }
}

/// Turns a call's native arguments into JSON text as they arrive in
/// pieces, for streaming: keys are quoted, strings between quote tokens
/// become JSON strings, the rest is copied. It reads what the grammar lets
/// through; anything else is copied as it is (the whole call, parsed at
/// the end, is what counts).
#[derive(Debug)]
pub struct ArgsToJson {
    quote: &'static str,
    /// Unread text (a quote token may arrive split).
    pending: String,
    /// For each open container, whether it is an object.
    stack: Vec<bool>,
    in_string: bool,
    /// An object's key being read.
    key: Option<String>,
    /// Whether the arguments' object has closed.
    done: bool,
}

impl ArgsToJson {
    /// A reader for arguments that begin with their `{`.
    pub fn new(syntax: &NativeSyntax) -> Self {
        Self {
            quote: syntax.quote,
            pending: String::new(),
            stack: Vec::new(),
            in_string: false,
            key: None,
            done: false,
        }
    }

    /// Whether the arguments' object has closed (what follows is not
    /// theirs).
    pub fn done(&self) -> bool {
        self.done
    }

    /// Read `text`; returns the JSON text it adds, and the text after the
    /// arguments once they close.
    pub fn feed(&mut self, text: &str) -> (String, String) {
        self.pending.push_str(text);
        let mut out = String::new();
        let pending = std::mem::take(&mut self.pending);
        let mut at = 0;
        while at < pending.len() && !self.done {
            let rest = &pending[at..];
            if rest.starts_with(self.quote) {
                self.in_string = !self.in_string;
                out.push('"');
                at += self.quote.len();
                continue;
            }
            if self.quote.starts_with(rest) {
                // Perhaps a quote token split across pieces: wait.
                break;
            }
            let c = rest.chars().next().unwrap_or_default();
            at += c.len_utf8();
            self.char(c, &mut out);
        }
        let after = if self.done {
            pending[at..].to_string()
        } else {
            String::new()
        };
        if !self.done {
            self.pending = pending[at..].to_string();
        }
        (out, after)
    }

    fn char(&mut self, c: char, out: &mut String) {
        if self.in_string {
            let mut buf = [0; 4];
            let quoted = serde_json::to_string(c.encode_utf8(&mut buf)).unwrap_or_default();
            out.push_str(&quoted[1..quoted.len() - 1]);
            return;
        }
        if let Some(key) = &mut self.key {
            if c == '}' && key.is_empty() {
                // An empty object.
                self.key = None;
                out.push(c);
                self.stack.pop();
                self.done = self.stack.is_empty();
            } else if c == ':' {
                out.push_str(&serde_json::to_string(key.as_str()).unwrap_or_default());
                out.push(':');
                self.key = None;
            } else {
                key.push(c);
            }
            return;
        }
        out.push(c);
        match c {
            '{' => {
                self.stack.push(true);
                self.key = Some(String::new());
            }
            '[' => self.stack.push(false),
            '}' | ']' => {
                self.stack.pop();
                self.done = self.stack.is_empty();
            }
            ',' if self.stack.last() == Some(&true) => self.key = Some(String::new()),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests;
