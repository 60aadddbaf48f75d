//! `hearth serve --models DIR`: every model in a folder listed, each loaded
//! on its first request, the least recently used unloaded past
//! `--max-loaded`, an idle one unloaded past `--keep-alive`, concurrent
//! first requests served by one load, and a missing or deleted model a
//! clear error while the others keep serving. Tiny random models, so each
//! load takes milliseconds.

use crate::serve_common;

use serve_common::{serve_models, tiny_fixture, Server};
use std::time::{Duration, Instant};

/// A folder laid out as users keep models: two GGUF files at the top, and
/// a vision model with its projector in a folder of its own.
fn models_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let copy = |from: &str, to: &str| {
        let to = dir.path().join(to);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(tiny_fixture(from), to).unwrap();
    };
    copy("gemma3/model-q8_0.gguf", "tiny-gemma3.gguf");
    copy("gemma2/model-q8_0.gguf", "tiny-gemma2.gguf");
    copy("gemma3_vision/model-f32.gguf", "vision/model-f32.gguf");
    copy("gemma3_vision/mmproj-f32.gguf", "vision/mmproj-f32.gguf");
    dir
}

fn chat(server: &Server, model: &str) -> serve_common::Resp {
    server.post(
        "/v1/chat/completions",
        &serde_json::json!({
            "model": model,
            "max_tokens": 4,
            "messages": [{"role": "user", "content": "hello"}],
        })
        .to_string(),
    )
}

/// The ids `/api/ps` says are in memory.
fn in_memory(server: &Server) -> Vec<String> {
    let ps = server.request("GET", "/api/ps", &[], b"").json();
    ps["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            m["name"]
                .as_str()
                .unwrap()
                .trim_end_matches(":latest")
                .to_string()
        })
        .collect()
}

const IDS: [&str; 3] = ["tiny-gemma2", "tiny-gemma3", "vision/model-f32"];

#[test]
fn models_load_on_demand_within_max_loaded() {
    let dir = models_dir();
    let server = serve_models(dir.path(), &["--max-loaded", "2"]);
    let listed = server.request("GET", "/v1/models", &[], b"").json();
    let ids: Vec<&str> = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, IDS);
    assert!(listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .all(|m| m["loaded"] == false));
    assert_eq!(
        listed["data"][2]["capabilities"],
        serde_json::json!(["completion", "vision"])
    );
    let tags = server.request("GET", "/api/tags", &[], b"").json();
    assert_eq!(tags["models"].as_array().unwrap().len(), 3);
    assert!(in_memory(&server).is_empty());

    // Alternating over three models with room for two: every request
    // answers, and each one loads its model (the least recently used goes).
    for round in 0..2 {
        for id in IDS {
            let r = chat(&server, id);
            assert_eq!(r.status, 200, "round {round}, {id}: {}", r.text());
            assert_eq!(r.json()["model"], id);
            let loaded = in_memory(&server);
            assert!(loaded.len() <= 2, "{loaded:?}");
            assert_eq!(loaded[0], id, "the model just used is listed first");
        }
    }
    assert_eq!(server.metric("hearth_model_loads_total"), 6.0);
    assert_eq!(server.metric("hearth_models_loaded"), 2.0);
    // Every scheduler, the unloaded ones included, took its share of the
    // busy and queued gauges back when it went idle.
    assert_eq!(server.settled_metric("hearth_slots_busy", 0.0), 0.0);
    assert_eq!(server.settled_metric("hearth_queue_depth", 0.0), 0.0);
    // Loaded, the vision model reports the tower its projector holds.
    let vision = server
        .request("GET", "/v1/models/vision/model-f32", &[], b"")
        .json();
    assert_eq!(vision["loaded"], true, "{vision}");
    assert_eq!(
        vision["capabilities"],
        serde_json::json!(["completion", "vision"])
    );

    // Asking the most recent model again loads nothing.
    assert_eq!(chat(&server, "vision/model-f32").status, 200);
    assert_eq!(server.metric("hearth_model_loads_total"), 6.0);

    let missing = chat(&server, "gemma-7b");
    let message = missing.assert_error(404);
    assert_eq!(missing.json()["error"]["code"], "model_not_found");
    for id in IDS {
        assert!(message.contains(&format!("`{id}`")), "{message}");
    }
}

#[test]
fn concurrent_first_requests_share_one_load() {
    let dir = models_dir();
    let server = serve_models(dir.path(), &["--queue", "16"]);
    let answered: Vec<u16> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| s.spawn(|| chat(&server, "tiny-gemma3").status))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(answered, [200; 8]);
    assert_eq!(server.metric("hearth_model_loads_total"), 1.0);
}

#[test]
fn an_idle_model_is_unloaded_after_its_keep_alive() {
    let dir = models_dir();
    let server = serve_models(dir.path(), &["--keep-alive", "1s"]);
    assert_eq!(chat(&server, "tiny-gemma2").status, 200);
    let answered = Instant::now();
    assert_eq!(in_memory(&server), ["tiny-gemma2"]);
    while !in_memory(&server).is_empty() {
        assert!(
            answered.elapsed() < Duration::from_secs(10),
            "never unloaded"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(answered.elapsed() >= Duration::from_millis(900));

    // Ollama's way: load with an empty prompt, unload with keep_alive 0.
    let load = server.post(
        "/api/generate",
        r#"{"model":"tiny-gemma3","keep_alive":-1}"#,
    );
    assert_eq!(load.json()["done_reason"], "load", "{}", load.text());
    assert_eq!(in_memory(&server), ["tiny-gemma3"]);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        in_memory(&server),
        ["tiny-gemma3"],
        "keep_alive -1 keeps it"
    );
    let unload = server.post("/api/generate", r#"{"model":"tiny-gemma3","keep_alive":0}"#);
    assert_eq!(unload.json()["done_reason"], "unload");
    let asked = Instant::now();
    while !in_memory(&server).is_empty() {
        assert!(
            asked.elapsed() < Duration::from_secs(5),
            "keep_alive 0 did not unload"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let bad = server.post(
        "/api/generate",
        r#"{"model":"tiny-gemma3","keep_alive":"soon"}"#,
    );
    assert_eq!(bad.status, 400, "{}", bad.text());
    assert!(bad.json()["error"].as_str().unwrap().contains("keep_alive"));
}

#[test]
fn a_deleted_model_is_a_clear_error_and_the_others_serve_on() {
    let dir = models_dir();
    let mut server = serve_models(dir.path(), &[]);
    std::fs::remove_file(dir.path().join("tiny-gemma2.gguf")).unwrap();
    let r = chat(&server, "tiny-gemma2");
    let message = r.assert_error(500);
    assert_eq!(r.json()["error"]["code"], "model_load_failed");
    assert!(
        message.contains("`tiny-gemma2` could not be loaded"),
        "{message}"
    );
    assert_eq!(chat(&server, "tiny-gemma3").status, 200);
    assert_eq!(server.metric("hearth_model_load_failures_total"), 1.0);
    server.assert_alive();
}

#[test]
fn the_chat_page_is_served_unless_turned_off() {
    let dir = models_dir();
    let server = serve_models(dir.path(), &[]);
    let page = server.request("GET", "/", &[], b"");
    assert_eq!(page.status, 200);
    assert!(page
        .header("content-type")
        .unwrap()
        .starts_with("text/html"));
    let csp = page.header("content-security-policy").unwrap();
    assert!(csp.contains("default-src 'none'") && csp.contains("connect-src 'self'"));
    assert!(page.text().contains("<title>Hearth</title>"));
    // The page fetches nothing from anywhere else.
    assert!(!page.text().contains("http://") && !page.text().contains("https://"));
    drop(server);
    let server = serve_models(dir.path(), &["--no-ui"]);
    assert_eq!(server.request("GET", "/", &[], b"").status, 404);
}

#[test]
fn a_model_added_while_serving_is_listed_and_served() {
    let dir = models_dir();
    let server = serve_models(dir.path(), &[]);
    // Asked for before it exists: 404.
    chat(&server, "pulled-later").assert_error(404);
    std::fs::copy(
        tiny_fixture("gemma3/model-f32.gguf"),
        dir.path().join("pulled-later.gguf"),
    )
    .unwrap();
    let tags = server.request("GET", "/api/tags", &[], b"").json();
    let names: Vec<&str> = tags["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"pulled-later:latest"), "{names:?}");
    // Asked for by name without a listing in between: found as well.
    std::fs::copy(
        tiny_fixture("gemma2/model-q8_0.gguf"),
        dir.path().join("pulled-too.gguf"),
    )
    .unwrap();
    let r = chat(&server, "pulled-too");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(chat(&server, "pulled-later").status, 200);
}
