//! The memory budget of one request (`--request-memory`): every stage that
//! can turn a small input into a large allocation (reading the body's JSON,
//! tokenizing, writing a long answer, holding a reply's log-probabilities,
//! decoding media) works out what it will take from sizes it already knows
//! and refuses with 413, naming the budget and its flag, before it
//! allocates. Each stage is checked against the whole budget on its own:
//! they run one after another and each frees what it made before the next.

use crate::error::ApiError;
use axum::http::StatusCode;
use serde_json::Value;
use std::io::Write;

/// The default budget: 256 MiB. A 32 MiB body of ordinary JSON, its
/// prompt tokenized, a 12-megapixel photo decoded, all fit; a body of
/// millions of tiny JSON values, or a picture whose header promises
/// gigabytes, do not.
pub const DEFAULT_REQUEST_MEMORY: usize = 256 << 20;

/// The refusal of a request whose `what` would take `needed` bytes, over
/// `budget`.
pub(crate) fn over_budget(what: &str, needed: u64, budget: u64) -> ApiError {
    ApiError {
        status: StatusCode::PAYLOAD_TOO_LARGE,
        code: Some("request_memory_exceeded"),
        ..ApiError::bad_request(format!(
            "{what} would take about {} of memory, over this server's budget of {} per request \
             (start it with --request-memory SIZE to raise it).",
            mib(needed),
            mib(budget)
        ))
    }
}

/// `bytes` for a person: `412.0 MiB`.
pub(crate) fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1u32 << 20))
}

/// `Ok` when `needed` fits `budget`, else [`over_budget`].
pub(crate) fn check(what: &str, needed: u64, budget: usize) -> Result<(), ApiError> {
    if needed > budget as u64 {
        return Err(over_budget(what, needed, budget as u64));
    }
    Ok(())
}

/// An upper bound on what serde_json takes to hold `body` as a tree of
/// `Value`s and the typed request read from it. Each value takes a slot in
/// its array or object (a `Value`, a key and its hash, doubled for the
/// growth of the vectors that hold them), each object its own tables, each
/// string its bytes (at most the body's). A scan, no allocation: a body of
/// millions of `{"a":0}` takes ~100 times its size once parsed.
pub fn json_memory(body: &[u8]) -> u64 {
    let (mut values, mut objects) = (1u64, 0u64);
    let (mut in_string, mut escaped) = (false, false);
    for &b in body {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' => {
                objects += 1;
                values += 1;
            }
            b'[' | b',' | b':' => values += 1,
            _ => {}
        }
    }
    let slot = 2 * (std::mem::size_of::<Value>() + std::mem::size_of::<String>() + 16) as u64;
    // An object's index table and entry vector at their smallest capacity.
    let object = 4 * slot;
    2 * body.len() as u64 + values * slot + objects * object
}

/// Bytes the tokenizer may take per byte of text at most: SentencePiece's
/// symbols and merge queue (32 bytes each, one per character, the queue
/// growing as pairs merge), the escaped copy of the text, and the ids.
pub const TOKENIZE_BYTES_PER_BYTE: u64 = 128;

/// What compiling one grammar or schema within `--max-grammar-bytes` is
/// counted as taking, for the prep pool's memory: llguidance's limits and
/// the rewrites' pricing bound it, but not by a figure known before the
/// compile, so it is counted as half the default request budget (the
/// largest the red-team suite saw was about 140 MB).
pub const GRAMMAR_MEMORY: u64 = 128 << 20;

/// Refuse to tokenize `len` bytes of text when the tokenizer's working
/// memory could pass `budget`.
pub(crate) fn check_tokenize(len: usize, budget: usize) -> Result<(), ApiError> {
    check(
        &format!("Tokenizing {len} bytes of text"),
        len as u64 * TOKENIZE_BYTES_PER_BYTE,
        budget,
    )
}

/// Counts what is written and keeps none of it.
struct Counter(u64);

impl Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The JSON `write` makes, `what` for the refusal: written once to count
/// its bytes against `budget`, then into a buffer of exactly that size. A
/// long answer (a token list with its pieces) is never built as a tree of
/// `Value`s, and never grows past the budget.
pub(crate) fn bounded_json(
    what: &str,
    budget: usize,
    write: impl Fn(&mut dyn Write) -> std::io::Result<()>,
) -> Result<Vec<u8>, ApiError> {
    let mut counter = Counter(0);
    write(&mut counter).map_err(|e| ApiError::internal(e.to_string()))?;
    check(what, counter.0, budget)?;
    let mut out = Vec::with_capacity(counter.0 as usize);
    write(&mut out).map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(out)
}

/// What a reply may hold before it is sent, per token and alternative:
/// its text and log-probability, in the reply and on the channel that
/// carries it (a slow reader leaves a streamed reply's tokens queued).
const BYTES_PER_REPLY_TOKEN: u64 = 64;

/// Refuse a request whose `n` choices of `max_tokens` tokens, each with
/// `logprobs` alternatives, could hold more than `budget` before it is
/// answered.
pub(crate) fn check_reply(
    n: usize,
    max_tokens: usize,
    logprobs: Option<usize>,
    budget: usize,
) -> Result<(), ApiError> {
    let per_token = BYTES_PER_REPLY_TOKEN * (1 + logprobs.map_or(0, |k| 1 + k as u64));
    let needed = (n as u64)
        .saturating_mul(max_tokens as u64)
        .saturating_mul(per_token);
    check(
        &format!(
            "{n} choice(s) of up to {max_tokens} tokens{}",
            match logprobs {
                Some(k) => format!(" with {k} alternatives each"),
                None => String::new(),
            }
        ),
        needed,
        budget,
    )
    .map_err(|e| ApiError {
        param: Some("max_tokens".into()),
        message: format!(
            "{} Ask for fewer tokens, choices or alternatives.",
            e.message
        ),
        ..e
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_memory_grows_with_the_values_not_just_the_bytes() {
        let text = format!("{{\"content\":\"{}\"}}", "a".repeat(1 << 20));
        let tiny = format!("[{}]", vec!["{\"a\":0}"; 1 << 17].join(","));
        assert!(tiny.len() < text.len());
        assert!(json_memory(text.as_bytes()) < 3 * text.len() as u64);
        assert!(json_memory(tiny.as_bytes()) > 50 * tiny.len() as u64);
        // Quotes and brackets inside a string are text.
        assert_eq!(
            json_memory(br#"{"a":"[,{:\"}"}"#),
            json_memory(br#"{"a":"xxxxxxx"}"#)
        );
    }

    #[test]
    fn an_answer_past_the_budget_is_refused_before_it_is_written() {
        let write = |w: &mut dyn Write| w.write_all(&[b'x'; 1000]);
        assert_eq!(bounded_json("it", 1000, write).unwrap().len(), 1000);
        let err = bounded_json("The answer", 999, write).unwrap_err();
        assert_eq!(err.status, StatusCode::PAYLOAD_TOO_LARGE);
        assert!(err.message.contains("--request-memory"), "{}", err.message);
    }

    #[test]
    fn many_choices_with_many_alternatives_are_refused() {
        assert!(check_reply(1, 4096, Some(20), 256 << 20).is_ok());
        let err = check_reply(128, 32_768, Some(20), 256 << 20).unwrap_err();
        assert_eq!(err.status, StatusCode::PAYLOAD_TOO_LARGE);
        assert!(err.message.contains("128 choice(s)"), "{}", err.message);
    }
}
