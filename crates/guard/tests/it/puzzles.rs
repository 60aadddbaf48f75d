//! Every puzzle in `tests/data/puzzles/` solved, its asked values and
//! uniqueness checked against `answers.json` (answers worked out by hand;
//! each entry says why).

use hearth_guard::logic::{solve, Limits, Status, Val};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

fn expected_model(value: &Value) -> BTreeMap<String, Val> {
    value
        .as_object()
        .expect("a model is an object")
        .iter()
        .map(|(name, v)| {
            let val = match v {
                Value::Bool(b) => Val::Bool(*b),
                Value::Number(n) => Val::Int(n.as_i64().expect("an integer")),
                other => panic!("{name}: bad value {other}"),
            };
            (name.clone(), val)
        })
        .collect()
}

#[test]
fn every_puzzle_has_its_expected_answer() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/puzzles");
    let answers: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("answers.json")).unwrap()).unwrap();
    let answers = answers.as_object().unwrap();

    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".py"))
        .collect();
    files.sort();
    assert!(files.len() >= 25, "only {} puzzles", files.len());
    assert_eq!(
        files.len(),
        answers.len(),
        "a puzzle without an answer or vice versa"
    );

    let mut failures = Vec::new();
    for file in &files {
        let expected = &answers[file.as_str()];
        assert!(expected["why"].is_string(), "{file}: no explanation");
        let src = std::fs::read_to_string(dir.join(file)).unwrap();
        let started = std::time::Instant::now();
        let solution = match solve(&src, &Limits::default()) {
            Ok(s) => s,
            Err(e) => {
                failures.push(format!("{file}: error {e}"));
                continue;
            }
        };
        let elapsed = started.elapsed();
        let status = match expected["status"].as_str().unwrap() {
            "sat" => Status::Sat,
            "unsat" => Status::Unsat,
            _ => Status::Unknown,
        };
        eprintln!(
            "{file}: {:?} unique={} in {elapsed:?}",
            solution.status, solution.unique
        );
        if solution.status != status {
            failures.push(format!(
                "{file}: status {:?}, expected {status:?}",
                solution.status
            ));
            continue;
        }
        if solution.unique != expected["unique"].as_bool().unwrap() {
            failures.push(format!(
                "{file}: unique {}, expected the opposite",
                solution.unique
            ));
        }
        if let Some(model) = expected.get("model") {
            let want = expected_model(model);
            if solution.model != want {
                failures.push(format!(
                    "{file}: model {:?}, expected {want:?}",
                    solution.model
                ));
            }
        }
        if let Some(options) = expected.get("one_of") {
            let options: Vec<_> = options
                .as_array()
                .unwrap()
                .iter()
                .map(expected_model)
                .collect();
            if !options.contains(&solution.model) {
                failures.push(format!(
                    "{file}: model {:?} is none of {options:?}",
                    solution.model
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The programs in `tests/data/grammar/` are written in [`GRAMMAR`]'s fixed
/// layout (the integrator checks them against the grammar with llguidance);
/// the parser must accept and solve each.
///
/// [`GRAMMAR`]: hearth_guard::logic::GRAMMAR
#[test]
fn grammar_shaped_programs_solve() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/grammar");
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let src = std::fs::read_to_string(&path).unwrap();
        let solution =
            solve(&src, &Limits::default()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(solution.status, Status::Sat, "{}", path.display());
        assert!(solution.unique, "{}", path.display());
        count += 1;
    }
    assert!(count >= 4);
}
