//! The calculator: a small expression language evaluated exactly over big
//! rationals, so a word problem's arithmetic is computed, never guessed.
//!
//! A program is statements separated by `;` or newlines: `name = expr` binds
//! an intermediate value, and the last expression is the result. Numbers
//! may be decimals (`.5`), carry a `$` or thousands separators (`1,250`),
//! or end in `%` (a percentage: `20%` is 1/5). Operators, loosest first:
//! `+ -`; `* / // %` (`%` between two operands is the remainder, as in
//! Python and GSM8K's annotations); unary `-`; `^` and `**` (right
//! associative). Functions: `round(x)`, `round(x, digits)`, `floor`,
//! `ceil`, `abs`, `min`, `max` (any number of arguments), `sqrt`.
//!
//! Every result is exact except `sqrt` of a non-square and a power with a
//! fractional exponent, which are computed to [`APPROX_DIGITS`] significant
//! digits and marked inexact. Bounds keep any input finite: numbers of at
//! most [`MAX_DIGITS`] digits, [`MAX_DEPTH`] levels of nesting, and
//! [`MAX_STEPS`] operations per program.

use num_bigint::BigInt;
use num_integer::Integer;
use num_rational::BigRational;
use num_traits::{One, Signed, ToPrimitive, Zero};
use std::collections::HashMap;

/// Most decimal digits in a numerator or denominator.
pub const MAX_DIGITS: usize = 10_000;
/// Deepest nesting of parentheses, calls and unary operators.
pub const MAX_DEPTH: usize = 64;
/// Most operations one program may evaluate.
pub const MAX_STEPS: usize = 100_000;
/// Significant digits of an inexact result.
pub const APPROX_DIGITS: usize = 30;

/// Why a program has no value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CalcError {
    /// The text is not a program of the language.
    #[error("syntax error at byte {at}: {what}")]
    Syntax {
        /// Byte offset of the problem.
        at: usize,
        /// What was wrong.
        what: String,
    },
    /// A name used before it was given a value.
    #[error("`{0}` has no value")]
    Unknown(String),
    /// Division or remainder by zero.
    #[error("division by zero")]
    DivisionByZero,
    /// A result beyond the bounds.
    #[error("{0}")]
    TooLarge(String),
    /// A function applied outside its domain or with the wrong arguments.
    #[error("{0}")]
    Domain(String),
}

/// A computed value.
#[derive(Debug, Clone, PartialEq)]
pub struct Value {
    /// The value (for an inexact one, the approximation).
    pub exact: BigRational,
    /// Whether it is exact.
    pub is_exact: bool,
}

impl Value {
    fn exact(v: BigRational) -> Self {
        Self {
            exact: v,
            is_exact: true,
        }
    }

    /// As a float, for display and comparisons with written numbers.
    pub fn to_f64(&self) -> f64 {
        self.exact.to_f64().unwrap_or(f64::NAN)
    }
}

impl std::fmt::Display for Value {
    /// An integer as is; a terminating decimal in full; otherwise the
    /// fraction and 12 significant digits (`1/3 ≈ 0.333333333333`). An
    /// inexact value shows its [`APPROX_DIGITS`] digits after `≈`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = &self.exact;
        if !self.is_exact {
            return write!(f, "≈ {}", decimal(v, APPROX_DIGITS));
        }
        if v.is_integer() {
            return write!(f, "{}", v.numer());
        }
        if let Some(d) = terminating(v) {
            return write!(f, "{d}");
        }
        write!(f, "{}/{} ≈ {}", v.numer(), v.denom(), decimal(v, 12))
    }
}

/// The exact decimal of `v` when its denominator has only the factors 2
/// and 5 (and the decimal is not absurdly long).
fn terminating(v: &BigRational) -> Option<String> {
    let mut d = v.denom().clone();
    let (two, five) = (BigInt::from(2), BigInt::from(5));
    let mut places = 0usize;
    let mut twos = 0usize;
    let mut fives = 0usize;
    while d.is_even() {
        d /= &two;
        twos += 1;
    }
    while (&d % &five).is_zero() {
        d /= &five;
        fives += 1;
    }
    if !d.is_one() {
        return None;
    }
    places += twos.max(fives);
    if places > 200 {
        return None;
    }
    let scaled = v * BigRational::from_integer(BigInt::from(10).pow(places as u32));
    let n = scaled.to_integer();
    let neg = n.is_negative();
    let digits = n.abs().to_string();
    let digits = format!("{digits:0>width$}", width = places + 1);
    let (int, frac) = digits.split_at(digits.len() - places);
    Some(format!("{}{int}.{frac}", if neg { "-" } else { "" }))
}

/// `v` to `sig` significant digits, in plain or scientific notation.
fn decimal(v: &BigRational, sig: usize) -> String {
    if v.is_zero() {
        return "0".into();
    }
    let neg = v.is_negative();
    let a = v.abs();
    // The decimal exponent: 10^e <= a < 10^(e+1).
    let mut e = a.numer().to_string().len() as i64 - a.denom().to_string().len() as i64;
    let ten = BigRational::from_integer(BigInt::from(10));
    let pow10 = |k: i64| {
        if k >= 0 {
            ten.pow(k as i32)
        } else {
            BigRational::one() / ten.pow((-k) as i32)
        }
    };
    while a >= pow10(e + 1) {
        e += 1;
    }
    while a < pow10(e) {
        e -= 1;
    }
    let scaled = &a * pow10(sig as i64 - 1 - e);
    let mut digits = scaled.round().to_integer().to_string();
    if digits.len() > sig {
        digits.pop();
        e += 1;
    }
    let digits = digits.trim_end_matches('0');
    let digits = if digits.is_empty() { "0" } else { digits };
    let sign = if neg { "-" } else { "" };
    if (-6..=20).contains(&e) {
        if e >= 0 {
            let e = e as usize;
            if digits.len() <= e + 1 {
                format!("{sign}{digits}{}", "0".repeat(e + 1 - digits.len()))
            } else {
                format!("{sign}{}.{}", &digits[..=e], &digits[e + 1..])
            }
        } else {
            format!("{sign}0.{}{digits}", "0".repeat((-e - 1) as usize))
        }
    } else {
        let (first, rest) = digits.split_at(1);
        let rest = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        format!("{sign}{first}{rest}e{e}")
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(BigRational),
    Ident(String),
    Op(&'static str),
    LParen,
    RParen,
    Comma,
    Assign,
    End,
}

fn lex(src: &str) -> Result<Vec<(Tok, usize)>, CalcError> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b' ' | b'\t' | b'\r' | b'$' => i += 1,
            b'0'..=b'9' | b'.' => {
                let (value, end) = lex_number(b, i)?;
                out.push((Tok::Num(value), i));
                i = end;
            }
            b'a'..=b'z' | b'A'..=b'Z' | b'_' => {
                let start = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
                out.push((Tok::Ident(src[start..i].to_string()), start));
            }
            _ => {
                let (tok, len) = lex_symbol(src, i)?;
                out.push((tok, i));
                i += len;
            }
        }
    }
    out.push((Tok::End, src.len()));
    Ok(out)
}

fn syntax_error(at: usize, what: &str) -> CalcError {
    CalcError::Syntax {
        at,
        what: what.to_string(),
    }
}

/// The number starting at `start` (digits, a decimal point, thousands
/// separators) and the index just past it.
fn lex_number(b: &[u8], start: usize) -> Result<(BigRational, usize), CalcError> {
    let mut i = start;
    let mut text = String::new();
    while i < b.len() {
        match b[i] {
            d @ (b'0'..=b'9' | b'.') => {
                text.push(d as char);
                i += 1;
            }
            // A thousands separator: a comma followed by exactly three
            // digits.
            b',' if b
                .get(i + 1..i + 4)
                .is_some_and(|s| s.iter().all(u8::is_ascii_digit))
                && !b.get(i + 4).is_some_and(u8::is_ascii_digit) =>
            {
                i += 1
            }
            _ => break,
        }
    }
    if text.len() > MAX_DIGITS {
        return Err(CalcError::TooLarge(format!(
            "a number of more than {MAX_DIGITS} digits"
        )));
    }
    let value = parse_decimal(&text).ok_or_else(|| syntax_error(start, "bad number"))?;
    Ok((value, i))
}

/// The statement end, bracket, comma, `=` or operator at `i` (ASCII or
/// `×`, `·`, `÷`, `−`) and its length in bytes.
fn lex_symbol(src: &str, i: usize) -> Result<(Tok, usize), CalcError> {
    let b = src.as_bytes();
    let tok = match b[i] {
        b'\n' | b';' => Tok::End,
        b'(' => Tok::LParen,
        b')' => Tok::RParen,
        b',' => Tok::Comma,
        b'=' => Tok::Assign,
        b'*' if b.get(i + 1) == Some(&b'*') => return Ok((Tok::Op("^"), 2)),
        b'/' if b.get(i + 1) == Some(&b'/') => return Ok((Tok::Op("//"), 2)),
        b'+' => Tok::Op("+"),
        b'-' => Tok::Op("-"),
        b'*' => Tok::Op("*"),
        b'/' => Tok::Op("/"),
        b'^' => Tok::Op("^"),
        b'%' => Tok::Op("%"),
        _ => {
            let ch = src[i..].chars().next().unwrap_or('?');
            let op = match ch {
                '×' | '·' => "*",
                '÷' => "/",
                '−' => "-",
                _ => return Err(syntax_error(i, &format!("unexpected {ch:?}"))),
            };
            return Ok((Tok::Op(op), ch.len_utf8()));
        }
    };
    Ok((tok, 1))
}

fn parse_decimal(text: &str) -> Option<BigRational> {
    let (int, frac) = text.split_once('.').unwrap_or((text, ""));
    if frac.contains('.') || (int.is_empty() && frac.is_empty()) {
        return None;
    }
    let digits = format!("{int}{frac}");
    let n: BigInt = digits.parse().ok()?;
    let d = BigInt::from(10).pow(frac.len() as u32);
    Some(BigRational::new(n, d))
}

struct Eval<'a> {
    toks: &'a [(Tok, usize)],
    pos: usize,
    vars: HashMap<String, Value>,
    steps: usize,
    depth: usize,
}

type R = Result<Value, CalcError>;

impl Eval<'_> {
    fn peek(&self) -> &Tok {
        &self.toks[self.pos.min(self.toks.len() - 1)].0
    }

    fn at(&self) -> usize {
        self.toks[self.pos.min(self.toks.len() - 1)].1
    }

    fn bump(&mut self) -> Tok {
        let t = self.peek().clone();
        self.pos += 1;
        t
    }

    fn syntax(&self, what: &str) -> CalcError {
        CalcError::Syntax {
            at: self.at(),
            what: what.to_string(),
        }
    }

    fn step(&mut self) -> Result<(), CalcError> {
        self.steps += 1;
        if self.steps > MAX_STEPS {
            return Err(CalcError::TooLarge(format!(
                "more than {MAX_STEPS} operations"
            )));
        }
        Ok(())
    }

    fn nest(&mut self) -> Result<(), CalcError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(CalcError::TooLarge(format!(
                "nesting deeper than {MAX_DEPTH} levels"
            )));
        }
        Ok(())
    }

    fn program(&mut self) -> R {
        let mut last = None;
        loop {
            while *self.peek() == Tok::End {
                if self.pos + 1 >= self.toks.len() {
                    return last.ok_or_else(|| self.syntax("no expression"));
                }
                self.pos += 1;
            }
            // `name = expr` binds; anything else is an expression.
            if let (Tok::Ident(name), Some((Tok::Assign, _))) =
                (self.peek().clone(), self.toks.get(self.pos + 1))
            {
                self.pos += 2;
                let v = self.expr()?;
                self.vars.insert(name, v.clone());
                last = Some(v);
            } else {
                last = Some(self.expr()?);
                // GSM8K writes `expr=result`: a trailing `= number` is a claim,
                // not part of the program (see `check_claim`).
            }
            match self.peek() {
                Tok::End => {}
                _ => return Err(self.syntax("expected an operator or the end")),
            }
        }
    }

    fn expr(&mut self) -> R {
        let mut v = self.term()?;
        while let Tok::Op(op @ ("+" | "-")) = *self.peek() {
            self.pos += 1;
            let r = self.term()?;
            self.step()?;
            let x = if op == "+" {
                &v.exact + &r.exact
            } else {
                &v.exact - &r.exact
            };
            v = bounded(x, v.is_exact && r.is_exact)?;
        }
        Ok(v)
    }

    fn term(&mut self) -> R {
        let mut v = self.unary()?;
        loop {
            let op = match *self.peek() {
                Tok::Op(op @ ("*" | "/" | "//")) => op,
                // `%` between two operands is the remainder; after an
                // operand with nothing after it, a percentage (`unary`).
                Tok::Op("%") if self.starts_operand(self.pos + 1) => "%",
                _ => break,
            };
            self.pos += 1;
            let r = self.unary()?;
            self.step()?;
            let exact = v.is_exact && r.is_exact;
            if matches!(op, "/" | "//" | "%") && r.exact.is_zero() {
                return Err(CalcError::DivisionByZero);
            }
            let x = match op {
                "*" => &v.exact * &r.exact,
                "/" => &v.exact / &r.exact,
                "//" => (&v.exact / &r.exact).floor(),
                _ => {
                    // Python's: the sign of the divisor.
                    let q = (&v.exact / &r.exact).floor();
                    &v.exact - &r.exact * q
                }
            };
            v = bounded(x, exact)?;
        }
        Ok(v)
    }

    fn starts_operand(&self, i: usize) -> bool {
        matches!(
            self.toks.get(i).map(|t| &t.0),
            Some(Tok::Num(_) | Tok::Ident(_) | Tok::LParen | Tok::Op("-" | "+"))
        )
    }

    fn unary(&mut self) -> R {
        if let Tok::Op(op @ ("-" | "+")) = *self.peek() {
            self.pos += 1;
            self.nest()?;
            let v = self.unary()?;
            self.depth -= 1;
            return Ok(if op == "-" {
                Value {
                    exact: -v.exact,
                    is_exact: v.is_exact,
                }
            } else {
                v
            });
        }
        self.power()
    }

    fn power(&mut self) -> R {
        let base = self.postfix()?;
        if *self.peek() == Tok::Op("^") {
            self.pos += 1;
            self.nest()?;
            // Right associative, and binds tighter than unary minus on its
            // left (`-2^2` is -4) but takes one on its right (`2^-1`).
            let exp = self.unary()?;
            self.depth -= 1;
            self.step()?;
            return pow(&base, &exp);
        }
        Ok(base)
    }

    fn postfix(&mut self) -> R {
        let mut v = self.atom()?;
        while *self.peek() == Tok::Op("%") && !self.starts_operand(self.pos + 1) {
            self.pos += 1;
            v = bounded(v.exact / BigRational::from_integer(100.into()), v.is_exact)?;
        }
        Ok(v)
    }

    fn atom(&mut self) -> R {
        match self.bump() {
            Tok::Num(n) => Ok(Value::exact(n)),
            Tok::LParen => {
                self.nest()?;
                let v = self.expr()?;
                self.depth -= 1;
                if self.bump() != Tok::RParen {
                    self.pos -= 1;
                    return Err(self.syntax("expected `)`"));
                }
                Ok(v)
            }
            Tok::Ident(name) if *self.peek() == Tok::LParen => {
                self.pos += 1;
                self.nest()?;
                let mut args = Vec::new();
                if *self.peek() != Tok::RParen {
                    loop {
                        args.push(self.expr()?);
                        if *self.peek() == Tok::Comma {
                            self.pos += 1;
                        } else {
                            break;
                        }
                    }
                }
                if self.bump() != Tok::RParen {
                    self.pos -= 1;
                    return Err(self.syntax("expected `)` or `,`"));
                }
                self.depth -= 1;
                self.step()?;
                call(&name, &args)
            }
            Tok::Ident(name) => self
                .vars
                .get(&name)
                .cloned()
                .ok_or(CalcError::Unknown(name)),
            _ => {
                self.pos -= 1;
                Err(self.syntax("expected a number, a name or `(`"))
            }
        }
    }
}

/// `x` if it fits the digit bound.
fn bounded(x: BigRational, is_exact: bool) -> R {
    let bits = x.numer().bits().max(x.denom().bits());
    // 10,000 digits is about 33,220 bits.
    if bits > (MAX_DIGITS as u64) * 3322 / 1000 {
        return Err(CalcError::TooLarge(format!(
            "a result of more than {MAX_DIGITS} digits"
        )));
    }
    Ok(Value { exact: x, is_exact })
}

fn pow(base: &Value, exp: &Value) -> R {
    let b = &base.exact;
    let e = &exp.exact;
    if e.is_integer() {
        let n = e.to_integer();
        if b.is_zero() && n.is_negative() {
            return Err(CalcError::DivisionByZero);
        }
        if b.is_zero() || b.abs().is_one() {
            let parity = n.is_odd();
            let v = if b.is_zero() && n.is_zero() || b.is_one() || (b.is_negative() && !parity) {
                BigRational::one()
            } else {
                b.clone()
            };
            return bounded(v, base.is_exact && exp.is_exact);
        }
        // The result has about |n| * bits(base) bits: refuse before computing.
        let bits = b.numer().bits().max(b.denom().bits()).max(1);
        let limit = (MAX_DIGITS as u64) * 3322 / 1000;
        let k = n
            .abs()
            .to_u64()
            .filter(|k| k.saturating_mul(bits.saturating_sub(1).max(1)) <= limit);
        let Some(k) = k else {
            return Err(CalcError::TooLarge(format!(
                "a result of more than {MAX_DIGITS} digits"
            )));
        };
        let p = b.pow(k as i32);
        let v = if n.is_negative() { p.recip() } else { p };
        return bounded(v, base.is_exact && exp.is_exact);
    }
    // A fractional exponent p/q: exact when the q-th root is, else approximate.
    if b.is_negative() {
        return Err(CalcError::Domain(
            "a negative number to a fractional power".into(),
        ));
    }
    let q = e
        .denom()
        .to_u32()
        .filter(|&q| q <= 64)
        .ok_or_else(|| CalcError::TooLarge("a root of too high a degree".into()))?;
    let root = nth_root(b, q);
    let p = Value {
        exact: root.0,
        is_exact: root.1 && base.is_exact,
    };
    pow(
        &p,
        &Value {
            exact: BigRational::from_integer(e.numer().clone()),
            is_exact: exp.is_exact,
        },
    )
}

/// The `q`-th root of `x >= 0`: exact when both parts are perfect powers,
/// else to [`APPROX_DIGITS`] + 10 digits.
fn nth_root(x: &BigRational, q: u32) -> (BigRational, bool) {
    let (n, d) = (x.numer(), x.denom());
    let (rn, rd) = (n.nth_root(q), d.nth_root(q));
    if rn.pow(q) == *n && rd.pow(q) == *d {
        return (BigRational::new(rn, rd), true);
    }
    // Scale by 10^(q * k) so the integer root carries k fractional digits.
    let k = (APPROX_DIGITS + 10) as u32;
    let scale = BigInt::from(10).pow(q * k);
    let scaled = (x * BigRational::from_integer(scale)).to_integer();
    let r = scaled.nth_root(q);
    (BigRational::new(r, BigInt::from(10).pow(k)), false)
}

fn call(name: &str, args: &[Value]) -> R {
    let one = |what: &str| -> Result<&Value, CalcError> {
        match args {
            [v] => Ok(v),
            _ => Err(CalcError::Domain(format!("{what} takes one argument"))),
        }
    };
    match name {
        "round" => {
            let (v, digits) = match args {
                [v] => (v, 0i64),
                [v, d] if d.exact.is_integer() => {
                    (v, d.exact.to_integer().to_i64().unwrap_or(i64::MAX))
                }
                _ => {
                    return Err(CalcError::Domain(
                        "round takes a value and optional whole digits".into(),
                    ))
                }
            };
            if digits.abs() > 1000 {
                return Err(CalcError::TooLarge("round to more than 1000 digits".into()));
            }
            let scale = BigRational::from_integer(BigInt::from(10)).pow(digits as i32);
            // Half away from zero, as people round (Python rounds half to even).
            bounded((&v.exact * &scale).round() / scale, v.is_exact)
        }
        "floor" => one("floor").map(|v| Value {
            exact: v.exact.floor(),
            is_exact: v.is_exact,
        }),
        "ceil" => one("ceil").map(|v| Value {
            exact: v.exact.ceil(),
            is_exact: v.is_exact,
        }),
        "abs" => one("abs").map(|v| Value {
            exact: v.exact.abs(),
            is_exact: v.is_exact,
        }),
        "sqrt" => {
            let v = one("sqrt")?;
            if v.exact.is_negative() {
                return Err(CalcError::Domain("sqrt of a negative number".into()));
            }
            let (r, exact) = nth_root(&v.exact, 2);
            Ok(Value {
                exact: r,
                is_exact: exact && v.is_exact,
            })
        }
        "min" | "max" => {
            let mut it = args.iter();
            let first = it
                .next()
                .ok_or_else(|| CalcError::Domain(format!("{name} needs an argument")))?;
            Ok(it.fold(first.clone(), |a, b| {
                let pick_b = if name == "min" {
                    b.exact < a.exact
                } else {
                    b.exact > a.exact
                };
                if pick_b {
                    b.clone()
                } else {
                    a
                }
            }))
        }
        other => Err(CalcError::Domain(format!(
            "unknown function `{other}`; use round, floor, ceil, abs, min, max or sqrt"
        ))),
    }
}

/// Evaluate a program; the value of its last expression.
pub fn eval(src: &str) -> Result<Value, CalcError> {
    let toks = lex(src)?;
    let mut e = Eval {
        toks: &toks,
        pos: 0,
        vars: HashMap::new(),
        steps: 0,
        depth: 0,
    };
    e.program()
}

/// What checking a stated result found.
#[derive(Debug, Clone, PartialEq)]
pub enum Claim {
    /// The stated result is the value (or the value rounded to the digits
    /// the statement gives).
    Right,
    /// It is not: the computed value.
    Wrong(Value),
}

/// Check `claimed` (a number as written: `80`, `12.5`, `$1,200`, `25%`)
/// against the value of `expr`. A claim written with d > 0 decimals is
/// right when the value rounds to it at d decimals (`10/3 = 3.33`); a whole
/// number must be the value itself.
pub fn check_claim(expr: &str, claimed: &str) -> Result<Claim, CalcError> {
    let value = eval(expr)?;
    let stated = eval(claimed)?;
    let decimals = claimed
        .trim()
        .trim_end_matches('%')
        .split_once('.')
        .map_or(0, |(_, f)| f.trim().len()) as i32;
    let decimals = if claimed.trim().ends_with('%') {
        decimals + 2
    } else {
        decimals
    };
    let scale = BigRational::from_integer(BigInt::from(10)).pow(decimals);
    let rounded = (&value.exact * &scale).round() / &scale;
    // A claim with fewer decimals than the value is right only when it is
    // the value rounded: `7` for 7.5 is not (it would hide a lost half).
    if stated.exact == value.exact || (decimals > 0 && stated.exact == rounded) {
        Ok(Claim::Right)
    } else {
        Ok(Claim::Wrong(value))
    }
}

/// Every GSM8K-style annotation `<<expr=result>>` in `text`, as
/// `(byte offset, expr, result)`.
pub fn annotations(text: &str) -> Vec<(usize, &str, &str)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(s) = text[from..].find("<<") {
        let start = from + s + 2;
        let Some(e) = text[start..].find(">>") else {
            break;
        };
        let inner = &text[start..start + e];
        if let Some((expr, result)) = inner.rsplit_once('=') {
            out.push((start - 2, expr, result));
        }
        from = start + e + 2;
    }
    out
}

#[cfg(test)]
mod tests;
