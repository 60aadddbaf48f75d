//! Recovering the verifiable instructions a prompt states, from its text
//! alone: IFEval phrases each instruction in recognisable ways ("Your
//! response should contain at least 3 paragraphs separated by the markdown
//! divider: ***", "in all lowercase letters", "Do not include the keywords
//! ..."), and MT-Bench a few more ("use only four-word sentences", "in
//! fewer than 10 lines").
//!
//! Rules are regular expressions over the prompt (case-insensitive), one
//! family per instruction type; a range ("5 to 10 times") becomes IFEval's
//! pair of `at least` / `less than` instructions, and "at most N" becomes
//! `less than N+1`. At most [`MAX_INSTRUCTIONS`] instructions are extracted
//! and at most [`MAX_KEYWORDS`] keywords per list, so a prompt made of
//! hundreds of constraints is handled in bounded time and space.
//!
//! Extraction is a heuristic: a phrase that belongs to the task rather than
//! to a constraint ("a riddle that includes the word 'time'") may be taken
//! for one, and unusual phrasings are missed.

use super::lang::LANGUAGE_NAMES;
use super::{Instruction, Relation};
use regex::{Captures, Regex};
use std::sync::LazyLock;

/// Most instructions extracted from one prompt.
pub const MAX_INSTRUCTIONS: usize = 64;
/// Most keywords in one extracted keyword list.
pub const MAX_KEYWORDS: usize = 64;

/// Number words and digits, as a regex alternative.
const NUM: &str = r"(?:\d+|zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|hundred)";

fn re(pattern: &str) -> Regex {
    // Patterns are fixed at compile time; NUM is spliced in.
    Regex::new(&format!("(?i){}", pattern.replace("NUM", NUM))).expect("valid extraction regex")
}

macro_rules! rx {
    ($name:ident, $pattern:expr) => {
        static $name: LazyLock<Regex> = LazyLock::new(|| re($pattern));
    };
}

/// A count phrase: "at least 5", "less than four", "5 to 10", "10 or more",
/// "600+", "once", "twice".
const COUNT: &str = r"(?:(?P<op>at least|no less than|not less than|a minimum of|minimum of|more than|over|less than|fewer than|under|below|at most|no more than|not more than|up to|a maximum of|maximum of|exactly)\s+(?P<n>NUM|once|twice)\b|(?P<lo>NUM)\s*(?:to|-|–|or)\s*(?P<hi>NUM)\b|between\s+(?P<blo>NUM)\s+and\s+(?P<bhi>NUM)\b|(?P<ge>NUM)\s*(?:\+|or more\b|or above\b|or greater\b)|(?P<once>once|twice)\b)";

/// Parses a number word or digits.
fn number(text: &str) -> Option<u64> {
    let t = text.trim().to_lowercase();
    if let Ok(n) = t.parse::<u64>() {
        return Some(n);
    }
    let words = [
        "zero",
        "one",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight",
        "nine",
        "ten",
        "eleven",
        "twelve",
        "thirteen",
        "fourteen",
        "fifteen",
        "sixteen",
        "seventeen",
        "eighteen",
        "nineteen",
        "twenty",
    ];
    if let Some(i) = words.iter().position(|w| *w == t) {
        return Some(i as u64);
    }
    Some(match t.as_str() {
        "thirty" => 30,
        "forty" => 40,
        "fifty" => 50,
        "sixty" => 60,
        "seventy" => 70,
        "eighty" => 80,
        "ninety" => 90,
        "hundred" => 100,
        "once" => 1,
        "twice" => 2,
        _ => return None,
    })
}

/// A count as IFEval relations: one (`at least N`) or two (a range).
fn relations_of(caps: &Captures) -> Vec<(Relation, u64)> {
    let get = |name: &str| caps.name(name).and_then(|m| number(m.as_str()));
    if let (Some(op), Some(n)) = (caps.name("op"), get("n")) {
        return match op.as_str().to_lowercase().as_str() {
            "at least" | "no less than" | "not less than" | "a minimum of" | "minimum of" => {
                vec![(Relation::AtLeast, n)]
            }
            "more than" | "over" => vec![(Relation::AtLeast, n + 1)],
            "less than" | "fewer than" | "under" | "below" => vec![(Relation::LessThan, n)],
            "exactly" => vec![(Relation::AtLeast, n), (Relation::LessThan, n + 1)],
            _ => vec![(Relation::LessThan, n + 1)],
        };
    }
    if let (Some(lo), Some(hi)) = (get("lo").or(get("blo")), get("hi").or(get("bhi"))) {
        if lo <= hi {
            return vec![(Relation::AtLeast, lo), (Relation::LessThan, hi + 1)];
        }
        return Vec::new();
    }
    if let Some(n) = get("ge").or(get("once")) {
        return vec![(Relation::AtLeast, n)];
    }
    Vec::new()
}

/// Sentences of a prompt, roughly: split after `.`, `?`, `!` before
/// whitespace, and at newlines.
fn prompt_sentences(prompt: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let bytes = prompt.as_bytes();
    for (i, c) in prompt.char_indices() {
        let boundary = c == '\n'
            || (matches!(c, '.' | '?' | '!')
                && bytes.get(i + 1).is_some_and(|b| b.is_ascii_whitespace())
                && !prompt[..i].ends_with("i.e")
                && !prompt[..i].ends_with("e.g"));
        if boundary {
            let end = i + c.len_utf8();
            let s = prompt[start..end].trim();
            if !s.is_empty() {
                out.push(s);
            }
            start = end;
        }
    }
    let s = prompt[start..].trim();
    if !s.is_empty() {
        out.push(s);
    }
    out
}

/// Whether `at` lies inside an open parenthesis on its line.
fn in_parentheses(prompt: &str, at: usize) -> bool {
    let line_start = prompt[..at].rfind('\n').map_or(0, |i| i + 1);
    let before = &prompt[line_start..at];
    before.matches('(').count() > before.matches(')').count()
}

/// Collects extracted instructions, skipping duplicates, up to the cap.
struct Found(Vec<Instruction>);

impl Found {
    fn push(&mut self, instruction: Instruction) {
        if self.0.len() < MAX_INSTRUCTIONS && !self.0.contains(&instruction) {
            self.0.push(instruction);
        }
    }
    fn has(&self, id: &str) -> bool {
        self.0.iter().any(|i| i.id() == id)
    }
}

/// Keywords listed after a trigger: quoted items (`"a", 'b' and “c”`, or
/// `['a', 'b']`), else bare words up to the end of the sentence, split at
/// commas, "and" and "or" (a multi-word item ends the list at its first word).
fn keyword_list(rest: &str) -> Vec<String> {
    rx!(
        QUOTED,
        r#"^[\s:\[]*(?:["'“‘]([^"'”’\n]{1,60})["'”’]\s*(?:,|\band\b|\bor\b|\]|\s)*)"#
    );
    let mut out = Vec::new();
    let mut text = rest;
    while let Some(c) = QUOTED.captures(text) {
        let (Some(whole), Some(item)) = (c.get(0), c.get(1)) else {
            break;
        };
        out.push(item.as_str().trim().to_string());
        text = &text[whole.end()..];
        if out.len() >= MAX_KEYWORDS {
            break;
        }
    }
    if !out.is_empty() {
        return out;
    }
    let sentence_end = rest
        .find(['.', '?', '!', '\n', ';', '('])
        .unwrap_or(rest.len());
    let list = rest[..sentence_end].trim_start_matches([':', ' ']);
    for item in list.split(',') {
        for part in item.split(" and ").flat_map(|p| p.split(" or ")) {
            let words: Vec<&str> = part.split_whitespace().collect();
            match words.as_slice() {
                [] => {}
                [one] => out.push(one.trim_matches(|c: char| !c.is_alphanumeric()).to_string()),
                [first, ..] => {
                    out.push(
                        first
                            .trim_matches(|c: char| !c.is_alphanumeric())
                            .to_string(),
                    );
                    out.retain(|w| !w.is_empty());
                    return out;
                }
            }
            if out.len() >= MAX_KEYWORDS {
                return out;
            }
        }
    }
    out.retain(|w| !w.is_empty() && !matches!(w.as_str(), "and" | "or"));
    out
}

/// The words of `list` (found at the start of `after`) a response must
/// include: none of those given a count of uses, and nothing when the one
/// word is followed by a count ("the word X at least N times" is a
/// frequency, not existence).
fn required_words(list: Vec<String>, after: &str, frequency_keywords: &[String]) -> Vec<String> {
    rx!(TIMES_AFTER, r"^[^.?!]{0,40}?\b(?:times?|once|twice)\b");
    let list: Vec<String> = list
        .into_iter()
        .filter(|w| !frequency_keywords.contains(&w.to_lowercase()))
        .collect();
    if TIMES_AFTER.is_match(after) && list.len() == 1 {
        return Vec::new();
    }
    list
}

/// Words that are never keywords when they come bare after "words".
const STOPWORDS: [&str; 16] = [
    "in", "of", "to", "with", "for", "on", "at", "by", "from", "that", "the", "a", "an", "is",
    "are", "be",
];

/// Whether the text just before `at` negates ("do not", "without", "avoid").
fn negated_before(prompt: &str, at: usize) -> bool {
    rx!(
        NEG,
        r"(?:\bnot\b|n't\b|\bwithout\b|\bavoid\w*|\bnever\b|\brefrain\b|\bno\b|\bsteer clear of\b|\bstay away from\b|\bkeep away from\b)[^.?!]{0,40}$"
    );
    let mut from = at.saturating_sub(60);
    while !prompt.is_char_boundary(from) {
        from += 1;
    }
    NEG.is_match(&prompt[from..at])
}

/// The instructions `prompt` states, in the order of the rules (at most
/// [`MAX_INSTRUCTIONS`]).
pub fn extract(prompt: &str) -> Vec<Instruction> {
    let mut found = Found(Vec::new());
    let sentences = prompt_sentences(prompt);
    repeat_prompt(prompt, &mut found);
    case_rules(&sentences, &mut found);
    words_and_sentences(prompt, &mut found);
    paragraphs(prompt, &mut found);
    format_rules(prompt, &mut found);
    keywords(prompt, &mut found);
    language(prompt, &mut found);
    ending(prompt, &mut found);
    extras(prompt, &mut found);
    found.0
}

fn repeat_prompt(prompt: &str, found: &mut Found) {
    rx!(
        REPEAT,
        r"\b(?:repeat|repleat)\w*\s+(?:\w+\s+){0,4}?(?:request|prompt|question|sentence|line|instruction)s?\b"
    );
    rx!(
        AHEAD,
        r"^[^.?!\n]{0,40}?\b(?:below|following|that follows|after this)\b|^\s*:"
    );
    rx!(
        QUOTED_SOON,
        r#"^[^"“\n]{0,60}?(?:request|prompt|question)?\s*:?\s*["“]([^"”\n]{3,600})["”]"#
    );
    let Some(m) = REPEAT.find(prompt) else {
        return;
    };
    let after = &prompt[m.end()..];
    let unquote = |t: &str| t.trim().trim_matches(['"', '“', '”']).trim().to_string();
    let to_repeat = if let Some(q) = QUOTED_SOON.captures(after).and_then(|c| c.get(1)) {
        // `Repeat the request "…" word for word`, `My request: "…"`.
        q.as_str().trim().to_string()
    } else if AHEAD.is_match(after) {
        // The request is what follows the instruction's line.
        let next_line = after.find('\n').map_or("", |i| &after[i..]);
        unquote(
            next_line
                .split("\n\n")
                .find(|p| !p.trim().is_empty())
                .unwrap_or(""),
        )
    } else {
        // The text before the instruction (its line, or its sentence when
        // the request shares the line), else the paragraph after it.
        let line_start = prompt[..m.start()].rfind('\n').map_or(0, |i| i + 1);
        let head = &prompt[line_start..m.start()];
        let sentence_start = [". ", "? ", "! "]
            .iter()
            .filter_map(|end| head.rfind(end))
            .max()
            .map_or(line_start, |i| line_start + i + 2);
        let before = prompt[..sentence_start].trim();
        if !before.is_empty() {
            before.to_string()
        } else {
            let rest = after.find("\n\n").map_or("", |i| &after[i..]);
            unquote(rest)
        }
    };
    if !to_repeat.is_empty() {
        found.push(Instruction::RepeatPrompt {
            prompt_to_repeat: to_repeat,
        });
    }
}

fn case_rules(sentences: &[&str], found: &mut Found) {
    rx!(
        CAPITAL_MENTION,
        r"\bcapital|\bcaps\b|\bcapitali[sz]|uppercase|upper case|all-caps"
    );
    rx!(
        WORD_COUNT_CONTEXT,
        r"\bwords?\b|\btimes\b|\bphrases\b|\bthose\b|\bsuch\b"
    );
    rx!(COUNT_RE, COUNT);
    rx!(
        NOT_WORDS_AFTER,
        r"^\s*(?:\w+\s+){0,1}(?:sentences?|paragraphs?|bullet|sections?|letters?\s+\w|placeholders?|points?|items?|keywords?)"
    );
    rx!(
        CAPITAL_WORDS,
        r"\bwords?\b[^.]{0,20}(?:in all cap|capitali)"
    );
    rx!(SOME_CAPS, r"\bsome words in all cap");
    rx!(
        ALL_CAPITAL,
        r"all capital|all caps|capital letters only|only (?:use )?capital letters|all uppercase|in capital letters|in english capital|in english uppercase|entirely in capital|all capitals|in all-caps|only capital"
    );
    rx!(
        LOWERCASE,
        r"(?:^|[^o]\s|[^\s])lower[\s-]?case|no capital letters|no capitali[sz]ation|without (?:using )?any capital|not a single letter[^.]*capitali[sz]ed|letters are lowercase|no capital letter|(?:don't|do not|never)\s+use\s+(?:a single|any|even one)\s+capital letters?"
    );
    rx!(NO_LOWERCASE, r"\bno lower[\s-]?case");
    rx!(
        REFERS_BACK,
        r"\bthose\b|\bsuch\b(?:[^ ]| [^a]| a[^s]| as\w)"
    );
    let mut previous_mentions_capital = false;
    let mut capital_counts: Vec<(Relation, u64)> = Vec::new();
    let mut some_caps = false;
    for sentence in sentences {
        let mentions = CAPITAL_MENTION.is_match(sentence);
        // "those" or "such" (not "such as") refers back to the capitals.
        let follows = previous_mentions_capital && REFERS_BACK.is_match(sentence);
        let mut is_frequency = false;
        if (mentions || follows) && WORD_COUNT_CONTEXT.is_match(sentence) {
            for caps in COUNT_RE.captures_iter(sentence) {
                let Some(whole) = caps.get(0) else { continue };
                if NOT_WORDS_AFTER.is_match(&sentence[whole.end()..]) {
                    continue;
                }
                if mentions && !same_clause_as_capitals(sentence, whole.start(), whole.end()) {
                    continue;
                }
                let relations = relations_of(&caps);
                if !relations.is_empty() {
                    is_frequency = true;
                    capital_counts.extend(relations);
                }
            }
        }
        some_caps |= SOME_CAPS.is_match(sentence);
        if !is_frequency
            && ALL_CAPITAL.is_match(sentence)
            && !CAPITAL_WORDS.is_match(sentence)
            && !found.has("change_case:english_capital")
        {
            found.push(Instruction::EnglishCapital);
        }
        if LOWERCASE.is_match(sentence) && !NO_LOWERCASE.is_match(sentence) {
            found.push(Instruction::EnglishLowercase);
        }
        previous_mentions_capital = mentions;
    }
    if some_caps && !capital_counts.iter().any(|(r, _)| *r == Relation::AtLeast) {
        capital_counts.push((Relation::AtLeast, 1));
    }
    for (relation, n) in capital_counts {
        found.push(Instruction::CapitalWordFrequency {
            capital_frequency: n,
            capital_relation: relation,
        });
    }
}

/// Whether a count at `start..end` of `sentence` shares a clause (no `,`,
/// `;` or `:` between) with a mention of capitals, so "only capital letters,
/// and no more than 50 words" counts words, not capitals.
fn same_clause_as_capitals(sentence: &str, start: usize, end: usize) -> bool {
    rx!(
        CAPITALS,
        r"\bcapital|\bcaps\b|\bcapitali[sz]|uppercase|upper case|all-caps"
    );
    CAPITALS.find_iter(sentence).any(|m| {
        let between = if m.start() >= end {
            &sentence[end..m.start()]
        } else if m.end() <= start {
            &sentence[m.end()..start]
        } else {
            ""
        };
        !between.contains([',', ';', ':'])
    })
}

fn words_and_sentences(prompt: &str, found: &mut Found) {
    rx!(
        WORDS,
        &format!(r"{COUNT}\s+(?:\w+\s+){{0,1}}?words?\b(?P<after>[^.?!\n]{{0,30}})")
    );
    rx!(
        WORDS_OR_MORE,
        r"number of words[^.?!]{0,40}?\b(NUM)\s+or\s+more|\b(NUM)\s+words\s+or\s+(?:more|longer)\b"
    );
    rx!(WORDS_PLUS, r"\b(NUM)\s*\+\s*words?\b|\b(NUM)\s*\+\s*word\b");
    rx!(
        SENTENCES,
        &format!(r"{COUNT}\s+(?:\w+\s+){{0,1}}?sentences?\b")
    );
    rx!(CAPITAL_AFTER, r"capital|caps|uppercase");
    for caps in WORDS.captures_iter(prompt) {
        if caps
            .name("after")
            .is_some_and(|m| CAPITAL_AFTER.is_match(m.as_str()))
        {
            continue;
        }
        for (relation, n) in relations_of(&caps) {
            found.push(Instruction::NumberWords {
                num_words: n,
                relation,
            });
        }
    }
    for caps in WORDS_OR_MORE.captures_iter(prompt) {
        if let Some(n) = caps.get(1).or(caps.get(2)).and_then(|m| number(m.as_str())) {
            found.push(Instruction::NumberWords {
                num_words: n,
                relation: Relation::AtLeast,
            });
        }
    }
    if !found.has("length_constraints:number_words") {
        for caps in WORDS_PLUS.captures_iter(prompt) {
            if let Some(n) = caps.get(1).or(caps.get(2)).and_then(|m| number(m.as_str())) {
                found.push(Instruction::NumberWords {
                    num_words: n,
                    relation: Relation::AtLeast,
                });
            }
        }
    }
    for caps in SENTENCES.captures_iter(prompt) {
        // "(just 1 or 2 sentences, not 3)" restates a constraint.
        if caps
            .get(0)
            .is_some_and(|m| in_parentheses(prompt, m.start()))
        {
            continue;
        }
        for (relation, n) in relations_of(&caps) {
            found.push(Instruction::NumberSentences {
                num_sentences: n,
                relation,
            });
        }
    }
}

fn paragraphs(prompt: &str, found: &mut Found) {
    rx!(NUM_PARTS, r"\b(NUM)\s+(?:\w+\s+)?(?:paragraphs?|parts)\b");
    rx!(
        NEWLINES,
        r"(?:two|2) new ?lines|\\n\\n|two line ?breaks|double line break|(?:two|2) newlines|blank lines?|empty lines?"
    );
    let stars = divider_runs(prompt);
    let standalone = prompt.lines().filter(|l| l.trim() == "***").count();
    let dividers = if standalone > 0 {
        standalone
    } else {
        stars.len()
    };
    let lower = prompt.to_lowercase();
    let mentions_divider = !stars.is_empty()
        || lower.contains("markdown divider")
        || lower.contains("three asterisk")
        || lower.contains("3 asterisk");
    let parts = NUM_PARTS
        .captures(prompt)
        .and_then(|c| c.get(1))
        .and_then(|m| number(m.as_str()));
    if mentions_divider {
        let n = parts.unwrap_or(dividers as u64 + 1);
        found.push(Instruction::NumberParagraphs { num_paragraphs: n });
    } else if NEWLINES.is_match(prompt) || lower.contains("paragraph") {
        if let Some(instruction) = nth_paragraph_first_word(prompt, parts) {
            found.push(instruction);
        }
    }
}

/// Where each run of exactly three asterisks (the markdown divider) in
/// `prompt` ends.
fn divider_runs(prompt: &str) -> Vec<usize> {
    let mut runs = Vec::new();
    let mut run = 0;
    for (i, c) in prompt.char_indices() {
        if c == '*' {
            run += 1;
        } else {
            if run == 3 {
                runs.push(i);
            }
            run = 0;
        }
    }
    if run == 3 {
        runs.push(prompt.len());
    }
    runs
}

/// "Paragraph 2 must start with the word X" in a prompt that asks for
/// `parts` paragraphs.
fn nth_paragraph_first_word(prompt: &str, parts: Option<u64>) -> Option<Instruction> {
    rx!(
        NTH,
        r#"(?:start|begin)\w*\s+(?:the\s+)?(?P<ord>first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|last|final|\d+(?:st|nd|rd|th)?)\s+paragraph\s+with\s+(?:the\s+)?(?:word\s+)?["“'‘]?(?P<w>[\w'-]+)|paragraph\s+(?P<num>\d+)\s+(?:(?:must|should|has to|needs to|shall)\s+)?(?:(?:start|begin)\w*\s+)?with\s+(?:the\s+)?(?:word\s+)?["“'‘]?(?P<w2>[\w'-]+)|(?P<ord2>first|second|third|fourth|fifth|sixth|\d+(?:st|nd|rd|th))\s+paragraph\s+(?:must|should|has to|needs to)\s+(?:start|begin)\s+with\s+(?:the\s+)?(?:word\s+)?["“'‘]?(?P<w3>[\w'-]+)|\b(?:story|response|answer|essay|letter|reply|text|poem)\s+(?:must|should|has to|needs to)\s+(?:start|begin)\s+with\s+(?:the\s+)?(?:word\s+)?["“'‘]?(?P<w4>[\w'-]+)"#
    );
    let (Some(n), Some(c)) = (parts, NTH.captures(prompt)) else {
        return None;
    };
    let nth = paragraph_index(&c, n)?;
    let word = c
        .name("w")
        .or(c.name("w2"))
        .or(c.name("w3"))
        .or(c.name("w4"))?;
    (nth >= 1 && nth <= n).then(|| Instruction::NthParagraphFirstWord {
        num_paragraphs: n,
        nth_paragraph: nth,
        first_word: word.as_str().to_lowercase(),
    })
}

/// Which paragraph (1-based, of `n`) a match of the `NTH` rule names: an
/// ordinal, `last`, a number, or the first for "the story must start with".
fn paragraph_index(c: &Captures, n: u64) -> Option<u64> {
    let ordinal = c
        .name("ord")
        .or(c.name("ord2"))
        .map(|m| m.as_str().to_lowercase());
    match ordinal.as_deref() {
        Some("first") => Some(1),
        Some("second") => Some(2),
        Some("third") => Some(3),
        Some("fourth") => Some(4),
        Some("fifth") => Some(5),
        Some("sixth") => Some(6),
        Some("seventh") => Some(7),
        Some("eighth") => Some(8),
        Some("ninth") => Some(9),
        Some("tenth") => Some(10),
        Some("last" | "final") => Some(n),
        Some(other) => other
            .trim_end_matches(|c: char| c.is_alphabetic())
            .parse()
            .ok(),
        None if c.name("w4").is_some() => Some(1),
        None => c.name("num").and_then(|m| m.as_str().parse().ok()),
    }
}

fn format_rules(prompt: &str, found: &mut Found) {
    rx!(
        PLACEHOLDERS,
        r"\b(NUM)\s+(?:[\w-]+\s+){0,2}?placeholders?\b|placeholders?\b[^.]{0,30}?\b(?:at least|a minimum of|minimum of)\s+(NUM)\b|\b(NUM)\s+(?:[\w-]+\s+){0,2}?in\s+square\s+brackets"
    );
    rx!(POSTSCRIPT, r"postscript|\bp\.\s?p\.\s?s\b|\bp\.s\.");
    rx!(PPS, r"\bp\.\s?p\.\s?s\b");
    rx!(
        BULLETS,
        r"\b(NUM)\s+(?:[\w-]+\s+){0,2}?bullet(?:\s*points?|s)?\b"
    );
    if let Some(n) = PLACEHOLDERS
        .captures(prompt)
        .and_then(|c| c.get(1).or(c.get(2)).or(c.get(3)))
        .and_then(|m| number(m.as_str()))
    {
        found.push(Instruction::NumberPlaceholders {
            num_placeholders: n,
        });
    }
    if POSTSCRIPT.is_match(prompt) {
        let marker = if PPS.is_match(prompt) {
            "P.P.S"
        } else {
            "P.S."
        };
        found.push(Instruction::Postscript {
            postscript_marker: marker.to_string(),
        });
    }
    if let Some(n) = BULLETS
        .captures(prompt)
        .and_then(|c| c.get(1))
        .and_then(|m| number(m.as_str()))
    {
        found.push(Instruction::NumberBulletLists { num_bullets: n });
    }
    if prompt.contains("My answer is yes.") || prompt.contains("My answer is no.") {
        found.push(Instruction::ConstrainedResponse);
    }
    if let Some(n) = highlight_count(prompt) {
        found.push(Instruction::NumberHighlightedSections { num_highlights: n });
    }
    if let Some(sections) = multiple_sections(prompt) {
        found.push(sections);
    }
    whole_response_rules(prompt, found);
}

/// How many highlighted sections the prompt asks for ("highlight at least
/// 2 sections", "3 italic phrases", or an emphasis example).
fn highlight_count(prompt: &str) -> Option<u64> {
    rx!(
        HIGHLIGHTS,
        r"(?:highlight|italic|bold)\w*\s+(?:[\w/]+\s+){0,4}?(?:at least\s+)?(NUM)\s+(?:[\w-]+\s+){0,2}?(?:sections?|parts?|phrases?|words?|texts?|of them|of these|items?|points?|tips?|ideas?)\b"
    );
    rx!(
        HIGHLIGHTS_BEFORE,
        r"\b(?:at least\s+)?(NUM)\s+(?:italic|italicized|highlighted|bold)\w*\s"
    );
    rx!(
        HIGHLIGHT_EACH,
        r"\b(NUM)\s+(?:or more\s+)?sections?\b[^*]{0,80}highlight each section"
    );
    HIGHLIGHTS
        .captures(prompt)
        .or_else(|| HIGHLIGHTS_BEFORE.captures(prompt))
        .or_else(|| HIGHLIGHT_EACH.captures(prompt))
        .and_then(|c| c.get(1))
        .and_then(|m| number(m.as_str()))
        .or_else(|| emphasis_count(prompt))
}

/// Sections marked with a word and a number ("mark each section with
/// Section X"), counted by the prompt's "N sections" (or "N <marker>s"),
/// else by the largest "<marker> N" it shows.
fn multiple_sections(prompt: &str) -> Option<Instruction> {
    rx!(
        SECTION_MARK,
        r#"(?:mark|label|start|begin|starting|beginning|open|opening|head|heading)\w*\s+[^.]{0,60}?\bwith\s+["'“]?(?P<s>[A-Za-z]+)\s+(?:X|N|\d)\b|(?:label|mark|title|head|name)\w*\s+(?:each|every|them|it)\s+(?:one\s+|of them\s+)?(?:as\s+)?["'“]?(?P<s2>[A-Za-z]+)\s+(?:X|N|\d)\b|(?:with|as)\s+["'“]?(?P<s3>[A-Za-z]+)["'”]?\s+(?:and|followed by|plus)\s+(?:a|its|the|their)\s+(?:number|numeral|index)|\blabell?ed\s+["']?(?P<s4>[A-Za-z]+)\s+\d"#
    );
    rx!(
        NUM_SECTIONS,
        r"\b(NUM)\s+(?:\w+\s+)?(?:sections?|paragraphs?|parts|days)\b"
    );
    rx!(
        NUM_DASH,
        r"\b(NUM)[ -](?:sections?|paragraphs?|parts|days)\b"
    );
    let c = SECTION_MARK.captures(prompt)?;
    let splitter = c
        .name("s")
        .or(c.name("s2"))
        .or(c.name("s3"))
        .or(c.name("s4"))?
        .as_str();
    // "3 chapters" counts sections marked "Chapter".
    let own_plural = re(&format!(r"\b(NUM)\s+{}s?\b", regex::escape(splitter)));
    let n = own_plural
        .captures(prompt)
        .or_else(|| NUM_SECTIONS.captures(prompt))
        .or_else(|| NUM_DASH.captures(prompt))
        .and_then(|c| c.get(1))
        .and_then(|m| number(m.as_str()))
        .or_else(|| {
            // "Audience 1 and Audience 2": the largest number used.
            let numbered = re(&format!(r"\b{}\s+(\d+)", regex::escape(splitter)));
            numbered
                .captures_iter(prompt)
                .filter_map(|c| c.get(1).and_then(|m| m.as_str().parse().ok()))
                .max()
        })?;
    Some(Instruction::MultipleSections {
        section_spliter: splitter.to_string(),
        num_sections: n,
    })
}

/// Rules on the response as a whole: JSON, a title, two responses,
/// quotation marks, no commas.
fn whole_response_rules(prompt: &str, found: &mut Found) {
    rx!(JSON, r"\bjson\b");
    rx!(TITLE, r"<<|double angular brackets|double angle brackets");
    rx!(
        TWO_RESPONSES,
        r"\*{6,}|\b(?:6|six) asterisk|two different (?:responses|answers)"
    );
    rx!(QUOTATION, r"double[\s-]?quot|quotation marks");
    rx!(
        NO_COMMA,
        r"(?:\bno\b|\bnot\b|n't\b|\bwithout\b|\bavoid\w*|\bnever\b|\brefrain\w*)[^.?!]{0,40}\bcommas?\b"
    );
    if JSON.is_match(prompt) {
        found.push(Instruction::JsonFormat);
    }
    if TITLE.is_match(prompt) {
        found.push(Instruction::Title);
    }
    if TWO_RESPONSES.is_match(prompt) {
        found.push(Instruction::TwoResponses);
    }
    if QUOTATION.is_match(prompt) {
        found.push(Instruction::Quotation);
    }
    if NO_COMMA.is_match(prompt) {
        found.push(Instruction::NoComma);
    }
}

/// "make at least two key ideas stand out using markdown highlighting, e.g.
/// *idea*": a lower bound in a sentence that asks for markdown emphasis and
/// shows it with a single-asterisk example.
fn emphasis_count(prompt: &str) -> Option<u64> {
    rx!(EMPHASIS, r"highlight|emphasi|italic|\bbold\b|stand out");
    rx!(EXAMPLE, r"(?:^|[^*])\*[^*\s][^*\n]{0,40}\*(?:[^*]|$)");
    rx!(
        AT_LEAST,
        r"\b(?:at least|a minimum of|minimum of|no fewer than)\s+(NUM)\b"
    );
    prompt_sentences(prompt)
        .into_iter()
        .filter(|s| EMPHASIS.is_match(s) && EXAMPLE.is_match(s))
        .find_map(|s| {
            AT_LEAST
                .captures(s)
                .and_then(|c| c.get(1))
                .and_then(|m| number(m.as_str()))
        })
}

fn keywords(prompt: &str, found: &mut Found) {
    let frequency_keywords = keyword_frequencies(prompt, found);
    letter_frequencies(prompt, found);
    let (required, mut forbidden) = keyword_lists(prompt, &frequency_keywords);
    let tidy = |mut words: Vec<String>| {
        let mut seen = std::collections::HashSet::new();
        // `Use "*" for bullets` names a symbol, not a keyword.
        words.retain(|w| w.chars().any(char::is_alphanumeric) && seen.insert(w.to_lowercase()));
        words.truncate(MAX_KEYWORDS);
        words
    };
    let required = tidy(required);
    // A word limited to a few uses ("not more than twice") is not forbidden.
    forbidden.retain(|w| !frequency_keywords.contains(&w.to_lowercase()));
    // A bare function word after "words" ("fewer than 2 words in all
    // caps") is no keyword.
    forbidden.retain(|w| !STOPWORDS.contains(&w.to_lowercase().as_str()));
    let forbidden = tidy(forbidden);
    if !required.is_empty() {
        found.push(Instruction::KeywordsExistence { keywords: required });
    }
    if !forbidden.is_empty() {
        let mut words: Vec<String> = forbidden.iter().map(|w| w.to_lowercase()).collect();
        words.sort();
        words.dedup();
        found.push(Instruction::ForbiddenWords {
            forbidden_words: words,
        });
    }
}

/// "the word X at least N times": keyword frequencies, found in order;
/// returns the keywords given a count, lowercased.
fn keyword_frequencies(prompt: &str, found: &mut Found) -> Vec<String> {
    rx!(
        FREQUENCY,
        &format!(
            r#"\bword\s+["'“‘]?(?P<kw>[\w'-]+)["'”’]?\s+(?:[\w,\-–—]+\s+){{0,6}}?{COUNT}\s*(?:times?\b)?"#
        )
    );
    let mut frequency_keywords: Vec<String> = Vec::new();
    for caps in FREQUENCY.captures_iter(prompt) {
        let Some(keyword) = caps.name("kw") else {
            continue;
        };
        let whole = caps.get(0).map_or("", |m| m.as_str()).trim().to_lowercase();
        if !(whole.contains("time") || whole.ends_with("once") || whole.ends_with("twice")) {
            continue;
        }
        let negated = caps
            .get(0)
            .is_some_and(|m| negated_before(prompt, m.start()));
        let op = caps.name("op").map(|o| o.as_str().to_lowercase());
        let relations = match (
            negated,
            op.as_deref(),
            caps.name("n").and_then(|m| number(m.as_str())),
        ) {
            (true, Some("more than" | "over"), Some(n)) => vec![(Relation::LessThan, n + 1)],
            _ => relations_of(&caps),
        };
        for (relation, n) in relations {
            found.push(Instruction::KeywordFrequency {
                keyword: keyword.as_str().to_string(),
                frequency: n,
                relation,
            });
        }
        frequency_keywords.push(keyword.as_str().to_lowercase());
    }
    frequency_keywords
}

/// "the letter q at least 3 times": letter frequencies.
fn letter_frequencies(prompt: &str, found: &mut Found) {
    rx!(
        LETTER,
        &format!(r#"\bletter\s+["'“‘]?(?P<letter>[a-zA-Z])["'”’]?\s+(?:[\w,]+\s+){{0,5}}?{COUNT}"#)
    );
    for caps in LETTER.captures_iter(prompt) {
        let Some(letter) = caps
            .name("letter")
            .and_then(|m| m.as_str().to_lowercase().chars().next())
        else {
            continue;
        };
        // "the letter q must not appear even once": fewer than one.
        let whole = caps.get(0).map_or("", |m| m.as_str()).to_lowercase();
        let denied = whole.contains("not") || whole.contains("n't") || whole.contains("never");
        let relations = if denied && whole.trim_end().ends_with("once") {
            vec![(Relation::LessThan, 1)]
        } else {
            relations_of(&caps)
        };
        for (relation, n) in relations {
            found.push(Instruction::LetterFrequency {
                letter,
                let_frequency: n,
                let_relation: relation,
            });
        }
    }
}

/// The words the prompt lists as required and as forbidden (untidied),
/// leaving out required words given a count of uses.
fn keyword_lists(prompt: &str, frequency_keywords: &[String]) -> (Vec<String>, Vec<String>) {
    rx!(
        LIST_TRIGGER,
        r#"\b(?:the\s+|following\s+)*(?:key\s?words?|words?)\b\s*:?\s*"#
    );
    rx!(
        INCLUDE,
        r"(?:include|including|includes|contain|containing|contains|use|using|mention)\s*$"
    );
    rx!(
        VAGUE,
        r"\b(?:any|other|some|no|more|extra|of|these|those|additional|few|many|all|new|single|following\s+\w+)$"
    );
    let mut forbidden: Vec<String> = Vec::new();
    let mut required: Vec<String> = Vec::new();
    for m in LIST_TRIGGER.find_iter(prompt) {
        let before = prompt[..m.start()].trim_end();
        // "any words", "other words", "change of words": not a list.
        if VAGUE.is_match(before) {
            continue;
        }
        let list = keyword_list(&prompt[m.end()..]);
        if list.is_empty() {
            continue;
        }
        if negated_before(prompt, m.start()) {
            forbidden.extend(list);
        } else if INCLUDE.is_match(before)
            || before.to_lowercase().ends_with("include the")
            || before.to_lowercase().ends_with("use the")
        {
            required.extend(required_words(list, &prompt[m.end()..], frequency_keywords));
        }
    }
    required.extend(quoted_required(prompt, frequency_keywords));
    forbidden.extend(bare_forbidden(prompt));
    (required, forbidden)
}

/// `mention "battery" and "comfort"`: quoted words right after the verb.
fn quoted_required(prompt: &str, frequency_keywords: &[String]) -> Vec<String> {
    rx!(
        QUOTED_AFTER_VERB,
        r#"\b(?:mention|mentions|mentioning|include|includes|including|use|using|make sure (?:that )?the words?)\s+(?:both\s+|each of\s+|all of\s+)?(?P<rest>["“])"#
    );
    let mut required = Vec::new();
    for caps in QUOTED_AFTER_VERB.captures_iter(prompt) {
        let Some(rest) = caps.name("rest") else {
            continue;
        };
        if negated_before(prompt, rest.start()) {
            continue;
        }
        let after = &prompt[rest.start()..];
        required.extend(required_words(
            keyword_list(after),
            after,
            frequency_keywords,
        ));
    }
    required
}

/// Words forbidden without the word "words": `do not say "x"`, `the words
/// x and y cannot appear`.
fn bare_forbidden(prompt: &str) -> Vec<String> {
    rx!(
        BARE_FORBIDDEN,
        r#"(?:do not|don't|never)\s+(?:use|say|include|mention|write)\s+(?P<rest>["'“‘])"#
    );
    rx!(
        CANNOT_APPEAR,
        r#"\bwords?\s+(?P<list>(?:["'“‘]?[\w-]+["'”’]?(?:,\s*|\s+and\s+|\s+or\s+)?){1,8}?)\s+(?:cannot|can't|should not|shouldn't|must not|mustn't)\s+(?:be|appear)"#
    );
    let mut forbidden = Vec::new();
    for caps in BARE_FORBIDDEN.captures_iter(prompt) {
        if let Some(rest) = caps.name("rest") {
            forbidden.extend(keyword_list(&prompt[rest.start()..]));
        }
    }
    for caps in CANNOT_APPEAR.captures_iter(prompt) {
        if let Some(list) = caps.name("list") {
            forbidden.extend(keyword_list(list.as_str()));
        }
    }
    forbidden
}

/// One pattern per non-English language name: the name, optionally with
/// "only"/"entirely in"/... before it and "language" after it.
static LANGUAGE_PATTERNS: LazyLock<Vec<(Regex, &'static str)>> = LazyLock::new(|| {
    LANGUAGE_NAMES
        .iter()
        .filter(|(_, code)| *code != "en")
        .map(|(name, code)| {
            let pattern = re(&format!(
                r"(?P<before>\b(?:only|entirely in|completely in|in|using|use)\s+(?:the\s+)?)?\b{name}\b(?P<after>\s+language|\s+only\b)?"
            ));
            (pattern, *code)
        })
        .collect()
});

fn language(prompt: &str, found: &mut Found) {
    rx!(
        RESPONSE_IN,
        r"\b(?:respond|reply|answer|response|write|written|everything|output)\w*\s+(?:[\w']+\s+){0,5}?$"
    );
    let lower = prompt.to_lowercase();
    let other_language = lower.contains("no other language") || lower.contains("other languages");
    for (pattern, code) in LANGUAGE_PATTERNS.iter() {
        for caps in pattern.captures_iter(prompt) {
            // "reply in Dutch", "the answer needs to be in Spanish": the
            // response's own language, not a topic.
            let head = &prompt[..caps.get(0).map_or(0, |m| m.start())];
            let about_response = caps
                .name("before")
                .is_some_and(|b| b.as_str().trim_start().to_lowercase().starts_with("in"))
                && RESPONSE_IN.is_match(head);
            let strong = about_response
                || caps.name("after").is_some()
                || caps.name("before").is_some_and(|m| {
                    let b = m.as_str().to_lowercase();
                    b.starts_with("only")
                        || b.starts_with("entirely")
                        || b.starts_with("completely")
                });
            if other_language || strong {
                found.push(Instruction::ResponseLanguage {
                    language: code.to_string(),
                });
                return;
            }
        }
    }
}

fn ending(prompt: &str, found: &mut Found) {
    rx!(
        END_TRIGGER,
        r"(?:\b(?:finish|end|conclude|wrap\w*\s+(?:it\s+|things\s+)?up|close|sign\s+off)\w*\s+(?:[\w']+\s+){0,4}?with\s+(?:exactly\s+)?(?:the\s+|this\s+|a\s+)?(?:exact\s+)?(?P<named>phrase|sentence|question|words?|line)?\s*:?\s*(?:exactly\s*:?\s*)?|very end of your (?:response|answer) should (?:read|be)\s*:?\s*|(?:very\s+)?(?:last|final)\s+(?:words?|line|sentence)\s+(?:must|should|has to|needs to)\s+(?:be|read)\s*:?\s*)"
    );
    rx!(
        NOT_A_PHRASE,
        r"(?i)^(?:a\s+|an\s+)?(?:postscript|p\.\s?p\.\s?s|p\.s)"
    );
    for caps in END_TRIGGER.captures_iter(prompt) {
        let Some(m) = caps.get(0) else { continue };
        let rest = &prompt[m.end()..];
        // A postscript is its own instruction, not an end phrase.
        if NOT_A_PHRASE.is_match(rest) {
            continue;
        }
        let named = caps.name("named").is_some() || m.as_str().trim_end().ends_with(':');
        let phrase = match rest.chars().next() {
            Some(open @ ('"' | '“' | '\'')) => {
                let body = &rest[open.len_utf8()..];
                let close = body.find(['"', '”']).or_else(|| {
                    if open == '\'' {
                        body.find('\'')
                    } else {
                        None
                    }
                });
                close.map(|i| body[..i].trim().to_string())
            }
            // Unquoted text counts only where the prompt names it a phrase
            // ("end with the phrase Any other questions?"); "end things with
            // someone" does not.
            Some(c) if c.is_alphanumeric() && named => {
                // Unquoted: the line up to its first sentence end (a `?`
                // or `!` that the template then closes with `.` included).
                let line = rest.split('\n').next().unwrap_or("").trim();
                let bytes = line.as_bytes();
                let end = (0..bytes.len()).find(|&i| {
                    matches!(bytes[i], b'?' | b'.' | b'!')
                        && bytes.get(i + 1).is_none_or(|&b| b == b' ' || b == b'.')
                });
                end.map(|i| line[..=i].to_string())
            }
            _ => None,
        };
        if let Some(phrase) = phrase.filter(|p| !p.is_empty() && p.len() < 300) {
            found.push(Instruction::EndChecker { end_phrase: phrase });
            return;
        }
    }
}

fn extras(prompt: &str, found: &mut Found) {
    rx!(
        RHYME,
        r"rhym\w*\s+couplets?|(?:lines|pairs of lines) (?:must|should) rhyme|every two lines rhyme"
    );
    words_per_sentence(prompt, found);
    lines_and_stanzas(prompt, found);
    if RHYME.is_match(prompt) {
        found.push(Instruction::Rhyme);
    }
    starts(prompt, found);
}

/// "use only four-word sentences", "each sentence must have at most 10
/// words".
fn words_per_sentence(prompt: &str, found: &mut Found) {
    rx!(WORD_SENTENCES, r"\b(NUM)[\s-]word sentences?\b");
    rx!(
        EACH_SENTENCE_WORDS,
        &format!(
            r"(?:each|every) sentence\s+(?:must|should|has to|needs to)?\s*(?:have|contain|be)\s+{COUNT}\s+words"
        )
    );
    for caps in WORD_SENTENCES.captures_iter(prompt) {
        if let Some(n) = caps.get(1).and_then(|m| number(m.as_str())) {
            found.push(Instruction::WordsPerSentence {
                num_words: n,
                relation: Relation::Exactly,
            });
        }
    }
    for caps in EACH_SENTENCE_WORDS.captures_iter(prompt) {
        if let Some(relation) = single_relation(&caps) {
            found.push(Instruction::WordsPerSentence {
                num_words: relation.1,
                relation: relation.0,
            });
        }
    }
}

/// "fewer than 10 lines", "in 4 lines", "3 stanzas".
fn lines_and_stanzas(prompt: &str, found: &mut Found) {
    rx!(LINES, &format!(r"{COUNT}\s+lines\b"));
    rx!(IN_LINES, r"\bin\s+(NUM)\s+lines\b");
    rx!(STANZAS, r"\b(?P<atleast>at least\s+)?(NUM)\s+stanzas?\b");
    for caps in LINES.captures_iter(prompt) {
        if let Some((relation, n)) = single_relation(&caps) {
            found.push(Instruction::NumberLines {
                num_lines: n,
                relation,
            });
        }
    }
    if !found.has("hearth:number_lines") {
        if let Some(n) = IN_LINES
            .captures(prompt)
            .and_then(|c| c.get(1))
            .and_then(|m| number(m.as_str()))
        {
            found.push(Instruction::NumberLines {
                num_lines: n,
                relation: Relation::Exactly,
            });
        }
    }
    for caps in STANZAS.captures_iter(prompt) {
        if let Some(n) = caps.get(2).and_then(|m| number(m.as_str())) {
            let relation = if caps.name("atleast").is_some() {
                Relation::AtLeast
            } else {
                Relation::Exactly
            };
            found.push(Instruction::NumberStanzas {
                num_stanzas: n,
                relation,
            });
        }
    }
}

/// How the response, and each of its sentences, must start.
fn starts(prompt: &str, found: &mut Found) {
    rx!(
        START_PHRASE,
        r#"(?:start|begin)\s+(?:your|the)\s+(?:response|answer|reply|essay|story|email|letter|poem)\s+with\s+(?:the\s+(?:phrase|word|sentence)\s+)?["“](?P<p>[^"”\n]{1,100})["”]"#
    );
    rx!(
        SENTENCE_START,
        r#"(?:(?:start|begin)\s+(?:every|each)\s+sentence\s+with|(?:every|each)\s+sentence\s+(?:must|should)\s+(?:start|begin)\s+with)\s+(?:the\s+letter\s+|the\s+word\s+)?["“']?(?P<p>[\w]+)"#
    );
    if !found.has("combination:repeat_prompt") {
        if let Some(p) = START_PHRASE.captures(prompt).and_then(|c| c.name("p")) {
            found.push(Instruction::StartPhrase {
                phrase: p.as_str().trim().to_string(),
            });
        }
    }
    if let Some(p) = SENTENCE_START.captures(prompt).and_then(|c| c.name("p")) {
        found.push(Instruction::SentenceStart {
            prefix: p.as_str().to_string(),
        });
    }
}

/// A count phrase as one of our four relations (for `hearth:` extras,
/// which are not limited to IFEval's two).
fn single_relation(caps: &Captures) -> Option<(Relation, u64)> {
    let get = |name: &str| caps.name(name).and_then(|m| number(m.as_str()));
    if let (Some(op), Some(n)) = (caps.name("op"), get("n")) {
        let relation = match op.as_str().to_lowercase().as_str() {
            "at least" | "no less than" | "not less than" | "a minimum of" | "minimum of" => {
                (Relation::AtLeast, n)
            }
            "more than" | "over" => (Relation::AtLeast, n + 1),
            "less than" | "fewer than" | "under" | "below" => (Relation::LessThan, n),
            "exactly" => (Relation::Exactly, n),
            _ => (Relation::AtMost, n),
        };
        return Some(relation);
    }
    get("ge").map(|n| (Relation::AtLeast, n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_parse() {
        assert_eq!(number("four"), Some(4));
        assert_eq!(number("12"), Some(12));
        assert_eq!(number("twice"), Some(2));
        assert_eq!(number("lots"), None);
    }

    #[test]
    fn keyword_lists_parse() {
        assert_eq!(keyword_list(r#" "a", "b" and "c"."#), vec!["a", "b", "c"]);
        assert_eq!(
            keyword_list(": field, thanks, issue."),
            vec!["field", "thanks", "issue"]
        );
        assert_eq!(keyword_list(" ['dog', 'day'] in"), vec!["dog", "day"]);
    }
}
