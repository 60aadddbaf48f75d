//! `hearth serve` keeps finished prompts' states beyond the slots: a
//! conversation whose slot another took, or whose server restarted, resumes
//! from its stored state with exactly the answer it would have had without
//! the interruption; each API key reuses only its own states unless the
//! operator shares them. Tiny random Gemma 3, sampled at temperature 1 with
//! a fixed seed, so different logits would show in the text.

use crate::serve_common;

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

/// `POST /slots/0?action=...` with `body`, as `key`.
fn slot_action(server: &Server, key: Option<&str>, action: &str, body: &str) -> (u16, Value) {
    let bearer = key.map(|k| format!("Bearer {k}"));
    let mut headers = vec![("Content-Type", "application/json")];
    if let Some(b) = &bearer {
        headers.push(("Authorization", b.as_str()));
    }
    let path = format!("/slots/0?action={action}");
    let r = server.request("POST", &path, &headers, body.as_bytes());
    let json = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
    (r.status, json)
}

#[test]
fn a_slot_saved_by_hand_restores_on_another_server_with_the_same_answer() {
    let want = uninterrupted();
    let dir = tempfile::tempdir().unwrap();
    let dir_arg = dir.path().join("slots");
    let dir_arg = dir_arg.to_str().unwrap();
    // No store: what the second server reuses comes from the file alone.
    let args = ["--cache-ram", "0", "--slot-save-path", dir_arg];
    let server = serve(&args);
    let (_, second) = conversation(&server, None, "rivers");
    let (status, saved) = slot_action(&server, None, "save", r#"{"filename": "rivers.bin"}"#);
    assert_eq!(status, 200, "{saved}");
    let file = std::path::Path::new(dir_arg).join("rivers.bin");
    assert_eq!(saved["n_written"], std::fs::metadata(&file).unwrap().len());
    assert_eq!(saved["id_slot"], 0);
    assert_eq!(saved["filename"], "rivers.bin");
    let n_saved = saved["n_saved"].as_u64().unwrap();
    assert!(n_saved > cached(&want), "{saved}");
    let slots = server.request("GET", "/slots", &[], b"").json();
    assert_eq!(slots[0]["id"], 0);
    assert_eq!(slots[0]["n_ctx"], 1024);
    assert_eq!(slots[0]["is_processing"], false);
    drop(server);

    let server = serve(&args);
    let (status, restored) = slot_action(&server, None, "restore", r#"{"filename": "rivers.bin"}"#);
    assert_eq!(status, 200, "{restored}");
    assert_eq!(restored["n_restored"], n_saved);
    assert_eq!(restored["n_read"], saved["n_written"]);
    let reply = ask(&server, None, &second);
    assert_eq!(cached(&reply), cached(&want), "{reply}");
    assert_eq!(text(&reply), text(&want));
    // Erased, the slot holds nothing: the same turn is computed afresh.
    let (status, erased) = slot_action(&server, None, "erase", "");
    assert_eq!(status, 200, "{erased}");
    assert!(erased["n_erased"].as_u64().unwrap() > n_saved, "{erased}");
    assert_eq!(cached(&ask(&server, None, &second)), 0);
}

#[test]
fn slot_files_refuse_other_keys_bad_names_and_damaged_files() {
    let bare = serve(&["--cache-ram", "0"]);
    let (status, _) = slot_action(&bare, None, "save", r#"{"filename": "a.bin"}"#);
    assert_eq!(status, 501, "slot files are off without --slot-save-path");
    // A folder at its bound takes no more.
    let small = tempfile::tempdir().unwrap();
    let small_arg = small.path().to_str().unwrap();
    let tight = serve(&["--slot-save-path", small_arg, "--slot-save-disk", "4K"]);
    conversation(&tight, None, "rivers");
    let (status, full) = slot_action(&tight, None, "save", r#"{"filename": "a.bin"}"#);
    assert_eq!(status, 507, "{full}");
    assert_eq!(std::fs::read_dir(small.path()).unwrap().count(), 0);

    let dir = tempfile::tempdir().unwrap();
    let dir_arg = dir.path().to_str().unwrap();
    let server = serve(&["--api-key", "key-one,key-two", "--slot-save-path", dir_arg]);
    let (one, two) = (Some("key-one"), Some("key-two"));
    conversation(&server, one, "rivers");
    let file = |name: &str| format!(r#"{{"filename": "{name}"}}"#);
    assert_eq!(slot_action(&server, one, "save", &file("a.bin")).0, 200);
    // The other key may not take, erase or restore the first key's state.
    assert_eq!(slot_action(&server, two, "save", &file("b.bin")).0, 403);
    assert_eq!(slot_action(&server, two, "erase", "").0, 403);
    let (status, refused) = slot_action(&server, two, "restore", &file("a.bin"));
    assert_eq!(status, 400, "{refused}");
    assert!(refused.to_string().contains("another API key"), "{refused}");
    assert_eq!(slot_action(&server, one, "restore", &file("a.bin")).0, 200);
    // Names that leave the folder or hide, missing and damaged files,
    // unknown actions and slots.
    for name in ["../a.bin", "/etc/passwd", ".a.bin", "a b", ""] {
        assert_eq!(
            slot_action(&server, one, "save", &file(name)).0,
            400,
            "{name}"
        );
    }
    assert_eq!(
        slot_action(&server, one, "restore", &file("none.bin")).0,
        404
    );
    let whole = std::fs::read(dir.path().join("a.bin")).unwrap();
    std::fs::write(dir.path().join("cut.bin"), &whole[..whole.len() / 2]).unwrap();
    let (status, refused) = slot_action(&server, one, "restore", &file("cut.bin"));
    assert_eq!(status, 400, "{refused}");
    assert!(
        refused.to_string().contains("not a whole state"),
        "{refused}"
    );
    assert_eq!(slot_action(&server, one, "burn", "").0, 400);
    let r = server.request(
        "POST",
        "/slots/7?action=erase",
        &[("Authorization", "Bearer key-one")],
        b"",
    );
    assert_eq!(r.status, 400, "{}", r.text());
    // Without a key, or from a web page, nothing happens.
    assert_eq!(slot_action(&server, None, "erase", "").0, 401);
    let r = server.request(
        "POST",
        "/slots/0?action=erase",
        &[
            ("Authorization", "Bearer key-one"),
            ("Origin", "https://evil.example"),
        ],
        b"",
    );
    assert_eq!(r.status, 403, "{}", r.text());
    // The state survived every refusal.
    let (status, erased) = slot_action(&server, one, "erase", "");
    assert_eq!(status, 200);
    assert!(erased["n_erased"].as_u64().unwrap() > 200, "{erased}");
}

#[test]
fn conversations_that_share_a_system_prompt_hold_its_rows_once() {
    let serve = |args: &[&str]| {
        Server::start(
            TINY,
            &[&["--ctx", "2048", "--parallel", "1"], args].concat(),
        )
    };
    let policy = ["policy", "rules", "manners"].map(long_turn).join(" ");
    let system = json!({"role": "system", "content": policy});
    let opener = |topic: &str| {
        vec![
            system.clone(),
            json!({"role": "user", "content": long_turn(topic).split_inclusive('.').take(4).collect::<String>()}),
        ]
    };
    let then = |mut messages: Vec<Value>, reply: &Value| {
        messages.push(json!({"role": "assistant", "content": text(reply)}));
        messages.push(json!({"role": "user", "content": "And then?"}));
        messages
    };
    // The reference: the first conversation alone, on a server without a
    // store.
    let reference = serve(&["--cache-ram", "0"]);
    let want = ask(
        &reference,
        None,
        &then(opener("rivers"), &ask(&reference, None, &opener("rivers"))),
    );
    let server = serve(&["--cache-ram", "64M"]);
    let (mut first, mut grew) = (None, Vec::new());
    for (n, topic) in ["rivers", "mountains", "forests", "deserts"]
        .iter()
        .enumerate()
    {
        let before = server.metric("hearth_prompt_cache_ram_bytes");
        let reply = ask(&server, None, &opener(topic));
        first.get_or_insert(reply);
        server.settled_metric("hearth_prompt_cache_stored_total", (n + 1) as f64);
        grew.push(server.metric("hearth_prompt_cache_ram_bytes") - before);
    }
    eprintln!("prompt cache RAM after each conversation grew by {grew:?}");
    // Each later conversation adds its own rows, not the system prompt's
    // again (those its global layer holds, and its rings where they still
    // reach into it).
    for g in &grew[1..] {
        assert!(*g < 0.5 * grew[0], "RAM grew by {grew:?}");
    }
    // The first conversation resumes from its state, rows shared with the
    // others included, with the answer it has alone.
    let reply = ask(
        &server,
        None,
        &then(opener("rivers"), first.as_ref().unwrap()),
    );
    assert_eq!(text(&reply), text(&want));
    assert_eq!(cached(&reply), cached(&want));
    assert!(server.metric("hearth_prompt_cache_hits_total") >= 1.0);
}
