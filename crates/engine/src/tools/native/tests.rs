use super::*;
use serde_json::json;

fn tools() -> Vec<Tool> {
    vec![
        Tool {
            name: "get_weather".into(),
            description: None,
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        },
        Tool {
            name: "b_2".into(),
            description: None,
            parameters: json!({"type": "object"}),
        },
    ]
}

#[test]
fn calls_parse_back_to_json() {
    let q = GEMMA4.quote;
    let text = format!(
        "<|tool_call>call:get_weather{{city:{q}Oslo, \"N\"{q},days:[1,-2.5,true,null],o:{{a:{q}{q}}}}}<tool_call|>\
         <|tool_call>call:b_2{{}}<tool_call|>"
    );
    let calls = parse_calls(&GEMMA4, &text, &tools()).unwrap();
    assert_eq!(calls.len(), 2);
    assert_eq!(
        calls[0].arguments,
        json!({"city": "Oslo, \"N\"", "days": [1, -2.5, true, null], "o": {"a": ""}})
    );
    assert_eq!(
        (calls[1].name.as_str(), &calls[1].arguments),
        ("b_2", &json!({}))
    );
    let q = FUNCTION_GEMMA.quote;
    let fg = format!("<start_function_call>call:b_2{{x:{q}a}}{q}}}<end_function_call>");
    assert_eq!(
        parse_calls(&FUNCTION_GEMMA, &fg, &tools()).unwrap()[0].arguments,
        json!({"x": "a}"})
    );
}

#[test]
fn anything_but_whole_calls_to_known_tools_is_not_calls() {
    let q = GEMMA4.quote;
    let t = tools();
    for bad in [
        String::new(),
        "It is sunny.".to_string(),
        "<|tool_call>call:nope{}<tool_call|>".to_string(),
        format!("<|tool_call>call:get_weather{{city:{q}Oslo{q}}}"),
        format!("<|tool_call>call:get_weather{{city:{q}Oslo}}<tool_call|>"),
        format!("<|tool_call>call:get_weather{{city:{q}Oslo{q}}}<tool_call|> and text"),
        "<|tool_call>call:get_weather{city:Oslo}<tool_call|>".to_string(),
        "<|tool_call>call:get_weather[1]<tool_call|>".to_string(),
        format!(
            "<|tool_call>call:get_weather{}{}<tool_call|>",
            "{a:[".repeat(200),
            "]}".repeat(200)
        ),
    ] {
        assert_eq!(parse_calls(&GEMMA4, &bad, &t), None, "{bad:?}");
    }
}

#[test]
fn arguments_become_json_whatever_the_pieces() {
    let q = GEMMA4.quote;
    let args = format!("{{s:{q}a}}b\n\"{q},n:[1,{{}},{{k:false}}],e:{{}}}}<tool_call|>rest");
    let whole = json!({"s": "a}b\n\"", "n": [1, {}, {"k": false}], "e": {}});
    for n in [1, 2, 3, 5, 64] {
        let mut r = ArgsToJson::new(&GEMMA4);
        let (mut json, mut after) = (String::new(), String::new());
        let chars: Vec<char> = args.chars().collect();
        for piece in chars.chunks(n) {
            let piece: String = piece.iter().collect();
            if r.done() {
                after.push_str(&piece);
                continue;
            }
            let (j, a) = r.feed(&piece);
            json.push_str(&j);
            after.push_str(&a);
        }
        assert!(r.done(), "{n}");
        assert_eq!(after, "<tool_call|>rest", "{n}");
        let v: Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{json}: {e}"));
        assert_eq!(v, whole, "{json}");
    }
}

#[test]
fn string_text_never_holds_the_quote() {
    for syntax in [&GEMMA4, &FUNCTION_GEMMA] {
        let rx = regex_lite_check(&avoiding(syntax.quote));
        let q = syntax.quote;
        let (head, tail) = q.split_at(q.len() - 1);
        for ok in [
            "a",
            "<",
            "<<",
            "a<b",
            head,
            &format!("{head}<{tail}"),
            "x\ny",
            &format!("<{tail}"),
        ] {
            assert!(rx(ok), "{:?} should match for {q}", ok);
        }
        for bad in [
            q.to_string(),
            format!("a{q}"),
            format!("{q}b"),
            format!("<{q}"),
            String::new(),
        ] {
            assert!(!rx(&bad), "{bad:?} should not match for {q}");
        }
    }
}

/// A whole-string matcher for `rx` from llguidance's regex engine.
fn regex_lite_check(rx: &str) -> impl Fn(&str) -> bool {
    let r = llguidance::derivre::Regex::new(rx).unwrap_or_else(|e| panic!("{rx}: {e}"));
    move |s: &str| r.clone().is_match(s)
}

#[test]
fn call_rules_name_every_allowed_tool_and_bound_their_size() {
    let native = NativeTools {
        syntax: &GEMMA4,
        ids: [7, 8, 9],
    };
    let t = tools();
    let all: Vec<&Tool> = t.iter().collect();
    let lark = calls_lark(&native, &all, true).unwrap();
    assert!(
        lark.contains("\"call:get_weather\"") && lark.contains("\"call:b_2\""),
        "{lark}"
    );
    assert!(
        lark.contains("<[7]>") && lark.contains("<[9]>") && lark.contains("{1,16}"),
        "{lark}"
    );
    // A schema past the grammar's bound: a hundred thousand properties.
    let props: serde_json::Map<String, Value> = (0..100_000)
        .map(|i| (format!("p{i}"), json!({"type": "string"})))
        .collect();
    let wide = Tool {
        name: "w".into(),
        description: None,
        parameters: json!({"type": "object", "properties": props}),
    };
    let e = calls_lark(&native, &[&wide], false).unwrap_err();
    assert!(e.contains("more than"), "{e}");
}

#[test]
fn schemas_the_syntax_cannot_hold_are_refused_cheaply() {
    let native = NativeTools {
        syntax: &GEMMA4,
        ids: [7, 8, 9],
    };
    let tool = |parameters: Value| Tool {
        name: "t".into(),
        description: None,
        parameters,
    };
    let refuse = |parameters: Value, says: &str| {
        let t = tool(parameters);
        let e = calls_lark(&native, &[&t], false).unwrap_err();
        assert!(e.contains(says), "{e}");
    };
    // A `$ref` chain as long as a body allows: refused at its depth, not
    // by a stack overflow.
    let mut defs = serde_json::Map::new();
    for i in 0..5000 {
        defs.insert(
            format!("d{i}"),
            json!({"$ref": format!("#/$defs/d{}", i + 1)}),
        );
    }
    defs.insert("d5000".into(), json!({"type": "string"}));
    refuse(
        json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/d0"}}, "$defs": defs}),
        "deeper than",
    );
    refuse(
        json!({"type": "object", "properties": {"a:b": {"type": "string"}}}),
        "bare key",
    );
    refuse(
        json!({"type": "object", "properties": {"a": {"enum": []}}}),
        "lists nothing",
    );
    refuse(
        json!({"type": "object", "properties": {"a": {"anyOf": []}}}),
        "lists nothing",
    );
    refuse(
        json!({"type": "object", "properties": {"a": {"const": "x<|\"|>y"}}}),
        "quote",
    );
    refuse(
        json!({"type": "object", "properties": {"a": {"type": [["object"]]}}}),
        "not a JSON Schema type",
    );
    // A type listed two hundred thousand times is written once.
    let t = tool(json!({"type": "object", "properties": {"a": {"type": vec!["string"; 200_000]}}}));
    let started = std::time::Instant::now();
    let lark = calls_lark(&native, &[&t], false).unwrap();
    assert!(
        lark.len() < 4096 && started.elapsed().as_secs() < 5,
        "{} bytes",
        lark.len()
    );
    // Properties named, none given: only `{}`; no properties key: any object.
    let closed = calls_lark(
        &native,
        &[&tool(json!({"type": "object", "properties": {}}))],
        false,
    )
    .unwrap();
    assert!(
        closed.contains("(\"{\" \"}\")") && !closed.contains("any_dict"),
        "{closed}"
    );
    let open = calls_lark(&native, &[&tool(json!({"type": "object"}))], false).unwrap();
    assert!(open.contains("any_dict"), "{open}");
}
