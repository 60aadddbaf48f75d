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
#[expect(
    clippy::too_many_lines,
    reason = "longer than a screen; issue 91 splits it"
)]
pub(crate) fn lex(src: &str) -> Result<Vec<Token>, LogicError> {
    let mut rest = src;
    let mut tokens = Vec::new();
    let mut line = 1usize;
    // Depth of open brackets: a newline inside them continues the statement.
    let mut depth = 0usize;
    let mut at_line_start = true;

    loop {
        if at_line_start && depth == 0 {
            let indent = take_while::<_, _, winnow::error::ContextError>(0.., [' ', '\t'])
                .parse_next(&mut rest)
                .unwrap_or("");
            let blank = rest.is_empty()
                || rest.starts_with('\n')
                || rest.starts_with('\r')
                || rest.starts_with('#');
            if !indent.is_empty() && !blank {
                tokens.push(Token {
                    tok: Tok::Indent,
                    line,
                });
            }
            at_line_start = false;
        }
        let _ = take_while::<_, _, winnow::error::ContextError>(0.., [' ', '\t', '\x0c'])
            .parse_next(&mut rest);
        let Some(c) = rest.chars().next() else {
            break;
        };
        match c {
            '#' => {
                let _ = take_while::<_, _, winnow::error::ContextError>(0.., |c: char| c != '\n')
                    .parse_next(&mut rest);
            }
            '\r' => rest = &rest[1..],
            '\n' => {
                rest = &rest[1..];
                if depth == 0 {
                    let after_statement = !matches!(
                        tokens.last(),
                        None | Some(Token {
                            tok: Tok::Newline,
                            ..
                        })
                    );
                    if after_statement {
                        tokens.push(Token {
                            tok: Tok::Newline,
                            line,
                        });
                    }
                    at_line_start = true;
                }
                line += 1;
            }
            '\\' if rest[1..].starts_with('\n') => {
                rest = &rest[2..];
                line += 1;
            }
            '\'' | '"' => {
                if rest.starts_with("'''") || rest.starts_with("\"\"\"") {
                    return Err(LogicError::unsupported(
                        line,
                        "a triple-quoted string",
                        "use a one-line string such as 'a b c'",
                    ));
                }
                rest = &rest[1..];
                let body = string_body(&mut rest, c).map_err(|_| LogicError::Syntax {
                    line,
                    what: "unterminated string (escapes are not supported)".into(),
                })?;
                tokens.push(Token {
                    tok: Tok::Str(body.to_string()),
                    line,
                });
            }
            '0'..='9' => {
                let digits = digit1::<_, winnow::error::ContextError>
                    .parse_next(&mut rest)
                    .unwrap_or("");
                if let Some(next) = rest.chars().next() {
                    if next == '.' || next.is_ascii_alphanumeric() || next == '_' {
                        let construct = if next == '.' || next == 'e' || next == 'E' {
                            "a floating-point number"
                        } else {
                            "a number with a prefix, suffix or separator"
                        };
                        return Err(LogicError::unsupported(
                            line,
                            construct,
                            "only decimal integers are allowed (z3 Int)",
                        ));
                    }
                }
                tokens.push(Token {
                    tok: Tok::Int(digits.to_string()),
                    line,
                });
            }
            c if c.is_ascii_alphabetic() || c == '_' => {
                let word = name(&mut rest).map_err(|_| LogicError::Syntax {
                    line,
                    what: "bad name".into(),
                })?;
                if rest.starts_with('\'') || rest.starts_with('"') {
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
                tokens.push(Token {
                    tok: Tok::Name(word.to_string()),
                    line,
                });
            }
            _ => {
                let op = operator(&mut rest).map_err(|_| LogicError::Syntax {
                    line,
                    what: format!("unexpected character {c:?}"),
                })?;
                match op {
                    "(" | "[" | "{" => depth += 1,
                    ")" | "]" | "}" => depth = depth.saturating_sub(1),
                    _ => {}
                }
                tokens.push(Token {
                    tok: Tok::Op(op),
                    line,
                });
            }
        }
    }
    if !matches!(
        tokens.last(),
        None | Some(Token {
            tok: Tok::Newline,
            ..
        })
    ) {
        tokens.push(Token {
            tok: Tok::Newline,
            line,
        });
    }
    tokens.push(Token {
        tok: Tok::Eof,
        line,
    });
    Ok(tokens)
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
