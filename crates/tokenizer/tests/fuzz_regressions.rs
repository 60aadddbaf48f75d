//! Inputs the fuzz targets found (fuzz/fuzz_targets/chat_template*.rs;
//! docs/fuzz.md), kept as tests so the bugs stay fixed.

use hearth_tokenizer::{ChatMessage, ChatTemplate};

/// minijinja 2 panics (an index past the end) when a negative-step slice
/// meets an empty sequence; `ChatTemplate` turns that into a failed render.
/// Found by `chat_template_gen`.
#[test]
fn fuzz_template_slice_panic_is_a_render_error() {
    let messages = [ChatMessage::user("hi")];
    for src in [
        "{{ ''[::-1] }}",
        "{{ [][::-1] }}",
        "{% set e = [] %}{{ e[::-2] }}",
    ] {
        let t = ChatTemplate::jinja(src, "<bos>", "<eos>").expect("compiles");
        let err = t.render(&messages, true).expect_err(src).to_string();
        assert!(err.contains("panicked"), "{src}: {err}");
    }
    // Slices that are merely past the end render (or fail) without a panic.
    let t = ChatTemplate::jinja("{{ messages[:9:-1] | length }}", "", "").unwrap();
    let _ = t.render(&messages, true);
}

/// In builds with debug assertions minijinja put the render's variables into
/// the error; formatting a namespace stored in itself never ended (minutes,
/// then a stack overflow). Found by `chat_template_gen` as a timeout; the
/// environment now runs without minijinja's debug mode in every build.
#[test]
fn fuzz_render_error_does_not_format_the_state() {
    let src = "{% set ns = namespace(n=0) %}{% set ns.n = ns %}{{ raise_exception('no') }}";
    let t = ChatTemplate::jinja(src, "<bos>", "<eos>").expect("compiles");
    let start = std::time::Instant::now();
    let err = t
        .render(&[ChatMessage::user("hi")], true)
        .unwrap_err()
        .to_string();
    assert!(err.contains("no"), "{err}");
    assert!(start.elapsed() < std::time::Duration::from_secs(1));
}
