//! The parser: tokens to a syntax tree of the z3py subset.
//!
//! Recursive descent over [`lex`](super::lex)'s tokens, because every
//! construct outside the subset must come back as an error that names it
//! (a `for`, Python's `and`, a `lambda`) rather than as "unexpected token".
//! Chains of `+`/`-` and `*` are kept flat so that a long sum is not a deep
//! tree; the nesting that remains is bounded by the depth limit.

use super::lex::{Tok, Token};
use super::LogicError;

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// An expression and the line it starts on.
#[derive(Debug, Clone)]
pub(crate) struct Expr {
    pub line: usize,
    pub kind: ExprKind,
}

#[derive(Debug, Clone)]
pub(crate) enum ExprKind {
    Int(i64),
    Bool(bool),
    Str(String),
    Name(String),
    Neg(Box<Expr>),
    /// `a + b - c`: each term with whether it is subtracted.
    Add(Vec<(bool, Expr)>),
    /// `a * b * c`.
    Mul(Vec<Expr>),
    Div(Box<Expr>, Box<Expr>),
    Mod(Box<Expr>, Box<Expr>),
    /// `a < b <= c`: the first operand and each (operator, operand).
    Compare(Box<Expr>, Vec<(CmpOp, Expr)>),
    /// `f(args, key=value)`.
    Call(String, Vec<Expr>, Vec<(String, Expr)>),
    /// `receiver.method(args, key=value)`.
    Method(Box<Expr>, String, Vec<Expr>, Vec<(String, Expr)>),
    /// `m[x]`.
    Index(Box<Expr>, Box<Expr>),
    List(Vec<Expr>),
}

/// A statement.
#[derive(Debug, Clone)]
pub(crate) enum Stmt {
    /// `from z3 import *`.
    Import,
    /// `a, b = value`.
    Assign {
        line: usize,
        targets: Vec<String>,
        value: Expr,
    },
    /// An expression on its own (`s.add(...)`, `print(...)`).
    Expr(Expr),
}

/// Python keywords and what to say when one appears.
fn keyword_hint(word: &str) -> Option<(&'static str, &'static str)> {
    Some(match word {
        "and" => ("Python's `and`", "use And(a, b)"),
        "or" => ("Python's `or`", "use Or(a, b)"),
        "not" => ("Python's `not`", "use Not(a)"),
        "if" | "elif" | "else" => (
            "`if`",
            "write constraints with s.add(...) and If(c, a, b); no Python control flow",
        ),
        "for" => (
            "a `for` loop or comprehension",
            "declare variables with Ints('a b c') and write each constraint out",
        ),
        "while" => ("a `while` loop", "write each constraint out"),
        "def" => ("`def` (function definitions)", "write each constraint out"),
        "class" => ("`class`", "only declarations, s.add(...) and print(...)"),
        "lambda" => ("`lambda`", "write each constraint out"),
        "import" => ("`import`", "only `from z3 import *` is allowed"),
        "in" => ("`in`", "use Or(x == a, x == b)"),
        "is" => ("`is`", "use =="),
        "with" | "try" | "except" | "finally" | "raise" | "assert" | "return" | "yield"
        | "global" | "nonlocal" | "del" | "pass" | "break" | "continue" | "async" | "await" => (
            "a Python statement keyword",
            "only declarations, s.add(...) and print(...)",
        ),
        "None" => ("`None`", "use an integer or True/False"),
        _ => return None,
    })
}

/// Whether `word` can name a variable or binding.
pub(crate) fn is_reserved(word: &str) -> bool {
    keyword_hint(word).is_some() || matches!(word, "True" | "False")
}

struct Parser<'t> {
    tokens: &'t [Token],
    pos: usize,
    depth: usize,
    max_depth: usize,
}

/// Parses a token stream into statements.
pub(crate) fn parse(tokens: &[Token], max_depth: usize) -> Result<Vec<Stmt>, LogicError> {
    let mut parser = Parser {
        tokens,
        pos: 0,
        depth: 0,
        max_depth,
    };
    let mut stmts = Vec::new();
    loop {
        match parser.peek() {
            Tok::Eof => return Ok(stmts),
            Tok::Newline => parser.pos += 1,
            Tok::Op(";") => parser.pos += 1,
            _ => {
                stmts.push(parser.statement()?);
                match parser.peek() {
                    Tok::Newline | Tok::Eof => {}
                    Tok::Op(";") => parser.pos += 1,
                    _ => return Err(parser.unexpected("the end of the statement")),
                }
            }
        }
    }
}

impl Parser<'_> {
    fn peek(&self) -> &Tok {
        self.tokens
            .get(self.pos)
            .map_or(&Tok::Eof, |token| &token.tok)
    }

    fn peek_at(&self, offset: usize) -> &Tok {
        self.tokens
            .get(self.pos + offset)
            .map_or(&Tok::Eof, |token| &token.tok)
    }

    fn line(&self) -> usize {
        self.tokens
            .get(self.pos)
            .or(self.tokens.last())
            .map_or(1, |token| token.line)
    }

    fn is_op(&self, op: &str) -> bool {
        matches!(self.peek(), Tok::Op(o) if *o == op)
    }

    fn eat_op(&mut self, op: &str) -> bool {
        let found = self.is_op(op);
        if found {
            self.pos += 1;
        }
        found
    }

    fn expect_op(&mut self, op: &str) -> Result<(), LogicError> {
        if self.eat_op(op) {
            Ok(())
        } else {
            Err(self.unexpected(&format!("`{op}`")))
        }
    }

    /// The error for the current token when `wanted` was expected; a token
    /// that starts a known construct outside the subset is named as such.
    fn unexpected(&self, wanted: &str) -> LogicError {
        let line = self.line();
        match self.peek() {
            Tok::Name(word) => {
                if let Some((construct, hint)) = keyword_hint(word) {
                    return LogicError::unsupported(line, construct, hint);
                }
                LogicError::Syntax {
                    line,
                    what: format!("expected {wanted}, found `{word}`"),
                }
            }
            Tok::Indent => LogicError::unsupported(
                line,
                "an indented block",
                "statements must start at the beginning of the line",
            ),
            Tok::Op(op) => {
                let named = match *op {
                    "**" => Some(("the power operator `**`", "write x * x")),
                    "//" => Some(("floor division `//`", "use / (z3 integer division)")),
                    ":" => Some(("a block or slice (`:`)", "no Python control flow")),
                    ":=" => Some(("the walrus operator `:=`", "use a plain assignment")),
                    "{" => Some(("a dict or set literal", "use a list [a, b]")),
                    "+=" | "-=" | "*=" | "/=" | "%=" | "**=" | "//=" => {
                        Some(("augmented assignment", "write total = total + x"))
                    }
                    "&" | "|" | "^" | "~" | "<<" | ">>" | "@" | "!" => {
                        Some(("a bitwise operator", "use And/Or/Xor/Not"))
                    }
                    "->" => Some(("an annotation `->`", "no functions")),
                    _ => None,
                };
                if let Some((construct, hint)) = named {
                    return LogicError::unsupported(line, construct, hint);
                }
                LogicError::Syntax {
                    line,
                    what: format!("expected {wanted}, found `{op}`"),
                }
            }
            Tok::Int(digits) => LogicError::Syntax {
                line,
                what: format!("expected {wanted}, found the number {}", shorten(digits)),
            },
            Tok::Str(_) => LogicError::Syntax {
                line,
                what: format!("expected {wanted}, found a string"),
            },
            Tok::Newline | Tok::Eof => LogicError::Syntax {
                line,
                what: format!("expected {wanted}, found the end of the statement"),
            },
        }
    }

    fn enter(&mut self) -> Result<(), LogicError> {
        self.depth += 1;
        if self.depth > self.max_depth {
            return Err(LogicError::TooLarge {
                line: self.line(),
                what: format!("nesting deeper than {} levels", self.max_depth),
            });
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }

    fn statement(&mut self) -> Result<Stmt, LogicError> {
        let line = self.line();
        if let Tok::Name(word) = self.peek() {
            match word.as_str() {
                "from" => return self.import(),
                "print" | "solve" => {}
                w if keyword_hint(w).is_some() => return Err(self.unexpected("a statement")),
                _ => {}
            }
        }
        if matches!(self.peek(), Tok::Indent) {
            return Err(self.unexpected("a statement"));
        }
        // `a, b, c = Ints(...)`: a list of names before `=`.
        let mut targets = Vec::new();
        let mut offset = 0;
        while let Tok::Name(word) = self.peek_at(offset) {
            match self.peek_at(offset + 1) {
                Tok::Op(",") => {
                    targets.push(word.clone());
                    offset += 2;
                }
                Tok::Op("=") => {
                    targets.push(word.clone());
                    offset += 2;
                    self.pos += offset;
                    for target in &targets {
                        if is_reserved(target) {
                            return Err(LogicError::Invalid {
                                line,
                                what: format!("`{target}` cannot be assigned to"),
                            });
                        }
                    }
                    let value = self.expr()?;
                    return Ok(Stmt::Assign {
                        line,
                        targets,
                        value,
                    });
                }
                _ => break,
            }
        }
        Ok(Stmt::Expr(self.expr()?))
    }

    fn import(&mut self) -> Result<Stmt, LogicError> {
        let line = self.line();
        let is_z3_star = matches!(self.peek_at(1), Tok::Name(m) if m == "z3")
            && matches!(self.peek_at(2), Tok::Name(i) if i == "import")
            && matches!(self.peek_at(3), Tok::Op("*"));
        if !is_z3_star {
            return Err(LogicError::unsupported(
                line,
                "an import other than `from z3 import *`",
                "only `from z3 import *` is allowed",
            ));
        }
        self.pos += 4;
        Ok(Stmt::Import)
    }

    /// An expression: a comparison chain, where Python's boolean keywords
    /// and conditional expressions are refused by name.
    fn expr(&mut self) -> Result<Expr, LogicError> {
        self.enter()?;
        let result = self.comparison();
        self.leave();
        let expr = result?;
        if let Tok::Name(word) = self.peek() {
            // `for` after a list item is a comprehension: the list names it.
            if keyword_hint(word).is_some() && word != "for" {
                return Err(self.unexpected("an operator"));
            }
        }
        Ok(expr)
    }

    fn comparison(&mut self) -> Result<Expr, LogicError> {
        let line = self.line();
        if let Tok::Name(word) = self.peek() {
            if matches!(word.as_str(), "not" | "lambda") {
                return Err(self.unexpected("an expression"));
            }
        }
        let first = self.arith()?;
        let mut rest = Vec::new();
        loop {
            let op = match self.peek() {
                Tok::Op("==") => CmpOp::Eq,
                Tok::Op("!=") => CmpOp::Ne,
                Tok::Op("<") => CmpOp::Lt,
                Tok::Op("<=") => CmpOp::Le,
                Tok::Op(">") => CmpOp::Gt,
                Tok::Op(">=") => CmpOp::Ge,
                _ => break,
            };
            self.pos += 1;
            rest.push((op, self.arith()?));
        }
        if rest.is_empty() {
            Ok(first)
        } else {
            Ok(Expr {
                line,
                kind: ExprKind::Compare(Box::new(first), rest),
            })
        }
    }

    fn arith(&mut self) -> Result<Expr, LogicError> {
        let line = self.line();
        let first = self.term()?;
        let mut terms = vec![(false, first)];
        loop {
            let negated = if self.eat_op("+") {
                false
            } else if self.eat_op("-") {
                true
            } else {
                break;
            };
            terms.push((negated, self.term()?));
        }
        if terms.len() == 1 {
            Ok(terms.remove(0).1)
        } else {
            Ok(Expr {
                line,
                kind: ExprKind::Add(terms),
            })
        }
    }

    fn term(&mut self) -> Result<Expr, LogicError> {
        let line = self.line();
        let mut acc = self.unary()?;
        let mut factors: Vec<Expr> = Vec::new();
        let mut nested_divisions = 0;
        loop {
            if self.eat_op("*") {
                let rhs = self.unary()?;
                if factors.is_empty() {
                    factors.push(acc.clone());
                }
                factors.push(rhs);
                continue;
            }
            let is_div = self.is_op("/");
            let is_mod = self.is_op("%");
            if !is_div && !is_mod {
                break;
            }
            self.pos += 1;
            if !factors.is_empty() {
                acc = Expr {
                    line,
                    kind: ExprKind::Mul(std::mem::take(&mut factors)),
                };
            }
            let rhs = self.unary()?;
            let (lhs, rhs) = (Box::new(acc), Box::new(rhs));
            acc = Expr {
                line,
                kind: if is_div {
                    ExprKind::Div(lhs, rhs)
                } else {
                    ExprKind::Mod(lhs, rhs)
                },
            };
            // A chain of divisions nests; count it against the depth limit.
            self.enter()?;
            nested_divisions += 1;
        }
        for _ in 0..nested_divisions {
            self.leave();
        }
        if !factors.is_empty() {
            acc = Expr {
                line,
                kind: ExprKind::Mul(factors),
            };
        }
        Ok(acc)
    }

    fn unary(&mut self) -> Result<Expr, LogicError> {
        let line = self.line();
        if self.eat_op("-") {
            self.enter()?;
            let inner = self.unary();
            self.leave();
            return Ok(Expr {
                line,
                kind: ExprKind::Neg(Box::new(inner?)),
            });
        }
        if self.eat_op("+") {
            self.enter()?;
            let inner = self.unary();
            self.leave();
            return inner;
        }
        let base = self.postfix()?;
        if self.is_op("**") {
            return Err(self.unexpected("an operator"));
        }
        Ok(base)
    }

    fn postfix(&mut self) -> Result<Expr, LogicError> {
        let mut expr = self.primary()?;
        loop {
            let line = self.line();
            if self.is_op("(") {
                let callee = match &expr.kind {
                    ExprKind::Name(name) => name.clone(),
                    _ => {
                        return Err(LogicError::unsupported(
                            line,
                            "calling the result of an expression",
                            "call z3 functions by name, e.g. And(a, b)",
                        ))
                    }
                };
                let (args, kwargs) = self.arguments()?;
                expr = Expr {
                    line: expr.line,
                    kind: ExprKind::Call(callee, args, kwargs),
                };
            } else if self.eat_op(".") {
                let method = match self.peek() {
                    Tok::Name(name) => name.clone(),
                    _ => return Err(self.unexpected("a method name")),
                };
                self.pos += 1;
                if !self.is_op("(") {
                    return Err(LogicError::unsupported(
                        line,
                        &format!("the attribute `.{method}`"),
                        "only s.add(...), s.check(), s.model(), m[x] and m.eval(x)",
                    ));
                }
                let (args, kwargs) = self.arguments()?;
                expr = Expr {
                    line: expr.line,
                    kind: ExprKind::Method(Box::new(expr), method, args, kwargs),
                };
            } else if self.eat_op("[") {
                self.enter()?;
                let index = self.expr();
                self.leave();
                let index = index?;
                if self.is_op(":") {
                    return Err(LogicError::unsupported(
                        line,
                        "a slice",
                        "index a model with one variable: m[x]",
                    ));
                }
                self.expect_op("]")?;
                expr = Expr {
                    line: expr.line,
                    kind: ExprKind::Index(Box::new(expr), Box::new(index)),
                };
            } else {
                return Ok(expr);
            }
        }
    }

    /// `(a, b, key=value)`, with the opening parenthesis next.
    #[allow(clippy::type_complexity)]
    fn arguments(&mut self) -> Result<(Vec<Expr>, Vec<(String, Expr)>), LogicError> {
        self.expect_op("(")?;
        self.enter()?;
        let mut args = Vec::new();
        let mut kwargs = Vec::new();
        while !self.is_op(")") {
            if self.is_op("*") {
                return Err(LogicError::unsupported(
                    self.line(),
                    "argument unpacking `*args`",
                    "pass the arguments one by one or as a list",
                ));
            }
            if let (Tok::Name(key), Tok::Op("=")) = (self.peek(), self.peek_at(1)) {
                let key = key.clone();
                self.pos += 2;
                kwargs.push((key, self.expr()?));
            } else {
                args.push(self.expr()?);
            }
            if !self.eat_op(",") {
                break;
            }
        }
        self.expect_op(")")?;
        self.leave();
        Ok((args, kwargs))
    }

    fn primary(&mut self) -> Result<Expr, LogicError> {
        let line = self.line();
        let kind = match self.peek().clone() {
            Tok::Int(digits) => {
                self.pos += 1;
                ExprKind::Int(parse_int(&digits, line)?)
            }
            Tok::Str(text) => {
                self.pos += 1;
                ExprKind::Str(text)
            }
            Tok::Name(word) => {
                if keyword_hint(&word).is_some() {
                    return Err(self.unexpected("an expression"));
                }
                self.pos += 1;
                match word.as_str() {
                    "True" => ExprKind::Bool(true),
                    "False" => ExprKind::Bool(false),
                    _ => ExprKind::Name(word),
                }
            }
            Tok::Op("(") => {
                self.pos += 1;
                self.enter()?;
                let inner = self.expr();
                self.leave();
                let inner = inner?;
                if self.is_op(",") {
                    return Err(LogicError::unsupported(
                        line,
                        "a tuple",
                        "use a list [a, b] or separate arguments",
                    ));
                }
                self.expect_op(")")?;
                return Ok(inner);
            }
            Tok::Op("[") => {
                self.pos += 1;
                self.enter()?;
                let mut items = Vec::new();
                while !self.is_op("]") {
                    items.push(self.expr()?);
                    if matches!(self.peek(), Tok::Name(w) if w == "for") {
                        return Err(LogicError::unsupported(
                            line,
                            "a list comprehension",
                            "declare variables with Ints('a b c') and list them out",
                        ));
                    }
                    if !self.eat_op(",") {
                        break;
                    }
                }
                self.expect_op("]")?;
                self.leave();
                ExprKind::List(items)
            }
            _ => return Err(self.unexpected("an expression")),
        };
        Ok(Expr { line, kind })
    }
}

/// Most digits in an integer literal: enough for any puzzle, far from
/// overflowing an `i64`.
const MAX_LITERAL_DIGITS: usize = 18;

fn parse_int(digits: &str, line: usize) -> Result<i64, LogicError> {
    let significant = digits.trim_start_matches('0');
    if significant.len() > MAX_LITERAL_DIGITS {
        return Err(LogicError::TooLarge {
            line,
            what: format!(
                "integer literal {} has more than {MAX_LITERAL_DIGITS} digits",
                shorten(digits)
            ),
        });
    }
    if significant.is_empty() {
        return Ok(0);
    }
    significant.parse::<i64>().map_err(|_| LogicError::Syntax {
        line,
        what: format!("bad integer literal {}", shorten(digits)),
    })
}

/// The first characters of a long token, for an error message.
fn shorten(text: &str) -> String {
    if text.len() <= 24 {
        text.to_string()
    } else {
        let head: String = text.chars().take(20).collect();
        format!("{head}...")
    }
}
