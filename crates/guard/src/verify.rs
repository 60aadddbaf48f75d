//! The constraint verifier: checks a response against verifiable
//! instructions ("answer in fewer than 300 words", "wrap your entire
//! response in double quotes", ...), compatible with IFEval (Zhou et al.
//! 2023, google-research `instruction_following_eval`), and recovers those
//! instructions from a prompt's text.
//!
//! - [`Instruction`]: the 25 IFEval instruction types with their arguments,
//!   built from the `(instruction id, kwargs)` pairs of IFEval's input data
//!   ([`Instruction::from_id_kwargs`]), plus a few MT-Bench style extras in
//!   the `hearth:` namespace (words per sentence, line and stanza counts,
//!   rhyme, start phrase, sentence starts).
//! - [`check`] (strict: the response as it is) and [`check_loose`] (IFEval's
//!   loose mode: also the response without its first line, its last line,
//!   both, and each of those with `*` removed); [`verdict`] says why.
//! - [`rows`]: the official input/response/output JSONL rows.
//! - [`extract`](mod@extract): instructions recovered from prompt text.
//! - [`repair`](mod@repair): deterministic fixes where they are safe.
//!
//! The upstream checker is Python with NLTK's punkt sentence splitter and
//! langdetect; [`text`] approximates the first with rules and [`lang`] the
//! second with `whatlang`, so a few verdicts can differ from upstream (the
//! tests measure how many).

pub mod extract;
pub mod lang;
pub mod repair;
pub mod rows;
pub mod text;

use serde_json::{Map, Value};

pub use extract::extract;
pub use repair::repair;

/// Why an instruction could not be built or rows could not be evaluated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// An instruction id that is neither IFEval's nor ours.
    #[error("unknown instruction id `{0}`")]
    UnknownId(String),
    /// An instruction whose arguments are missing or of the wrong kind.
    #[error("instruction `{id}`: {what}")]
    BadArgs {
        /// The instruction id.
        id: String,
        /// What was wrong.
        what: String,
    },
    /// An input row whose prompt has no response (upstream fails the same way).
    #[error("no response for the prompt {0:?}")]
    MissingResponse(String),
    /// A row that is not what the format says.
    #[error("row {row}: {what}")]
    BadRow {
        /// 1-based row (line) number.
        row: usize,
        /// What was wrong.
        what: String,
    },
}

/// A comparison of a count with a threshold. IFEval's own instructions take
/// only `less than` and `at least`; the `hearth:` extras take all four.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Relation {
    /// count < threshold
    LessThan,
    /// count >= threshold
    AtLeast,
    /// count == threshold
    Exactly,
    /// count <= threshold
    AtMost,
}

impl Relation {
    /// The relation's name in kwargs (`"less than"`, `"at least"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Relation::LessThan => "less than",
            Relation::AtLeast => "at least",
            Relation::Exactly => "exactly",
            Relation::AtMost => "at most",
        }
    }

    /// Parses a relation name; `ifeval_only` admits just IFEval's two.
    pub fn parse(name: &str, ifeval_only: bool) -> Option<Relation> {
        let relation = match name {
            "less than" => Relation::LessThan,
            "at least" => Relation::AtLeast,
            "exactly" => Relation::Exactly,
            "at most" => Relation::AtMost,
            _ => return None,
        };
        if ifeval_only && !matches!(relation, Relation::LessThan | Relation::AtLeast) {
            return None;
        }
        Some(relation)
    }

    /// Whether `count` stands in this relation to `threshold`.
    pub fn holds(self, count: u64, threshold: u64) -> bool {
        match self {
            Relation::LessThan => count < threshold,
            Relation::AtLeast => count >= threshold,
            Relation::Exactly => count == threshold,
            Relation::AtMost => count <= threshold,
        }
    }
}

/// One verifiable instruction with its arguments. Variants are named after
/// the IFEval id's second half; `hearth:` extras come last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Instruction {
    /// `keywords:existence`: every keyword occurs (case-insensitive, as a
    /// substring, as upstream).
    KeywordsExistence {
        /// The keywords.
        keywords: Vec<String>,
    },
    /// `keywords:frequency`: how often a keyword occurs (case-insensitive substring).
    KeywordFrequency {
        /// The keyword.
        keyword: String,
        /// The threshold.
        frequency: u64,
        /// The comparison.
        relation: Relation,
    },
    /// `keywords:forbidden_words`: none of the words occurs as a whole word.
    ForbiddenWords {
        /// The forbidden words.
        forbidden_words: Vec<String>,
    },
    /// `keywords:letter_frequency`: how often a letter occurs (case-insensitive).
    LetterFrequency {
        /// The letter, lowercased.
        letter: char,
        /// The threshold.
        let_frequency: u64,
        /// The comparison.
        let_relation: Relation,
    },
    /// `language:response_language`: the response's language (ISO 639-1).
    ResponseLanguage {
        /// ISO 639-1 code, such as `hi`.
        language: String,
    },
    /// `length_constraints:number_sentences`.
    NumberSentences {
        /// The threshold.
        num_sentences: u64,
        /// The comparison.
        relation: Relation,
    },
    /// `length_constraints:number_paragraphs`: exactly this many paragraphs
    /// separated by the markdown divider `***`.
    NumberParagraphs {
        /// The number of paragraphs.
        num_paragraphs: u64,
    },
    /// `length_constraints:number_words`.
    NumberWords {
        /// The threshold.
        num_words: u64,
        /// The comparison.
        relation: Relation,
    },
    /// `length_constraints:nth_paragraph_first_word`: exactly this many
    /// paragraphs separated by blank lines, paragraph `nth_paragraph`
    /// starting with `first_word`.
    NthParagraphFirstWord {
        /// The number of paragraphs.
        num_paragraphs: u64,
        /// Which paragraph (1-based).
        nth_paragraph: u64,
        /// Its first word, lowercased.
        first_word: String,
    },
    /// `detectable_content:number_placeholders`: at least this many `[...]`.
    NumberPlaceholders {
        /// The minimum.
        num_placeholders: u64,
    },
    /// `detectable_content:postscript`: a postscript starting with the marker.
    Postscript {
        /// `P.S.`, `P.P.S` or another marker.
        postscript_marker: String,
    },
    /// `detectable_format:number_bullet_lists`: exactly this many `*`/`-` bullets.
    NumberBulletLists {
        /// The number of bullets.
        num_bullets: u64,
    },
    /// `detectable_format:constrained_response`: contains "My answer is yes."
    /// (or no, or maybe).
    ConstrainedResponse,
    /// `detectable_format:number_highlighted_sections`: at least this many
    /// `*highlighted*` sections.
    NumberHighlightedSections {
        /// The minimum.
        num_highlights: u64,
    },
    /// `detectable_format:multiple_sections`: at least this many sections
    /// marked `SPLITTER N`.
    MultipleSections {
        /// The section marker word, such as `Section`.
        section_spliter: String,
        /// The minimum number of sections.
        num_sections: u64,
    },
    /// `detectable_format:json_format`: the whole response is JSON (``` fences allowed).
    JsonFormat,
    /// `detectable_format:title`: a `<<title>>`.
    Title,
    /// `combination:two_responses`: two different responses separated by `******`.
    TwoResponses,
    /// `combination:repeat_prompt`: starts with the request, repeated.
    RepeatPrompt {
        /// The request to repeat.
        prompt_to_repeat: String,
    },
    /// `startend:end_checker`: ends with this exact phrase.
    EndChecker {
        /// The phrase.
        end_phrase: String,
    },
    /// `change_case:capital_word_frequency`: how many words are in all capitals.
    CapitalWordFrequency {
        /// The threshold.
        capital_frequency: u64,
        /// The comparison.
        capital_relation: Relation,
    },
    /// `change_case:english_capital`: English, all capital letters.
    EnglishCapital,
    /// `change_case:english_lowercase`: English, all lowercase letters.
    EnglishLowercase,
    /// `punctuation:no_comma`: no commas.
    NoComma,
    /// `startend:quotation`: wrapped in double quotation marks.
    Quotation,
    /// `hearth:words_per_sentence`: every sentence's word count stands in
    /// the relation (MT-Bench: "use only four-word sentences").
    WordsPerSentence {
        /// The threshold.
        num_words: u64,
        /// The comparison.
        relation: Relation,
    },
    /// `hearth:number_lines`: the number of non-blank lines.
    NumberLines {
        /// The threshold.
        num_lines: u64,
        /// The comparison.
        relation: Relation,
    },
    /// `hearth:number_stanzas`: the number of blank-line separated blocks.
    NumberStanzas {
        /// The threshold.
        num_stanzas: u64,
        /// The comparison.
        relation: Relation,
    },
    /// `hearth:rhyme`: consecutive line pairs of each stanza rhyme (AABB).
    /// Approximate: two lines rhyme when their last words share the ending
    /// from the last vowel group on (or their last three letters).
    Rhyme,
    /// `hearth:start_phrase`: the response starts with this phrase
    /// (case-insensitive, after leading quotes and markdown).
    StartPhrase {
        /// The phrase.
        phrase: String,
    },
    /// `hearth:sentence_start`: every sentence starts with this prefix
    /// (case-insensitive), such as a letter.
    SentenceStart {
        /// The prefix.
        prefix: String,
    },
}

/// The check's outcome with a human-readable reason, for the guard trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Whether the instruction is followed.
    pub ok: bool,
    /// What was counted or found (e.g. which sentences break a word count).
    pub detail: String,
}

impl Verdict {
    fn new(ok: bool, detail: impl Into<String>) -> Verdict {
        Verdict {
            ok,
            detail: detail.into(),
        }
    }
}

/// Every instruction id this module knows: IFEval's 25, then ours.
pub const INSTRUCTION_IDS: &[&str] = &[
    "keywords:existence",
    "keywords:frequency",
    "keywords:forbidden_words",
    "keywords:letter_frequency",
    "language:response_language",
    "length_constraints:number_sentences",
    "length_constraints:number_paragraphs",
    "length_constraints:number_words",
    "length_constraints:nth_paragraph_first_word",
    "detectable_content:number_placeholders",
    "detectable_content:postscript",
    "detectable_format:number_bullet_lists",
    "detectable_format:constrained_response",
    "detectable_format:number_highlighted_sections",
    "detectable_format:multiple_sections",
    "detectable_format:json_format",
    "detectable_format:title",
    "combination:two_responses",
    "combination:repeat_prompt",
    "startend:end_checker",
    "change_case:capital_word_frequency",
    "change_case:english_capital",
    "change_case:english_lowercase",
    "punctuation:no_comma",
    "startend:quotation",
    "hearth:words_per_sentence",
    "hearth:number_lines",
    "hearth:number_stanzas",
    "hearth:rhyme",
    "hearth:start_phrase",
    "hearth:sentence_start",
];

/// Reads the arguments of one instruction out of its kwargs object,
/// remembering which keys were used so that unexpected ones are refused.
struct Args<'a> {
    id: &'a str,
    map: Option<&'a Map<String, Value>>,
}

impl<'a> Args<'a> {
    fn new(id: &'a str, kwargs: &'a Value) -> Result<Args<'a>, VerifyError> {
        match kwargs {
            Value::Null => Ok(Args { id, map: None }),
            Value::Object(map) => Ok(Args { id, map: Some(map) }),
            other => Err(bad(id, format!("kwargs must be an object, not {other}"))),
        }
    }

    /// Refuses a non-null argument the instruction does not take, as
    /// upstream's `build_description(**kwargs)` would.
    fn only(&self, allowed: &[&str]) -> Result<(), VerifyError> {
        if let Some(map) = self.map {
            for (key, value) in map {
                if !value.is_null() && !allowed.contains(&key.as_str()) {
                    return Err(bad(self.id, format!("unexpected argument `{key}`")));
                }
            }
        }
        Ok(())
    }

    fn get(&self, key: &str) -> Option<&'a Value> {
        self.map?.get(key).filter(|v| !v.is_null())
    }

    fn count(&self, key: &str) -> Result<u64, VerifyError> {
        let value = self
            .get(key)
            .ok_or_else(|| bad(self.id, format!("missing `{key}`")))?;
        if let Some(n) = value.as_u64() {
            return Ok(n);
        }
        // Some exporters write integers as floats (3.0).
        match value.as_f64() {
            Some(f) if f >= 0.0 && f.fract() == 0.0 && f < 1e15 => Ok(f as u64),
            _ => Err(bad(
                self.id,
                format!("`{key}` must be a non-negative integer, not {value}"),
            )),
        }
    }

    fn string(&self, key: &str) -> Result<String, VerifyError> {
        match self.get(key) {
            Some(Value::String(s)) => Ok(s.clone()),
            Some(other) => Err(bad(
                self.id,
                format!("`{key}` must be a string, not {other}"),
            )),
            None => Err(bad(self.id, format!("missing `{key}`"))),
        }
    }

    fn strings(&self, key: &str) -> Result<Vec<String>, VerifyError> {
        let value = self
            .get(key)
            .ok_or_else(|| bad(self.id, format!("missing `{key}`")))?;
        let list = value
            .as_array()
            .ok_or_else(|| bad(self.id, format!("`{key}` must be a list of strings")))?;
        let mut out = Vec::with_capacity(list.len());
        for item in list {
            match item.as_str() {
                Some(s) => out.push(s.to_string()),
                None => return Err(bad(self.id, format!("`{key}` must be a list of strings"))),
            }
        }
        if out.is_empty() {
            return Err(bad(self.id, format!("`{key}` is empty")));
        }
        Ok(out)
    }

    fn relation(&self, key: &str, ifeval_only: bool) -> Result<Relation, VerifyError> {
        let name = self.string(key)?;
        Relation::parse(&name, ifeval_only)
            .ok_or_else(|| bad(self.id, format!("`{key}` {name:?} is not a relation")))
    }
}

fn bad(id: &str, what: impl Into<String>) -> VerifyError {
    VerifyError::BadArgs {
        id: id.to_string(),
        what: what.into(),
    }
}

// The instructions by the kind of their arguments; each builder takes the
// ids of its kind only.
impl Args<'_> {
    /// An instruction that compares a count with a threshold by a relation
    /// (keyword, letter, sentence, word, capital, line, stanza counts);
    /// `None` for another id.
    fn threshold_instruction(&self) -> Result<Option<Instruction>, VerifyError> {
        let instruction = match self.id {
            "keywords:frequency" => {
                self.only(&["keyword", "frequency", "relation"])?;
                let keyword = self.string("keyword")?.trim().to_string();
                if keyword.is_empty() {
                    return Err(bad(self.id, "`keyword` is empty"));
                }
                Instruction::KeywordFrequency {
                    keyword,
                    frequency: self.count("frequency")?,
                    relation: self.relation("relation", true)?,
                }
            }
            "keywords:letter_frequency" => {
                self.only(&["letter", "let_frequency", "let_relation"])?;
                let letter = self.string("letter")?;
                let mut chars = letter.trim().chars().flat_map(char::to_lowercase);
                let (Some(c), None) = (chars.next(), chars.next()) else {
                    return Err(bad(
                        self.id,
                        format!("`letter` {letter:?} is not one letter"),
                    ));
                };
                Instruction::LetterFrequency {
                    letter: c,
                    let_frequency: self.count("let_frequency")?,
                    let_relation: self.relation("let_relation", true)?,
                }
            }
            "length_constraints:number_sentences" => {
                self.only(&["num_sentences", "relation"])?;
                Instruction::NumberSentences {
                    num_sentences: self.count("num_sentences")?,
                    relation: self.relation("relation", true)?,
                }
            }
            "length_constraints:number_words" => {
                self.only(&["num_words", "relation"])?;
                Instruction::NumberWords {
                    num_words: self.count("num_words")?,
                    relation: self.relation("relation", true)?,
                }
            }
            "change_case:capital_word_frequency" => {
                self.only(&["capital_frequency", "capital_relation"])?;
                Instruction::CapitalWordFrequency {
                    capital_frequency: self.count("capital_frequency")?,
                    capital_relation: self.relation("capital_relation", true)?,
                }
            }
            "hearth:words_per_sentence" => {
                self.only(&["num_words", "relation"])?;
                Instruction::WordsPerSentence {
                    num_words: self.count("num_words")?,
                    relation: self.relation("relation", false)?,
                }
            }
            "hearth:number_lines" => {
                self.only(&["num_lines", "relation"])?;
                Instruction::NumberLines {
                    num_lines: self.count("num_lines")?,
                    relation: self.relation("relation", false)?,
                }
            }
            "hearth:number_stanzas" => {
                self.only(&["num_stanzas", "relation"])?;
                Instruction::NumberStanzas {
                    num_stanzas: self.count("num_stanzas")?,
                    relation: self.relation("relation", false)?,
                }
            }
            _ => return Ok(None),
        };
        Ok(Some(instruction))
    }

    /// An instruction that counts parts of the response (paragraphs,
    /// placeholders, bullets, highlighted sections, sections); `None` for
    /// another id.
    fn structure_instruction(&self) -> Result<Option<Instruction>, VerifyError> {
        let instruction = match self.id {
            "length_constraints:number_paragraphs" => {
                self.only(&["num_paragraphs"])?;
                Instruction::NumberParagraphs {
                    num_paragraphs: self.count("num_paragraphs")?,
                }
            }
            "length_constraints:nth_paragraph_first_word" => {
                self.only(&["num_paragraphs", "nth_paragraph", "first_word"])?;
                let num_paragraphs = self.count("num_paragraphs")?;
                let nth_paragraph = self.count("nth_paragraph")?;
                if nth_paragraph == 0 || nth_paragraph > num_paragraphs {
                    return Err(bad(
                        self.id,
                        format!("`nth_paragraph` {nth_paragraph} is not in 1..={num_paragraphs}"),
                    ));
                }
                Instruction::NthParagraphFirstWord {
                    num_paragraphs,
                    nth_paragraph,
                    first_word: self.string("first_word")?.to_lowercase(),
                }
            }
            "detectable_content:number_placeholders" => {
                self.only(&["num_placeholders"])?;
                Instruction::NumberPlaceholders {
                    num_placeholders: self.count("num_placeholders")?,
                }
            }
            "detectable_format:number_bullet_lists" => {
                self.only(&["num_bullets"])?;
                Instruction::NumberBulletLists {
                    num_bullets: self.count("num_bullets")?,
                }
            }
            "detectable_format:number_highlighted_sections" => {
                self.only(&["num_highlights"])?;
                Instruction::NumberHighlightedSections {
                    num_highlights: self.count("num_highlights")?,
                }
            }
            "detectable_format:multiple_sections" => {
                self.only(&["section_spliter", "num_sections"])?;
                let splitter = self.string("section_spliter")?.trim().to_string();
                if splitter.is_empty() {
                    return Err(bad(self.id, "`section_spliter` is empty"));
                }
                Instruction::MultipleSections {
                    section_spliter: splitter,
                    num_sections: self.count("num_sections")?,
                }
            }
            _ => return Ok(None),
        };
        Ok(Some(instruction))
    }

    /// An instruction whose arguments are text (keywords, a language, a
    /// marker or a phrase); `None` for another id.
    fn text_instruction(&self) -> Result<Option<Instruction>, VerifyError> {
        let instruction = match self.id {
            "keywords:existence" => {
                self.only(&["keywords"])?;
                Instruction::KeywordsExistence {
                    keywords: self.strings("keywords")?,
                }
            }
            "keywords:forbidden_words" => {
                self.only(&["forbidden_words"])?;
                let mut words = self.strings("forbidden_words")?;
                words.sort();
                words.dedup();
                Instruction::ForbiddenWords {
                    forbidden_words: words,
                }
            }
            "language:response_language" => {
                self.only(&["language"])?;
                Instruction::ResponseLanguage {
                    language: self.string("language")?.trim().to_string(),
                }
            }
            "detectable_content:postscript" => {
                self.only(&["postscript_marker"])?;
                let marker = self.string("postscript_marker")?.trim().to_string();
                if marker.is_empty() {
                    return Err(bad(self.id, "`postscript_marker` is empty"));
                }
                Instruction::Postscript {
                    postscript_marker: marker,
                }
            }
            "combination:repeat_prompt" => {
                self.only(&["prompt_to_repeat"])?;
                let prompt = self.string("prompt_to_repeat")?;
                if prompt.trim().is_empty() {
                    return Err(bad(self.id, "`prompt_to_repeat` is empty"));
                }
                Instruction::RepeatPrompt {
                    prompt_to_repeat: prompt,
                }
            }
            "startend:end_checker" => {
                self.only(&["end_phrase"])?;
                Instruction::EndChecker {
                    end_phrase: self.string("end_phrase")?.trim().to_string(),
                }
            }
            "hearth:start_phrase" => {
                self.only(&["phrase"])?;
                let phrase = self.string("phrase")?.trim().to_string();
                if phrase.is_empty() {
                    return Err(bad(self.id, "`phrase` is empty"));
                }
                Instruction::StartPhrase { phrase }
            }
            "hearth:sentence_start" => {
                self.only(&["prefix"])?;
                let prefix = self.string("prefix")?.trim().to_string();
                if prefix.is_empty() {
                    return Err(bad(self.id, "`prefix` is empty"));
                }
                Instruction::SentenceStart { prefix }
            }
            _ => return Ok(None),
        };
        Ok(Some(instruction))
    }

    /// An instruction without arguments; an id that is none of these is
    /// unknown.
    fn plain_instruction(&self) -> Result<Instruction, VerifyError> {
        let instruction = match self.id {
            "detectable_format:constrained_response" => Instruction::ConstrainedResponse,
            "detectable_format:json_format" => Instruction::JsonFormat,
            "detectable_format:title" => Instruction::Title,
            "combination:two_responses" => Instruction::TwoResponses,
            "change_case:english_capital" => Instruction::EnglishCapital,
            "change_case:english_lowercase" => Instruction::EnglishLowercase,
            "punctuation:no_comma" => Instruction::NoComma,
            "startend:quotation" => Instruction::Quotation,
            "hearth:rhyme" => Instruction::Rhyme,
            _ => return Err(VerifyError::UnknownId(self.id.to_string())),
        };
        self.only(&[])?;
        Ok(instruction)
    }
}

impl Instruction {
    /// Builds an instruction from an IFEval instruction id and its kwargs
    /// object (null arguments are ignored; missing, mistyped or unexpected
    /// ones are errors naming the instruction).
    pub fn from_id_kwargs(id: &str, kwargs: &Value) -> Result<Instruction, VerifyError> {
        let a = Args::new(id, kwargs)?;
        if let Some(instruction) = a.threshold_instruction()? {
            return Ok(instruction);
        }
        if let Some(instruction) = a.structure_instruction()? {
            return Ok(instruction);
        }
        if let Some(instruction) = a.text_instruction()? {
            return Ok(instruction);
        }
        a.plain_instruction()
    }

    /// The instruction's id, such as `punctuation:no_comma`.
    pub fn id(&self) -> &'static str {
        match self {
            Instruction::KeywordsExistence { .. } => "keywords:existence",
            Instruction::KeywordFrequency { .. } => "keywords:frequency",
            Instruction::ForbiddenWords { .. } => "keywords:forbidden_words",
            Instruction::LetterFrequency { .. } => "keywords:letter_frequency",
            Instruction::ResponseLanguage { .. } => "language:response_language",
            Instruction::NumberSentences { .. } => "length_constraints:number_sentences",
            Instruction::NumberParagraphs { .. } => "length_constraints:number_paragraphs",
            Instruction::NumberWords { .. } => "length_constraints:number_words",
            Instruction::NthParagraphFirstWord { .. } => {
                "length_constraints:nth_paragraph_first_word"
            }
            Instruction::NumberPlaceholders { .. } => "detectable_content:number_placeholders",
            Instruction::Postscript { .. } => "detectable_content:postscript",
            Instruction::NumberBulletLists { .. } => "detectable_format:number_bullet_lists",
            Instruction::ConstrainedResponse => "detectable_format:constrained_response",
            Instruction::NumberHighlightedSections { .. } => {
                "detectable_format:number_highlighted_sections"
            }
            Instruction::MultipleSections { .. } => "detectable_format:multiple_sections",
            Instruction::JsonFormat => "detectable_format:json_format",
            Instruction::Title => "detectable_format:title",
            Instruction::TwoResponses => "combination:two_responses",
            Instruction::RepeatPrompt { .. } => "combination:repeat_prompt",
            Instruction::EndChecker { .. } => "startend:end_checker",
            Instruction::CapitalWordFrequency { .. } => "change_case:capital_word_frequency",
            Instruction::EnglishCapital => "change_case:english_capital",
            Instruction::EnglishLowercase => "change_case:english_lowercase",
            Instruction::NoComma => "punctuation:no_comma",
            Instruction::Quotation => "startend:quotation",
            Instruction::WordsPerSentence { .. } => "hearth:words_per_sentence",
            Instruction::NumberLines { .. } => "hearth:number_lines",
            Instruction::NumberStanzas { .. } => "hearth:number_stanzas",
            Instruction::Rhyme => "hearth:rhyme",
            Instruction::StartPhrase { .. } => "hearth:start_phrase",
            Instruction::SentenceStart { .. } => "hearth:sentence_start",
        }
    }

    /// The instruction's kwargs object, in IFEval's shape (`{}` for none).
    pub fn kwargs(&self) -> Value {
        self.threshold_kwargs()
            .or_else(|| self.structure_kwargs())
            .or_else(|| self.text_kwargs())
            .unwrap_or_else(|| serde_json::json!({}))
    }

    /// The kwargs of an instruction that compares a count with a threshold
    /// by a relation; `None` for another.
    fn threshold_kwargs(&self) -> Option<Value> {
        use serde_json::json;
        let kwargs = match self {
            Instruction::KeywordFrequency {
                keyword,
                frequency,
                relation,
            } => json!({"keyword": keyword, "frequency": frequency, "relation": relation.name()}),
            Instruction::LetterFrequency {
                letter,
                let_frequency,
                let_relation,
            } => json!({
                "letter": letter.to_string(),
                "let_frequency": let_frequency,
                "let_relation": let_relation.name(),
            }),
            Instruction::NumberSentences {
                num_sentences,
                relation,
            } => json!({"num_sentences": num_sentences, "relation": relation.name()}),
            Instruction::NumberWords {
                num_words,
                relation,
            }
            | Instruction::WordsPerSentence {
                num_words,
                relation,
            } => json!({"num_words": num_words, "relation": relation.name()}),
            Instruction::CapitalWordFrequency {
                capital_frequency,
                capital_relation,
            } => json!({
                "capital_frequency": capital_frequency,
                "capital_relation": capital_relation.name(),
            }),
            Instruction::NumberLines {
                num_lines,
                relation,
            } => json!({"num_lines": num_lines, "relation": relation.name()}),
            Instruction::NumberStanzas {
                num_stanzas,
                relation,
            } => json!({"num_stanzas": num_stanzas, "relation": relation.name()}),
            _ => return None,
        };
        Some(kwargs)
    }

    /// The kwargs of an instruction that counts parts of the response;
    /// `None` for another.
    fn structure_kwargs(&self) -> Option<Value> {
        use serde_json::json;
        let kwargs = match self {
            Instruction::NumberParagraphs { num_paragraphs } => {
                json!({ "num_paragraphs": num_paragraphs })
            }
            Instruction::NthParagraphFirstWord {
                num_paragraphs,
                nth_paragraph,
                first_word,
            } => json!({
                "num_paragraphs": num_paragraphs,
                "nth_paragraph": nth_paragraph,
                "first_word": first_word,
            }),
            Instruction::NumberPlaceholders { num_placeholders } => {
                json!({ "num_placeholders": num_placeholders })
            }
            Instruction::NumberBulletLists { num_bullets } => json!({ "num_bullets": num_bullets }),
            Instruction::NumberHighlightedSections { num_highlights } => {
                json!({ "num_highlights": num_highlights })
            }
            Instruction::MultipleSections {
                section_spliter,
                num_sections,
            } => json!({"section_spliter": section_spliter, "num_sections": num_sections}),
            _ => return None,
        };
        Some(kwargs)
    }

    /// The kwargs of an instruction whose arguments are text; `None` for
    /// another.
    fn text_kwargs(&self) -> Option<Value> {
        use serde_json::json;
        let kwargs = match self {
            Instruction::KeywordsExistence { keywords } => json!({ "keywords": keywords }),
            Instruction::ForbiddenWords { forbidden_words } => {
                json!({ "forbidden_words": forbidden_words })
            }
            Instruction::ResponseLanguage { language } => json!({ "language": language }),
            Instruction::Postscript { postscript_marker } => {
                json!({ "postscript_marker": postscript_marker })
            }
            Instruction::RepeatPrompt { prompt_to_repeat } => {
                json!({ "prompt_to_repeat": prompt_to_repeat })
            }
            Instruction::EndChecker { end_phrase } => json!({ "end_phrase": end_phrase }),
            Instruction::StartPhrase { phrase } => json!({ "phrase": phrase }),
            Instruction::SentenceStart { prefix } => json!({ "prefix": prefix }),
            _ => return None,
        };
        Some(kwargs)
    }
}

/// Whether `response` follows the instruction, strictly (the response as
/// it is). A blank response follows nothing, as upstream.
pub fn check(instruction: &Instruction, response: &str) -> bool {
    !response.trim().is_empty() && verdict(instruction, response).ok
}

/// The eight variants IFEval's loose mode tries: the response, without its
/// first line, its last line, both, and each of those with `*` removed.
pub fn loose_variants(response: &str) -> [String; 8] {
    let lines: Vec<&str> = response.split('\n').collect();
    let n = lines.len();
    let without_first = lines.get(1..).unwrap_or(&[]).join("\n").trim().to_string();
    let without_last = lines[..n.saturating_sub(1)].join("\n").trim().to_string();
    let without_both = if n >= 2 {
        lines[1..n - 1].join("\n").trim().to_string()
    } else {
        String::new()
    };
    let unstarred = |s: &str| s.replace('*', "");
    [
        response.to_string(),
        unstarred(response),
        without_first.clone(),
        without_last.clone(),
        without_both.clone(),
        unstarred(&without_first),
        unstarred(&without_last),
        unstarred(&without_both),
    ]
}

/// Whether any non-blank loose variant of `response` follows the
/// instruction (IFEval's loose mode).
pub fn check_loose(instruction: &Instruction, response: &str) -> bool {
    loose_variants(response)
        .iter()
        .any(|variant| check(instruction, variant))
}

/// Checks the instruction against `response` as it is, saying why.
pub fn verdict(instruction: &Instruction, response: &str) -> Verdict {
    checks::verdict(instruction, response)
}

mod checks;
