//! `hearth serve` keeps finished prompts' states beyond the slots: a
//! conversation whose slot another took, or whose server restarted, resumes
//! from its stored state with exactly the answer it would have had without
//! the interruption; each API key reuses only its own states unless the
//! operator shares them. Tiny random Gemma 3, sampled at temperature 1 with
//! a fixed seed, so different logits would show in the text.

mod serve_common;

use serde_json::{json, Value};
use serve_common::{Server, TINY};
use std::time::Duration;

/// A user turn long enough that reusing it shows (a few hundred tokens).
fn long_turn(topic: &str) -> String {
    (0..12)
        .map(|i| format!("{topic} line {i} says something about {topic}."))
        .collect::<Vec<_>>()
        .join(" ")
}

fn ask(server: &Server, key: Option<&str>, messages: &[Value]) -> Value {
    let body = json!({
        "messages": messages,
        "max_tokens": 24,
        "temperature": 1.0,
        "top_k": 0,
        "top_p": 1.0,
        "min_p": 0.0,
        "seed": 3,
    })
    .to_string();
    let bearer = key.map(|k| format!("Bearer {k}"));
    let mut headers = vec![("Content-Type", "application/json")];
    if let Some(b) = &bearer {
        headers.push(("Authorization", b.as_str()));
    }
    let r = server.request("POST", "/v1/chat/completions", &headers, body.as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

fn text(reply: &Value) -> String {
    reply["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn cached(reply: &Value) -> u64 {
    reply["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap()
}

/// Turn one of a conversation, and turn two's messages after it.
fn conversation(server: &Server, key: Option<&str>, topic: &str) -> (Value, Vec<Value>) {
    let first = vec![json!({"role": "user", "content": long_turn(topic)})];
    let reply = ask(server, key, &first);
    let mut second = first;
    second.push(json!({"role": "assistant", "content": text(&reply)}));
    second.push(json!({"role": "user", "content": format!("And what about {topic}?")}));
    (reply, second)
}

fn serve(args: &[&str]) -> Server {
    let mut all = vec!["--ctx", "1024", "--parallel", "1"];
    all.extend(args);
    Server::start(TINY, &all)
}

/// Turn two of the reference conversation, on a server that never lost it
/// (no store: the slot kept it).
fn uninterrupted() -> Value {
    let reference = serve(&["--cache-ram", "0"]);
    let (_, second) = conversation(&reference, None, "rivers");
    let reply = ask(&reference, None, &second);
    assert!(cached(&reply) > 200, "the slot reused turn one: {reply}");
    reply
}

#[test]
fn a_conversation_whose_slot_was_taken_resumes_from_the_store() {
    let want = uninterrupted();
    let server = serve(&["--cache-ram", "64M"]);
    let (first, second) = conversation(&server, None, "rivers");
    assert_eq!(cached(&first), 0);
    // Another conversation takes the one slot.
    conversation(&server, None, "mountains");
    let reply = ask(&server, None, &second);
    assert_eq!(cached(&reply), cached(&want), "{reply}");
    assert_eq!(text(&reply), text(&want));
    assert_eq!(server.metric("hearth_prompt_cache_hits_total"), 1.0);
    assert!(server.metric("hearth_prompt_cache_ram_bytes") > 0.0);
    assert_eq!(server.metric("hearth_prompt_cache_unloadable_total"), 0.0);
    // Without a store, the same interruption costs the whole prompt.
    let bare = serve(&["--cache-ram", "0"]);
    let (_, second) = conversation(&bare, None, "rivers");
    conversation(&bare, None, "mountains");
    assert!(cached(&ask(&bare, None, &second)) < 20);
}

#[test]
fn a_conversation_resumes_after_a_restart_from_its_file() {
    let want = uninterrupted();
    let dir = tempfile::tempdir().unwrap();
    let dir_arg = dir.path().to_str().unwrap();
    let mut server = serve(&["--cache-dir", dir_arg]);
    let (_, second) = conversation(&server, None, "rivers");
    server.sigterm();
    assert!(server.wait_exit(Duration::from_secs(30)).success());
    let files = std::fs::read_dir(dir.path()).unwrap().count();
    assert_eq!(files, 1, "one state file per conversation");

    let server = serve(&["--cache-dir", dir_arg]);
    assert!(
        server.stderr().contains("(1 found there)"),
        "{}",
        server.stderr()
    );
    let reply = ask(&server, None, &second);
    assert_eq!(cached(&reply), cached(&want), "{reply}");
    assert_eq!(text(&reply), text(&want));
    assert_eq!(server.metric("hearth_prompt_cache_disk_hits_total"), 1.0);
    // The next turn's state replaced the first one's file.
    assert_eq!(
        server.settled_metric("hearth_prompt_cache_files_written_total", 1.0),
        1.0
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    drop(server);

    // `hearth cache` lists the state, then clears it.
    let cache = |what: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_hearth"))
            .args(["cache", what, "--dir", dir_arg])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let listed = cache("ls");
    assert!(listed.contains("1 states"), "{listed}");
    let tokens = reply["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(
        listed.lines().nth(1).is_some_and(|l| l
            .split_whitespace()
            .nth(1)
            .and_then(|t| t.parse::<u64>().ok())
            .is_some_and(|t| t > tokens)),
        "the state holds the prompt and its answer: {listed}"
    );
    assert!(cache("clear").contains("removed 1 states"));
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    assert!(cache("ls").contains("0 states"));
}

#[test]
fn each_key_reuses_only_its_own_states_unless_shared() {
    let server = serve(&["--api-key", "key-one,key-two", "--cache-ram", "64M"]);
    let first = vec![json!({"role": "user", "content": long_turn("rivers")})];
    assert_eq!(cached(&ask(&server, Some("key-one"), &first)), 0);
    // The same prompt with the other key: nothing reused, from the slot or
    // the store; the first key then finds its own state.
    assert_eq!(cached(&ask(&server, Some("key-two"), &first)), 0);
    assert!(cached(&ask(&server, Some("key-one"), &first)) > 200);
    assert_eq!(server.metric("hearth_prompt_cache_hits_total"), 1.0);

    let shared = serve(&[
        "--api-key",
        "key-one,key-two",
        "--cache-ram",
        "64M",
        "--cache-shared",
    ]);
    assert_eq!(cached(&ask(&shared, Some("key-one"), &first)), 0);
    assert!(cached(&ask(&shared, Some("key-two"), &first)) > 200);
    // Both keys answer; a third does not.
    let r = shared.request(
        "POST",
        "/v1/chat/completions",
        &[("Authorization", "Bearer key-three")],
        b"{}",
    );
    assert_eq!(r.status, 401);
}
