//! The guardrails from the outside: `hearth solve`, `hearth check ifeval`,
//! `hearth chat --guard` on the real model, and the server's `guard`
//! extension (the trace in the response, refusals, per-guard metrics).

use crate::serve_common;

use serde_json::{json, Value};
use serve_common::{real_model, Server};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn guard_data(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../guard/tests/data")
        .join(rel)
}

fn hearth(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn solve_prints_the_unique_answer() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("q104.py");
    std::fs::write(
        &file,
        "from z3 import *\nboys, brothers = Ints('boys brothers')\ns = Solver()\ns.add(boys == 1)\ns.add(brothers == boys - 1)\ns.check()\nm = s.model()\nprint(m[brothers])\n",
    )
    .unwrap();
    let out = hearth(&["solve", file.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v,
        json!({"status": "sat", "model": {"brothers": 0}, "unique": true})
    );

    // From stdin, and a construct outside the subset named.
    let mut child = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["solve", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"from z3 import *\nimport os\nx = Int('x')\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("import"), "{err}");

    let out = hearth(&["solve", "/nonexistent/puzzle.py"]);
    assert_eq!(out.status.code(), Some(1));
}

/// Every puzzle of the guard's suite through the binary: status, the
/// asked values and uniqueness as its answers file says.
#[test]
fn solve_is_right_on_the_puzzle_suite() {
    let dir = guard_data("puzzles");
    let answers: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("answers.json")).unwrap()).unwrap();
    let answers = answers.as_object().unwrap();
    assert!(answers.len() >= 25);
    for (file, want) in answers {
        let out = hearth(&["solve", dir.join(file).to_str().unwrap()]);
        assert!(
            out.status.success(),
            "{file}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let got: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(got["status"], want["status"], "{file}");
        assert_eq!(got["unique"], want["unique"], "{file}");
        if want["status"] == "sat" && want["unique"] == true {
            for (name, value) in want["model"].as_object().unwrap() {
                assert_eq!(&got["model"][name], value, "{file}: {name}");
            }
        }
    }
}

#[test]
fn check_ifeval_writes_the_official_shape_and_agrees() {
    let text = std::fs::read_to_string(guard_data("ifeval_visible.jsonl")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let visible = VisibleSet::parse(&text);
    let files = IfevalFiles {
        input: dir.path().join("input_data.jsonl"),
        responses: dir.path().join("responses.jsonl"),
        out: dir.path().join("out"),
    };
    std::fs::write(&files.input, visible.input).unwrap();
    std::fs::write(&files.responses, visible.responses).unwrap();
    let out = files.check(&[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    results_have_the_official_shape_and_agree(&files.out, &visible.official);

    let out = files.check(&["--extract"]);
    assert!(out.status.success());
    let rows = std::fs::read_to_string(files.out.join("eval_results_strict.jsonl")).unwrap();
    let first: Value = serde_json::from_str(rows.lines().next().unwrap()).unwrap();
    assert!(first["extracted_instruction_id_list"].is_array());
    assert!(first["extracted_kwargs"].is_array());

    // A response file that lacks a prompt is an error naming it.
    std::fs::write(&files.responses, "").unwrap();
    let out = files.check(&[]);
    assert_eq!(out.status.code(), Some(1));
}

/// IFEval's visible rows split into what `hearth check ifeval` reads and
/// what the official checker said of each.
struct VisibleSet {
    /// The input data, JSON Lines.
    input: String,
    /// The responses, JSON Lines.
    responses: String,
    /// Per row, the official strict and loose verdicts per instruction.
    official: Vec<(Vec<bool>, Vec<bool>)>,
}

impl VisibleSet {
    fn parse(text: &str) -> Self {
        let (mut input, mut responses) = (String::new(), String::new());
        let mut official: Vec<(Vec<bool>, Vec<bool>)> = Vec::new();
        for line in text.lines() {
            let v: Value = serde_json::from_str(line).unwrap();
            input.push_str(
                &json!({"key": v["key"], "prompt": v["prompt"], "instruction_id_list": v["instruction_id_list"], "kwargs": v["kwargs"]})
                    .to_string(),
            );
            input.push('\n');
            responses
                .push_str(&json!({"prompt": v["prompt"], "response": v["response"]}).to_string());
            responses.push('\n');
            let bools = |k: &str| -> Vec<bool> {
                v[k].as_array()
                    .unwrap()
                    .iter()
                    .map(|b| b.as_bool().unwrap())
                    .collect()
            };
            official.push((
                bools("follow_instruction_list_strict"),
                bools("follow_instruction_list_loose"),
            ));
        }
        Self {
            input,
            responses,
            official,
        }
    }
}

/// Where a `hearth check ifeval` run reads and writes.
struct IfevalFiles {
    input: PathBuf,
    responses: PathBuf,
    out: PathBuf,
}

impl IfevalFiles {
    /// `hearth check ifeval` over these files, with `extra` flags.
    fn check(&self, extra: &[&str]) -> std::process::Output {
        let mut args = vec![
            "check",
            "ifeval",
            "--input",
            self.input.to_str().unwrap(),
            "--responses",
            self.responses.to_str().unwrap(),
            "--output",
            self.out.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        hearth(&args)
    }
}

/// The strict and loose results in `out_dir`: a row per input row with the
/// official fields, whose verdicts agree with the official checker's on at
/// least 99% of the instructions.
fn results_have_the_official_shape_and_agree(out_dir: &Path, official: &[(Vec<bool>, Vec<bool>)]) {
    for (file, which) in [
        ("eval_results_strict.jsonl", 0),
        ("eval_results_loose.jsonl", 1),
    ] {
        let rows = std::fs::read_to_string(out_dir.join(file)).unwrap();
        let (mut agree, mut total) = (0, 0);
        for (line, off) in rows.lines().zip(official) {
            let row: Value = serde_json::from_str(line).unwrap();
            for k in [
                "prompt",
                "instruction_id_list",
                "follow_instruction_list",
                "follow_all_instructions",
            ] {
                assert!(row.get(k).is_some(), "{file} row lacks {k}");
            }
            let ours: Vec<bool> = row["follow_instruction_list"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b.as_bool().unwrap())
                .collect();
            let theirs = if which == 0 { &off.0 } else { &off.1 };
            total += theirs.len();
            agree += ours.iter().zip(theirs).filter(|(a, b)| a == b).count();
        }
        assert_eq!(rows.lines().count(), official.len());
        assert!(
            agree * 100 >= total * 99,
            "{file}: {agree}/{total} instructions agree with the official checker"
        );
    }
}

/// The real model, end to end through every guard: an answer comes back
/// and the trace says what ran.
#[test]
fn chat_guard_runs_end_to_end_on_the_real_model() {
    let model = real_model();
    let q119 = "Benjamin went to a bookstore and purchased a variety of books. He bought 5 copies of a sci-fi novel, each priced at $20, 3 copies of a history book priced at $30 each, and 2 copies of a philosophy book for $45 each. What was the total cost of his purchases?";
    let out = hearth(&[
        "chat",
        "-m",
        model.to_str().unwrap(),
        "-t",
        "2",
        "--temp",
        "0",
        "-n",
        "96",
        "--guard",
        "all",
        "--guard-trace",
        "-p",
        q119,
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!String::from_utf8_lossy(&out.stdout).trim().is_empty());
    assert!(stderr.contains("guards: all"), "{stderr}");
    assert!(stderr.contains("route calc: rule:"), "{stderr}");
    assert!(stderr.contains("calc "), "{stderr}");

    let out = hearth(&[
        "chat",
        "-m",
        model.to_str().unwrap(),
        "--guard",
        "calc,bogus",
        "-p",
        "hi",
    ]);
    assert_eq!(out.status.code(), Some(2), "clap refuses an unknown guard");
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown guard `bogus`"));
}

/// The server: a guarded request carries its trace (as JSON and streamed),
/// metrics count each guard, and bad or conflicting requests are refused.
#[test]
fn serve_guard_extension() {
    let model = real_model();
    let server = Server::start(model.to_str().unwrap(), &["--guard", "clean"]);
    let r = server.post(
        "/v1/chat/completions",
        &json!({
            "messages": [{"role": "user", "content": "David has three sisters. Each of them has one brother. How many brothers does David have?"}],
            "max_tokens": 48,
            "temperature": 0,
            "guard": "all",
        })
        .to_string(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let trace = &v["guard"];
    assert_eq!(trace["guards"], "all");
    let routed = trace["routed"].as_array().unwrap();
    assert!(routed
        .iter()
        .any(|r| r["guard"] == "logic" && r["applies"] == true));
    let steps = trace["steps"].as_array().unwrap();
    assert!(steps.iter().any(|s| s["guard"] == "logic"), "{trace}");
    assert!(v["choices"][0]["message"]["content"].is_string());
    assert!(v["usage"]["completion_tokens"].as_u64().unwrap() > 0);

    // The server's default (`--guard clean`) applies to a request with none.
    let r = server.post(
        "/v1/chat/completions",
        &json!({
            "messages": [{"role": "user", "content": "Say hello."}],
            "max_tokens": 8,
            "stream": true,
        })
        .to_string(),
    );
    assert_eq!(r.status, 200);
    let chunks: Vec<Value> = r
        .sse_data()
        .iter()
        .filter(|d| d.as_str() != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let last = chunks.last().unwrap();
    assert_eq!(last["guard"]["guards"], "clean", "{last}");
    assert!(last["choices"][0]["finish_reason"].is_string());

    let metrics = server.request("GET", "/metrics", &[], b"").text();
    assert!(
        metrics.contains("hearth_guard_steps_total{guard=\"clean\""),
        "{metrics}"
    );
    assert!(metrics.contains("hearth_guard_model_calls_total{guard=\"logic\"}"));

    // Refusals: an unknown guard, guards with a response format.
    let r = server.post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi"}], "guard": "calc,nope"}).to_string(),
    );
    assert!(r.assert_error(400).contains("unknown guard `nope`"));
    let r = server.post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi"}], "guard": "all", "response_format": {"type": "json_object"}}).to_string(),
    );
    assert!(r.assert_error(400).contains("guard"));
    // The default does not apply to a constrained request: it just runs.
    let r = server.post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "response_format": {"type": "json_object"}}).to_string(),
    );
    assert_eq!(r.status, 200);
    assert!(r.json().get("guard").is_none());
}

/// The pens question and ten word problems like it on the real model with
/// every guard: the 270M often writes a calculator program that has nothing
/// to do with the question; no such program may be used as a fact (every
/// `computed` step's program is grounded in its question), and no reply
/// carries the guard's own instructions to the model.
#[test]
fn word_problems_are_never_vouched_for_by_unrelated_programs() {
    let questions = [
        "A shop sells pens at $3 each. I buy 7 pens and pay with a $50 bill. How much change do I get?",
        "A baker makes 24 muffins and packs them in boxes of 4. How many boxes does she fill?",
        "Tom has $120. He spends $45 on shoes and $30 on a shirt. How much money does he have left?",
        "A train travels at 60 miles per hour for 3 hours. How far does it go?",
        "Sara reads 15 pages a day. How many pages does she read in 2 weeks?",
        "A ticket costs $12. How much do 8 tickets cost?",
        "A farmer has 5 rows of 9 apple trees. How many trees are there in total?",
        "A shirt costs $40 and is 25% off. What is the sale price?",
        "Lily had 36 stickers and gave 1/3 of them to her brother. How many stickers does she have left?",
        "A pizza is cut into 8 slices. If 3 friends eat 2 slices each, how many slices are left?",
        "A car uses 6 liters of fuel per 100 km. How many liters does it use for 250 km?",
    ];
    let model = real_model();
    let server = Server::start(model.to_str().unwrap(), &["--parallel", "2", "-t", "2"]);
    let ask = |q: &str| {
        let body = json!({
            "messages": [{"role": "user", "content": q}],
            "max_tokens": 48,
            "temperature": 0,
            "guard": "all",
        });
        let r = server.post("/v1/chat/completions", &body.to_string());
        assert_eq!(r.status, 200, "{q}: {}", r.text());
        r.json()
    };
    let replies: Vec<Value> = std::thread::scope(|s| {
        let halves: Vec<_> = questions
            .chunks(6)
            .map(|chunk| s.spawn(move || chunk.iter().map(|q| ask(q)).collect::<Vec<_>>()))
            .collect();
        halves.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    let (mut computed, mut refused) = (0, 0);
    for (q, v) in questions.iter().zip(&replies) {
        let text = v["choices"][0]["message"]["content"].as_str().unwrap();
        let lower = text.to_lowercase();
        for leak in [
            "they are exact",
            "use these results",
            "a calculator computed exactly",
        ] {
            assert!(
                !lower.contains(leak),
                "{q}: the reply carries `{leak}`: {text}"
            );
        }
        for step in v["guard"]["steps"].as_array().unwrap() {
            let detail = step["detail"].as_str().unwrap();
            if step["guard"] == "calc" && detail.starts_with("program `") {
                match step["outcome"].as_str().unwrap() {
                    "computed" => {
                        computed += 1;
                        let program = detail
                            .strip_prefix("program `")
                            .and_then(|d| d.split_once("` gives"))
                            .map(|(p, _)| p.replace("; ", "\n"))
                            .unwrap_or_default();
                        assert!(
                            !program.contains('…'),
                            "{q}: a long program was used: {detail}"
                        );
                        assert_eq!(
                            guard::ground::check(&program, q, false),
                            Ok(()),
                            "{q}: {detail}"
                        );
                    }
                    "could_not_verify" => refused += 1,
                    _ => {}
                }
            }
        }
        println!("{q}\n  -> {text:?}\n  {}", v["guard"]["steps"]);
    }
    println!("calculator programs used: {computed}, not used: {refused}");
    assert!(
        computed + refused >= questions.len() / 2,
        "most questions ran the calculator"
    );
}
