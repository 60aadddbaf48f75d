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
    match e.constraint(&Grammar::Regex(big)) {
        Err(EngineError::GrammarTooLarge(m)) => assert!(m.contains("limit"), "{m}"),
        other => panic!("{other:?}"),
    }
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
fn auto_with_a_format_is_a_call_or_the_formats_json() {
    use crate::tools::{calls_or_format_grammar, parse_tool_calls, Tool};
    let e = engine();
    let tools = [Tool {
        name: "add".into(),
        description: None,
        parameters: json!({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": false}),
    }];
    // The format's definitions are referenced from its root, as a
    // Pydantic model's schema does.
    let format = json!({
        "$defs": {"City": {"type": "string", "enum": ["Paris", "Rome"]}},
        "type": "object",
        "properties": {"city": {"$ref": "#/$defs/City"}, "n": {"type": "integer"}},
        "required": ["city", "n"],
        "additionalProperties": false,
    });
    let g = calls_or_format_grammar(&tools, false, &format).unwrap();
    let (mut calls, mut answers) = (0, 0);
    for seed in 0..12 {
        let (text, finish) = run(&e, &g, sampled(seed), 200);
        assert_eq!(finish, FinishReason::Stop, "{text:?}");
        if parse_tool_calls(&text, &tools).is_some() {
            calls += 1;
            continue;
        }
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert!(
            ["Paris", "Rome"].contains(&v["city"].as_str().unwrap()),
            "{text:?}"
        );
        assert!(
            v["n"].is_i64() && v.as_object().unwrap().len() == 2,
            "{text:?}"
        );
        answers += 1;
    }
    assert_eq!(calls + answers, 12);
    assert!(calls_or_format_grammar(&[], false, &format).is_err());
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

/// A chain of `n` GBNF rules, each using the next.
fn gbnf_chain(n: usize) -> Grammar {
    let mut s = String::from("root ::= r0\n");
    for i in 0..n {
        s.push_str(&format!("r{i} ::= \"a\" r{}\n", i + 1));
    }
    s.push_str(&format!("r{n} ::= \"a\"\n"));
    Grammar::Gbnf(s)
}

/// The same chain in Lark.
fn lark_chain(n: usize) -> Grammar {
    let mut s = String::from("start: r0\n");
    for i in 0..n {
        s.push_str(&format!("r{i}: \"a\" r{}\n", i + 1));
    }
    s.push_str(&format!("r{n}: \"a\"\n"));
    Grammar::Lark(s)
}

/// A schema whose `$defs` chain `n` deep through object properties.
fn ref_chain(n: usize) -> Value {
    let mut defs = serde_json::Map::new();
    for i in 0..n {
        let next = format!("#/$defs/d{}", i + 1);
        defs.insert(
            format!("d{i}"),
            json!({"type": "object", "properties": {"a": {"$ref": next}}, "required": ["a"]}),
        );
    }
    defs.insert(format!("d{n}"), json!({"type": "integer"}));
    json!({"$defs": defs, "$ref": "#/$defs/d0"})
}

/// Objects nested `n` deep.
fn nested_objects(n: usize) -> Value {
    let mut v = json!({"type": "integer"});
    for _ in 0..n {
        v = json!({"type": "object", "properties": {"a": v}, "required": ["a"]});
    }
    v
}

/// The message of an `InvalidGrammar` refusal, or a panic saying what came.
fn refusal(e: &Engine, g: &Grammar) -> String {
    match e.constraint(g) {
        Err(EngineError::InvalidGrammar(m)) => m,
        other => panic!("{} gave {other:?}", g.kind()),
    }
}

/// Grammars 1000 levels deep used to overflow the stack and abort the
/// process; each is refused, naming the limit, before it compiles.
#[test]
fn grammars_nested_past_the_limit_are_refused() {
    let e = engine();
    let limit = format!("{} levels", crate::MAX_GRAMMAR_DEPTH);
    let deep_regex = format!("{}a{}", "(".repeat(1000), ")".repeat(1000));
    let lark_json = format!("start: %json {}\n", ref_chain(1000));
    for g in [
        gbnf_chain(1000),
        lark_chain(1000),
        Grammar::Lark(lark_json),
        Grammar::JsonSchema(nested_objects(1000)),
        Grammar::JsonSchema(ref_chain(1000)),
        Grammar::JsonOrText(ref_chain(1000)),
        Grammar::Regex(deep_regex),
    ] {
        let m = refusal(&e, &g);
        assert!(m.contains(&limit) && m.contains("nests"), "{m}");
    }
}

/// What the limit allows compiles: a grammar as deep as the bound lets
/// through takes no more stack than the compile thread has.
#[test]
fn grammars_just_within_the_limit_compile() {
    let e = engine();
    // The chain's rules weigh 1 each in Lark, 2 from GBNF (each
    // alternative is a group), 3 levels a link through a schema's `$defs`.
    let max = crate::MAX_GRAMMAR_DEPTH;
    for g in [
        lark_chain(max - 2),
        gbnf_chain(max / 2 - 3),
        Grammar::JsonSchema(ref_chain(max / 3 - 2)),
        Grammar::JsonSchema(nested_objects(max / 2 - 1)),
    ] {
        e.constraint(&g)
            .unwrap_or_else(|err| panic!("{}: {err}", g.kind()));
    }
    assert!(e.constraint(&lark_chain(max)).is_err());
}

/// Schemas of a few KiB whose rewrites used to take GiB: an `allOf` of
/// thousands of members (each closed over all their names) and one enum
/// referenced from many `uniqueItems` arrays (copied into every order of
/// each). Both are refused before the rewrite allocates, naming the byte
/// limit; raised, the limit lets the same kind of schema through when it
/// fits.
#[test]
fn schema_rewrites_that_amplify_are_refused_by_the_byte_limit() {
    let e = engine();
    let too_large = |g: &Grammar| match e.constraint(g) {
        Err(EngineError::GrammarTooLarge(m)) => m,
        other => panic!("{} gave {other:?}", g.kind()),
    };
    let members: Vec<Value> = (0..3000)
        .map(|i| json!({"properties": {format!("p{i}"): true}}))
        .collect();
    let all_of = json!({"allOf": members});
    assert!(all_of.to_string().len() < 100 * 1024);
    let m = too_large(&Grammar::JsonSchema(all_of));
    assert!(m.contains("allOf") && m.contains("262144 bytes"), "{m}");

    let values: Vec<String> = (0..6)
        .map(|i| format!("{i}{}", "x".repeat(10_000)))
        .collect();
    let arrays: serde_json::Map<String, Value> = (0..16)
        .map(|i| {
            let a = json!({"type": "array", "items": {"$ref": "#/$defs/E"}, "uniqueItems": true});
            (format!("p{i}"), a)
        })
        .collect();
    let unique = json!({"$defs": {"E": {"enum": values}}, "type": "object", "properties": arrays});
    assert!(unique.to_string().len() < 64 * 1024);
    let m = too_large(&Grammar::JsonOrText(unique));
    assert!(
        m.contains("uniqueItems") && m.contains("262144 bytes"),
        "{m}"
    );

    // A small allOf still closes its members over each other's names.
    let small = json!({"allOf": [{"properties": {"a": {"type": "integer"}}, "required": ["a"]},
                                 {"properties": {"b": {"type": "integer"}}, "required": ["b"]}]});
    let mut c = e.constraint(&Grammar::JsonSchema(small)).unwrap();
    let toks = e.tokenizer().encode("{\"a\": 1, \"b\": 2}", false, false);
    assert!(c.matcher.consume_tokens(&toks).is_ok() && c.is_accepting());
}

/// An invalid regular expression is a refused grammar on every path that
/// takes one, never an internal error.
#[test]
fn bad_regexes_are_refused_on_every_path() {
    let e = engine();
    let in_property = json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "(("}},
                             "required": ["a"]});
    for g in [
        Grammar::Regex("(unclosed".into()),
        Grammar::Regex("a{5,2}".into()),
        Grammar::JsonSchema(in_property.clone()),
        Grammar::JsonOrText(in_property),
        Grammar::JsonSchema(
            json!({"type": "object", "patternProperties": {"((": {"type": "integer"}}}),
        ),
        Grammar::JsonSchema(json!({"type": "string", "pattern": "\\p{NoSuchClass}"})),
        Grammar::Lark("start: /((/\n".into()),
        Grammar::Lark("start: A\nA: /(?<=a)b/\n".into()),
        Grammar::Gbnf("root ::= [z-a]".into()),
    ] {
        let m = refusal(&e, &g);
        assert!(m.starts_with(g.kind()), "{m}");
    }
    // The line that says what is wrong survives a long echo of the input.
    let long = format!("{}(", "a".repeat(5000));
    let m = refusal(&e, &Grammar::Regex(long));
    assert!(m.contains("unclosed group"), "{m}");
}

/// A panic inside the compiler ends that compile with an error, on its own
/// thread, and the engine compiles the next grammar as before.
#[test]
fn a_panic_while_compiling_is_an_error_not_an_abort() {
    let e = engine();
    match e.constraint(&Grammar::Regex(super::PANIC_FOR_TESTS.into())) {
        Err(EngineError::Constraint(m)) => assert!(m.contains("compiler failed"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(e.constraint(&Grammar::Regex("ok".into())).is_ok());
}

/// A fork is the compiled grammar again: the same first mask and the same
/// tokens accepted, each copy on its own.
#[test]
fn a_forked_constraint_matches_like_a_fresh_compile() {
    let e = engine();
    let g =
        Grammar::JsonSchema(json!({"type": "object", "properties": {"n": {"type": "integer"}}}));
    let mut a = e.constraint(&g).unwrap();
    let mut b = a.fork();
    assert_eq!(
        a.first_mask.as_ref().map(|m| m.to_bin_string()),
        b.first_mask.as_ref().map(|m| m.to_bin_string())
    );
    let toks = e.tokenizer().encode("{\"n\": 42}", false, false);
    assert!(a.matcher.consume_tokens(&toks).is_ok() && a.is_accepting());
    // The first copy's progress is not the second's.
    assert!(!b.is_accepting());
    assert!(b.matcher.consume_tokens(&toks).is_ok() && b.is_accepting());
}
