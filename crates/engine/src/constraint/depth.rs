//! How deep compiling a grammar recurses, bounded before it compiles.
//!
//! llguidance compiles recursively: a JSON Schema level by level, each
//! `$ref` target compiled where it is first met (so a chain of references
//! nests as deep as the chain is long), a Lark grammar rule by rule, each
//! rule compiled where it is first used. Measured on llguidance 1.9 (the
//! `ci` profile), one level takes 2.4 to 4.8 KiB of stack, and a 2 MiB
//! thread overflows, aborting the whole process, at about 220 links of a
//! `$ref` chain through object properties, 340 nested objects, 435 nested
//! `anyOf`s, 435 chained GBNF rules or 685 chained Lark rules.
//!
//! So a grammar's depth is bounded here, by walks that do not recurse, to
//! [`MAX_GRAMMAR_DEPTH`], and it compiles on a thread whose stack holds that
//! depth many times over ([`COMPILE_STACK`]). The depth counted is an upper
//! bound on the recursion, over a graph of the places compiling can jump
//! to (`$ref` targets, rules), each weighted by how deep it nests itself:
//! compiling follows a path of that graph, each place on the path at most
//! once (llguidance compiles a target or rule once, and a reference back
//! to one in progress does not recurse), so the deepest path bounds the
//! stack. Where places form a cycle (recursive schemas and grammars) a
//! path may cross all of the cycle, and the cycle counts as the sum of its
//! places.

mod lark;

pub(super) use lark::lark_depth;

use super::Refusal;
use serde_json::Value;
use std::collections::HashMap;

/// The deepest a grammar may nest: levels of JSON (objects and arrays) in
/// a schema, counting through each `$ref` the depth of its target; rules
/// and parentheses in a grammar, counting through each rule it uses the
/// depth of that rule. Far beyond real schemas (OpenAI's structured
/// outputs allow 10 levels of objects) and grammars, and a tenth of what
/// [`COMPILE_STACK`] holds.
pub const MAX_GRAMMAR_DEPTH: usize = 256;

/// The stack of the thread a grammar compiles on: 8 MiB, where the deepest
/// grammars [`MAX_GRAMMAR_DEPTH`] lets through take at most 512 KiB as
/// measured (chains of `$ref`s, of rules, nested objects, arrays and
/// `anyOf`s), leaving room for llguidance's own bounded recursions on top
/// (`allOf` merges, 128 levels of 2.5 KiB; regular expressions, 250 levels
/// of nesting) and for less optimized builds. Only the pages a compile
/// touches are ever committed.
pub(super) const COMPILE_STACK: usize = 8 << 20;

/// The refusal for a grammar deeper than [`MAX_GRAMMAR_DEPTH`].
pub(super) fn too_deep(what: &str) -> Refusal {
    Refusal::Invalid(format!(
        "{what} nests more than {MAX_GRAMMAR_DEPTH} levels deep; the limit is {MAX_GRAMMAR_DEPTH} levels"
    ))
}

/// Refuses `value` when its objects and arrays nest deeper than
/// [`MAX_GRAMMAR_DEPTH`]: checked before anything walks it recursively
/// (serializing, cloning, dropping it all recurse).
pub(super) fn check_json_nesting(value: &Value) -> Result<(), Refusal> {
    let mut stack = vec![(value, 1usize)];
    while let Some((v, depth)) = stack.pop() {
        if depth > MAX_GRAMMAR_DEPTH && (v.is_object() || v.is_array()) {
            return Err(too_deep("it"));
        }
        match v {
            Value::Object(map) => stack.extend(map.values().map(|c| (c, depth + 1))),
            Value::Array(items) => stack.extend(items.iter().map(|c| (c, depth + 1))),
            _ => {}
        }
    }
    Ok(())
}

/// Refuses a regular expression whose groups nest deeper than
/// [`MAX_GRAMMAR_DEPTH`] (the regex parser stops at 250 levels too, with a
/// message that names less of the problem).
pub(super) fn check_regex_nesting(rx: &str) -> Result<(), Refusal> {
    if regex_nesting(rx) > MAX_GRAMMAR_DEPTH {
        return Err(too_deep("the expression"));
    }
    Ok(())
}

/// How deep the groups of regular expression `rx` nest (escapes and
/// character classes skipped).
pub(super) fn regex_nesting(rx: &str) -> usize {
    let (mut depth, mut deepest, mut in_class) = (0usize, 0usize, false);
    let mut bytes = rx.bytes();
    while let Some(b) = bytes.next() {
        match b {
            b'\\' => {
                bytes.next();
            }
            b'[' => in_class = true,
            b']' => in_class = false,
            b'(' if !in_class => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b')' if !in_class => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Refuses a schema whose compile could nest deeper than
/// [`MAX_GRAMMAR_DEPTH`] (see the module documentation); `schema` has
/// passed [`check_json_nesting`].
pub(super) fn check_schema(schema: &Value) -> Result<(), Refusal> {
    if schema_depth(schema) > MAX_GRAMMAR_DEPTH {
        return Err(too_deep("counting its `$ref`s, it"));
    }
    Ok(())
}

/// An upper bound on how deep compiling `schema` recurses, in levels of
/// JSON. The places are the root and every `$ref` target, each weighing
/// the depth of its subtree; a place leads to the targets of the `$ref`s
/// in its subtree. Compiling starts at the root and may meet the root
/// again through a `$ref` to `#`, so the root counts twice then.
///
/// `$ref`s other than JSON pointers from the root (`#/…`), or a schema
/// whose `$id`s, anchors or dynamic references move what a reference
/// points at, are not resolved here: then every place may lead to every
/// other, and the bound is the sum of all of them.
pub(super) fn schema_depth(schema: &Value) -> usize {
    let places = Places::of(schema);
    let (weights, edges) = places.graph(schema);
    if places.unresolved {
        return weights
            .iter()
            .fold(weights[0], |sum, &w| sum.saturating_add(w));
    }
    let root_again = if places.root_is_target { weights[0] } else { 0 };
    deepest_paths(&weights, &edges)[0].saturating_add(root_again)
}

/// Keywords whose presence moves what a `$ref` points at, or that are
/// references of their own: with them, references are not resolved here.
const SCOPE_KEYWORDS: [&str; 5] = [
    "$anchor",
    "$dynamicAnchor",
    "$recursiveAnchor",
    "$dynamicRef",
    "$recursiveRef",
];

/// The root and the `$ref` targets of a schema, by address.
struct Places<'a> {
    /// Index of each place by its node's address; the root is 0.
    index: HashMap<*const Value, usize>,
    /// Each `$ref` string met, and the place it points at.
    targets: HashMap<&'a str, usize>,
    /// Some reference or keyword defeats resolving them here.
    unresolved: bool,
    /// A `$ref` points back at the root.
    root_is_target: bool,
}

impl<'a> Places<'a> {
    /// Walks `schema` once, resolving every `$ref` it holds.
    fn of(schema: &'a Value) -> Self {
        let mut places = Places {
            index: HashMap::from([(schema as *const Value, 0)]),
            targets: HashMap::new(),
            unresolved: false,
            root_is_target: false,
        };
        let mut stack = vec![schema];
        while let Some(v) = stack.pop() {
            match v {
                Value::Object(map) => {
                    if let Some(Value::String(r)) = map.get("$ref") {
                        places.resolve(schema, r);
                    }
                    let moved_scope = !std::ptr::eq(v, schema) && map.contains_key("$id");
                    if moved_scope || SCOPE_KEYWORDS.iter().any(|k| map.contains_key(*k)) {
                        places.unresolved = true;
                    }
                    stack.extend(map.values());
                }
                Value::Array(items) => stack.extend(items),
                _ => {}
            }
        }
        places
    }

    fn resolve(&mut self, root: &'a Value, reference: &'a str) {
        if self.targets.contains_key(reference) {
            return;
        }
        let target = match reference.strip_prefix('#') {
            Some("") => Some(root),
            Some(pointer) if pointer.starts_with('/') => root.pointer(pointer),
            _ => None,
        };
        let Some(target) = target else {
            self.unresolved = true;
            return;
        };
        self.root_is_target |= std::ptr::eq(target, root);
        let next = self.index.len();
        let place = *self.index.entry(target as *const Value).or_insert(next);
        self.targets.insert(reference, place);
    }

    /// The weight of each place (the depth of its subtree) and the places
    /// each leads to: the targets of the `$ref`s in its subtree outside
    /// other places, and the places nested in it.
    fn graph(&self, schema: &Value) -> (Vec<usize>, Vec<Vec<usize>>) {
        let n = self.index.len();
        let mut walk = GraphWalk {
            places: self,
            weights: vec![0; n],
            edges: vec![Vec::new(); n],
            frames: Vec::new(),
            open: vec![0],
        };
        walk.enter(schema);
        while let Some(top) = walk.frames.last_mut() {
            match top.children.next() {
                Some(child) => walk.enter(child),
                None => walk.leave(),
            }
        }
        (walk.weights, walk.edges)
    }
}

/// The post-order walk of [`Places::graph`].
struct GraphWalk<'p, 'a, 'v> {
    places: &'p Places<'a>,
    weights: Vec<usize>,
    edges: Vec<Vec<usize>>,
    /// The objects and arrays entered and not yet left.
    frames: Vec<Frame<'v>>,
    /// The places entered and not yet left, innermost last.
    open: Vec<usize>,
}

/// An object or array being walked.
struct Frame<'v> {
    children: std::vec::IntoIter<&'v Value>,
    /// The depth of its deepest child so far.
    deepest: usize,
    /// The place it is, when it is one (other than the root).
    place: Option<usize>,
}

impl<'v> GraphWalk<'_, '_, 'v> {
    fn enter(&mut self, v: &'v Value) {
        let children: Vec<&Value> = match v {
            Value::Object(map) => map.values().collect(),
            Value::Array(items) => items.iter().collect(),
            _ => return,
        };
        let place = self
            .places
            .index
            .get(&(v as *const Value))
            .copied()
            .filter(|&p| p != 0);
        if let Some(p) = place {
            let outer = *self.open.last().expect("the root stays open");
            self.edges[outer].push(p);
            self.open.push(p);
        }
        if let Some(Value::String(r)) = v.get("$ref") {
            if let Some(&t) = self.places.targets.get(r.as_str()) {
                let here = *self.open.last().expect("the root stays open");
                self.edges[here].push(t);
            }
        }
        self.frames.push(Frame {
            children: children.into_iter(),
            deepest: 0,
            place,
        });
    }

    fn leave(&mut self) {
        let done = self.frames.pop().expect("a frame is open");
        let depth = done.deepest + 1;
        if let Some(p) = done.place {
            self.weights[p] = self.weights[p].max(depth);
            self.open.pop();
        }
        match self.frames.last_mut() {
            Some(parent) => parent.deepest = parent.deepest.max(depth),
            None => self.weights[0] = depth,
        }
    }
}

/// For each node of a graph (`weights` and `edges`, by index), the largest
/// sum of weights along a path that starts there, where a strongly
/// connected component counts as the sum of its members' weights (a path
/// may cross all of a cycle). Tarjan's algorithm without recursion:
/// components come out after every component they lead to, so each one's
/// deepest path is known when it is finished.
pub(super) fn deepest_paths(weights: &[usize], edges: &[Vec<usize>]) -> Vec<usize> {
    const UNSEEN: usize = usize::MAX;
    let n = weights.len();
    let (mut order, mut low) = (vec![UNSEEN; n], vec![0; n]);
    let (mut on_stack, mut component) = (vec![false; n], vec![UNSEEN; n]);
    let mut component_depth: Vec<usize> = Vec::new();
    let (mut stack, mut calls, mut next) = (Vec::new(), Vec::new(), 0);
    for start in 0..n {
        if order[start] != UNSEEN {
            continue;
        }
        calls.push((start, 0usize));
        while let Some(&mut (v, ref mut edge)) = calls.last_mut() {
            if order[v] == UNSEEN {
                (order[v], low[v]) = (next, next);
                next += 1;
                stack.push(v);
                on_stack[v] = true;
            }
            if let Some(&w) = edges[v].get(*edge) {
                *edge += 1;
                if order[w] == UNSEEN {
                    calls.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(order[w]);
                }
                continue;
            }
            calls.pop();
            if let Some(&(parent, _)) = calls.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] != order[v] {
                continue;
            }
            let c = component_depth.len();
            let mut members = Vec::new();
            while let Some(m) = stack.pop() {
                on_stack[m] = false;
                component[m] = c;
                members.push(m);
                if m == v {
                    break;
                }
            }
            let own = members
                .iter()
                .fold(0usize, |sum, &m| sum.saturating_add(weights[m]));
            let beyond = members
                .iter()
                .flat_map(|&m| &edges[m])
                .filter(|&&w| component[w] != c)
                .map(|&w| component_depth[component[w]])
                .max()
                .unwrap_or(0);
            component_depth.push(own.saturating_add(beyond));
        }
    }
    (0..n).map(|v| component_depth[component[v]]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_sum_weights_and_cycles_count_whole() {
        // 0 -> 1 -> 2, and 2 <-> 3 a cycle.
        let d = deepest_paths(&[1, 2, 3, 4], &[vec![1], vec![2], vec![3], vec![2]]);
        assert_eq!(d, vec![10, 9, 7, 7]);
        // A self-loop counts its node once.
        assert_eq!(deepest_paths(&[5], &[vec![0]]), vec![5]);
        // Two branches: the deeper one wins.
        let d = deepest_paths(&[1, 10, 2], &[vec![1, 2], vec![], vec![]]);
        assert_eq!(d[0], 11);
    }

    #[test]
    fn schema_depth_follows_refs() {
        // Plain nesting: object, properties, a.
        let plain = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        assert_eq!(schema_depth(&plain), 3);
        // A chain of n references counts every link.
        let chain = |n: usize| {
            let mut defs = serde_json::Map::new();
            for i in 0..n {
                defs.insert(
                    format!("d{i}"),
                    json!({"$ref": format!("#/$defs/d{}", i + 1)}),
                );
            }
            defs.insert(format!("d{n}"), json!({"type": "integer"}));
            json!({"$defs": defs, "$ref": "#/$defs/d0"})
        };
        assert!(schema_depth(&chain(10)) >= 11);
        assert!(schema_depth(&chain(300)) > MAX_GRAMMAR_DEPTH);
        // A recursive schema counts its cycle once.
        let tree = json!({"$defs": {"node": {"type": "object", "properties": {
            "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}},
            "$ref": "#/$defs/node"});
        assert!(schema_depth(&tree) < 20, "{}", schema_depth(&tree));
        // Unresolved references fall back to the sum of all places.
        let anchored = json!({"$defs": {"a": {"$anchor": "x", "type": "integer"}}, "$ref": "#x"});
        assert!(schema_depth(&anchored) >= schema_depth(&json!({"$defs": {"a": {}}})));
    }

    #[test]
    fn nesting_checks_refuse_past_the_limit() {
        let mut v = json!(1);
        for _ in 0..MAX_GRAMMAR_DEPTH {
            v = json!([v]);
        }
        assert!(check_json_nesting(&v).is_ok());
        let v = json!([v]);
        assert!(check_json_nesting(&v).is_err());
        assert_eq!(regex_nesting(r"(a(b)[(]\()"), 2);
        let deep = format!("{}a{}", "(".repeat(300), ")".repeat(300));
        assert!(check_regex_nesting(&deep).is_err());
    }
}
