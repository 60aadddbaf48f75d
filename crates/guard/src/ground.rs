//! Whether a program the model wrote is about the question.
//!
//! A small model asked for a calculator or solver program may write one
//! that has nothing to do with the question (`x = 100000000000 + …` for a
//! question about pens at $3). Its value is then exact and meaningless, and
//! handing it to the answer as a fact would make the guard vouch for
//! nonsense. A program counts only when every number it writes is one of
//! the question's quantities (or a simple conversion of one: a percentage
//! as a fraction), a constant from a short list (units, halves, hours,
//! weeks), or, in a puzzle, a position up to the count the question names;
//! and, when the question has quantities, it uses at least one of them.
//! Names are the program's own: the calculator and the solver already
//! refuse a name the program did not bind.

use crate::claims;
use num_bigint::BigInt;
use num_rational::BigRational;
use num_traits::{One, Zero};

/// Constants any program may use beside the question's numbers: 0 and 1,
/// 2 (doubling, halves), 10, 100 and 1000 (decimal units, percentages),
/// 7, 12, 24, 52, 60, 365, 3600 (days, dozens, hours, weeks, minutes).
const CONSTANTS: [i64; 13] = [0, 1, 2, 7, 10, 12, 24, 52, 60, 100, 365, 1000, 3600];

/// Number words beyond `claims::numbers`' zero to twelve, and the
/// fractions and multiples questions spell out.
const WORDS: [(&str, i64); 22] = [
    ("thirteen", 13),
    ("fourteen", 14),
    ("fifteen", 15),
    ("sixteen", 16),
    ("seventeen", 17),
    ("eighteen", 18),
    ("nineteen", 19),
    ("twenty", 20),
    ("thirty", 30),
    ("forty", 40),
    ("fifty", 50),
    ("sixty", 60),
    ("hundred", 100),
    ("thousand", 1000),
    ("million", 1_000_000),
    ("dozen", 12),
    ("half", 2),
    ("third", 3),
    ("thirds", 3),
    ("quarter", 4),
    ("twice", 2),
    ("triple", 3),
];

/// What grounding found wrong with a program, for the trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ungrounded {
    /// Numbers the question does not hold (as written in the program).
    Foreign(Vec<String>),
    /// The question has quantities and the program uses none of them.
    Unrelated,
}

impl std::fmt::Display for Ungrounded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ungrounded::Foreign(nums) => write!(
                f,
                "it uses numbers the question does not hold ({})",
                nums.join(", ")
            ),
            Ungrounded::Unrelated => write!(f, "it uses none of the question's numbers"),
        }
    }
}

/// The quantities of `question`: its numbers in digits (with `$`, `,`,
/// `%`) and in words, a percentage also as its fraction and back.
pub fn quantities(question: &str) -> Vec<BigRational> {
    let hundred = BigRational::from_integer(BigInt::from(100));
    let mut out = Vec::new();
    for n in claims::numbers(question) {
        out.push(n.value.clone());
        out.push(&n.value * &hundred);
        out.push(&n.value / &hundred);
    }
    let lower = question.to_lowercase();
    for word in lower.split(|c: char| !c.is_alphabetic()) {
        if let Some((_, v)) = WORDS.iter().find(|(w, _)| *w == word) {
            out.push(BigRational::from_integer(BigInt::from(*v)));
        }
    }
    out
}

/// Checks the numbers of `program` (calculator or z3-subset source)
/// against `question`; `positions` lets a puzzle's program use every whole
/// number up to the largest small count in the question (places in a row,
/// days of a week).
pub fn check(program: &str, question: &str, positions: bool) -> Result<(), Ungrounded> {
    let asked = quantities(question);
    let mut allowed: Vec<BigRational> = asked.clone();
    allowed.extend(
        CONSTANTS
            .iter()
            .map(|&c| BigRational::from_integer(BigInt::from(c))),
    );
    if positions {
        let top = asked
            .iter()
            .filter(|v| v.is_integer() && **v <= BigRational::from_integer(BigInt::from(31)))
            .max()
            .cloned()
            .unwrap_or_else(BigRational::zero);
        let mut k = BigRational::zero();
        while k <= top {
            allowed.push(k.clone());
            k += BigRational::one();
        }
    }
    let mut foreign = Vec::new();
    let mut used_question = false;
    for (text, value) in literals(program) {
        if asked.iter().any(|a| claims::same_number(a, &value)) {
            used_question = true;
        }
        if !allowed.iter().any(|a| claims::same_number(a, &value)) && !foreign.contains(&text) {
            foreign.push(text);
        }
    }
    if !foreign.is_empty() {
        return Err(Ungrounded::Foreign(foreign));
    }
    let question_has_numbers = claims::numbers(question).iter().any(|n| !n.word);
    if question_has_numbers && !used_question {
        return Err(Ungrounded::Unrelated);
    }
    Ok(())
}

/// The numeric literals of a program, as written and as values: runs of
/// digits (with `,` between groups and one `.`) not glued to a name.
fn literals(program: &str) -> Vec<(String, BigRational)> {
    let bytes = program.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let glued = i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        if !bytes[i].is_ascii_digit() || glued {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len()
            && (bytes[i].is_ascii_digit()
                || ((bytes[i] == b',' || bytes[i] == b'.')
                    && bytes.get(i + 1).is_some_and(u8::is_ascii_digit)))
        {
            i += 1;
        }
        let text = &program[start..i];
        if let Some(v) = decimal(&text.replace(',', "")) {
            out.push((text.to_string(), v));
        }
        // A name that starts right after the digits (`2x`) is not a number.
        while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
            i += 1;
        }
    }
    out
}

/// `123` or `12.5` as an exact rational.
fn decimal(text: &str) -> Option<BigRational> {
    let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
    if whole.len() + frac.len() > 60 {
        return None;
    }
    let digits: BigInt = format!("{whole}{frac}").parse().ok()?;
    let scale = BigInt::from(10).pow(frac.len() as u32);
    Some(BigRational::new(digits, scale))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PENS: &str = "A shop sells pens at $3 each. I buy 7 pens and pay with a $50 bill. How much change do I get?";

    #[test]
    fn the_questions_numbers_ground_a_program() {
        assert_eq!(
            check("cost = 3 * 7\nchange = 50 - cost", PENS, false),
            Ok(())
        );
        assert_eq!(check("change = 50.00 - 3 * 7", PENS, false), Ok(()));
        // Words, percentages and the constants.
        let q = "Twenty apples, 15% of them bad, over two days: how many good per hour?";
        assert_eq!(
            check("good = 20 * (1 - 0.15)\nper = good / 2 / 24", q, false),
            Ok(())
        );
        assert_eq!(check("good = 20 * (100 - 15) / 100", q, false), Ok(()));
    }

    #[test]
    fn foreign_or_unrelated_programs_are_refused() {
        let bad = "write = 100000000000 + 100000000000";
        assert_eq!(
            check(bad, PENS, false),
            Err(Ungrounded::Foreign(vec!["100000000000".into()]))
        );
        assert_eq!(check("x = 1 + 1", PENS, false), Err(Ungrounded::Unrelated));
        assert!(check("x = 3 * 8", PENS, false).is_err());
        // Digits inside names are names.
        assert_eq!(check("x2 = 3 * 7\nchange = 50 - x2", PENS, false), Ok(()));
    }

    #[test]
    fn puzzles_may_number_positions_up_to_the_count() {
        let q = "Five friends sit in a row. Ann sits left of Bo. Who sits third?";
        let prog = "ann, bo = Ints('ann bo')\ns = Solver()\ns.add(ann >= 1, ann <= 5, ann == 3)";
        assert_eq!(check(prog, q, true), Ok(()));
        assert!(check("s.add(ann == 9)", q, true).is_err());
    }
}
