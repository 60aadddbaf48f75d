//! The report page: one self-contained HTML file (inline CSS and SVG, no
//! script, no external assets) so it can be mailed, archived or opened from
//! disk as it is. Everything that comes from data (model names, questions,
//! answers, judge text, guard details) goes through [`escape_html`]: answers
//! routinely contain markup, and a page that ran it would be both broken and
//! unsafe to open.

use super::guarded::{compare_guarded, CategoryPair, GuardComparison};
use super::{categories_of, judge_of, kept, model_keys, Summary, CATEGORIES};
use crate::fastchat::{AnswerRow, JudgmentRow, Question};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

/// `write!` into a `String`, which cannot fail.
macro_rules! w {
    ($dst:expr, $($arg:tt)*) => {
        let _ = write!($dst, $($arg)*);
    };
}

/// Colours of the models, in summary order (then repeating).
const PALETTE: [&str; 10] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
];

const CSS: &str = "
body{font:15px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;max-width:1100px;padding:1em 1.5em;color:#222;background:#fff}
h1{margin-bottom:.2em}h2{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;margin:.6em 0}th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
.sw{display:inline-block;width:.8em;height:.8em;margin-right:.4em;border-radius:2px;vertical-align:baseline}
.meta,.note{color:#666;font-weight:400}.empty{padding:1em;background:#fff4e5;border:1px solid #f0c36d}
.up{color:#137333}.down{color:#b3261e}
pre{white-space:pre-wrap;word-wrap:break-word;background:#f7f7f7;padding:.6em;border-radius:4px;margin:.3em 0}
details{margin:.3em 0}summary{cursor:pointer}
.q>summary{font-weight:600}.model{margin-left:1em;border-left:3px solid #ddd;padding-left:.8em}
.turn{margin:.6em 0}.judgment{border-left:3px solid #9cc;padding-left:.6em;margin:.4em 0}
.score{font-weight:700}.trace{font-size:90%;color:#555}
svg text{font:12px system-ui,sans-serif;fill:#333}
";

/// `s` with `& < > " '` replaced by entities, safe in text and in quoted
/// attribute values.
pub fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A mean as `show_result.py` prints it (6 decimals), or `–` when absent.
fn f6(x: Option<f64>) -> String {
    match x {
        Some(x) if x.is_finite() => format!("{x:.6}"),
        Some(_) => "n/a".into(),
        None => "–".into(),
    }
}

/// A score as judges give them (`8`, `8.5`).
fn score_text(x: f64) -> String {
    if x.is_finite() && x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{x:.0}")
    } else {
        format!("{x}")
    }
}

/// A signed difference with a colour class.
fn delta_cell(d: Option<f64>) -> String {
    match d {
        Some(d) if d.is_finite() => {
            let class = if d > 0.0 {
                "up"
            } else if d < 0.0 {
                "down"
            } else {
                ""
            };
            format!("<td class=\"num {class}\">{d:+.2}</td>")
        }
        _ => "<td class=\"num\">–</td>".into(),
    }
}

/// A score as a chart length: 0 to 10, and 0 for anything not finite, so
/// that no coordinate is ever NaN.
fn unit(x: f64) -> f64 {
    if x.is_finite() {
        x.clamp(0.0, 10.0) / 10.0
    } else {
        0.0
    }
}

/// The categories to chart: MT-Bench's eight first, then any others found.
fn chart_categories(summary: &Summary) -> Vec<String> {
    let mut cats: Vec<String> = CATEGORIES.iter().map(|c| c.to_string()).collect();
    let extra: BTreeSet<&String> = summary
        .models
        .values()
        .flat_map(|m| m.categories.keys())
        .filter(|c| !CATEGORIES.contains(&c.as_str()))
        .collect();
    cats.extend(extra.into_iter().cloned());
    cats
}

fn legend(out: &mut String, models: &[(&String, &str)]) {
    out.push_str("<p>");
    for (name, color) in models {
        w!(
            out,
            "<span class=\"sw\" style=\"background:{color}\"></span>{} &nbsp; ",
            escape_html(name)
        );
    }
    out.push_str("</p>\n");
}

/// Grouped vertical bars: one group per label, one bar per series.
fn bar_chart(
    out: &mut String,
    title: &str,
    groups: &[String],
    series: &[(&String, &str)],
    value: impl Fn(usize, usize) -> Option<f64>,
) {
    let n = series.len().max(1) as f64;
    let bar = (90.0 / n).clamp(4.0, 18.0);
    // Wide enough for the longest label (about 7 px a character at 12 px).
    let longest = groups.iter().map(|g| g.chars().count()).max().unwrap_or(0);
    let group_w = (bar * n + 24.0).max(longest as f64 * 7.0 + 12.0);
    let (left, top, h) = (40.0, 10.0, 220.0);
    let width = left + group_w * groups.len() as f64 + 10.0;
    let height = top + h + 40.0;
    w!(
        out,
        "<svg class=\"bars\" role=\"img\" aria-label=\"{}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" viewBox=\"0 0 {width:.0} {height:.0}\">\n",
        escape_html(title)
    );
    for tick in 0..=5 {
        let v = f64::from(tick) * 2.0;
        let y = top + h - h * v / 10.0;
        w!(
            out,
            "<line x1=\"{left}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#e3e3e3\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{v:.0}</text>\n",
            width - 10.0,
            left - 6.0,
            y + 4.0
        );
    }
    for (g, label) in groups.iter().enumerate() {
        let x0 = left + group_w * g as f64 + (group_w - bar * n) / 2.0;
        for (s, (name, color)) in series.iter().enumerate() {
            let Some(v) = value(g, s) else { continue };
            let bh = h * unit(v);
            let x = x0 + bar * s as f64;
            w!(
                out,
                "<rect class=\"bar\" x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{bh:.1}\" fill=\"{color}\"><title>{} · {}: {}</title></rect>\n",
                top + h - bh,
                bar - 1.0,
                escape_html(name),
                escape_html(label),
                f6(Some(v))
            );
        }
        w!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n",
            x0 + bar * n / 2.0,
            top + h + 18.0,
            escape_html(label)
        );
    }
    out.push_str("</svg>\n");
}

/// A radar chart of MT-Bench's eight categories, one polygon per model.
fn radar_chart(out: &mut String, summary: &Summary, models: &[(&String, &str)]) {
    let (cx, cy, r) = (230.0, 210.0, 150.0);
    let k = CATEGORIES.len() as f64;
    let point = |i: usize, frac: f64| {
        // Start at the top and go clockwise, as FastChat's notebook does.
        let a = std::f64::consts::TAU * i as f64 / k - std::f64::consts::FRAC_PI_2;
        (cx + r * frac * a.cos(), cy + r * frac * a.sin())
    };
    out.push_str("<svg class=\"radar\" role=\"img\" aria-label=\"categories radar\" xmlns=\"http://www.w3.org/2000/svg\" width=\"460\" height=\"420\" viewBox=\"0 0 460 420\">\n");
    for ring in 1..=5 {
        let frac = f64::from(ring) / 5.0;
        let pts: Vec<String> = (0..CATEGORIES.len())
            .map(|i| {
                let (x, y) = point(i, frac);
                format!("{x:.1},{y:.1}")
            })
            .collect();
        w!(
            out,
            "<polygon points=\"{}\" fill=\"none\" stroke=\"#ddd\"/>\n",
            pts.join(" ")
        );
    }
    for (i, cat) in CATEGORIES.iter().enumerate() {
        let (x, y) = point(i, 1.0);
        let (lx, ly) = point(i, 1.14);
        w!(
            out,
            "<line x1=\"{cx}\" y1=\"{cy}\" x2=\"{x:.1}\" y2=\"{y:.1}\" stroke=\"#ccc\"/><text x=\"{lx:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{cat}</text>\n",
            ly + 4.0
        );
    }
    for (name, color) in models {
        let Some(m) = summary.models.get(*name) else {
            continue;
        };
        let pts: Vec<String> = CATEGORIES
            .iter()
            .enumerate()
            .map(|(i, c)| {
                // A category the model was not judged on sits at the centre.
                let v = m.categories.get(*c).copied().map(unit).unwrap_or(0.0);
                let (x, y) = point(i, v);
                format!("{x:.1},{y:.1}")
            })
            .collect();
        w!(
            out,
            "<polygon class=\"model\" points=\"{}\" fill=\"{color}\" fill-opacity=\"0.12\" stroke=\"{color}\" stroke-width=\"2\"><title>{}</title></polygon>\n",
            pts.join(" "),
            escape_html(name)
        );
    }
    out.push_str("</svg>\n");
}

/// The judge of each model key in the summary (a model graded by several
/// judges already has one key per judge, `NAME (JUDGE)`): scores from
/// different judges are not on one scale, so the table names them.
fn judges_by_key(judgments: &[JudgmentRow]) -> BTreeMap<String, Vec<&str>> {
    let mut out: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for (row, key) in judgments.iter().zip(model_keys(judgments)) {
        let judges = out.entry(key).or_default();
        let judge = judge_of(row);
        if !judges.contains(&judge) {
            judges.push(judge);
        }
    }
    out
}

fn section_overview(
    out: &mut String,
    summary: &Summary,
    judgments: &[JudgmentRow],
    models: &[(&String, &str)],
) {
    out.push_str("<h2 id=\"averages\">Averages</h2>\n<p class=\"note\">FastChat <code>show_result.py</code> (single mode): rows scored −1 dropped; the average is the mean of all kept rows, not of the two turn means. Scores from different judges are not comparable.</p>\n<table><tr><th>model</th><th class=\"num\">average</th><th class=\"num\">turn 1</th><th class=\"num\">turn 2</th><th class=\"num\">rows</th><th>judge</th></tr>\n");
    let mut order: Vec<&(&String, &str)> = models.iter().collect();
    // Highest first, as show_result.py sorts.
    order.sort_by(|a, b| {
        let va = summary.models.get(a.0).map(|m| m.average).unwrap_or(0.0);
        let vb = summary.models.get(b.0).map(|m| m.average).unwrap_or(0.0);
        vb.total_cmp(&va)
    });
    let judges = judges_by_key(judgments);
    for (name, color) in order {
        let Some(m) = summary.models.get(*name) else {
            continue;
        };
        w!(
            out,
            "<tr><td><span class=\"sw\" style=\"background:{color}\"></span>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>\n",
            escape_html(name),
            f6(Some(m.average)),
            f6(m.turn1),
            f6(m.turn2),
            m.n,
            escape_html(&judges.get(*name).map_or(String::new(), |j| j.join(", ")))
        );
    }
    out.push_str("</table>\n");
}

fn section_categories(out: &mut String, summary: &Summary, models: &[(&String, &str)]) {
    let cats = chart_categories(summary);
    out.push_str("<h2 id=\"categories\">Categories</h2>\n<p class=\"note\">Mean score per category over both turns.</p>\n");
    legend(out, models);
    bar_chart(out, "mean score per category", &cats, models, |g, s| {
        summary
            .models
            .get(models[s].0)
            .and_then(|m| m.categories.get(&cats[g]).copied())
    });
    radar_chart(out, summary, models);
    out.push_str("<table><tr><th>model</th>");
    for c in &cats {
        w!(out, "<th class=\"num\">{}</th>", escape_html(c));
    }
    out.push_str("</tr>\n");
    for (name, _) in models {
        let Some(m) = summary.models.get(*name) else {
            continue;
        };
        w!(out, "<tr><td>{}</td>", escape_html(name));
        for c in &cats {
            w!(
                out,
                "<td class=\"num\">{}</td>",
                f6(m.categories.get(c).copied())
            );
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
}

fn section_turns(out: &mut String, summary: &Summary, models: &[(&String, &str)]) {
    out.push_str("<h2 id=\"turns\">Turn 1 vs turn 2</h2>\n");
    let names: Vec<String> = models.iter().map(|(n, _)| (*n).clone()).collect();
    let (t1, t2) = ("turn 1".to_string(), "turn 2".to_string());
    let series = [(&t1, "#4e79a7"), (&t2, "#f28e2b")];
    legend(out, &series);
    bar_chart(out, "turn 1 vs turn 2", &names, &series, |g, s| {
        let m = summary.models.get(&names[g])?;
        if s == 0 {
            m.turn1
        } else {
            m.turn2
        }
    });
}

fn pair_row(out: &mut String, label: &str, p: &CategoryPair) {
    w!(
        out,
        "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>{}</tr>\n",
        escape_html(label),
        f6(p.raw),
        f6(p.guarded),
        delta_cell(p.raw.zip(p.guarded).map(|(r, g)| g - r))
    );
}

fn section_guarded(out: &mut String, comparisons: &[GuardComparison], cats: &BTreeMap<u32, &str>) {
    out.push_str("<h2 id=\"guarded\">Raw vs guarded</h2>\n");
    if comparisons.is_empty() {
        out.push_str("<p class=\"note\">No raw/guarded pair among the answers: a pair is two models with the same base name (the id up to its first <code>+</code>), one answered with <code>hearth.guard</code> absent or <code>none</code>, one with guards.</p>\n");
        return;
    }
    for c in comparisons {
        w!(
            out,
            "<h3>{} vs {} <span class=\"meta\">(guard: {}; judge: {})</span></h3>\n",
            escape_html(&c.raw_model),
            escape_html(&c.guarded_model),
            escape_html(&c.guard_setting),
            escape_html(c.judge.as_deref().unwrap_or("no judgments"))
        );
        out.push_str("<table><tr><th>category</th><th class=\"num\">raw</th><th class=\"num\">guarded</th><th class=\"num\">Δ</th></tr>\n");
        for (cat, p) in &c.categories {
            pair_row(out, cat, p);
        }
        pair_row(out, "average", &c.average);
        out.push_str("</table>\n");
        if c.changes.is_empty() {
            out.push_str("<p class=\"note\">No guard repaired any answer.</p>\n");
        }
        for (guard, changes) in &c.changes {
            let deltas: Vec<f64> = changes.iter().filter_map(|x| x.delta).collect();
            let mean = super::pandas_mean(deltas.iter().copied());
            let up = deltas.iter().filter(|d| **d > 0.0).count();
            let down = deltas.iter().filter(|d| **d < 0.0).count();
            w!(
                out,
                "<h4>{}: {} turn(s) repaired; on the {} scored, mean Δ {} ({} up, {} down, {} same)</h4>\n",
                escape_html(guard),
                changes.len(),
                deltas.len(),
                mean.map(|m| format!("{m:+.3}")).unwrap_or_else(|| "–".into()),
                up,
                down,
                deltas.len() - up - down
            );
            out.push_str("<table><tr><th>question</th><th>category</th><th>turn</th><th class=\"num\">raw</th><th class=\"num\">guarded</th><th class=\"num\">Δ</th><th>what it changed</th></tr>\n");
            for x in changes {
                w!(
                    out,
                    "<tr><td><a href=\"#q{q}\">{q}</a></td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>{}<td>{}</td></tr>\n",
                    escape_html(cats.get(&x.question_id).copied().unwrap_or("?")),
                    x.turn,
                    x.raw.map(score_text).unwrap_or_else(|| "–".into()),
                    x.guarded.map(score_text).unwrap_or_else(|| "–".into()),
                    delta_cell(x.delta),
                    escape_html(&x.detail),
                    q = x.question_id
                );
            }
            out.push_str("</table>\n");
        }
    }
}

/// The per-turn guard trace of an answer, one line per step.
fn trace_lines(answer: &AnswerRow, turn: usize) -> Vec<String> {
    let steps = answer
        .extra
        .get("hearth")
        .and_then(|h| h.get("turns"))
        .and_then(Value::as_array)
        .and_then(|t| t.get(turn))
        .and_then(|t| t.get("guard"))
        .and_then(|g| g.get("steps"))
        .and_then(Value::as_array);
    let Some(steps) = steps else {
        return Vec::new();
    };
    let text = |s: &Value, k: &str| s.get(k).and_then(Value::as_str).unwrap_or("?").to_string();
    steps
        .iter()
        .map(|s| {
            format!(
                "{} {}: {}",
                text(s, "guard"),
                text(s, "outcome"),
                s.get("detail").and_then(Value::as_str).unwrap_or("")
            )
        })
        .collect()
}

/// The text of an answer's turn `i` (0-based), when it has one.
fn text(a: &AnswerRow, i: usize) -> Option<&str> {
    a.choices
        .first()
        .and_then(|c| c.turns.get(i))
        .map(String::as_str)
}

fn judgments_block(out: &mut String, rows: &[&JudgmentRow]) {
    if rows.is_empty() {
        out.push_str("<p class=\"note\">Not judged.</p>\n");
    }
    for j in rows {
        let score = if kept(j) {
            score_text(j.score)
        } else {
            "−1 (no rating; dropped)".into()
        };
        w!(
            out,
            "<div class=\"judgment\"><div>judge <b>{}</b> ({}) · score <span class=\"score\">{}</span></div><pre>{}</pre></div>\n",
            escape_html(judge_of(j)),
            escape_html(j.judge.get(1).map(String::as_str).unwrap_or("")),
            escape_html(&score),
            escape_html(&j.judgment)
        );
    }
}

/// Per question, each model's answer row (the first one given) and the
/// judgments of its turns.
type PerModel<'a> = BTreeMap<&'a str, (Option<&'a AnswerRow>, Vec<&'a JudgmentRow>)>;

/// Answers and judgments grouped question → model.
fn group_by_question<'a>(
    judgments: &'a [JudgmentRow],
    answers: &'a [AnswerRow],
) -> BTreeMap<u32, PerModel<'a>> {
    let mut by_q: BTreeMap<u32, PerModel> = BTreeMap::new();
    for a in answers {
        let e = by_q.entry(a.question_id).or_default();
        e.entry(a.model_id.as_str()).or_default().0.get_or_insert(a);
    }
    for j in judgments {
        let e = by_q.entry(j.question_id).or_default();
        e.entry(j.model.as_str()).or_default().1.push(j);
    }
    by_q
}

/// Each model's scores on a question, as the question's summary line shows
/// them: `model: t1 8, t2 7 · other: –`.
fn scores_line(models: &PerModel) -> String {
    let scores: Vec<String> = models
        .iter()
        .map(|(m, (_, js))| {
            let s: Vec<String> = js
                .iter()
                .map(|j| format!("t{} {}", j.turn, score_text(j.score)))
                .collect();
            format!(
                "{}: {}",
                m,
                if s.is_empty() {
                    "–".into()
                } else {
                    s.join(", ")
                }
            )
        })
        .collect();
    scores.join(" · ")
}

fn section_answers(
    out: &mut String,
    judgments: &[JudgmentRow],
    answers: &[AnswerRow],
    questions: &[Question],
) {
    out.push_str("<h2 id=\"answers\">Answers and judgments</h2>\n");
    let by_q = group_by_question(judgments, answers);
    if by_q.is_empty() {
        out.push_str("<p class=\"note\">No answers or judgments given.</p>\n");
        return;
    }
    let qs: BTreeMap<u32, &Question> = questions.iter().map(|q| (q.question_id, q)).collect();
    // The question file's order, then ids it does not have.
    let mut order: Vec<u32> = questions
        .iter()
        .map(|q| q.question_id)
        .filter(|id| by_q.contains_key(id))
        .collect();
    order.extend(by_q.keys().filter(|id| !qs.contains_key(id)));
    for id in order {
        let Some(models) = by_q.get(&id) else {
            continue;
        };
        question_block(out, id, qs.get(&id).copied(), models);
    }
}

/// One question's collapsible block: its turns, then every model's answers
/// and judgments.
fn question_block(out: &mut String, id: u32, q: Option<&Question>, models: &PerModel) {
    w!(
        out,
        "<details class=\"q\" id=\"q{id}\"><summary>Question {id} · {} <span class=\"meta\">{}</span></summary>\n",
        escape_html(q.map(|q| q.category.as_str()).unwrap_or("not in the question list")),
        escape_html(&scores_line(models))
    );
    if let Some(q) = q {
        for (i, t) in q.turns.iter().enumerate() {
            w!(
                out,
                "<div><b>Turn {}</b><pre>{}</pre></div>\n",
                i + 1,
                escape_html(t)
            );
        }
    }
    for (model, (answer, js)) in models {
        w!(
            out,
            "<details class=\"model\" open><summary><b>{}</b></summary>\n",
            escape_html(model)
        );
        // The turns the answer has, and any that only a judgment names.
        let turns: BTreeSet<u32> = answer
            .map(|a| {
                let n = a.choices.first().map(|c| c.turns.len()).unwrap_or(0);
                (1..=u32::try_from(n).unwrap_or(u32::MAX)).collect::<Vec<u32>>()
            })
            .unwrap_or_default()
            .into_iter()
            .chain(js.iter().map(|j| j.turn))
            .collect();
        for turn in turns {
            turn_block(out, q, *answer, js, turn);
        }
        out.push_str("</details>\n");
    }
    out.push_str("</details>\n");
}

/// One turn (1-based) of one model's answer: the earlier context, the
/// user's message, the answer, its guard trace and the turn's judgments.
fn turn_block(
    out: &mut String,
    q: Option<&Question>,
    answer: Option<&AnswerRow>,
    js: &[&JudgmentRow],
    turn: u32,
) {
    let idx = usize::try_from(turn.saturating_sub(1)).unwrap_or(usize::MAX);
    w!(out, "<div class=\"turn\"><h4>Turn {turn}</h4>\n");
    if turn >= 2 {
        // The judge saw the earlier turns; so should the reader.
        out.push_str("<details><summary>turn-1 context</summary>");
        let q1 = q.and_then(|q| q.turns.first()).map(String::as_str);
        let a1 = answer.and_then(|a| text(a, 0));
        w!(
            out,
            "<div>user</div><pre>{}</pre><div>assistant</div><pre>{}</pre></details>\n",
            escape_html(q1.unwrap_or("–")),
            escape_html(a1.unwrap_or("–"))
        );
    }
    if let Some(qt) = q.and_then(|q| q.turns.get(idx)) {
        w!(out, "<div>user</div><pre>{}</pre>\n", escape_html(qt));
    }
    match answer.and_then(|a| text(a, idx)) {
        Some(t) => {
            w!(out, "<div>assistant</div><pre>{}</pre>\n", escape_html(t));
        }
        None => out.push_str("<p class=\"note\">No answer row.</p>\n"),
    }
    if let Some(a) = answer {
        let lines = trace_lines(a, idx);
        if !lines.is_empty() {
            w!(
                out,
                "<div class=\"trace\">guard trace: {}</div>\n",
                escape_html(&lines.join(" | "))
            );
        }
    }
    let mine: Vec<&JudgmentRow> = js.iter().filter(|j| j.turn == turn).copied().collect();
    judgments_block(out, &mine);
    out.push_str("</div>\n");
}

/// The whole report page: averages as `show_result.py` prints them, a bar
/// chart and a radar chart of the categories, turn 1 vs turn 2, raw vs
/// guarded (see [`compare_guarded`]), and every answer beside its judgments,
/// grouped by question. Self-contained; every data string is escaped.
pub fn render_html(
    summary: &Summary,
    judgments: &[JudgmentRow],
    answers: &[AnswerRow],
    questions: &[Question],
) -> String {
    let models: Vec<(&String, &str)> = summary
        .models
        .keys()
        .enumerate()
        .map(|(i, k)| (k, PALETTE[i % PALETTE.len()]))
        .collect();
    let dropped = judgments.iter().filter(|j| !kept(j)).count();
    let mut out = String::new();
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width,initial-scale=1\"><title>MT-Bench report</title><style>");
    out.push_str(CSS);
    out.push_str("</style></head><body>\n<h1>MT-Bench report</h1>\n");
    w!(
        out,
        "<p class=\"meta\">{} judgment row(s), {} dropped (score −1); {} model(s); {} answer row(s). <a href=\"#averages\">averages</a> · <a href=\"#categories\">categories</a> · <a href=\"#turns\">turns</a> · <a href=\"#guarded\">raw vs guarded</a> · <a href=\"#answers\">answers</a></p>\n",
        judgments.len(),
        dropped,
        models.len(),
        answers.len()
    );
    if summary.models.is_empty() {
        out.push_str(
            "<p class=\"empty\">No judgments with a score: there is nothing to average yet.</p>\n",
        );
    } else {
        section_overview(&mut out, summary, judgments, &models);
        section_categories(&mut out, summary, &models);
        section_turns(&mut out, summary, &models);
    }
    let cats = categories_of(questions);
    section_guarded(
        &mut out,
        &compare_guarded(judgments, answers, questions),
        &cats,
    );
    section_answers(&mut out, judgments, answers, questions);
    out.push_str("</body></html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_all_five() {
        assert_eq!(
            escape_html("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }

    #[test]
    fn numbers_never_show_nan() {
        assert_eq!(f6(None), "–");
        assert_eq!(f6(Some(f64::NAN)), "n/a");
        assert_eq!(f6(Some(6.39375)), "6.393750");
        assert_eq!(unit(f64::NAN), 0.0);
        assert_eq!(unit(12.0), 1.0);
        assert_eq!(score_text(8.5), "8.5");
        assert_eq!(score_text(8.0), "8");
    }

    #[test]
    fn each_model_names_its_judges() {
        let row = |model: &str, judge: &str, score: f64| JudgmentRow {
            question_id: 81,
            model: model.into(),
            judge: vec![judge.into(), "single-v1".into()],
            user_prompt: String::new(),
            judgment: String::new(),
            score,
            turn: 1,
            tstamp: 0.0,
        };
        let rows = [
            row("a", "gpt-4", 7.0),
            row("a", "gpt-4", 6.0),
            row("b", "human:ann", 5.0),
            row("b", "gpt-4", 4.0),
            row("c", "<small>", 3.0),
        ];
        let summary = crate::report::summarize(&rows, &[]);
        let html = render_html(&summary, &rows, &[], &[]);
        let line = |model: &str| {
            html.lines()
                .find(|l| l.contains(&format!("</span>{model}</td>")))
                .unwrap_or_else(|| panic!("no row for {model} in {html}"))
                .to_string()
        };
        assert!(line("a").ends_with("<td>gpt-4</td></tr>"), "{}", line("a"));
        // Two judges of one model: a row each, each naming its judge.
        assert!(line("b (human:ann)").ends_with("<td>human:ann</td></tr>"));
        assert!(line("b (gpt-4)").ends_with("<td>gpt-4</td></tr>"));
        assert!(line("c").ends_with("<td>&lt;small&gt;</td></tr>"));
    }

    #[test]
    fn an_empty_report_says_so() {
        let html = render_html(&Summary::default(), &[], &[], &[]);
        assert!(html.contains("nothing to average"));
        assert!(html.contains("No answers or judgments"));
    }
}
