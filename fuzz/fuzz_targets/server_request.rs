//! Fuzz the request bodies of the server's generating endpoints, parsed and
//! checked exactly as the handlers do before anything reaches a model: the
//! input's first line names the endpoint, the rest is the body.
//!
//! | first line        | endpoint                       | entry point                          |
//! |-------------------|--------------------------------|--------------------------------------|
//! | `chat`            | `POST /v1/chat/completions`    | `api::parse_chat`                    |
//! | `completions`     | `POST /v1/completions`         | `api::parse_completion`              |
//! | `messages`        | `POST /v1/messages`            | `hearth_server::parse_anthropic_messages`      |
//! | `count_tokens`    | `POST /v1/messages/count_tokens` | `hearth_server::parse_anthropic_messages` (counting) |
//! | `ollama_chat`     | `POST /api/chat`               | `hearth_server::parse_ollama_chat`             |
//! | `ollama_generate` | `POST /api/generate`           | `hearth_server::parse_ollama_generate`         |
//!
//! Deserialisation, the translation of the Anthropic and Ollama bodies into
//! the chat request, and every check (sampling ranges, stop strings, `n`,
//! logprobs, tools and tool choice, response formats and grammars, images
//! as data URLs, audio, thinking, guards, `keep_alive`).
//!
//! Invariants: no panic; an accepted request is within the server's
//! bounds (`1 <= n <= MAX_CHOICES`, at most `MAX_TOP_LOGPROBS`
//! alternatives, sampling settings that validate).

#![no_main]

use hearth_engine::SamplingParams;
use hearth_server::api::{self, Request, MAX_CHOICES, MAX_TOP_LOGPROBS};
use libfuzzer_sys::fuzz_target;

fn check(r: &Request) {
    assert!(r.n >= 1 && r.n as i64 <= MAX_CHOICES, "n = {}", r.n);
    assert!(
        r.logprobs.is_none_or(|k| k <= MAX_TOP_LOGPROBS),
        "logprobs {:?}",
        r.logprobs
    );
    r.params
        .validate()
        .expect("accepted sampling settings validate");
    let opts = r.generate_options(4096, None);
    if let Some(s) = &opts.speculation {
        s.validate().expect("an accepted draft length validates");
    }
    if let Some(tools) = &r.tools {
        let _ = tools.parse(r#"{"name": "f", "arguments": {"x": 1}}"#);
    }
}

fuzz_target!(|data: &[u8]| {
    let (endpoint, body) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let defaults = SamplingParams::default();
    let parsed = match endpoint {
        b"chat" => api::parse_chat(body, &defaults).map(Some),
        b"completions" => api::parse_completion(body, &defaults).map(Some),
        b"messages" => hearth_server::parse_anthropic_messages(body, &defaults, false).map(|(r, _)| Some(r)),
        b"count_tokens" => {
            hearth_server::parse_anthropic_messages(body, &defaults, true).map(|(r, _)| Some(r))
        }
        b"ollama_chat" => hearth_server::parse_ollama_chat(body, &defaults).map(|r| r.map(|(r, _)| r)),
        b"ollama_generate" => {
            hearth_server::parse_ollama_generate(body, &defaults).map(|r| r.map(|(r, _)| r))
        }
        _ => return,
    };
    match parsed {
        Ok(Some(r)) => check(&r),
        Ok(None) => {}
        Err(e) => {
            let _ = e.body();
        }
    }
});
