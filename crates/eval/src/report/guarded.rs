//! Raw vs guarded: the same base model answered with and without Hearth's
//! guards, set side by side per category, and what each guard changed.
//!
//! Pairing: every answer row of a model carries `extra.hearth.guard` (the
//! `--guard` setting: `all`, `none`, `calc,logic`…). A model whose setting is
//! absent, empty or `none` is *raw*; any other setting is *guarded*. Models
//! pair by base name, the model id up to its first `+` (`gemma3-270m` and
//! `gemma3-270m+guard`). Each guarded model is compared with the raw model of
//! its base (the one named exactly the base when there are several), once per
//! judge that graded either of them.
//!
//! Attribution: a guard changed a question's turn when that turn's trace
//! (`extra.hearth.turns[i].guard.steps`) has a step of that guard with
//! outcome `repaired`. Its score change is the guarded model's score minus
//! the raw model's score for the same question and turn from the same judge
//! (the mean when a judge graded a turn more than once).

use super::{categories_of, judge_of, kept, Mean};
use crate::fastchat::{AnswerRow, JudgmentRow, Question};
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// A guarded model set beside its raw base model, as graded by one judge.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GuardComparison {
    /// The base name both share.
    pub base: String,
    /// The model answering without guards.
    pub raw_model: String,
    /// The model answering with guards.
    pub guarded_model: String,
    /// The guarded model's `extra.hearth.guard` setting.
    pub guard_setting: String,
    /// The judge model (`judge[0]`), or `None` when neither model was judged.
    pub judge: Option<String>,
    /// Mean over every kept row of each model.
    pub average: CategoryPair,
    /// Category → both models' means over both turns.
    pub categories: BTreeMap<String, CategoryPair>,
    /// Guard name → the question turns it repaired, by question then turn.
    pub changes: BTreeMap<String, Vec<GuardChange>>,
}

/// The raw and the guarded model's mean score, where there is one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct CategoryPair {
    /// The raw model's mean.
    pub raw: Option<f64>,
    /// The guarded model's mean.
    pub guarded: Option<f64>,
}

/// One question turn a guard repaired, with the scores before and after.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GuardChange {
    /// The question.
    pub question_id: u32,
    /// 1 or 2.
    pub turn: u32,
    /// The trace's detail of the repairing step(s), `; `-joined.
    pub detail: String,
    /// The raw model's score of this turn.
    pub raw: Option<f64>,
    /// The guarded model's score of this turn.
    pub guarded: Option<f64>,
    /// `guarded - raw` when both were scored.
    pub delta: Option<f64>,
}

/// A model's guard setting from its answer rows: the first
/// `extra.hearth.guard` string found.
fn guard_setting(rows: &[&AnswerRow]) -> Option<String> {
    rows.iter().find_map(|r| {
        r.extra
            .get("hearth")
            .and_then(|h| h.get("guard"))
            .and_then(Value::as_str)
            .map(str::to_string)
    })
}

fn is_raw(setting: Option<&str>) -> bool {
    matches!(setting.map(str::trim), None | Some("") | Some("none"))
}

/// The base name of a model id: up to its first `+`.
fn base_of(model: &str) -> &str {
    model.split('+').next().unwrap_or(model)
}

/// (guard name, question, turn) → repaired-step details, from the per-turn
/// traces of a model's answer rows. Traces that are missing or not shaped as
/// expected contribute nothing rather than failing the report.
fn repairs(rows: &[&AnswerRow]) -> BTreeMap<(String, u32, u32), Vec<String>> {
    let mut out: BTreeMap<(String, u32, u32), Vec<String>> = BTreeMap::new();
    for r in rows {
        let Some(turns) = r
            .extra
            .get("hearth")
            .and_then(|h| h.get("turns"))
            .and_then(Value::as_array)
        else {
            continue;
        };
        for (i, t) in turns.iter().enumerate() {
            let Some(steps) = t
                .get("guard")
                .and_then(|g| g.get("steps"))
                .and_then(Value::as_array)
            else {
                continue;
            };
            let turn = u32::try_from(i + 1).unwrap_or(u32::MAX);
            for s in steps {
                if s.get("outcome").and_then(Value::as_str) != Some("repaired") {
                    continue;
                }
                let guard = s
                    .get("guard")
                    .and_then(Value::as_str)
                    .unwrap_or("?")
                    .to_string();
                let detail = s
                    .get("detail")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                out.entry((guard, r.question_id, turn))
                    .or_default()
                    .push(detail);
            }
        }
    }
    out
}

/// Scores of one model by one judge: (question, turn) → mean, and the
/// model's overall and per-category means.
struct Scores {
    turns: BTreeMap<(u32, u32), f64>,
    average: Option<f64>,
    categories: BTreeMap<String, f64>,
}

fn scores(
    judgments: &[JudgmentRow],
    model: &str,
    judge: Option<&str>,
    cats: &BTreeMap<u32, &str>,
) -> Scores {
    let mut turns: BTreeMap<(u32, u32), Mean> = BTreeMap::new();
    let mut all = Mean::default();
    let mut categories: BTreeMap<String, Mean> = BTreeMap::new();
    for r in judgments {
        if r.model != model || Some(judge_of(r)) != judge || !kept(r) {
            continue;
        }
        turns
            .entry((r.question_id, r.turn))
            .or_default()
            .push(r.score);
        all.push(r.score);
        if let Some(c) = cats.get(&r.question_id) {
            categories
                .entry((*c).to_string())
                .or_default()
                .push(r.score);
        }
    }
    Scores {
        turns: turns
            .into_iter()
            .filter_map(|(k, m)| Some((k, m.get()?)))
            .collect(),
        average: all.get(),
        categories: categories
            .into_iter()
            .filter_map(|(k, m)| Some((k, m.get()?)))
            .collect(),
    }
}

/// Per base name, its raw models and its guarded models with their setting.
type Side<'a> = (Vec<&'a str>, Vec<(&'a str, String)>);

/// The models of `by_model` sorted by base name into raw and guarded.
fn sides_by_base<'a>(by_model: &BTreeMap<&'a str, Vec<&AnswerRow>>) -> BTreeMap<&'a str, Side<'a>> {
    let mut bases: BTreeMap<&str, Side> = BTreeMap::new();
    for (model, rows) in by_model {
        let setting = guard_setting(rows);
        let entry = bases.entry(base_of(model)).or_default();
        if is_raw(setting.as_deref()) {
            entry.0.push(model);
        } else {
            entry.1.push((model, setting.unwrap_or_default()));
        }
    }
    bases
}

/// The judges that graded either model, or one `None` when neither was
/// judged (the comparison is still shown, without scores).
fn judges_of<'a>(judgments: &'a [JudgmentRow], raw: &str, guarded: &str) -> Vec<Option<&'a str>> {
    let judges: BTreeSet<&str> = judgments
        .iter()
        .filter(|r| r.model == raw || r.model == guarded)
        .map(judge_of)
        .collect();
    if judges.is_empty() {
        vec![None]
    } else {
        judges.into_iter().map(Some).collect()
    }
}

/// Every category either model was scored in, with both models' means.
fn category_pairs(r: &Scores, g: &Scores) -> BTreeMap<String, CategoryPair> {
    let names: BTreeSet<&String> = r.categories.keys().chain(g.categories.keys()).collect();
    names
        .into_iter()
        .map(|c| {
            let pair = CategoryPair {
                raw: r.categories.get(c).copied(),
                guarded: g.categories.get(c).copied(),
            };
            (c.clone(), pair)
        })
        .collect()
}

/// The turns each guard repaired, with the raw and guarded scores of each.
fn guard_changes(
    repaired: &BTreeMap<(String, u32, u32), Vec<String>>,
    r: &Scores,
    g: &Scores,
) -> BTreeMap<String, Vec<GuardChange>> {
    let mut changes: BTreeMap<String, Vec<GuardChange>> = BTreeMap::new();
    for ((guard, q, turn), details) in repaired {
        let raw_score = r.turns.get(&(*q, *turn)).copied();
        let guarded_score = g.turns.get(&(*q, *turn)).copied();
        changes.entry(guard.clone()).or_default().push(GuardChange {
            question_id: *q,
            turn: *turn,
            detail: details.join("; "),
            raw: raw_score,
            guarded: guarded_score,
            delta: raw_score.zip(guarded_score).map(|(a, b)| b - a),
        });
    }
    changes
}

/// Every raw-vs-guarded comparison found in `answers` (see the module docs),
/// ordered by base, guarded model and judge.
pub fn compare_guarded(
    judgments: &[JudgmentRow],
    answers: &[AnswerRow],
    questions: &[Question],
) -> Vec<GuardComparison> {
    let cats = categories_of(questions);
    let mut by_model: BTreeMap<&str, Vec<&AnswerRow>> = BTreeMap::new();
    for a in answers {
        by_model.entry(a.model_id.as_str()).or_default().push(a);
    }
    let mut out = Vec::new();
    for (base, (raws, guardeds)) in sides_by_base(&by_model) {
        let Some(raw) = raws
            .iter()
            .find(|m| **m == base)
            .or_else(|| raws.first())
            .copied()
        else {
            continue;
        };
        for (guarded, setting) in guardeds {
            let rows = by_model.get(guarded).map(Vec::as_slice).unwrap_or(&[]);
            let repaired = repairs(rows);
            for judge in judges_of(judgments, raw, guarded) {
                let r = scores(judgments, raw, judge, &cats);
                let g = scores(judgments, guarded, judge, &cats);
                out.push(GuardComparison {
                    base: base.to_string(),
                    raw_model: raw.to_string(),
                    guarded_model: guarded.to_string(),
                    guard_setting: setting.clone(),
                    judge: judge.map(str::to_string),
                    average: CategoryPair {
                        raw: r.average,
                        guarded: g.average,
                    },
                    categories: category_pairs(&r, &g),
                    changes: guard_changes(&repaired, &r, &g),
                });
            }
        }
    }
    out
}
