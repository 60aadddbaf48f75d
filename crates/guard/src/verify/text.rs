//! Counting words, sentences and capitalised words the way IFEval's checker
//! does. Words are runs of Python's `\w` (letters, numbers, `_`; unlike the
//! `regex` crate's `\w`, combining marks split words, as in Python).
//! Sentences approximate NLTK's punkt English model with rules: a `.`, `?`
//! or `!` followed by whitespace and another token ends a sentence unless
//! the token before it is a known abbreviation, an initial, an ordinal
//! number or an ellipsis followed by a lowercase word; newlines alone never
//! end a sentence.

/// Python's `\w`: a letter, a number or `_`.
pub fn is_word_char(c: char) -> bool {
    c == '_' || c.is_alphanumeric() && !is_mark(c)
}

/// Combining marks that Rust counts as alphabetic (Other_Alphabetic) but
/// Python's `str.isalnum` does not: the vowel signs of Indic and other
/// scripts. Approximated by the Unicode blocks' mark ranges.
fn is_mark(c: char) -> bool {
    let u = c as u32;
    // Combining diacritics, and the dependent signs of Brahmic scripts:
    // within each 128-code-point block from Devanagari to Sinhala, the
    // signs sit at offsets 0x00-0x03 and 0x3A-0x57 and 0x62-0x63.
    if (0x0300..=0x036F).contains(&u) {
        return true;
    }
    if (0x0900..=0x0DFF).contains(&u) {
        let off = u & 0x7F;
        return off <= 0x03 || (0x3A..=0x57).contains(&off) || (0x62..=0x63).contains(&off);
    }
    // Thai and Lao vowel and tone marks.
    if (0x0E31..=0x0E3A).contains(&u) && u != 0x0E32 && u != 0x0E33 {
        return true;
    }
    if (0x0E47..=0x0E4E).contains(&u) {
        return true;
    }
    // Arabic harakat.
    (0x064B..=0x065F).contains(&u) || u == 0x0670
}

/// The words of `text` (runs of Python's `\w`), as NLTK's
/// `RegexpTokenizer(r"\w+")` finds them.
pub fn words(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in text.char_indices() {
        match (is_word_char(c), start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                out.push(&text[s..i]);
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        out.push(&text[s..]);
    }
    out
}

/// How many words `text` has.
pub fn count_words(text: &str) -> usize {
    words(text).len()
}

/// Abbreviations after which a period does not end a sentence (lowercase,
/// without the final period). Common English ones in the spirit of punkt's
/// Wall Street Journal model.
const ABBREVIATIONS: &[&str] = &[
    "mr", "mrs", "ms", "dr", "prof", "jr", "sr", "st", "mt", "ft", "inc", "ltd", "co", "corp",
    "vs", "etc", "e.g", "i.e", "u.s", "u.k", "u.n", "a.m", "p.m", "jan", "feb", "mar", "apr",
    "aug", "sept", "sep", "oct", "nov", "dec", "gen", "gov", "sen", "rep", "lt", "col", "sgt",
    "capt", "cmdr", "adm", "rev", "no", "nos", "vol", "fig", "approx", "dept", "est", "ave",
    "blvd", "rd", "calif", "fla", "mass", "n.y", "d.c", "l.a", "ph.d", "cf", "al", "ca", "pp",
    "ed", "mins", "hrs", "oz", "lbs", "sq", "c.e", "b.c", "a.d", "u.s.a",
];

/// Words that, capitalised after an abbreviation or an initial, signal a
/// new sentence (punkt's orthographic and sentence-starter heuristics).
const SENTENCE_STARTERS: &[&str] = &[
    "the",
    "a",
    "an",
    "this",
    "that",
    "these",
    "those",
    "it",
    "he",
    "she",
    "they",
    "we",
    "i",
    "you",
    "but",
    "and",
    "or",
    "so",
    "in",
    "on",
    "at",
    "for",
    "if",
    "when",
    "while",
    "however",
    "there",
    "here",
    "our",
    "my",
    "your",
    "his",
    "her",
    "their",
    "its",
    "as",
    "after",
    "before",
    "then",
    "also",
    "some",
    "many",
    "most",
    "all",
    "each",
    "what",
    "why",
    "how",
    "who",
    "where",
    "one",
    "yes",
    "not",
    "with",
    "to",
    "from",
    "by",
    "because",
    "although",
    "since",
    "thus",
    "therefore",
    "let",
    "now",
    "finally",
    "first",
    "second",
    "next",
    "overall",
];

/// Characters that may follow a sentence-ending mark inside a token (punkt's
/// "non-word" context characters).
fn is_context_punct(c: char) -> bool {
    matches!(
        c,
        ')' | '"' | ';' | '}' | ']' | '*' | ':' | '@' | '\'' | '(' | '{' | '[' | '!' | '?'
    )
}

fn is_closing(c: char) -> bool {
    matches!(c, '"' | '\'' | ')' | ']' | '}' | '”' | '’')
}

/// Whether a period-final word (without its period) keeps the sentence
/// going, given the next token.
fn period_continues(body: &str, next: &str) -> bool {
    let next_first = next
        .chars()
        .find(|c| !matches!(c, '"' | '\'' | '(' | '[' | '*' | '“' | '‘'));
    let next_lower = next_first.is_some_and(char::is_lowercase);
    let next_upper = next_first.is_some_and(char::is_uppercase);
    let next_word: String = next
        .trim_matches(|c: char| !c.is_alphanumeric())
        .to_lowercase();
    let starter = next_upper && SENTENCE_STARTERS.contains(&next_word.as_str());
    if next_first.is_some_and(|c| matches!(c, ';' | ':' | ',' | '.' | '!' | '?')) {
        return true;
    }
    // An ellipsis: a new sentence only if the next word looks like one.
    if body.ends_with('.') {
        return !next_upper;
    }
    let trimmed = body.trim_start_matches(|c: char| !c.is_alphanumeric());
    let lower = trimmed.to_lowercase();
    let last_part = lower.rsplit('-').next().unwrap_or("");
    if ABBREVIATIONS.contains(&lower.as_str()) || ABBREVIATIONS.contains(&last_part) {
        return !starter;
    }
    let mut chars = trimmed.chars();
    if let (Some(c), None) = (chars.next(), chars.next()) {
        if c.is_alphabetic() {
            // An initial such as "J. Smith".
            return next_lower || !starter;
        }
    }
    // An ordinal or a list number ("1."): only a lowercase word continues.
    let numeric = !trimmed.is_empty()
        && trimmed
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, ',' | '.' | '-'))
        && trimmed.starts_with(|c: char| c.is_ascii_digit());
    if numeric {
        return next_lower;
    }
    false
}

/// The sentences of `text`, approximating NLTK's punkt English model (which
/// IFEval's `count_sentences` uses). Slices of `text`, trimmed.
pub fn sentences(text: &str) -> Vec<&str> {
    // Whitespace-separated tokens with their byte spans.
    let mut tokens: Vec<(usize, usize)> = Vec::new();
    let mut start = None;
    for (i, c) in text.char_indices() {
        match (c.is_whitespace(), start) {
            (false, None) => start = Some(i),
            (true, Some(s)) => {
                tokens.push((s, i));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        tokens.push((s, text.len()));
    }
    let mut out = Vec::new();
    let mut sentence_start: Option<usize> = None;
    let mut i = 0;
    while i < tokens.len() {
        let (s, e) = tokens[i];
        sentence_start.get_or_insert(s);
        let token = &text[s..e];
        let next = tokens.get(i + 1).map(|&(ns, ne)| &text[ns..ne]);
        if ends_sentence(token, next) {
            let mut end = e;
            // A lone closing quote or bracket belongs to the sentence it closes.
            if let Some(&(ns, ne)) = tokens.get(i + 1) {
                if text[ns..ne].chars().all(is_closing) {
                    end = ne;
                    i += 1;
                }
            }
            if let Some(st) = sentence_start.take() {
                out.push(text[st..end].trim());
            }
        }
        i += 1;
    }
    if let Some(st) = sentence_start {
        let last = text[st..].trim();
        if !last.is_empty() {
            out.push(last);
        }
    }
    out
}

/// Whether a whitespace-delimited token ends a sentence, given the next one.
fn ends_sentence(token: &str, next: Option<&str>) -> bool {
    // The last sentence-ending mark that punkt would consider: one followed
    // by context punctuation inside the token, or ending the token when
    // another token follows.
    let chars: Vec<(usize, char)> = token.char_indices().collect();
    let mut candidate = None;
    for (k, &(pos, c)) in chars.iter().enumerate() {
        if !matches!(c, '.' | '?' | '!') {
            continue;
        }
        let followed = match chars.get(k + 1) {
            Some(&(_, after)) => is_context_punct(after),
            None => next.is_some(),
        };
        if followed {
            candidate = Some((pos, c));
        }
    }
    let Some((pos, mark)) = candidate else {
        return false;
    };
    let rest = &token[pos + mark.len_utf8()..];
    if mark != '.' {
        return true;
    }
    let Some(next) = next.filter(|_| rest.is_empty() || rest.chars().all(is_closing)) else {
        // A period followed by context punctuation and more text inside the
        // token ("(a.)b"): punkt breaks there.
        return true;
    };
    let body = &token[..pos];
    // Strip leading quotes and brackets from the word before the period.
    let body = body.trim_start_matches(|c: char| {
        matches!(
            c,
            '(' | '"'
                | '`'
                | '{'
                | '['
                | ':'
                | ';'
                | '&'
                | '#'
                | '*'
                | '@'
                | ')'
                | '}'
                | ']'
                | '-'
                | ','
                | '\''
                | '“'
                | '‘'
        )
    });
    if body.is_empty() {
        return true;
    }
    !period_continues(body, next)
}

/// How many sentences `text` has (see [`sentences`]).
pub fn count_sentences(text: &str) -> usize {
    sentences(text).len()
}

/// Python's `str.isupper`: some cased character, and none lowercase.
pub fn is_all_upper(text: &str) -> bool {
    let mut cased = false;
    for c in text.chars() {
        if c.is_lowercase() {
            return false;
        }
        if c.is_uppercase() {
            cased = true;
        }
    }
    cased
}

/// Python's `str.islower`: some cased character, and none uppercase.
pub fn is_all_lower(text: &str) -> bool {
    let mut cased = false;
    for c in text.chars() {
        if c.is_uppercase() {
            return false;
        }
        if c.is_lowercase() {
            cased = true;
        }
    }
    cased
}

/// Tokens in the manner of NLTK's `word_tokenize` (Treebank rules), close
/// enough to count all-capital words: punctuation is split off, and so are
/// contractions (`DON'T` is `DO` + `N'T`); hyphenated words stay whole.
pub fn treebank_tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for raw in text.split_whitespace() {
        let mut piece = String::new();
        let mut pieces = Vec::new();
        for c in raw.chars() {
            if matches!(
                c,
                ',' | ';'
                    | ':'
                    | '@'
                    | '#'
                    | '$'
                    | '%'
                    | '&'
                    | '?'
                    | '!'
                    | '('
                    | ')'
                    | '['
                    | ']'
                    | '{'
                    | '}'
                    | '<'
                    | '>'
                    | '"'
                    | '“'
                    | '”'
                    | '`'
            ) {
                if !piece.is_empty() {
                    pieces.push(std::mem::take(&mut piece));
                }
                pieces.push(c.to_string());
            } else {
                piece.push(c);
            }
        }
        if !piece.is_empty() {
            pieces.push(piece);
        }
        for p in pieces {
            split_contraction(&p, &mut out);
        }
    }
    out
}

fn split_contraction(token: &str, out: &mut Vec<String>) {
    let token = token.trim_end_matches('.');
    let token = token.strip_prefix('\'').unwrap_or(token);
    if token.is_empty() {
        return;
    }
    let lower = token.to_lowercase();
    for suffix in ["n't", "'s", "'re", "'ve", "'ll", "'d", "'m", "’s", "n’t"] {
        if lower.ends_with(suffix) && lower.len() > suffix.len() {
            let cut = token.len() - suffix.len();
            if token.is_char_boundary(cut) {
                out.push(token[..cut].to_string());
                out.push(token[cut..].to_string());
                return;
            }
        }
    }
    out.push(token.to_string());
}

/// How many words are in all capital letters (Python's `isupper` on each
/// [`treebank_tokens`] token; `I` and `A` count).
pub fn count_capital_words(text: &str) -> usize {
    treebank_tokens(text)
        .iter()
        .filter(|t| is_all_upper(t))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_follow_python_w() {
        assert_eq!(count_words("Hello, world! It's 3.5 km_long."), 7);
        assert_eq!(count_words(""), 0);
        assert_eq!(count_words("नमस्ते दुनिया"), count_words("नमस्ते दुनिया"));
    }

    #[test]
    fn sentences_respect_abbreviations_and_numbers() {
        assert_eq!(count_sentences("Hello there. How are you? Fine!"), 3);
        assert_eq!(count_sentences("Mr. Smith went to Washington. He left."), 2);
        assert_eq!(count_sentences("It costs 3.50 dollars. Cheap."), 2);
        assert_eq!(count_sentences("See e.g. the box. Then go."), 2);
        assert_eq!(count_sentences("Title line\nstill the same sentence."), 1);
        assert_eq!(count_sentences("\"Go home.\" She left."), 2);
        assert_eq!(count_sentences("J. R. R. Tolkien wrote books."), 1);
        assert_eq!(count_sentences(""), 0);
        assert_eq!(count_sentences("Wait... what? Ok."), 2);
    }

    #[test]
    fn capital_words_split_contractions() {
        assert_eq!(count_capital_words("I DON'T know, NASA."), 4);
        assert_eq!(count_capital_words("hello World"), 0);
    }
}
