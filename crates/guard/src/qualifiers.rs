//! The qualifier pass: small models read "at least 3" as "more than 3",
//! give five examples when asked for exactly three, and use the thing they
//! were told to do without. The pass finds such qualifiers in the question
//! and checks the answer against each one it can check:
//!
//! - a count (`at least`, `at most`, `exactly`, `more than`, `fewer than`,
//!   `no more than` N) followed by a countable noun, against the items of
//!   the answer's list;
//! - the same count followed by anything else, against the answer's own
//!   restatement of it: an answer that writes "greater than 3" for a
//!   question's "at least 3" has changed the question;
//! - `without (using) X`, against X appearing in the answer.
//!
//! `only`, `each` and `every` are checked where the verifier turns them into
//! constraints (`only use four-word sentences` is a words-per-sentence
//! requirement on every sentence); on their own they are too open to check.

use regex::Regex;
use std::sync::LazyLock;

/// A comparison between a count and a bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relation {
    /// `≥`
    AtLeast,
    /// `≤`
    AtMost,
    /// `>`
    MoreThan,
    /// `<`
    FewerThan,
    /// `=`
    Exactly,
}

impl Relation {
    fn holds(self, count: usize, n: usize) -> bool {
        match self {
            Relation::AtLeast => count >= n,
            Relation::AtMost => count <= n,
            Relation::MoreThan => count > n,
            Relation::FewerThan => count < n,
            Relation::Exactly => count == n,
        }
    }

    fn words(self) -> &'static str {
        match self {
            Relation::AtLeast => "at least (N or more)",
            Relation::AtMost => "at most (N or fewer)",
            Relation::MoreThan => "more than (not N itself)",
            Relation::FewerThan => "fewer than (not N itself)",
            Relation::Exactly => "exactly",
        }
    }
}

/// A qualifier found in a question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Qualifier {
    /// A bound on a number: `at least 3` (with the noun after it, if any).
    Count {
        /// The comparison.
        relation: Relation,
        /// The bound.
        n: usize,
        /// The word after the number (`examples`), lower-case.
        noun: Option<String>,
        /// As written in the question.
        text: String,
    },
    /// `without X`: X must not appear.
    Without {
        /// What must not appear.
        what: String,
    },
}

const BOUND: &str = r"(?P<rel>at\s+least|no\s+fewer\s+than|no\s+less\s+than|at\s+most|no\s+more\s+than|more\s+than|greater\s+than|over|fewer\s+than|less\s+than|under|exactly)\s+(?P<n>\d{1,6}|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)";

static QUESTION_BOUND: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&format!(r"(?i)\b{BOUND}\b(?:\s+(?P<noun>[a-z][a-z-]*))?"))
        .expect("the bound pattern is valid")
});

static ANSWER_BOUND: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&format!(
        r"(?i)\b{BOUND}\b|\b(?P<n2>\d{{1,6}}|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)\s+or\s+(?P<tail>more|higher|greater|above|larger|bigger|fewer|less|lower|below|smaller)\b"
    ))
    .expect("the answer bound pattern is valid")
});

static WITHOUT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"(?i)\bwithout\s+(?:using|mentioning|saying|writing|including)\s+(?:the\s+(?:word|letter|phrase|term)\s+)?(?:["'“‘](?P<q>[^"'”’]{1,40})["'”’]|(?P<w>[A-Za-z][A-Za-z-]{0,30}))|\bwithout\s+the\s+(?:word|letter|phrase|term)\s+(?:["'“‘](?P<q2>[^"'”’]{1,40})["'”’]|(?P<w2>[A-Za-z][A-Za-z-]{0,30}))"#)
        .expect("the without pattern is valid")
});

static LIST_ITEM: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?m)^\s{0,3}(?:[-*•+]|\d{1,3}[.)])\s+\S").expect("the list pattern is valid")
});

/// Nouns a count applies to as list items.
const COUNTABLE: &[&str] = &[
    "examples",
    "reasons",
    "tips",
    "ways",
    "ideas",
    "items",
    "points",
    "bullet",
    "steps",
    "suggestions",
    "options",
    "questions",
    "facts",
    "things",
    "names",
    "benefits",
    "strategies",
    "methods",
    "words",
    "sentences",
    "paragraphs",
];

/// Most qualifiers read from one question (a bound on hostile input).
pub const MAX_QUALIFIERS: usize = 32;

fn number(s: &str) -> Option<usize> {
    match s.to_ascii_lowercase().as_str() {
        "one" => Some(1),
        "two" => Some(2),
        "three" => Some(3),
        "four" => Some(4),
        "five" => Some(5),
        "six" => Some(6),
        "seven" => Some(7),
        "eight" => Some(8),
        "nine" => Some(9),
        "ten" => Some(10),
        "eleven" => Some(11),
        "twelve" => Some(12),
        d => d.parse().ok(),
    }
}

fn relation(words: &str) -> Relation {
    let w = words.to_ascii_lowercase();
    let w: String = w.split_whitespace().collect::<Vec<_>>().join(" ");
    match w.as_str() {
        "at least" | "no fewer than" | "no less than" => Relation::AtLeast,
        "at most" | "no more than" => Relation::AtMost,
        "more than" | "greater than" | "over" => Relation::MoreThan,
        "fewer than" | "less than" | "under" => Relation::FewerThan,
        _ => Relation::Exactly,
    }
}

/// The qualifiers of `question` that can be checked.
pub fn qualifiers(question: &str) -> Vec<Qualifier> {
    let mut out = Vec::new();
    for c in QUESTION_BOUND.captures_iter(question) {
        let (Some(rel), Some(n)) = (c.name("rel"), c.name("n")) else {
            continue;
        };
        let Some(n) = number(n.as_str()) else {
            continue;
        };
        out.push(Qualifier::Count {
            relation: relation(rel.as_str()),
            n,
            noun: c.name("noun").map(|m| m.as_str().to_ascii_lowercase()),
            text: c.get(0).map_or("", |m| m.as_str()).to_string(),
        });
        if out.len() >= MAX_QUALIFIERS {
            return out;
        }
    }
    for c in WITHOUT.captures_iter(question) {
        let what = ["q", "w", "q2", "w2"]
            .iter()
            .find_map(|k| c.name(k))
            .map(|m| m.as_str().trim().to_string());
        if let Some(what) = what.filter(|w| !w.is_empty()) {
            out.push(Qualifier::Without { what });
        }
        if out.len() >= MAX_QUALIFIERS {
            break;
        }
    }
    out
}

/// The result of checking one qualifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check {
    /// The answer respects it.
    Kept,
    /// The answer breaks it; what is wrong.
    Broken(String),
    /// Nothing in the answer to check it against.
    Unchecked,
}

/// Check `answer` against `q`.
pub fn check(q: &Qualifier, answer: &str) -> Check {
    match q {
        Qualifier::Without { what } => {
            let pattern = format!(r"(?i)\b{}\b", regex::escape(what));
            match Regex::new(&pattern) {
                Ok(re) if re.is_match(answer) => Check::Broken(format!(
                    "the question says to do without \"{what}\", and the answer uses it"
                )),
                Ok(_) => Check::Kept,
                Err(_) => Check::Unchecked,
            }
        }
        Qualifier::Count {
            relation,
            n,
            noun,
            text,
        } => {
            let items = LIST_ITEM.find_iter(answer).count();
            let listy = noun.as_deref().is_some_and(|w| {
                COUNTABLE.contains(&w) && !matches!(w, "words" | "sentences" | "paragraphs")
            });
            if listy && items > 0 {
                return if relation.holds(items, *n) {
                    Check::Kept
                } else {
                    Check::Broken(format!(
                        "the question asks for {text}; the answer lists {items}"
                    ))
                };
            }
            if noun
                .as_deref()
                .is_some_and(|w| matches!(w, "words" | "sentences" | "paragraphs"))
            {
                // Length constraints are the verifier's.
                return Check::Unchecked;
            }
            restated(*relation, *n, text, answer)
        }
    }
}

/// Compare the answer's own statements of the bound N with the question's.
fn restated(wanted: Relation, n: usize, text: &str, answer: &str) -> Check {
    let mut same = false;
    let mut other = None;
    for c in ANSWER_BOUND.captures_iter(answer) {
        let (r, m) = if let (Some(rel), Some(m)) = (c.name("rel"), c.name("n")) {
            (relation(rel.as_str()), m.as_str())
        } else if let (Some(m), Some(tail)) = (c.name("n2"), c.name("tail")) {
            let r = match tail.as_str().to_ascii_lowercase().as_str() {
                "fewer" | "less" | "lower" | "below" | "smaller" => Relation::AtMost,
                _ => Relation::AtLeast,
            };
            (r, m.as_str())
        } else {
            continue;
        };
        if number(m) != Some(n) {
            continue;
        }
        if r == wanted {
            same = true;
        } else {
            other = Some((r, c.get(0).map_or("", |m| m.as_str()).to_string()));
        }
    }
    match (same, other) {
        (true, _) => Check::Kept,
        (false, Some((r, written))) => Check::Broken(format!(
            "the question says \"{text}\" ({}), but the answer works with \"{written}\" ({})",
            wanted.words(),
            r.words()
        )),
        (false, None) => Check::Unchecked,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_least_read_as_more_than_is_caught() {
        let q = "When rolling two dice, what is the probability that you roll a total number that is at least 3?";
        let qs = qualifiers(q);
        assert_eq!(qs.len(), 1);
        let wrong = "We need the probability of a total greater than 3. Totals of 2 and 3 fail: 3 cases, so 33/36 = 11/12.";
        assert!(matches!(check(&qs[0], wrong), Check::Broken(_)));
        let right =
            "A total of 3 or more fails only for a total of 2 (1+1), so the probability is 35/36.";
        assert_eq!(check(&qs[0], right), Check::Kept);
        assert_eq!(check(&qs[0], "It is 35/36."), Check::Unchecked);
    }

    #[test]
    fn counts_list_items() {
        let qs = qualifiers("Give exactly 3 examples of mammals.");
        assert_eq!(check(&qs[0], "- cat\n- dog\n- whale\n"), Check::Kept);
        assert!(matches!(
            check(&qs[0], "1. cat\n2. dog\n3. whale\n4. bat\n"),
            Check::Broken(_)
        ));
    }

    #[test]
    fn without_a_word() {
        let qs = qualifiers("Describe the sea without using the word \"blue\".");
        assert_eq!(
            qs,
            vec![Qualifier::Without {
                what: "blue".into()
            }]
        );
        assert!(matches!(
            check(&qs[0], "The sea is deep blue."),
            Check::Broken(_)
        ));
        assert_eq!(check(&qs[0], "The sea is deep and wide."), Check::Kept);
    }

    #[test]
    fn a_flood_of_qualifiers_is_bounded() {
        let q = "at least 3 ".repeat(10_000);
        assert_eq!(qualifiers(&q).len(), MAX_QUALIFIERS);
    }
}
