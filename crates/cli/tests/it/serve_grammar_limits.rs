//! Hostile grammars and schemas against `hearth serve`: each is refused
//! with a 400 `invalid_grammar` that names its limit, fast and in bounded
//! memory, on every API that takes one, and the server stays up. Before
//! these bounds, a chain of a thousand rules or `$ref`s overflowed the
//! compiler's stack and aborted the process, and a few KiB of `allOf` or
//! `uniqueItems` took GiB.

use crate::serve_common;

use serde_json::{json, Value};
use serve_common::{peak_rss_kib, Server, TINY};
use std::time::{Duration, Instant};

/// A GBNF grammar of `n` rules, each using the next.
fn gbnf_chain(n: usize) -> String {
    let mut s = String::from("root ::= r0\n");
    for i in 0..n {
        s.push_str(&format!("r{i} ::= \"a\" r{}\n", i + 1));
    }
    s + &format!("r{n} ::= \"a\"\n")
}

/// The same chain in Lark.
fn lark_chain(n: usize) -> String {
    let mut s = String::from("start: r0\n");
    for i in 0..n {
        s.push_str(&format!("r{i}: \"a\" r{}\n", i + 1));
    }
    s + &format!("r{n}: \"a\"\n")
}

/// A schema whose `$defs` chain `n` deep, each through an object property,
/// its references written from `root` (the pointer of the schema in the
/// document the compiler gets).
fn ref_chain_at(n: usize, root: &str) -> Value {
    let mut defs = serde_json::Map::new();
    for i in 0..n {
        let next = format!("{root}/$defs/d{}", i + 1);
        defs.insert(
            format!("d{i}"),
            json!({"type": "object", "properties": {"a": {"$ref": next}}}),
        );
    }
    defs.insert(format!("d{n}"), json!({"type": "integer"}));
    json!({"$defs": defs, "$ref": format!("{root}/$defs/d0")})
}

fn ref_chain(n: usize) -> Value {
    ref_chain_at(n, "#")
}

/// An `allOf` of `n` members, each naming one property.
fn all_of(n: usize) -> Value {
    let members: Vec<Value> = (0..n)
        .map(|i| json!({"properties": {format!("p{i}"): true}}))
        .collect();
    json!({"allOf": members})
}

/// `arrays` arrays of unique items over one enum of six 10 KB strings, its
/// reference written from `root`.
fn shared_unique_enum_at(arrays: usize, root: &str) -> Value {
    let values: Vec<String> = (0..6)
        .map(|i| format!("{i}{}", "x".repeat(10_000)))
        .collect();
    let props: serde_json::Map<String, Value> = (0..arrays)
        .map(|i| {
            let e = format!("{root}/$defs/E");
            let a = json!({"type": "array", "items": {"$ref": e}, "uniqueItems": true});
            (format!("p{i}"), a)
        })
        .collect();
    json!({"$defs": {"E": {"enum": values}}, "type": "object", "properties": props})
}

/// A chat body with `extra` fields.
fn chat(extra: Value) -> String {
    let mut body = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body.to_string()
}

fn response_format(schema: Value) -> Value {
    json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}})
}

/// Where a tool's parameters sit in the schema of a call.
const TOOL_ROOT: &str = "#/properties/arguments";

/// A tool whose parameters are `schema`, called or not (`auto`), one call
/// a reply.
fn tool(schema: Value) -> Value {
    json!({"tools": [{"type": "function", "function": {"name": "f", "parameters": schema}}],
           "tool_choice": "auto", "parallel_tool_calls": false})
}

/// POST `body` to `path`; the 400's message (OpenAI's `invalid_grammar`
/// shape, or Ollama's `{"error": …}`), after asserting it came fast.
#[track_caller]
fn refused(s: &Server, path: &str, body: &str) -> String {
    let t0 = Instant::now();
    let r = s.post(path, body);
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(5), "{path} took {took:?}");
    assert_eq!(r.status, 400, "{path}: {}", r.text());
    eprintln!("{path} refused in {took:?}: {}", r.text());
    let v = r.json();
    match &v["error"] {
        Value::String(m) => m.clone(),
        e => {
            assert_eq!(e["code"], "invalid_grammar", "{v}");
            e["message"].as_str().unwrap().to_string()
        }
    }
}

#[test]
fn deep_grammars_are_refused_on_every_api_and_the_server_lives() {
    let mut s = Server::start(TINY, &["--ctx", "131072"]);
    let chain = ref_chain(1000);
    let deep_regex = format!("{}a{}", "(".repeat(1000), ")".repeat(1000));
    let ollama = json!({"model": "model-f32", "messages": [{"role": "user", "content": "hi"}],
                        "stream": false, "format": chain});
    let responses = json!({"input": "hi", "max_output_tokens": 4, "text": {"format":
        {"type": "json_schema", "name": "x", "schema": chain}}});
    for (path, body) in [
        (
            "/v1/chat/completions",
            chat(json!({"grammar": gbnf_chain(1000)})),
        ),
        (
            "/v1/chat/completions",
            chat(json!({"lark_grammar": lark_chain(1000)})),
        ),
        ("/v1/chat/completions", chat(response_format(chain.clone()))),
        ("/v1/chat/completions", chat(json!({"json_schema": chain}))),
        (
            "/v1/chat/completions",
            chat(tool(ref_chain_at(1000, TOOL_ROOT))),
        ),
        ("/v1/chat/completions", chat(json!({"regex": deep_regex}))),
        (
            "/v1/completions",
            json!({"prompt": "hi", "max_tokens": 4, "grammar": gbnf_chain(1000)}).to_string(),
        ),
        ("/v1/responses", responses.to_string()),
        ("/api/chat", ollama.to_string()),
    ] {
        let m = refused(&s, path, &body);
        assert!(m.contains("256 levels"), "{path}: {m}");
    }
    s.assert_alive();
}

#[test]
fn amplifying_schemas_are_refused_by_the_byte_limit_in_bounded_memory() {
    let mut s = Server::start(TINY, &["--ctx", "131072"]);
    // Warm the grammar machinery first, so its one-time cost is not counted.
    let r = s.post("/v1/chat/completions", &chat(json!({"regex": "a"})));
    assert_eq!(r.status, 200, "{}", r.text());
    let before = peak_rss_kib(s.child.id());
    for body in [
        chat(response_format(all_of(3000))),
        chat(tool(shared_unique_enum_at(16, TOOL_ROOT))),
        chat(json!({"json_schema": shared_unique_enum_at(16, "#")})),
    ] {
        let m = refused(&s, "/v1/chat/completions", &body);
        assert!(
            m.contains("262144 bytes") && m.contains("--max-grammar-bytes"),
            "{m}"
        );
    }
    let after = peak_rss_kib(s.child.id());
    eprintln!("peak RSS {before} KiB before the amplifiers, {after} KiB after");
    assert!(
        after < before + 64 * 1024,
        "peak RSS grew {before} -> {after} KiB"
    );
    s.assert_alive();
}

#[test]
fn bad_regexes_are_400_on_every_path() {
    let mut s = Server::start(TINY, &["--ctx", "131072"]);
    let pattern = json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "(("}},
                         "required": ["a"]});
    for body in [
        chat(json!({"regex": "(unclosed"})),
        chat(json!({"regex": format!("{}(", "a".repeat(5000))})),
        chat(response_format(pattern.clone())),
        chat(json!({"json_schema": {"type": "object", "patternProperties": {"((": true}}})),
        chat(json!({"lark_grammar": "start: /((/"})),
        chat(tool(pattern.clone())),
    ] {
        let m = refused(&s, "/v1/chat/completions", &body);
        assert!(
            m.contains("regex parse error") || m.contains("invalid regex"),
            "{m}"
        );
    }
    let ollama = json!({"model": "model-f32", "messages": [{"role": "user", "content": "hi"}],
                        "stream": false, "format": pattern});
    refused(&s, "/api/chat", &ollama.to_string());
    s.assert_alive();
}

/// `n` choices under one grammar: compiled once, each choice on its own
/// copy, each output a match.
#[test]
fn choices_share_one_compiled_grammar() {
    let s = Server::start(TINY, &["--ctx", "131072"]);
    let body = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8,
                      "n": 3, "seed": 1, "temperature": 1.0, "regex": "(yes|no)-[0-9]"});
    let r = s.post("/v1/chat/completions", &body.to_string());
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let choices = v["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 3, "{v}");
    for c in choices {
        let text = c["message"]["content"].as_str().unwrap();
        let ok = ["yes-", "no-"].iter().any(|p| {
            text.strip_prefix(p)
                .is_some_and(|d| d.len() == 1 && d.bytes().all(|b| b.is_ascii_digit()))
        });
        assert!(ok, "{text:?}");
    }
}
