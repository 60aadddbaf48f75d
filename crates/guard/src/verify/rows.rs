//! IFEval's row formats, for `hearth check ifeval`: input rows (`key`,
//! `prompt`, `instruction_id_list`, `kwargs`), response rows (`prompt`,
//! `response`, matched to inputs by prompt text as upstream does) and
//! output rows in the official shape, strict and loose.
//!
//! A prompt with no response is an error naming the prompt (upstream fails
//! with a `KeyError` too); an empty response is not an error, it simply
//! follows nothing. When several response rows share a prompt the last one
//! wins, as in upstream's dictionary.
//!
//! With `extract`, each row's instructions are recovered from its prompt
//! ([`super::extract`]) and checked instead of the listed ones: the output's
//! `instruction_id_list` is still the input's, `extracted_instruction_id_list`
//! and `extracted_kwargs` say what was extracted, and the `follow_*` fields
//! refer to the extracted instructions.

use super::{check, check_loose, extract, Instruction, VerifyError};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// One row of IFEval's `input_data.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputRow {
    /// The row's key (absent in some exports).
    #[serde(default)]
    pub key: Option<serde_json::Value>,
    /// The prompt.
    pub prompt: String,
    /// The instruction ids (absent when only extracting).
    #[serde(default)]
    pub instruction_id_list: Vec<String>,
    /// One kwargs object per instruction.
    #[serde(default)]
    pub kwargs: Vec<serde_json::Value>,
}

/// One row of a responses file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResponseRow {
    /// The prompt answered.
    pub prompt: String,
    /// The model's response.
    pub response: String,
}

/// One output row, as upstream's `eval_results_{strict,loose}.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputRow {
    /// The input's instruction ids.
    pub instruction_id_list: Vec<String>,
    /// The prompt.
    pub prompt: String,
    /// The response checked.
    pub response: String,
    /// Whether every instruction is followed.
    pub follow_all_instructions: bool,
    /// Per instruction (the extracted ones in extract mode).
    pub follow_instruction_list: Vec<bool>,
    /// In extract mode: the extracted instructions' ids.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extracted_instruction_id_list: Option<Vec<String>>,
    /// In extract mode: the extracted instructions' kwargs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extracted_kwargs: Option<Vec<serde_json::Value>>,
}

/// Strict (the response as is) or loose (IFEval's eight variants).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The response as it is.
    Strict,
    /// Any of the loose variants.
    Loose,
}

/// Parses JSON lines into rows; blank lines are skipped, and a bad line is
/// an error naming its number.
pub fn parse_jsonl<T: serde::de::DeserializeOwned>(text: &str) -> Result<Vec<T>, VerifyError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let row = serde_json::from_str(line).map_err(|e| VerifyError::BadRow {
            row: i + 1,
            what: e.to_string(),
        })?;
        out.push(row);
    }
    Ok(out)
}

/// Serialises rows as JSON lines.
pub fn to_jsonl<T: Serialize>(rows: &[T]) -> String {
    let mut out = String::new();
    for row in rows {
        // Serialising these plain structs cannot fail.
        if let Ok(line) = serde_json::to_string(row) {
            out.push_str(&line);
            out.push('\n');
        }
    }
    out
}

/// The instructions of an input row, built from its ids and kwargs.
pub fn instructions_of(row: &InputRow, index: usize) -> Result<Vec<Instruction>, VerifyError> {
    if row.kwargs.len() != row.instruction_id_list.len() {
        return Err(VerifyError::BadRow {
            row: index + 1,
            what: format!(
                "{} instruction ids but {} kwargs",
                row.instruction_id_list.len(),
                row.kwargs.len()
            ),
        });
    }
    row.instruction_id_list
        .iter()
        .zip(&row.kwargs)
        .map(|(id, kwargs)| Instruction::from_id_kwargs(id, kwargs))
        .collect()
}

/// Evaluates every input row against its response, in `mode`; with
/// `extract`, against the instructions extracted from its prompt.
pub fn evaluate(
    inputs: &[InputRow],
    responses: &[ResponseRow],
    mode: Mode,
    extract_mode: bool,
) -> Result<Vec<OutputRow>, VerifyError> {
    let by_prompt: HashMap<&str, &str> = responses
        .iter()
        .map(|r| (r.prompt.as_str(), r.response.as_str()))
        .collect();
    let mut out = Vec::with_capacity(inputs.len());
    for (index, row) in inputs.iter().enumerate() {
        let response = *by_prompt
            .get(row.prompt.as_str())
            .ok_or_else(|| VerifyError::MissingResponse(row.prompt.clone()))?;
        let instructions = if extract_mode {
            extract(&row.prompt)
        } else {
            instructions_of(row, index)?
        };
        let follow: Vec<bool> = instructions
            .iter()
            .map(|i| match mode {
                Mode::Strict => check(i, response),
                Mode::Loose => check_loose(i, response),
            })
            .collect();
        out.push(OutputRow {
            instruction_id_list: row.instruction_id_list.clone(),
            prompt: row.prompt.clone(),
            response: response.to_string(),
            follow_all_instructions: follow.iter().all(|&f| f),
            follow_instruction_list: follow,
            extracted_instruction_id_list: extract_mode
                .then(|| instructions.iter().map(|i| i.id().to_string()).collect()),
            extracted_kwargs: extract_mode
                .then(|| instructions.iter().map(|i| i.kwargs()).collect()),
        });
    }
    Ok(out)
}

/// Accuracy over output rows, as upstream's report prints it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Rows whose every instruction is followed.
    pub prompts_followed: usize,
    /// Rows.
    pub prompts: usize,
    /// Instructions followed.
    pub instructions_followed: usize,
    /// Instructions.
    pub instructions: usize,
}

impl Summary {
    /// Counts over `rows`.
    pub fn of(rows: &[OutputRow]) -> Summary {
        Summary {
            prompts_followed: rows.iter().filter(|r| r.follow_all_instructions).count(),
            prompts: rows.len(),
            instructions_followed: rows
                .iter()
                .map(|r| r.follow_instruction_list.iter().filter(|&&f| f).count())
                .sum(),
            instructions: rows.iter().map(|r| r.follow_instruction_list.len()).sum(),
        }
    }

    /// Prompt-level accuracy (0 for no rows).
    pub fn prompt_accuracy(&self) -> f64 {
        ratio(self.prompts_followed, self.prompts)
    }

    /// Instruction-level accuracy (0 for no instructions).
    pub fn instruction_accuracy(&self) -> f64 {
        ratio(self.instructions_followed, self.instructions)
    }
}

fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}
