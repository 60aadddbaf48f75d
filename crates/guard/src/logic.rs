//! The logic solver: a puzzle written as a constraint program in the
//! declarative subset of z3's Python API, parsed (never executed) and solved
//! by a real CP/SAT solver, with a check that the answer is unique.
//!
//! Why z3py: small models already know it, so they can state a puzzle in it
//! without examples; decoding under [`GRAMMAR`] keeps the program inside the
//! subset. Why not run it: the text comes from a model, so it is only ever
//! read as data. The subset:
//!
//! ```text
//! from z3 import *
//! a, b = Ints('a b')            # also Int('x'), Bool('p'), Bools('p q')
//! s = Solver()
//! s.add(a >= 1, a <= 9, b == 2 * a, Distinct(a, b))
//! print(s.check())
//! m = s.model()
//! print(m[a], m[b])             # or print(m), print(m.eval(a))
//! ```
//!
//! Terms: integer literals, `True`/`False`, `+ - *`, `/` and `%` by a
//! constant (z3's Euclidean division), comparisons (chains such as
//! `1 <= x <= 9` mean their conjunction), `And`, `Or`, `Not`, `Implies`,
//! `Xor`, `If`, `Distinct`, `Sum`, `Product`, `Abs`; a name may be bound to
//! a term (`total = a + b`). `solve(...)` is `s.add(...)` plus printing the
//! whole model. Anything else is an error naming the construct and line.
//!
//! z3's integers are unbounded; here an `Int` without stated bounds ranges
//! over `[-DEFAULT_BOUND, DEFAULT_BOUND]` (see [`DEFAULT_BOUND`]), and the
//! solution's notes say when an answer sits on such a bound. Every input
//! ends within [`Limits`]: text size, variable count, nesting depth,
//! constraint count and a time budget (after which the status is
//! [`Status::Unknown`]).

mod build;
mod lex;
mod parse;
mod resolve;

pub use build::{DEFAULT_BOUND, SOLVER_LIMIT};

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// Bounds that keep any input, however hostile, finite in time and memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Most declared variables (checked while declaring, before any solver
    /// state exists).
    pub max_variables: usize,
    /// Longest program text, in bytes (checked before lexing).
    pub max_text_bytes: usize,
    /// Search time for the first answer and the uniqueness check together.
    pub time_budget: Duration,
    /// Deepest nesting of parentheses, calls and unary operators.
    pub max_depth: usize,
    /// Most constraints, auxiliary variables and clauses built for the
    /// solver (a `Distinct` of n terms counts n²/2).
    pub max_constraints: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_variables: 10_000,
            max_text_bytes: 256 * 1024,
            time_budget: Duration::from_secs(2),
            max_depth: 64,
            max_constraints: 200_000,
        }
    }
}

/// Whether the constraints have a solution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// A solution was found.
    Sat,
    /// There is provably no solution (within the variables' domains).
    Unsat,
    /// The time budget ran out first.
    Unknown,
}

/// A variable's value in a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Val {
    /// The value of an `Int`.
    Int(i64),
    /// The value of a `Bool`.
    Bool(bool),
}

/// The answer to a program. Serialises as
/// `{"status": "sat", "model": {"x": 3, "p": true}, "unique": true}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Solution {
    /// Sat, unsat or unknown.
    pub status: Status,
    /// The values of the variables the program asks for (all declared
    /// variables when it asks for none); empty unless sat.
    pub model: BTreeMap<String, Val>,
    /// Whether no other assignment of the asked variables satisfies the
    /// constraints. Only true when proven: false for unsat, unknown, and a
    /// uniqueness check that ran out of time.
    pub unique: bool,
    /// Caveats for a human reader (an answer on a default bound, a
    /// uniqueness check cut short); not part of the serialised answer.
    #[serde(skip)]
    pub notes: Vec<String>,
}

impl Solution {
    fn unsat() -> Self {
        Self {
            status: Status::Unsat,
            model: BTreeMap::new(),
            unique: false,
            notes: Vec::new(),
        }
    }

    fn unknown() -> Self {
        Self {
            status: Status::Unknown,
            ..Self::unsat()
        }
    }
}

/// Why a program could not be solved. Every variant carries the 1-based
/// line of the problem (0 when it concerns the whole text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LogicError {
    /// A construct outside the subset, named.
    #[error("line {line}: {construct} is not supported ({hint})")]
    Unsupported {
        /// Where it is.
        line: usize,
        /// What it is, e.g. "a `for` loop or comprehension".
        construct: String,
        /// What to write instead.
        hint: String,
    },
    /// Text that is not even in the shape of the subset.
    #[error("line {line}: syntax error: {what}")]
    Syntax {
        /// Where it is.
        line: usize,
        /// What was wrong.
        what: String,
    },
    /// Well-formed but meaningless: an undeclared name, a sort mismatch.
    #[error("line {line}: {what}")]
    Invalid {
        /// Where it is.
        line: usize,
        /// What was wrong.
        what: String,
    },
    /// Division or remainder by the constant zero.
    #[error("line {line}: division by zero")]
    DivisionByZero {
        /// Where it is.
        line: usize,
    },
    /// Beyond one of the [`Limits`] or the solver's number range.
    #[error("line {line}: too large: {what}")]
    TooLarge {
        /// Where it is (0: the whole text).
        line: usize,
        /// Which bound.
        what: String,
    },
    /// The solver library failed (a bug there, caught rather than crashing).
    #[error("internal solver failure: {0}")]
    Internal(String),
}

impl LogicError {
    fn unsupported(line: usize, construct: &str, hint: &str) -> Self {
        LogicError::Unsupported {
            line,
            construct: construct.to_string(),
            hint: hint.to_string(),
        }
    }

    /// The 1-based line the error is about (0: the whole text).
    pub fn line(&self) -> usize {
        match self {
            LogicError::Unsupported { line, .. }
            | LogicError::Syntax { line, .. }
            | LogicError::Invalid { line, .. }
            | LogicError::DivisionByZero { line }
            | LogicError::TooLarge { line, .. } => *line,
            LogicError::Internal(_) => 0,
        }
    }
}

/// Parses a z3py-subset program and solves it: status, the asked values,
/// and whether they are the only solution.
pub fn solve(src: &str, limits: &Limits) -> Result<Solution, LogicError> {
    if src.len() > limits.max_text_bytes {
        return Err(LogicError::TooLarge {
            line: 0,
            what: format!(
                "program of {} bytes (at most {})",
                src.len(),
                limits.max_text_bytes
            ),
        });
    }
    let tokens = lex::lex(src)?;
    let stmts = parse::parse(&tokens, limits.max_depth)?;
    let program = resolve::resolve(&stmts, limits)?;
    if OVERRUNNING.load(Ordering::SeqCst) > 0 {
        let mut busy = Solution::unknown();
        busy.notes.push(
            "not solved: an earlier program overran its time budget and is still being stopped"
                .into(),
        );
        return Ok(busy);
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let abandoned = Arc::new(Mutex::new(false));
    let worker_abandoned = Arc::clone(&abandoned);
    let worker_limits = limits.clone();
    std::thread::Builder::new()
        .name("logic-solver".into())
        .spawn(move || {
            // Pumpkin is a third-party library: should it panic on some
            // input, the caller gets an error instead of a crashed server.
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                build::solve_program(&program, &worker_limits)
            }))
            .unwrap_or_else(|panic| {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "panic".to_string());
                Err(LogicError::Internal(what))
            });
            let gone = worker_abandoned
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if *gone {
                OVERRUNNING.fetch_sub(1, Ordering::SeqCst);
            } else {
                let _ = tx.send(result);
            }
        })
        .map_err(|e| LogicError::Internal(format!("cannot start the solver: {e}")))?;
    if let Ok(result) = rx.recv_timeout(limits.time_budget + OVERRUN) {
        return result;
    }
    let mut gone = abandoned.lock().unwrap_or_else(PoisonError::into_inner);
    // The worker may have answered between the timeout and the lock.
    if let Ok(result) = rx.try_recv() {
        return result;
    }
    // It stops at its next budget check; until then, other programs get
    // `unknown` rather than a second overrunning solver beside it.
    *gone = true;
    OVERRUNNING.fetch_add(1, Ordering::SeqCst);
    let mut late = Solution::unknown();
    late.notes.push(format!(
        "the solver overran its {:?} time budget inside one step",
        limits.time_budget
    ));
    Ok(late)
}

/// How long past its time budget a solve may run before the caller gets
/// [`Status::Unknown`]. Pumpkin checks the budget only between conflicts,
/// and one conflict can take seconds: two remainders of one sum over wide
/// domains (`(e - a) % 6`, `(e - a) % 3`, found by fuzzing) make bound
/// propagation creep one unit at a time across the whole domain.
const OVERRUN: Duration = Duration::from_millis(500);

/// Solves that overran their budget and whose worker still runs (0 or 1).
static OVERRUNNING: AtomicUsize = AtomicUsize::new(0);

/// The subset as a grammar in llguidance's Lark syntax, for constrained
/// decoding: every program it generates parses. It is deliberately
/// narrower than the parser (fixed layout: import, declarations, solver,
/// constraints, check, model, prints) so a model has few ways to go wrong.
/// Checked with llguidance 1.9.1 (single-byte tokenizer): it compiles,
/// accepts the programs in `tests/data/grammar/`, and rejects Python's
/// `and`, comments, and a variable named `print`. What it cannot see:
/// undeclared names, sort errors and name-count mismatches, which the
/// parser reports with their line.
pub const GRAMMAR: &str = r#"start: header decl+ solver add+ check show+
header: "from z3 import *" NL
decl: NAME "=" "Int" "(" ONE_NAME ")" NL
    | NAME ("," NAME)+ "=" "Ints" "(" NAMES ")" NL
    | NAME "=" "Bool" "(" ONE_NAME ")" NL
    | NAME ("," NAME)+ "=" "Bools" "(" NAMES ")" NL
solver: "s" "=" "Solver" "(" ")" NL
add: "s" "." "add" "(" expr ("," expr)* ")" NL
check: "print" "(" "s" "." "check" "(" ")" ")" NL "m" "=" "s" "." "model" "(" ")" NL
show: "print" "(" "m" ")" NL
    | "print" "(" value ("," value)* ")" NL
value: "m" "[" NAME "]"
    | ONE_NAME
expr: comparison
comparison: sum (CMP sum)*
sum: product (ADD product)*
product: unary ("*" unary)*
unary: "-" unary
    | atom
atom: NUMBER
    | NAME
    | "True"
    | "False"
    | "(" expr ")"
    | call
call: NARY "(" expr ("," expr)* ")"
    | NARY "(" "[" expr ("," expr)* "]" ")"
    | "Not" "(" expr ")"
    | BINARY "(" expr "," expr ")"
    | "If" "(" expr "," expr "," expr ")"
NARY: "And" | "Or" | "Distinct" | "Sum"
BINARY: "Implies" | "Xor"
CMP: "==" | "!=" | "<=" | ">=" | "<" | ">"
ADD: "+" | "-"
NAME: /[a-z_][a-z0-9_]{0,30}/ & ~/(and|or|not|if|elif|else|for|while|in|is|def|del|lambda|import|from|return|with|as|pass|class|try|except|raise|assert|global|yield|break|continue|print|solve|sat|unsat|unknown|s|m)/
NUMBER: /[0-9]{1,9}/
ONE_NAME: /'[A-Za-z_][A-Za-z0-9_]{0,30}'/
NAMES: /'[A-Za-z_][A-Za-z0-9_]{0,30}( [A-Za-z_][A-Za-z0-9_]{0,30}){1,63}'/
NL: /\n/
%ignore /[ \t]+/
"#;

#[cfg(test)]
mod tests {
    use super::*;

    fn run(src: &str) -> Result<Solution, LogicError> {
        solve(src, &Limits::default())
    }

    fn int(solution: &Solution, name: &str) -> i64 {
        match solution.model.get(name) {
            Some(Val::Int(v)) => *v,
            other => panic!("{name}: {other:?} in {solution:?}"),
        }
    }

    #[test]
    fn solves_a_small_linear_system() {
        let s = run("from z3 import *\nx, y = Ints('x y')\ns = Solver()\ns.add(x + y == 10, x - y == 4)\nprint(s.check())\nm = s.model()\nprint(m[x], m[y])\n").unwrap();
        assert_eq!(s.status, Status::Sat);
        assert_eq!((int(&s, "x"), int(&s, "y")), (7, 3));
        assert!(s.unique);
    }

    #[test]
    fn serialises_exactly() {
        let s = run("p = Bool('p')\nx = Int('x')\ns = Solver()\ns.add(p, x == 2)\n").unwrap();
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"status": "sat", "model": {"p": true, "x": 2}, "unique": true})
        );
        let u = run("x = Int('x')\ns = Solver()\ns.add(x > 1, x < 1)\n").unwrap();
        assert_eq!(
            serde_json::to_value(&u).unwrap(),
            serde_json::json!({"status": "unsat", "model": {}, "unique": false})
        );
    }

    #[test]
    fn reports_non_unique_answers() {
        let s = run("x = Int('x')\ns = Solver()\ns.add(x >= 1, x <= 2)\n").unwrap();
        assert_eq!(s.status, Status::Sat);
        assert!(!s.unique);
    }

    #[test]
    fn division_modulo_and_products() {
        let s = run("x, y, q, r = Ints('x y q r')\ns = Solver()\ns.add(x == -7, q == x / 2, r == x % 2, y * y == 49, y > 0)\n").unwrap();
        // z3: -7 div 2 = -4, -7 mod 2 = 1 (Euclidean).
        assert_eq!((int(&s, "q"), int(&s, "r"), int(&s, "y")), (-4, 1, 7));
        assert!(s.unique);
    }

    #[test]
    fn if_sum_and_aliases() {
        let src = "p, q, r = Bools('p q r')\nn = Int('n')\ncount = Sum([If(p, 1, 0), If(q, 1, 0), If(r, 1, 0)])\ns = Solver()\ns.add(count == 2, Not(q), n == If(p, 10, 20) + count)\nprint(s.model())\n";
        let s = run(src).unwrap();
        assert_eq!(s.model.get("q"), Some(&Val::Bool(false)));
        assert_eq!(int(&s, "n"), 12);
        assert!(s.unique);
    }

    #[test]
    fn asked_values_limit_the_model() {
        let s = run("x, y = Ints('x y')\ns = Solver()\ns.add(x == 1, y >= 0, y <= 5)\nprint(s.check())\nm = s.model()\nprint(m[x])\n").unwrap();
        assert_eq!(s.model.len(), 1);
        // y is free but not asked for, so x's answer is unique.
        assert!(s.unique);
    }

    #[test]
    fn notes_a_default_bound() {
        let s = run("x = Int('x')\ns = Solver()\ns.add(x >= 5)\nprint(m.eval(x))\n");
        // `m` is never bound: an error, not a panic.
        assert!(s.is_err());
        let s = run("x = Int('x')\ns = Solver()\ns.add(x * 1 >= 999999 + 1)\n").unwrap();
        assert_eq!(int(&s, "x"), DEFAULT_BOUND);
        assert!(!s.notes.is_empty());
    }

    #[test]
    fn grammar_mentions_every_function() {
        for word in [
            "Int", "Ints", "Bool", "Bools", "Solver", "add", "check", "model", "And", "Or", "Not",
            "Implies", "Xor", "If", "Distinct", "Sum", "print", "%ignore",
        ] {
            assert!(GRAMMAR.contains(word), "{word}");
        }
    }
}
