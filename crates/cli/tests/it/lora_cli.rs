//! `--lora` on the commands that run a model, and `hearth quantize
//! --lora`: a merged model generates what the base model generates with
//! the adapter beside it.

use crate::serve_common::tiny_fixture;
use std::process::Command;

fn hearth(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(args)
        .output()
        .unwrap()
}

/// Greedy text of `model` (with `extra` flags) for a fixed prompt.
fn complete(model: &str, extra: &[&str]) -> String {
    let mut args = vec![
        "complete", "-m", model, "-p", "a b c d", "-n", "12", "--temp", "0",
    ];
    args.extend_from_slice(&["--precise", "-t", "2"]);
    args.extend_from_slice(extra);
    let out = hearth(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn a_merged_model_generates_what_the_adapter_does() {
    let base = tiny_fixture("gemma3/model-f32.gguf");
    let base = base.to_str().unwrap();
    let a = tiny_fixture("gemma3/lora_b-f32.gguf");
    let a = a.to_str().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let merged = tmp.path().join("merged.gguf");
    let out = hearth(&[
        "quantize",
        base,
        merged.to_str().unwrap(),
        "--type",
        "f32",
        "--lora",
        a,
        "-q",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let with_adapter = complete(base, &["--lora", a]);
    assert_eq!(complete(merged.to_str().unwrap(), &[]), with_adapter);
    assert_ne!(
        complete(base, &[]),
        with_adapter,
        "the adapter changes nothing"
    );
    // Scale 0 loads it off.
    assert_eq!(
        complete(base, &["--lora", &format!("{a}:0")]),
        complete(base, &[])
    );
}

#[test]
fn bad_adapters_are_refused_with_what_is_wrong() {
    let base = tiny_fixture("gemma3/model-f32.gguf");
    let other = tiny_fixture("gemma2/model-f32.gguf");
    let b = tiny_fixture("gemma3/lora_b-f32.gguf");
    for (model, lora, says) in [
        (
            &base,
            "/nonexistent/adapter.gguf".to_string(),
            "adapter.gguf",
        ),
        (&base, base.display().to_string(), "not an adapter"),
        (&other, b.display().to_string(), "for `gemma3`"),
        (&base, format!("{}:nan", b.display()), "scale"),
        (&base, format!("{}:1000", b.display()), "scale"),
    ] {
        let out = hearth(&[
            "complete",
            "-m",
            model.to_str().unwrap(),
            "-p",
            "x",
            "-n",
            "1",
            "--lora",
            &lora,
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(says),
            "{lora}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}
