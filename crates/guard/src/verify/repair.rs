//! Deterministic repairs: where a response misses an instruction only in
//! its form, fix the form and leave the content alone. A repair is returned
//! only if the repaired text then passes the strict check.
//!
//! Repaired: `change_case:english_lowercase` / `english_capital` (the whole
//! response lowercased / uppercased), `punctuation:no_comma` (commas
//! removed), `startend:quotation` (wrapped in double quotes),
//! `startend:end_checker` (the exact end phrase appended),
//! `detectable_content:postscript` (a malformed marker such as `PS:` or
//! `P.S` at the start of a line rewritten as the required one; a missing
//! postscript is not invented), `combination:repeat_prompt` (the request
//! put first), `hearth:start_phrase` (the phrase put first).
//!
//! Not repaired, because a fix would change or invent content: keywords,
//! word/sentence/paragraph counts, titles, placeholders, highlights,
//! sections, bullets, JSON, language, two responses, rhyme.

use super::{check, Instruction};
use regex::Regex;
use std::sync::LazyLock;

/// A postscript marker written loosely at the start of a line: `PS`, `P.S`,
/// `P.S.:`, `p.s`, `PPS`, `P.P.S.` and the like, with what follows.
static LOOSE_MARKER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?mi)^(?P<lead>[ \t*_]*)(?P<marker>p\.?\s?(?:p\.?\s?)?s\b\.?:?)[ \t]*")
        .expect("valid regex")
});

/// The response repaired to follow `instruction`, or `None` when it already
/// does, when no safe repair exists, or when the repair would not pass.
pub fn repair(instruction: &Instruction, response: &str) -> Option<String> {
    if response.trim().is_empty() || check(instruction, response) {
        return None;
    }
    let repaired = match instruction {
        Instruction::EnglishLowercase => response.to_lowercase(),
        Instruction::EnglishCapital => response.to_uppercase(),
        Instruction::NoComma => remove_commas(response),
        Instruction::Quotation => format!("\"{}\"", response.trim()),
        Instruction::EndChecker { end_phrase } => {
            format!("{}\n\n{}", response.trim_end(), end_phrase.trim())
        }
        Instruction::Postscript { postscript_marker } => {
            let caps = LOOSE_MARKER.captures_iter(response).last()?;
            let whole = caps.get(0)?;
            let lead = caps.name("lead").map_or("", |m| m.as_str());
            format!(
                "{}{lead}{} {}",
                &response[..whole.start()],
                postscript_marker.trim(),
                &response[whole.end()..]
            )
        }
        Instruction::RepeatPrompt { prompt_to_repeat } => {
            format!("{}\n\n{}", prompt_to_repeat.trim(), response.trim_start())
        }
        Instruction::StartPhrase { phrase } => {
            format!("{} {}", phrase.trim(), response.trim_start())
        }
        _ => return None,
    };
    check(instruction, &repaired).then_some(repaired)
}

/// Removes every comma: "a, b" becomes "a b" and "1,000" becomes "1000".
fn remove_commas(text: &str) -> String {
    text.replace(',', "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_and_commas_are_repaired() {
        let lower = Instruction::EnglishLowercase;
        let fixed = repair(&lower, "Hello There, my friend. This is English text.").unwrap();
        assert_eq!(fixed, "hello there, my friend. this is english text.");
        let fixed = repair(&Instruction::NoComma, "One, two, three.").unwrap();
        assert_eq!(fixed, "One two three.");
        assert_eq!(repair(&Instruction::NoComma, "No commas here."), None);
    }

    #[test]
    fn quotes_and_endings_are_added() {
        assert_eq!(
            repair(&Instruction::Quotation, "  hi there \n").unwrap(),
            "\"hi there\""
        );
        let end = Instruction::EndChecker {
            end_phrase: "Any other questions?".into(),
        };
        assert_eq!(
            repair(&end, "Done.").unwrap(),
            "Done.\n\nAny other questions?"
        );
    }

    #[test]
    fn only_a_malformed_postscript_is_fixed() {
        let ps = Instruction::Postscript {
            postscript_marker: "P.S.".into(),
        };
        assert_eq!(
            repair(&ps, "Hello.\n\nPS: bring snacks").unwrap(),
            "Hello.\n\nP.S. bring snacks"
        );
        assert_eq!(repair(&ps, "Hello, no postscript at all."), None);
        let pps = Instruction::Postscript {
            postscript_marker: "P.P.S".into(),
        };
        assert_eq!(
            repair(&pps, "Hi.\nPPS. see you").unwrap(),
            "Hi.\nP.P.S see you"
        );
    }

    #[test]
    fn content_changes_are_not_made() {
        let title = Instruction::Title;
        assert_eq!(repair(&title, "No title here."), None);
        let words = Instruction::ForbiddenWords {
            forbidden_words: vec!["cat".into()],
        };
        assert_eq!(repair(&words, "The cat sat."), None);
    }
}
