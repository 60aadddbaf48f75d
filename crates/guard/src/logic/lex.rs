//! The lexer: Python's tokens, as far as the z3 subset needs them.
//!
//! Newlines inside brackets are joined (Python's implicit continuation), so
//! a statement is the tokens between two [`Tok::Newline`]s. Leading
//! indentation is reported as [`Tok::Indent`] because the subset has no
//! blocks: the parser turns it into an error that names the construct.

use super::LogicError;
use winnow::ascii::digit1;
use winnow::token::{literal, one_of, take_while};
use winnow::Parser;

/// One token and the 1-based line it starts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Token {
    pub tok: Tok,
    pub line: usize,
}

/// A token of the subset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Tok {
    /// An identifier or keyword (`x`, `And`, `for`).
    Name(String),
    /// The digits of a decimal integer literal, unparsed so that the parser
    /// can refuse one that is too long with the line it is on.
    Int(String),
    /// A quoted string without escapes.
    Str(String),
    /// An operator or punctuation mark.
    Op(&'static str),
    /// The end of a statement.
    Newline,
    /// Indentation at the start of a statement (a block: not in the subset).
    Indent,
    /// The end of the text.
    Eof,
}

/// Multi-character operators first, so the longest one matches.
const OPERATORS: &[&str] = &[
    "**=", "//=", "==", "!=", "<=", ">=", "**", "//", "->", ":=", "+=", "-=", "*=", "/=", "%=",
    "<<", ">>", "+", "-", "*", "/", "%", "<", ">", "(", ")", "[", "]", "{", "}", ",", ".", "=",
    ":", ";", "@", "&", "|", "^", "~", "!",
];

fn name<'i>(input: &mut &'i str) -> winnow::Result<&'i str> {
    (
        one_of(|c: char| c.is_ascii_alphabetic() || c == '_'),
        take_while(0.., |c: char| c.is_ascii_alphanumeric() || c == '_'),
    )
        .take()
        .parse_next(input)
}

fn operator(input: &mut &str) -> winnow::Result<&'static str> {
    for op in OPERATORS {
        if literal::<_, _, winnow::error::ContextError>(*op)
            .parse_next(input)
            .is_ok()
        {
            return Ok(op);
        }
    }
    Err(winnow::error::ContextError::new())
}

fn string_body<'i>(input: &mut &'i str, quote: char) -> winnow::Result<&'i str> {
    let body = take_while(0.., |c: char| c != quote && c != '\n' && c != '\\').parse_next(input)?;
    one_of(quote).parse_next(input)?;
    Ok(body)
}

/// Splits `src` into tokens, ending with [`Tok::Eof`].
pub(crate) fn lex(src: &str) -> Result<Vec<Token>, LogicError> {
    let mut lexer = Lexer {
        rest: src,
        tokens: Vec::new(),
        line: 1,
        depth: 0,
        at_line_start: true,
    };
    loop {
        if lexer.at_line_start && lexer.depth == 0 {
            lexer.indentation();
        }
        let _ = take_while::<_, _, winnow::error::ContextError>(0.., [' ', '\t', '\x0c'])
            .parse_next(&mut lexer.rest);
        let Some(c) = lexer.rest.chars().next() else {
            break;
        };
        match c {
            '#' => {
                let _ = take_while::<_, _, winnow::error::ContextError>(0.., |c: char| c != '\n')
                    .parse_next(&mut lexer.rest);
            }
            '\r' => lexer.rest = &lexer.rest[1..],
            '\n' => lexer.newline(),
            '\\' if lexer.rest[1..].starts_with('\n') => {
                lexer.rest = &lexer.rest[2..];
                lexer.line += 1;
            }
            '\'' | '"' => lexer.string(c)?,
            '0'..='9' => lexer.integer()?,
            c if c.is_ascii_alphabetic() || c == '_' => lexer.word()?,
            _ => lexer.symbol(c)?,
        }
    }
    if !lexer.after_newline() {
        lexer.push(Tok::Newline);
    }
    lexer.push(Tok::Eof);
    Ok(lexer.tokens)
}

/// The lexer's position in the text and what it has read so far.
struct Lexer<'s> {
    rest: &'s str,
    tokens: Vec<Token>,
    /// The current line, 1-based.
    line: usize,
    /// Depth of open brackets: a newline inside them continues the statement.
    depth: usize,
    at_line_start: bool,
}

impl Lexer<'_> {
    fn push(&mut self, tok: Tok) {
        self.tokens.push(Token {
            tok,
            line: self.line,
        });
    }

    /// Whether no statement is open: nothing read yet, or a newline last.
    fn after_newline(&self) -> bool {
        matches!(
            self.tokens.last(),
            None | Some(Token {
                tok: Tok::Newline,
                ..
            })
        )
    }

    /// Reads a statement's leading indentation: an indent token unless the
    /// line is blank or a comment.
    fn indentation(&mut self) {
        let indent = take_while::<_, _, winnow::error::ContextError>(0.., [' ', '\t'])
            .parse_next(&mut self.rest)
            .unwrap_or("");
        let blank = self.rest.is_empty()
            || self.rest.starts_with('\n')
            || self.rest.starts_with('\r')
            || self.rest.starts_with('#');
        if !indent.is_empty() && !blank {
            self.push(Tok::Indent);
        }
        self.at_line_start = false;
    }

    /// A newline: the end of a statement outside brackets.
    fn newline(&mut self) {
        self.rest = &self.rest[1..];
        if self.depth == 0 {
            if !self.after_newline() {
                self.push(Tok::Newline);
            }
            self.at_line_start = true;
        }
        self.line += 1;
    }

    /// A one-line string quoted by `quote`, without escapes.
    fn string(&mut self, quote: char) -> Result<(), LogicError> {
        if self.rest.starts_with("'''") || self.rest.starts_with("\"\"\"") {
            return Err(LogicError::unsupported(
                self.line,
                "a triple-quoted string",
                "use a one-line string such as 'a b c'",
            ));
        }
        self.rest = &self.rest[1..];
        let body = string_body(&mut self.rest, quote).map_err(|_| LogicError::Syntax {
            line: self.line,
            what: "unterminated string (escapes are not supported)".into(),
        })?;
        self.push(Tok::Str(body.to_string()));
        Ok(())
    }

    /// A decimal integer; a float or a number with a prefix, suffix or
    /// separator is refused.
    fn integer(&mut self) -> Result<(), LogicError> {
        let digits = digit1::<_, winnow::error::ContextError>
            .parse_next(&mut self.rest)
            .unwrap_or("");
        if let Some(next) = self.rest.chars().next() {
            if next == '.' || next.is_ascii_alphanumeric() || next == '_' {
                let construct = if next == '.' || next == 'e' || next == 'E' {
                    "a floating-point number"
                } else {
                    "a number with a prefix, suffix or separator"
                };
                return Err(LogicError::unsupported(
                    self.line,
                    construct,
                    "only decimal integers are allowed (z3 Int)",
                ));
            }
        }
        self.push(Tok::Int(digits.to_string()));
        Ok(())
    }

    /// A name or keyword; one that prefixes a string (an f-string) is
    /// refused.
    fn word(&mut self) -> Result<(), LogicError> {
        let line = self.line;
        let word = name(&mut self.rest).map_err(|_| LogicError::Syntax {
            line,
            what: "bad name".into(),
        })?;
        if self.rest.starts_with('\'') || self.rest.starts_with('"') {
            let construct = if word.eq_ignore_ascii_case("f") {
                "an f-string"
            } else {
                "a prefixed string literal"
            };
            return Err(LogicError::unsupported(
                line,
                construct,
                "print values with print(m[x]) or print(m)",
            ));
        }
        self.push(Tok::Name(word.to_string()));
        Ok(())
    }

    /// An operator or punctuation mark (`c` its first character), keeping
    /// count of open brackets.
    fn symbol(&mut self, c: char) -> Result<(), LogicError> {
        let line = self.line;
        let op = operator(&mut self.rest).map_err(|_| LogicError::Syntax {
            line,
            what: format!("unexpected character {c:?}"),
        })?;
        match op {
            "(" | "[" | "{" => self.depth += 1,
            ")" | "]" | "}" => self.depth = self.depth.saturating_sub(1),
            _ => {}
        }
        self.push(Tok::Op(op));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(src: &str) -> Vec<Tok> {
        lex(src).unwrap().into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn joins_lines_inside_brackets_and_skips_comments() {
        let toks = kinds("s.add(x >= 1,  # lower\n      x <= 5)\n\n# done\n");
        assert_eq!(toks.iter().filter(|t| **t == Tok::Newline).count(), 1);
        assert!(toks.contains(&Tok::Op(">=")));
        assert!(toks.contains(&Tok::Int("5".into())));
    }

    #[test]
    fn reports_indentation_and_lines() {
        let toks = lex("x = Int('x')\n  y = 1\n").unwrap();
        assert_eq!(toks[6].tok, Tok::Newline);
        assert_eq!(toks[7].tok, Tok::Indent);
        assert_eq!(toks[7].line, 2);
    }

    #[test]
    fn refuses_floats_and_fstrings() {
        assert!(lex("x = 1.5").unwrap_err().to_string().contains("floating"));
        assert!(lex("print(f'{x}')")
            .unwrap_err()
            .to_string()
            .contains("f-string"));
    }
}
