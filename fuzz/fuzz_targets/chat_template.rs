//! Fuzz the chat-template renderer with template text as GGUF files carry
//! it (`tokenizer.chat_template`): the input is the Jinja source, compiled
//! with `ChatTemplate::jinja` (the environment Hearth sets up: trim/lstrip
//! blocks, `raise_exception`, Python string methods) and rendered over a
//! small conversation, with thinking off and on, as `Engine::load` does
//! (the default step limit). Hostile loops, huge ranges and deep recursion
//! must end in an error within the step and output limits.
//!
//! Invariants: no panic, no hang (libFuzzer's -timeout), no runaway memory
//! (-rss_limit_mb); a render that succeeds wrote at most
//! `tokenizer::MAX_RENDER_BYTES` bytes.
//!
//! `chat_template_gen` fuzzes the same code with generated templates.

#![no_main]

use hearth_fuzz::tokenizer::{ChatMessage, ChatTemplate, MAX_RENDER_BYTES};
use libfuzzer_sys::fuzz_target;

fuzz_target!(
    init: {
        // `ChatTemplate` catches minijinja's own panics (an out-of-range
        // slice) and fails the render; they are not crashes here.
        hearth_fuzz::tolerate_caught_panics_in(&["minijinja"]);
    },
    |data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(t) = ChatTemplate::jinja(src, "<bos>", "<eos>") else {
        return;
    };
    let messages = [
        ChatMessage::system("Be brief."),
        ChatMessage::user("Hi  there"),
        ChatMessage::assistant("Hello!"),
        ChatMessage::user("2+2? {{ '}}' }}"),
    ];
    let _ = t.supports_thinking();
    for thinking in [false, true] {
        if let Ok(out) = t.render_with(&messages, &hearth_fuzz::tokenizer::ChatOptions::reply(thinking)) {
            assert!(out.len() <= MAX_RENDER_BYTES, "rendered {} bytes", out.len());
        }
    }
});
