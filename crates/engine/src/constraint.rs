//! Constrained decoding: at each step only tokens that keep the output inside
//! a grammar may be sampled.
//!
//! `llguidance` compiles JSON Schemas, regular expressions and Lark grammars
//! (GBNF is converted to Lark first, see [`crate::gbnf`]) into an Earley
//! parser with a lexer, and turns the parser's state into a token mask over
//! a trie of our tokenizer's tokens. A [`Grammars`] is built once per engine
//! (the trie over the whole vocabulary); a [`Constraint`] is one
//! generation's parser.
//!
//! Sampling checks the drawn token first and builds the full mask only when
//! the draw is refused: most tokens of a JSON answer are ones the model
//! would pick anyway, and checking one token costs microseconds where a mask
//! over 262144 tokens costs a millisecond or more.

use crate::{EngineError, Sampler};
use llguidance::api::{ParserLimits, TopLevelGrammar};
use llguidance::{Matcher, ParserFactory};
use serde_json::{json, Value};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokenizer::{TokenType, Tokenizer};
use toktrie::{TokEnv, TokRxInfo, TokTrie, TokenizerEnv};

/// The default bound on a schema or grammar's bytes: far beyond any real schema, and
/// small enough that compiling one cannot stall the server.
pub const MAX_GRAMMAR_BYTES: usize = 256 * 1024;

/// Longest run of digits a JSON constraint lets the model write while the
/// grammar also allows something else. JSON Schema puts no bound on a
/// number's digits, and a small model asked for a score in [0, 1] can write
/// `0.99999…` until `max_tokens`; llama.cpp's schema converter bounds the
/// integral and fractional parts to 16 digits each for the same reason.
pub const MAX_DIGIT_RUN: usize = 16;

/// What the output must match.
#[derive(Debug, Clone, PartialEq)]
pub enum Grammar {
    /// Any JSON object (OpenAI's `{"type": "json_object"}`).
    JsonObject,
    /// A JSON Schema: what OpenAI's structured outputs accept, plus what
    /// llguidance handles beyond it (`$ref`, `anyOf`, patterns, formats,
    /// bounds on numbers, lengths and item counts). Objects that name their
    /// properties are closed unless the schema opens them (see `closed`).
    JsonSchema(Value),
    /// A regular expression the whole output must match (Rust `regex` syntax).
    Regex(String),
    /// A grammar in llguidance's Lark syntax (it may embed `%json {…}`).
    Lark(String),
    /// A grammar in llama.cpp's GBNF, converted to Lark.
    Gbnf(String),
    /// Either JSON matching the schema or text that does not begin with `{`
    /// or `[`: a tool call or a reply, as `tool_choice: auto` allows. The
    /// schema is prepared as [`Grammar::JsonSchema`]'s is.
    JsonOrText(Value),
    /// Tool calls in a model's own syntax: Lark rules that define `calls`
    /// (see [`crate::tools::native`]), alone or as one choice beside
    /// another.
    NativeCalls {
        /// The rules.
        calls: String,
        /// What the reply may be instead of calls.
        or: OrInstead,
    },
}

/// What a reply held to [`Grammar::NativeCalls`] may be instead of calls.
#[derive(Debug, Clone, PartialEq)]
pub enum OrInstead {
    /// Nothing: it is calls.
    Nothing,
    /// Text (which cannot write the call tokens).
    Text,
    /// JSON matching this schema, prepared as [`Grammar::JsonSchema`]'s is.
    Json(Value),
}

impl Grammar {
    /// A short name for messages and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Grammar::JsonObject => "json_object",
            Grammar::JsonSchema(_) => "json_schema",
            Grammar::Regex(_) => "regex",
            Grammar::Lark(_) => "lark grammar",
            Grammar::Gbnf(_) => "GBNF grammar",
            Grammar::JsonOrText(_) | Grammar::NativeCalls { .. } => "tool call schema",
        }
    }
}

/// Why a grammar is refused before llguidance compiles it.
#[derive(Debug, PartialEq)]
pub(crate) enum Refusal {
    /// It is malformed, unsupported, matches nothing or nests too deep.
    Invalid(String),
    /// It, or what our rewrites make of it, is past the byte limit.
    TooLarge(String),
}

impl Refusal {
    /// The engine's error for a `kind` of grammar refused so.
    fn into_error(self, kind: &str) -> EngineError {
        match self {
            Refusal::Invalid(m) => EngineError::InvalidGrammar(format!("{kind}: {m}")),
            Refusal::TooLarge(m) => EngineError::GrammarTooLarge(format!("{kind}: {m}")),
        }
    }
}

/// llguidance's own bounds on a grammar, as it compiles and as each token
/// is masked: its defaults (tuned on large real schemas), stated here so
/// a library update cannot loosen them unseen, without the parser state
/// dumped into errors (we strip it anyway).
fn parser_limits() -> ParserLimits {
    ParserLimits {
        // Earley items in one row: the grammar's branching.
        max_items_in_row: 2000,
        // Regex derivative steps to build the first lexer states (~20 ms).
        initial_lexer_fuel: 1_000_000,
        // Regex derivative steps for one token mask (~15 ms).
        step_lexer_fuel: 200_000,
        // Earley items for one token mask (~2.5 ms).
        step_max_items: 50_000,
        // Lexer states one constraint may build, 1-2 KiB each.
        max_lexer_states: 250_000,
        // Symbols in the grammar's productions.
        max_grammar_size: 500_000,
        precompute_large_lexemes: true,
        verbose_errors: false,
    }
}

/// How JSON is written under a schema unless the schema says otherwise
/// (`x-guidance`): one line, with a space after `:` and `,`. Flexible
/// whitespace lets a small model pad an answer with newlines until
/// `max_tokens` cuts it off; llama.cpp restricts it the same way.
fn compact_json_options() -> Value {
    json!({
        "whitespace_flexible": false,
        "item_separator": ", ",
        "key_separator": ": ",
    })
}

/// The token trie and parser factory of one tokenizer, shared by every
/// constrained generation of an engine.
pub struct Grammars {
    factory: ParserFactory,
    eog: Arc<[u32]>,
    /// Tokens whose bytes begin with an ASCII digit, and the number of
    /// digits each ends with (all of them when it is only digits).
    digits: Arc<[DigitInfo]>,
    build_time: Duration,
}

/// How a token's bytes touch a run of digits.
#[derive(Debug, Clone, Copy, Default)]
struct DigitInfo {
    /// It begins with a digit (it would lengthen a run).
    leads: bool,
    /// It is digits only (the run grows by `trailing`).
    all: bool,
    /// The digits it ends with.
    trailing: u16,
}

impl DigitInfo {
    fn of(bytes: &[u8]) -> Self {
        let trailing = bytes
            .iter()
            .rev()
            .take_while(|b| b.is_ascii_digit())
            .count();
        Self {
            leads: bytes.first().is_some_and(u8::is_ascii_digit),
            all: !bytes.is_empty() && trailing == bytes.len(),
            trailing: trailing.min(u16::MAX as usize) as u16,
        }
    }
}

impl std::fmt::Debug for Grammars {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grammars")
            .field("vocab", &self.factory.tok_env().tok_trie().vocab_size())
            .field("build_time", &self.build_time)
            .finish()
    }
}

/// The tokenizer as llguidance sees it: the trie, and text to ids.
struct TrieEnv {
    trie: TokTrie,
    tokenizer: Arc<Tokenizer>,
}

impl TokenizerEnv for TrieEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<u32> {
        // The valid UTF-8 prefix through the tokenizer, any bytes after it
        // as byte-fallback tokens (they exist in every Gemma vocabulary).
        let valid = match std::str::from_utf8(s) {
            Ok(t) => t,
            Err(e) => std::str::from_utf8(&s[..e.valid_up_to()]).unwrap_or(""),
        };
        let mut ids = self.tokenizer.encode(valid, false, false);
        for b in &s[valid.len()..] {
            if let Some(id) = self.tokenizer.token_id(&format!("<0x{b:02X}>")) {
                ids.push(id);
            }
        }
        ids
    }
}

impl Grammars {
    /// The trie over `tokenizer`'s tokens for logits of `n_vocab` entries
    /// (the model's output rows, which may outnumber the tokenizer's ids).
    pub fn new(tokenizer: Arc<Tokenizer>, n_vocab: usize) -> Result<Self, EngineError> {
        let t0 = Instant::now();
        let n_vocab = n_vocab.max(tokenizer.vocab_size());
        let words: Vec<Vec<u8>> = (0..n_vocab as u32)
            .map(|id| token_word(&tokenizer, id))
            .collect();
        let eog: Arc<[u32]> = tokenizer.eog_ids().into();
        let digits: Arc<[DigitInfo]> = words.iter().map(|w| DigitInfo::of(w)).collect();
        let eos = tokenizer
            .eos_id()
            .or_else(|| eog.first().copied())
            .ok_or_else(|| {
                EngineError::InvalidGrammar(
                    "the model has no end-of-sequence token, so a constrained output could not end"
                        .into(),
                )
            })?;
        let mut info = TokRxInfo::new(n_vocab as u32, eos);
        info.tok_bos = tokenizer.bos_id();
        let trie = TokTrie::from(&info, &words);
        let env: TokEnv = Arc::new(TrieEnv { trie, tokenizer });
        let mut factory = ParserFactory::new_simple(&env).map_err(|e| {
            EngineError::InvalidGrammar(format!("cannot index the vocabulary: {e}"))
        })?;
        factory.quiet();
        *factory.limits_mut() = parser_limits();
        Ok(Self {
            factory,
            eog,
            digits,
            build_time: t0.elapsed(),
        })
    }

    /// How long building the trie took.
    pub fn build_time(&self) -> Duration {
        self.build_time
    }

    /// Compile `grammar` into a fresh constraint, refusing (with a message
    /// that names the problem) a grammar that is invalid, larger than
    /// `max_bytes` (itself or as our rewrites make it), nested deeper than
    /// [`MAX_GRAMMAR_DEPTH`], uses a feature llguidance does not support,
    /// or matches nothing.
    ///
    /// The checks that bound its cost come first, in an order where nothing
    /// recurses over the input before its depth is known. All of it runs on
    /// a thread of its own whose stack holds that depth
    /// ([`depth::COMPILE_STACK`]); a panic there is a failed compile, a bug
    /// to report, and ends no more than this call.
    pub fn compile(&self, grammar: &Grammar, max_bytes: usize) -> Result<Constraint, EngineError> {
        let kind = grammar.kind();
        let compile = || {
            let (source, size) =
                checked_source(grammar, max_bytes).map_err(|r| r.into_error(kind))?;
            self.compile_checked(source, size, max_bytes, kind)
        };
        let compiled = std::thread::scope(|scope| {
            std::thread::Builder::new()
                .name("grammar-compile".into())
                .stack_size(depth::COMPILE_STACK)
                .spawn_scoped(scope, || catch_unwind(AssertUnwindSafe(compile)))
                .map(|worker| worker.join())
        });
        match compiled {
            Ok(Ok(Ok(result))) => result,
            Ok(Ok(Err(panic)) | Err(panic)) => Err(EngineError::Constraint(format!(
                "the grammar compiler failed on this {kind} (a bug): {}",
                panic_message(&*panic)
            ))),
            Err(e) => Err(EngineError::Constraint(format!(
                "cannot start the grammar compiler's thread: {e}"
            ))),
        }
    }

    /// [`Grammars::compile`] past the checks, on the compile thread:
    /// `source` of `size` bytes prepared, compiled and its first mask
    /// taken.
    fn compile_checked(
        &self,
        source: Source,
        size: usize,
        max_bytes: usize,
        kind: &str,
    ) -> Result<Constraint, EngineError> {
        let bad = |msg: String| EngineError::InvalidGrammar(format!("{kind}: {msg}"));
        #[cfg(test)]
        if matches!(&source, Source::Regex(rx) if rx == PANIC_FOR_TESTS) {
            panic!("a panic the tests asked for");
        }
        let digit_cap = source.digit_cap();
        let top = source
            .into_top_level(size, max_bytes)
            .map_err(|r| r.into_error(kind))?;
        let parser = self
            .factory
            .create_parser(top)
            .map_err(|e| bad(clean_error(&e.to_string())))?;
        let mut matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(bad(clean_error(&e)));
        }
        // A grammar that allows no first token and cannot end matches nothing.
        let mask = matcher.compute_mask().map_err(|e| {
            let e = e.to_string();
            if e.starts_with("NoExtension") || matcher.is_stopped() {
                bad("it matches no output at all (a `$ref` cycle without a way out, or rules that never end?)".into())
            } else {
                bad(clean_error(&e))
            }
        })?;
        let accepting = matcher.is_accepting().unwrap_or(false);
        if mask.is_zero() && !accepting {
            return Err(bad("it matches no output at all".into()));
        }
        Ok(Constraint {
            matcher,
            eog: Arc::clone(&self.eog),
            digits: Arc::clone(&self.digits),
            digit_cap,
            digit_run: 0,
            first_mask: Some(mask),
            stats: ConstraintStats::default(),
        })
    }
}

/// A regular expression that makes the compile thread panic, for the test
/// that a panic there ends only that compile.
#[cfg(test)]
const PANIC_FOR_TESTS: &str = "\u{0}panic";

/// A grammar past the checks that bound its cost, ready for the compile
/// thread: what llguidance is given, before our schema rewrites.
enum Source {
    /// Any JSON object.
    JsonObject,
    /// A schema, and whether text may stand in its place.
    Schema { schema: Value, or_text: bool },
    /// A regular expression.
    Regex(String),
    /// A Lark grammar, and whether it came from GBNF.
    Lark { lark: String, from_gbnf: bool },
    /// Native calls' rules, and what else the reply may be.
    Native { calls: String, or: OrInstead },
}

/// `grammar` as a [`Source`] and its size in bytes, refused when larger
/// than `max_bytes` or deeper than [`MAX_GRAMMAR_DEPTH`]. A schema's nesting
/// is checked before anything walks it recursively (measuring its size
/// does), GBNF's size before it is converted.
fn checked_source(grammar: &Grammar, max_bytes: usize) -> Result<(Source, usize), Refusal> {
    let answer = match grammar {
        Grammar::JsonSchema(v)
        | Grammar::JsonOrText(v)
        | Grammar::NativeCalls {
            or: OrInstead::Json(v),
            ..
        } => Some(v),
        _ => None,
    };
    if let Some(v) = answer {
        depth::check_json_nesting(v)?;
    }
    let size = match grammar {
        Grammar::JsonObject => 0,
        Grammar::JsonSchema(v) | Grammar::JsonOrText(v) => growth::json_len(v),
        Grammar::Regex(s) | Grammar::Lark(s) | Grammar::Gbnf(s) => s.len(),
        Grammar::NativeCalls { calls, .. } => calls.len() + answer.map_or(0, growth::json_len),
    };
    if size > max_bytes {
        return Err(Refusal::TooLarge(format!(
            "it is {size} bytes; the limit is {max_bytes} bytes"
        )));
    }
    let source = match grammar {
        Grammar::JsonObject => Source::JsonObject,
        Grammar::JsonSchema(v) | Grammar::JsonOrText(v) => {
            depth::check_schema(v)?;
            Source::Schema {
                schema: v.clone(),
                or_text: matches!(grammar, Grammar::JsonOrText(_)),
            }
        }
        Grammar::Regex(rx) => {
            depth::check_regex_nesting(rx)?;
            Source::Regex(rx.clone())
        }
        Grammar::Lark(src) | Grammar::Gbnf(src) => {
            let from_gbnf = matches!(grammar, Grammar::Gbnf(_));
            let lark = if from_gbnf {
                crate::gbnf::to_lark(src).map_err(Refusal::Invalid)?
            } else {
                src.clone()
            };
            if depth::lark_depth(&lark) > MAX_GRAMMAR_DEPTH {
                return Err(depth::too_deep("counting the rules it uses, it"));
            }
            Source::Lark { lark, from_gbnf }
        }
        Grammar::NativeCalls { calls, or } => {
            if let OrInstead::Json(v) = or {
                depth::check_schema(v)?;
            }
            if depth::lark_depth(calls) > MAX_GRAMMAR_DEPTH {
                return Err(depth::too_deep("counting the rules it uses, it"));
            }
            Source::Native {
                calls: calls.clone(),
                or: or.clone(),
            }
        }
    };
    Ok((source, size))
}

impl Source {
    /// The longest run of digits it allows where something else may come:
    /// [`MAX_DIGIT_RUN`] for JSON and Lark; none for regular expressions
    /// and GBNF, which say exactly what they want.
    fn digit_cap(&self) -> Option<usize> {
        match self {
            Source::JsonObject | Source::Schema { .. } => Some(MAX_DIGIT_RUN),
            Source::Lark { from_gbnf, .. } => (!from_gbnf).then_some(MAX_DIGIT_RUN),
            Source::Native { .. } => Some(MAX_DIGIT_RUN),
            Source::Regex(_) => None,
        }
    }

    /// What llguidance compiles: a schema rewritten (within `max_bytes`,
    /// from `size`) and written compactly unless it says otherwise.
    fn into_top_level(self, size: usize, max_bytes: usize) -> Result<TopLevelGrammar, Refusal> {
        Ok(match self {
            Source::JsonObject => TopLevelGrammar::from_json_schema(
                json!({"type": "object", "x-guidance": compact_json_options()}),
            ),
            Source::Schema { schema, or_text } => {
                let schema = compact_schema(schema, &mut growth::Growth::new(size, max_bytes))?;
                if or_text {
                    TopLevelGrammar::from_lark(format!(
                        "start: call | text\ncall: %json {schema}\ntext: /[^{{\\[][\\s\\S]*/\n"
                    ))
                } else {
                    TopLevelGrammar::from_json_schema(schema)
                }
            }
            Source::Regex(rx) => TopLevelGrammar::from_regex(&rx),
            Source::Lark { lark, .. } => TopLevelGrammar::from_lark(lark),
            Source::Native { calls, or } => {
                let start = match or {
                    OrInstead::Nothing => "start: calls\n".to_string(),
                    OrInstead::Text => "start: calls | TEXT\nTEXT: /[\\s\\S]+/\n".to_string(),
                    OrInstead::Json(answer) => {
                        let answer =
                            compact_schema(answer, &mut growth::Growth::new(size, max_bytes))?;
                        format!("start: calls | answer\nanswer: %json {answer}\n")
                    }
                };
                TopLevelGrammar::from_lark(start + &calls)
            }
        })
    }
}

/// `schema` prepared ([`prepare_schema`]) and written compactly unless it
/// says otherwise (`x-guidance`).
fn compact_schema(mut schema: Value, growth: &mut growth::Growth) -> Result<Value, Refusal> {
    prepare_schema(&mut schema, growth)?;
    match &mut schema {
        Value::Object(map) => {
            map.entry("x-guidance").or_insert_with(compact_json_options);
        }
        Value::Bool(true) => schema = json!({"x-guidance": compact_json_options()}),
        Value::Bool(false) => {
            return Err(Refusal::Invalid(
                "the schema `false` matches nothing".into(),
            ))
        }
        other => {
            return Err(Refusal::Invalid(format!(
                "a schema is a JSON object (or `true`), not {}",
                json_kind(other)
            )))
        }
    }
    Ok(schema)
}

/// What a panic said, when it said it in words.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("no message")
}

/// The bytes of token `id` in the trie: its text for ordinary, byte and
/// user-defined tokens; a name behind llguidance's special-token marker
/// (0xFF, never in UTF-8 text) for control, unknown and unused ones, so text
/// never spells them and a Lark grammar may still name them (`<end_of_turn>`).
fn token_word(tokenizer: &Tokenizer, id: u32) -> Vec<u8> {
    let special = |name: &str| {
        let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
        w.extend_from_slice(name.as_bytes());
        w
    };
    match tokenizer.token_type(id) {
        Some(TokenType::Normal | TokenType::Byte | TokenType::UserDefined) => {
            let bytes = tokenizer.token_bytes(id, false);
            if bytes.is_empty() {
                special(&format!("<[{id}]>"))
            } else {
                bytes.into_owned()
            }
        }
        Some(_) => match tokenizer.token_text(id) {
            Some(text) if !text.is_empty() => special(text),
            _ => special(&format!("<[{id}]>")),
        },
        None => special(&format!("<[{id}]>")),
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// llguidance's messages, on one line and without its internal backtrace.
/// Each line is cut short on its own, so an echo of a long input (a regex
/// parser quotes the whole expression) cannot push out the line that
/// says what is wrong.
fn clean_error(msg: &str) -> String {
    let first = msg.split("\nStack backtrace").next().unwrap_or(msg);
    // The parser's state dump helps llguidance's authors, not our users.
    let first = first.split("<state>").next().unwrap_or(first);
    let first = first.split("<non-verbose/>").next().unwrap_or(first);
    let one_line: Vec<&str> = first
        .lines()
        .map(|l| cut(l.trim(), 200))
        .filter(|l| !l.is_empty())
        .collect();
    let s = one_line.join("; ");
    if s.len() > 600 {
        return format!("{}…", cut(&s, 600));
    }
    s
}

/// The start of `s`, at most `max` bytes of it on a character boundary.
fn cut(s: &str, max: usize) -> &str {
    let mut end = max.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

mod live;
pub use live::{Constraint, ConstraintStats};

mod closed;
mod depth;
mod growth;
mod unique;

pub use depth::MAX_GRAMMAR_DEPTH;

/// A JSON Schema as llguidance gets it: objects closed unless opened
/// ([`closed`]), `uniqueItems` held by listing the arrays it allows where
/// that is exact, dropped where not ([`unique`]), neither growing it past
/// `growth`'s limit. An error says what in the schema cannot be met.
fn prepare_schema(schema: &mut Value, growth: &mut growth::Growth) -> Result<(), Refusal> {
    closed::close_objects(schema, growth)?;
    unique::expand_unique_items(schema, growth).map(drop)
}

#[cfg(test)]
mod tests;
