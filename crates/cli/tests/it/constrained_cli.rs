//! `hearth complete|chat --regex|--json-schema|--grammar|--json-object` on
//! the tiny random model: the output matches whatever the weights prefer,
//! and a bad constraint is refused before anything runs.

use std::process::Command;

const TINY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/fixtures/tiny/gemma3/model-f32.gguf"
);

fn hearth(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(args)
        .output()
        .expect("run hearth");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn complete_holds_output_to_each_kind_of_constraint() {
    let dir = tempfile::tempdir().unwrap();
    let schema = dir.path().join("s.json");
    std::fs::write(
        &schema,
        r#"{"type":"object","properties":{"n":{"type":"integer","minimum":1,"maximum":9}},"required":["n"],"additionalProperties":false}"#,
    )
    .unwrap();
    let gbnf = dir.path().join("g.gbnf");
    std::fs::write(&gbnf, "root ::= \"id-\" [a-f]{3}\n").unwrap();
    let lark = dir.path().join("g.lark");
    std::fs::write(&lark, "start: \"v\" /[0-9]/ \".\" /[0-9]/\n").unwrap();
    let common = [
        "-m", TINY, "-p", "x", "-n", "80", "--temp", "1", "--seed", "3", "--json",
    ];
    let run = |extra: &[&str]| -> String {
        let mut args = vec!["complete"];
        args.extend_from_slice(&common);
        args.extend_from_slice(extra);
        let (ok, stdout, stderr) = hearth(&args);
        assert!(ok, "{extra:?}: {stderr}");
        assert!(
            stderr.contains("constraint:"),
            "the cost is reported: {stderr}"
        );
        let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
        v["text"].as_str().unwrap().to_string()
    };
    let text = run(&["--json-schema", schema.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!((1..=9).contains(&v["n"].as_i64().unwrap()), "{text}");
    let text = run(&["--grammar", gbnf.to_str().unwrap()]);
    assert!(
        text.len() == 6
            && text.starts_with("id-")
            && text[3..].bytes().all(|b| (b'a'..=b'f').contains(&b)),
        "{text:?}"
    );
    let text = run(&["--grammar", lark.to_str().unwrap()]);
    let b = text.as_bytes();
    assert!(
        b.len() == 4
            && b[0] == b'v'
            && b[1].is_ascii_digit()
            && b[2] == b'.'
            && b[3].is_ascii_digit(),
        "{text:?}"
    );
    let text = run(&["--regex", "(cat|dog)s?"]);
    assert!(
        ["cat", "cats", "dog", "dogs"].contains(&text.as_str()),
        "{text:?}"
    );
    let text = run(&["--json-object"]);
    assert!(text.starts_with('{'), "{text:?}");
}

#[test]
fn bad_constraints_are_refused_with_the_problem_named() {
    let (ok, _, stderr) = hearth(&["complete", "-m", TINY, "-p", "x", "--regex", "(ab"]);
    assert!(!ok);
    assert!(stderr.contains("invalid regex"), "{stderr}");
    let (ok, _, stderr) = hearth(&[
        "complete",
        "-m",
        TINY,
        "-p",
        "x",
        "--json-schema",
        "/nonexistent.json",
    ]);
    assert!(!ok);
    assert!(stderr.contains("cannot read /nonexistent.json"), "{stderr}");
    let (ok, _, stderr) = hearth(&[
        "chat",
        "-m",
        TINY,
        "-p",
        "hi",
        "--regex",
        "a",
        "--json-object",
    ]);
    assert!(!ok, "two constraints at once are refused");
    assert!(stderr.contains("cannot be used with"), "{stderr}");
    let dir = tempfile::tempdir().unwrap();
    let g = dir.path().join("bad.gbnf");
    std::fs::write(&g, "root ::= missing\n").unwrap();
    let (ok, _, stderr) = hearth(&[
        "chat",
        "-m",
        TINY,
        "-p",
        "hi",
        "--grammar",
        g.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(
        stderr.contains("`missing`, which is not defined"),
        "{stderr}"
    );
}
