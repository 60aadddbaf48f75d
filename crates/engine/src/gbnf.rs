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
pub fn to_lark(src: &str) -> Result<String, String> {
    let toks = lex(src)?;
    let rules = split_rules(&toks)?;
    let names = lark_names(&rules);
    if !names.contains_key("root") {
        return Err("the grammar has no `root` rule".into());
    }
    let bodies = lark_bodies(&rules, &names)?;
    let mut lark = format!("start: {}\n", names["root"]);
    for (name, alts) in bodies {
        let alts: Vec<String> = alts.into_iter().map(|a| format!("({a})")).collect();
        lark.push_str(&format!("{name}: {}\n", alts.join(" | ")));
    }
    Ok(lark)
}

/// The rules of the token stream, split at each `name ::=`: each name with
/// the tokens of its body.
fn split_rules(toks: &[(Tok, usize)]) -> Result<Vec<(String, Vec<Tok>)>, String> {
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
    Ok(rules)
}

/// Each GBNF rule name's Lark name: `r_` and the name lowercased, with `_`
/// for what Lark does not allow, numbered where two names would meet.
fn lark_names(rules: &[(String, Vec<Tok>)]) -> HashMap<&str, String> {
    let mut names: HashMap<&str, String> = HashMap::new();
    let mut used: std::collections::HashSet<String> = Default::default();
    for (n, _) in rules {
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
    names
}

/// Each Lark rule with its alternatives in Lark syntax, in the order the
/// rules first appear. Rules written twice are alternatives of one rule,
/// as in llama.cpp.
fn lark_bodies(
    rules: &[(String, Vec<Tok>)],
    names: &HashMap<&str, String>,
) -> Result<Vec<(String, Vec<String>)>, String> {
    let mut bodies: Vec<(String, Vec<String>)> = Vec::new();
    for (n, body) in rules {
        if body.is_empty() {
            return Err(format!("rule `{n}` is empty"));
        }
        let mut out = Vec::with_capacity(body.len());
        for t in body {
            out.push(lark_token(t, n, names)?);
        }
        let name = names[n.as_str()].clone();
        match bodies.iter_mut().find(|(b, _)| *b == name) {
            Some((_, alts)) => alts.push(out.join(" ")),
            None => bodies.push((name, vec![out.join(" ")])),
        }
    }
    Ok(bodies)
}

/// Token `t` of rule `rule`'s body in Lark syntax.
fn lark_token(t: &Tok, rule: &str, names: &HashMap<&str, String>) -> Result<String, String> {
    Ok(match t {
        Tok::Name(r) => names
            .get(r.as_str())
            .cloned()
            .ok_or_else(|| format!("rule `{rule}` uses `{r}`, which is not defined"))?,
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
        Tok::Define => unreachable!("split out by `split_rules`"),
    })
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
fn lex(src: &str) -> Result<Vec<(Tok, usize)>, String> {
    let mut lx = Lexer {
        chars: src.chars().collect(),
        i: 0,
    };
    let mut out = Vec::new();
    let mut line = 1;
    while lx.i < lx.chars.len() {
        let c = lx.chars[lx.i];
        let at = line;
        let tok = match c {
            '\n' => {
                line += 1;
                lx.i += 1;
                continue;
            }
            c if c.is_whitespace() => {
                lx.i += 1;
                continue;
            }
            '#' => {
                lx.skip_comment();
                continue;
            }
            ':' if lx.at_define() => {
                lx.i += 3;
                Tok::Define
            }
            '"' => lx.string(at)?,
            '[' => lx.class(at)?,
            '{' => lx.repeat(at)?,
            '<' | '!' => {
                return Err(format!(
                    "line {at}: token references (`<[id]>`, `!<[id]>`) are not supported; write the text instead"
                ))
            }
            c if is_name_char(c) => lx.name(),
            c => {
                let tok = operator(c)
                    .ok_or_else(|| format!("line {at}: unexpected character {c:?}"))?;
                lx.i += 1;
                tok
            }
        };
        out.push((tok, at));
    }
    Ok(out)
}

/// The token of a one-character operator.
fn operator(c: char) -> Option<Tok> {
    Some(match c {
        '(' => Tok::Open,
        ')' => Tok::Close,
        '|' => Tok::Bar,
        '*' => Tok::Star,
        '+' => Tok::Plus,
        '?' => Tok::Question,
        '.' => Tok::Any,
        _ => return None,
    })
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

/// The source's characters and the position reached. Line counting stays
/// with [`lex`]: a token is reported at the line it starts on.
struct Lexer {
    chars: Vec<char>,
    i: usize,
}

impl Lexer {
    /// Move to the end of the line (its `\n` left for the line count).
    fn skip_comment(&mut self) {
        while self.i < self.chars.len() && self.chars[self.i] != '\n' {
            self.i += 1;
        }
    }

    /// Whether `::=` starts here.
    fn at_define(&self) -> bool {
        self.chars.get(self.i + 1) == Some(&':') && self.chars.get(self.i + 2) == Some(&'=')
    }

    /// A string literal from its opening quote, escapes resolved.
    fn string(&mut self, at: usize) -> Result<Tok, String> {
        self.i += 1;
        let mut s = String::new();
        loop {
            match self.chars.get(self.i) {
                None | Some('\n') => {
                    return Err(format!("line {at}: unterminated string"));
                }
                Some('"') => {
                    self.i += 1;
                    break;
                }
                Some('\\') => {
                    let (ch, n) = escape(&self.chars[self.i..], at)?;
                    s.push(ch);
                    self.i += n;
                }
                Some(&ch) => {
                    s.push(ch);
                    self.i += 1;
                }
            }
        }
        Ok(Tok::Literal(s))
    }

    /// A character class from its `[`: whether `^` negates it, and its
    /// ranges (a lone character is a range of one).
    fn class(&mut self, at: usize) -> Result<Tok, String> {
        self.i += 1;
        let neg = self.chars.get(self.i) == Some(&'^');
        if neg {
            self.i += 1;
        }
        let mut ranges = Vec::new();
        while let Some(range) = self.class_range(at)? {
            ranges.push(range);
        }
        if ranges.is_empty() && !neg {
            return Err(format!("line {at}: the empty class `[]` matches nothing"));
        }
        Ok(Tok::Class(neg, ranges))
    }

    /// The class's next character or `lo-hi` range; `None` past its `]`.
    fn class_range(&mut self, at: usize) -> Result<Option<(char, char)>, String> {
        let lo = match self.chars.get(self.i) {
            None | Some('\n') => return Err(format!("line {at}: unterminated character class")),
            Some(']') => {
                self.i += 1;
                return Ok(None);
            }
            Some('\\') => {
                let (ch, n) = escape(&self.chars[self.i..], at)?;
                self.i += n;
                ch
            }
            Some(&ch) => {
                self.i += 1;
                ch
            }
        };
        let mut hi = lo;
        // A `-` before the `]` is itself a member.
        if self.chars.get(self.i) == Some(&'-')
            && self.chars.get(self.i + 1).is_some_and(|&c| c != ']')
        {
            self.i += 1;
            hi = match self.chars.get(self.i) {
                Some('\\') => {
                    let (ch, n) = escape(&self.chars[self.i..], at)?;
                    self.i += n;
                    ch
                }
                Some(&ch) => {
                    self.i += 1;
                    ch
                }
                None => return Err(format!("line {at}: unterminated range")),
            };
            if hi < lo {
                return Err(format!("line {at}: the range {lo:?}-{hi:?} is backwards"));
            }
        }
        Ok(Some((lo, hi)))
    }

    /// A repetition `{m}`, `{m,}`, `{m,n}` or `{,n}` from its `{`, spaces
    /// removed; one whose bounds are backwards is refused.
    fn repeat(&mut self, at: usize) -> Result<Tok, String> {
        let start = self.i;
        while self.i < self.chars.len() && self.chars[self.i] != '}' {
            self.i += 1;
        }
        if self.i == self.chars.len() {
            return Err(format!("line {at}: unterminated `{{`"));
        }
        let inner: String = self.chars[start + 1..self.i]
            .iter()
            .filter(|c| !c.is_whitespace())
            .collect();
        self.i += 1;
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
        Ok(Tok::Repeat(format!("{{{inner}}}")))
    }

    /// A rule name.
    fn name(&mut self) -> Tok {
        let start = self.i;
        while self.i < self.chars.len() && is_name_char(self.chars[self.i]) {
            self.i += 1;
        }
        Tok::Name(self.chars[start..self.i].iter().collect())
    }
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
