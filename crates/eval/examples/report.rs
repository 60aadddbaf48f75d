//! Builds a report from FastChat files, until the `hearth` CLI has a command
//! for it:
//!
//! ```text
//! cargo run -p hearth-eval --example report -- OUT_DIR -j JUDGMENTS.jsonl... [-a ANSWERS.jsonl...]
//! ```
//!
//! Prints the averages as `show_result.py` does (6 decimals) and writes
//! `OUT_DIR/summary.json` and `OUT_DIR/report.html`.

use hearth_eval::fastchat::{questions, read_jsonl, AnswerRow, JudgmentRow};
use hearth_eval::report::{render_html, summarize, write_report};
use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(out) = args.next().map(PathBuf::from) else {
        eprintln!("usage: report OUT_DIR -j JUDGMENTS.jsonl... [-a ANSWERS.jsonl...]");
        return ExitCode::from(2);
    };
    let (mut judgments, mut answers) = (Vec::new(), Vec::new());
    let mut answers_next = false;
    for a in args {
        match a.as_str() {
            "-j" => answers_next = false,
            "-a" => answers_next = true,
            path => {
                let path = PathBuf::from(path);
                let torn = if answers_next {
                    read_jsonl::<AnswerRow>(&path).map(|(rows, torn)| {
                        answers.extend(rows);
                        torn
                    })
                } else {
                    read_jsonl::<JudgmentRow>(&path).map(|(rows, torn)| {
                        judgments.extend(rows);
                        torn
                    })
                };
                match torn {
                    Ok(Some(line)) => eprintln!(
                        "{}: line {line} is an unfinished write; skipped",
                        path.display()
                    ),
                    Ok(None) => {}
                    Err(e) => {
                        eprintln!("{e}");
                        return ExitCode::FAILURE;
                    }
                }
            }
        }
    }
    let qs = questions();
    let summary = summarize(&judgments, &qs);
    if summary.models.is_empty() {
        println!("no judgments with a score");
    }
    for (model, m) in &summary.models {
        let f = |x: Option<f64>| x.map(|x| format!("{x:.6}")).unwrap_or_else(|| "-".into());
        println!(
            "{model}: average {:.6} (turn 1 {}, turn 2 {}), {} rows",
            m.average,
            f(m.turn1),
            f(m.turn2),
            m.n
        );
    }
    let html = render_html(&summary, &judgments, &answers, &qs);
    if let Err(e) = write_report(&out, &summary, &html) {
        eprintln!("{e}");
        return ExitCode::FAILURE;
    }
    println!("wrote {}", out.join("report.html").display());
    ExitCode::SUCCESS
}
