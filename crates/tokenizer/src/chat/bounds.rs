//! What a chat template may make minijinja print. minijinja 3's fuel pays
//! for every instruction and for every byte of text and slot of list a
//! template builds, so what a render builds is bounded by its step limit;
//! but not what it prints. A sequence repeated lazily (`[1] * 10**8`) or a
//! value shared many times over (`[a, a, a]`, nested) prints as far more
//! text than it cost, and minijinja prints values in more places than
//! `{{ }}`: `~`, `in` on a string, the filters and tests that take text,
//! `join`. A render is compiled with those places routed through guards
//! ([`patch`]) that measure a value's printed size first, looking at no
//! more of it than [`MAX_RENDER_BYTES`], and refuse one that would print
//! more; the walk is paid for in fuel.

use minijinja::machinery::ast::{BinOpKind, CompareOpKind, Expr};
use minijinja::machinery::{parse, Instruction, Instructions};
use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Rest, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind, State};

use super::namespaces::{each_stmt, walk_expr};
use super::MAX_RENDER_BYTES;

/// The filters that print a value as text, or apply a filter or test that
/// may, and the name of each one's guard.
const PRINTING_FILTERS: &[(&str, &str)] = &[
    ("safe", "__hearth_safe"),
    ("escape", "__hearth_escape"),
    ("e", "__hearth_e"),
    ("lower", "__hearth_lower"),
    ("upper", "__hearth_upper"),
    ("title", "__hearth_title"),
    ("capitalize", "__hearth_capitalize"),
    ("trim", "__hearth_trim"),
    ("replace", "__hearth_replace"),
    ("indent", "__hearth_indent"),
    ("join", "__hearth_join"),
    ("split", "__hearth_split"),
    ("lines", "__hearth_lines"),
    ("string", "__hearth_string"),
    ("pprint", "__hearth_pprint"),
    ("format", "__hearth_format"),
    ("map", "__hearth_map"),
    ("select", "__hearth_select"),
    ("reject", "__hearth_reject"),
    ("selectattr", "__hearth_selectattr"),
    ("rejectattr", "__hearth_rejectattr"),
    // Builds of minijinja with its `json` and `urlencode` features.
    ("tojson", "__hearth_tojson"),
    ("urlencode", "__hearth_urlencode"),
];

/// The tests that print a value as text, and their guards.
const PRINTING_TESTS: &[(&str, &str)] = &[
    ("startingwith", "__hearth_startingwith"),
    ("endingwith", "__hearth_endingwith"),
    ("in", "__hearth_in_test"),
];

/// The guard of `~`.
const CONCAT: &str = "__hearth_concat";
/// The guard of `in`.
const CONTAINS: &str = "__hearth_in";
/// Names that start so are the guards'; a template may not use them.
const RESERVED: &str = "__hearth_";

/// Route the places where `code` prints a value through the guards
/// ([`install`]): `~` and `in` become calls, and the printing filters and
/// tests their guards. Each instruction is replaced by one that takes and
/// leaves the same stack, so jumps stay where they are.
pub(super) fn patch(code: &mut Instructions<'_>) {
    let mut at = 0;
    while let Some(instruction) = code.get_mut(at) {
        match instruction {
            // `b ~ a` pops a, then b: the call gets (b, a).
            Instruction::StringConcat => *instruction = Instruction::CallFunction(CONCAT, Some(2)),
            // `x in y` pops y, then x: the call gets (x, y).
            Instruction::In => *instruction = Instruction::CallFunction(CONTAINS, Some(2)),
            Instruction::ApplyFilter(name, _, _) => *name = guard_of(PRINTING_FILTERS, name),
            Instruction::PerformTest(name, _, _) => *name = guard_of(PRINTING_TESTS, name),
            _ => {}
        }
        at += 1;
    }
}

fn guard_of<'s>(table: &[(&str, &'static str)], name: &'s str) -> &'s str {
    table
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(name, |&(_, guard)| guard)
}

/// Refuse what the guards cannot cover: `in` in a chained comparison
/// (`a < b in c`, which keeps its operand on the stack, so [`patch`] has no
/// call to put in its place), a list or tuple literal repeated with `*`
/// (minijinja folds constant expressions while compiling, without fuel:
/// `[1] * 10**8 == [1] * 10**8` compared 10^8 items there), and the guards'
/// names. A template that does not parse passes: compiling reports that.
pub(super) fn check(source: &str) -> Result<(), String> {
    if source.contains(RESERVED) {
        return Err(format!("names starting with `{RESERVED}` are reserved"));
    }
    let Ok(tree) = parse(source, "chat", SyntaxConfig::default()) else {
        return Ok(());
    };
    let mut refused = None;
    each_stmt(&tree, &mut |_, exprs| {
        for e in exprs {
            walk_expr(e, &mut |e| {
                if refused.is_none() {
                    refused = refusal(e);
                }
            });
        }
    });
    refused.map_or(Ok(()), Err)
}

/// Why `expr` (itself, not what is inside it) is refused, if it is.
fn refusal(expr: &Expr<'_>) -> Option<String> {
    match expr {
        Expr::Compare(c)
            if c.ops
                .iter()
                .any(|o| matches!(o.op, CompareOpKind::In | CompareOpKind::NotIn)) =>
        {
            Some(format!(
                "line {} chains `in` with another comparison; write it with `and`",
                c.span().start_line
            ))
        }
        Expr::BinOp(b)
            if matches!(b.op, BinOpKind::Mul)
                && is_constant(expr)
                && (is_list_literal(&b.left) || is_list_literal(&b.right)) =>
        {
            Some(format!(
                "line {} repeats a constant list with `*`, which is built while compiling, \
                 outside the render's bounds",
                b.span().start_line
            ))
        }
        _ => None,
    }
}

/// Whether minijinja can fold `expr` while compiling: it is made of
/// constants and operators only.
fn is_constant(expr: &Expr<'_>) -> bool {
    match expr {
        Expr::Const(_) => true,
        Expr::List(l) => l.items.iter().all(is_constant),
        Expr::Tuple(t) => t.items.iter().all(is_constant),
        Expr::Map(m) => m.keys.iter().chain(&m.values).all(is_constant),
        Expr::BinOp(b) => is_constant(&b.left) && is_constant(&b.right),
        Expr::UnaryOp(u) => is_constant(&u.expr),
        _ => false,
    }
}

/// A list or tuple literal, or one repeated or joined with others.
fn is_list_literal(expr: &Expr<'_>) -> bool {
    match expr {
        Expr::List(_) | Expr::Tuple(_) => true,
        Expr::BinOp(b) if matches!(b.op, BinOpKind::Mul | BinOpKind::Add) => {
            is_list_literal(&b.left) || is_list_literal(&b.right)
        }
        _ => false,
    }
}

/// Register the guards, and take away `debug()`, which prints the whole
/// render's state.
pub(super) fn install(env: &mut Environment<'_>) {
    for &(name, guard) in PRINTING_FILTERS {
        env.add_filter(guard, move |state: &mut State, args: Rest<Value>| {
            check_args(state, &args)?;
            state.apply_filter(name, &args)
        });
    }
    for &(name, guard) in PRINTING_TESTS {
        env.add_test(guard, move |state: &mut State, args: Rest<Value>| {
            check_args(state, &args)?;
            state.perform_test(name, &args)
        });
    }
    env.add_function(CONCAT, concat);
    env.add_function(CONTAINS, contains);
    env.remove_global("debug");
}

/// `left ~ right`, as minijinja writes it, once both are known to print
/// within the bound and the text fits what the render has left.
fn concat(state: &State, left: &Value, right: &Value) -> Result<Value, Error> {
    check_printable(state, left)?;
    check_printable(state, right)?;
    if let (Some(a), Some(b)) = (left.as_str(), right.as_str()) {
        ensure_room(state, a.len().saturating_add(b.len()))?;
        return Ok(Value::from([a, b].concat()));
    }
    Ok(Value::from(format!("{left}{right}")))
}

/// `needle in container`, as minijinja answers it, printing a needle that
/// is not text only once it is known to print within the bound.
fn contains(state: &mut State, needle: Value, container: Value) -> Result<Value, Error> {
    if container.is_undefined() {
        return Ok(Value::from(false));
    }
    if let Some(text) = container.as_str() {
        state.consume_fuel(text.len() as u64 / 64)?;
        let found = match needle.as_str() {
            Some(part) => text.contains(part),
            None => {
                check_printable(state, &needle)?;
                text.contains(&needle.to_string())
            }
        };
        return Ok(Value::from(found));
    }
    if container.as_object().is_some() {
        return state
            .perform_test("in", &[needle, container])
            .map(Value::from);
    }
    Err(Error::new(
        ErrorKind::InvalidOperation,
        "cannot perform a containment check on this value",
    ))
}

/// Every argument (keyword arguments' values too) prints within the bound.
fn check_args(state: &State, args: &[Value]) -> Result<(), Error> {
    for arg in args {
        if arg.is_kwargs() {
            for key in arg.try_iter()? {
                check_printable(state, &arg.get_item(&key)?)?;
            }
        } else {
            check_printable(state, arg)?;
        }
    }
    Ok(())
}

/// Refuse a sequence or map that would print as more than
/// [`MAX_RENDER_BYTES`]; the look at it is charged like the items a
/// minijinja filter visits (half a step each).
pub(super) fn check_printable(state: &State, value: &Value) -> Result<(), Error> {
    if !matches!(
        value.kind(),
        ValueKind::Seq | ValueKind::Map | ValueKind::Iterable
    ) {
        return Ok(());
    }
    let size = prints_at_least(value, MAX_RENDER_BYTES);
    state.consume_fuel((size.nodes as u64).div_ceil(2))?;
    if size.bytes > MAX_RENDER_BYTES {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!(
                "the template prints a value of more than {MAX_RENDER_BYTES} bytes \
                 (the bound on a render's text)"
            ),
        ));
    }
    Ok(())
}

/// Refuse to build `bytes` more when the render's fuel (64 bytes a step)
/// could not pay for them, before they are allocated.
pub(super) fn ensure_room(state: &State, bytes: usize) -> Result<(), Error> {
    match state.fuel_levels() {
        Some((_, left)) if bytes as u64 / 64 >= left => Err(Error::new(
            ErrorKind::OutOfFuel,
            format!("building {bytes} bytes"),
        )),
        _ => Ok(()),
    }
}

/// A lower bound on a value's printed size, and the values looked at.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Printed {
    /// At least this many bytes (one a scalar, each string its length).
    pub(super) bytes: usize,
    /// Values looked at.
    pub(super) nodes: usize,
}

/// How much `value` prints at least, looking no further once that passes
/// `limit`.
pub(super) fn prints_at_least(value: &Value, limit: usize) -> Printed {
    let mut printed = Printed::default();
    add_printed(value, limit, &mut printed);
    printed
}

fn add_printed(value: &Value, limit: usize, printed: &mut Printed) {
    printed.nodes += 1;
    if let Some(text) = value.as_str() {
        printed.bytes = printed.bytes.saturating_add(text.len());
        return;
    }
    let kind = value.kind();
    if !matches!(kind, ValueKind::Seq | ValueKind::Map | ValueKind::Iterable) {
        printed.bytes = printed.bytes.saturating_add(1);
        return;
    }
    // A known length past the bound answers without a look inside.
    if let Some(n) = value.len() {
        if printed.bytes.saturating_add(n) > limit {
            printed.bytes = printed.bytes.saturating_add(n);
            return;
        }
    }
    printed.bytes += 2;
    let Ok(items) = value.try_iter() else {
        return;
    };
    for item in items {
        if printed.bytes > limit {
            return;
        }
        printed.bytes += 1;
        if kind == ValueKind::Map {
            let entry = value.get_item(&item).unwrap_or_default();
            add_printed(&item, limit, printed);
            add_printed(&entry, limit, printed);
        } else {
            add_printed(&item, limit, printed);
        }
    }
}
