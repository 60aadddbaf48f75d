//! Thinking on a tiny random Gemma 4 whose vocabulary is given the template's
//! thinking tokens (`<|turn>`, `<turn|>`, `<|think|>`, `<|channel>`,
//! `<channel|>`): the server returns the thought as `reasoning_content`
//! and the answer as `content`, streamed and not, closes the thought at
//! `thinking_budget`, and leaves thinking off unless asked.
//!
//! The weights are random, so the model is made to open the thought
//! channel: the token it picks first after the thinking prompt is renamed
//! `<|channel>`.

use crate::serve_common;

use engine::{Engine, RunOptions, Sampler, SamplingParams};
use gguf::GgufFile;
use serde_json::{json, Value};
use serve_common::{with_tokens, Resp, Server};
use std::path::Path;

const TINY_GEMMA4: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/fixtures/tiny/gemma4_e2b/model-f32.gguf"
);

/// The first token greedy decoding picks after a thinking prompt of `user`.
fn first_token(path: &Path, user: &str) -> u32 {
    let engine = Engine::load(
        path,
        &RunOptions {
            threads: Some(1),
            ctx: Some(256),
            ..Default::default()
        },
    )
    .unwrap();
    let ids = engine
        .prompt(&engine::PromptRequest::chat_with(
            &[engine::ChatMessage::user(user)],
            engine::ChatOptions::reply(true),
        ))
        .map(|p| p.ids)
        .unwrap();
    let mut s = engine.session();
    s.feed(&ids).unwrap();
    let logits = s.last_logits().unwrap();
    Sampler::new(SamplingParams::greedy()).sample(logits, &ids)
}

#[test]
fn thought_and_answer_come_back_apart() {
    let src = GgufFile::open(TINY_GEMMA4).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("thinking.gguf");
    let user = write_thinking_model(&src, &path);

    let mut s = Server::start(path.to_str().unwrap(), &["--ctx", "256", "-t", "1"]);
    let on = json!({"chat_template_kwargs": {"enable_thinking": true}, "thinking_budget": 4});
    let (thought, answer) = thinking_gives_a_thought_then_an_answer(&s, ask(&user, on.clone()));

    // Streamed: the reasoning deltas and content deltas join to the same.
    let mut body = ask(&user, on);
    body["stream"] = json!(true);
    let r = s.post("/v1/chat/completions", &body.to_string());
    assert_eq!(
        streamed_thought_and_answer(&r),
        (thought, answer),
        "streamed the same"
    );

    thinking_is_off_unless_asked_and_a_bad_switch_refused(&s, &user);
    s.assert_alive();
}

/// Writes to `path` the tiny Gemma 4 with the template's markers on its
/// last ids, the thought channel's opener moved onto the token the model
/// picks first; returns the user message it picks that token after.
fn write_thinking_model(src: &GgufFile, path: &Path) -> String {
    let n = src.get_str_array("tokenizer.ggml.tokens").unwrap().len();
    let mut names = vec![
        (n - 1, "<|turn>"),
        (n - 2, "<turn|>"),
        (n - 3, "<|think|>"),
        (n - 4, "<channel|>"),
        (n - 5, "<|channel>"),
    ];
    with_tokens(src, &names, None, path);
    let (user, first) = renamable_first_pick(src, path, n)
        .expect("a prompt after which the model picks a renamable token");
    names[4] = (first, "<|channel>");
    with_tokens(src, &names, None, path);
    assert_eq!(
        first_token(path, &user) as usize,
        first,
        "renaming it keeps it first"
    );
    user
}

/// A user message and the token the model at `path` picks first after it,
/// where that token can be renamed without changing the prompt's tokens:
/// it is not one of the last five (the markers), not in the prompt, and
/// not part of any merge. Prompts are tried until one fits.
fn renamable_first_pick(src: &GgufFile, path: &Path, n: usize) -> Option<(String, usize)> {
    let texts = src.get_str_array("tokenizer.ggml.tokens").unwrap();
    let merges = src.get_str_array("tokenizer.ggml.merges").unwrap();
    let in_merges = |t: &str| {
        merges.iter().any(|m| {
            let (a, b) = m.split_once(' ').unwrap_or((m, ""));
            a == t || b == t || format!("{a}{b}") == t
        })
    };
    let users: Vec<String> = [
        "hi",
        "hello",
        "why",
        "ok",
        "tell me",
        "yes",
        "no",
        "what is it",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain((b'a'..=b'z').map(|c| (c as char).to_string()))
    .collect();
    for user in &users {
        let first = first_token(path, user) as usize;
        let engine = Engine::load(path, &RunOptions::default()).unwrap();
        let prompt = engine
            .prompt(&engine::PromptRequest::chat_with(
                &[engine::ChatMessage::user(user.as_str())],
                engine::ChatOptions::reply(true),
            ))
            .map(|p| p.ids)
            .unwrap();
        if first < n - 5 && !prompt.contains(&(first as u32)) && !in_merges(&texts[first]) {
            return Some((user.clone(), first));
        }
    }
    None
}

/// A greedy chat request of 14 tokens from `user`, with `extra`'s fields.
fn ask(user: &str, extra: Value) -> Value {
    let mut body = json!({
        "messages": [{"role": "user", "content": user}],
        "max_tokens": 14,
        "temperature": 0,
    });
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

/// With thinking on and a budget, the reply holds a thought (without the
/// channel's markup) and an answer after the budget closed it, and all
/// the tokens asked for; returns the thought and the answer.
fn thinking_gives_a_thought_then_an_answer(s: &Server, body: Value) -> (String, String) {
    let r = s.post("/v1/chat/completions", &body.to_string());
    assert_eq!(r.status, 200, "{}", r.text());
    let msg = &r.json()["choices"][0]["message"];
    let thought = msg["reasoning_content"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let answer = msg["content"].as_str().unwrap_or_default().to_string();
    assert!(!thought.is_empty(), "a thought: {msg}");
    assert!(
        !answer.is_empty(),
        "an answer after the budget closed the thought: {msg}"
    );
    assert!(
        !thought.contains("thought\n") && !answer.contains("channel"),
        "{msg}"
    );
    println!("thinking on: {msg}");
    let usage = &r.json()["usage"];
    assert_eq!(
        usage["completion_tokens"], 14,
        "the budget left room for the answer: {usage}"
    );
    (thought, answer)
}

/// The reasoning deltas and the content deltas of a streamed reply, each
/// joined.
fn streamed_thought_and_answer(r: &Resp) -> (String, String) {
    let (mut t, mut a) = (String::new(), String::new());
    for d in r.sse_data() {
        if d == "[DONE]" {
            break;
        }
        let v: Value = serde_json::from_str(&d).unwrap();
        let delta = &v["choices"][0]["delta"];
        t.push_str(delta["reasoning_content"].as_str().unwrap_or(""));
        a.push_str(delta["content"].as_str().unwrap_or(""));
    }
    (t, a)
}

/// Off unless asked: no thought, and the prompt carries the empty channel.
/// A switch that is not a boolean is a 400.
fn thinking_is_off_unless_asked_and_a_bad_switch_refused(s: &Server, user: &str) {
    let r = s.post("/v1/chat/completions", &ask(user, json!({})).to_string());
    assert_eq!(r.status, 200);
    assert!(
        r.json()["choices"][0]["message"]
            .get("reasoning_content")
            .is_none(),
        "{}",
        r.text()
    );
    let r = s.post(
        "/v1/chat/completions",
        &ask(
            user,
            json!({"chat_template_kwargs": {"enable_thinking": "yes"}}),
        )
        .to_string(),
    );
    r.assert_error(400);
}

#[test]
fn a_model_that_does_not_think_ignores_the_switch() {
    let mut s = Server::start(serve_common::TINY, &["--ctx", "128", "-t", "1"]);
    let r = s.post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "think": true})
            .to_string(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.json()["choices"][0]["message"]
        .get("reasoning_content")
        .is_none());
    s.assert_alive();
}
