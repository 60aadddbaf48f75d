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
//!
//! The tuples copy the values, and one enum may be referenced from many
//! arrays: what each expansion adds is counted against the schema's byte
//! limit ([`Growth`]) before it is built, and gathering and comparing the
//! values of all the arrays stops at [`MAX_WORK`]: an array past it is
//! left unenforced.

use super::growth::{json_len, Growth};
use super::Refusal;
use serde_json::{json, Map, Value};

/// The most tuples one array is expanded into.
pub(crate) const MAX_SEQUENCES: usize = 2048;

/// The most work gathering the values of one schema's arrays may take: a
/// schema looked through (behind a `$ref`, an `anyOf`) is 1, measuring a
/// value its bytes, comparing two values 1 plus the bytes of one. About
/// 20 ms; real enums take a few thousand. Nested alternatives of
/// references, or one large enum behind many arrays, would otherwise ask
/// for exponentially or quadratically much.
const MAX_WORK: usize = 1 << 24;

/// What the byte limit's refusal says the bytes were for.
const WHAT: &str = "listing the orders of its `uniqueItems` arrays";

/// Bytes of a tuple without its values, at most: `{"type":"array",
/// "prefixItems":[],"items":false,"minItems":N,"maxItems":N},` for N of up
/// to 4 digits (a tuple is at most [`MAX_SEQUENCES`] long).
const TUPLE_BYTES: usize = 80;

/// Bytes of `{"const":},` around each value of a tuple.
const CONST_BYTES: usize = 11;

static FALSE: Value = Value::Bool(false);
static TRUE: Value = Value::Bool(true);
static NULL: Value = Value::Null;

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
/// distinct items than its values allow is an error that says so, and so
/// is a rewrite that would grow the schema past `growth`'s limit.
pub(crate) fn expand_unique_items(
    schema: &mut Value,
    growth: &mut Growth,
) -> Result<UniqueNotes, Refusal> {
    let root = schema.clone();
    let mut gather = Gather {
        root: &root,
        work: 0,
    };
    let mut notes = UniqueNotes::default();
    rewrite(schema, &mut gather, &mut notes, growth, 0)?;
    match notes.impossible.take() {
        Some(why) => Err(Refusal::Invalid(why)),
        None => Ok(notes),
    }
}

/// The deepest nesting walked; schemas deeper than this are left as they
/// are (llguidance bounds them again).
const MAX_DEPTH: usize = 64;

fn rewrite(
    node: &mut Value,
    gather: &mut Gather,
    notes: &mut UniqueNotes,
    growth: &mut Growth,
    depth: usize,
) -> Result<(), Refusal> {
    if depth > MAX_DEPTH {
        return Ok(());
    }
    match node {
        Value::Object(map) => {
            for v in map.values_mut() {
                rewrite(v, gather, notes, growth, depth + 1)?;
            }
            // `false` and anything malformed ask for nothing.
            if let Some(Value::Bool(true)) = map.remove("uniqueItems") {
                expand(map, gather, notes, growth)?;
            }
        }
        Value::Array(items) => {
            for v in items {
                rewrite(v, gather, notes, growth, depth + 1)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// The tuples of `map` (an array schema that asked for unique items), or a
/// note saying why it stays unenforced.
fn expand(
    map: &mut Map<String, Value>,
    gather: &mut Gather,
    notes: &mut UniqueNotes,
    growth: &mut Growth,
) -> Result<(), Refusal> {
    let values = map.get("items").and_then(|i| gather.finite_values(i, 0));
    let Some(values) = values else {
        notes
            .unenforced
            .push("its items are not a short list of values (enum, const, boolean, null)".into());
        return Ok(());
    };
    let n = values.len();
    let bound = |key: &str| map.get(key).and_then(Value::as_u64).map(|v| v as usize);
    let min = bound("minItems").unwrap_or(0);
    let max = bound("maxItems").unwrap_or(n).min(n);
    if min > max {
        notes.impossible = Some(format!(
            "uniqueItems with minItems {min} needs more distinct items than the {n} values the items allow"
        ));
        return Ok(());
    }
    let Some(count) = sequence_count(n, min, max) else {
        notes.unenforced.push(format!(
            "{n} values in arrays of {min} to {max} make more than {MAX_SEQUENCES} orders"
        ));
        return Ok(());
    };
    let (values, value_bytes): (Vec<&Value>, Vec<usize>) = values.into_iter().unzip();
    growth.add(tuples_bytes(&value_bytes, min, max), WHAT)?;
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
    Ok(())
}

/// Bytes of the tuples of every order of `min..=max` distinct values out
/// of values `value_bytes` long (their count is within [`MAX_SEQUENCES`]):
/// P(n, k) tuples of length k, in which each value appears k·P(n-1, k-1)
/// times.
fn tuples_bytes(value_bytes: &[usize], min: usize, max: usize) -> usize {
    let n = value_bytes.len();
    let all_values = value_bytes.iter().fold(0usize, |s, &b| s.saturating_add(b));
    let (mut total, mut perms, mut perms_without_one) = (0usize, 1usize, 1usize);
    for k in 0..=max {
        if k > 0 {
            perms = perms.saturating_mul(n - (k - 1));
            if k > 1 {
                perms_without_one = perms_without_one.saturating_mul(n - (k - 1));
            }
        }
        if k < min {
            continue;
        }
        let tuples = perms.saturating_mul(TUPLE_BYTES + k * CONST_BYTES);
        let values = if k == 0 {
            0
        } else {
            all_values.saturating_mul(k.saturating_mul(perms_without_one))
        };
        total = total.saturating_add(tuples).saturating_add(values);
    }
    total
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
    values: &[&Value],
    min: usize,
    max: usize,
    chosen: &mut Vec<usize>,
    used: &mut [bool],
    out: &mut Vec<Value>,
) {
    if chosen.len() >= min {
        let prefix: Vec<Value> = chosen
            .iter()
            .map(|&i| json!({"const": values[i].clone()}))
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

/// Gathering the values of one schema's arrays: the schema to resolve
/// `$ref`s in, and the work done so far ([`MAX_WORK`]).
struct Gather<'r> {
    root: &'r Value,
    work: usize,
}

impl<'r> Gather<'r> {
    /// Counts `units` of work; `None` past [`MAX_WORK`].
    fn charge(&mut self, units: usize) -> Option<()> {
        self.work = self.work.saturating_add(units);
        (self.work <= MAX_WORK).then_some(())
    }

    /// The values a schema allows when they are few and known, distinct
    /// and in the schema's order, each with its bytes as JSON; `None`
    /// otherwise, or past [`MAX_SEQUENCES`] values or [`MAX_WORK`].
    fn finite_values<'v>(
        &mut self,
        schema: &'v Value,
        depth: usize,
    ) -> Option<Vec<(&'v Value, usize)>>
    where
        'r: 'v,
    {
        self.charge(1)?;
        if depth > 16 {
            return None;
        }
        let map = schema.as_object()?;
        if let Some(r) = map.get("$ref").and_then(Value::as_str) {
            let target = r.strip_prefix('#').and_then(|p| self.root.pointer(p))?;
            return self.finite_values(target, depth + 1);
        }
        let listed: Vec<&Value> = if let Some(v) = map.get("const") {
            vec![v]
        } else if let Some(Value::Array(e)) = map.get("enum") {
            e.iter().collect()
        } else if let Some(Value::Array(alts)) = map.get("anyOf").or_else(|| map.get("oneOf")) {
            let mut all = Vec::new();
            for a in alts {
                all.extend(self.finite_values(a, depth + 1)?);
                if all.len() > MAX_SEQUENCES {
                    return None;
                }
            }
            return self.distinct(self.of_type(map, all));
        } else {
            match map.get("type").and_then(Value::as_str) {
                Some("boolean") => vec![&FALSE, &TRUE],
                Some("null") => vec![&NULL],
                _ => return None,
            }
        };
        // More values than orders allowed: no array of them is listed.
        if listed.len() > MAX_SEQUENCES {
            return None;
        }
        let mut measured = Vec::with_capacity(listed.len());
        for v in listed {
            let n = json_len(v);
            self.charge(n)?;
            measured.push((v, n));
        }
        self.distinct(self.of_type(map, measured))
    }

    /// `values` of the `type` beside them, if any (a `type` beside an
    /// `enum` keeps only the values of that type).
    fn of_type<'v>(
        &self,
        map: &Map<String, Value>,
        mut values: Vec<(&'v Value, usize)>,
    ) -> Vec<(&'v Value, usize)> {
        if let Some(t) = map.get("type").and_then(Value::as_str) {
            values.retain(|(v, _)| json_type_matches(v, t));
        }
        values
    }

    /// `values` without repeats, first ones kept. Equal values write the
    /// same number of bytes, so only those are compared.
    fn distinct<'v>(&mut self, values: Vec<(&'v Value, usize)>) -> Option<Vec<(&'v Value, usize)>> {
        let mut kept: Vec<(&Value, usize)> = Vec::with_capacity(values.len());
        for (v, n) in values {
            let mut repeat = false;
            for &(d, dn) in &kept {
                if dn == n {
                    self.charge(1 + n)?;
                    if std::ptr::eq(d, v) || d == v {
                        repeat = true;
                        break;
                    }
                }
            }
            if !repeat {
                kept.push((v, n));
            }
        }
        Some(kept)
    }
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

    fn expand_unique_items(s: &mut Value) -> Result<UniqueNotes, String> {
        let mut unlimited = Growth::new(0, usize::MAX);
        super::expand_unique_items(s, &mut unlimited).map_err(|r| format!("{r:?}"))
    }

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

#[cfg(test)]
mod growth_tests {
    use super::*;

    /// The bytes counted before expanding cover what the expansion adds.
    #[test]
    fn tuple_bytes_cover_the_expansion() {
        for (values, min, max) in [
            (json!(["a", "bb", {"c": [1, 2]}]), 0, 3),
            (json!(["x".repeat(100), "y", 7, null]), 1, 2),
            (json!([true, false]), 2, 2),
        ] {
            let mut s = json!({"type": "array", "items": {"enum": values},
                               "uniqueItems": true, "minItems": min, "maxItems": max});
            let before = json_len(&s);
            let mut growth = Growth::new(before, usize::MAX);
            expand_unique_items(&mut s, &mut growth).unwrap();
            let after = json_len(&s);
            let counted = growth.size() - before;
            assert!(counted >= after - before, "{counted} < {}", after - before);
            assert!(
                counted <= 2 * (after - before),
                "{counted} vs {}",
                after - before
            );
        }
    }

    /// One enum referenced from many arrays: refused before it is copied
    /// into every order of each, naming the limit.
    #[test]
    fn a_shared_enum_copied_into_many_arrays_is_refused() {
        let values: Vec<String> = (0..6).map(|i| format!("{i}{}", "x".repeat(1000))).collect();
        let props: Map<String, Value> = (0..40)
            .map(|i| {
                (
                    format!("p{i}"),
                    json!({"type": "array", "items": {"$ref": "#/$defs/E"}, "uniqueItems": true}),
                )
            })
            .collect();
        let mut s =
            json!({"$defs": {"E": {"enum": values}}, "type": "object", "properties": props});
        let size = json_len(&s);
        assert!(size < 16 * 1024, "{size}");
        let mut growth = Growth::new(size, 256 * 1024);
        match expand_unique_items(&mut s, &mut growth) {
            Err(Refusal::TooLarge(m)) => assert!(m.contains("262144 bytes"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    /// Many arrays over one large enum, and alternatives of references
    /// nested 16 deep (10^16 paths): gathering stops at its work bound,
    /// the arrays past it unenforced.
    #[test]
    fn gathering_values_is_bounded() {
        let values: Vec<u32> = (0..2048).collect();
        let props: Map<String, Value> = (0..5000)
            .map(|i| {
                (
                    format!("p{i}"),
                    json!({"items": {"$ref": "#/$defs/E"}, "uniqueItems": true, "maxItems": 0}),
                )
            })
            .collect();
        let mut s = json!({"$defs": {"E": {"enum": values}}, "properties": props});
        let notes = expand_unique_items(&mut s, &mut Growth::new(0, usize::MAX)).unwrap();
        assert_eq!(notes.exact.len() + notes.unenforced.len(), 5000);
        assert!(!notes.unenforced.is_empty(), "the bound was reached");

        let mut defs = Map::new();
        for d in 0..16 {
            let next = json!({"$ref": format!("#/$defs/a{}", d + 1)});
            defs.insert(format!("a{d}"), json!({"anyOf": vec![next; 10]}));
        }
        defs.insert("a16".into(), json!({"enum": [1, 2]}));
        let mut s = json!({"$defs": defs, "type": "array", "items": {"$ref": "#/$defs/a0"}, "uniqueItems": true});
        let notes = expand_unique_items(&mut s, &mut Growth::new(0, usize::MAX)).unwrap();
        assert_eq!(notes.unenforced.len(), 1, "{notes:?}");
    }
}
