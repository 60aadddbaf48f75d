//! Routing: which guards a request needs. Cheap rules decide first; where a
//! rule sees a hint but cannot tell (a question with numbers but no word of
//! arithmetic), the model answers a yes/no question under a grammar.

use regex::Regex;
use std::sync::LazyLock;

/// What the rules say about one guard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The guard applies; why.
    Yes(String),
    /// It may apply: ask the model this yes/no question.
    Ask(String),
    /// It does not apply.
    No,
}

static DIGITS: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\d+(?:[.,]\d+)?").expect("valid"));

static ARITHMETIC: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:how\s+(?:much|many|long|far|old)|total|cost|costs|price|priced|spend|spent|paid|pay|revenue|profit|earn|earns|earned|sum|average|percent|percentage|discount|markup|interest|calculate|compute|area|perimeter|volume|probability|speed|rate|ratio|twice|half|each|per)\b|[$€£%+×÷*/=]")
        .expect("valid")
});

static PUZZLE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:puzzle|riddle|knights?|knaves?|liars?|truth-?tellers?|sisters?|brothers?|siblings?|daughters?|sons?|older|younger|oldest|youngest|taller|shorter|tallest|shortest|sits?|seated|seating|left\s+of|right\s+of|next\s+to|neighbou?rs?|owns?|lives?\s+in|schedule|scheduled|before|after|each\s+of\s+them|exactly\s+one|only\s+one|who\s+(?:is|owns|sits|lives|has)|if\s+and\s+only\s+if|must\s+be|cannot\s+be)\b")
        .expect("valid")
});

/// Does answering `question` need arithmetic? Two or more numbers and a
/// word of arithmetic: yes; numbers but no such word: ask; else no.
pub fn calc(question: &str) -> Verdict {
    let numbers = DIGITS.find_iter(question).count();
    let cues: Vec<String> = ARITHMETIC
        .find_iter(question)
        .take(3)
        .map(|m| m.as_str().to_ascii_lowercase())
        .collect();
    match (numbers, cues.is_empty()) {
        (0, _) => Verdict::No,
        (1, true) => Verdict::No,
        (_, false) if numbers >= 2 => Verdict::Yes(format!(
            "{numbers} numbers and arithmetic words ({})",
            cues.join(", ")
        )),
        _ => Verdict::Ask(
            "Does answering the last question require calculating with numbers? Answer yes or no."
                .into(),
        ),
    }
}

/// Is `question` a logic puzzle? Two or more puzzle words: yes; one: ask.
pub fn logic(question: &str) -> Verdict {
    let mut cues: Vec<String> = PUZZLE
        .find_iter(question)
        .map(|m| m.as_str().to_ascii_lowercase())
        .collect();
    cues.sort();
    cues.dedup();
    match cues.len() {
        0 => Verdict::No,
        1 => Verdict::Ask(
            "Is the last question a logic puzzle, where the answer follows from stated facts and constraints? Answer yes or no."
                .into(),
        ),
        _ => Verdict::Yes(format!(
            "puzzle words ({})",
            cues.into_iter().take(4).collect::<Vec<_>>().join(", ")
        )),
    }
}

static ASKS_NUMBER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\bhow\s+(?:much|many)\b|\bwhat\s+is\s+the\s+(?:probability|area|total|sum|value|cost|price)\b")
        .expect("valid")
});

/// Does `question` ask for a number (so a corrected answer must state one)?
pub fn wants_number(question: &str) -> bool {
    calc(question) != Verdict::No || ASKS_NUMBER.is_match(question)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_questions_route_as_expected() {
        let q119 = "Benjamin went to a bookstore and purchased a variety of books. He bought 5 copies of a sci-fi novel, each priced at $20, 3 copies of a history book priced at $30 each, and 2 copies of a philosophy book for $45 each.\nWhat was the total cost of his purchases?";
        assert!(matches!(calc(q119), Verdict::Yes(_)));
        let q104 = "David has three sisters. Each of them has one brother. How many brothers does David have?";
        assert!(matches!(logic(q104), Verdict::Yes(_)));
        assert_eq!(calc(q104), Verdict::No);
        let q87 = "Could you write a captivating short story beginning with the sentence: The old abandoned house at the end of the street held a secret that no one had ever discovered.";
        assert_eq!(calc(q87), Verdict::No);
        assert_eq!(logic(q87), Verdict::No);
        assert!(matches!(
            calc("Is 1997 a good year or was 2003 better?"),
            Verdict::Ask(_)
        ));
    }
}
