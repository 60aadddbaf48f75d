//! Tool calls read as the model writes them, so their arguments stream in
//! fragments (as OpenAI's and Anthropic's APIs stream them) instead of
//! arriving whole at the end. The grammar fixes the shape: in the JSON
//! convention a call `{"name": "NAME", "arguments": {...}}`, or an array of
//! them; in a model's own syntax `OPEN call:NAME{...} CLOSE` after another,
//! the arguments turned into JSON as they come.

use engine::tools::native::ArgsToJson;
use engine::tools::NativeSyntax;

/// What the reader found in the text so far.
#[derive(Debug, PartialEq)]
pub(crate) enum CallPart {
    /// Call `index` to `name` begins.
    Begin { index: usize, name: String },
    /// More of call `index`'s arguments (JSON text).
    Args { index: usize, fragment: String },
}

#[derive(Debug, PartialEq, Clone, Copy)]
enum State {
    /// Between calls: `[`, `, `, `]` or the `{` that opens a call.
    Between,
    /// Inside a call's object before its arguments' value.
    Head,
    /// Inside the arguments' value.
    Args,
}

/// Reads calls from text that arrives in pieces.
#[derive(Debug)]
pub(crate) enum CallReader {
    /// The JSON convention.
    Json(JsonReader),
    /// A model's own syntax.
    Native(NativeReader),
}

impl CallReader {
    /// A reader for calls in `native` syntax, or the JSON convention.
    pub(crate) fn new(native: Option<&'static NativeSyntax>) -> Self {
        match native {
            Some(syntax) => Self::Native(NativeReader {
                syntax,
                head: String::new(),
                args: None,
                begun: 0,
            }),
            None => Self::Json(JsonReader::new()),
        }
    }

    /// Calls begun so far.
    pub(crate) fn begun(&self) -> usize {
        match self {
            Self::Json(r) => r.begun,
            Self::Native(r) => r.begun,
        }
    }

    /// Read `text`, the next piece of the reply.
    pub(crate) fn feed(&mut self, text: &str, out: &mut Vec<CallPart>) {
        match self {
            Self::Json(r) => r.feed(text, out),
            Self::Native(r) => r.feed(text, out),
        }
    }
}

/// Reads calls in a model's own syntax.
#[derive(Debug)]
pub(crate) struct NativeReader {
    syntax: &'static NativeSyntax,
    /// Text since the last call ended, up to its arguments' `{`.
    head: String,
    /// The arguments being read.
    args: Option<ArgsToJson>,
    begun: usize,
}

impl NativeReader {
    fn feed(&mut self, text: &str, out: &mut Vec<CallPart>) {
        let mut text = text.to_string();
        while !text.is_empty() {
            if let Some(args) = &mut self.args {
                let (json, after) = args.feed(&text);
                if !json.is_empty() {
                    out.push(CallPart::Args {
                        index: self.begun - 1,
                        fragment: json,
                    });
                }
                if !args.done() {
                    return;
                }
                self.args = None;
                text = after;
                continue;
            }
            self.head.push_str(&text);
            text.clear();
            let opener = format!("{}call:", self.syntax.call_open);
            let Some(start) = self.head.find(&opener) else {
                return;
            };
            let Some(brace) = self.head[start..].find('{') else {
                return;
            };
            let name = self.head[start + opener.len()..start + brace].to_string();
            text = self.head[start + brace..].to_string();
            self.head.clear();
            out.push(CallPart::Begin {
                index: self.begun,
                name,
            });
            self.begun += 1;
            self.args = Some(ArgsToJson::new(self.syntax));
        }
    }
}

/// Reads calls in the JSON convention.
#[derive(Debug)]
pub(crate) struct JsonReader {
    state: State,
    head: String,
    /// Calls begun so far.
    begun: usize,
    depth: usize,
    in_string: bool,
    escaped: bool,
}

impl JsonReader {
    fn new() -> Self {
        Self {
            state: State::Between,
            head: String::new(),
            begun: 0,
            depth: 0,
            in_string: false,
            escaped: false,
        }
    }

    fn feed(&mut self, text: &str, out: &mut Vec<CallPart>) {
        let mut args = String::new();
        for c in text.chars() {
            match self.state {
                State::Between => {
                    if c == '{' {
                        self.state = State::Head;
                        self.head.clear();
                        self.head.push(c);
                    }
                }
                State::Head => {
                    self.head.push(c);
                    if self.head.ends_with("\"arguments\": ")
                        || self.head.ends_with("\"arguments\":")
                    {
                        let name = name_in(&self.head).unwrap_or_default();
                        out.push(CallPart::Begin {
                            index: self.begun,
                            name,
                        });
                        self.begun += 1;
                        self.state = State::Args;
                        self.depth = 0;
                        self.in_string = false;
                        self.escaped = false;
                    }
                }
                State::Args => {
                    if self.depth == 0 && c.is_whitespace() && args.is_empty() {
                        continue;
                    }
                    args.push(c);
                    if self.step(c) {
                        // The value is complete; what follows closes the call.
                        self.flush(&mut args, out);
                        self.state = State::Between;
                    }
                }
            }
        }
        self.flush(&mut args, out);
    }

    /// Track nesting through one character of the value; whether the value
    /// ended with it.
    fn step(&mut self, c: char) -> bool {
        if self.in_string {
            match (self.escaped, c) {
                (true, _) => self.escaped = false,
                (false, '\\') => self.escaped = true,
                (false, '"') => self.in_string = false,
                _ => {}
            }
            return false;
        }
        match c {
            '"' => self.in_string = true,
            '{' | '[' => self.depth += 1,
            '}' | ']' => {
                self.depth = self.depth.saturating_sub(1);
                return self.depth == 0;
            }
            _ => {}
        }
        false
    }

    fn flush(&mut self, args: &mut String, out: &mut Vec<CallPart>) {
        if !args.is_empty() {
            out.push(CallPart::Args {
                index: self.begun.saturating_sub(1),
                fragment: std::mem::take(args),
            });
        }
    }
}

/// The name in a call's head: `{"name": "NAME", "arguments":`.
fn name_in(head: &str) -> Option<String> {
    let rest = &head[head.find("\"name\"")? + 6..];
    let rest = rest
        .trim_start()
        .strip_prefix(':')?
        .trim_start()
        .strip_prefix('"')?;
    Some(rest[..rest.find('"')?].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feed `text` in pieces of `n` characters; the calls' names and their
    /// joined arguments.
    fn read(text: &str, n: usize) -> Vec<(String, String)> {
        read_in(None, text, n)
    }

    fn read_in(
        native: Option<&'static NativeSyntax>,
        text: &str,
        n: usize,
    ) -> Vec<(String, String)> {
        let mut r = CallReader::new(native);
        let mut out = Vec::new();
        let chars: Vec<char> = text.chars().collect();
        for piece in chars.chunks(n) {
            r.feed(&piece.iter().collect::<String>(), &mut out);
        }
        let mut calls: Vec<(String, String)> = Vec::new();
        for p in out {
            match p {
                CallPart::Begin { index, name } => {
                    assert_eq!(index, calls.len());
                    calls.push((name, String::new()));
                }
                CallPart::Args { index, fragment } => calls[index].1.push_str(&fragment),
            }
        }
        calls
    }

    #[test]
    fn calls_are_read_in_any_pieces() {
        let one =
            r#"{"name": "get_weather", "arguments": {"city": "Pa}ris \"x\"", "n": [1, {"a": 2}]}}"#;
        let args = r#"{"city": "Pa}ris \"x\"", "n": [1, {"a": 2}]}"#;
        for n in [1, 2, 3, 7, 100] {
            assert_eq!(
                read(one, n),
                vec![("get_weather".to_string(), args.to_string())]
            );
        }
        let two = r#"[{"name": "a", "arguments": {}}, {"name": "b_2", "arguments": {"x": "]"}}]"#;
        for n in [1, 5, 100] {
            assert_eq!(
                read(two, n),
                vec![
                    ("a".to_string(), "{}".to_string()),
                    ("b_2".to_string(), r#"{"x": "]"}"#.to_string())
                ]
            );
        }
        // Cut off inside the arguments: what came is what was read.
        assert_eq!(
            read(r#"{"name": "a", "arguments": {"x": 1"#, 4),
            vec![("a".to_string(), r#"{"x": 1"#.to_string())]
        );
    }

    #[test]
    fn native_calls_are_read_as_json_in_any_pieces() {
        use engine::tools::native::{FUNCTION_GEMMA, GEMMA4};
        let q = GEMMA4.quote;
        let two = format!(
            "<|tool_call>call:get_weather{{city:{q}Pa}}ris, \"x\"{q},days:[1,{{a:true}}],e:{{}}}}<tool_call|>\
             <|tool_call>call:b_2{{}}<tool_call|>"
        );
        let args = r#"{"city":"Pa}ris, \"x\"","days":[1,{"a":true}],"e":{}}"#;
        for n in [1, 2, 3, 7, 200] {
            assert_eq!(
                read_in(Some(&GEMMA4), &two, n),
                vec![
                    ("get_weather".to_string(), args.to_string()),
                    ("b_2".to_string(), "{}".to_string())
                ]
            );
        }
        let q = FUNCTION_GEMMA.quote;
        let one = format!("<start_function_call>call:f{{x:{q}a<b{q},n:-2.5e3}}<end_function_call>");
        assert_eq!(
            read_in(Some(&FUNCTION_GEMMA), &one, 3),
            vec![("f".to_string(), r#"{"x":"a<b","n":-2.5e3}"#.to_string())]
        );
        for (_, json) in read_in(Some(&GEMMA4), &two, 1) {
            serde_json::from_str::<serde_json::Value>(&json).unwrap();
        }
    }
}
