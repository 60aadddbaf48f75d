//! Objects in a JSON Schema are closed unless the schema opens them.
//!
//! JSON Schema lets an object carry any property its schema does not name
//! when `additionalProperties` is absent. Under a grammar that means a small
//! model may keep inventing keys (`"weight_per_height_per_width_…"`) until
//! `max_tokens` cuts the object off, and the answer no longer parses.
//! OpenAI's strict structured outputs require `additionalProperties: false`
//! on every object, llama.cpp's schema converter and vLLM's xgrammar (strict
//! mode, its default) treat an absent `additionalProperties` as `false`; we
//! do the same. A schema that wants open objects says
//! `"additionalProperties": true` (or a schema for the extra values).
//!
//! `allOf` needs care: llguidance merges the members of an `allOf` by
//! intersecting them, and a member closed over its own properties would
//! forbid the properties the other members name. Each inline member is
//! therefore closed over the union of the properties named by all of them
//! (the others' keys allowed with schema `true`, the intersection narrows
//! them). An `allOf` with a `$ref` member, or a member that already says
//! something about extra properties, is left as written, and so is every
//! `$defs` entry such a `$ref` points at.
//!
//! Closing an `allOf` of n members adds up to n times their names: what
//! each closing adds is counted against the schema's byte limit
//! ([`Growth`]) before it is made.

use super::growth::{json_str_len, Growth, CLOSING_BYTES};
use super::Refusal;
use serde_json::{Map, Value};
use std::collections::HashSet;

/// What the byte limit's refusal says the bytes were for.
const WHAT: &str = "closing its objects (`additionalProperties: false`, and the names of an `allOf`'s members in each member)";

/// Bytes of one `"name":true,` entry beyond the name's own.
const ENTRY_BYTES: usize = 6;

/// Keywords that already decide what an object's unnamed properties may be.
const OPENING_KEYWORDS: [&str; 3] = [
    "additionalProperties",
    "patternProperties",
    "unevaluatedProperties",
];

/// Closes every object of `schema` that names its properties and says
/// nothing about other ones (see the module documentation), refusing when
/// that would grow it past `growth`'s limit.
pub(crate) fn close_objects(schema: &mut Value, growth: &mut Growth) -> Result<(), Refusal> {
    let mut left_open = HashSet::new();
    collect_all_of_refs(schema, &mut left_open);
    close(schema, "#", true, &left_open, growth)
}

/// The `$ref`s that appear as direct members of an `allOf`: their targets
/// are parts of a merged object, so they must stay open.
fn collect_all_of_refs(node: &Value, out: &mut HashSet<String>) {
    match node {
        Value::Object(map) => {
            if let Some(Value::Array(members)) = map.get("allOf") {
                for m in members {
                    if let Some(r) = m.get("$ref").and_then(Value::as_str) {
                        out.insert(r.to_string());
                    }
                }
            }
            map.values().for_each(|v| collect_all_of_refs(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| collect_all_of_refs(v, out)),
        _ => {}
    }
}

/// Whether `map` names properties and leaves the others unsaid.
fn closable(map: &Map<String, Value>) -> bool {
    map.get("properties").is_some_and(Value::is_object)
        && !OPENING_KEYWORDS.iter().any(|k| map.contains_key(*k))
}

/// Names of the properties `map` lists.
fn property_names(map: &Map<String, Value>) -> impl Iterator<Item = &String> {
    map.get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|p| p.keys())
}

/// Bytes of `names` as `"name":true,` entries.
fn entries_bytes<'a>(names: impl Iterator<Item = &'a String>) -> usize {
    names.fold(0, |sum, n| {
        sum.saturating_add(json_str_len(n) + ENTRY_BYTES)
    })
}

/// Closes `map` over `names`: the keys it does not list are added with
/// schema `true`, everything else is forbidden.
fn close_over(map: &mut Map<String, Value>, names: &[String]) {
    if let Some(Value::Object(props)) = map.get_mut("properties") {
        for n in names {
            props.entry(n.clone()).or_insert(Value::Bool(true));
        }
    }
    map.insert("additionalProperties".into(), Value::Bool(false));
}

/// Closes `node` (when `may_close`) and everything below it. `pointer` is
/// the JSON pointer of `node` as a `$ref` would name it.
fn close(
    node: &mut Value,
    pointer: &str,
    may_close: bool,
    left_open: &HashSet<String>,
    growth: &mut Growth,
) -> Result<(), Refusal> {
    let Value::Object(map) = node else {
        return Ok(());
    };
    let may_close = may_close && !left_open.contains(pointer);
    let has_properties = map.get("properties").is_some_and(Value::is_object);

    // allOf: close the inline members (and this node) over the union of
    // their properties, or leave the whole merge open.
    let closed_here = may_close && close_all_of(map, has_properties, growth)?;
    // A node that combines its own properties with alternatives is an
    // intersection too: closing either side would forbid the other's keys.
    let has_alternatives = map.contains_key("anyOf") || map.contains_key("oneOf");
    if may_close && !closed_here && !(has_properties && has_alternatives) && closable(map) {
        growth.add(CLOSING_BYTES, WHAT)?;
        map.insert("additionalProperties".into(), Value::Bool(false));
    }

    for (key, child) in map.iter_mut() {
        let here = format!("{pointer}/{}", escape_pointer(key));
        match key.as_str() {
            "properties" | "patternProperties" | "$defs" | "definitions" | "dependentSchemas" => {
                if let Value::Object(entries) = child {
                    for (name, sub) in entries.iter_mut() {
                        let at = format!("{here}/{}", escape_pointer(name));
                        close(sub, &at, true, left_open, growth)?;
                    }
                }
            }
            "items" | "additionalItems" | "additionalProperties" | "contains" => match child {
                Value::Array(subs) => {
                    for (i, sub) in subs.iter_mut().enumerate() {
                        close(sub, &format!("{here}/{i}"), true, left_open, growth)?;
                    }
                }
                sub => close(sub, &here, true, left_open, growth)?,
            },
            "prefixItems" | "anyOf" | "oneOf" | "allOf" => {
                // Members of an allOf were closed above (or must stay open);
                // alternatives next to this node's own properties stay open.
                let member_closable = match key.as_str() {
                    "allOf" => false,
                    "anyOf" | "oneOf" => !has_properties,
                    _ => true,
                };
                if let Value::Array(subs) = child {
                    for (i, sub) in subs.iter_mut().enumerate() {
                        let at = format!("{here}/{i}");
                        close(sub, &at, member_closable, left_open, growth)?;
                    }
                }
            }
            // `not`, `if`/`then`/`else` and the rest are left as written:
            // closing under a negation or a condition changes what they mean.
            _ => {}
        }
    }
    Ok(())
}

/// Closes the inline members of `map`'s `allOf` (and `map` itself when it
/// `has_properties`) over the union of their property names, when all of
/// them may be closed; whether it did. What that adds is counted first.
fn close_all_of(
    map: &mut Map<String, Value>,
    has_properties: bool,
    growth: &mut Growth,
) -> Result<bool, Refusal> {
    let Some(Value::Array(members)) = map.get("allOf") else {
        return Ok(false);
    };
    let mergeable = members.iter().all(|m| {
        m.as_object().is_some_and(|o| {
            !o.contains_key("$ref") && !OPENING_KEYWORDS.iter().any(|k| o.contains_key(*k))
        })
    }) && !OPENING_KEYWORDS.iter().any(|k| map.contains_key(*k));
    if !mergeable {
        return Ok(false);
    }
    let mut names: Vec<String> = Vec::new();
    let mut seen: HashSet<&str> = HashSet::new();
    let own = std::iter::once(&*map).chain(members.iter().filter_map(Value::as_object));
    for n in own.flat_map(property_names) {
        if seen.insert(n) {
            names.push(n.clone());
        }
    }
    if names.is_empty() {
        return Ok(false);
    }
    // Each closed object gets every name it lacks, and the closing.
    let all = entries_bytes(names.iter());
    let closed_objects = members
        .iter()
        .filter_map(Value::as_object)
        .filter(|m| m.contains_key("properties"))
        .chain(has_properties.then_some(&*map));
    let added = closed_objects.fold(0usize, |sum, m| {
        let lacking = all.saturating_sub(entries_bytes(property_names(m)));
        sum.saturating_add(lacking + CLOSING_BYTES)
    });
    growth.add(added, WHAT)?;
    if let Some(Value::Array(members)) = map.get_mut("allOf") {
        for m in members.iter_mut().filter_map(Value::as_object_mut) {
            if m.contains_key("properties") {
                close_over(m, &names);
            }
        }
    }
    if has_properties {
        close_over(map, &names);
    }
    Ok(true)
}

/// Escapes a key as a JSON pointer segment (RFC 6901).
fn escape_pointer(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::close_objects;
    use crate::constraint::growth::Growth;
    use serde_json::{json, Value};

    fn closed(mut v: Value) -> Value {
        close_objects(&mut v, &mut Growth::new(0, usize::MAX)).unwrap();
        v
    }

    #[test]
    fn plain_objects_are_closed_at_every_depth() {
        let v = closed(json!({
            "type": "object",
            "properties": {
                "a": {"type": "object", "properties": {"b": {"type": "integer"}}},
                "list": {"type": "array", "items": {"properties": {"c": true}}},
                "either": {"anyOf": [{"properties": {"d": true}}, {"type": "null"}]}
            },
            "$defs": {"T": {"properties": {"e": true}}}
        }));
        assert_eq!(v["additionalProperties"], json!(false));
        assert_eq!(v["properties"]["a"]["additionalProperties"], json!(false));
        assert_eq!(
            v["properties"]["list"]["items"]["additionalProperties"],
            json!(false)
        );
        assert_eq!(
            v["properties"]["either"]["anyOf"][0]["additionalProperties"],
            json!(false)
        );
        assert_eq!(v["$defs"]["T"]["additionalProperties"], json!(false));
        // Not an object schema: nothing added.
        assert!(v["properties"]["either"]["anyOf"][1]
            .get("additionalProperties")
            .is_none());
    }

    #[test]
    fn what_the_schema_says_stands() {
        let open = json!({
            "properties": {"a": true},
            "additionalProperties": true,
            "patternProperties": {"^x": {"properties": {"y": true}, "additionalProperties": {"type": "string"}}}
        });
        assert_eq!(closed(open.clone()), open);
        // A free-form object (no properties named) stays free.
        let free = json!({"type": "object"});
        assert_eq!(closed(free.clone()), free);
        // Nothing under `not` changes meaning.
        let negated = json!({"not": {"properties": {"a": true}}});
        assert_eq!(closed(negated.clone()), negated);
    }

    #[test]
    fn all_of_members_close_over_the_union() {
        let v = closed(json!({"allOf": [
            {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
            {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
        ]}));
        for i in 0..2 {
            let m = &v["allOf"][i];
            assert_eq!(m["additionalProperties"], json!(false));
            let keys: Vec<_> = m["properties"]
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect();
            assert!(
                keys.contains(&"id".into()) && keys.contains(&"name".into()),
                "{m}"
            );
        }
        assert_eq!(
            v["allOf"][0]["properties"]["id"],
            json!({"type": "integer"})
        );
        assert_eq!(v["allOf"][0]["properties"]["name"], json!(true));
    }

    #[test]
    fn all_of_with_a_ref_stays_open_and_so_does_its_target() {
        let schema = json!({
            "$defs": {"Base": {"properties": {"id": true}}, "Other": {"properties": {"x": true}}},
            "allOf": [{"$ref": "#/$defs/Base"}, {"properties": {"extra": true}}]
        });
        let v = closed(schema);
        assert!(v["$defs"]["Base"].get("additionalProperties").is_none());
        assert!(v["allOf"][1].get("additionalProperties").is_none());
        assert_eq!(v["$defs"]["Other"]["additionalProperties"], json!(false));
    }

    #[test]
    fn properties_beside_alternatives_stay_open() {
        let schema = json!({
            "properties": {"kind": true},
            "oneOf": [{"properties": {"a": true}}, {"properties": {"b": true}}]
        });
        assert_eq!(closed(schema.clone()), schema);
    }
}
