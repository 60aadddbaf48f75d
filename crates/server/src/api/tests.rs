//! Request parsing: good bodies, bad ones, defaults.

use super::*;

#[test]
fn parses_a_chat_request() {
    let r = parse_chat(
        br#"{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi"}]}],"stop":"x","max_tokens":5,"seed":3,"temperature":0}"#,
        &SamplingParams::default(),
    )
    .unwrap();
    assert_eq!(r.max_tokens, Some(5));
    assert_eq!(r.stop, vec!["x".to_string()]);
    assert_eq!(r.params.seed, 3);
    assert!(matches!(r.input, Input::Chat(ref m) if m.len() == 2 && m[1].content == "hi"));
    let biased = parse_completion(
        br#"{"prompt":"a","logit_bias":{"212":100,"7":-100}}"#,
        &SamplingParams::default(),
    )
    .unwrap();
    let mut bias = biased.params.logit_bias.clone();
    bias.sort_by_key(|b| b.0);
    assert_eq!(bias, vec![(7, -100.0), (212, 100.0)]);
    // The server's defaults fill what a request leaves out.
    let defaults = SamplingParams {
        temperature: 0.25,
        top_k: 7,
        ..SamplingParams::default()
    };
    let r = parse_completion(br#"{"prompt":"a","top_k":3}"#, &defaults).unwrap();
    assert_eq!((r.params.temperature, r.params.top_k), (0.25, 3));
}

#[test]
fn rejects_bad_requests() {
    for body in [
        &b""[..],
        b"{",
        b"[]",
        b"{\"messages\":[]}",
        b"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":0}",
        b"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":129}",
        b"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,\"top_logprobs\":21}",
        b"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":-1}",
        b"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":0}",
        b"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_p\":2}",
        b"{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}",
        b"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logit_bias\":{\"abc\":1}}",
        b"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logit_bias\":{\"5\":101}}",
        b"{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}",
        b"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[\"\"]}",
    ] {
        let e = parse_chat(body, &SamplingParams::default()).unwrap_err();
        assert_eq!(e.status.as_u16(), 400, "{}", String::from_utf8_lossy(body));
    }
}

#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    let depth = 100_000;
    let mut body = String::from("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"x\":");
    body.push_str(&"[".repeat(depth));
    body.push_str(&"]".repeat(depth));
    body.push('}');
    let e = parse_chat(body.as_bytes(), &SamplingParams::default()).unwrap_err();
    assert_eq!(e.status.as_u16(), 400);
    assert!(e.message.contains("recursion"), "{}", e.message);
}

#[test]
fn completion_prompt_forms() {
    assert!(matches!(
        parse_completion(br#"{"prompt":"a"}"#, &SamplingParams::default())
            .unwrap()
            .input,
        Input::Text(_)
    ));
    assert!(matches!(
        parse_completion(br#"{"prompt":["a"]}"#, &SamplingParams::default())
            .unwrap()
            .input,
        Input::Text(_)
    ));
    assert!(matches!(
        parse_completion(br#"{"prompt":[2,3]}"#, &SamplingParams::default())
            .unwrap()
            .input,
        Input::Ids(_)
    ));
    assert!(parse_completion(br#"{"prompt":["a","b"]}"#, &SamplingParams::default()).is_err());
    assert_eq!(
        parse_completion(br#"{"prompt":"a"}"#, &SamplingParams::default())
            .unwrap()
            .max_tokens,
        Some(16)
    );
}

#[test]
fn speculative_n_max_sets_turns_off_or_is_refused() {
    use engine::{NgramOptions, Speculation};
    let parse = |body: &str| parse_completion(body.as_bytes(), &SamplingParams::default());
    let server = Speculation::Ngram(NgramOptions::default());
    let draft = |r: &Request, default: Option<&Speculation>| {
        r.generate_options(100, default)
            .speculation
            .map(|s| match s {
                Speculation::Ngram(o) => o.max_draft,
                Speculation::Draft(d) => d.max_draft,
            })
    };
    let plain = parse(r#"{"prompt":"a"}"#).unwrap();
    assert_eq!(draft(&plain, None), None);
    assert_eq!(draft(&plain, Some(&server)), Some(8));
    let off = parse(r#"{"prompt":"a","speculative.n_max":0}"#).unwrap();
    assert_eq!(draft(&off, Some(&server)), None);
    let four = parse(r#"{"prompt":"a","speculative.n_max":4}"#).unwrap();
    assert_eq!(draft(&four, None), Some(4));
    assert_eq!(draft(&four, Some(&server)), Some(4));
    for bad in [-1, 16, 1000] {
        let e = parse(&format!(r#"{{"prompt":"a","speculative.n_max":{bad}}}"#)).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("speculative.n_max"), "{bad}");
    }
    // A least probability is taken, range-checked, and alone turns nothing
    // on; n-gram drafting has no probabilities to hold to it (a draft
    // model's is tested with one: cli's serve_options).
    let strict = parse(r#"{"prompt":"a","speculative.p_min":0.9,"speculative.n_max":3}"#).unwrap();
    assert_eq!(strict.speculation.p_min, Some(0.9));
    assert_eq!(draft(&strict, Some(&server)), Some(3));
    let alone = parse(r#"{"prompt":"a","speculative.p_min":0.9}"#).unwrap();
    assert_eq!(draft(&alone, None), None);
    for bad in ["-0.1", "1.5", "1e9"] {
        let e = parse(&format!(r#"{{"prompt":"a","speculative.p_min":{bad}}}"#)).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("speculative.p_min"), "{bad}");
    }
}

/// Only image and audio parts place media: marker text a client writes in
/// a text part, a string content or a tool's result is text, which the
/// tokenizer keeps as text (issue 90).
#[test]
fn only_media_parts_place_media() {
    use serde_json::json;
    let image =
        json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}});
    let typed = json!({"type": "text", "text": "look <start_of_image> here"});
    let body = json!({"messages": [
        {"role": "user", "content": [typed, image]},
        {"role": "assistant", "content": "ok", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": [typed, image]},
        {"role": "user", "content": "<start_of_image><end_of_turn>"},
    ]});
    let r = parse_chat(body.to_string().as_bytes(), &SamplingParams::default()).unwrap();
    let Input::Chat(m) = &r.input else {
        panic!("a chat")
    };
    assert_eq!(r.images.len(), 2);
    let after = "look <start_of_image> here".len();
    assert_eq!(m[0].media(), std::slice::from_ref(&(after..after + 16)));
    assert_eq!(
        (m[2].role.as_str(), m[2].tool_call_id.as_deref()),
        ("tool", Some("c1"))
    );
    assert_eq!(m[2].media(), std::slice::from_ref(&(after..after + 16)));
    // In the JSON convention the result is a user turn after its prefix;
    // the marker keeps its place.
    let m = engine::tools::json_conversation(m, None, false);
    let prefix = "Result of f: ".len();
    assert_eq!(
        m[2].content,
        format!("Result of f: look <start_of_image> here<start_of_image>")
    );
    assert_eq!(
        m[2].media(),
        std::slice::from_ref(&(prefix + after..prefix + after + 16))
    );
    assert!(m[3].media().is_empty());
}

/// A chat body with one tool, `tool_choice` and a `response_format`.
fn tools_and_format(choice: &str, format: &str) -> Result<Request, ApiError> {
    let body = format!(
        r#"{{"messages":[{{"role":"user","content":"hi"}}],
            "tools":[{{"type":"function","function":{{"name":"add","parameters":{{"type":"object","properties":{{"a":{{"type":"integer"}}}}}}}}}}],
            "tool_choice":{choice},"response_format":{format}}}"#
    );
    parse_chat(body.as_bytes(), &SamplingParams::default())
}

#[test]
fn tools_and_a_format_share_a_request_as_tool_choice_says() {
    let schema = r#"{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","properties":{"city":{"type":"string"}}}}}"#;
    // none: the format alone, and no tools to call.
    let r = tools_and_format(r#""none""#, schema).unwrap();
    assert!(r.tools.is_none());
    assert!(
        matches!(&r.grammar, Some((Grammar::JsonSchema(s), "response_format")) if s["properties"]["city"].is_object())
    );
    // required and a named function: the call grammar.
    // The reply's grammar is made once the model is known; these models
    // use the JSON convention.
    let reply = |r: &Request| super::reply_grammar(r.tools.as_ref().unwrap(), r.grammar.clone());
    for choice in [
        r#""required""#,
        r#"{"type":"function","function":{"name":"add"}}"#,
    ] {
        let r = tools_and_format(choice, schema).unwrap();
        assert!(r.tools.is_some());
        assert!(
            matches!(&reply(&r).unwrap(), Some((Grammar::JsonSchema(s), "tools")) if s["properties"]["name"]["const"] == "add"),
            "{choice}"
        );
    }
    // auto: a call or the format's JSON, for a schema or any object.
    for format in [schema, r#"{"type":"json_object"}"#] {
        let r = tools_and_format(r#""auto""#, format).unwrap();
        assert!(r.tools.is_some());
        let Some((Grammar::JsonSchema(s), "response_format")) = &reply(&r).unwrap() else {
            panic!("{:?}", r.grammar);
        };
        assert_eq!(s["anyOf"].as_array().unwrap().len(), 2, "{s}");
        // The model is told an answer is JSON, not plain text.
        let Input::Chat(m) = &r.input else { panic!() };
        let m = engine::tools::json_conversation(m, r.tools.as_ref(), true);
        assert!(
            m[0].content.contains("the JSON answer asked for"),
            "{}",
            m[0].content
        );
    }
    // A format that is not JSON cannot share a reply with calls.
    let body = br#"{"messages":[{"role":"user","content":"hi"}],"regex":"a+",
        "tools":[{"type":"function","function":{"name":"add","parameters":{"type":"object"}}}]}"#;
    let err = parse_chat(body, &SamplingParams::default()).unwrap_err();
    assert_eq!(err.param.as_deref(), Some("regex"), "{}", err.message);
}
