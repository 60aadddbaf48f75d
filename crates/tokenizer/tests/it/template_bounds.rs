//! Chat templates that would make minijinja build or print more than a
//! gigabyte are refused, each within a bounded peak memory (issue 90).
//!
//! Each template renders in a child process (this test binary again, one
//! test selected) under a 4 GiB address-space limit, which prints its
//! peak resident memory; a renderer that tried to allocate the gigabytes
//! would fail there instead of taking the machine.

#![cfg(target_os = "linux")]

use std::process::Command;

use hearth_tokenizer::{ChatMessage, ChatTemplate};

/// The environment variable that names the case a child renders.
const CASE: &str = "HEARTH_TEMPLATE_BOUNDS_CASE";

/// The most memory a refused render may take at its peak (the default step
/// limit lets a template build 128 MB of data, and a few copies of it are
/// in flight at once).
const PEAK_LIMIT_KB: u64 = 512 * 1024;

/// Lists held in variables (a repeated list literal is refused at load).
const LISTS: &str = "{% set one = [1] %}{% set mb = ['x' * 1000000] %}\
                     {% set big = one * 100000000 %}";

/// A name, a template, and what its error says. Each would build or print
/// more than 1 GB unbounded.
const CASES: &[(&str, &str, &str)] = &[
    // 1 GB in one string repetition.
    (
        "repeat",
        "{{ ('a' * 1000000000) | length }}",
        "limit of 2000000 steps",
    ),
    // 10 bytes doubled 40 times, by `~` and by `+`.
    (
        "concat-loop",
        "{% set ns = namespace(s='xxxxxxxxxx') %}{% for i in range(40) %}\
         {% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}",
        "limit of 2000000 steps",
    ),
    (
        "add-loop",
        "{% set ns = namespace(s='xxxxxxxxxx') %}{% for i in range(40) %}\
         {% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s | length }}",
        "limit of 2000000 steps",
    ),
    // 10,000 times a megabyte, joined (minijinja does not count the items'
    // text when the joiner is empty).
    (
        "join",
        "{{ (mb * 10000) | join | length }}",
        "prints a value of more than",
    ),
    // 10^8 items made real.
    (
        "list",
        "{{ big | list | length }}",
        "limit of 2000000 steps",
    ),
    (
        "range",
        "{{ range(10000000000) | length }}",
        "range has too many elements",
    ),
    // 4 x 10^8 items printed by `~`, by a filter that takes text, by `in`.
    (
        "concat-lazy",
        "{{ ([big, big, big, big] ~ '') | length }}",
        "prints a value of more than",
    ),
    (
        "filter-lazy",
        "{{ [big, big, big, big] | upper | length }}",
        "prints a value of more than",
    ),
    (
        "string-lazy",
        "{{ [big, big, big, big] | string | length }}",
        "prints a value of more than",
    ),
    (
        "in-lazy",
        "{{ [big, big, big, big] in 'abc' }}",
        "prints a value of more than",
    ),
    // A 10 MB string shared 10^4 times: 100 GB printed.
    (
        "concat-shared",
        "{% set s = 'x' * 10000000 %}{% set a = [s, s, s, s, s, s, s, s, s, s] %}\
         {% set b = [a, a, a, a, a, a, a, a, a, a] %}{% set c = [b, b, b, b, b, b, b, b, b, b] %}\
         {% set d = [c, c, c, c, c, c, c, c, c, c] %}{{ (d ~ '') | length }}",
        "prints a value of more than",
    ),
    // Python's `replace` growing 10 MB a thousandfold.
    (
        "replace-method",
        "{{ ('x' * 10000000).replace('x', 'x' * 1000) | length }}",
        "limit of 2000000 steps",
    ),
    // chrono writing ~24 bytes for every 2 of a 80 MB format.
    (
        "strftime",
        "{{ strftime_now('%c' * 40000000) | length }}",
        "longer than 256 bytes",
    ),
    // A constant folded while compiling, where fuel does not reach.
    (
        "folded",
        "{{ ([1] * 100000000 + [1] * 100000000 + [1] * 100000000 + [1] * 100000000) ~ '' }}",
        "repeats a constant list",
    ),
];

/// Renders the case named in [`CASE`] and reports; does nothing in a
/// normal test run.
#[test]
fn render_one_case() {
    let Ok(name) = std::env::var(CASE) else {
        return;
    };
    let (_, src, _) = CASES.iter().find(|c| c.0 == name).expect("a known case");
    let result = ChatTemplate::jinja(&format!("{LISTS}{src}"), "", "")
        .and_then(|t| t.render(&[ChatMessage::user("hi")], true));
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let peak = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .expect("VmHWM");
    match result {
        Ok(text) => println!("RESULT ok {}", text.len()),
        Err(e) => println!("RESULT err {e}"),
    }
    println!("PEAK {}", peak.trim().trim_end_matches(" kB"));
}

/// The runner cargo starts this target's tests with (qemu-user under
/// `scripts/test-aarch64.sh`, where the binary cannot be exec'd itself),
/// from its `CARGO_TARGET_<TRIPLE>_RUNNER` variable; empty when none.
fn runner() -> String {
    let arch = std::env::consts::ARCH.to_uppercase();
    std::env::vars()
        .find(|(k, _)| {
            k.starts_with("CARGO_TARGET_") && k.ends_with("_RUNNER") && k.contains(&arch)
        })
        .map(|(_, v)| v)
        .unwrap_or_default()
}

#[test]
fn hostile_templates_are_refused_within_bounded_memory() {
    let exe = std::env::current_exe().unwrap();
    // The runner is split by the shell, as cargo splits it.
    let script = format!(
        "ulimit -v 4194304; exec {} \"$0\" --exact template_bounds::render_one_case --nocapture --test-threads=1",
        runner()
    );
    for (name, _, want) in CASES {
        let out = Command::new("sh")
            .arg("-c")
            .arg(&script)
            .arg(&exe)
            .env(CASE, name)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{name}: the child failed\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let line = |tag: &str| {
            stdout
                .lines()
                .find_map(|l| l.find(tag).map(|at| &l[at + tag.len()..]))
                .unwrap_or_else(|| panic!("{name}: no {tag}in\n{stdout}"))
                .to_string()
        };
        let result = line("RESULT ");
        assert!(
            result.starts_with("err") && result.contains(want),
            "{name}: {result}"
        );
        let peak: u64 = line("PEAK ").parse().unwrap();
        assert!(peak < PEAK_LIMIT_KB, "{name}: peak {peak} kB");
        eprintln!(
            "{name}: peak {peak} kB: {}",
            &result[..result.len().min(120)]
        );
    }
}

/// The message a template raises goes back to the client: its first
/// kilobyte, not the 100 MB it asked for.
#[test]
fn a_raised_message_is_cut_to_a_kilobyte() {
    let t = ChatTemplate::jinja("{{ raise_exception('x' * 100000000) }}", "", "").unwrap();
    let err = t.render(&[], false).unwrap_err().to_string();
    assert!(err.len() < 1200 && err.contains("xxx…"), "{}", err.len());
}
