//! The report against FastChat's `show_result.py` on published judgments,
//! and its HTML page on hostile and synthetic input.

use hearth_eval::fastchat::{parse_jsonl, questions, read_jsonl, AnswerRow, JudgmentRow};
use hearth_eval::report::{
    compare_guarded, render_html, summarize, write_report, GuardChange, Summary,
};
use std::path::{Path, PathBuf};

fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(rel)
}

fn published() -> Vec<JudgmentRow> {
    let (rows, torn) =
        read_jsonl::<JudgmentRow>(&data("model_judgment/gpt-4_single.ultrachat.jsonl")).unwrap();
    assert_eq!(torn, None);
    assert_eq!(rows.len(), 480);
    rows
}

/// `show_result.py --mode single` on the file, as printed in
/// `/work/shared/mtbench/published/README.md`: (model, average, turn 1, turn 2).
const SHOW_RESULT: [(&str, &str, &str, &str); 3] = [
    ("ultrachat_baseline", "6.393750", "6.762500", "6.025000"),
    ("ultrachat_cai", "6.512500", "7.100000", "5.925000"),
    ("ultrachat_sai", "6.675000", "7.150000", "6.200000"),
];

/// pandas 3.1.1: the judgments (score ≠ -1) merged with `question.jsonl` on
/// `question_id`, then `groupby(["model", "category"]).mean()`; the value's
/// `repr` is the shortest round-trip form, so it also pins the last bit.
const CATEGORY_MEANS: [(&str, &str, &str, &str); 24] = [
    ("ultrachat_baseline", "coding", "4.300000", "4.3"),
    ("ultrachat_baseline", "extraction", "5.900000", "5.9"),
    ("ultrachat_baseline", "humanities", "8.650000", "8.65"),
    ("ultrachat_baseline", "math", "3.650000", "3.65"),
    ("ultrachat_baseline", "reasoning", "5.300000", "5.3"),
    ("ultrachat_baseline", "roleplay", "7.775000", "7.775"),
    ("ultrachat_baseline", "stem", "7.725000", "7.725"),
    ("ultrachat_baseline", "writing", "7.850000", "7.85"),
    ("ultrachat_cai", "coding", "4.350000", "4.35"),
    ("ultrachat_cai", "extraction", "5.450000", "5.45"),
    ("ultrachat_cai", "humanities", "9.400000", "9.4"),
    ("ultrachat_cai", "math", "3.550000", "3.55"),
    ("ultrachat_cai", "reasoning", "5.800000", "5.8"),
    ("ultrachat_cai", "roleplay", "7.600000", "7.6"),
    ("ultrachat_cai", "stem", "8.000000", "8"),
    ("ultrachat_cai", "writing", "7.950000", "7.95"),
    ("ultrachat_sai", "coding", "4.500000", "4.5"),
    ("ultrachat_sai", "extraction", "6.400000", "6.4"),
    ("ultrachat_sai", "humanities", "9.250000", "9.25"),
    ("ultrachat_sai", "math", "3.050000", "3.05"),
    ("ultrachat_sai", "reasoning", "5.700000", "5.7"),
    ("ultrachat_sai", "roleplay", "8.100000", "8.1"),
    ("ultrachat_sai", "stem", "8.350000", "8.35"),
    ("ultrachat_sai", "writing", "8.050000", "8.05"),
];

fn assert_show_result(s: &Summary) {
    assert_eq!(s.models.len(), 3);
    for (model, avg, t1, t2) in SHOW_RESULT {
        let m = &s.models[model];
        assert_eq!(format!("{:.6}", m.average), avg, "{model} average");
        assert_eq!(format!("{:.6}", m.turn1.unwrap()), t1, "{model} turn 1");
        assert_eq!(format!("{:.6}", m.turn2.unwrap()), t2, "{model} turn 2");
        assert_eq!(m.n, 160);
    }
    for (model, cat, six, repr) in CATEGORY_MEANS {
        let v = s.models[model].categories[cat];
        assert_eq!(format!("{v:.6}"), six, "{model} {cat}");
        assert_eq!(v, repr.parse::<f64>().unwrap(), "{model} {cat}");
    }
    for m in s.models.values() {
        assert_eq!(m.categories.len(), 8);
    }
}

#[test]
fn published_judgments_give_show_result_to_the_last_digit() {
    let s = summarize(&published(), &questions());
    assert_show_result(&s);
}

#[test]
fn rows_scored_minus_one_are_dropped() {
    let mut rows = published();
    let mut bad = rows[0].clone();
    bad.score = -1.0;
    // A -1 row in every model and both turns changes nothing.
    for model in ["ultrachat_baseline", "ultrachat_cai", "ultrachat_sai"] {
        for turn in [1, 2] {
            let mut r = bad.clone();
            r.model = model.into();
            r.turn = turn;
            rows.insert(7, r);
        }
    }
    let s = summarize(&rows, &questions());
    assert_show_result(&s);
    let html = render_html(&s, &rows, &[], &questions());
    assert!(html.contains("486 judgment row(s), 6 dropped"), "header");
}

#[test]
fn a_torn_last_line_is_tolerated() {
    let text = std::fs::read_to_string(data("model_judgment/gpt-4_single.ultrachat.jsonl"))
        .unwrap()
        + "{\"question_id\": 81, \"model\": \"ultrachat_sai\", \"judge\": [\"gpt-4\", \"sin";
    let (rows, torn) = parse_jsonl::<JudgmentRow>(&text, "judgments.jsonl").unwrap();
    assert_eq!(torn, Some(481));
    assert_show_result(&summarize(&rows, &questions()));
}

#[test]
fn a_malformed_middle_line_names_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gpt-4_single.jsonl");
    let text =
        std::fs::read_to_string(data("model_judgment/gpt-4_single.ultrachat.jsonl")).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines[2] = "{\"question_id\": 82, \"model\": oops}";
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let err = read_jsonl::<JudgmentRow>(&path).unwrap_err().to_string();
    assert!(err.contains("gpt-4_single.jsonl"), "{err}");
    assert!(err.contains("line 3"), "{err}");
}

#[test]
fn published_report_has_radar_bars_and_answers() {
    let rows = published();
    let qs = questions();
    let (answers, _) =
        read_jsonl::<AnswerRow>(&data("model_answer/ultrachat_baseline.jsonl")).unwrap();
    let s = summarize(&rows, &qs);
    let html = render_html(&s, &rows, &answers, &qs);
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.contains("<svg class=\"radar\""));
    assert!(html.contains("<svg class=\"bars\""));
    for (model, avg, t1, t2) in SHOW_RESULT {
        // One radar polygon and eight category bars per model.
        assert!(html.contains(&format!("<title>{model}</title></polygon>")));
        let bars = html.matches(&format!("<title>{model} · ")).count();
        assert_eq!(bars, 8, "{model}");
        assert!(html.contains(&format!(
            "<td class=\"num\">{avg}</td><td class=\"num\">{t1}</td><td class=\"num\">{t2}</td>"
        )));
    }
    assert!(html.contains("<title>ultrachat_cai · writing: 7.950000</title>"));
    // Every question is there, with the answer and its judge text.
    assert_eq!(html.matches("<details class=\"q\"").count(), 80);
    assert!(html.contains("Title: A Unforgettable Journey to Hawaii"));
    assert!(html.contains("turn-1 context"));
    // No assets, no script.
    assert!(!html.contains("<script"));
    assert!(!html.contains("src=\"http"));
    assert!(!html.contains("NaN"));
    // The raw-vs-guarded section explains why it is empty.
    assert!(html.contains("No raw/guarded pair"));

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    write_report(&out, &s, &html, |_| {}).unwrap();
    let back: Summary =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(back, s);
    assert_eq!(
        std::fs::read_to_string(out.join("report.html")).unwrap(),
        html
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let m = &json["models"]["ultrachat_baseline"];
    for k in ["average", "turn1", "turn2", "categories", "n"] {
        assert!(m.get(k).is_some(), "{k}");
    }
}

fn judgment(model: &str, q: u32, turn: u32, score: f64, text: &str) -> JudgmentRow {
    JudgmentRow {
        question_id: q,
        model: model.into(),
        judge: vec!["gpt-4".into(), "single-v1".into()],
        user_prompt: String::new(),
        judgment: text.into(),
        score,
        turn,
        tstamp: 0.0,
    }
}

/// An answer row as Hearth writes it: `trace1`/`trace2` are the per-turn
/// guard traces (or null).
fn answer(
    model: &str,
    q: u32,
    turns: [&str; 2],
    guard: &str,
    traces: [serde_json::Value; 2],
) -> AnswerRow {
    let turn = |t: &serde_json::Value| {
        serde_json::json!({"prompt_tokens": 10, "completion_tokens": 20, "prefill_ms": 5,
                           "decode_ms": 50, "guard": t})
    };
    let line = serde_json::json!({
        "question_id": q, "answer_id": format!("{model}-{q}"), "model_id": model,
        "choices": [{"index": 0, "turns": turns}], "tstamp": 0.0,
        "hearth": {"turns": [turn(&traces[0]), turn(&traces[1])], "guard": guard},
    });
    serde_json::from_value(line).unwrap()
}

fn trace(steps: &[(&str, &str, &str)]) -> serde_json::Value {
    let steps: Vec<_> = steps
        .iter()
        .map(|(g, o, d)| serde_json::json!({"guard": g, "outcome": o, "detail": d, "calls": 1}))
        .collect();
    let changed = steps.iter().any(|s| s["outcome"] == "repaired");
    serde_json::json!({"steps": steps, "changed": changed})
}

const XSS: &str = "</div><script>alert(1)</script><img src=x onerror=alert(2)>";

/// `gemma3-270m` raw and `gemma3-270m+guard` with guards on questions 81
/// (writing), 101 (reasoning) and 111 (math).
fn synthetic() -> (Vec<AnswerRow>, Vec<JudgmentRow>) {
    let null = serde_json::Value::Null;
    let raw = "gemma3-270m";
    let g = "gemma3-270m+guard";
    let answers = vec![
        answer(
            raw,
            81,
            [XSS, "second"],
            "none",
            [null.clone(), null.clone()],
        ),
        answer(raw, 101, ["a", "b"], "none", [null.clone(), null.clone()]),
        answer(raw, 111, ["12", "x"], "none", [null.clone(), null.clone()]),
        answer(
            g,
            81,
            ["post", "second"],
            "all",
            [
                trace(&[("verify", "passed", "3 constraints hold")]),
                trace(&[]),
            ],
        ),
        answer(
            g,
            101,
            ["a", "b2"],
            "all",
            [
                null.clone(),
                trace(&[("logic", "repaired", "solver: <unique> & 'sat'")]),
            ],
        ),
        answer(
            g,
            111,
            ["14", "x"],
            "all",
            [
                trace(&[
                    ("calc", "computed", "2*7=14"),
                    ("calc", "repaired", "12 -> 14"),
                ]),
                null,
            ],
        ),
    ];
    let judgments = vec![
        judgment(raw, 81, 1, 6.0, "ok \"quoted\" <b>bold</b>"),
        judgment(raw, 81, 2, 5.0, ""),
        judgment(raw, 101, 1, 4.0, ""),
        judgment(raw, 101, 2, 5.0, ""),
        judgment(raw, 111, 1, 2.0, ""),
        judgment(raw, 111, 2, 3.0, ""),
        judgment(g, 81, 1, 7.0, ""),
        judgment(g, 81, 2, 5.0, ""),
        judgment(g, 101, 1, 4.0, ""),
        judgment(g, 101, 2, 3.0, ""),
        judgment(g, 111, 1, 9.0, ""),
        judgment(g, 111, 2, -1.0, ""),
    ];
    (answers, judgments)
}

#[test]
fn raw_vs_guarded_attributes_repairs_and_score_changes() {
    let (answers, judgments) = synthetic();
    let qs = questions();
    let cmp = compare_guarded(&judgments, &answers, &qs);
    assert_eq!(cmp.len(), 1);
    let c = &cmp[0];
    assert_eq!(c.raw_model, "gemma3-270m");
    assert_eq!(c.guarded_model, "gemma3-270m+guard");
    assert_eq!(c.guard_setting, "all");
    assert_eq!(c.judge.as_deref(), Some("gpt-4"));
    // Only `repaired` steps count: verify passed, calc computed do not.
    assert_eq!(c.changes.keys().collect::<Vec<_>>(), ["calc", "logic"]);
    assert_eq!(
        c.changes["calc"],
        [GuardChange {
            question_id: 111,
            turn: 1,
            detail: "12 -> 14".into(),
            raw: Some(2.0),
            guarded: Some(9.0),
            delta: Some(7.0),
        }]
    );
    assert_eq!(c.changes["logic"][0].question_id, 101);
    assert_eq!(c.changes["logic"][0].turn, 2);
    assert_eq!(c.changes["logic"][0].delta, Some(-2.0));
    // Category means, guarded's 111 turn 2 (-1) dropped.
    assert_eq!(c.categories["math"].raw, Some(2.5));
    assert_eq!(c.categories["math"].guarded, Some(9.0));
    assert_eq!(c.categories["writing"].raw, Some(5.5));
    assert_eq!(c.categories["writing"].guarded, Some(6.0));
    assert_eq!(c.categories["reasoning"].guarded, Some(3.5));
    assert_eq!(c.average.raw, Some(25.0 / 6.0));
    assert_eq!(c.average.guarded, Some(28.0 / 5.0));

    let s = summarize(&judgments, &qs);
    let html = render_html(&s, &judgments, &answers, &qs);
    assert!(html.contains("calc: 1 turn(s) repaired; on the 1 scored, mean Δ +7.000"));
    assert!(html.contains("logic: 1 turn(s) repaired; on the 1 scored, mean Δ -2.000"));
    assert!(html.contains("<td class=\"num up\">+7.00</td>"));
    assert!(html.contains("solver: &lt;unique&gt; &amp; &#39;sat&#39;"));
    assert!(html.contains("<a href=\"#q111\">111</a>"));
}

#[test]
fn everything_from_data_is_escaped() {
    let (mut answers, mut judgments) = synthetic();
    // A hostile model name too, in the charts and tables.
    let evil = "m<script>alert(3)</script>\"'&";
    answers.push(answer(
        evil,
        81,
        [XSS, XSS],
        "none",
        [serde_json::Value::Null, serde_json::Value::Null],
    ));
    judgments.push(judgment(evil, 81, 1, 3.0, XSS));
    let qs = questions();
    let s = summarize(&judgments, &qs);
    let html = render_html(&s, &judgments, &answers, &qs);
    assert!(!html.contains("<script"), "a script tag got through");
    assert!(!html.contains("<img"), "an img tag got through");
    assert!(!html.contains("<b>bold"), "judge markup got through");
    assert!(html.contains(
        "&lt;/div&gt;&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;"
    ));
    assert!(html.contains("m&lt;script&gt;alert(3)&lt;/script&gt;&quot;&#39;&amp;"));
    // The page's own structure is intact: every div and details closes.
    assert_eq!(html.matches("<div").count(), html.matches("</div>").count());
    assert_eq!(
        html.matches("<details").count(),
        html.matches("</details>").count()
    );
    assert_eq!(html.matches("<svg").count(), html.matches("</svg>").count());
}

#[test]
fn empty_and_turn_one_only_inputs() {
    let qs = questions();
    let s = summarize(&[], &qs);
    assert!(s.models.is_empty());
    let html = render_html(&s, &[], &[], &qs);
    assert!(html.contains("nothing to average"));

    let rows = vec![
        judgment("solo", 81, 1, 8.0, ""),
        judgment("solo", 121, 1, 6.5, ""),
    ];
    let s = summarize(&rows, &qs);
    let m = &s.models["solo"];
    assert_eq!((m.turn1, m.turn2, m.n), (Some(7.25), None, 2));
    let json = serde_json::to_string(&s).unwrap();
    assert!(!json.contains("NaN") && !json.contains("null,\"turn1\""));
    let html = render_html(&s, &rows, &[], &qs);
    assert!(!html.contains("NaN"));
    assert!(html.contains(
        "<td class=\"num\">7.250000</td><td class=\"num\">7.250000</td><td class=\"num\">–</td>"
    ));
}
