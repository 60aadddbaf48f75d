//! Each instruction's check, with the semantics of upstream's
//! `check_following`. Keywords, section markers and postscript markers are
//! matched literally (upstream splices them into regexes unescaped, which
//! only differs for text with regex syntax in it).

use super::text::{count_capital_words, count_sentences, count_words, is_all_lower, is_all_upper};
use super::{lang, text, Instruction, Relation, Verdict};
use regex::Regex;
use std::sync::LazyLock;

/// Regexes fixed by the format, compiled once.
static BULLET_STAR: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?m)^\s*\*[^\*].*$").expect("valid regex"));
static BULLET_DASH: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?m)^\s*-.*$").expect("valid regex"));
static HIGHLIGHT: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\*[^\n\*]*\*").expect("valid regex"));
static DOUBLE_HIGHLIGHT: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\*\*[^\n\*]*\*\*").expect("valid regex"));
static PLACEHOLDER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\[.*?\]").expect("valid regex"));
static TITLE: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"<<[^\n]+>>").expect("valid regex"));
static DIVIDER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\s?\*\*\*\s?").expect("valid regex"));
static PPS: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?m)\s*p\.\s?p\.\s?s.*$").expect("valid regex"));
static PS: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?m)\s*p\.\s?s\..*$").expect("valid regex"));

/// A case-insensitive literal pattern; `None` only if the regex would be
/// too big (an absurdly long keyword), which callers treat as no match.
fn literal(text: &str) -> Option<Regex> {
    regex::RegexBuilder::new(&regex::escape(text))
        .case_insensitive(true)
        .size_limit(1 << 22)
        .build()
        .ok()
}

fn count_literal(haystack: &str, needle: &str) -> usize {
    literal(needle).map_or(0, |re| re.find_iter(haystack).count())
}

/// Whether `word` occurs in `text` between Python-style word boundaries
/// (`\bword\b`, case-insensitive).
pub(crate) fn contains_word(text: &str, word: &str) -> bool {
    let Some(re) = literal(word) else {
        return false;
    };
    let first_is_word = word.chars().next().is_some_and(text::is_word_char);
    let last_is_word = word.chars().last().is_some_and(text::is_word_char);
    let mut from = 0;
    while let Some(m) = re.find_at(text, from) {
        let before = text[..m.start()].chars().next_back();
        let after = text[m.end()..].chars().next();
        // `\b` holds where word-ness changes across the position.
        let start_ok = before.is_some_and(text::is_word_char) != first_is_word;
        let end_ok = after.is_some_and(text::is_word_char) != last_is_word;
        if start_ok && end_ok {
            return true;
        }
        // Retry from the next character: matches may overlap.
        let step = text[m.start()..].chars().next().map_or(1, char::len_utf8);
        from = m.start() + step;
        if from > text.len() {
            break;
        }
    }
    false
}

fn relation_detail(what: &str, count: u64, relation: Relation, threshold: u64) -> String {
    format!("{count} {what}; needs {} {threshold}", relation.name())
}

/// Upstream's JSON check: strip, drop one ```json / ```Json / ```JSON / ```
/// prefix each and a ``` suffix, strip, parse.
fn is_json(value: &str) -> bool {
    let mut s = value.trim();
    for prefix in ["```json", "```Json", "```JSON", "```"] {
        s = s.strip_prefix(prefix).unwrap_or(s);
    }
    s = s.strip_suffix("```").unwrap_or(s);
    serde_json::from_str::<serde_json::Value>(s.trim()).is_ok()
}

/// The first word of a paragraph as upstream reads it: leading quotes
/// dropped, cut at the first punctuation mark, lowercased.
fn first_word_of(paragraph: &str) -> String {
    let word = paragraph.split_whitespace().next().unwrap_or("");
    let word = word.trim_start_matches('\'').trim_start_matches('"');
    let mut out = String::new();
    for c in word.chars() {
        if matches!(c, '.' | ',' | '?' | '!' | '\'' | '"') {
            break;
        }
        out.extend(c.to_lowercase());
    }
    out
}

/// The last word of a line, lowercased, for rhyming.
fn last_word(line: &str) -> String {
    text::words(line)
        .last()
        .map(|w| w.to_lowercase())
        .unwrap_or_default()
}

/// Whether two words rhyme, approximately: the same ending from the last
/// vowel group on (with at least two letters), or the same last three letters.
pub(crate) fn rhymes(a: &str, b: &str) -> bool {
    if a.is_empty() || b.is_empty() {
        return false;
    }
    if a == b {
        return true;
    }
    fn rime(w: &str) -> String {
        let chars: Vec<char> = w.chars().collect();
        let is_vowel = |c: char| "aeiouy".contains(c);
        // Skip a silent final e ("time", "rhyme").
        let mut end = chars.len();
        if end > 2 && chars[end - 1] == 'e' && !is_vowel(chars[end - 2]) {
            end -= 1;
        }
        let mut i = end;
        while i > 0 && !is_vowel(chars[i - 1]) {
            i -= 1;
        }
        while i > 0 && is_vowel(chars[i - 1]) {
            i -= 1;
        }
        chars[i..].iter().collect()
    }
    let tail = |w: &str| w.chars().rev().take(3).collect::<String>();
    let (ra, rb) = (rime(a), rime(b));
    (ra.chars().count() >= 2 && ra == rb) || (a.chars().count() >= 3 && tail(a) == tail(b))
}

/// Lines of `text` that are not blank.
fn content_lines(text: &str) -> Vec<&str> {
    text.lines().filter(|l| !l.trim().is_empty()).collect()
}

/// Blocks of non-blank lines separated by blank lines.
fn stanzas(text: &str) -> Vec<Vec<&str>> {
    let mut out: Vec<Vec<&str>> = Vec::new();
    let mut current = Vec::new();
    for line in text.lines() {
        if line.trim().is_empty() {
            if !current.is_empty() {
                out.push(std::mem::take(&mut current));
            }
        } else {
            current.push(line);
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// Strips what a response may put before its first word: whitespace,
/// quotes, markdown emphasis and heading marks.
fn strip_lead(text: &str) -> &str {
    text.trim_start_matches(|c: char| {
        c.is_whitespace() || matches!(c, '"' | '\'' | '*' | '#' | '_' | '“' | '‘' | '>')
    })
}

fn starts_with_ci(text: &str, prefix: &str) -> bool {
    let mut t = text.chars().flat_map(char::to_lowercase);
    prefix
        .chars()
        .flat_map(char::to_lowercase)
        .all(|p| t.next() == Some(p))
}

pub(super) fn verdict(instruction: &Instruction, value: &str) -> Verdict {
    use Instruction as I;
    match instruction {
        // Keywords and letters.
        I::KeywordsExistence { keywords } => keywords_present(value, keywords),
        I::KeywordFrequency {
            keyword,
            frequency,
            relation,
        } => keyword_frequency(value, keyword, *relation, *frequency),
        I::ForbiddenWords { forbidden_words } => forbidden_absent(value, forbidden_words),
        I::LetterFrequency {
            letter,
            let_frequency,
            let_relation,
        } => letter_frequency(value, *letter, *let_relation, *let_frequency),
        I::ResponseLanguage { language } => in_language(value, language),
        // Lengths.
        I::NumberSentences {
            num_sentences,
            relation,
        } => counted(
            "sentences",
            count_sentences(value),
            *relation,
            *num_sentences,
        ),
        I::NumberParagraphs { num_paragraphs } => divided_paragraphs(value, *num_paragraphs),
        I::NumberWords {
            num_words,
            relation,
        } => counted("words", count_words(value), *relation, *num_words),
        I::NthParagraphFirstWord {
            num_paragraphs,
            nth_paragraph,
            first_word,
        } => nth_paragraph_first_word(value, *num_paragraphs, *nth_paragraph, first_word),
        // Content and format.
        I::NumberPlaceholders { num_placeholders } => placeholders(value, *num_placeholders),
        I::Postscript { postscript_marker } => postscript(value, postscript_marker),
        I::NumberBulletLists { num_bullets } => bullets(value, *num_bullets),
        I::ConstrainedResponse => constrained_response(value),
        I::NumberHighlightedSections { num_highlights } => highlights(value, *num_highlights),
        I::MultipleSections {
            section_spliter,
            num_sections,
        } => sections(value, section_spliter, *num_sections),
        I::JsonFormat => json(value),
        I::Title => title(value),
        // The response as a whole: its parts, start, end, case, punctuation.
        I::TwoResponses => two_responses(value),
        I::RepeatPrompt { prompt_to_repeat } => repeats_prompt(value, prompt_to_repeat),
        I::EndChecker { end_phrase } => ends_with_phrase(value, end_phrase),
        I::CapitalWordFrequency {
            capital_frequency: threshold,
            capital_relation: relation,
        } => counted(
            "all-capital words",
            count_capital_words(value),
            *relation,
            *threshold,
        ),
        I::EnglishCapital => english_case(value, is_all_upper(value), "all capitals"),
        I::EnglishLowercase => english_case(value, is_all_lower(value), "all lowercase"),
        I::NoComma => no_comma(value),
        I::Quotation => quoted(value),
        // Our extras: sentences, lines, stanzas, rhyme, starts.
        I::WordsPerSentence {
            num_words,
            relation,
        } => words_per_sentence(value, *num_words, *relation),
        I::NumberLines {
            num_lines,
            relation,
        } => counted("lines", content_lines(value).len(), *relation, *num_lines),
        I::NumberStanzas {
            num_stanzas,
            relation,
        } => counted("stanzas", stanzas(value).len(), *relation, *num_stanzas),
        I::Rhyme => rhyme(value),
        I::StartPhrase { phrase } => starts_with_phrase(value, phrase),
        I::SentenceStart { prefix } => sentences_start_with(value, prefix),
    }
}

/// `n` things (`what`) against a threshold by a relation.
fn counted(what: &str, n: usize, relation: Relation, threshold: u64) -> Verdict {
    let n = n as u64;
    Verdict::new(
        relation.holds(n, threshold),
        relation_detail(what, n, relation, threshold),
    )
}

// Keywords and letters.

fn keywords_present(value: &str, keywords: &[String]) -> Verdict {
    let missing: Vec<&str> = keywords
        .iter()
        .filter(|k| literal(k).is_none_or(|re| !re.is_match(value)))
        .map(String::as_str)
        .collect();
    if missing.is_empty() {
        Verdict::new(true, "all keywords present")
    } else {
        Verdict::new(false, format!("missing keywords: {}", missing.join(", ")))
    }
}

fn forbidden_absent(value: &str, forbidden_words: &[String]) -> Verdict {
    let found: Vec<&str> = forbidden_words
        .iter()
        .filter(|w| contains_word(value, w))
        .map(String::as_str)
        .collect();
    if found.is_empty() {
        Verdict::new(true, "no forbidden word")
    } else {
        Verdict::new(false, format!("forbidden words used: {}", found.join(", ")))
    }
}

fn keyword_frequency(value: &str, keyword: &str, relation: Relation, frequency: u64) -> Verdict {
    counted(
        &format!("occurrences of {keyword:?}"),
        count_literal(value, keyword),
        relation,
        frequency,
    )
}

/// How often `letter` (lowercase) occurs in `value`, case-insensitively,
/// against the threshold.
fn letter_frequency(value: &str, letter: char, relation: Relation, frequency: u64) -> Verdict {
    let n = value
        .chars()
        .flat_map(char::to_lowercase)
        .filter(|c| *c == letter)
        .count();
    counted(&format!("letters {letter:?}"), n, relation, frequency)
}

fn in_language(value: &str, language: &str) -> Verdict {
    let found = lang::detect(value).unwrap_or("undetectable");
    Verdict::new(
        lang::is_language(value, language),
        format!("detected {found}; needs {language}"),
    )
}

// Lengths.

/// Exactly `num_paragraphs` paragraphs separated by the markdown divider,
/// none empty but the first and last.
fn divided_paragraphs(value: &str, num_paragraphs: u64) -> Verdict {
    let parts: Vec<&str> = DIVIDER.split(value).collect();
    let mut n = parts.len() as u64;
    for (i, part) in parts.iter().enumerate() {
        if part.trim().is_empty() {
            if i == 0 || i == parts.len() - 1 {
                n -= 1;
            } else {
                return Verdict::new(false, format!("paragraph {} is empty", i + 1));
            }
        }
    }
    Verdict::new(
        n == num_paragraphs,
        format!("{n} paragraphs separated by ***; needs exactly {num_paragraphs}"),
    )
}

fn nth_paragraph_first_word(
    value: &str,
    num_paragraphs: u64,
    nth_paragraph: u64,
    first_word: &str,
) -> Verdict {
    let parts: Vec<&str> = value.split("\n\n").collect();
    let n = parts.iter().filter(|p| !p.trim().is_empty()).count() as u64;
    if nth_paragraph > n {
        return Verdict::new(
            false,
            format!("{n} paragraphs, so no paragraph {nth_paragraph}"),
        );
    }
    let index = usize::try_from(nth_paragraph - 1).unwrap_or(usize::MAX);
    let paragraph = parts.get(index).map_or("", |p| p.trim());
    if paragraph.is_empty() {
        return Verdict::new(false, format!("paragraph {nth_paragraph} is empty"));
    }
    let word = first_word_of(paragraph);
    Verdict::new(
        n == num_paragraphs && word == first_word,
        format!(
            "{n} paragraphs (needs {num_paragraphs}); paragraph {nth_paragraph} starts with {word:?} (needs {first_word:?})"
        ),
    )
}

// Content and format.

fn placeholders(value: &str, num_placeholders: u64) -> Verdict {
    let n = PLACEHOLDER.find_iter(value).count() as u64;
    Verdict::new(
        n >= num_placeholders,
        format!("{n} placeholders; needs at least {num_placeholders}"),
    )
}

fn postscript(value: &str, postscript_marker: &str) -> Verdict {
    let lower = value.to_lowercase();
    let found = match postscript_marker {
        "P.P.S" => PPS.is_match(&lower),
        "P.S." => PS.is_match(&lower),
        other => lower.contains(&other.to_lowercase()),
    };
    Verdict::new(
        found,
        if found {
            format!("postscript {postscript_marker} found")
        } else {
            format!("no postscript starting with {postscript_marker}")
        },
    )
}

fn bullets(value: &str, num_bullets: u64) -> Verdict {
    let n = (BULLET_STAR.find_iter(value).count() + BULLET_DASH.find_iter(value).count()) as u64;
    Verdict::new(
        n == num_bullets,
        format!("{n} bullet points; needs exactly {num_bullets}"),
    )
}

fn constrained_response(value: &str) -> Verdict {
    let v = value.trim();
    let ok = [
        "My answer is yes.",
        "My answer is no.",
        "My answer is maybe.",
    ]
    .iter()
    .any(|o| v.contains(o));
    Verdict::new(
        ok,
        if ok {
            "contains one of the options"
        } else {
            "none of \"My answer is yes./no./maybe.\""
        },
    )
}

/// At least `num_highlights` non-blank `*single*` and `**double**`
/// highlights.
fn highlights(value: &str, num_highlights: u64) -> Verdict {
    let single = HIGHLIGHT
        .find_iter(value)
        .filter(|m| !m.as_str().trim_matches('*').trim().is_empty())
        .count();
    let double = DOUBLE_HIGHLIGHT
        .find_iter(value)
        .filter(|m| {
            let inner = m.as_str().strip_prefix("**").unwrap_or("");
            !inner.strip_suffix("**").unwrap_or("").trim().is_empty()
        })
        .count();
    let n = (single + double) as u64;
    Verdict::new(
        n >= num_highlights,
        format!("{n} highlighted sections; needs at least {num_highlights}"),
    )
}

fn sections(value: &str, section_spliter: &str, num_sections: u64) -> Verdict {
    let pattern = format!(r"\s?{}\s?\d+\s?", regex::escape(section_spliter));
    let n = Regex::new(&pattern).map_or(0, |re| re.find_iter(value).count()) as u64;
    Verdict::new(
        n >= num_sections,
        format!("{n} sections marked {section_spliter} N; needs at least {num_sections}"),
    )
}

fn title(value: &str) -> Verdict {
    let ok = TITLE.find_iter(value).any(|m| {
        !m.as_str()
            .trim_start_matches('<')
            .trim_end_matches('>')
            .trim()
            .is_empty()
    });
    Verdict::new(
        ok,
        if ok {
            "has a <<title>>"
        } else {
            "no <<title>>"
        },
    )
}

fn json(value: &str) -> Verdict {
    let ok = is_json(value);
    Verdict::new(ok, if ok { "valid JSON" } else { "not valid JSON" })
}

// The response as a whole.

fn two_responses(value: &str) -> Verdict {
    let parts: Vec<&str> = value.split("******").collect();
    let mut valid = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        if part.trim().is_empty() {
            if i != 0 && i != parts.len() - 1 {
                return Verdict::new(false, "an empty response between separators");
            }
        } else {
            valid.push(part.trim());
        }
    }
    let ok = valid.len() == 2 && valid[0] != valid[1];
    Verdict::new(
        ok,
        format!(
            "{} responses separated by ******; needs two different ones",
            valid.len()
        ),
    )
}

fn repeats_prompt(value: &str, prompt_to_repeat: &str) -> Verdict {
    let ok = value
        .trim()
        .to_lowercase()
        .starts_with(&prompt_to_repeat.trim().to_lowercase());
    Verdict::new(
        ok,
        if ok {
            "starts with the request"
        } else {
            "does not start with the request, repeated"
        },
    )
}

fn ends_with_phrase(value: &str, end_phrase: &str) -> Verdict {
    let v = value.trim().trim_matches('"').to_lowercase();
    let ok = v.ends_with(&end_phrase.trim().to_lowercase());
    Verdict::new(
        ok,
        if ok {
            format!("ends with {end_phrase:?}")
        } else {
            format!("does not end with {end_phrase:?}")
        },
    )
}

/// English in one case: `in_case` says whether every letter is in it,
/// `case` names it ("all capitals").
fn english_case(value: &str, in_case: bool, case: &str) -> Verdict {
    let english = lang::is_language(value, "en");
    Verdict::new(
        in_case && english,
        format!(
            "{}; {}",
            if in_case {
                case.to_string()
            } else {
                format!("not {case}")
            },
            if english { "English" } else { "not English" }
        ),
    )
}

fn no_comma(value: &str) -> Verdict {
    let n = value.matches(',').count();
    Verdict::new(n == 0, format!("{n} commas"))
}

fn quoted(value: &str) -> Verdict {
    let v = value.trim();
    let ok = v.chars().count() > 1 && v.starts_with('"') && v.ends_with('"');
    Verdict::new(
        ok,
        if ok {
            "wrapped in double quotes"
        } else {
            "not wrapped in double quotes"
        },
    )
}

// Our extras.

fn words_per_sentence(value: &str, num_words: u64, relation: Relation) -> Verdict {
    let sentences = text::sentences(value);
    let broken: Vec<String> = sentences
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            let n = count_words(s) as u64;
            (!relation.holds(n, num_words))
                .then(|| format!("sentence {} has {n} words: {:?}", i + 1, clip(s)))
        })
        .collect();
    let ok = broken.is_empty() && !sentences.is_empty();
    Verdict::new(
        ok,
        if ok {
            format!(
                "all {} sentences have {} {num_words} words",
                sentences.len(),
                relation.name()
            )
        } else if sentences.is_empty() {
            "no sentences".to_string()
        } else {
            format!(
                "needs {} {num_words} words per sentence; {}",
                relation.name(),
                broken.join("; ")
            )
        },
    )
}

/// Consecutive line pairs of every stanza rhyme (AABB), and there is one.
fn rhyme(value: &str) -> Verdict {
    let mut broken = Vec::new();
    let mut pairs = 0;
    for (si, stanza) in stanzas(value).iter().enumerate() {
        for pair in stanza.chunks(2) {
            if let [a, b] = pair {
                pairs += 1;
                let (wa, wb) = (last_word(a), last_word(b));
                if !rhymes(&wa, &wb) {
                    broken.push(format!("stanza {}: {wa:?} / {wb:?}", si + 1));
                }
            }
        }
    }
    let ok = pairs > 0 && broken.is_empty();
    Verdict::new(
        ok,
        if pairs == 0 {
            "no line pairs".to_string()
        } else if ok {
            format!("all {pairs} line pairs rhyme (approximately)")
        } else {
            format!("line pairs that do not rhyme: {}", broken.join("; "))
        },
    )
}

fn starts_with_phrase(value: &str, phrase: &str) -> Verdict {
    let ok = starts_with_ci(strip_lead(value), phrase);
    Verdict::new(
        ok,
        if ok {
            format!("starts with {phrase:?}")
        } else {
            format!("does not start with {phrase:?}")
        },
    )
}

fn sentences_start_with(value: &str, prefix: &str) -> Verdict {
    let sentences = text::sentences(value);
    let broken: Vec<String> = sentences
        .iter()
        .enumerate()
        .filter(|(_, s)| !starts_with_ci(strip_lead(s), prefix))
        .map(|(i, s)| format!("sentence {}: {:?}", i + 1, clip(s)))
        .collect();
    let ok = broken.is_empty() && !sentences.is_empty();
    Verdict::new(
        ok,
        if ok {
            format!("all {} sentences start with {prefix:?}", sentences.len())
        } else {
            format!(
                "sentences not starting with {prefix:?}: {}",
                broken.join("; ")
            )
        },
    )
}

/// The first 60 characters of a sentence, for details.
fn clip(s: &str) -> String {
    let mut out: String = s.chars().take(60).collect();
    if s.chars().nth(60).is_some() {
        out.push('…');
    }
    out
}
