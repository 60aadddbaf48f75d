//! The MT-Bench runner with a scripted model: FastChat's settings reach the
//! model, the tape is FastChat's format plus ours, an interrupted run loses
//! nothing and resumes, a torn last line is cut and answered again, and
//! guarded runs record their traces.

use engine::{Grammar, ModelCall};
use guard::{GuardSet, ScriptedModel};
use hearth_eval::fastchat::{self, read_jsonl, AnswerRow};
use hearth_eval::run::{run, tape_path, RunConfig, RunError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

type Calls = Arc<Mutex<Vec<ModelCall>>>;

/// A model that answers "A(<first words of the last user turn>)" and
/// records every call.
fn model(calls: &Calls) -> ScriptedModel {
    let calls = Arc::clone(calls);
    ScriptedModel::with(move |call| {
        calls.lock().unwrap().push(call.clone());
        match &call.grammar {
            Some(Grammar::Regex(_)) => "no".into(),
            Some(_) => "x = 1".into(),
            None => {
                let last = &call.messages.last().unwrap().content;
                let head: String = last
                    .split_whitespace()
                    .take(3)
                    .collect::<Vec<_>>()
                    .join(" ");
                format!("A({head})")
            }
        }
    })
}

fn config(dir: &std::path::Path, questions: &[u32]) -> RunConfig {
    RunConfig {
        model_id: "scripted".into(),
        out: dir.to_path_buf(),
        guards: GuardSet::none(),
        parallel: 2,
        questions: questions.to_vec(),
        resume: false,
        max_tokens: 64,
    }
}

#[test]
fn a_run_writes_fastchat_rows_with_fastchat_settings() {
    let dir = tempfile::tempdir().unwrap();
    let calls: Calls = Arc::default();
    let qs = fastchat::questions();
    let cfg = config(dir.path(), &[81, 111, 131]);
    let stop = AtomicBool::new(false);
    let s = run(&qs, &cfg, || model(&calls), &stop, |_| {}).unwrap();
    assert_eq!((s.answered, s.resumed, s.left), (3, 0, 0));
    let (rows, torn) = read_jsonl::<AnswerRow>(&tape_path(&cfg)).unwrap();
    assert!(torn.is_none());
    assert_eq!(rows.len(), 3);
    for r in &rows {
        assert_eq!(r.model_id, "scripted");
        assert_eq!(r.choices[0].turns.len(), 2);
        let meta = &r.extra["hearth"]["turns"];
        assert_eq!(meta.as_array().unwrap().len(), 2);
        assert!(meta[0]["completion_tokens"].as_u64().is_some());
    }
    let calls = calls.lock().unwrap();
    // Writing at 0.7, math at 0.0, stem (131) at 0.1; 1,024 → 64 as set.
    let temp_of = |needle: &str| {
        calls
            .iter()
            .find(|c| c.messages[0].content.contains(needle))
            .unwrap()
            .temperature
    };
    assert_eq!(temp_of("Hawaii"), Some(0.7));
    assert_eq!(temp_of("vertices of a triangle"), Some(0.0));
    // Turn 2 sees turn 1's question and answer.
    let t2 = calls
        .iter()
        .find(|c| c.messages.len() == 3 && c.messages[0].content.contains("Hawaii"))
        .unwrap();
    assert_eq!(t2.messages[1].role, "assistant");
    assert!(t2.messages[1].content.starts_with("A("));
    assert!(calls.iter().all(|c| c.max_tokens == 64));
}

#[test]
fn an_interrupted_run_resumes_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let calls: Calls = Arc::default();
    let qs = fastchat::questions();
    let mut cfg = config(dir.path(), &[81, 82, 83, 84, 85, 86]);
    cfg.parallel = 1;
    let stop = AtomicBool::new(false);
    // Stop after the second question is on the tape.
    let s = run(
        &qs,
        &cfg,
        || model(&calls),
        &stop,
        |p| {
            if p.done == 2 {
                stop.store(true, Ordering::SeqCst);
            }
        },
    )
    .unwrap();
    assert_eq!((s.answered, s.left), (2, 4));

    // Without --resume the tape is not overwritten.
    let again = run(&qs, &cfg, || model(&calls), &AtomicBool::new(false), |_| {});
    assert!(matches!(again, Err(RunError::Exists(_))));

    // A torn write at the end (a crash mid-line).
    let tape = tape_path(&cfg);
    let mut text = std::fs::read_to_string(&tape).unwrap();
    text.push_str("{\"question_id\": 83, \"answer_id\": \"x\", \"mod");
    std::fs::write(&tape, text).unwrap();

    cfg.resume = true;
    let s = run(&qs, &cfg, || model(&calls), &AtomicBool::new(false), |_| {}).unwrap();
    assert_eq!((s.answered, s.resumed, s.left), (4, 2, 0));
    assert!(
        matches!(s.tail, fastchat::Tail::Cut { line: 3, bytes: 42 }),
        "{:?}",
        s.tail
    );
    let said = fastchat::describe_tail(&tape, s.tail, "answered again").unwrap();
    assert!(said.contains("cut off 42 bytes"), "{said}");
    let (rows, torn) = read_jsonl::<AnswerRow>(&tape).unwrap();
    assert!(torn.is_none());
    let mut ids: Vec<u32> = rows.iter().map(|r| r.question_id).collect();
    ids.sort();
    assert_eq!(ids, [81, 82, 83, 84, 85, 86]);
}

#[test]
fn a_guarded_run_records_the_trace_per_turn() {
    let dir = tempfile::tempdir().unwrap();
    let calls: Calls = Arc::default();
    let qs = fastchat::questions();
    let mut cfg = config(dir.path(), &[119]);
    cfg.guards = GuardSet::all();
    cfg.model_id = "scripted+guard".into();
    let s = run(&qs, &cfg, || model(&calls), &AtomicBool::new(false), |_| {}).unwrap();
    assert_eq!(s.answered, 1);
    let (rows, _) = read_jsonl::<AnswerRow>(&tape_path(&cfg)).unwrap();
    let h = &rows[0].extra["hearth"];
    assert_eq!(h["guard"], "all");
    let trace = &h["turns"][0]["guard"];
    assert_eq!(trace["guards"], "all");
    // Q119 routes to the calculator; its program (`x = 1`) was a call.
    assert!(trace["routed"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["guard"] == "calc" && r["applies"] == true));
    assert!(trace["extra_calls"].as_u64().unwrap() >= 1);
}

#[test]
fn unknown_question_ids_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let calls: Calls = Arc::default();
    let cfg = config(dir.path(), &[81, 999]);
    let err = run(
        &fastchat::questions(),
        &cfg,
        || model(&calls),
        &AtomicBool::new(false),
        |_| {},
    )
    .unwrap_err();
    assert!(err.to_string().contains("999"), "{err}");
}
