//! Fuzz the chat-template renderer with generated templates: the input is
//! decoded (`arbitrary`) into a small Jinja syntax tree (loops over ranges
//! and messages, nested loops, conditionals, macros that call themselves,
//! `namespace` counters, filters, string repetition, Python methods) and a
//! conversation, rendered to template text, compiled with
//! `ChatTemplate::jinja` and rendered with the default step limit.
//!
//! Plain byte mutation rarely produces a template that compiles and loops;
//! this reaches the renderer's limits (steps, output bytes, recursion)
//! directly.
//!
//! `HEARTH_FUZZ_PRINT=1` prints the generated text (to replay a failure).
//!
//! Invariants: no panic, no hang, no runaway memory; a successful render
//! is at most `tokenizer::MAX_RENDER_BYTES` bytes.

#![no_main]

use hearth_fuzz::tokenizer::{ChatMessage, ChatTemplate, MAX_RENDER_BYTES};
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use std::fmt::Write;

#[derive(Debug, Arbitrary)]
enum Var {
    Messages,
    Message,
    Bos,
    Eos,
    AddGen,
    Thinking,
    Ns,
    NsBare,
    X,
    Y,
    Loop,
}

impl Var {
    fn name(&self) -> &'static str {
        match self {
            Var::Messages => "messages",
            Var::Message => "message",
            Var::Bos => "bos_token",
            Var::Eos => "eos_token",
            Var::AddGen => "add_generation_prompt",
            Var::Thinking => "enable_thinking",
            Var::Ns => "ns.n",
            // Storing the bare namespace in itself (`set ns.n = ns`) makes
            // a cycle; `ChatTemplate::jinja` refuses such templates.
            Var::NsBare => "ns",
            Var::X => "x",
            Var::Y => "y",
            Var::Loop => "loop",
        }
    }
}

#[derive(Debug, Arbitrary)]
enum Filter {
    Length,
    Trim,
    Upper,
    Join,
    List,
    Reverse,
    Sort,
    ToJson,
    Safe,
    Int,
    First,
    Last,
    Default,
    Items,
    Replace,
    Batch,
    Indent,
    Unique,
    Sum,
    Abs,
}

impl Filter {
    fn text(&self) -> &'static str {
        match self {
            Filter::Length => "length",
            Filter::Trim => "trim",
            Filter::Upper => "upper",
            Filter::Join => "join(', ')",
            Filter::List => "list",
            Filter::Reverse => "reverse",
            Filter::Sort => "sort",
            Filter::ToJson => "tojson",
            Filter::Safe => "safe",
            Filter::Int => "int",
            Filter::First => "first",
            Filter::Last => "last",
            Filter::Default => "default('d')",
            Filter::Items => "items",
            Filter::Replace => "replace('a', 'aaaa')",
            Filter::Batch => "batch(3)",
            Filter::Indent => "indent(4)",
            Filter::Unique => "unique",
            Filter::Sum => "sum",
            Filter::Abs => "abs",
        }
    }
}

#[derive(Debug, Arbitrary)]
enum Method {
    Strip,
    StartsWith,
    Split,
    Upper,
    Items,
    Get,
    Append,
    Format,
}

#[derive(Debug, Arbitrary)]
enum Op {
    Add,
    Sub,
    Mul,
    Pow,
    Div,
    FloorDiv,
    Mod,
    Concat,
    Eq,
    Lt,
    And,
    Or,
    In,
}

impl Op {
    fn text(&self) -> &'static str {
        match self {
            Op::Add => "+",
            Op::Sub => "-",
            Op::Mul => "*",
            Op::Pow => "**",
            Op::Div => "/",
            Op::FloorDiv => "//",
            Op::Mod => "%",
            Op::Concat => "~",
            Op::Eq => "==",
            Op::Lt => "<",
            Op::And => "and",
            Op::Or => "or",
            Op::In => "in",
        }
    }
}

#[derive(Debug, Arbitrary)]
enum Expr {
    Var(Var),
    Int(i32),
    Big(u8),
    Str(String),
    Attr(Box<Expr>, AttrName),
    Index(Box<Expr>, Box<Expr>),
    Range(Box<Expr>),
    Range3(Box<Expr>, Box<Expr>, Box<Expr>),
    Bin(Box<Expr>, Op, Box<Expr>),
    Not(Box<Expr>),
    Filter(Box<Expr>, Filter),
    Method(Box<Expr>, Method),
    List(Vec<Expr>),
    Dict(Vec<(String, Expr)>),
    Cond(Box<Expr>, Box<Expr>, Box<Expr>),
    CallMacro(u8, Vec<Expr>),
    Raise(Box<Expr>),
    Slice(Box<Expr>, Option<i8>, Option<i8>, Option<i8>),
    NsCount,
}

#[derive(Debug, Arbitrary)]
enum AttrName {
    Role,
    Content,
    Index,
    Length,
    Count,
}

impl AttrName {
    fn text(&self) -> &'static str {
        match self {
            AttrName::Role => "role",
            AttrName::Content => "content",
            AttrName::Index => "index0",
            AttrName::Length => "length",
            AttrName::Count => "count",
        }
    }
}

#[derive(Debug, Arbitrary)]
enum Node {
    Text(String),
    Out(Expr),
    For(Var, Expr, Vec<Node>, bool),
    If(Expr, Vec<Node>, Vec<Node>),
    Set(Var, Expr),
    SetNs(Expr),
    Macro(u8, Vec<Node>),
    Call(u8, Vec<Expr>),
    Break,
    Continue,
    Filtered(Filter, Vec<Node>),
    Raw(String),
}

/// Strings as Jinja literals (no quotes or backslashes to break them).
fn lit(s: &str) -> String {
    let clean: String = s
        .chars()
        .filter(|c| *c != '\'' && *c != '\\')
        .take(24)
        .collect();
    format!("'{clean}'")
}

fn expr(e: &Expr, out: &mut String, depth: usize) {
    if depth > 24 {
        out.push('0');
        return;
    }
    let d = depth + 1;
    match e {
        Expr::Var(v) => out.push_str(v.name()),
        Expr::Int(i) => {
            let _ = write!(out, "{i}");
        }
        // Powers of ten: the sizes that make ranges, repetitions and
        // loops expensive.
        Expr::Big(k) => {
            let _ = write!(out, "{}", 10u64.saturating_pow(u32::from(k % 19)));
        }
        Expr::Str(s) => out.push_str(&lit(s)),
        Expr::Attr(e, a) => {
            expr(e, out, d);
            out.push('.');
            out.push_str(a.text());
        }
        Expr::Index(a, b) => {
            expr(a, out, d);
            out.push('[');
            expr(b, out, d);
            out.push(']');
        }
        Expr::Range(n) => {
            out.push_str("range(");
            expr(n, out, d);
            out.push(')');
        }
        Expr::Range3(a, b, c) => {
            out.push_str("range(");
            expr(a, out, d);
            out.push_str(", ");
            expr(b, out, d);
            out.push_str(", ");
            expr(c, out, d);
            out.push(')');
        }
        Expr::Bin(a, op, b) => {
            out.push('(');
            expr(a, out, d);
            let _ = write!(out, " {} ", op.text());
            expr(b, out, d);
            out.push(')');
        }
        Expr::Not(e) => {
            out.push_str("(not ");
            expr(e, out, d);
            out.push(')');
        }
        Expr::Filter(e, f) => {
            out.push('(');
            expr(e, out, d);
            out.push_str(" | ");
            out.push_str(f.text());
            out.push(')');
        }
        Expr::Method(e, m) => {
            expr(e, out, d);
            out.push_str(match m {
                Method::Strip => ".strip()",
                Method::StartsWith => ".startswith('<')",
                Method::Split => ".split(' ')",
                Method::Upper => ".upper()",
                Method::Items => ".items()",
                Method::Get => ".get('content', '')",
                Method::Append => ".append(1)",
                Method::Format => ".format(1, 2)",
            });
        }
        Expr::List(items) => {
            out.push('[');
            for (i, x) in items.iter().take(8).enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                expr(x, out, d);
            }
            out.push(']');
        }
        Expr::Dict(items) => {
            out.push('{');
            for (i, (k, v)) in items.iter().take(8).enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&lit(k));
                out.push_str(": ");
                expr(v, out, d);
            }
            out.push('}');
        }
        Expr::Cond(a, b, c) => {
            out.push('(');
            expr(a, out, d);
            out.push_str(" if ");
            expr(b, out, d);
            out.push_str(" else ");
            expr(c, out, d);
            out.push(')');
        }
        Expr::CallMacro(m, args) => {
            let _ = write!(out, "m{}(", m % 3);
            for (i, x) in args.iter().take(3).enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                expr(x, out, d);
            }
            out.push(')');
        }
        Expr::Raise(e) => {
            out.push_str("raise_exception(");
            expr(e, out, d);
            out.push(')');
        }
        Expr::Slice(e, a, b, c) => {
            expr(e, out, d);
            out.push('[');
            if let Some(a) = a {
                let _ = write!(out, "{a}");
            }
            out.push(':');
            if let Some(b) = b {
                let _ = write!(out, "{b}");
            }
            if let Some(c) = c.filter(|c| *c != 0) {
                let _ = write!(out, ":{c}");
            }
            out.push(']');
        }
        Expr::NsCount => out.push_str("ns.n"),
    }
}

fn nodes(ns: &[Node], out: &mut String, depth: usize) {
    for n in ns.iter().take(12) {
        node(n, out, depth);
    }
}

fn node(n: &Node, out: &mut String, depth: usize) {
    if depth > 12 {
        return;
    }
    let d = depth + 1;
    match n {
        Node::Text(t) => out.push_str(&t.replace(['{', '}', '%', '#'], "")),
        Node::Out(e) => {
            out.push_str("{{ ");
            expr(e, out, d);
            out.push_str(" }}");
        }
        Node::For(v, iter, body, recursive) => {
            let _ = write!(out, "{{% for {} in ", v.name());
            expr(iter, out, d);
            out.push_str(if *recursive { " recursive %}" } else { " %}" });
            nodes(body, out, d);
            out.push_str("{% endfor %}");
        }
        Node::If(c, a, b) => {
            out.push_str("{% if ");
            expr(c, out, d);
            out.push_str(" %}");
            nodes(a, out, d);
            if !b.is_empty() {
                out.push_str("{% else %}");
                nodes(b, out, d);
            }
            out.push_str("{% endif %}");
        }
        Node::Set(v, e) => {
            let _ = write!(out, "{{% set {} = ", v.name());
            expr(e, out, d);
            out.push_str(" %}");
        }
        Node::SetNs(e) => {
            out.push_str("{% set ns.n = ");
            expr(e, out, d);
            out.push_str(" %}");
        }
        Node::Macro(m, body) => {
            let _ = write!(out, "{{% macro m{}(a, b=1) %}}", m % 3);
            nodes(body, out, d);
            out.push_str("{% endmacro %}");
        }
        Node::Call(m, args) => {
            out.push_str("{{ ");
            let _ = write!(out, "m{}(", m % 3);
            for (i, x) in args.iter().take(3).enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                expr(x, out, d);
            }
            out.push_str(") }}");
        }
        Node::Break => out.push_str("{% break %}"),
        Node::Continue => out.push_str("{% continue %}"),
        Node::Filtered(f, body) => {
            let _ = write!(out, "{{% filter {} %}}", f.text());
            nodes(body, out, d);
            out.push_str("{% endfilter %}");
        }
        Node::Raw(t) => {
            out.push_str("{% raw %}");
            out.push_str(&t.replace("{%", ""));
            out.push_str("{% endraw %}");
        }
    }
}

#[derive(Debug, Arbitrary)]
struct Input {
    body: Vec<Node>,
    messages: Vec<(bool, String)>,
    add_generation_prompt: bool,
}

fuzz_target!(
    init: {
        // `ChatTemplate` catches minijinja's own panics (an out-of-range
        // slice) and fails the render; they are not crashes here.
        hearth_fuzz::tolerate_caught_panics_in(&["minijinja"]);
    },
    |input: Input| {
    let mut src = String::from("{% set ns = namespace(n=0) %}");
    nodes(&input.body, &mut src, 0);
    if std::env::var_os("HEARTH_FUZZ_PRINT").is_some() {
        eprintln!("template: {src}");
    }
    let Ok(t) = ChatTemplate::jinja(&src, "<bos>", "<eos>") else {
        return;
    };
    let messages: Vec<ChatMessage> = input
        .messages
        .iter()
        .take(16)
        .map(|(user, text)| {
            if *user {
                ChatMessage::user(text.clone())
            } else {
                ChatMessage::assistant(text.clone())
            }
        })
        .collect();
    for thinking in [false, true] {
        if let Ok(out) = t.render_with(
            &messages,
            &hearth_fuzz::tokenizer::ChatOptions {
                add_generation_prompt: input.add_generation_prompt,
                thinking,
                tools: &[],
            },
        ) {
            assert!(out.len() <= MAX_RENDER_BYTES, "rendered {} bytes", out.len());
        }
    }
});
