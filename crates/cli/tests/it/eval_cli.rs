//! `hearth eval` from the outside: answering MT-Bench onto a tape (tiny
//! model), resuming, judging through a local `hearth serve`, the report on
//! FastChat's published judgments, and bad input.

use crate::serve_common;

use serde_json::Value;
use serve_common::{Server, TINY};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn hearth(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(args)
        .output()
        .unwrap()
}

fn eval_data(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../eval/tests/data")
        .join(rel)
}

fn mt_bench(out: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "eval",
        "mt-bench",
        "-m",
        TINY,
        "-t",
        "1",
        "--out",
        out.to_str().unwrap(),
        "--model-id",
        "tiny",
        "--questions",
        "81,111",
        "--max-tokens",
        "8",
        "--parallel",
        "2",
    ];
    args.extend_from_slice(extra);
    hearth(&args)
}

#[test]
fn answer_resume_judge_and_report() {
    let dir = tempfile::tempdir().unwrap();
    let tape = two_questions_are_answered_onto_a_tape(dir.path());
    the_tape_is_never_overwritten_and_resumes(dir.path());

    // Judged by a local hearth serve (the tiny model rarely rates: -1).
    let server = Server::start(TINY, &[]);
    let url = format!("http://{}/v1", server.addr);
    let judgments = every_turn_is_judged(&tape, &url, dir.path());
    forced_ratings_rate_every_turn(&tape, &url, &dir.path().join("forced"));
    the_report_is_written(&judgments, &tape, &dir.path().join("report"));
}

/// Asserts `out` is a success, showing its stderr where not.
#[track_caller]
fn assert_succeeded(out: &Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The JSON rows of a JSON Lines file.
fn read_rows(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// MT-Bench's questions 81 and 111 answered into `dir`: two rows of two
/// turns each on the tape, whose path it returns.
fn two_questions_are_answered_onto_a_tape(dir: &Path) -> PathBuf {
    let out = mt_bench(dir, &[]);
    assert_succeeded(&out);
    let tape = dir.join("model_answer/tiny.jsonl");
    let rows = read_rows(&tape);
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["choices"][0]["turns"].as_array().unwrap().len(), 2);
    tape
}

/// The tape in `dir` is never overwritten; --resume finds nothing left to
/// do.
fn the_tape_is_never_overwritten_and_resumes(dir: &Path) {
    let out = mt_bench(dir, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--resume"));
    let out = mt_bench(dir, &["--resume"]);
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("0 answered this run, 2 already on the tape")
    );
}

/// `hearth eval judge` of `tape` by the model-f32 served at `url`, into
/// `out`, with `extra` flags.
fn judge(tape: &Path, url: &str, out: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "eval",
        "judge",
        "--answers",
        tape.to_str().unwrap(),
        "--judge-url",
        url,
        "--judge-model",
        "model-f32",
        "--out",
        out.to_str().unwrap(),
        "--timeout",
        "60",
    ];
    args.extend_from_slice(extra);
    hearth(&args)
}

/// Each of the tape's four turns gets a judgment with a score (-1 where
/// the judge gave no rating); returns the judgments' path.
fn every_turn_is_judged(tape: &Path, url: &str, out: &Path) -> PathBuf {
    let run = judge(tape, url, out, &[]);
    assert_succeeded(&run);
    let judgments = out.join("model_judgment/model-f32_single.jsonl");
    let rows = read_rows(&judgments);
    assert_eq!(rows.len(), 4);
    assert!(rows.iter().all(|r| r["score"].as_f64().is_some()));
    judgments
}

/// --force-rating: the server holds each judgment to `... Rating: [[n]]`,
/// so even the tiny random model rates every turn.
fn forced_ratings_rate_every_turn(tape: &Path, url: &str, forced: &Path) {
    let out = judge(
        tape,
        url,
        forced,
        &["--max-tokens", "400", "--force-rating"],
    );
    assert_succeeded(&out);
    let forced_rows = read_rows(&forced.join("model_judgment/model-f32_single.jsonl"));
    assert_eq!(forced_rows.len(), 4);
    for r in &forced_rows {
        let score = r["score"].as_f64().unwrap();
        assert!((1.0..=10.0).contains(&score), "{r}");
        assert!(
            r["judgment"].as_str().unwrap().contains("Rating: [["),
            "{r}"
        );
    }
}

/// `hearth eval report` of the judgments writes the HTML page and a
/// summary of the models into `report_dir`.
fn the_report_is_written(judgments: &Path, tape: &Path, report_dir: &Path) {
    let out = hearth(&[
        "eval",
        "report",
        "--judgments",
        judgments.to_str().unwrap(),
        "--answers",
        tape.to_str().unwrap(),
        "--out",
        report_dir.to_str().unwrap(),
    ]);
    assert_succeeded(&out);
    assert!(report_dir.join("report.html").is_file());
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(report_dir.join("summary.json")).unwrap())
            .unwrap();
    assert!(summary["models"].is_object());
}

/// The report's averages are FastChat's show_result.py's, to the digit.
#[test]
fn report_matches_show_result_on_published_judgments() {
    let dir = tempfile::tempdir().unwrap();
    let out = hearth(&[
        "eval",
        "report",
        "--judgments",
        eval_data("model_judgment/gpt-4_single.ultrachat.jsonl")
            .to_str()
            .unwrap(),
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    for line in [
        "ultrachat_baseline: average 6.393750 (turn 1 6.762500, turn 2 6.025000)",
        "ultrachat_cai: average 6.512500 (turn 1 7.100000, turn 2 5.925000)",
        "ultrachat_sai: average 6.675000 (turn 1 7.150000, turn 2 6.200000)",
    ] {
        assert!(stdout.contains(line), "{stdout}");
    }
}

#[test]
fn bad_input_is_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let q = dir.path().join("q.jsonl");
    std::fs::write(
        &q,
        "{\"question_id\": 1, \"category\": \"writing\", \"turns\": [\"a\"]}\nnot json\n",
    )
    .unwrap();
    let out = mt_bench(dir.path(), &["--question-file", q.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("q.jsonl, line 2"), "{err}");

    // A judge that refuses connections: every judgment fails, clearly.
    let tape = eval_data("answers/gemma-2b-it.jsonl");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = hearth(&[
        "eval",
        "judge",
        "--answers",
        tape.to_str().unwrap(),
        "--judge-url",
        &format!("http://127.0.0.1:{port}/v1"),
        "--judge-model",
        "nobody",
        "--out",
        dir.path().to_str().unwrap(),
        "--attempts",
        "1",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("failed") && err.contains(&port.to_string()),
        "{err}"
    );
}
