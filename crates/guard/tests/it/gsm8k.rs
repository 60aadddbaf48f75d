//! The calculator on every `<<expression=result>>` annotation of 300 GSM8K
//! test problems: each one is right, and every planted error is caught.

use hearth_guard::calc::{check_claim, eval, Claim};

fn annotations() -> Vec<(u64, String, String)> {
    let text = include_str!("../data/gsm8k_annotations.jsonl");
    let mut out = Vec::new();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        for a in v["annotations"].as_array().unwrap() {
            let a = a.as_str().unwrap();
            let (expr, result) = a.rsplit_once('=').unwrap();
            out.push((
                v["index"].as_u64().unwrap(),
                expr.to_string(),
                result.to_string(),
            ));
        }
    }
    out
}

#[test]
fn every_annotation_evaluates_to_its_result() {
    let all = annotations();
    assert!(all.len() > 900, "{} annotations", all.len());
    let mut wrong = Vec::new();
    for (index, expr, result) in &all {
        match check_claim(expr, result) {
            Ok(Claim::Right) => {}
            other => wrong.push(format!("#{index} {expr}={result}: {other:?}")),
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {}:\n{}",
        wrong.len(),
        all.len(),
        wrong.join("\n")
    );
}

#[test]
fn every_planted_error_is_caught() {
    let mut missed = Vec::new();
    let mut planted = 0;
    for (index, expr, result) in annotations() {
        let value = eval(&expr).unwrap();
        // Off by one, off by a factor of ten, and the digits of a
        // neighbouring claim: what a model writes when it guesses.
        let v = value.to_f64();
        for bad in [v + 1.0, v * 10.0 + 1.0, v - 0.5, (v * 1.1).round() + 2.0] {
            if (bad - v).abs() < 1e-9 {
                continue;
            }
            let bad = format!("{bad}");
            planted += 1;
            if !matches!(check_claim(&expr, &bad), Ok(Claim::Wrong(_))) {
                missed.push(format!("#{index} {expr}={bad} (truly {result})"));
            }
        }
    }
    assert!(planted > 3000, "{planted} planted");
    assert!(
        missed.is_empty(),
        "missed {} of {planted}:\n{}",
        missed.len(),
        missed.join("\n")
    );
}
