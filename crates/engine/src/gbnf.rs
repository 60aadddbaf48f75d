//! llama.cpp's GBNF grammars, converted to llguidance's Lark syntax.
//!
//! GBNF: `name ::= alternatives` rules (the one named `root` is the start),
//! string literals with C-style escapes, character classes `[...]` (`^`
//! negates), `.` for any character, groups, `|`, `*`, `+`, `?`, `{m}`,
//! `{m,}`, `{m,n}`, `{,n}` and `#` comments. Every construct maps to one in
//! Lark; character classes become regexes whose characters are all written
//! as `\u{…}` escapes, so no character of the class can mean something else
//! to the regex parser. llama.cpp's token references (`<[id]>`, `!<[id]>`)
//! are refused with a message.

use std::collections::HashMap;

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Name(String),
    Define,
    Literal(String),
    /// Negated, and inclusive ranges.
    Class(bool, Vec<(char, char)>),
    Any,
    Open,
    Close,
    Bar,
    Star,
    Plus,
    Question,
    /// `{m}`, `{m,}`, `{m,n}`, `{,n}` as written (normalised spacing).
    Repeat(String),
}

/// The Lark grammar for GBNF `src`, or a message naming the first problem
/// (with its line).
#[expect(
    clippy::too_many_lines,
    reason = "longer than a screen; issue 91 splits it"
)]
pub fn to_lark(src: &str) -> Result<String, String> {
    let toks = lex(src)?;
    // Split into rules at each `name ::=`.
    let mut rules: Vec<(String, Vec<Tok>)> = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        match (&toks[i].0, toks.get(i + 1).map(|t| &t.0)) {
            (Tok::Name(n), Some(Tok::Define)) => {
                rules.push((n.clone(), Vec::new()));
                i += 2;
            }
            (t, _) => {
                let Some(rule) = rules.last_mut() else {
                    return Err(format!(
                        "line {}: expected a rule (`name ::= ...`), found {}",
                        toks[i].1,
                        describe(t)
                    ));
                };
                if *t == Tok::Define {
                    return Err(format!("line {}: `::=` without a rule name", toks[i].1));
                }
                rule.1.push(t.clone());
                i += 1;
            }
        }
    }
    if rules.is_empty() {
        return Err("the grammar has no rules".into());
    }
    let mut names: HashMap<&str, String> = HashMap::new();
    let mut used: std::collections::HashSet<String> = Default::default();
    for (n, _) in &rules {
        if names.contains_key(n.as_str()) {
            continue;
        }
        let base: String = n
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .collect();
        let mut name = format!("r_{base}");
        let mut k = 1;
        while used.contains(&name) {
            k += 1;
            name = format!("r_{base}_{k}");
        }
        used.insert(name.clone());
        names.insert(n, name);
    }
    if !names.contains_key("root") {
        return Err("the grammar has no `root` rule".into());
    }
    // Rules written twice are alternatives of one rule, as in llama.cpp.
    let mut bodies: Vec<(String, Vec<String>)> = Vec::new();
    for (n, body) in &rules {
        if body.is_empty() {
            return Err(format!("rule `{n}` is empty"));
        }
        let mut out = Vec::with_capacity(body.len());
        for t in body {
            out.push(match t {
                Tok::Name(r) => names
                    .get(r.as_str())
                    .cloned()
                    .ok_or_else(|| format!("rule `{n}` uses `{r}`, which is not defined"))?,
                Tok::Literal(s) if s.is_empty() => "\"\"".into(),
                Tok::Literal(s) => serde_json::to_string(s).map_err(|e| e.to_string())?,
                Tok::Class(neg, ranges) => class_regex(*neg, ranges),
                Tok::Any => "/(?s:.)/".into(),
                Tok::Open => "(".into(),
                Tok::Close => ")".into(),
                Tok::Bar => "|".into(),
                Tok::Star => "*".into(),
                Tok::Plus => "+".into(),
                Tok::Question => "?".into(),
                Tok::Repeat(r) => r.clone(),
                Tok::Define => unreachable!("split out above"),
            });
        }
        let name = names[n.as_str()].clone();
        match bodies.iter_mut().find(|(b, _)| *b == name) {
            Some((_, alts)) => alts.push(out.join(" ")),
            None => bodies.push((name, vec![out.join(" ")])),
        }
    }
    let mut lark = format!("start: {}\n", names["root"]);
    for (name, alts) in bodies {
        let alts: Vec<String> = alts.into_iter().map(|a| format!("({a})")).collect();
        lark.push_str(&format!("{name}: {}\n", alts.join(" | ")));
    }
    Ok(lark)
}

fn describe(t: &Tok) -> String {
    match t {
        Tok::Name(n) => format!("`{n}`"),
        Tok::Literal(s) => format!("the string {s:?}"),
        Tok::Define => "`::=`".into(),
        _ => "an expression".into(),
    }
}

fn class_regex(neg: bool, ranges: &[(char, char)]) -> String {
    let mut s = String::from("/[");
    if neg {
        s.push('^');
    }
    for &(a, b) in ranges {
        s.push_str(&format!("\\u{{{:x}}}", a as u32));
        if b != a {
            s.push_str(&format!("-\\u{{{:x}}}", b as u32));
        }
    }
    s.push_str("]/");
    s
}

/// Tokens with the line each starts on.
#[expect(
    clippy::too_many_lines,
    reason = "longer than a screen; issue 91 splits it"
)]
fn lex(src: &str) -> Result<Vec<(Tok, usize)>, String> {
    let chars: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let mut line = 1;
    while i < chars.len() {
        let c = chars[i];
        let at = line;
        match c {
            '\n' => {
                line += 1;
                i += 1;
            }
            c if c.is_whitespace() => i += 1,
            '#' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            ':' if chars.get(i + 1) == Some(&':') && chars.get(i + 2) == Some(&'=') => {
                out.push((Tok::Define, at));
                i += 3;
            }
            '"' => {
                i += 1;
                let mut s = String::new();
                loop {
                    match chars.get(i) {
                        None | Some('\n') => {
                            return Err(format!("line {at}: unterminated string"));
                        }
                        Some('"') => {
                            i += 1;
                            break;
                        }
                        Some('\\') => {
                            let (ch, n) = escape(&chars[i..], at)?;
                            s.push(ch);
                            i += n;
                        }
                        Some(&ch) => {
                            s.push(ch);
                            i += 1;
                        }
                    }
                }
                out.push((Tok::Literal(s), at));
            }
            '[' => {
                i += 1;
                let neg = chars.get(i) == Some(&'^');
                if neg {
                    i += 1;
                }
                let mut ranges = Vec::new();
                loop {
                    let lo = match chars.get(i) {
                        None | Some('\n') => {
                            return Err(format!("line {at}: unterminated character class"))
                        }
                        Some(']') => {
                            i += 1;
                            break;
                        }
                        Some('\\') => {
                            let (ch, n) = escape(&chars[i..], at)?;
                            i += n;
                            ch
                        }
                        Some(&ch) => {
                            i += 1;
                            ch
                        }
                    };
                    let mut hi = lo;
                    if chars.get(i) == Some(&'-') && chars.get(i + 1).is_some_and(|&c| c != ']') {
                        i += 1;
                        hi = match chars.get(i) {
                            Some('\\') => {
                                let (ch, n) = escape(&chars[i..], at)?;
                                i += n;
                                ch
                            }
                            Some(&ch) => {
                                i += 1;
                                ch
                            }
                            None => return Err(format!("line {at}: unterminated range")),
                        };
                        if hi < lo {
                            return Err(format!(
                                "line {at}: the range {lo:?}-{hi:?} is backwards"
                            ));
                        }
                    }
                    ranges.push((lo, hi));
                }
                if ranges.is_empty() && !neg {
                    return Err(format!("line {at}: the empty class `[]` matches nothing"));
                }
                out.push((Tok::Class(neg, ranges), at));
            }
            '{' => {
                let start = i;
                while i < chars.len() && chars[i] != '}' {
                    i += 1;
                }
                if i == chars.len() {
                    return Err(format!("line {at}: unterminated `{{`"));
                }
                let inner: String = chars[start + 1..i].iter().filter(|c| !c.is_whitespace()).collect();
                i += 1;
                let ok = !inner.is_empty()
                    && inner.chars().all(|c| c.is_ascii_digit() || c == ',')
                    && inner.matches(',').count() <= 1
                    && inner != ",";
                if !ok {
                    return Err(format!("line {at}: bad repetition `{{{inner}}}`"));
                }
                if let Some((m, n)) = inner.split_once(',') {
                    if let (Ok(m), Ok(n)) = (m.parse::<u32>(), n.parse::<u32>()) {
                        if n < m {
                            return Err(format!("line {at}: repetition {{{m},{n}}} is backwards"));
                        }
                    }
                }
                out.push((Tok::Repeat(format!("{{{inner}}}")), at));
            }
            '<' | '!' => {
                return Err(format!(
                    "line {at}: token references (`<[id]>`, `!<[id]>`) are not supported; write the text instead"
                ))
            }
            '(' => {
                out.push((Tok::Open, at));
                i += 1;
            }
            ')' => {
                out.push((Tok::Close, at));
                i += 1;
            }
            '|' => {
                out.push((Tok::Bar, at));
                i += 1;
            }
            '*' => {
                out.push((Tok::Star, at));
                i += 1;
            }
            '+' => {
                out.push((Tok::Plus, at));
                i += 1;
            }
            '?' => {
                out.push((Tok::Question, at));
                i += 1;
            }
            '.' => {
                out.push((Tok::Any, at));
                i += 1;
            }
            c if c.is_ascii_alphanumeric() || c == '-' || c == '_' => {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || chars[i] == '-' || chars[i] == '_')
                {
                    i += 1;
                }
                out.push((Tok::Name(chars[start..i].iter().collect()), at));
            }
            other => return Err(format!("line {at}: unexpected character {other:?}")),
        }
    }
    Ok(out)
}

/// One escape at `s[0] == '\\'`: the character and how many chars it took.
fn escape(s: &[char], line: usize) -> Result<(char, usize), String> {
    let hex = |n: usize| -> Result<(char, usize), String> {
        let digits: String = s.iter().skip(2).take(n).collect();
        if digits.len() != n || !digits.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(format!("line {line}: bad escape `\\{}{digits}`", s[1]));
        }
        let v = u32::from_str_radix(&digits, 16).map_err(|e| e.to_string())?;
        let ch = char::from_u32(v)
            .ok_or_else(|| format!("line {line}: `\\{}{digits}` is not a character", s[1]))?;
        Ok((ch, 2 + n))
    };
    match s.get(1) {
        Some('n') => Ok(('\n', 2)),
        Some('t') => Ok(('\t', 2)),
        Some('r') => Ok(('\r', 2)),
        Some('x') => hex(2),
        Some('u') => hex(4),
        Some('U') => hex(8),
        Some(&c @ ('\\' | '"' | '[' | ']' | '-' | '^' | '/')) => Ok((c, 2)),
        Some(c) => Err(format!("line {line}: unknown escape `\\{c}`")),
        None => Err(format!("line {line}: `\\` at the end")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_literals_and_classes_convert() {
        let g = r#"
            # a list of numbers
            root ::= "[" ws num ("," ws num)* "]"
            num  ::= [0-9]+ | "-" [1-9] [0-9]{0,3}
            ws   ::= [ \t\n]*
        "#;
        let lark = to_lark(g).unwrap();
        assert!(lark.starts_with("start: r_root\n"), "{lark}");
        assert!(
            lark.contains(r#"r_root: ("[" r_ws r_num ( "," r_ws r_num ) * "]")"#),
            "{lark}"
        );
        assert!(lark.contains(r"/[\u{30}-\u{39}]/ +"), "{lark}");
        assert!(lark.contains("{0,3}"), "{lark}");
        assert!(lark.contains(r"/[\u{20}\u{9}\u{a}]/ *"), "{lark}");
    }

    #[test]
    fn continuation_lines_negation_and_escapes() {
        let g = "root ::= (\n  \"a\\n\" |\n  [^\"\\\\] . \n)\nother-rule ::= \"\\x41\\u00e9\"\n";
        let lark = to_lark(g).unwrap();
        assert!(lark.contains(r#""a\n""#), "{lark}");
        assert!(lark.contains(r"/[^\u{22}\u{5c}]/"), "{lark}");
        assert!(lark.contains("r_other_rule: (\"Aé\")"), "{lark}");
    }

    #[test]
    fn problems_are_named() {
        let err = |g: &str| to_lark(g).unwrap_err();
        assert!(err("").contains("no rules"));
        assert!(err("a ::= \"x\"").contains("no `root`"));
        assert!(err("root ::= thing").contains("`thing`, which is not defined"));
        assert!(err("root ::= \"abc").contains("unterminated string"));
        assert!(err("root ::= [a-").contains("unterminated"));
        assert!(err("root ::= [z-a]").contains("backwards"));
        assert!(err("root ::= <[1000]>").contains("token references"));
        assert!(err("root ::= \"a\"{3,1}").contains("backwards"));
        assert!(err("root ::= \"\\q\"").contains("unknown escape"));
        assert!(err("\"x\" root ::= \"a\"").contains("expected a rule"));
    }
}
