//! Fuzz the grammar compiler with inputs built to be deep or to expand: the
//! classes of issue 90 that random bytes and the schema generator never
//! reach, because they need hundreds of levels or a fan-out repeated many
//! times. The input is decoded (`arbitrary`) into one of the shapes below,
//! with its depth and fan-out chosen by the fuzzer, turned into a JSON
//! Schema, a GBNF grammar or a regular expression of at most
//! `MAX_GRAMMAR_BYTES`, and compiled with `Grammars::compile` as a request's
//! `response_format` or `grammar` is.
//!
//! `HEARTH_FUZZ_PRINT=1` prints the shape and its size (to replay a failure).
//!
//! Invariants: no panic and no stack overflow (an abort libFuzzer reports
//! as a crash), no hang past `-timeout`, and no more memory than
//! `-rss_limit_mb`: run with `FUZZ_RSS_MB=1024` so that an expansion of a
//! small input into a gigabyte is a failure.

#![no_main]

use hearth_engine::{Grammar, Grammars, MAX_GRAMMAR_BYTES};
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Map, Value};
use std::sync::{Arc, OnceLock};

fn grammars() -> &'static Grammars {
    static G: OnceLock<Grammars> = OnceLock::new();
    G.get_or_init(|| {
        let tok = Arc::new(hearth_fuzz::tiny_tokenizer());
        let n = tok.vocab_size();
        Grammars::new(tok, n).expect("grammars over the tiny vocabulary")
    })
}

/// How one level of a nested schema holds the next.
#[derive(Debug, Arbitrary, Clone, Copy)]
enum Nest {
    Property,
    Items,
    AnyOf,
    AllOf,
    PrefixItems,
    AdditionalProperties,
}

/// The shapes: each is small to write and deep or wide once read.
#[derive(Debug, Arbitrary)]
enum Shape {
    /// `$defs` d0 → d1 → … → dN, each one level of `nest` deeper.
    RefChain { depth: u16, nest: Nest },
    /// Every def refers to the next `fan` times: 2^levels paths when inlined.
    RefFanout { levels: u8, fan: u8 },
    /// Nesting written out, each level one of `nests` in turn (bounded at
    /// 1,000 levels: deeper JSON cannot arrive through a request).
    Nested { depth: u16, nests: Vec<Nest> },
    /// `props` arrays of distinct items from one enum of `values` strings
    /// `width` long, each array `min..=max` items.
    Unique {
        props: u8,
        values: u8,
        width: u16,
        min: u8,
        max: u8,
    },
    /// One `allOf` of `members` objects, each naming `each` properties.
    AllOf { members: u16, each: u8 },
    /// `anyOf` of `anyOf` of …: `levels` deep, `width` wide.
    AnyOfProduct { levels: u8, width: u8 },
    /// GBNF rules chained `depth` deep.
    GbnfChain { depth: u16 },
    /// GBNF parentheses nested `depth` deep.
    GbnfParens { depth: u16 },
    /// GBNF repetition bounds nested: `"a"{n}` inside `{n}` `levels` times.
    GbnfRepeat { n: u16, levels: u8 },
    /// A regex of nested groups, each repeated `{n}`.
    RegexRepeat { n: u16, levels: u8 },
    /// A regex of `depth` nested groups.
    RegexNest { depth: u16 },
}

fn nest(kind: Nest, inner: Value) -> Value {
    match kind {
        Nest::Property => json!({"type": "object", "properties": {"a": inner}, "required": ["a"]}),
        Nest::Items => json!({"type": "array", "items": inner}),
        Nest::AnyOf => json!({"anyOf": [inner, {"type": "null"}]}),
        Nest::AllOf => json!({"allOf": [inner, {"type": "object"}]}),
        Nest::PrefixItems => json!({"type": "array", "prefixItems": [inner]}),
        Nest::AdditionalProperties => json!({"type": "object", "additionalProperties": inner}),
    }
}

fn defs_schema(defs: Map<String, Value>) -> Value {
    json!({"$ref": "#/$defs/d0", "$defs": Value::Object(defs)})
}

fn schema(shape: &Shape) -> Option<Value> {
    Some(match *shape {
        Shape::RefChain { depth, nest: kind } => {
            let depth = usize::from(depth);
            let mut defs = Map::new();
            for i in 0..depth {
                defs.insert(format!("d{i}"), nest(kind, json!({"$ref": format!("#/$defs/d{}", i + 1)})));
            }
            defs.insert(format!("d{depth}"), json!({"type": "string"}));
            defs_schema(defs)
        }
        Shape::RefFanout { levels, fan } => {
            let (levels, fan) = (usize::from(levels % 64), usize::from(fan % 16).max(1));
            let mut defs = Map::new();
            for i in 0..levels {
                let props: Map<String, Value> = (0..fan)
                    .map(|k| (format!("p{k}"), json!({"$ref": format!("#/$defs/d{}", i + 1)})))
                    .collect();
                defs.insert(format!("d{i}"), json!({"type": "object", "properties": props}));
            }
            defs.insert(format!("d{levels}"), json!({"type": "integer"}));
            defs_schema(defs)
        }
        Shape::Nested { depth, ref nests } => {
            let mut s = json!({"type": "boolean"});
            for i in 0..usize::from(depth % 1000) {
                let kind = nests.get(i % nests.len().max(1)).copied().unwrap_or(Nest::Property);
                s = nest(kind, s);
            }
            s
        }
        Shape::Unique { props, values, width, min, max } => {
            let width = usize::from(width % 4096);
            let values: Vec<Value> = (0..values).map(|i| json!(format!("{i:03}{}", "x".repeat(width)))).collect();
            let arr = json!({"type": "array", "uniqueItems": true, "minItems": min % 8, "maxItems": max % 8,
                             "items": {"$ref": "#/$defs/E"}});
            let props: Map<String, Value> = (0..props).map(|i| (format!("p{i}"), arr.clone())).collect();
            json!({"type": "object", "$defs": {"E": {"enum": values}}, "properties": props})
        }
        Shape::AllOf { members, each } => {
            let members: Vec<Value> = (0..usize::from(members))
                .map(|m| {
                    let props: Map<String, Value> = (0..usize::from(each % 16).max(1))
                        .map(|k| (format!("m{m}p{k}"), json!({"type": "integer"})))
                        .collect();
                    json!({"type": "object", "properties": props})
                })
                .collect();
            json!({"allOf": members})
        }
        Shape::AnyOfProduct { levels, width } => {
            let mut s = json!({"type": "integer"});
            for _ in 0..usize::from(levels % 128) {
                let alts: Vec<Value> = (0..usize::from(width % 16).max(1)).map(|_| s.clone()).collect();
                s = json!({"anyOf": alts});
                if s.to_string().len() > MAX_GRAMMAR_BYTES {
                    break;
                }
            }
            s
        }
        _ => return None,
    })
}

fn text_grammar(shape: &Shape) -> Option<Grammar> {
    Some(match *shape {
        Shape::GbnfChain { depth } => {
            let mut g = String::from("root ::= r0\n");
            for i in 0..depth {
                g.push_str(&format!("r{i} ::= \"a\" r{} | \"b\"\n", i + 1));
            }
            g.push_str(&format!("r{depth} ::= \"z\"\n"));
            Grammar::Gbnf(g)
        }
        Shape::GbnfParens { depth } => {
            let d = usize::from(depth);
            Grammar::Gbnf(format!("root ::= {}\"a\"{}\n", "(".repeat(d), ")".repeat(d)))
        }
        Shape::GbnfRepeat { n, levels } => {
            let mut body = String::from("\"a\"");
            for _ in 0..levels % 16 {
                body = format!("({body}){{{n}}}");
            }
            Grammar::Gbnf(format!("root ::= {body}\n"))
        }
        Shape::RegexRepeat { n, levels } => {
            let mut body = String::from("a");
            for _ in 0..levels % 16 {
                body = format!("({body}){{{}}}", n % 1024);
            }
            Grammar::Regex(body)
        }
        Shape::RegexNest { depth } => {
            let d = usize::from(depth);
            Grammar::Regex(format!("{}a{}", "(".repeat(d), ")".repeat(d)))
        }
        _ => return None,
    })
}

fuzz_target!(
    init: {
        hearth_fuzz::tolerate_caught_panics_in(&["llguidance", "derivre", "toktrie"]);
        let _ = grammars();
    },
    |shape: Shape| {
    let grammar = match schema(&shape) {
        Some(v) => Grammar::JsonSchema(v),
        None => match text_grammar(&shape) {
            Some(g) => g,
            None => return,
        },
    };
    if std::env::var_os("HEARTH_FUZZ_PRINT").is_some() {
        eprintln!("shape: {shape:?}");
    }
    if let Ok(mut c) = grammars().compile(&grammar, MAX_GRAMMAR_BYTES) {
        let _ = c.is_accepting();
        let _ = c.is_done();
    }
});
