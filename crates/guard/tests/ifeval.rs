//! The constraint verifier on 200 IFEval rows (with GPT-4's responses and
//! the official checker's verdicts): agreement with the official strict and
//! loose verdicts, and recovery of the instructions from the prompts alone.
//! Run with `-- --nocapture` to see the per-type disagreements and misses.

use hearth_guard::verify::{check, check_loose, extract, Instruction};
use serde_json::Value;
use std::collections::BTreeMap;

struct Row {
    key: i64,
    prompt: String,
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
                prompt: v["prompt"].as_str().unwrap().to_string(),
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

/// Whether two kwargs say the same: numbers equal, strings equal after
/// trimming and ignoring case, lists equal as such sets of strings.
fn same_args(a: &Value, b: &Value) -> bool {
    fn norm(v: &Value) -> Value {
        match v {
            Value::String(s) => Value::String(s.trim().to_lowercase()),
            Value::Array(items) => {
                let mut set: Vec<String> = items
                    .iter()
                    .filter_map(|i| i.as_str().map(|s| s.trim().to_lowercase()))
                    .collect();
                set.sort();
                set.dedup();
                Value::from(set)
            }
            Value::Number(n) => Value::from(n.as_f64().unwrap_or(f64::NAN)),
            other => other.clone(),
        }
    }
    let empty = serde_json::Map::new();
    let a = a.as_object().unwrap_or(&empty);
    let b = b.as_object().unwrap_or(&empty);
    let keys: std::collections::BTreeSet<&String> = a
        .iter()
        .chain(b.iter())
        .filter(|(_, v)| !v.is_null())
        .map(|(k, _)| k)
        .collect();
    let same = keys
        .into_iter()
        .all(|k| norm(a.get(k).unwrap_or(&Value::Null)) == norm(b.get(k).unwrap_or(&Value::Null)));
    same
}

#[test]
fn extraction_recovers_the_instructions_from_the_prompts() {
    let mut gold_total = 0;
    let mut recovered = 0;
    let mut extracted_total = 0;
    let mut spurious = 0;
    let mut extras = 0;
    let mut misses: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut spurious_by_type: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for row in rows() {
        let extracted = extract(&row.prompt);
        let mut pairs: Vec<(String, Value)> = extracted
            .iter()
            .map(|i| (i.id().to_string(), i.kwargs()))
            .collect();
        extracted_total += pairs
            .iter()
            .filter(|(id, _)| !id.starts_with("hearth:"))
            .count();
        extras += pairs
            .iter()
            .filter(|(id, _)| id.starts_with("hearth:"))
            .count();
        for (id, kwargs) in row.ids.iter().zip(&row.kwargs) {
            gold_total += 1;
            let hit = pairs
                .iter()
                .position(|(eid, ek)| eid == id && same_args(ek, kwargs));
            match hit {
                Some(p) => {
                    recovered += 1;
                    pairs.remove(p);
                }
                None => {
                    let near: Vec<String> = pairs
                        .iter()
                        .filter(|(eid, _)| eid == id)
                        .map(|(_, k)| k.to_string())
                        .collect();
                    misses.entry(id.clone()).or_default().push(format!(
                        "key {} gold {} extracted {:?}",
                        row.key, kwargs, near
                    ));
                }
            }
        }
        for (id, kwargs) in pairs {
            if id.starts_with("hearth:") {
                continue;
            }
            spurious += 1;
            spurious_by_type
                .entry(id)
                .or_default()
                .push(format!("key {} {}", row.key, kwargs));
        }
    }
    println!(
        "extraction: recovered {recovered}/{gold_total} ({:.1}%), spurious {spurious}/{extracted_total} ({:.1}%), hearth extras {extras}",
        100.0 * recovered as f64 / gold_total as f64,
        100.0 * spurious as f64 / extracted_total.max(1) as f64
    );
    for (id, list) in &misses {
        println!("  missed {id}: {}", list.len());
        for m in list {
            println!("    {m}");
        }
    }
    for (id, list) in &spurious_by_type {
        println!("  spurious {id}: {}", list.len());
        for m in list {
            println!("    {m}");
        }
    }
    assert!(
        recovered * 100 >= gold_total * 90,
        "{recovered}/{gold_total}"
    );
    assert!(
        spurious * 100 <= extracted_total * 5,
        "{spurious}/{extracted_total}"
    );
}
