//! `hearth chat --session FILE`: a conversation continued in a new process
//! resumes its messages and its prompt state, and answers exactly as the
//! conversation did in one process (greedy, the tiny random Gemma 3).

use std::io::Write;
use std::process::{Command, Stdio};

const TINY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/fixtures/tiny/gemma3/model-f32.gguf"
);

/// `hearth chat` fed `input` on stdin, with `extra` flags: (stdout, stderr).
fn chat(input: &str, extra: &[&str]) -> (String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["chat", "-m", TINY, "--temp", "0", "-n", "8", "-t", "1"])
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn a_conversation_resumes_in_a_new_process() {
    let (first, second) = ("hello there, how are you", "and then what happened?");
    let (together, _) = chat(&format!("{first}\n{second}\n"), &[]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("talk.json");
    let file = file.to_str().unwrap();
    let (one, _) = chat(&format!("{first}\n"), &["--session", file]);
    let (two, said) = chat(&format!("{second}\n"), &["--session", file]);
    assert_eq!(format!("{one}{two}"), together);
    assert!(said.contains("(resuming 2 messages"), "{said}");
    let reused: usize = said
        .split("prompt tokens from the saved state")
        .next()
        .and_then(|s| s.rsplit('(').next())
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no reuse said: {said}"));
    assert!(reused > 20, "{said}");
    let kept: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    assert_eq!(kept["messages"].as_array().unwrap().len(), 4);
    // A file that is not a saved chat is a clear error.
    std::fs::write(file, "not json").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["chat", "-m", TINY, "-p", "hi", "--session", file])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a saved chat"));
}
