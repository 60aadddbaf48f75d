//! The clean pass: a small model often drafts, notices a slip and corrects
//! itself in the same answer ("… = $245. Wait, let me recheck … Corrected
//! answer: $280"). The reader should see only the corrected answer. The
//! pass keeps the text after the last self-correction marker, and only when
//! that tail is a complete answer on its own; otherwise it leaves the answer
//! as it is and says so.

use regex::Regex;
use std::sync::LazyLock;

/// Phrases that start a self-correction (case-insensitive), with the
/// punctuation that closes the marker.
static MARKER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?xi)
        (?:^|[\s.!?:;,*])
        (?:
            wait[,.!]?\s+let\s+me\s+(?:re-?check|re-?calculate|re-?compute|re-?do|re-?think|re-?evaluate|re-?consider|double[-\s]check|check\s+again|correct\s+(?:that|this|myself))\b[^:.!\n]*
          | wait[,.!]+
          | let\s+me\s+(?:re-?check|re-?calculate|re-?compute|re-?do|re-?evaluate|double[-\s]check|correct\s+(?:that|this|myself))\b[^:.!\n]*
          | (?:the\s+)?(?:corrected|revised|correct|updated)\s+(?:final\s+)?(?:answer|solution|calculation|version|total|result)\s*(?:is)?
          | correction
          | oops[,.!]?
          | i\s+made\s+(?:a|an)\s+(?:mistake|error)[^:.!\n]*
          | (?:that|this)(?:'s|\s+is)\s+(?:not\s+right|incorrect|wrong)
          | on\s+second\s+thought
          | actually,
        )
        \s*[:.!,]*\**",
    )
    .expect("the marker pattern is valid")
});

/// What the pass did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cleaned {
    /// No self-correction marker.
    Nothing,
    /// The draft before the last marker was dropped; the corrected answer.
    Kept(String),
    /// A marker was found but the text after it is not a complete answer.
    Incomplete {
        /// The marker found.
        marker: String,
    },
}

/// Drop the self-correction draft in `answer`, keeping the corrected tail
/// when it is a complete answer. `numeric`: the question asks for a number,
/// so the tail must state one.
pub fn clean(answer: &str, numeric: bool) -> Cleaned {
    let Some(last) = MARKER.find_iter(answer).last() else {
        return Cleaned::Nothing;
    };
    let tail = answer[last.end()..].trim();
    let head = answer[..last.start()].trim();
    if head.is_empty() {
        // A marker at the very start drafts nothing before it.
        return Cleaned::Nothing;
    }
    if !is_complete(tail, numeric) {
        return Cleaned::Incomplete {
            marker: last.as_str().trim().to_string(),
        };
    }
    Cleaned::Kept(capitalise(tail))
}

/// A tail is a complete answer when it has a few words (or is a stated
/// number), ends where a sentence may end, and states a number if the
/// question wants one.
fn is_complete(tail: &str, numeric: bool) -> bool {
    let words = tail.split_whitespace().count();
    let has_digit = tail.chars().any(|c| c.is_ascii_digit());
    if numeric && !has_digit {
        return false;
    }
    let ends_well = tail
        .trim_end_matches(['*', '_', '"', '\'', ')', ']'])
        .chars()
        .last()
        .is_some_and(|c| matches!(c, '.' | '!' | '?') || c.is_alphanumeric() || c == '%');
    ends_well && (words >= 3 || (numeric && has_digit))
}

fn capitalise(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) if c.is_lowercase() => c.to_uppercase().chain(chars).collect(),
        _ => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_corrected_tail() {
        let a = "5 × $20 = $100, 3 × $30 = $90, 2 × $45 = $90. Total: $245. Wait, let me recheck: $100 + $90 + $90 = $280. The total cost is $280.";
        assert_eq!(
            clean(a, true),
            Cleaned::Kept("$100 + $90 + $90 = $280. The total cost is $280.".into())
        );
        let b = "The area is 6.\n\nCorrected answer: the area of the triangle is 3.";
        assert_eq!(
            clean(b, true),
            Cleaned::Kept("The area of the triangle is 3.".into())
        );
    }

    #[test]
    fn leaves_an_answer_without_markers() {
        assert_eq!(clean("The total is $280.", true), Cleaned::Nothing);
        // "waiting" is not "wait,".
        assert_eq!(
            clean("After waiting, let me say the answer is 3.", true),
            Cleaned::Nothing
        );
    }

    #[test]
    fn an_incomplete_tail_is_not_kept() {
        let a = "The answer is 35/36. Wait, let me recheck";
        assert!(matches!(clean(a, true), Cleaned::Incomplete { .. }));
        let b = "The probability is 1/2. Actually, hmm";
        assert!(matches!(clean(b, true), Cleaned::Incomplete { .. }));
    }
}
