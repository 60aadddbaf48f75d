//! The functions and Python methods chat templates expect (transformers
//! renders them with Python's), each sized before it builds anything.

use minijinja::value::{Value, ValueKind};
use minijinja::{Error, ErrorKind, State};

use super::bounds::{check_printable, ensure_room};

/// The longest `strftime_now` format taken: a date line needs a few dozen
/// bytes, and chrono writes up to about a dozen for each two of a format.
const MAX_TIME_FORMAT_BYTES: usize = 256;

/// The most of a `raise_exception` message kept: it goes back to the
/// client in the error.
const MAX_RAISED_BYTES: usize = 1024;

/// `strftime_now(format)`: the local time, formatted; transformers and
/// llama.cpp give templates this function (Mistral's and gpt-oss's put
/// today's date in their system prompt).
pub(super) fn strftime_now(format: &Value) -> Result<String, Error> {
    use std::fmt::Write;
    let format = format.as_str().ok_or_else(|| {
        Error::new(
            ErrorKind::InvalidOperation,
            "strftime_now: the format is not text",
        )
    })?;
    if format.len() > MAX_TIME_FORMAT_BYTES {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now: the format is longer than {MAX_TIME_FORMAT_BYTES} bytes"),
        ));
    }
    let mut out = String::new();
    // A format chrono cannot read fails the write; it must fail the
    // render, not panic in `to_string`.
    write!(out, "{}", chrono::Local::now().format(format)).map_err(|_| {
        Error::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now: cannot read the format {format:?}"),
        )
    })?;
    Ok(out)
}

/// `raise_exception(msg)`, which Hugging Face templates call to reject a
/// conversation; it becomes a render error carrying `msg` (its first
/// [`MAX_RAISED_BYTES`]).
pub(super) fn raise_exception(state: &State, msg: &Value) -> Result<String, Error> {
    check_printable(state, msg)?;
    let owned;
    let text = match msg.as_str() {
        Some(text) => text,
        None => {
            owned = msg.to_string();
            &owned
        }
    };
    let mut end = text.len().min(MAX_RAISED_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let cut = if end < text.len() { "…" } else { "" };
    Err(Error::new(
        ErrorKind::InvalidOperation,
        format!("{}{cut}", &text[..end]),
    ))
}

/// The Python string and dict methods chat templates commonly call
/// (`.strip()`, `.startswith()`, `.items()`, ...), which Jinja2 gets from
/// Python and minijinja does not have.
pub(super) fn python_methods(
    state: &mut State,
    value: &Value,
    method: &str,
    args: &[Value],
) -> Result<Value, Error> {
    match value.kind() {
        ValueKind::String => string_method(state, value.as_str().unwrap_or_default(), method, args),
        ValueKind::Map => match method {
            "items" => state.apply_filter("items", std::slice::from_ref(value)),
            "keys" => Ok(Value::from(value.try_iter()?.collect::<Vec<_>>())),
            "values" => {
                let vals = value
                    .try_iter()?
                    .map(|k| value.get_item(&k).unwrap_or_default())
                    .collect::<Vec<_>>();
                Ok(Value::from(vals))
            }
            "get" => {
                let key = args.first().cloned().unwrap_or_default();
                match value.get_item(&key) {
                    Ok(v) if !v.is_undefined() => Ok(v),
                    _ => Ok(args.get(1).cloned().unwrap_or(Value::from(()))),
                }
            }
            _ => Err(Error::from(ErrorKind::UnknownMethod)),
        },
        _ => Err(Error::from(ErrorKind::UnknownMethod)),
    }
}

/// A Python string method on `s`; what it builds is sized against the
/// render's fuel before it is built.
fn string_method(state: &State, s: &str, method: &str, args: &[Value]) -> Result<Value, Error> {
    let arg_str = |i: usize| args.get(i).and_then(Value::as_str);
    let chars = arg_str(0);
    let strip_set = |c: char| match chars {
        Some(set) => set.contains(c),
        None => c.is_whitespace(),
    };
    let v = match method {
        "strip" => Value::from(s.trim_matches(strip_set)),
        "lstrip" => Value::from(s.trim_start_matches(strip_set)),
        "rstrip" => Value::from(s.trim_end_matches(strip_set)),
        // A character's case can take up to three times its bytes.
        "upper" | "lower" => {
            ensure_room(state, s.len().saturating_mul(3))?;
            Value::from(match method {
                "upper" => s.to_uppercase(),
                _ => s.to_lowercase(),
            })
        }
        "startswith" => Value::from(arg_str(0).is_some_and(|p| s.starts_with(p))),
        "endswith" => Value::from(arg_str(0).is_some_and(|p| s.ends_with(p))),
        "replace" => match (arg_str(0), arg_str(1)) {
            (Some(a), Some(b)) => {
                // Python inserts the new text around every character when
                // the old one is empty, as Rust does.
                let n = if a.is_empty() {
                    s.chars().count() + 1
                } else {
                    s.matches(a).count()
                };
                let grown = n.saturating_mul(b.len());
                ensure_room(state, s.len().saturating_add(grown))?;
                Value::from(s.replace(a, b))
            }
            _ => return Err(Error::new(ErrorKind::MissingArgument, "replace(old, new)")),
        },
        "split" => {
            let sep = arg_str(0).filter(|sep| !sep.is_empty());
            let pieces = match sep {
                Some(sep) => s.matches(sep).count() + 1,
                None => s.split_whitespace().count(),
            };
            // A piece costs a list slot besides its text.
            ensure_room(state, s.len().saturating_add(pieces.saturating_mul(32)))?;
            let parts: Vec<Value> = match sep {
                Some(sep) => s.split(sep).map(Value::from).collect(),
                None => s.split_whitespace().map(Value::from).collect(),
            };
            Value::from(parts)
        }
        _ => return Err(Error::from(ErrorKind::UnknownMethod)),
    };
    Ok(v)
}

/// `value | tojson(indent=None)`: JSON as transformers' templates get it
/// (Python's `json.dumps` with `ensure_ascii=False`: `", "` and `": "`
/// between items, or with `indent` one item a line), sized first as
/// printing is ([`check_printable`]). Tool templates write declarations
/// with it.
pub(super) fn tojson(
    state: &State,
    value: &Value,
    kwargs: minijinja::value::Kwargs,
) -> Result<String, Error> {
    check_printable(state, value)?;
    let indent: Option<usize> = kwargs.get("indent")?;
    kwargs.assert_all_used()?;
    let mut out = Vec::new();
    let written = match indent {
        Some(n) => {
            let pad = vec![b' '; n.min(16)];
            let mut ser = serde_json::Serializer::with_formatter(
                &mut out,
                serde_json::ser::PrettyFormatter::with_indent(&pad),
            );
            serde::Serialize::serialize(value, &mut ser)
        }
        None => {
            let mut ser = serde_json::Serializer::with_formatter(&mut out, PythonFormatter);
            serde::Serialize::serialize(value, &mut ser)
        }
    };
    written.map_err(|e| Error::new(ErrorKind::InvalidOperation, format!("tojson: {e}")))?;
    ensure_room(state, out.len())?;
    String::from_utf8(out)
        .map_err(|e| Error::new(ErrorKind::InvalidOperation, format!("tojson: {e}")))
}

/// Python's default JSON separators: `", "` between items, `": "` after a
/// key.
struct PythonFormatter;

impl serde_json::ser::Formatter for PythonFormatter {
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        item_separator(writer, first)
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        item_separator(writer, first)
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
    ) -> std::io::Result<()> {
        writer.write_all(b": ")
    }
}

/// `", "` before every item but the first.
fn item_separator<W: ?Sized + std::io::Write>(writer: &mut W, first: bool) -> std::io::Result<()> {
    if first {
        Ok(())
    } else {
        writer.write_all(b", ")
    }
}
