//! FastChat's MT-Bench data and file formats: questions, judge prompts,
//! reference answers, `model_answer/*.jsonl` and `model_judgment/*.jsonl`
//! rows, and a JSON-lines reader that tolerates the torn last line an
//! interrupted writer leaves.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The 80 MT-Bench questions (FastChat's `question.jsonl`, byte-exact).
pub const QUESTIONS: &str = include_str!("../data/question.jsonl");
/// FastChat's judge prompts (`judge_prompts.jsonl`, byte-exact).
pub const JUDGE_PROMPTS: &str = include_str!("../data/judge_prompts.jsonl");
/// GPT-4's reference answers for math, reasoning and coding questions.
pub const REFERENCE_ANSWERS: &str = include_str!("../data/reference_answer/gpt-4.jsonl");

/// Categories whose judging uses a reference answer (FastChat's
/// `NEED_REF_CATS`).
pub const NEED_REF_CATS: [&str; 4] = ["math", "reasoning", "coding", "arena-hard-200"];

/// Why MT-Bench data could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A line is not a valid row.
    #[error("{file}, line {line}: {what}")]
    BadLine {
        /// The file (or a name for embedded data).
        file: String,
        /// 1-based line number.
        line: usize,
        /// What was wrong.
        what: String,
    },
}

/// One MT-Bench question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Question {
    /// 81 to 160.
    pub question_id: u32,
    /// writing, roleplay, reasoning, math, coding, extraction, stem, humanities.
    pub category: String,
    /// The two user turns.
    pub turns: Vec<String>,
    /// Reference answers given inline (some question files carry them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<Vec<String>>,
}

/// One choice of an answer row: the assistant's turns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Choice {
    /// Always 0 for MT-Bench runs.
    pub index: u32,
    /// The answers, one per turn.
    pub turns: Vec<String>,
}

/// A row of `model_answer/NAME.jsonl`. Fields beyond FastChat's are kept in
/// `extra` (Hearth writes `hearth`: per-turn tokens, times, guard traces).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AnswerRow {
    /// The question.
    pub question_id: u32,
    /// A unique id of this answer.
    #[serde(default)]
    pub answer_id: String,
    /// The model's name.
    pub model_id: String,
    /// The answers (one choice).
    pub choices: Vec<Choice>,
    /// Unix time the row was written.
    #[serde(default)]
    pub tstamp: f64,
    /// Any other fields, kept as they are.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// A row of `model_judgment/JUDGE_single.jsonl` (single-answer grading).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgmentRow {
    /// The question.
    pub question_id: u32,
    /// The judged model.
    pub model: String,
    /// `[judge model, prompt name]`, e.g. `["gpt-4", "single-v1"]`.
    pub judge: Vec<String>,
    /// The prompt the judge was given.
    pub user_prompt: String,
    /// The judge's text.
    pub judgment: String,
    /// The rating, or -1 when none could be read.
    pub score: f64,
    /// 1 or 2.
    pub turn: u32,
    /// Unix time.
    pub tstamp: f64,
}

/// A judge prompt (`judge_prompts.jsonl`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgePrompt {
    /// e.g. `single-v1`, `single-math-v1-multi-turn`.
    pub name: String,
    /// `single` or `pairwise`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The judge's system prompt.
    pub system_prompt: String,
    /// The user prompt with `{question}`, `{answer}`, `{ref_answer_1}`… slots.
    pub prompt_template: String,
    /// What it is for.
    pub description: String,
    /// `general` or `math`.
    pub category: String,
    /// `[[rating]]` or `[[A]]`.
    pub output_format: String,
}

/// Rows of JSON-lines `text` (`file` names it in errors). Blank lines are
/// skipped. A last line that does not parse and has no final newline is a
/// torn write: it is dropped and reported as `Some(line)`; a bad line
/// anywhere else is an error.
pub fn parse_jsonl<T: DeserializeOwned>(
    text: &str,
    file: &str,
) -> Result<(Vec<T>, Option<usize>), FormatError> {
    let mut rows = Vec::new();
    let lines: Vec<&str> = text.split('\n').collect();
    let last = lines.len();
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<T>(line) {
            Ok(r) => rows.push(r),
            // The text after the last newline is an unfinished write.
            Err(_) if i + 1 == last && !text.ends_with('\n') => return Ok((rows, Some(i + 1))),
            Err(e) => {
                return Err(FormatError::BadLine {
                    file: file.to_string(),
                    line: i + 1,
                    what: e.to_string(),
                })
            }
        }
    }
    Ok((rows, None))
}

/// [`parse_jsonl`] over a file. A torn last line may end inside a
/// multi-byte character: only the text up to the last newline must be UTF-8.
pub fn read_jsonl<T: DeserializeOwned>(
    path: &Path,
) -> Result<(Vec<T>, Option<usize>), FormatError> {
    let io = |source| FormatError::Io {
        path: path.display().to_string(),
        source,
    };
    let bytes = std::fs::read(path).map_err(io)?;
    let keep = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let mut text = String::from_utf8(bytes[..keep].to_vec()).map_err(|e| {
        io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("not UTF-8 text (at byte {})", e.utf8_error().valid_up_to()),
        ))
    })?;
    text.push_str(&String::from_utf8_lossy(&bytes[keep..]));
    parse_jsonl(&text, &path.display().to_string())
}

pub use durable::Tail;

/// Gets an append-only JSON-lines file (a tape, a judgment file) ready for
/// appending after a crash: a last line without its newline is kept (and
/// closed) when it is a whole `T` row, and cut off when it is an unfinished
/// write. The repair is fsynced; a tool should say what it did
/// ([`describe_tail`]).
pub fn repair_jsonl<T: DeserializeOwned>(path: &Path) -> Result<Tail, FormatError> {
    durable::repair_tail(path, |tail| serde_json::from_slice::<T>(tail).is_ok()).map_err(|source| {
        FormatError::Io {
            path: path.display().to_string(),
            source,
        }
    })
}

/// What [`repair_jsonl`] would do to `path`, without doing it: a tool says
/// it first, so a crash before the repair only makes the next start say it
/// again.
pub fn inspect_jsonl<T: DeserializeOwned>(path: &Path) -> Result<Tail, FormatError> {
    durable::inspect_tail(path, |tail| serde_json::from_slice::<T>(tail).is_ok()).map_err(
        |source| FormatError::Io {
            path: path.display().to_string(),
            source,
        },
    )
}

/// One line saying what [`repair_jsonl`] did (or will do) to `path` (`None` when
/// nothing), ending with what happens to the lost record (`redo`, e.g. "that
/// question is answered again").
pub fn describe_tail(path: &Path, tail: Tail, redo: &str) -> Option<String> {
    match tail {
        Tail::Clean => None,
        Tail::Closed { line } => Some(format!(
            "{}: line {line} has no final newline (an interrupted write); the row is whole, so it is kept and closed with one",
            path.display()
        )),
        Tail::Cut { line, bytes } => Some(format!(
            "{}: the last line ({line}) was torn by an interrupted write (cut off {bytes} bytes): {redo}",
            path.display()
        )),
    }
}

/// The 80 questions shipped with Hearth.
pub fn questions() -> Vec<Question> {
    parse_jsonl(QUESTIONS, "question.jsonl")
        .map(|(q, _)| q)
        .unwrap_or_default()
}

/// The judge prompts shipped with Hearth.
pub fn judge_prompts() -> Vec<JudgePrompt> {
    parse_jsonl(JUDGE_PROMPTS, "judge_prompts.jsonl")
        .map(|(p, _)| p)
        .unwrap_or_default()
}

/// GPT-4's reference answers shipped with Hearth.
pub fn reference_answers() -> Vec<AnswerRow> {
    parse_jsonl(REFERENCE_ANSWERS, "reference_answer/gpt-4.jsonl")
        .map(|(r, _)| r)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_data_reads() {
        let q = questions();
        assert_eq!(q.len(), 80);
        assert!(q.iter().all(|q| q.turns.len() == 2));
        assert_eq!(q[0].question_id, 81);
        let p = judge_prompts();
        assert_eq!(p.len(), 8);
        assert!(p.iter().any(|p| p.name == "single-math-v1-multi-turn"));
        let r = reference_answers();
        assert_eq!(r.len(), 30);
    }

    #[test]
    fn a_torn_last_line_is_dropped_and_reported() {
        let text = "{\"question_id\": 81, \"category\": \"writing\", \"turns\": [\"a\", \"b\"]}\n{\"question_id\": 82, \"categ";
        let (rows, torn) = parse_jsonl::<Question>(text, "t").unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(torn, Some(2));
        let bad =
            "{\"question_id\": 81}\n{\"question_id\": 82, \"category\": \"x\", \"turns\": []}\n";
        let err = parse_jsonl::<Question>(bad, "q.jsonl").unwrap_err();
        assert!(err.to_string().contains("q.jsonl, line 1"), "{err}");
    }
}
