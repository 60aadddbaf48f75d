//! The depth of a Lark grammar, read without parsing it fully: its rules
//! and tokens, what each one uses, and how deep each one nests.
//!
//! llguidance's Lark (the syntax its lexer accepts): an item starts a line,
//! `name: …` or `NAME: …` (with `?`, `!`, `{params}`, `.priority`,
//! `::_` or `[attributes]` before the colon) or a `%` statement; a line
//! that starts with `|` continues the item above. Strings, `/regexes/`,
//! `<special>` tokens and `#` or `//` comments hold no names; `%json`,
//! `%regex` and `%llguidance` are followed by a JSON value, and a `%json`
//! schema nests as [`super::schema_depth`] counts. Whatever this reading
//! cannot place (a name used but not defined here, a nested `%lark`
//! grammar) makes the bound the sum of every item's depth, which no path
//! through them can exceed.

use super::{deepest_paths, regex_nesting, schema_depth};
use serde_json::Value;
use std::collections::HashMap;

/// One item of the grammar: a rule, a token, or the statements.
#[derive(Default)]
struct Item<'s> {
    /// 1 + how deep its groups, regexes and `%json` schemas nest.
    weight: usize,
    /// The names it uses.
    uses: Vec<&'s str>,
}

/// An upper bound on how deep compiling Lark grammar `src` recurses, in
/// rules and levels of nesting (see the module documentation).
pub(in crate::constraint) fn lark_depth(src: &str) -> usize {
    let scan = Scan::of(src);
    let weights: Vec<usize> = scan.items.iter().map(|i| i.weight).collect();
    let mut edges = vec![Vec::new(); scan.items.len()];
    let mut unplaced = scan.nested_grammar;
    for (from, item) in scan.items.iter().enumerate() {
        for name in &item.uses {
            match scan.defined.get(name) {
                Some(&to) => edges[from].push(to),
                None => unplaced |= !scan.imported.contains(name),
            }
        }
    }
    if unplaced {
        return weights.iter().fold(0, |sum, &w| sum.saturating_add(w));
    }
    deepest_paths(&weights, &edges)
        .into_iter()
        .max()
        .unwrap_or(0)
}

/// What one pass over the source found.
struct Scan<'s> {
    /// Item 0 holds the `%` statements (`%ignore` uses names too).
    items: Vec<Item<'s>>,
    /// The item each name defines.
    defined: HashMap<&'s str, usize>,
    /// Names `%import` or `%declare` brings in from outside.
    imported: Vec<&'s str>,
    /// A `%lark { … }` grammar is nested in it.
    nested_grammar: bool,
}

/// Where the scan is, and what the line so far says.
struct Cursor {
    /// The byte looked at.
    i: usize,
    /// The item being read.
    item: usize,
    /// How deep its groups are open here.
    depth: usize,
    /// Nothing but blanks since the line began.
    line_start: bool,
    /// In a `%import` or `%declare` line.
    importing: bool,
}

impl<'s> Scan<'s> {
    fn of(src: &'s str) -> Self {
        let mut scan = Scan {
            items: vec![Item {
                weight: 1,
                ..Item::default()
            }],
            defined: HashMap::new(),
            imported: Vec::new(),
            nested_grammar: false,
        };
        let mut at = Cursor {
            i: 0,
            item: 0,
            depth: 0,
            line_start: true,
            importing: false,
        };
        while at.i < src.len() {
            let c = src.as_bytes()[at.i];
            if at.line_start && !c.is_ascii_whitespace() && scan.start_line(src, &mut at) {
                continue;
            }
            scan.step(src, &mut at);
        }
        scan
    }

    /// At a line's first character: an item starts unless it continues
    /// the one above (`|`). Whether a definition was read.
    fn start_line(&mut self, src: &'s str, at: &mut Cursor) -> bool {
        at.line_start = false;
        at.importing = false;
        if src.as_bytes()[at.i] == b'|' {
            return false;
        }
        (at.item, at.depth) = (0, 0);
        let Some(((from, to), body)) = definition(src.as_bytes(), at.i) else {
            return false;
        };
        at.item = self.define(&src[from..to]);
        at.i = body;
        true
    }

    /// Reads what starts at `at.i`, and moves past it.
    fn step(&mut self, src: &'s str, at: &mut Cursor) {
        let b = src.as_bytes();
        let i = at.i;
        at.i = match b[i] {
            b'\n' => {
                at.line_start = true;
                i + 1
            }
            b'#' => skip_line(b, i),
            b'/' if b.get(i + 1) == Some(&b'/') => skip_line(b, i),
            b'"' => skip_string(b, i),
            b'/' => {
                let end = skip_regex(b, i);
                self.weigh(at.item, at.depth + regex_nesting(&src[i..end]));
                end
            }
            b'<' => skip_special(b, i),
            b'(' | b'[' | b'{' => {
                at.depth += 1;
                self.weigh(at.item, at.depth);
                i + 1
            }
            b')' | b']' | b'}' => {
                at.depth = at.depth.saturating_sub(1);
                i + 1
            }
            b'%' => self.keyword(src, at),
            // `-> alias` names a tree node, not a rule.
            b'-' if b.get(i + 1) == Some(&b'>') => name_end(b, skip_blanks(b, i + 2)),
            b'@' => name_end(b, i + 1),
            // A number (a priority, a count, a range) names nothing.
            c if c.is_ascii_digit() => name_end(b, i),
            c if is_name_start(c) => {
                let end = name_end(b, i);
                let name = &src[i..end];
                if at.importing {
                    // `common.NUMBER`, `common (A, B)`: every part.
                    self.imported.push(name);
                } else {
                    self.items[at.item].uses.push(name);
                }
                end
            }
            _ => i + 1,
        };
    }

    /// The `%keyword` at `at.i`, and the JSON value after one that takes
    /// it; where it ends.
    fn keyword(&mut self, src: &str, at: &mut Cursor) -> usize {
        let end = name_end(src.as_bytes(), at.i + 1);
        match &src[at.i + 1..end] {
            kw @ ("json" | "regex" | "llguidance") => {
                let (weight, after) = json_value(src, end, kw == "json");
                self.weigh(at.item, at.depth + weight);
                return after;
            }
            "lark" => self.nested_grammar = true,
            "import" | "declare" => at.importing = true,
            // `%override name: …` defines like a line's start.
            "override" => at.line_start = true,
            _ => {}
        }
        end
    }

    /// The item for `name`, new unless defined before (a redefinition
    /// adds to it: over-counting is safe).
    fn define(&mut self, name: &'s str) -> usize {
        let next = self.items.len();
        let at = *self.defined.entry(name).or_insert(next);
        if at == next {
            self.items.push(Item {
                weight: 1,
                ..Item::default()
            });
        }
        at
    }

    fn weigh(&mut self, item: usize, nesting: usize) {
        let w = &mut self.items[item].weight;
        *w = (*w).max(nesting.saturating_add(1));
    }
}

fn is_name_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_'
}

/// The end of the name (letters, digits, `_` and `-`) starting at `i`.
fn name_end(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && (b[i].is_ascii_alphanumeric() || matches!(b[i], b'_' | b'-')) {
        i += 1;
    }
    i
}

fn skip_blanks(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\r') {
        i += 1;
    }
    i
}

/// When a definition starts at `i` (`?`/`!` prefixes, the name, then
/// `::_`, `{params}`, `.priority` or `[attributes]` on the same line up to
/// a `:`), the name's span and where its body starts.
fn definition(b: &[u8], mut i: usize) -> Option<((usize, usize), usize)> {
    while i < b.len() && matches!(b[i], b'?' | b'!') {
        i += 1;
    }
    if i >= b.len() || !is_name_start(b[i]) {
        return None;
    }
    let (start, end) = (i, name_end(b, i));
    i = end;
    loop {
        i = skip_blanks(b, i);
        match b.get(i) {
            Some(b':') if b.get(i + 1) == Some(&b':') => i += 2,
            Some(b':') => return Some(((start, end), i + 1)),
            Some(b'{') => i = skip_balanced(b, i, b'{', b'}')?,
            Some(b'[') => i = skip_balanced(b, i, b'[', b']')?,
            Some(b'.' | b'-' | b'_') => i += 1,
            Some(c) if c.is_ascii_digit() => i += 1,
            _ => return None,
        }
    }
}

/// Past the bracket opened at `i`, on the same line (strings skipped).
fn skip_balanced(b: &[u8], mut i: usize, open: u8, close: u8) -> Option<usize> {
    let mut depth = 0;
    while i < b.len() && b[i] != b'\n' {
        match b[i] {
            c if c == open => depth += 1,
            c if c == close => {
                depth -= 1;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            b'"' => {
                i = skip_string(b, i);
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    None
}

fn skip_line(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i] != b'\n' {
        i += 1;
    }
    i
}

/// Past the string opened at `i` (a string does not cross a line).
fn skip_string(b: &[u8], mut i: usize) -> usize {
    i += 1;
    while i < b.len() && b[i] != b'\n' {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    i
}

/// Past the regex opened at `i` and its flags (a regex may cross lines).
fn skip_regex(b: &[u8], mut i: usize) -> usize {
    i += 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'/' => {
                i += 1;
                while i < b.len() && b[i].is_ascii_lowercase() {
                    i += 1;
                }
                return i;
            }
            _ => i += 1,
        }
    }
    b.len()
}

/// Past a `<special>` token at `i`, or just past the `<`.
fn skip_special(b: &[u8], i: usize) -> usize {
    let mut j = i + 1;
    while j < b.len() && !b[j].is_ascii_whitespace() && b[j] != b'<' {
        if b[j] == b'>' {
            return j + 1;
        }
        j += 1;
    }
    i + 1
}

/// The JSON value after a `%json`, `%regex` or `%llguidance` at `i`: how
/// deep it nests (as a schema when `schema`), and where it ends. A value
/// that does not parse weighs its brackets' depth; llguidance refuses it
/// anyway.
fn json_value(src: &str, i: usize, schema: bool) -> (usize, usize) {
    let rest = &src[i.min(src.len())..];
    let mut values = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
    match values.next() {
        Some(Ok(v)) => {
            let weight = if schema {
                schema_depth(&v)
            } else {
                json_nesting(&v)
            };
            (weight, i + values.byte_offset())
        }
        _ => (0, i),
    }
}

/// How deep a JSON value's objects and arrays nest (serde_json parsed it,
/// so at most its recursion limit of 128).
fn json_nesting(v: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(v, 1)];
    while let Some((v, d)) = stack.pop() {
        match v {
            Value::Object(m) => stack.extend(m.values().map(|c| (c, d + 1))),
            Value::Array(a) => stack.extend(a.iter().map(|c| (c, d + 1))),
            _ => continue,
        }
        deepest = deepest.max(d);
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(n: usize, upper: bool) -> String {
        let name = |i: usize| {
            if upper {
                format!("T{i}")
            } else {
                format!("r{i}")
            }
        };
        let mut s = format!("start: {}\n", name(0));
        for i in 0..n {
            s.push_str(&format!("{}: \"a\" {}\n", name(i), name(i + 1)));
        }
        s.push_str(&format!("{}: \"a\"\n", name(n)));
        s
    }

    #[test]
    fn chains_of_rules_and_tokens_count_every_link() {
        assert_eq!(lark_depth(&chain(10, false)), 12);
        assert_eq!(lark_depth(&chain(10, true)), 12);
        assert!(lark_depth(&chain(1000, false)) > 1000);
    }

    /// Whatever the bytes, the scan ends without a panic.
    #[test]
    fn any_text_scans() {
        let alphabet: Vec<char> = "ab_AZ09 \n\t|:?!.-()[]{}<>\"\\/#%@é→ jsonlarkimport"
            .chars()
            .collect();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..2000 {
            let len = (seed % 64) as usize;
            let text: String = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    alphabet[(seed % alphabet.len() as u64) as usize]
                })
                .collect();
            lark_depth(&text);
            lark_depth(&format!("start: x\n%json {text}"));
        }
    }

    #[test]
    fn nesting_recursion_and_what_is_skipped() {
        // Groups nest, recursion counts the cycle once, strings, regexes,
        // comments and special tokens name nothing.
        let g = "start: value\n\
                 value: \"[\" (value (\",\" value)*)? \"]\" | NUM // a comment: x y z\n\
                 # another: value value\n\
                 NUM: /[0-9]+(\\.[0-9]+)?/ <end_of_turn>\n\
                 ?opt.2: \"b\" -> alias_name\n\
                 %import common.WS\n\
                 %ignore WS\n";
        // start 1, value 1 + 2 groups deep, NUM 1 + a regex group.
        assert_eq!(lark_depth(g), 1 + 3 + 2);
        // A `%json` schema adds its depth to its rule.
        let j = "start: call\ncall: %json {\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}}}\n";
        assert_eq!(lark_depth(j), 1 + 4);
        // A name used but not defined: the sum of all items.
        let u = "start: a | b\na: x\nb: \"b\"\n";
        assert_eq!(lark_depth(u), 4);
    }
}
