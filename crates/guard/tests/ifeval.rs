//! The constraint verifier on 200 IFEval rows (with GPT-4's responses and
//! the official checker's verdicts): agreement with the official strict and
//! loose verdicts, and recovery of the instructions from the prompts alone.
//! Run with `-- --nocapture` to see the per-type disagreements and misses.

use hearth_guard::verify::{check, check_loose, Instruction};
use serde_json::Value;
use std::collections::BTreeMap;

struct Row {
    key: i64,
    ids: Vec<String>,
    kwargs: Vec<Value>,
    response: String,
    strict: Vec<bool>,
    loose: Vec<bool>,
}

fn rows() -> Vec<Row> {
    let text = include_str!("data/ifeval_visible.jsonl");
    text.lines()
        .map(|line| {
            let v: Value = serde_json::from_str(line).unwrap();
            let strings = |k: &str| -> Vec<String> {
                v[k].as_array()
                    .unwrap()
                    .iter()
                    .map(|s| s.as_str().unwrap().to_string())
                    .collect()
            };
            let bools = |k: &str| -> Vec<bool> {
                v[k].as_array()
                    .unwrap()
                    .iter()
                    .map(|b| b.as_bool().unwrap())
                    .collect()
            };
            Row {
                key: v["key"].as_i64().unwrap(),
                ids: strings("instruction_id_list"),
                kwargs: v["kwargs"].as_array().unwrap().clone(),
                response: v["response"].as_str().unwrap().to_string(),
                strict: bools("follow_instruction_list_strict"),
                loose: bools("follow_instruction_list_loose"),
            }
        })
        .collect()
}

/// Agreement of one mode with the official verdicts: (agreeing, total,
/// disagreements by type).
fn agreement(
    checker: fn(&Instruction, &str) -> bool,
    official: fn(&Row) -> &Vec<bool>,
) -> (usize, usize, BTreeMap<String, Vec<String>>) {
    let mut agree = 0;
    let mut total = 0;
    let mut disagreements: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for row in rows() {
        for (i, id) in row.ids.iter().enumerate() {
            let instruction = Instruction::from_id_kwargs(id, &row.kwargs[i]).unwrap();
            let ours = checker(&instruction, &row.response);
            total += 1;
            if ours == official(&row)[i] {
                agree += 1;
            } else {
                let detail = hearth_guard::verify::verdict(&instruction, &row.response).detail;
                disagreements
                    .entry(id.clone())
                    .or_default()
                    .push(format!("key {} ours={ours}: {detail}", row.key));
            }
        }
    }
    (agree, total, disagreements)
}

fn report(
    mode: &str,
    (agree, total, disagreements): &(usize, usize, BTreeMap<String, Vec<String>>),
) {
    println!(
        "{mode}: {agree}/{total} agree ({:.2}%)",
        100.0 * *agree as f64 / *total as f64
    );
    for (id, list) in disagreements {
        println!("  {id}: {} disagreement(s)", list.len());
        for d in list {
            println!("    {d}");
        }
    }
}

#[test]
fn strict_verdicts_agree_with_the_official_checker() {
    let result = agreement(check, |r| &r.strict);
    report("strict", &result);
    let (agree, total, _) = result;
    assert_eq!(total, 305);
    assert!(agree * 100 >= total * 99, "{agree}/{total}");
}

#[test]
fn loose_verdicts_agree_with_the_official_checker() {
    let result = agreement(check_loose, |r| &r.loose);
    report("loose", &result);
    let (agree, total, _) = result;
    assert!(agree * 100 >= total * 99, "{agree}/{total}");
}
