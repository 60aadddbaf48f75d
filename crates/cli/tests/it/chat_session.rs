//! `hearth chat --session FILE`: a conversation continued in a new process
//! resumes its messages and its prompt state, and answers exactly as the
//! conversation did in one process (greedy, the tiny random Gemma 3).

use std::io::Write;
use std::process::{Command, Stdio};

const TINY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/fixtures/tiny/gemma3/model-f32.gguf"
);

/// The tiny random Gemma 3 with its vision tower (a checkpoint folder).
const TINY_VISION: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/fixtures/tiny/gemma3_vision"
);

/// `hearth chat` fed `input` on stdin, with `extra` flags: (stdout, stderr).
fn chat(input: &str, extra: &[&str]) -> (String, String) {
    chat_with(TINY, input, extra)
}

/// `hearth chat -m model` fed `input` on stdin, with `extra` flags.
fn chat_with(model: &str, input: &str, extra: &[&str]) -> (String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["chat", "-m", model, "--temp", "0", "-n", "8", "-t", "1"])
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
    assert_eq!(reused_of(&said), reused);
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
    // Nor is one whose media markers do not fit its messages.
    for markers in ["[[[3, 99]]]", "[[[1, 2], [0, 1]]]", "[[[1, 1]]]"] {
        let bad = format!(
            r#"{{"messages": [{{"role": "user", "content": "hé there"}}], "markers": {markers}}}"#
        );
        std::fs::write(file, bad).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
            .args(["chat", "-m", TINY, "-p", "hi", "--session", file])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("is not a saved chat"), "{markers}: {err}");
    }
}

/// How many prompt tokens the resumed chat said came from its saved state.
fn reused_of(said: &str) -> usize {
    said.split("prompt tokens from the saved state")
        .next()
        .and_then(|s| s.rsplit('(').next())
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no reuse said: {said}"))
}

#[test]
fn a_conversation_with_a_picture_resumes_in_a_new_process() {
    let image = format!("{TINY_VISION}/img_a.png");
    let with_image = ["--image", image.as_str()];
    let (first, second) = ("what is in this picture?", "and what colour is it?");
    let (together, _) = chat_with(TINY_VISION, &format!("{first}\n{second}\n"), &with_image);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("talk.json");
    let file = file.to_str().unwrap();
    let mut args = vec!["--session", file];
    args.extend(with_image);
    let (one, _) = chat_with(TINY_VISION, &format!("{first}\n"), &args);
    // Resumed without --image: the saved chat reads its picture again.
    let (two, said) = chat_with(TINY_VISION, &format!("{second}\n"), &["--session", file]);
    assert_eq!(format!("{one}{two}"), together);
    let kept: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    let images = kept["media"]["images"].as_array().unwrap();
    assert_eq!(images.len(), 1, "{kept}");
    assert!(images[0].as_str().unwrap().ends_with("img_a.png"));
    // The picture (16 tokens, after the turn's opening) came from the
    // state, not from a new prefill.
    assert!(reused_of(&said) > 16 + 4, "{said}");
    assert!(said.contains("img_a.png: 16 tokens"), "{said}");
    // A picture gone since is a clear error.
    let moved = dir.path().join("gone.png");
    std::fs::copy(&image, &moved).unwrap();
    let other = dir.path().join("other.json");
    let other = other.to_str().unwrap();
    chat_with(
        TINY_VISION,
        &format!("{first}\n"),
        &["--session", other, "--image", moved.to_str().unwrap()],
    );
    std::fs::remove_file(&moved).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["chat", "-m", TINY_VISION, "-p", "hi", "--session", other])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot read the saved chat's media again"),
        "{err}"
    );
}
