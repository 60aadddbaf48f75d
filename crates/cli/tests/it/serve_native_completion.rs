//! llama.cpp's `/completion` on a tiny random Gemma 3: a prompt as text or
//! as token ids, and with `return_tokens` the generated ids, whole and
//! streamed. Random weights answer in pieces that do not tokenize back to
//! the same ids, so a conversation kept as ids (its prompt, the ids
//! returned, its next words) is what lets the next turn reuse all of the
//! last one's cache; `n_probs` gives each token's log-probability and the
//! likeliest others; bodies that cannot be one prompt are a 400.

use crate::serve_common::{tiny_fixture, Server};
use serde_json::{json, Value};

fn ids(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

fn ok(server: &Server, path: &str, body: &Value) -> Value {
    let r = server.post(path, &body.to_string());
    assert_eq!(r.status, 200, "{path}: {}", r.text());
    r.json()
}

fn tokenize(server: &Server, text: &str, special: bool) -> Vec<u64> {
    ids(&ok(
        server,
        "/tokenize",
        &json!({"content": text, "add_special": special}),
    )["tokens"])
}

#[test]
fn completion_takes_and_returns_token_ids() {
    let model = tiny_fixture("gemma3/model-f32.gguf");
    let server = Server::start(model.to_str().unwrap(), &["-c", "512", "--parallel", "1"]);
    let text = "Once upon a time";
    let body = json!({"prompt": text, "n_predict": 12, "temperature": 0, "return_tokens": true});
    let first = ok(&server, "/completion", &body);
    let made = ids(&first["tokens"]);
    assert_eq!(
        made.len() as u64,
        first["tokens_predicted"].as_u64().unwrap()
    );
    assert!(!made.is_empty() && first["stop"] == true, "{first}");
    // The ids are what the text is made of, and the text is what the OpenAI
    // endpoint gives for the same prompt.
    let detok = ok(&server, "/detokenize", &json!({"tokens": made}));
    assert_eq!(detok["content"], first["content"]);
    let openai = ok(
        &server,
        "/v1/completions",
        &json!({"prompt": text, "max_tokens": 12, "temperature": 0}),
    );
    assert_eq!(openai["choices"][0]["text"], first["content"]);
    // Without `return_tokens` the field is there, empty, as llama.cpp's.
    let plain = ok(
        &server,
        "/completions",
        &json!({"prompt": text, "n_predict": 12, "temperature": 0}),
    );
    assert_eq!(
        (&plain["content"], &plain["tokens"]),
        (&first["content"], &json!([]))
    );

    conversation_as_ids(&server, text, &first, &made);
    streamed(&server, &body, &first, &made);
    probabilities(&server, &body, &made);
    refusals(&server);
}

/// `n_probs`: each sampled token with its log-probability and the
/// likeliest others, the greedy one first among them; streamed, the same.
fn probabilities(server: &Server, body: &Value, made: &[u64]) {
    let mut body = body.clone();
    body["n_probs"] = json!(3);
    let whole = ok(server, "/completion", &body)["completion_probabilities"].clone();
    let probs = whole.as_array().unwrap();
    assert_eq!(probs.len(), made.len());
    for (p, &id) in probs.iter().zip(made) {
        let top = p["top_logprobs"].as_array().unwrap();
        assert_eq!((p["id"].as_u64(), top.len()), (Some(id), 3), "{p}");
        assert_eq!(top[0]["id"], p["id"], "greedy picks the likeliest: {p}");
        assert!(
            p["logprob"].as_f64().unwrap() <= 0.0
                && p["token"].is_string()
                && p["bytes"].is_array()
        );
    }
    body["stream"] = json!(true);
    let r = server.post("/completion", &body.to_string());
    let streamed: Vec<Value> = r
        .sse_data()
        .iter()
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .flat_map(|e| {
            e["completion_probabilities"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(&streamed, probs);
}

/// The prompt as ids answers as the text did; a conversation kept as ids
/// reuses all that its last turn computed.
fn conversation_as_ids(server: &Server, text: &str, first: &Value, made: &[u64]) {
    // The same prompt as ids.
    let prompt = tokenize(server, text, true);
    let by_ids = ok(
        server,
        "/completion",
        &json!({"prompt": prompt, "n_predict": 12, "temperature": 0, "return_tokens": true}),
    );
    assert_eq!(
        (&by_ids["content"], ids(&by_ids["tokens"])),
        (&first["content"], made.to_vec())
    );

    // The conversation kept as ids: everything the last turn computed is
    // reused; its text tokenized again would not be the same ids.
    let mut next = prompt.clone();
    next.extend(made);
    next.extend(tokenize(server, " And then", false));
    let turn = ok(
        server,
        "/completion",
        &json!({"prompt": next, "n_predict": 4, "temperature": 0}),
    );
    let cached = turn["tokens_cached"].as_u64().unwrap() as usize;
    assert!(
        cached + 1 >= prompt.len() + made.len(),
        "{cached} of {} cached: {turn}",
        next.len()
    );
    let retokenized = tokenize(server, first["content"].as_str().unwrap(), false);
    eprintln!(
        "the answer's {} ids tokenize back as {} ids (equal: {})",
        made.len(),
        retokenized.len(),
        retokenized == made
    );
}

/// Streamed: the same text and the same ids, piece by piece.
fn streamed(server: &Server, body: &Value, first: &Value, made: &[u64]) {
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let r = server.post("/completion", &streamed.to_string());
    assert_eq!(r.status, 200, "{}", r.text());
    let events: Vec<Value> = r
        .sse_data()
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let content: String = events
        .iter()
        .filter_map(|e| e["content"].as_str())
        .collect();
    let all: Vec<u64> = events.iter().flat_map(|e| ids(&e["tokens"])).collect();
    assert_eq!(
        (content.as_str(), all),
        (first["content"].as_str().unwrap(), made.to_vec())
    );
    assert_eq!(events.last().unwrap()["stop"], true);
}

/// Bodies that are not one prompt, or not llama.cpp's fields, are a 400.
fn refusals(server: &Server) {
    for (bad, why) in [
        (json!({"prompt": [2, "a"]}), "text and ids mixed"),
        (json!({"prompt": ["a", "b"]}), "two prompts"),
        (json!({"n_predict": 4}), "no prompt"),
        (
            json!({"prompt": [2, 4_000_000_000u64]}),
            "an id past the vocabulary",
        ),
        (
            json!({"prompt": "a", "return_tokens": "yes"}),
            "return_tokens not a bool",
        ),
    ] {
        let r = server.post("/completion", &bad.to_string());
        assert_eq!(r.status, 400, "{why}: {}", r.text());
    }
}
