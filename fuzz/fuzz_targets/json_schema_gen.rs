//! Fuzz JSON Schema compilation with generated schemas: the input is
//! decoded (`arbitrary`) into a schema tree (types, nested properties,
//! `required`, `additionalProperties`, `anyOf`/`oneOf`/`allOf`, `$ref` and
//! `$defs` cycles, `enum`/`const`, string patterns and formats, numeric
//! bounds, `minItems`/`maxItems`, `uniqueItems`, `prefixItems`), turned
//! into JSON and compiled with `Grammars::compile` as a request's
//! `response_format` is. Random bytes rarely make a schema that parses and
//! uses these keywords together; this does on every run.
//!
//! `HEARTH_FUZZ_PRINT=1` prints the generated text (to replay a failure).
//!
//! Invariants: no panic (llguidance's own panics are caught by `compile`
//! and tolerated here), no hang, no runaway memory.

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

#[derive(Debug, Arbitrary)]
enum Format {
    DateTime,
    Date,
    Email,
    Uri,
    Uuid,
    Ipv4,
    Unknown,
}

#[derive(Debug, Arbitrary)]
enum Schema {
    True,
    False,
    Null,
    Boolean,
    Integer {
        min: Option<i64>,
        max: Option<i64>,
        exclusive: bool,
        multiple_of: Option<u16>,
    },
    Number {
        min: Option<f32>,
        max: Option<f32>,
    },
    String {
        min_len: Option<u16>,
        max_len: Option<u16>,
        pattern: Option<String>,
        format: Option<Format>,
    },
    Enum(Vec<Lit>),
    Const(Lit),
    Array {
        items: Option<Box<Schema>>,
        prefix: Vec<Schema>,
        min: Option<u16>,
        max: Option<u16>,
        unique: bool,
    },
    Object {
        props: Vec<(Key, Schema)>,
        required: Vec<Key>,
        additional: Option<Box<Schema>>,
        min_props: Option<u8>,
    },
    AnyOf(Vec<Schema>),
    OneOf(Vec<Schema>),
    AllOf(Vec<Schema>),
    Ref(u8),
    Types(Vec<u8>),
    Raw(String, u16),
}

#[derive(Debug, Arbitrary)]
enum Lit {
    Null,
    Bool(bool),
    Int(i64),
    Str(String),
    List(Vec<bool>),
}

#[derive(Debug, Arbitrary)]
enum Key {
    Name,
    Age,
    Tags,
    Other(String),
}

impl Key {
    fn text(&self) -> String {
        match self {
            Key::Name => "name".into(),
            Key::Age => "age".into(),
            Key::Tags => "tags".into(),
            Key::Other(s) => s.chars().take(12).collect(),
        }
    }
}

fn lit(l: &Lit) -> Value {
    match l {
        Lit::Null => Value::Null,
        Lit::Bool(b) => json!(b),
        Lit::Int(i) => json!(i),
        Lit::Str(s) => json!(s),
        Lit::List(v) => json!(v),
    }
}

const TYPES: [&str; 7] = [
    "null", "boolean", "integer", "number", "string", "array", "object",
];

fn schema(s: &Schema, depth: usize) -> Value {
    if depth > 10 {
        return json!({"type": "integer"});
    }
    let d = depth + 1;
    let list = |v: &[Schema]| -> Vec<Value> { v.iter().take(6).map(|x| schema(x, d)).collect() };
    match s {
        Schema::True => json!(true),
        Schema::False => json!(false),
        Schema::Null => json!({"type": "null"}),
        Schema::Boolean => json!({"type": "boolean"}),
        Schema::Integer {
            min,
            max,
            exclusive,
            multiple_of,
        } => {
            let mut m = Map::new();
            m.insert("type".into(), json!("integer"));
            let (lo, hi) = if *exclusive {
                ("exclusiveMinimum", "exclusiveMaximum")
            } else {
                ("minimum", "maximum")
            };
            if let Some(v) = min {
                m.insert(lo.into(), json!(v));
            }
            if let Some(v) = max {
                m.insert(hi.into(), json!(v));
            }
            if let Some(v) = multiple_of {
                m.insert("multipleOf".into(), json!(v));
            }
            Value::Object(m)
        }
        Schema::Number { min, max } => {
            let mut m = Map::new();
            m.insert("type".into(), json!("number"));
            if let Some(v) = min.filter(|v| v.is_finite()) {
                m.insert("minimum".into(), json!(v));
            }
            if let Some(v) = max.filter(|v| v.is_finite()) {
                m.insert("maximum".into(), json!(v));
            }
            Value::Object(m)
        }
        Schema::String {
            min_len,
            max_len,
            pattern,
            format,
        } => {
            let mut m = Map::new();
            m.insert("type".into(), json!("string"));
            if let Some(v) = min_len {
                m.insert("minLength".into(), json!(v));
            }
            if let Some(v) = max_len {
                m.insert("maxLength".into(), json!(v));
            }
            if let Some(p) = pattern {
                m.insert(
                    "pattern".into(),
                    json!(p.chars().take(40).collect::<String>()),
                );
            }
            if let Some(f) = format {
                let f = match f {
                    Format::DateTime => "date-time",
                    Format::Date => "date",
                    Format::Email => "email",
                    Format::Uri => "uri",
                    Format::Uuid => "uuid",
                    Format::Ipv4 => "ipv4",
                    Format::Unknown => "hostname-ish",
                };
                m.insert("format".into(), json!(f));
            }
            Value::Object(m)
        }
        Schema::Enum(v) => json!({"enum": v.iter().take(8).map(lit).collect::<Vec<_>>()}),
        Schema::Const(l) => json!({"const": lit(l)}),
        Schema::Array {
            items,
            prefix,
            min,
            max,
            unique,
        } => {
            let mut m = Map::new();
            m.insert("type".into(), json!("array"));
            if let Some(i) = items {
                m.insert("items".into(), schema(i, d));
            }
            if !prefix.is_empty() {
                m.insert("prefixItems".into(), json!(list(prefix)));
            }
            if let Some(v) = min {
                m.insert("minItems".into(), json!(v));
            }
            if let Some(v) = max {
                m.insert("maxItems".into(), json!(v));
            }
            if *unique {
                m.insert("uniqueItems".into(), json!(true));
            }
            Value::Object(m)
        }
        Schema::Object {
            props,
            required,
            additional,
            min_props,
        } => {
            let mut p = Map::new();
            for (k, v) in props.iter().take(8) {
                p.insert(k.text(), schema(v, d));
            }
            let mut m = Map::new();
            m.insert("type".into(), json!("object"));
            m.insert("properties".into(), Value::Object(p));
            let req: Vec<String> = required.iter().take(8).map(Key::text).collect();
            if !req.is_empty() {
                m.insert("required".into(), json!(req));
            }
            if let Some(a) = additional {
                m.insert("additionalProperties".into(), schema(a, d));
            }
            if let Some(n) = min_props {
                m.insert("minProperties".into(), json!(n));
            }
            Value::Object(m)
        }
        Schema::AnyOf(v) => json!({"anyOf": list(v)}),
        Schema::OneOf(v) => json!({"oneOf": list(v)}),
        Schema::AllOf(v) => json!({"allOf": list(v)}),
        Schema::Ref(i) => json!({"$ref": format!("#/$defs/d{}", i % 4)}),
        Schema::Types(v) => {
            let t: Vec<&str> = v.iter().take(4).map(|i| TYPES[*i as usize % 7]).collect();
            json!({"type": t})
        }
        Schema::Raw(key, n) => json!({ key.chars().take(16).collect::<String>(): n }),
    }
}

#[derive(Debug, Arbitrary)]
struct Input {
    root: Schema,
    defs: Vec<Schema>,
}

fuzz_target!(
    init: {
        hearth_fuzz::tolerate_caught_panics_in(&["llguidance", "derivre", "toktrie"]);
        let _ = grammars();
    },
    |input: Input| {
    let mut root = schema(&input.root, 0);
    if !input.defs.is_empty() {
        let defs: Map<String, Value> = input
            .defs
            .iter()
            .take(4)
            .enumerate()
            .map(|(i, s)| (format!("d{i}"), schema(s, 1)))
            .collect();
        if let Value::Object(m) = &mut root {
            m.insert("$defs".into(), Value::Object(defs));
        }
    }
    if std::env::var_os("HEARTH_FUZZ_PRINT").is_some() {
        eprintln!("schema: {root}");
    }
    if let Ok(mut c) = grammars().compile(&Grammar::JsonSchema(root), MAX_GRAMMAR_BYTES) {
        let _ = c.is_accepting();
        let _ = c.is_done();
    }
});
