//! llama.cpp's utility endpoints (`/tokenize`, `/detokenize`,
//! `/apply-template`, `/props`) and `--cors` on the tiny Gemma 3: shapes as
//! llama.cpp's server answers, bad input refused, the key required.

use crate::serve_common;

use serde_json::{json, Value};
use serve_common::{Server, TINY};

#[test]
fn tokenize_detokenize_template_and_props() {
    let mut s = Server::start(TINY, &["--ctx", "64", "--parallel", "2"]);
    let r = s.post("/tokenize", &json!({"content": "hello world"}).to_string());
    assert_eq!(r.status, 200, "{}", r.text());
    let ids: Vec<u64> = r.json()["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert!(
        !ids.is_empty() && ids[0] != 2,
        "no BOS unless add_special: {ids:?}"
    );
    let with_bos = s.post(
        "/tokenize",
        &json!({"content": "hello world", "add_special": true}).to_string(),
    );
    assert_eq!(with_bos.json()["tokens"][0], 2);

    // Pieces: text where the bytes are UTF-8, the bytes where they are not
    // (the tiny vocabulary spells `é` with byte tokens).
    let r = s.post(
        "/tokenize",
        &json!({"content": "hello é", "with_pieces": true}).to_string(),
    );
    let pieces = r.json()["tokens"].as_array().unwrap().clone();
    let joined: Vec<u8> = pieces
        .iter()
        .flat_map(|p| match &p["piece"] {
            Value::String(t) => t.as_bytes().to_vec(),
            Value::Array(b) => b.iter().map(|x| x.as_u64().unwrap() as u8).collect(),
            other => panic!("piece {other}"),
        })
        .collect();
    assert_eq!(String::from_utf8(joined).unwrap(), "hello é");
    assert!(pieces.iter().any(|p| p["piece"].is_array()), "{pieces:?}");

    let r = s.post("/detokenize", &json!({"tokens": ids}).to_string());
    assert_eq!(r.json()["content"], "hello world");
    let msg = s
        .post("/detokenize", &json!({"tokens": [5, 9999999]}).to_string())
        .assert_error(400);
    assert!(msg.contains("9999999"), "{msg}");
    s.post("/tokenize", r#"{"content": 5}"#).assert_error(400);
    s.post("/tokenize", "{not json").assert_error(400);

    let r = s.post(
        "/apply-template",
        &json!({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]})
            .to_string(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let prompt = r.json()["prompt"].as_str().unwrap().to_string();
    assert!(
        prompt.contains("Hi") && prompt.contains("Be brief."),
        "{prompt}"
    );
    s.post("/apply-template", r#"{"messages": []}"#)
        .assert_error(400);

    let props = s.request("GET", "/props", &[], b"").json();
    assert_eq!(props["total_slots"], 2, "{props}");
    assert_eq!(props["default_generation_settings"]["n_ctx"], 64);
    assert_eq!(props["default_generation_settings"]["params"]["top_k"], 40);
    assert_eq!(props["bos_token"], "<bos>");
    assert_eq!(props["modalities"]["vision"], false);
    s.assert_alive();
}

#[test]
fn cors_is_off_unless_asked_and_the_key_guards_the_utilities() {
    let preflight = [
        ("Origin", "http://app.example"),
        ("Access-Control-Request-Method", "POST"),
    ];
    let s = Server::start(TINY, &["--api-key", "sekret"]);
    let r = s.request("OPTIONS", "/v1/chat/completions", &preflight, b"");
    assert!(r.header("access-control-allow-origin").is_none());
    s.post("/tokenize", r#"{"content": "x"}"#).assert_error(401);
    let r = s.request(
        "POST",
        "/tokenize",
        &[("Authorization", "Bearer sekret")],
        br#"{"content": "x"}"#,
    );
    assert_eq!(r.status, 200);
    // Anthropic's clients send the key as `x-api-key`.
    let r = s.request(
        "POST",
        "/tokenize",
        &[("x-api-key", "sekret")],
        br#"{"content": "x"}"#,
    );
    assert_eq!(r.status, 200);
    let r = s.request(
        "POST",
        "/tokenize",
        &[("x-api-key", "wrong")],
        br#"{"content": "x"}"#,
    );
    assert_eq!(r.status, 401);

    let s = Server::start(
        TINY,
        &["--api-key", "sekret", "--cors", "http://app.example"],
    );
    // The preflight is answered before the key is asked for.
    let r = s.request("OPTIONS", "/v1/chat/completions", &preflight, b"");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("http://app.example")
    );
    let r = s.request(
        "GET",
        "/v1/models",
        &[
            ("Origin", "http://app.example"),
            ("Authorization", "Bearer sekret"),
        ],
        b"",
    );
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("http://app.example")
    );
    let r = s.request(
        "GET",
        "/v1/models",
        &[
            ("Origin", "http://other.example"),
            ("Authorization", "Bearer sekret"),
        ],
        b"",
    );
    assert!(r.header("access-control-allow-origin").is_none());

    let s = Server::start(TINY, &["--cors", "*"]);
    let r = s.request("GET", "/health", &[("Origin", "http://any.example")], b"");
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
}
