//! The MT-Bench report: FastChat's `show_result.py` averages (single mode),
//! per-category means, a raw-vs-guarded comparison, and one self-contained
//! HTML page ([`render_html`]) written with `summary.json` by
//! [`write_report`].
//!
//! The numbers mirror pandas exactly: `show_result.py` drops rows whose score
//! is -1, then takes `groupby(...).mean()`, which sums a group's float64
//! scores in row order with Kahan compensation and divides by the count
//! ([`pandas_mean`], pandas' `group_mean` kernel). The "average" is the mean
//! of all kept rows of a model, not the mean of its two turn means. Print
//! with `format!("{:.6}", x)` to get the digits pandas prints (both round half
//! to even on the exact binary value).
//!
//! One caveat, checked against pandas 3.1.1: when a group's rows are already
//! contiguous and sorted by group, pandas 3 takes `np.add.reduceat` (numpy's
//! pairwise sum) instead of the Kahan kernel. The two differ only when a
//! partial sum is inexact; judge scores are integers or halves (at most a few
//! thousand rows), whose sums are exact in float64 in any order, so every
//! pandas version, either path and this code give the same bits on them.
//!
//! Model keys: judgments are grouped by the judged model's name. When more
//! than one judge model (`judge[0]`, e.g. `gpt-4`, `human:alice`) graded the
//! same model, its rows are kept apart per judge under the key
//! `NAME (JUDGE)`, because averaging GPT-4 with a human rater would give a
//! number neither `show_result.py` run prints. The prompt name (`judge[1]`,
//! `single-v1` vs `single-math-v1`) does not split a model: one judge uses
//! several prompts over one run. Every human rater is a judge of their own.

mod guarded;
mod html;

pub use guarded::{compare_guarded, CategoryPair, GuardChange, GuardComparison};
pub use html::{escape_html, render_html};

use crate::fastchat::{JudgmentRow, Question};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// MT-Bench's eight categories in FastChat's order (its radar chart's axes).
pub const CATEGORIES: [&str; 8] = [
    "writing",
    "roleplay",
    "reasoning",
    "math",
    "coding",
    "extraction",
    "stem",
    "humanities",
];

/// The averages of every judged model.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Model key (see the module docs: `NAME`, or `NAME (JUDGE)` when several
    /// judges graded the model) → its averages.
    pub models: BTreeMap<String, ModelSummary>,
}

/// One model's averages, as `show_result.py` computes them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelSummary {
    /// Mean score over every kept row (both turns).
    pub average: f64,
    /// Mean score of turn-1 rows; `None` when there are none (never NaN).
    pub turn1: Option<f64>,
    /// Mean score of turn-2 rows; `None` when there are none.
    pub turn2: Option<f64>,
    /// Category → mean score over both turns. Rows whose question is not in
    /// the question list have no category and are left out here (pandas'
    /// inner join of judgments with `question.jsonl` drops them too).
    pub categories: BTreeMap<String, f64>,
    /// Rows kept (score ≠ -1).
    pub n: usize,
}

/// pandas' `groupby(...).mean()` of one group: a float64 sum in row order with
/// Kahan compensation (pandas' `group_mean`), divided by the count. `None`
/// for an empty group, where pandas would give NaN.
pub fn pandas_mean<I: IntoIterator<Item = f64>>(values: I) -> Option<f64> {
    let mut m = Mean::default();
    for v in values {
        m.push(v);
    }
    m.get()
}

/// A running [`pandas_mean`].
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Mean {
    sum: f64,
    compensation: f64,
    n: usize,
}

impl Mean {
    /// Adds one value, as pandas' `group_mean` does.
    pub(crate) fn push(&mut self, v: f64) {
        if v.is_nan() {
            // pandas skips missing values; JSON has none, but stay faithful.
            return;
        }
        self.n += 1;
        let y = v - self.compensation;
        let t = self.sum + y;
        self.compensation = t - self.sum - y;
        // pandas resets a NaN compensation (infinite sums) so that the sum
        // stays infinite instead of turning NaN.
        if self.compensation.is_nan() {
            self.compensation = 0.0;
        }
        self.sum = t;
    }

    /// The mean, or `None` with no values.
    pub(crate) fn get(&self) -> Option<f64> {
        (self.n > 0).then(|| self.sum / self.n as f64)
    }
}

/// `show_result.py` keeps rows whose score is not -1.
pub(crate) fn kept(row: &JudgmentRow) -> bool {
    row.score != -1.0
}

/// The judge model of a row (`judge[0]`), or `?` when the row names none.
pub(crate) fn judge_of(row: &JudgmentRow) -> &str {
    row.judge.first().map(String::as_str).unwrap_or("?")
}

/// The model key of every row (parallel to `judgments`): the model name, or
/// `NAME (JUDGE)` when several judges graded that model.
pub fn model_keys(judgments: &[JudgmentRow]) -> Vec<String> {
    let mut judges: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for r in judgments {
        judges
            .entry(r.model.as_str())
            .or_default()
            .insert(judge_of(r));
    }
    judgments
        .iter()
        .map(|r| {
            if judges.get(r.model.as_str()).is_some_and(|j| j.len() > 1) {
                format!("{} ({})", r.model, judge_of(r))
            } else {
                r.model.clone()
            }
        })
        .collect()
}

/// Question id → category.
pub(crate) fn categories_of(questions: &[Question]) -> BTreeMap<u32, &str> {
    questions
        .iter()
        .map(|q| (q.question_id, q.category.as_str()))
        .collect()
}

/// `show_result.py`'s averages (overall, turn 1, turn 2) and the per-category
/// means of every model, from single-answer judgments. Rows scored -1 are
/// dropped; a model all of whose rows were dropped is absent, as in pandas.
pub fn summarize(judgments: &[JudgmentRow], questions: &[Question]) -> Summary {
    #[derive(Default)]
    struct Acc {
        all: Mean,
        turn1: Mean,
        turn2: Mean,
        categories: BTreeMap<String, Mean>,
    }
    let cats = categories_of(questions);
    let keys = model_keys(judgments);
    let mut accs: BTreeMap<&str, Acc> = BTreeMap::new();
    for (row, key) in judgments.iter().zip(&keys) {
        if !kept(row) {
            continue;
        }
        let acc = accs.entry(key.as_str()).or_default();
        acc.all.push(row.score);
        match row.turn {
            1 => acc.turn1.push(row.score),
            2 => acc.turn2.push(row.score),
            _ => {}
        }
        if let Some(c) = cats.get(&row.question_id) {
            acc.categories
                .entry((*c).to_string())
                .or_default()
                .push(row.score);
        }
    }
    let models = accs
        .into_iter()
        .filter_map(|(key, acc)| {
            let average = acc.all.get()?;
            Some((
                key.to_string(),
                ModelSummary {
                    average,
                    turn1: acc.turn1.get(),
                    turn2: acc.turn2.get(),
                    categories: acc
                        .categories
                        .into_iter()
                        .filter_map(|(c, m)| Some((c, m.get()?)))
                        .collect(),
                    n: acc.all.n,
                },
            ))
        })
        .collect();
    Summary { models }
}

/// Why a report could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The output folder or a file in it could not be written.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The summary could not be serialized.
    #[error("cannot serialize the summary: {0}")]
    Json(#[from] serde_json::Error),
}

/// Writes `summary.json` (pretty-printed [`Summary`]) and `report.html` into
/// `out_dir`, creating it when missing. Each is written whole (a temporary
/// name, fsync, rename), so a crash leaves the old file or the new one;
/// `say` is told of each leftover of an earlier interrupted write before it
/// is removed.
pub fn write_report(
    out_dir: &Path,
    summary: &Summary,
    html: &str,
    mut say: impl FnMut(&durable::Leftover),
) -> Result<(), ReportError> {
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| ReportError::Io { path, source }
    };
    std::fs::create_dir_all(out_dir).map_err(io(out_dir))?;
    let mut json = serde_json::to_string_pretty(summary)?;
    json.push('\n');
    let p = out_dir.join("summary.json");
    durable::write_atomic_saying(&p, json.as_bytes(), &mut say).map_err(io(&p))?;
    let p = out_dir.join("report.html");
    durable::write_atomic_saying(&p, html.as_bytes(), &mut say).map_err(io(&p))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(model: &str, judge: &str, q: u32, turn: u32, score: f64) -> JudgmentRow {
        JudgmentRow {
            question_id: q,
            model: model.into(),
            judge: vec![judge.into(), "single-v1".into()],
            user_prompt: String::new(),
            judgment: String::new(),
            score,
            turn,
            tstamp: 0.0,
        }
    }

    fn q(id: u32, cat: &str) -> Question {
        Question {
            question_id: id,
            category: cat.into(),
            turns: vec!["a".into(), "b".into()],
            reference: None,
        }
    }

    #[test]
    fn kahan_mean_matches_pandas_where_naive_summation_drifts() {
        // Naive: 0.1 added ten times is 0.9999999999999999; pandas' Kahan
        // sum gives 1.0, so the mean is exactly 0.1.
        assert_eq!(pandas_mean([0.1; 10]), Some(0.1));
        // Where compensation loses to cancellation: pandas 3.1.1
        // `groupby("model").mean()` with the group's rows interleaved with
        // another group's (so its Kahan kernel runs) gives 0.825, i.e. 3.3/4.
        assert_eq!(pandas_mean([1e16, 1.0, -1e16, 3.3]), Some(0.825));
        assert_eq!(pandas_mean(std::iter::empty()), None);
        assert_eq!(pandas_mean([f64::INFINITY, 1.0]), Some(f64::INFINITY));
    }

    #[test]
    fn average_is_over_rows_not_over_turn_means() {
        let j = vec![
            row("m", "gpt-4", 81, 1, 10.0),
            row("m", "gpt-4", 82, 1, 8.0),
            row("m", "gpt-4", 81, 2, 3.0),
            row("m", "gpt-4", 82, 2, -1.0),
        ];
        let s = summarize(&j, &[q(81, "writing"), q(82, "math")]);
        let m = &s.models["m"];
        assert_eq!(m.n, 3);
        assert_eq!(m.turn1, Some(9.0));
        assert_eq!(m.turn2, Some(3.0));
        assert_eq!(m.average, 7.0); // (10+8+3)/3, not (9+3)/2
        assert_eq!(m.categories["writing"], 6.5);
        assert_eq!(m.categories["math"], 8.0);
    }

    #[test]
    fn only_turn_one_gives_no_nan() {
        let j = vec![row("m", "gpt-4", 81, 1, 5.0)];
        let s = summarize(&j, &[]);
        assert_eq!(s.models["m"].turn2, None);
        assert!(s.models["m"].categories.is_empty());
        let json = serde_json::to_string(&s).unwrap();
        assert!(!json.contains("NaN"), "{json}");
        assert!(json.contains("\"turn2\":null"), "{json}");
    }

    #[test]
    fn several_judges_are_kept_apart_and_all_dropped_models_vanish() {
        let j = vec![
            row("m", "gpt-4", 81, 1, 10.0),
            row("m", "human:alice", 81, 1, 4.0),
            row("m", "human:bob", 81, 1, 6.0),
            row("solo", "human:alice", 81, 1, 7.0),
            row("gone", "gpt-4", 81, 1, -1.0),
        ];
        let s = summarize(&j, &[]);
        let keys: Vec<&str> = s.models.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            ["m (gpt-4)", "m (human:alice)", "m (human:bob)", "solo"]
        );
        assert_eq!(s.models["m (human:alice)"].average, 4.0);
    }

    #[test]
    fn empty_input_is_an_empty_summary() {
        assert!(summarize(&[], &[]).models.is_empty());
    }
}
