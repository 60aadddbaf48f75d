//! Tools in a model's own syntax, on tiny random models given the real
//! templates and the syntax's tokens: Gemma 4 (llama.cpp's copy of its
//! template) and FunctionGemma (vLLM's template). The prompts the server
//! renders with tools, calls and results equal, byte for byte, what
//! llama.cpp's `llama-server --jinja` renders from the same files
//! (`tests/fixtures/tools/apply-template.json`, made by
//! `scripts/native-tools-goldens.sh`); forced calls come back parsed on
//! every API, streamed and not, whatever the random weights prefer.

use crate::serve_common;

use gguf::GgufFile;
use serde_json::{json, Value};
use serve_common::{tiny_fixture, with_tokens, Server};
use std::path::{Path, PathBuf};

fn template(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tokenizer/tests/fixtures/templates")
        .join(name);
    std::fs::read_to_string(path).unwrap()
}

/// The tiny `fixture` with `tokens` on its last ids (as control tokens)
/// and the template in `template_file`, written into `dir` as `name`.
fn native_model(
    dir: &Path,
    fixture: &str,
    tokens: &[&str],
    template_file: &str,
    name: &str,
) -> PathBuf {
    let src = GgufFile::open(tiny_fixture(fixture)).unwrap();
    let n = src.get_str_array("tokenizer.ggml.tokens").unwrap().len();
    let names: Vec<(usize, &str)> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (n - 1 - i, *t))
        .collect();
    let path = dir.join(name);
    with_tokens(&src, &names, Some(&template(template_file)), &path);
    path
}

/// The tiny Gemma 4 with Gemma 4's chat and tool tokens and its real
/// template.
pub fn gemma4_native(dir: &Path) -> PathBuf {
    let tokens = [
        "<|turn>",
        "<turn|>",
        "<|think|>",
        "<channel|>",
        "<|channel>",
        "<|tool>",
        "<tool|>",
        "<|tool_call>",
        "<tool_call|>",
        "<|tool_response>",
        "<tool_response|>",
        "<|\"|>",
    ];
    native_model(
        dir,
        "gemma4_e2b/model-f32.gguf",
        &tokens,
        "google-gemma-4-31B-it.jinja",
        "gemma4-native.gguf",
    )
}

/// The tiny Gemma 3 with FunctionGemma's tokens and a FunctionGemma
/// template.
pub fn function_gemma(dir: &Path) -> PathBuf {
    let tokens = [
        "<start_function_call>",
        "<end_function_call>",
        "<escape>",
        "<start_function_declaration>",
        "<end_function_declaration>",
        "<start_function_response>",
        "<end_function_response>",
    ];
    native_model(
        dir,
        "gemma3/model-f32.gguf",
        &tokens,
        "vllm-functiongemma.jinja",
        "functiongemma-native.gguf",
    )
}

/// Where the models go: `HEARTH_NATIVE_TOOLS_DIR` when set (so the goldens
/// script can give the same files to llama.cpp), else a fresh folder.
fn models_dir() -> (Option<tempfile::TempDir>, PathBuf) {
    match std::env::var_os("HEARTH_NATIVE_TOOLS_DIR") {
        Some(d) => {
            std::fs::create_dir_all(&d).unwrap();
            (None, PathBuf::from(d))
        }
        None => {
            let t = tempfile::tempdir().unwrap();
            let p = t.path().to_path_buf();
            (Some(t), p)
        }
    }
}

fn goldens() -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tools/apply-template.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn prompts_with_tools_calls_and_results_match_llama_cpp() {
    let (_keep, dir) = models_dir();
    let servers = [
        (
            "gemma4",
            Server::start(
                gemma4_native(&dir).to_str().unwrap(),
                &["--ctx", "2048", "-t", "1"],
            ),
        ),
        (
            "functiongemma",
            Server::start(
                function_gemma(&dir).to_str().unwrap(),
                &["--ctx", "2048", "-t", "1"],
            ),
        ),
    ];
    let cases = goldens();
    assert!(cases.len() >= 8, "{} cases", cases.len());
    for case in &cases {
        let (_, s) = servers.iter().find(|(m, _)| case["model"] == *m).unwrap();
        let r = s.post("/apply-template", &case["request"].to_string());
        assert_eq!(r.status, 200, "{}: {}", case["name"], r.text());
        assert_eq!(
            r.json()["prompt"].as_str().unwrap(),
            case["prompt"].as_str().unwrap(),
            "{}",
            case["name"]
        );
    }
}

/// Tools whose arguments are held tight (numbers, enums, booleans, a
/// nested object and an array), so random weights finish a call well
/// within the token limit.
fn tight_tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "get_weather", "description": "Weather",
            "parameters": {"type": "object", "properties": {
                "city": {"type": "string", "enum": ["Oslo", "Rome"]},
                "days": {"type": "integer"},
                "metric": {"type": "boolean"},
                "at": {"type": "object", "properties": {"hour": {"type": "integer"}}, "required": ["hour"]},
                "tags": {"type": "array", "items": {"enum": ["a", "b"]}}},
                "required": ["city", "days"]}}},
        {"type": "function", "function": {"name": "add", "description": "Add",
            "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                "required": ["a", "b"]}}}
    ])
}

/// A call's arguments hold to `tight_tools`' schema for `name`.
fn check_arguments(name: &str, args: &Value) {
    let o = args.as_object().unwrap_or_else(|| panic!("{args}"));
    match name {
        "get_weather" => {
            assert!(
                ["Oslo", "Rome"].contains(&o["city"].as_str().unwrap()),
                "{args}"
            );
            assert!(o["days"].is_i64(), "{args}");
            assert!(o.get("metric").is_none_or(Value::is_boolean), "{args}");
            assert!(o.get("at").is_none_or(|a| a["hour"].is_i64()), "{args}");
            let tags = o.get("tags").map_or(&[][..], |t| t.as_array().unwrap());
            assert!(tags.iter().all(|t| t == "a" || t == "b"), "{args}");
            let known = ["city", "days", "metric", "at", "tags"];
            assert!(o.keys().all(|k| known.contains(&k.as_str())), "{args}");
        }
        "add" => assert!(
            o["a"].is_number() && o["b"].is_number() && o.len() == 2,
            "{args}"
        ),
        other => panic!("a call to {other}"),
    }
}

fn chat(tool_choice: Value, seed: u64, extra: Value) -> Value {
    let mut body = json!({
        "messages": [{"role": "user", "content": "Weather in Oslo?"}],
        "tools": tight_tools(), "tool_choice": tool_choice,
        "max_tokens": 160, "temperature": 1.0, "seed": seed,
    });
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

/// Equal values, numbers within float parsing's last bit (the stream
/// carries a number as the model wrote it, the whole call as parsed).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            x == y || (x - y).abs() <= 1e-12 * x.abs().max(y.abs())
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// The calls of a streamed chat completion: names and joined arguments.
fn streamed_calls(r: &serve_common::Resp) -> (Vec<(String, String)>, String) {
    let (mut calls, mut finish): (Vec<(String, String)>, String) = (Vec::new(), String::new());
    for d in r.sse_data() {
        if d == "[DONE]" {
            break;
        }
        let v: Value = serde_json::from_str(&d).unwrap();
        let choice = &v["choices"][0];
        if let Some(f) = choice["finish_reason"].as_str() {
            finish = f.to_string();
        }
        for tc in choice["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let i = tc["index"].as_u64().unwrap() as usize;
            if i == calls.len() {
                calls.push((String::new(), String::new()));
            }
            calls[i]
                .0
                .push_str(tc["function"]["name"].as_str().unwrap_or(""));
            calls[i]
                .1
                .push_str(tc["function"]["arguments"].as_str().unwrap_or(""));
        }
    }
    (calls, finish)
}

/// A forced chat completion (`choice`, parallel calls or not) is calls
/// that hold to their schemas, and streamed, the same calls.
fn chat_calls(s: &Server, seed: u64, choice: &Value, parallel: bool) {
    // Up to 16 calls in one reply: room for all of them.
    let max = if parallel { 900 } else { 160 };
    let body = chat(
        choice.clone(),
        seed,
        json!({"parallel_tool_calls": parallel, "max_tokens": max}),
    );
    let r = s.post("/v1/chat/completions", &body.to_string());
    assert_eq!(r.status, 200, "{}", r.text());
    let c = &r.json()["choices"][0];
    assert_eq!(c["finish_reason"], "tool_calls", "{c}");
    let calls = c["message"]["tool_calls"].as_array().unwrap();
    assert!(!calls.is_empty() && (parallel || calls.len() == 1), "{c}");
    for call in calls {
        let name = call["function"]["name"].as_str().unwrap();
        let args: Value =
            serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
        check_arguments(name, &args);
        assert!(choice == "required" || name == "add", "{c}");
    }
    // Streamed: the same calls, their arguments in fragments.
    let mut body = body;
    body["stream"] = json!(true);
    let (streamed, finish) = streamed_calls(&s.post("/v1/chat/completions", &body.to_string()));
    assert_eq!(finish, "tool_calls");
    let whole: Vec<(String, String)> = calls
        .iter()
        .map(|c| {
            (
                c["function"]["name"].as_str().unwrap().to_string(),
                c["function"]["arguments"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let parsed = |v: &[(String, String)]| -> Vec<(String, Value)> {
        v.iter()
            .map(|(n, a)| {
                (
                    n.clone(),
                    serde_json::from_str(a).unwrap_or_else(|e| panic!("{a}: {e}")),
                )
            })
            .collect()
    };
    let (a, b) = (parsed(&streamed), parsed(&whole));
    assert!(
        a.len() == b.len()
            && a.iter()
                .zip(&b)
                .all(|(x, y)| x.0 == y.0 && same(&x.1, &y.1)),
        "the stream carries the same calls: {a:?} {b:?}"
    );
}

/// Anthropic's named tool forces a call: a `tool_use` block whose input holds to
/// the schema, and streamed, the same input in `input_json_delta`s.
fn anthropic_calls(s: &Server, m: &str) {
    let tools: Vec<Value> = tight_tools()
        .as_array()
        .unwrap()
        .iter()
        .map(|t| json!({"name": t["function"]["name"], "description": "d", "input_schema": t["function"]["parameters"]}))
        .collect();
    // Greedy, so the streamed reply is the same reply; the tool whose
    // arguments are two numbers, which greedy random weights finish.
    let mut body = json!({"model": m, "max_tokens": 400, "messages": [{"role": "user", "content": "Add 2 and 3"}],
        "tools": tools, "tool_choice": {"type": "tool", "name": "add"}, "temperature": 0});
    let r = s.post("/v1/messages", &body.to_string());
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["stop_reason"], "tool_use", "{v}");
    let block = v["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "tool_use")
        .unwrap();
    check_arguments(block["name"].as_str().unwrap(), &block["input"]);
    body["stream"] = json!(true);
    let (mut name, mut input) = (String::new(), String::new());
    for d in s.post("/v1/messages", &body.to_string()).sse_data() {
        let e: Value = serde_json::from_str(&d).unwrap();
        if e["type"] == "content_block_start" && e["content_block"]["type"] == "tool_use" {
            name = e["content_block"]["name"].as_str().unwrap().to_string();
        }
        if e["delta"]["type"] == "input_json_delta" {
            input.push_str(e["delta"]["partial_json"].as_str().unwrap());
        }
    }
    let input: Value = serde_json::from_str(&input).unwrap_or_else(|e| panic!("{input}: {e}"));
    assert!(
        name == block["name"] && same(&input, &block["input"]),
        "{name} {input}"
    );
}

/// Responses' named function: a `function_call` item, and streamed, the same
/// arguments in `function_call_arguments.delta`s.
fn responses_calls(s: &Server, m: &str) {
    let tools: Vec<Value> = tight_tools()
        .as_array()
        .unwrap()
        .iter()
        .map(|t| json!({"type": "function", "name": t["function"]["name"], "parameters": t["function"]["parameters"]}))
        .collect();
    let mut body = json!({"model": m, "input": "Add 2 and 3", "max_output_tokens": 400,
        "tool_choice": {"type": "function", "name": "add"}, "tools": tools, "store": false, "temperature": 0});
    let r = s.post("/v1/responses", &body.to_string());
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let item = v["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["type"] == "function_call")
        .unwrap_or_else(|| panic!("{v}"));
    let args: Value = serde_json::from_str(item["arguments"].as_str().unwrap()).unwrap();
    check_arguments(item["name"].as_str().unwrap(), &args);
    body["stream"] = json!(true);
    let mut streamed = String::new();
    for d in s.post("/v1/responses", &body.to_string()).sse_data() {
        let e: Value = serde_json::from_str(&d).unwrap();
        if e["type"] == "response.function_call_arguments.delta" {
            streamed.push_str(e["delta"].as_str().unwrap());
        }
    }
    let streamed: Value =
        serde_json::from_str(&streamed).unwrap_or_else(|e| panic!("{streamed}: {e}"));
    assert!(same(&streamed, &args), "{streamed} {args}");
}

#[test]
fn forced_calls_parse_on_every_api_streamed_and_not() {
    let (_keep, dir) = models_dir();
    for path in [gemma4_native(&dir), function_gemma(&dir)] {
        let s = Server::start(path.to_str().unwrap(), &["--ctx", "2048", "-t", "1"]);
        let m = path.file_stem().unwrap().to_str().unwrap();
        let named = json!({"type": "function", "function": {"name": "add"}});
        for seed in 0..3 {
            for (choice, parallel) in [
                (json!("required"), false),
                (named.clone(), false),
                (json!("required"), true),
            ] {
                chat_calls(&s, seed, &choice, parallel);
            }
        }
        anthropic_calls(&s, m);
        responses_calls(&s, m);
        // Ollama: tools under `auto`; when the reply is a call, it parses.
        for seed in 0..3 {
            let r = s.post(
                "/api/chat",
                &json!({"model": m, "stream": false, "messages": [{"role": "user", "content": "Add 2 and 3"}],
                    "tools": tight_tools(), "options": {"seed": seed, "num_predict": 160}}).to_string(),
            );
            assert_eq!(r.status, 200, "{}", r.text());
            let v = r.json();
            for call in v["message"]["tool_calls"].as_array().into_iter().flatten() {
                check_arguments(
                    call["function"]["name"].as_str().unwrap(),
                    &call["function"]["arguments"],
                );
            }
        }
    }
}

#[test]
fn auto_is_a_call_text_or_the_formats_json() {
    let (_keep, dir) = models_dir();
    let s = Server::start(
        gemma4_native(&dir).to_str().unwrap(),
        &["--ctx", "2048", "-t", "1"],
    );
    let format = json!({"type": "json_schema", "json_schema": {"name": "a", "schema": {
        "type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}}});
    let (mut calls, mut answers) = (0, 0);
    for seed in 0..8 {
        for with_format in [false, true] {
            let extra = if with_format {
                json!({"response_format": format})
            } else {
                json!({})
            };
            let r = s.post(
                "/v1/chat/completions",
                &chat(json!("auto"), seed, extra).to_string(),
            );
            assert_eq!(r.status, 200, "{}", r.text());
            let c = &r.json()["choices"][0];
            match c["message"]["tool_calls"].as_array() {
                Some(list) => {
                    for call in list {
                        let args: Value =
                            serde_json::from_str(call["function"]["arguments"].as_str().unwrap())
                                .unwrap();
                        check_arguments(call["function"]["name"].as_str().unwrap(), &args);
                    }
                    calls += 1;
                }
                None if with_format && c["finish_reason"] == "stop" => {
                    let v: Value = serde_json::from_str(c["message"]["content"].as_str().unwrap())
                        .unwrap_or_else(|e| panic!("{c}: {e}"));
                    assert!(
                        v["ok"].is_boolean() && v.as_object().unwrap().len() == 1,
                        "{c}"
                    );
                    answers += 1;
                }
                None => {
                    let text = c["message"]["content"].as_str().unwrap_or_default();
                    assert!(!text.contains("<|tool_call>"), "{c}");
                    answers += 1;
                }
            }
        }
    }
    assert_eq!(calls + answers, 16);
    println!("auto: {calls} calls, {answers} answers");
}

/// Hostile tools and calls aimed at the native path: each is a quick 400
/// or an ordinary answer, the server's peak memory barely moves, and it
/// still answers afterwards.
#[test]
fn hostile_tools_and_calls_cost_little() {
    let (_keep, dir) = models_dir();
    let s = Server::start(
        gemma4_native(&dir).to_str().unwrap(),
        &["--ctx", "2048", "-t", "1"],
    );
    let before = serve_common::peak_rss_kib(s.child.id()) / 1024;
    let tool = |parameters: Value| json!([{"type": "function", "function": {"name": "f", "parameters": parameters}}]);
    // A type listed 200,000 times at each of 40 levels (written once
    // each), and a hundred thousand properties (past the grammar's bound).
    let mut listed = json!({"type": "string"});
    for _ in 0..40 {
        listed = json!({"type": vec!["object"; 5000], "properties": {"a": listed}});
    }
    let wide: serde_json::Map<String, Value> = (0..100_000)
        .map(|i| (format!("p{i}"), json!({"type": "string"})))
        .collect();
    let cycle = json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/a"}},
        "$defs": {"a": {"$ref": "#/$defs/a"}}});
    let nowhere = json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/none"}}});
    let wrap = |p: Value| json!({"type": "object", "properties": {"x": p}});
    for (what, params, choice) in [
        (
            "a type listed 5000 times at 40 levels",
            wrap(listed),
            "required",
        ),
        (
            "100,000 properties under auto",
            json!({"type": "object", "properties": wide}),
            "auto",
        ),
        ("a $ref cycle", cycle, "required"),
        ("a $ref to nothing", nowhere, "required"),
    ] {
        let body = json!({"messages": [{"role": "user", "content": "hi"}], "tools": tool(params), "tool_choice": choice, "max_tokens": 8});
        let t0 = std::time::Instant::now();
        let r = s.post("/v1/chat/completions", &body.to_string());
        let took = t0.elapsed();
        println!(
            "{what}: {} in {took:?}: {}",
            r.status,
            r.text().chars().take(200).collect::<String>()
        );
        assert!(r.status == 400 || r.status == 200, "{what}: {}", r.text());
        assert!(
            took < std::time::Duration::from_secs(20),
            "{what}: {took:?}"
        );
    }
    // A call in the history nested as deep as JSON allows, and thousands of calls.
    let mut deep = json!(1);
    for _ in 0..60 {
        deep = json!({"a": [deep]});
    }
    let many: Vec<Value> = (0..5000).map(|i| json!({"id": format!("c{i}"), "type": "function", "function": {"name": "f", "arguments": "{\"x\":1}"}})).collect();
    for (what, calls) in [
        (
            "a deep call",
            json!([{"id": "c", "type": "function", "function": {"name": "f", "arguments": deep.to_string()}}]),
        ),
        ("5000 calls", json!(many)),
    ] {
        let body = json!({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": null, "tool_calls": calls}],
            "tools": tool(json!({"type": "object"})), "max_tokens": 4});
        let t0 = std::time::Instant::now();
        let r = s.post("/v1/chat/completions", &body.to_string());
        println!(
            "{what}: {} in {:?}: {}",
            r.status,
            t0.elapsed(),
            r.text().chars().take(200).collect::<String>()
        );
        assert!(r.status == 400 || r.status == 200, "{what}: {}", r.text());
    }
    let grew = serve_common::peak_rss_kib(s.child.id()) / 1024 - before;
    println!("peak RSS growth: {grew} MiB");
    assert!(grew < 300, "{grew} MiB");
    let r = s.post(
        "/v1/chat/completions",
        &chat(json!("required"), 1, json!({})).to_string(),
    );
    assert_eq!(r.status, 200, "still answers: {}", r.text());
}
