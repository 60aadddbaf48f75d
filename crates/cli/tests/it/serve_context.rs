//! Chats that outgrow the context on the real model at `--ctx 512`: under
//! `--context-overflow truncate` (the default) every turn of a 12-turn chat
//! is answered, the dropped turns are told (header and usage), and the
//! slot's cache is reused after a truncation; under `error` the chat gets a
//! 400 naming both sizes.

use crate::serve_common;

use serde_json::{json, Value};
use serve_common::{real_model, Server};

const QUESTION: &str = "Tell me one more thing about the history of bread, the grains it was made from, the ovens people used, and how the recipes changed from one century to the next.";

/// Play a 12-turn chat; each turn's (status, body, dropped-turns header).
fn play(s: &Server) -> Vec<(u16, Value, Option<String>)> {
    let mut messages =
        vec![json!({"role": "system", "content": "You are a patient history teacher."})];
    let mut out = Vec::new();
    for turn in 0..12 {
        messages.push(json!({"role": "user", "content": format!("Turn {turn}. {QUESTION}")}));
        let body = json!({"messages": messages, "max_tokens": 40, "temperature": 0});
        let r = s.post("/v1/chat/completions", &body.to_string());
        let dropped = r.header("x-hearth-dropped-turns").map(str::to_string);
        let v = r.json();
        let reply = v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or("")
            .to_string();
        messages.push(json!({"role": "assistant", "content": reply}));
        out.push((r.status, v, dropped));
    }
    out
}

#[test]
fn a_long_chat_is_truncated_by_turns_and_keeps_its_cache() {
    let model = real_model();
    let s = Server::start(model.to_str().unwrap(), &["--ctx", "512", "-t", "2"]);
    let turns = play(&s);
    for (i, (status, v, _)) in turns.iter().enumerate() {
        assert_eq!(*status, 200, "turn {i}: {v}");
        assert!(
            v["usage"]["prompt_tokens"].as_u64().unwrap() + 40 <= 512,
            "turn {i}: {v}"
        );
    }
    let first_cut = turns
        .iter()
        .position(|(_, _, d)| d.is_some())
        .expect("the chat outgrew 512 tokens and turns were dropped");
    let (_, v, header) = &turns[first_cut];
    let dropped = header.as_deref().unwrap().parse::<u64>().unwrap();
    assert!(
        dropped >= 1 && v["usage"]["dropped_turns"] == dropped,
        "{v}"
    );
    // After a truncation the next turn starts with the same kept turns: the
    // slot's cache holds them and only the new part is prefilled.
    let reused: Vec<u64> = turns[first_cut + 1..]
        .iter()
        .map(|(_, v, _)| {
            v["usage"]["prompt_tokens_details"]["cached_tokens"]
                .as_u64()
                .unwrap()
        })
        .collect();
    eprintln!(
        "truncated first at turn {first_cut} ({dropped} turns); cached tokens after: {reused:?}"
    );
    assert!(reused.first().is_some_and(|&c| c > 100), "{reused:?}");
}

#[test]
fn under_error_a_long_chat_gets_a_400_naming_both_sizes() {
    let model = real_model();
    let mut s = Server::start(
        model.to_str().unwrap(),
        &["--ctx", "512", "-t", "2", "--context-overflow", "error"],
    );
    let turns = play(&s);
    let (status, v, _) = turns
        .iter()
        .find(|(status, _, _)| *status != 200)
        .expect("some turn outgrew the context");
    assert_eq!(*status, 400, "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("512") && v["error"]["code"] == "context_length_exceeded",
        "{msg}"
    );
    s.assert_alive();
}
