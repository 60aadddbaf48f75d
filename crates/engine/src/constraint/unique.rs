//! `uniqueItems`, which llguidance refuses, held by rewriting the schema.
//!
//! A grammar cannot remember which items an array already holds, but when
//! the items can take only a few values (an `enum`, a `const`, booleans,
//! `null`, or a `$ref` or `anyOf` of those; Pydantic writes `set[Color]`
//! this way, and tag lists are enums) the arrays without a repeat can be
//! listed: the array schema becomes an `anyOf` of one fixed-length tuple per
//! ordered choice of distinct values within `minItems..=maxItems`. That is
//! exact. Past [`MAX_SEQUENCES`] tuples, and for items that are not finite
//! (strings, numbers, objects), the keyword is dropped and each such array
//! is named in the notes that come back: the output may repeat an item.

use serde_json::{json, Map, Value};

/// The most tuples one array is expanded into.
pub(crate) const MAX_SEQUENCES: usize = 2048;

/// What the rewrite did with each `uniqueItems` it found.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct UniqueNotes {
    /// Arrays held exactly (their tuple counts).
    pub exact: Vec<usize>,
    /// Arrays left unenforced, each with the reason.
    pub unenforced: Vec<String>,
    /// An array no list of distinct values can fill.
    pub impossible: Option<String>,
}

/// Rewrites every `"uniqueItems": true` of `schema` (see the module
/// documentation); `false` is simply removed. An array that asks for more
/// distinct items than its values allow is an error that says so.
pub(crate) fn expand_unique_items(schema: &mut Value) -> Result<UniqueNotes, String> {
    let root = schema.clone();
    let mut notes = UniqueNotes::default();
    rewrite(schema, &root, &mut notes, 0);
    match notes.impossible.take() {
        Some(why) => Err(why),
        None => Ok(notes),
    }
}

/// The deepest nesting walked; schemas deeper than this are left as they
/// are (llguidance bounds them again).
const MAX_DEPTH: usize = 64;

fn rewrite(node: &mut Value, root: &Value, notes: &mut UniqueNotes, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    match node {
        Value::Object(map) => {
            for v in map.values_mut() {
                rewrite(v, root, notes, depth + 1);
            }
            // `false` and anything malformed ask for nothing.
            if let Some(Value::Bool(true)) = map.remove("uniqueItems") {
                expand(map, root, notes);
            }
        }
        Value::Array(items) => items
            .iter_mut()
            .for_each(|v| rewrite(v, root, notes, depth + 1)),
        _ => {}
    }
}

/// The tuples of `map` (an array schema that asked for unique items), or a
/// note saying why it stays unenforced.
fn expand(map: &mut Map<String, Value>, root: &Value, notes: &mut UniqueNotes) {
    let Some(values) = map.get("items").and_then(|i| finite_values(i, root, 0)) else {
        notes
            .unenforced
            .push("its items are not a short list of values (enum, const, boolean, null)".into());
        return;
    };
    let n = values.len();
    let bound = |key: &str| map.get(key).and_then(Value::as_u64).map(|v| v as usize);
    let min = bound("minItems").unwrap_or(0);
    let max = bound("maxItems").unwrap_or(n).min(n);
    if min > max {
        notes.impossible = Some(format!(
            "uniqueItems with minItems {min} needs more distinct items than the {n} values the items allow"
        ));
        return;
    }
    let Some(count) = sequence_count(n, min, max) else {
        notes.unenforced.push(format!(
            "{n} values in arrays of {min} to {max} make more than {MAX_SEQUENCES} orders"
        ));
        return;
    };
    let mut tuples = Vec::with_capacity(count);
    let mut chosen = Vec::new();
    let mut used = vec![false; n];
    orders(&values, min, max, &mut chosen, &mut used, &mut tuples);
    for key in ["items", "minItems", "maxItems", "prefixItems", "contains"] {
        map.remove(key);
    }
    map.insert("type".into(), json!("array"));
    map.insert("anyOf".into(), Value::Array(tuples));
    notes.exact.push(count);
}

/// The number of ordered choices of `min..=max` distinct values out of `n`,
/// when it is at most [`MAX_SEQUENCES`].
fn sequence_count(n: usize, min: usize, max: usize) -> Option<usize> {
    let mut total = 0usize;
    let mut perms = 1usize; // n! / (n - k)! for k = 0
    for k in 0..=max {
        if k > 0 {
            perms = perms.checked_mul(n - (k - 1))?;
        }
        if k >= min {
            total = total.checked_add(perms)?;
        }
        if total > MAX_SEQUENCES {
            return None;
        }
    }
    Some(total)
}

/// Every order of distinct `values` of a length within `min..=max`, each as
/// a tuple schema, depth first.
fn orders(
    values: &[Value],
    min: usize,
    max: usize,
    chosen: &mut Vec<usize>,
    used: &mut [bool],
    out: &mut Vec<Value>,
) {
    if chosen.len() >= min {
        let prefix: Vec<Value> = chosen
            .iter()
            .map(|&i| json!({"const": values[i]}))
            .collect();
        out.push(json!({
            "type": "array",
            "prefixItems": prefix,
            "items": false,
            "minItems": chosen.len(),
            "maxItems": chosen.len(),
        }));
    }
    if chosen.len() == max {
        return;
    }
    for i in 0..values.len() {
        if !used[i] {
            used[i] = true;
            chosen.push(i);
            orders(values, min, max, chosen, used, out);
            chosen.pop();
            used[i] = false;
        }
    }
}

/// The values a schema allows when they are few and known, distinct and in
/// the schema's order; `None` otherwise.
fn finite_values(schema: &Value, root: &Value, depth: usize) -> Option<Vec<Value>> {
    if depth > 16 {
        return None;
    }
    let map = schema.as_object()?;
    if let Some(r) = map.get("$ref").and_then(Value::as_str) {
        let target = r.strip_prefix('#').and_then(|p| root.pointer(p))?;
        return finite_values(target, root, depth + 1);
    }
    let mut values: Vec<Value> = if let Some(v) = map.get("const") {
        vec![v.clone()]
    } else if let Some(Value::Array(e)) = map.get("enum") {
        e.clone()
    } else if let Some(Value::Array(alts)) = map.get("anyOf").or_else(|| map.get("oneOf")) {
        let mut all = Vec::new();
        for a in alts {
            all.extend(finite_values(a, root, depth + 1)?);
        }
        all
    } else {
        match map.get("type").and_then(Value::as_str) {
            Some("boolean") => vec![json!(false), json!(true)],
            Some("null") => vec![Value::Null],
            _ => return None,
        }
    };
    // A `type` beside an `enum` keeps only the values of that type.
    if let Some(t) = map.get("type").and_then(Value::as_str) {
        values.retain(|v| json_type_matches(v, t));
    }
    let mut distinct: Vec<Value> = Vec::with_capacity(values.len());
    for v in values {
        if !distinct.contains(&v) {
            distinct.push(v);
        }
    }
    Some(distinct)
}

fn json_type_matches(v: &Value, t: &str) -> bool {
    match t {
        "string" => v.is_string(),
        "integer" => v.as_i64().is_some() || v.as_u64().is_some(),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        "array" => v.is_array(),
        "object" => v.is_object(),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enum_items_become_every_order_of_distinct_values() {
        let mut s = json!({
            "type": "object",
            "properties": {"tags": {"type": "array", "items": {"enum": ["a", "b", "c"]},
                                    "uniqueItems": true, "maxItems": 2}}
        });
        let notes = expand_unique_items(&mut s).unwrap();
        // 1 empty + 3 of one + 6 of two.
        assert_eq!(notes.exact, vec![10]);
        let tags = &s["properties"]["tags"];
        assert!(tags.get("uniqueItems").is_none() && tags.get("items").is_none());
        let alts = tags["anyOf"].as_array().unwrap();
        assert_eq!(alts.len(), 10);
        for a in alts {
            let consts: Vec<&Value> = a["prefixItems"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| &c["const"])
                .collect();
            let mut dedup = consts.clone();
            dedup.dedup();
            assert_eq!(dedup.len(), consts.len(), "{a}");
        }
    }

    #[test]
    fn refs_booleans_and_bounds() {
        // Pydantic's `set[Color]`: the enum sits in `$defs`.
        let mut s = json!({
            "$defs": {"Color": {"enum": ["red", "green"], "type": "string"}},
            "type": "array", "items": {"$ref": "#/$defs/Color"}, "uniqueItems": true, "minItems": 1
        });
        assert_eq!(expand_unique_items(&mut s).unwrap().exact, vec![4]);
        let mut s = json!({"type": "array", "items": {"type": "boolean"}, "uniqueItems": true});
        assert_eq!(expand_unique_items(&mut s).unwrap().exact, vec![5]);
        // More distinct values asked for than there are: an error.
        let mut s =
            json!({"type": "array", "items": {"const": 1}, "uniqueItems": true, "minItems": 2});
        let err = expand_unique_items(&mut s).unwrap_err();
        assert!(
            err.contains("minItems 2") && err.contains("1 values"),
            "{err}"
        );
        let mut s = json!({"type": "array", "items": {"enum": [1]}, "uniqueItems": false});
        assert_eq!(expand_unique_items(&mut s).unwrap(), UniqueNotes::default());
        assert!(s.get("uniqueItems").is_none() && s.get("anyOf").is_none());
    }

    #[test]
    fn open_or_large_item_sets_are_left_unenforced_and_said() {
        let mut s = json!({"type": "array", "items": {"type": "string"}, "uniqueItems": true});
        let notes = expand_unique_items(&mut s).unwrap();
        assert!(notes.exact.is_empty() && notes.unenforced.len() == 1);
        assert_eq!(s, json!({"type": "array", "items": {"type": "string"}}));
        let values: Vec<u32> = (0..12).collect();
        let mut s = json!({"type": "array", "items": {"enum": values}, "uniqueItems": true});
        let notes = expand_unique_items(&mut s).unwrap();
        assert!(notes.unenforced[0].contains("more than"), "{notes:?}");
        assert_eq!(sequence_count(12, 0, 3), Some(1 + 12 + 132 + 1320));
        assert_eq!(sequence_count(5, 0, 5), Some(326));
        assert_eq!(sequence_count(40, 0, 40), None);
    }
}
