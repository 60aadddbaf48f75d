//! Inputs the fuzz targets found (fuzz/fuzz_targets/chat_template*.rs;
//! docs/fuzz.md), kept as tests so the bugs stay fixed.

use hearth_tokenizer::{ChatMessage, ChatTemplate};

/// minijinja 2 panicked (an index past the end) when a negative-step slice
/// met an empty sequence. Found by `chat_template_gen`; minijinja 3 slices
/// them to nothing, and `ChatTemplate` still turns any panic of a render
/// into an error.
#[test]
fn fuzz_template_slice_panic_is_a_render_error() {
    let messages = [ChatMessage::user("hi")];
    for src in [
        "{{ ''[::-1] }}",
        "{{ [][::-1] }}",
        "{% set e = [] %}{{ e[::-2] }}",
    ] {
        let t = ChatTemplate::jinja(src, "<bos>", "<eos>").expect("compiles");
        match t.render(&messages, true) {
            Ok(out) => assert!(out.is_empty() || out == "[]", "{src}: {out}"),
            Err(e) => assert!(e.to_string().contains("panicked"), "{src}: {e}"),
        }
    }
    // Slices that are merely past the end render (or fail) without a panic.
    let t = ChatTemplate::jinja("{{ messages[:9:-1] | length }}", "", "").unwrap();
    let _ = t.render(&messages, true);
}

/// In builds with debug assertions minijinja put the render's variables into
/// the error; formatting a huge one took minutes. Found by
/// `chat_template_gen` as a timeout (a namespace stored in itself, which is
/// now refused at load: see below); the environment now runs without
/// minijinja's debug mode in every build.
#[test]
fn fuzz_render_error_does_not_format_the_state() {
    let src =
        "{% set one = [1] %}{% set ns = namespace(n=one * 100000000) %}{{ raise_exception('no') }}";
    let t = ChatTemplate::jinja(src, "<bos>", "<eos>").expect("compiles");
    let start = std::time::Instant::now();
    let err = t
        .render(&[ChatMessage::user("hi")], true)
        .unwrap_err()
        .to_string();
    assert!(err.contains("no"), "{err}");
    assert!(start.elapsed() < std::time::Duration::from_secs(1));
}

/// A namespace stored in a namespace makes a cycle that minijinja prints,
/// compares and serializes by recursing until the stack overflows, which
/// aborts the process. Found by replaying `chat_template_gen`'s timeout;
/// such templates are now refused when they are loaded, naming the line.
#[test]
fn fuzz_namespace_inside_a_namespace_is_refused() {
    for src in [
        "{% set ns = namespace(n=0) %}{% set ns.n = ns %}{{ ns }}",
        "{% set ns = namespace() %}\n{% set ns.n = [ns] %}",
        "{% set ns = namespace() %}{% set ns.n = {'a': ns} %}",
        "{% set a = namespace() %}{% set b = namespace(x=a) %}{% set a.y = b %}",
        "{% set a = namespace() %}{% set l = [a] %}{% set a.y = l %}",
        "{% set a = namespace() %}{% for x in [a] %}{% set a.y = x %}{% endfor %}",
        "{% set a = namespace() %}{% for x in [a] %}{% set a.y = loop.previtem %}{% endfor %}",
        "{% set f = namespace %}{% set a = f() %}{% set a.y = a %}",
        "{% macro m(x) %}{% set x.y = x %}{% endmacro %}{{ m(namespace()) }}",
        "{% set a = namespace() %}{% set a.y = a if true else 1 %}",
        "{% set a = namespace() %}{% set a.y = [a]|first %}",
        "{% set a = namespace() %}{% set a.y = a.z or a %}",
        "{% set a = namespace() %}{% with b = a %}{% set a.y = b %}{% endwith %}",
    ] {
        let err = ChatTemplate::jinja(src, "<bos>", "<eos>")
            .err()
            .unwrap_or_else(|| panic!("accepted: {src}"))
            .to_string();
        assert!(err.contains("namespace inside a namespace"), "{src}: {err}");
    }
    let err = ChatTemplate::jinja("{% set ns = namespace() %}\n{% set ns.n = [ns] %}", "", "")
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("line 2"), "{err}");
    // A model file carrying such a template chats in the built-in format,
    // and the template says why for the load line.
    let t = ChatTemplate::new(
        Some("{% set ns = namespace() %}{% set ns.n = ns %}"),
        "",
        "",
    );
    assert!(t.is_builtin());
    assert!(t
        .refused()
        .is_some_and(|why| why.contains("namespace inside a namespace")));
    assert!(ChatTemplate::new(Some("{{ bos_token }}"), "", "")
        .refused()
        .is_none());
}

/// What real chat templates do with namespaces (flags, counters, text
/// gathered across a loop, a namespace handed to a macro's body through an
/// attribute) is still accepted and renders.
#[test]
fn namespaces_as_templates_use_them_are_accepted() {
    let messages = [
        ChatMessage::system("be brief"),
        ChatMessage::user("hi"),
        ChatMessage::assistant("hello"),
    ];
    for (src, want) in [
        (
            "{% set ns = namespace(found=false, text='') %}{% for m in messages %}\
             {% if m.role == 'system' %}{% set ns.found = true %}{% endif %}\
             {% set ns.text = ns.text + m.content[:2] %}{% endfor %}{{ ns.found }} {{ ns.text }}",
            "True behihe",
        ),
        (
            "{% set ns = namespace(n=0, last=none) %}{% for m in messages %}\
             {% set ns.n = ns.n + 1 %}{% set ns.last = m %}{% endfor %}\
             {{ ns.n }} {{ ns.last.role }}",
            "3 assistant",
        ),
        (
            "{% set ns = namespace(roles=[]) %}{% for m in messages %}\
             {% set ns.roles = ns.roles + [m.role] %}{% endfor %}{{ ns.roles|join(',') }}",
            "system,user,assistant",
        ),
        (
            "{% macro show(x) %}[{{ x }}]{% endmacro %}{% set ns = namespace(s='') %}\
             {% set ns.s = show(messages[1].content) %}{{ ns.s }}",
            "[hi]",
        ),
    ] {
        let t = ChatTemplate::jinja(src, "", "").unwrap_or_else(|e| panic!("{src}: {e}"));
        assert_eq!(t.render(&messages, false).unwrap().trim(), want, "{src}");
    }
}

/// One huge value was formatted whole before the output bound applied:
/// `{{ [1] * 30000000 }}` took 24 s in the fuzz build. Formatting now stops
/// at the first byte past [`hearth_tokenizer::MAX_RENDER_BYTES`], and
/// minijinja 3 refuses to repeat a sequence past 100,000,000 elements.
/// Found by `chat_template_gen` as a timeout; the empty sequence repeated
/// 10^12 times (a loop inside one step in minijinja 2) by `chat_template`.
/// A list literal repeated with `*` is refused when the template is loaded
/// (minijinja would fold it while compiling, outside the bounds), so these
/// repeat lists held in variables.
#[test]
fn fuzz_huge_value_stops_at_the_output_bound() {
    let lists = "{% set one = [1] %}{% set empty = [] %}";
    for src in [
        "{{ one * 30000000 }}",
        "{{ (10**12 * messages) + messages }}",
        "{{ [one * 100000] * 1000 }}",
        "{{ 0 * messages * 10**12 }}{% for m in empty * 10**12 %}{% endfor %}x",
        "{{ (one * 10**12)|list|length }}",
    ] {
        let src = format!("{lists}{src}");
        let t = ChatTemplate::jinja(&src, "", "").expect("compiles");
        let start = std::time::Instant::now();
        match t.render(&[ChatMessage::user("hi")], true) {
            Ok(out) => assert_eq!(out, "[]x", "{src}"),
            Err(e) => {
                let e = e.to_string();
                let refused = ["wrote more than", "too large", "limit of"]
                    .iter()
                    .any(|why| e.contains(why));
                assert!(refused, "{src}: {e}");
            }
        }
        // A bound on a hang, far above the time it takes (docs/fuzz.md).
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "{src}"
        );
    }
}

/// Real chat templates that use namespaces (tests/fixtures/templates, from
/// llama.cpp's collection) pass the load-time namespace check and render a
/// conversation (gpt-oss and Mistral Small through `strftime_now`).
#[test]
fn real_templates_with_namespaces_are_accepted() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/templates");
    let messages = [
        ChatMessage::system("be brief"),
        ChatMessage::user("hi"),
        ChatMessage::assistant("hello"),
        ChatMessage::user("again"),
    ];
    let (mut checked, mut rendered) = (0, 0);
    for entry in std::fs::read_dir(&dir).expect("the templates folder") {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "jinja") {
            continue;
        }
        let src = std::fs::read_to_string(&path).unwrap();
        assert!(src.contains("namespace("), "{}", path.display());
        let t = ChatTemplate::jinja(&src, "<bos>", "<eos>")
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        match t.render(&messages, true) {
            Ok(text) => {
                assert!(text.contains("again"), "{}: {text}", path.display());
                rendered += 1;
            }
            Err(e) => panic!("{}: {e}", path.display()),
        }
        checked += 1;
    }
    assert_eq!((checked, rendered), (13, 13));
}

/// `{% set ns.x = [ns.x] %}` in a loop nests a list once per iteration, and
/// minijinja prints, compares and drops nested values by recursion: 100,000
/// levels overflowed the stack and aborted the process. A render now runs
/// on a stack sized by its step limit; the default limit builds about
/// 200,000 levels, and they print, compare and drop.
#[test]
fn fuzz_deep_nesting_renders_on_its_own_stack() {
    let src = "{% set ns = namespace(x=1) %}{% for i in range(200) %}{% for j in range(1000) %}\
               {% set ns.x = [ns.x] %}{% endfor %}{% endfor %}\
               {{ ns.x == ns.x }}{{ ns.x|length }}{{ ns.x }}";
    let t = ChatTemplate::jinja(src, "", "").expect("compiles");
    let out = t
        .render(&[ChatMessage::user("hi")], false)
        .expect("renders");
    let nested = format!("{}1{}", "[".repeat(200_000), "]".repeat(200_000));
    assert!(out == format!("True1{nested}"), "{}", &out[..20]);
}

/// Text between tags was not counted by the output bound, only what `{{ }}`
/// printed: a loop around raw text rendered 8,800,000 bytes past the 8 MiB
/// bound (and with a longer text or more steps, any amount). Found by
/// `chat_template`; the whole output now goes through the bound.
#[test]
fn fuzz_raw_text_in_a_loop_is_bounded() {
    let raw = "x".repeat(100);
    let src = format!("{{% for i in range(100000) %}}{raw}{{% endfor %}}");
    let t = ChatTemplate::jinja(&src, "", "").expect("compiles");
    let err = t
        .render(&[ChatMessage::user("hi")], false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("wrote more than"), "{err}");
    let src = format!("{{% for i in range(1000) %}}{raw}{{% endfor %}}");
    let t = ChatTemplate::jinja(&src, "", "").expect("compiles");
    assert_eq!(t.render(&[], false).unwrap().len(), 100_000);
}

/// `strftime_now`, which transformers and llama.cpp give templates: today's
/// date in the asked format; a format chrono cannot read fails the render
/// instead of panicking.
#[test]
fn strftime_now_formats_today_and_refuses_a_bad_format() {
    let t = ChatTemplate::jinja("{{ strftime_now('%Y-%m-%d') }}", "", "").unwrap();
    let out = t.render(&[], false).unwrap();
    assert_eq!(out.len(), 10, "{out}");
    assert!(out.starts_with("20") && out.as_bytes()[4] == b'-', "{out}");
    let t = ChatTemplate::jinja("{{ strftime_now('%Q %') }}", "", "").unwrap();
    let err = t.render(&[], false).unwrap_err().to_string();
    assert!(err.contains("strftime_now"), "{err}");
}
