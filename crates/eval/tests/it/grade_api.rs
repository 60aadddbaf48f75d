//! `hearth eval grade`'s HTTP API, spoken to with a plain HTTP/1.1 client
//! over `std::net::TcpStream`: blind shuffled items, FastChat judgment rows,
//! resuming after a restart, and the answers to bad requests.

use hearth_eval::fastchat::{read_jsonl, JudgmentRow};
use hearth_eval::grade::{self, GradeConfig, GradeError};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

const MODELS: [&str; 2] = ["gemma-2b-it", "gpt-3.5-turbo"];

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/answers")
        .join(name)
}

fn config(out: &Path, seed: u64) -> GradeConfig {
    GradeConfig {
        answers: MODELS.iter().map(|m| data(&format!("{m}.jsonl"))).collect(),
        out: out.to_path_buf(),
        grader: "tester".into(),
        seed,
        port: 0,
    }
}

/// One request on its own connection (`Connection: close`), returning the
/// status and the body.
fn request(addr: SocketAddr, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let body = body.unwrap_or("");
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8(raw).expect("utf-8 response");
    let (head, rest) = text.split_once("\r\n\r\n").expect("a header block");
    let status: u16 = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status line");
    let chunked = head
        .lines()
        .any(|l| l.eq_ignore_ascii_case("transfer-encoding: chunked"));
    let body = if chunked {
        dechunk(rest)
    } else {
        rest.to_string()
    };
    (status, body)
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        s = &rest[n + 2..];
    }
    out
}

fn get_json(addr: SocketAddr, path: &str) -> Value {
    let (status, body) = request(addr, "GET", path, None);
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).expect("JSON")
}

fn post(addr: SocketAddr, body: &Value) -> (u16, Value) {
    let (status, text) = request(addr, "POST", "/api/grade", Some(&body.to_string()));
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn assert_blind(body: &str) {
    for m in MODELS {
        assert!(!body.contains(m), "model name {m} leaked: {body}");
    }
    if let Ok(v) = serde_json::from_str::<Value>(body) {
        assert_no_model_keys(&v);
    }
}

fn assert_no_model_keys(v: &Value) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                assert!(!k.contains("model") && !k.contains("answer_id"), "{k}");
                assert_no_model_keys(v);
            }
        }
        Value::Array(a) => a.iter().for_each(assert_no_model_keys),
        _ => {}
    }
}

/// The page itself: served with its script's nonce filled in, and blind.
fn assert_page_is_blind(addr: SocketAddr) {
    let (status, page) = request(addr, "GET", "/", None);
    assert_eq!(status, 200);
    assert!(page.contains("<script nonce=\""), "the page has its script");
    assert!(!page.contains("{{NONCE}}"));
    assert_blind(&page);
}

/// Grades the first 5 items (scores 3 to 7, a note on the first), checking
/// each answer is blind and counts the grade; every item shown, the first
/// included, so the last is the one now pending.
fn grade_five(addr: SocketAddr) -> Vec<Value> {
    // 3 questions × 2 turns × 2 models.
    let first = get_json(addr, "/api/next");
    assert_blind(&first.to_string());
    assert_eq!(first["done"], false);
    assert_eq!(first["total"], 12);
    assert_eq!(first["graded"], 0);
    // GET does not consume: the same item until it is graded.
    assert_eq!(get_json(addr, "/api/next")["item"], first["item"]);

    let mut seen = vec![first.clone()];
    let mut item = first;
    for k in 0..5u64 {
        let note = if k == 0 { "too short" } else { "" };
        let (status, next) = post(
            addr,
            &json!({"item": item["item"], "score": k + 3, "note": note}),
        );
        assert_eq!(status, 200, "{next}");
        assert_blind(&next.to_string());
        assert_eq!(next["graded"], k + 1);
        item = next;
        seen.push(item.clone());
    }
    seen
}

/// Turn 2 comes with turn 1 as context, math and reasoning with a
/// reference, and the items are not in file order.
fn assert_items_shaped_and_shuffled(seen: &[Value]) {
    for s in seen {
        assert_eq!(s["turn"] == 2, s["context"].is_object(), "{s}");
        let needs_ref = s["category"] == "math" || s["category"] == "reasoning";
        assert_eq!(needs_ref, s["reference"].is_string(), "{s}");
    }
    // Shuffled: not in file order (model, then question, then turn).
    let order: Vec<(u64, u64)> = seen
        .iter()
        .map(|s| {
            (
                s["question_id"].as_u64().unwrap(),
                s["turn"].as_u64().unwrap(),
            )
        })
        .collect();
    let mut sorted = order.clone();
    sorted.sort();
    assert_ne!(order, sorted, "items look unshuffled: {order:?}");
}

/// Malformed grades, unknown and already graded items, and a client that
/// hangs up mid-request are all refused, and change nothing.
fn assert_bad_requests_refused(addr: SocketAddr, graded: &Value, pending: &Value) {
    for bad in [
        json!({"item": pending, "score": 0}),
        json!({"item": pending, "score": 11}),
        json!({"item": pending, "score": 7.5}),
        json!({"item": pending, "score": "7"}),
        json!({"item": pending}),
        json!({"score": 5}),
        json!({"item": pending, "score": 5, "note": 3}),
    ] {
        let (status, body) = post(addr, &bad);
        assert_eq!(status, 400, "{bad} → {body}");
    }
    let (status, _) = request(addr, "POST", "/api/grade", Some("{not json"));
    assert_eq!(status, 400);
    let (status, _) = post(addr, &json!({"item": "nope", "score": 5}));
    assert_eq!(status, 404);
    let (status, _) = post(addr, &json!({"item": graded, "score": 5}));
    assert_eq!(status, 409, "grading twice is refused");
    // A client that hangs up mid-request changes nothing.
    {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"POST /api/grade HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"it")
            .unwrap();
    }
    assert_eq!(get_json(addr, "/api/next")["graded"], 5);
}

/// The file holds 5 FastChat single-answer judgment rows, one per item
/// `seen` graded, with FastChat's keys and nothing more.
fn assert_five_fastchat_rows(out: &Path, seen: &[Value]) {
    let (rows, torn) = read_jsonl::<JudgmentRow>(out).unwrap();
    assert_eq!(torn, None);
    assert_eq!(rows.len(), 5);
    for (k, r) in rows.iter().enumerate() {
        let shown = &seen[k];
        assert!(MODELS.contains(&r.model.as_str()));
        assert_eq!(
            u64::from(r.question_id),
            shown["question_id"].as_u64().unwrap()
        );
        assert_eq!(u64::from(r.turn), shown["turn"].as_u64().unwrap());
        let prompt = if r.turn == 2 {
            "single-v1-multi-turn"
        } else {
            "single-v1"
        };
        assert_eq!(r.judge, vec!["human:tester".to_string(), prompt.into()]);
        assert_eq!(r.score, (k + 3) as f64);
        assert!(r.tstamp > 1.6e9);
        assert!(r.user_prompt.contains(shown["question"].as_str().unwrap()));
        let judgment = if k == 0 { "too short" } else { "human rating" };
        assert_eq!(r.judgment, judgment);
    }
    // Raw keys are FastChat's, nothing more.
    let text = std::fs::read_to_string(out).unwrap();
    let first_row: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let mut keys: Vec<&String> = first_row.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "judge",
            "judgment",
            "model",
            "question_id",
            "score",
            "tstamp",
            "turn",
            "user_prompt"
        ]
    );
}

/// Restarts on the same file: the same order with the 5 graded items
/// skipped (`pending` comes next), another grader starting from zero, and
/// every item graded exactly once by the end.
fn resume_and_finish(out: &Path, pending: &Value) {
    let server = grade::start(config(out, 42)).unwrap();
    assert_eq!(server.progress_at_start(), (5, 12));
    let next = get_json(server.addr(), "/api/next");
    assert_eq!(next["graded"], 5);
    assert_eq!(next["total"], 12);
    assert_eq!(next["item"], pending["item"]);
    assert_eq!(next["question_id"], pending["question_id"]);
    // Another grader starts from zero on the same file.
    let mut other = config(out, 42);
    other.grader = "someone-else".into();
    assert_eq!(grade::progress(&other).unwrap(), (0, 12));
    // Finish: every remaining item, then done.
    let addr = server.addr();
    let mut item = next;
    let mut left = 7;
    while item["done"] == false {
        let (status, next) = post(addr, &json!({"item": item["item"], "score": 10}));
        assert_eq!(status, 200);
        item = next;
        left -= 1;
    }
    assert_eq!(left, 0);
    assert_eq!(item, json!({"done": true, "graded": 12, "total": 12}));
    server.shutdown().unwrap();
    let (rows, _) = read_jsonl::<JudgmentRow>(out).unwrap();
    assert_eq!(rows.len(), 12);
    let mut keys: Vec<(u32, u32, String)> = rows
        .into_iter()
        .map(|r| (r.question_id, r.turn, r.model))
        .collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 12, "each item graded once");
}

#[test]
fn items_are_shuffled_blind_and_resumable() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("judgment/human_single.jsonl");

    let server = grade::start(config(&out, 42)).unwrap();
    let addr = server.addr();
    assert!(addr.ip().is_loopback());
    assert_page_is_blind(addr);

    let seen = grade_five(addr);
    assert_items_shaped_and_shuffled(&seen);
    let pending = &seen[seen.len() - 1];
    assert_bad_requests_refused(addr, &seen[0]["item"], &pending["item"]);
    server.shutdown().unwrap();

    assert_five_fastchat_rows(&out, &seen);
    resume_and_finish(&out, pending);
}

#[test]
fn another_seed_gives_another_order() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("j.jsonl");
    let a = grade::start(config(&out, 1)).unwrap();
    let b = grade::start(config(&out, 2)).unwrap();
    let c = grade::start(config(&out, 1)).unwrap();
    let first = |s: &grade::Running| {
        let v = get_json(s.addr(), "/api/next");
        (
            v["question_id"].clone(),
            v["turn"].clone(),
            v["answer"].clone(),
        )
    };
    assert_eq!(first(&a), first(&c));
    // Two seeds could pick the same first item; compare a few.
    let mut differs = false;
    for seed in 2..6 {
        let s = grade::start(config(&out, seed)).unwrap();
        differs |= first(&s) != first(&a);
    }
    assert!(differs || first(&b) != first(&a));
}

#[test]
fn a_torn_judgment_line_is_cut_before_appending() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("j.jsonl");
    // A crash mid-write: the line ends inside a two-byte character.
    let mut torn = b"{\"question_id\": 81, \"model\": \"caf\xc3".to_vec();
    std::fs::write(&out, &torn).unwrap();
    let s = grade::start(config(&out, 0)).unwrap();
    assert_eq!(
        s.tail(),
        hearth_eval::fastchat::Tail::Cut {
            line: 1,
            bytes: torn.len() as u64
        }
    );
    let next = get_json(s.addr(), "/api/next");
    let (status, _) = post(s.addr(), &json!({"item": next["item"], "score": 4}));
    assert_eq!(status, 200);
    s.shutdown().unwrap();
    let text = std::fs::read_to_string(&out).unwrap();
    assert_eq!(text.lines().count(), 1);
    // The file reads whole on the next start, with the one grade in it.
    let s = grade::start(config(&out, 0)).unwrap();
    assert_eq!(s.tail(), hearth_eval::fastchat::Tail::Clean);
    assert_eq!(s.progress_at_start().0, 1);
    s.shutdown().unwrap();

    // A whole row that only lacks its newline is kept.
    torn = text.trim_end().as_bytes().to_vec();
    std::fs::write(&out, &torn).unwrap();
    let s = grade::start(config(&out, 0)).unwrap();
    assert_eq!(s.tail(), hearth_eval::fastchat::Tail::Closed { line: 1 });
    assert_eq!(s.progress_at_start().0, 1);
}

#[test]
fn bad_answer_files_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read_to_string(data("gemma-2b-it.jsonl")).unwrap();
    let mut lines = good.lines();
    let (l1, l2) = (lines.next().unwrap(), lines.next().unwrap());

    // A torn last line is tolerated: 1 whole row, 2 items.
    let torn = dir.path().join("torn.jsonl");
    std::fs::write(&torn, format!("{l1}\n{}", &l2[..l2.len() / 2])).unwrap();
    let cfg = GradeConfig {
        answers: vec![torn],
        out: dir.path().join("out.jsonl"),
        grader: "t".into(),
        seed: 0,
        port: 0,
    };
    assert_eq!(grade::progress(&cfg).unwrap(), (0, 2));

    // A malformed middle line is an error naming the file and the line.
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, format!("{l1}\n{{oops\n{l2}\n")).unwrap();
    let cfg = GradeConfig {
        answers: vec![bad],
        ..cfg
    };
    let err = grade::start(cfg.clone()).unwrap_err();
    assert!(matches!(err, GradeError::Format(_)));
    assert!(err.to_string().contains("bad.jsonl, line 2"), "{err}");

    // A missing file, an empty grader, no files: clear errors, no panic.
    let missing = GradeConfig {
        answers: vec![dir.path().join("missing.jsonl")],
        ..cfg.clone()
    };
    assert!(grade::start(missing)
        .unwrap_err()
        .to_string()
        .contains("missing.jsonl"));
    let nobody = GradeConfig {
        answers: vec![data("gemma-2b-it.jsonl")],
        grader: " ".into(),
        ..cfg.clone()
    };
    assert!(grade::start(nobody).is_err());
    let nothing = GradeConfig {
        answers: vec![],
        ..cfg
    };
    assert!(grade::start(nothing).is_err());
}

#[test]
fn markup_is_sent_as_data_and_the_page_uses_text_only() {
    let dir = tempfile::tempdir().unwrap();
    let evil = "</div><script>alert(1)</script><img src=x onerror=alert(1)>";
    let row = json!({
        "question_id": 81, "answer_id": "x", "model_id": "m",
        "choices": [{"index": 0, "turns": [evil, evil]}], "tstamp": 0.0
    });
    let file = dir.path().join("m.jsonl");
    std::fs::write(&file, format!("{row}\n")).unwrap();
    let s = grade::start(GradeConfig {
        answers: vec![file],
        out: dir.path().join("o.jsonl"),
        grader: "t".into(),
        seed: 0,
        port: 0,
    })
    .unwrap();
    let next = get_json(s.addr(), "/api/next");
    assert_eq!(next["answer"], evil);
    let (_, page) = request(s.addr(), "GET", "/", None);
    assert!(
        !page.contains("innerHTML"),
        "the page never parses data as HTML"
    );
    assert!(!page.contains("insertAdjacentHTML"));
    assert!(!page.contains("document.write"));
    // The CSP allows only the page's own nonce'd script.
    let mut raw = TcpStream::connect(s.addr()).unwrap();
    raw.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut head = String::new();
    raw.read_to_string(&mut head).unwrap();
    let csp = head
        .lines()
        .find(|l| {
            l.to_ascii_lowercase()
                .starts_with("content-security-policy:")
        })
        .expect("a CSP header");
    assert!(csp.contains("script-src 'nonce-"), "{csp}");
    assert!(!csp.contains("unsafe-inline"), "{csp}");
}
