//! The judge loop against a fake OpenAI-compatible endpoint that sometimes
//! answers without a rating, sometimes times out and sometimes fails with
//! 500: every row ends with a score or -1, and a re-run asks for nothing
//! that is already judged. And a judge URL that refuses connections.

use hearth_eval::fastchat::{read_jsonl, AnswerRow, Choice, JudgmentRow};
use hearth_eval::judge::{judge, judgment_path, JudgeConfig, ERROR_JUDGMENT};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How the fake judge treats a prompt, by how often it has seen it.
type Seen = Arc<Mutex<HashMap<String, usize>>>;

/// Serve `/chat/completions` on a free port: the reply depends on the
/// question id in the prompt and on how many times it was asked.
fn fake_judge(seen: Seen) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let seen = Arc::clone(&seen);
            std::thread::spawn(move || handle(stream, &seen));
        }
    });
    format!("http://{addr}/v1")
}

fn handle(mut stream: TcpStream, seen: &Seen) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut len = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap();
        }
        if line == "\r\n" {
            break;
        }
    }
    let mut body = vec![0; len];
    reader.read_exact(&mut body).unwrap();
    let req: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let user = req["messages"][1]["content"].as_str().unwrap().to_string();
    let n = {
        let mut s = seen.lock().unwrap();
        // The token cap asked for, counted under its own key.
        *s.entry(format!("max_tokens:{}", req["max_tokens"]))
            .or_default() += 1;
        // Whether the rating was forced, counted the same way.
        *s.entry(format!("regex:{}", req["regex"].as_str().unwrap_or("none")))
            .or_default() += 1;
        let n = s.entry(user.clone()).or_default();
        *n += 1;
        *n
    };
    // The answer text carries the behaviour: `rate`, `norating`,
    // `flaky500` (500 twice, then a rating), `slow` (times out once).
    let (status, content) = if user.contains("norating") {
        (200, "A fine answer, but I will not rate it.".to_string())
    } else if user.contains("flaky500") && n <= 2 {
        (500, String::new())
    } else if user.contains("slow") && n == 1 {
        std::thread::sleep(Duration::from_millis(1500));
        (200, "Rating: [[2]]".to_string())
    } else if user.contains("always500") {
        (500, String::new())
    } else {
        (200, "Explanation. Rating: [[7]]".to_string())
    };
    let body = if status == 200 {
        serde_json::json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]})
            .to_string()
    } else {
        r#"{"error": {"message": "boom"}}"#.to_string()
    };
    let _ = write!(
        stream,
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

fn answers(dir: &Path, texts: &[(u32, &str)]) -> std::path::PathBuf {
    let path = dir.join("m.jsonl");
    let mut out = String::new();
    for (qid, text) in texts {
        let row = AnswerRow {
            question_id: *qid,
            answer_id: format!("a{qid}"),
            model_id: "m".into(),
            choices: vec![Choice {
                index: 0,
                turns: vec![format!("{text} one"), format!("{text} two")],
            }],
            tstamp: 0.0,
            extra: Default::default(),
        };
        out.push_str(&serde_json::to_string(&row).unwrap());
        out.push('\n');
    }
    std::fs::write(&path, out).unwrap();
    path
}

fn config(url: String, out: &Path) -> JudgeConfig {
    JudgeConfig {
        url,
        model: "fake-judge".into(),
        api_key: None,
        out: out.to_path_buf(),
        parallel: 3,
        attempts: 3,
        timeout: Duration::from_millis(800),
        backoff: Duration::from_millis(20),
        max_tokens: 96,
        force_rating: false,
    }
}

#[test]
fn every_row_ends_with_a_score_and_nothing_is_asked_twice() {
    let dir = tempfile::tempdir().unwrap();
    let seen: Seen = Arc::default();
    let url = fake_judge(Arc::clone(&seen));
    // 81 writing, 104 reasoning (reference prompt), 111 math, 130 coding.
    let file = answers(
        dir.path(),
        &[
            (81, "rate"),
            (104, "norating"),
            (111, "flaky500"),
            (130, "slow"),
        ],
    );
    let cfg = config(url, dir.path());
    let s = judge(std::slice::from_ref(&file), &cfg, |_, _| {}).unwrap();
    assert_eq!(s.judged, 8, "{s:?}");
    assert_eq!(s.failed, 0, "{s:?}");
    assert_eq!(s.no_rating, 2);
    // Two 500s for each flaky turn, one timeout for each slow turn.
    assert_eq!(s.requests, 8 + 2 * 2 + 2);

    let (rows, torn) = read_jsonl::<JudgmentRow>(&judgment_path(&cfg)).unwrap();
    assert!(torn.is_none());
    assert_eq!(rows.len(), 8);
    let score = |qid: u32, turn: u32| {
        rows.iter()
            .find(|r| r.question_id == qid && r.turn == turn)
            .unwrap()
            .score
    };
    assert_eq!(score(81, 1), 7.0);
    assert_eq!(score(104, 2), -1.0);
    assert_eq!(score(111, 1), 7.0);
    // The slow reply (`[[2]]`) came too late; the retry's counts.
    assert_eq!(score(130, 1), 7.0);
    let prompts: Vec<&str> = rows.iter().map(|r| r.judge[1].as_str()).collect();
    assert!(prompts.contains(&"single-math-v1-multi-turn"));
    assert!(rows.iter().all(|r| r.judge[0] == "fake-judge"));
    // FastChat's prompts: the reference answer for reasoning.
    let r104 = rows
        .iter()
        .find(|r| r.question_id == 104 && r.turn == 1)
        .unwrap();
    assert_eq!(r104.judge[1], "single-math-v1");
    assert!(r104.user_prompt.contains("[The Start of Reference Answer]"));

    // A re-run asks for nothing.
    assert!(
        seen.lock().unwrap().contains_key("max_tokens:96"),
        "the judge call carries --max-tokens"
    );
    assert!(
        seen.lock().unwrap().contains_key("regex:none"),
        "no constraint unless --force-rating"
    );
    let before = seen.lock().unwrap().values().sum::<usize>();
    let again = judge(std::slice::from_ref(&file), &cfg, |_, _| {}).unwrap();
    assert_eq!(again.cached, 8);
    assert_eq!(again.requests, 0);
    assert_eq!(seen.lock().unwrap().values().sum::<usize>(), before);
}

#[test]
fn a_torn_judgment_line_is_cut_and_asked_again() {
    let dir = tempfile::tempdir().unwrap();
    let seen: Seen = Arc::default();
    let url = fake_judge(Arc::clone(&seen));
    let file = answers(dir.path(), &[(81, "rate"), (82, "rate")]);
    let cfg = config(url, dir.path());
    judge(std::slice::from_ref(&file), &cfg, |_, _| {}).unwrap();
    // A crash in the middle of the last line's write.
    let path = judgment_path(&cfg);
    let text = std::fs::read(&path).unwrap();
    let keep = text.len() - 40;
    std::fs::write(&path, &text[..keep]).unwrap();
    let torn = keep - text[..keep].iter().rposition(|&b| b == b'\n').unwrap() - 1;
    let s = judge(std::slice::from_ref(&file), &cfg, |_, _| {}).unwrap();
    assert_eq!((s.cached, s.judged, s.requests), (3, 1, 1), "{s:?}");
    assert_eq!(
        s.tail,
        hearth_eval::fastchat::Tail::Cut {
            line: 4,
            bytes: torn as u64
        }
    );
    // The file reads whole again: four judgments, each once.
    let (rows, torn) = read_jsonl::<JudgmentRow>(&path).unwrap();
    assert!(torn.is_none());
    assert_eq!(rows.len(), 4);
}

#[test]
fn failures_are_written_as_errors_and_asked_again() {
    let dir = tempfile::tempdir().unwrap();
    let seen: Seen = Arc::default();
    let url = fake_judge(Arc::clone(&seen));
    let file = answers(dir.path(), &[(81, "always500"), (82, "rate")]);
    let cfg = config(url, dir.path());
    let s = judge(std::slice::from_ref(&file), &cfg, |_, _| {}).unwrap();
    assert_eq!((s.judged, s.failed), (2, 2));
    assert!(s.last_error.unwrap().contains("500"));
    let (rows, _) = read_jsonl::<JudgmentRow>(&judgment_path(&cfg)).unwrap();
    let errors: Vec<&JudgmentRow> = rows
        .iter()
        .filter(|r| r.judgment == ERROR_JUDGMENT)
        .collect();
    assert_eq!(errors.len(), 2);
    assert!(errors.iter().all(|r| r.score == -1.0));
    // The errors are asked again; the good ones are not.
    let again = judge(std::slice::from_ref(&file), &cfg, |_, _| {}).unwrap();
    assert_eq!((again.cached, again.failed), (2, 2));
}

#[test]
fn a_refused_connection_fails_every_row_clearly() {
    let dir = tempfile::tempdir().unwrap();
    // A port nothing listens on.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let file = answers(dir.path(), &[(81, "rate")]);
    let cfg = config(format!("http://127.0.0.1:{port}/v1"), dir.path());
    let s = judge(std::slice::from_ref(&file), &cfg, |_, _| {}).unwrap();
    assert_eq!(s.failed, 2);
    assert_eq!(s.requests, 6, "3 attempts per row");
    let why = s.last_error.unwrap();
    assert!(why.contains(&port.to_string()), "{why}");
}

#[test]
fn a_malformed_answer_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.jsonl");
    std::fs::write(&path, "{\"question_id\": 81}\n{}\n").unwrap();
    let cfg = config("http://127.0.0.1:9/v1".into(), dir.path());
    let err = judge(&[path], &cfg, |_, _| {}).unwrap_err().to_string();
    assert!(err.contains("bad.jsonl, line 1"), "{err}");
}
