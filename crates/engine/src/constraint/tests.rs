//! Constrained generation on the tiny random Gemma 3 (512 tokens with byte
//! fallback): whatever the random weights prefer, the output must match.

use crate::{
    Engine, EngineError, FinishReason, GenerateOptions, Grammar, RunOptions, SamplingParams,
};
use serde_json::{json, Value};

const TINY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/fixtures/tiny/gemma3/model-f32.gguf"
);

fn engine() -> Engine {
    Engine::load(
        TINY,
        &RunOptions {
            threads: Some(1),
            ctx: Some(512),
            ..Default::default()
        },
    )
    .unwrap()
}

/// Generate under `grammar` with `params`; the text and the finish.
fn run(
    engine: &Engine,
    grammar: &Grammar,
    params: SamplingParams,
    max: usize,
) -> (String, FinishReason) {
    let mut session = engine.session();
    let mut sampler = crate::Sampler::new(params);
    let opts = GenerateOptions {
        max_tokens: max,
        stop: vec![],
        stop_on_eog: true,
        render_special: false,
        speculation: None,
    };
    let prompt = engine.tokenizer().encode("hello", true, false);
    let request = crate::GenerationRequest {
        constraint: Some(engine.constraint(grammar).unwrap()),
        ..crate::GenerationRequest::new(&prompt, &opts)
    };
    let mut d = session.begin(request, &sampler).unwrap();
    loop {
        let step = session.step(&mut d, &mut sampler).unwrap();
        if step.finish.is_some() {
            break;
        }
    }
    let stats = d.constraint_stats().unwrap();
    assert!(stats.masks >= 1, "the first token always takes a mask");
    let g = d.into_generation();
    (g.text, g.finish)
}

fn sampled(seed: u64) -> SamplingParams {
    SamplingParams {
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        seed,
        ..SamplingParams::default()
    }
}

#[test]
fn regex_output_matches_whatever_the_weights_prefer() {
    let e = engine();
    let g = Grammar::Regex("(yes|no|[0-9]{3}-[a-z]{2})".into());
    for seed in 0..6 {
        let (text, finish) = run(&e, &g, sampled(seed), 64);
        assert_eq!(finish, FinishReason::Stop, "{text:?}");
        let ok = text == "yes"
            || text == "no"
            || (text.len() == 6
                && text[..3].bytes().all(|b| b.is_ascii_digit())
                && &text[3..4] == "-"
                && text[4..].bytes().all(|b| b.is_ascii_lowercase()));
        assert!(ok, "seed {seed}: {text:?}");
    }
}

#[test]
fn json_schema_output_validates() {
    let e = engine();
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 8},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 1, "maxItems": 3},
        },
        "required": ["name", "age", "tags"],
        "additionalProperties": false,
    });
    let g = Grammar::JsonSchema(schema);
    for seed in 0..4 {
        let (text, finish) = run(&e, &g, sampled(seed), 200);
        assert_eq!(finish, FinishReason::Stop, "seed {seed}: {text:?}");
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|err| panic!("{err}: {text:?}"));
        assert!(
            v["name"].as_str().is_some_and(|s| s.chars().count() <= 8),
            "{text}"
        );
        assert!(
            v["age"].as_i64().is_some_and(|a| (0..=120).contains(&a)),
            "{text}"
        );
        let tags = v["tags"].as_array().unwrap();
        assert!((1..=3).contains(&tags.len()), "{text}");
        assert!(tags
            .iter()
            .all(|t| ["a", "b", "c"].contains(&t.as_str().unwrap())));
        assert_eq!(v.as_object().unwrap().len(), 3, "{text}");
        assert!(!text.contains('\n'), "compact JSON: {text:?}");
    }
}

/// `uniqueItems` over enum items (a tag list, and Pydantic's `set[Enum]`
/// through `$defs`): 20 seeded runs never repeat an item, and an array of
/// strings, which no grammar can hold unique, still compiles.
#[test]
fn unique_items_are_never_repeated() {
    let e = engine();
    let schema = json!({
        "$defs": {"Tag": {"enum": ["red", "green", "blue", "cyan", "pink"], "type": "string"}},
        "type": "object",
        "properties": {
            "tags": {"type": "array", "items": {"$ref": "#/$defs/Tag"}, "uniqueItems": true,
                     "minItems": 1, "maxItems": 3},
            "flags": {"type": "array", "items": {"type": "boolean"}, "uniqueItems": true},
        },
        "required": ["tags", "flags"],
    });
    let g = Grammar::JsonSchema(schema);
    let mut lengths = std::collections::BTreeSet::new();
    for seed in 0..20 {
        let (text, finish) = run(&e, &g, sampled(seed), 200);
        assert_eq!(finish, FinishReason::Stop, "seed {seed}: {text:?}");
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|err| panic!("{err}: {text:?}"));
        for key in ["tags", "flags"] {
            let items = v[key].as_array().unwrap();
            for (i, a) in items.iter().enumerate() {
                assert!(
                    !items[..i].contains(a),
                    "seed {seed}: {key} repeats: {text}"
                );
            }
        }
        let tags = v["tags"].as_array().unwrap();
        assert!((1..=3).contains(&tags.len()), "{text}");
        lengths.insert(tags.len());
    }
    // Random weights reach past one item, so repeats had their chance.
    assert!(lengths.iter().any(|&n| n > 1), "{lengths:?}");
    let strings = json!({"type": "array", "items": {"type": "string"}, "uniqueItems": true});
    e.constraint(&Grammar::JsonSchema(strings)).unwrap();
}

/// Objects that name their properties are closed unless the schema opens
/// them, `allOf` merges included: random weights get exactly the named keys.
#[test]
fn objects_are_closed_unless_the_schema_opens_them() {
    let e = engine();
    let short = json!({"type": "string", "maxLength": 4});
    let merged = Grammar::JsonSchema(json!({"allOf": [
        {"type": "object", "properties": {"id": {"type": "integer", "minimum": 1, "maximum": 99}}, "required": ["id"]},
        {"type": "object", "properties": {"name": short}, "required": ["name"]}
    ]}));
    let plain = Grammar::JsonSchema(json!({
        "type": "object", "properties": {"name": short}, "required": ["name"]
    }));
    for (g, keys) in [(&merged, vec!["id", "name"]), (&plain, vec!["name"])] {
        for seed in 0..4 {
            let (text, finish) = run(&e, g, sampled(seed), 200);
            assert_eq!(finish, FinishReason::Stop, "seed {seed}: {text:?}");
            let v: Value =
                serde_json::from_str(&text).unwrap_or_else(|err| panic!("{err}: {text:?}"));
            let mut got: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
            got.sort_unstable();
            assert_eq!(got, keys, "seed {seed}: {text}");
        }
    }
    // Said open, it stays open: the grammar accepts an extra key.
    let open = json!({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": true});
    let mut c = e.constraint(&Grammar::JsonSchema(open)).unwrap();
    let toks = e.tokenizer().encode("{\"a\": 1, \"zz\": 2}", false, false);
    assert!(c.matcher.consume_tokens(&toks).is_ok(), "extra key refused");
    assert!(c.is_accepting(), "the open object is complete");
    // Closed, the same text is refused.
    let closed = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
    let mut c = e.constraint(&Grammar::JsonSchema(closed)).unwrap();
    assert!(
        c.matcher.consume_tokens(&toks).is_err(),
        "extra key accepted"
    );
}

#[test]
fn any_json_object_and_gbnf_and_lark() {
    let e = engine();
    let (text, _) = run(&e, &Grammar::JsonObject, SamplingParams::greedy(), 400);
    // Greedy on random weights may run to the limit; what came out is a
    // prefix of an object, and complete when it stopped.
    assert!(text.starts_with('{'), "{text:?}");
    let gbnf = Grammar::Gbnf("root ::= \"<\" [a-c]{2,4} \">\"".into());
    let (text, finish) = run(&e, &gbnf, sampled(3), 32);
    assert_eq!(finish, FinishReason::Stop);
    assert!(text.starts_with('<') && text.ends_with('>'), "{text:?}");
    assert!((2..=4).contains(&(text.len() - 2)), "{text:?}");
    assert!(text[1..text.len() - 1]
        .bytes()
        .all(|b| (b'a'..=b'c').contains(&b)));
    let lark = Grammar::Lark("start: \"x=\" NUM\nNUM: /[1-9][0-9]?/".into());
    let (text, finish) = run(&e, &lark, sampled(1), 32);
    assert_eq!(finish, FinishReason::Stop);
    let n: u32 = text.strip_prefix("x=").unwrap().parse().unwrap();
    assert!((1..100).contains(&n), "{text:?}");
}

#[test]
fn max_tokens_cuts_a_constraint_off_with_length() {
    let e = engine();
    let g = Grammar::Regex("a{50}".into());
    let (text, finish) = run(&e, &g, SamplingParams::greedy(), 5);
    assert_eq!(finish, FinishReason::Length);
    assert!(
        text.len() < 50 && text.bytes().all(|b| b == b'a'),
        "{text:?}"
    );
}

#[test]
fn bad_grammars_are_refused_with_the_problem_named() {
    let e = engine();
    let msg = |g: Grammar| match e.constraint(&g) {
        Err(EngineError::InvalidGrammar(m)) => m,
        other => panic!("{g:?} gave {other:?}"),
    };
    assert!(msg(Grammar::JsonSchema(json!(false))).contains("matches nothing"));
    assert!(msg(Grammar::JsonSchema(json!([1]))).contains("not an array"));
    let m = msg(Grammar::JsonSchema(
        json!({"type": "string", "minLength": 5, "maxLength": 2}),
    ));
    assert!(m.starts_with("json_schema:"), "{m}");
    let m = msg(Grammar::JsonSchema(json!({"type": "wat"})));
    assert!(m.contains("wat"), "{m}");
    let m = msg(Grammar::Regex("(unclosed".into()));
    assert!(m.starts_with("regex:"), "{m}");
    let m = msg(Grammar::Lark("start: missing_rule".into()));
    assert!(m.contains("missing_rule"), "{m}");
    let m = msg(Grammar::Gbnf("root ::= nope".into()));
    assert!(m.contains("nope"), "{m}");
    let big = "a".repeat(crate::MAX_GRAMMAR_BYTES + 1);
    assert!(msg(Grammar::Regex(big)).contains("limit"));
    // A `$ref` cycle with no way out.
    let cyc = json!({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"});
    let m = msg(Grammar::JsonSchema(cyc));
    assert!(m.contains("matches no output"), "{m}");
    let m = msg(Grammar::JsonSchema(
        json!({"type": "string", "format": "not-a-format"}),
    ));
    assert!(m.contains("not-a-format"), "{m}");
}

#[test]
fn tool_call_grammars_compile_and_constrain() {
    use crate::tools::{parse_tool_calls, tool_grammar, Tool, ToolChoice};
    let e = engine();
    let tools = [
        Tool {
            name: "add".into(),
            description: None,
            parameters: json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"], "additionalProperties": false}),
        },
        Tool {
            name: "echo".into(),
            description: None,
            parameters: json!({"type": "object", "properties": {"text": {"type": "string", "maxLength": 5}}, "required": ["text"], "additionalProperties": false}),
        },
    ];
    for parallel in [false, true] {
        for choice in [ToolChoice::Required, ToolChoice::Function("echo".into())] {
            let g = tool_grammar(&tools, &choice, parallel).unwrap().unwrap();
            for seed in 0..3 {
                let (text, finish) = run(&e, &g, sampled(seed), 400);
                assert_eq!(finish, FinishReason::Stop, "{text:?}");
                assert!(parallel || text.starts_with('{'), "{text:?}");
                let calls = parse_tool_calls(&text, &tools).unwrap_or_else(|| panic!("{text:?}"));
                if let ToolChoice::Function(n) = &choice {
                    assert!(calls.iter().all(|c| &c.name == n), "{text:?}");
                }
            }
        }
        let g = tool_grammar(&tools, &ToolChoice::Auto, parallel)
            .unwrap()
            .unwrap();
        for seed in 0..4 {
            let (text, finish) = run(&e, &g, sampled(seed), 60);
            // A reply that begins with `{` or `[` and ended on its own is
            // whole calls.
            if text.starts_with(['{', '[']) && finish == FinishReason::Stop {
                assert!(parse_tool_calls(&text, &tools).is_some(), "{text:?}");
            }
        }
    }
}

#[test]
fn json_digit_runs_are_capped_but_a_grammar_that_needs_digits_gets_them() {
    let e = engine();
    let tok = e.tokenizer();
    // Push every digit token as hard as a bias can.
    let bias: Vec<(u32, f32)> = (0..tok.vocab_size() as u32)
        .filter(|&id| {
            let b = tok.token_bytes(id, false);
            !b.is_empty() && b.iter().all(u8::is_ascii_digit)
        })
        .map(|id| (id, 100.0))
        .collect();
    assert!(!bias.is_empty());
    let params = SamplingParams {
        logit_bias: bias,
        ..SamplingParams::greedy()
    };
    let schema = json!({"type": "object", "properties": {"x": {"type": "number", "minimum": 0, "maximum": 1}}, "required": ["x"], "additionalProperties": false});
    let (text, finish) = run(&e, &Grammar::JsonSchema(schema), params.clone(), 200);
    assert_eq!(finish, FinishReason::Stop, "{text:?}");
    let v: Value = serde_json::from_str(&text).unwrap();
    let x = v["x"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&x), "{text}");
    let longest = text
        .split(|c: char| !c.is_ascii_digit())
        .map(str::len)
        .max()
        .unwrap();
    assert!(longest <= crate::constraint::MAX_DIGIT_RUN, "{text}");
    assert!(longest >= 8, "the bias did push digits: {text}");
    let (text, finish) = run(&e, &Grammar::Regex("[0-9]{40}".into()), params, 200);
    assert_eq!((text.len(), finish), (40, FinishReason::Stop), "{text:?}");
}
