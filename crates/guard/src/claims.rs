//! Arithmetic in free text: the claims an answer makes (`5 × $20 = $100`,
//! running totals `100 + 90 = 190 + 90 = 280`), checked with the exact
//! calculator; the answer's stated final number; and the grammar under which
//! the model writes a calculator program for a word problem.

use crate::calc::{self, Claim, Value};
use num_bigint::BigInt;
use num_rational::BigRational;
use num_traits::{Signed, ToPrimitive, Zero};
use regex::Regex;
use std::ops::Range;
use std::sync::LazyLock;

/// A number as written: `$1,250.50`, `20%`, `35/36`, `-3`.
const NUM: &str = r"-?\$?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?%?";

/// An operator between two numbers; `x` only with spaces around it.
const OP: &str = r"(?:\s*(?:\*\*|[-+*/×÷^·−])\s*|\s+x\s+)";

/// Up to two unit words after a number (`5 copies × $20 each`).
const UNITS: &str = r"(?:\s+[A-Za-z][A-Za-z'-]*){0,2}?";

static CLAIM: LazyLock<Regex> = LazyLock::new(|| {
    let operand = format!(r"\(?\s*{NUM}{UNITS}\s*\)?");
    Regex::new(&format!(
        r"(?P<expr>{operand}(?:{OP}{operand})+)\s*=\s*(?P<result>{NUM})"
    ))
    .expect("the claim pattern is valid")
});

static NUMBER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&format!(
        r"(?i)(?P<num>{NUM}(?:\s*/\s*\d+)?)|\b(?P<word>zero|none|no|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)\b"
    ))
    .expect("the number pattern is valid")
});

static UNIT_WORD: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"[A-Za-z][A-Za-z'-]*").expect("valid"));

/// One arithmetic claim found in a text.
#[derive(Debug, Clone, PartialEq)]
pub struct FoundClaim {
    /// Where the stated result is (byte range), for a repair in place.
    pub result_at: Range<usize>,
    /// The expression as the calculator read it.
    pub expr: String,
    /// The stated result, as written.
    pub stated: String,
    /// `None` when right, else the computed value.
    pub wrong: Option<Value>,
}

/// Every checkable `a op b = c` claim in `text`, a running total counted
/// once per `=`. Claims the calculator cannot read are skipped.
pub fn find_claims(text: &str) -> Vec<FoundClaim> {
    let mut out = Vec::new();
    let mut from = 0;
    // Bounded: each match moves `from` forward by at least one byte.
    while from < text.len() {
        let Some(m) = CLAIM.captures_at(text, from) else {
            break;
        };
        let (Some(expr_m), Some(res_m)) = (m.name("expr"), m.name("result")) else {
            break;
        };
        // A running total: the result starts the next claim.
        from = res_m.start().max(expr_m.start() + 1);
        let expr = to_program(expr_m.as_str());
        let stated = res_m.as_str().trim_start_matches('$').to_string();
        match calc::check_claim(&expr, &stated) {
            Ok(Claim::Right) => out.push(FoundClaim {
                result_at: res_m.range(),
                expr,
                stated: res_m.as_str().to_string(),
                wrong: None,
            }),
            Ok(Claim::Wrong(v)) => out.push(FoundClaim {
                result_at: res_m.range(),
                expr,
                stated: res_m.as_str().to_string(),
                wrong: Some(v),
            }),
            Err(_) => {}
        }
    }
    out
}

/// Text arithmetic as a calculator expression: unit words out, `×`, `÷`,
/// `x`, `·`, `−` to ASCII operators.
fn to_program(expr: &str) -> String {
    let ops = expr
        .replace(['×', '·'], "*")
        .replace('÷', "/")
        .replace('−', "-")
        .replace(" x ", " * ");
    UNIT_WORD.replace_all(&ops, "").into_owned()
}

/// A number in a text.
#[derive(Debug, Clone, PartialEq)]
pub struct NumberAt {
    /// Where it is (byte range; for `$280`, the whole of it).
    pub at: Range<usize>,
    /// Its value.
    pub value: BigRational,
    /// Whether it was written as a word (`one`, `no`).
    pub word: bool,
}

/// Every number in `text`, digits (with `$`, `,`, `%`, `a/b`) and the
/// number words zero to twelve (and `no`/`none` as zero).
pub fn numbers(text: &str) -> Vec<NumberAt> {
    let mut out = Vec::new();
    for c in NUMBER.captures_iter(text) {
        if let Some(n) = c.name("num") {
            let src = n.as_str().replace(' ', "");
            if let Ok(v) = calc::eval(&src) {
                out.push(NumberAt {
                    at: n.range(),
                    value: v.exact,
                    word: false,
                });
            }
        } else if let Some(w) = c.name("word") {
            let v = match w.as_str().to_ascii_lowercase().as_str() {
                "zero" | "no" | "none" => 0,
                "one" => 1,
                "two" => 2,
                "three" => 3,
                "four" => 4,
                "five" => 5,
                "six" => 6,
                "seven" => 7,
                "eight" => 8,
                "nine" => 9,
                "ten" => 10,
                "eleven" => 11,
                _ => 12,
            };
            out.push(NumberAt {
                at: w.range(),
                value: BigRational::from_integer(BigInt::from(v)),
                word: true,
            });
        }
    }
    out
}

/// Words that introduce a stated answer.
static CUE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:total|answer|is|are|was|were|be|equals|has|have|had|would|comes? to|gives?)\b|=|:")
        .expect("valid")
});

/// The number an answer states as its result: in the last sentence that
/// holds a number, the first one after the last cue (`is`, `total`, `=`,
/// `:`) that has one after it, else that sentence's last number. `words` lets number words count (for
/// counting puzzles); arithmetic answers use digits only.
pub fn final_number(text: &str, words: bool) -> Option<NumberAt> {
    let all: Vec<NumberAt> = numbers(text)
        .into_iter()
        .filter(|n| words || !n.word)
        .collect();
    let last = all.last()?;
    let sentence_start = sentence_start(text, last.at.start);
    let in_sentence: Vec<&NumberAt> = all
        .iter()
        .filter(|n| n.at.start >= sentence_start)
        .collect();
    // The last cue with a number after it: "if each sister has two
    // brothers, David would have one" states one.
    let cue_end = CUE
        .find_iter(&text[sentence_start..])
        .map(|m| sentence_start + m.end())
        .filter(|&e| in_sentence.iter().any(|n| n.at.start >= e))
        .last();
    let pick = match cue_end {
        Some(e) => in_sentence.iter().find(|n| n.at.start >= e).copied(),
        None => None,
    };
    Some(pick.unwrap_or(last).clone())
}

/// Where the sentence holding byte `at` begins: after the last `.`, `!`,
/// `?` followed by a space, or a newline, before it.
fn sentence_start(text: &str, at: usize) -> usize {
    let head = &text[..at];
    let bytes = head.as_bytes();
    let mut i = bytes.len();
    while i > 0 {
        i -= 1;
        let b = bytes[i];
        if b == b'\n' {
            return i + 1;
        }
        if matches!(b, b'.' | b'!' | b'?') && bytes.get(i + 1).is_some_and(|c| *c == b' ') {
            return i + 1;
        }
    }
    0
}

/// `value` written as a reader expects: an integer as is, a terminating
/// decimal in full (money to cents), else `p/q`.
pub fn format_value(value: &BigRational) -> String {
    if value.is_integer() {
        return value.numer().to_string();
    }
    let v = Value {
        exact: value.clone(),
        is_exact: true,
    };
    let s = v.to_string();
    match s.split_once(" ≈ ") {
        Some((frac, _)) => frac.to_string(),
        None => s,
    }
}

/// Replace the number at `at` in `text` with `value`, keeping a `$` sign.
pub fn replace_number(text: &str, at: Range<usize>, value: &BigRational) -> String {
    let old = &text[at.clone()];
    let dollar = if old.contains('$') { "$" } else { "" };
    let sign = if value.is_negative() { "-" } else { "" };
    let new = format!("{sign}{dollar}{}", format_value(&value.abs()));
    format!("{}{}{}", &text[..at.start], new, &text[at.end..])
}

/// Whether two values are the same number (to a millionth, for a written
/// decimal against an exact fraction).
pub fn same_number(a: &BigRational, b: &BigRational) -> bool {
    if a == b {
        return true;
    }
    let diff = (a - b).abs();
    let scale = a.abs().max(b.abs());
    if scale.is_zero() {
        return false;
    }
    (diff / scale).to_f64().is_some_and(|r| r < 1e-6)
}

/// The calculator's language as a Lark grammar (llguidance's dialect):
/// one `name = expression` a line, at most 12, the last one the answer.
/// Numbers are plain decimals (no `$` or separators), so the program the
/// model writes is always one the calculator reads.
pub const CALC_GRAMMAR: &str = r#"start: stmt ("\n" stmt){0,11}
stmt: NAME " = " expr
expr: term ((" + " | " - ") term)*
term: factor ((" * " | " / " | " // " | " % ") factor)*
factor: "-" factor | power
power: atom (" ** " factor)?
atom: NUMBER | NAME | "(" expr ")" | call
call: ("round(" | "floor(" | "ceil(" | "abs(" | "min(" | "max(" | "sqrt(") expr (", " expr){0,7} ")"
NAME: /[a-z][a-z0-9_]{0,23}/
NUMBER: /[0-9]{1,12}(\.[0-9]{1,6})?%?/
"#;

/// The instruction that asks for a calculator program.
pub const CALC_INSTRUCTION: &str = "Write the arithmetic of the question above as a short calculator program. Each line binds a name to an expression over the numbers in the question, like `books = 5 * 20`, using + - * / and parentheses; the last line computes the answer. Write only the program.";
