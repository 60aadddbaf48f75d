//! The bytes a JSON Schema may grow to while we rewrite it: closing
//! objects ([`super::closed`]) and listing `uniqueItems` orders
//! ([`super::unique`]) add to it, and a small schema can ask for a great
//! deal of either (an `allOf` of many members closes each over all their
//! names; one enum referenced from many arrays is copied into every order
//! of each). The rewritten schema is held to the same byte limit as the
//! schema itself, and each rewrite counts what it adds before it
//! allocates.

use super::Refusal;
use serde_json::Value;
use std::io;

/// Bytes of `"additionalProperties":false,`: what closing an object adds.
pub(super) const CLOSING_BYTES: usize = 29;

/// The size of a schema being rewritten, against the byte limit.
#[derive(Debug)]
pub(crate) struct Growth {
    size: usize,
    limit: usize,
}

impl Growth {
    /// A schema of `size` bytes that may grow to `limit`.
    pub(crate) fn new(size: usize, limit: usize) -> Self {
        Self { size, limit }
    }

    /// The size counted so far.
    #[cfg(test)]
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// Counts `bytes` more, added by `what` ("closing its objects"),
    /// refusing past the limit.
    pub(crate) fn add(&mut self, bytes: usize, what: &str) -> Result<(), Refusal> {
        let size = self.size.saturating_add(bytes);
        if size > self.limit {
            return Err(Refusal::TooLarge(format!(
                "{what} would make it {size} bytes; the limit is {} bytes",
                self.limit
            )));
        }
        self.size = size;
        Ok(())
    }
}

/// Bytes of `v` written as compact JSON, counted without writing it.
pub(crate) fn json_len(v: &Value) -> usize {
    struct Count(usize);
    impl io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing to a counter cannot fail, and a `Value` always serializes.
    let _ = serde_json::to_writer(&mut count, v);
    count.0
}

/// Bytes of `s` as a JSON string, quotes and escapes included.
pub(super) fn json_str_len(s: &str) -> usize {
    2 + s
        .chars()
        .map(|c| match c {
            '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
            c if (c as u32) < 0x20 => 6,
            c => c.len_utf8(),
        })
        .sum::<usize>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lengths_match_serde_json() {
        let v = json!({"a\"b": [1, "x\n\u{1}é", null, {"additionalProperties": false}]});
        assert_eq!(json_len(&v), v.to_string().len());
        for s in ["plain", "q\"uote", "tab\t", "\u{1f}", "héllo"] {
            assert_eq!(json_str_len(s), Value::from(s).to_string().len(), "{s:?}");
        }
        assert_eq!(CLOSING_BYTES, r#""additionalProperties":false,"#.len());
    }

    #[test]
    fn growth_refuses_past_the_limit_and_names_it() {
        let mut g = Growth::new(90, 100);
        assert!(g.add(10, "closing").is_ok());
        match g.add(1, "closing its objects") {
            Err(Refusal::TooLarge(m)) => {
                assert!(m.contains("101 bytes") && m.contains("limit is 100"), "{m}")
            }
            other => panic!("{other:?}"),
        }
    }
}
