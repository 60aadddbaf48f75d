//! A prompt's numbers do not depend on the CPU: every kernel tier this
//! machine runs (forced with `HEARTH_CPU`) gives the same logits to the last
//! bit and the same greedy tokens, on the decode path (one token per pass),
//! on small batches (the four-row and four-column kernels) and on prefill
//! (the panel GEMM), for float, legacy and K-quant weights.
//!
//! JSON floats are printed in their shortest round-trip form, so equal text
//! means equal bits.

use std::path::PathBuf;
use std::process::Command;

fn fixture(rel: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tiny")
        .join(rel)
        .to_string_lossy()
        .into_owned()
}

/// The real 270M file, which scripts/test.sh fetches before the tests.
fn real_model() -> String {
    if let Some(p) = std::env::var_os("HEARTH_MODEL") {
        return p.to_string_lossy().into_owned();
    }
    let home = std::env::var_os("HEARTH_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/hearth")
        });
    let p = home.join("models/gemma-3-270m-q4_k_m.gguf");
    assert!(
        p.is_file(),
        "the real model is missing at {}: run scripts/fetch-model.sh (or set HEARTH_MODEL)",
        p.display()
    );
    p.to_string_lossy().into_owned()
}

/// Runs hearth with the kernel tier forced; stdout.
fn hearth(tier: &str, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(args)
        .env("HEARTH_CPU", tier)
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run hearth");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{tier}: hearth {args:?}: {stderr}");
    assert!(
        !stderr.contains("not available"),
        "{tier} was not the tier that ran: {stderr}"
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// The tiers this CPU runs, from the error that names them.
fn tiers() -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args([
            "bench",
            "-m",
            &fixture("gemma3/model-q8_0.gguf"),
            "-p",
            "1",
            "-n",
            "0",
            "--cpu",
            "no-such-tier",
        ])
        .output()
        .expect("run hearth");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let list = stderr
        .split("this CPU runs: ")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .unwrap_or_else(|| panic!("no tier list in: {stderr}"));
    let tiers: Vec<String> = list.split(", ").map(str::to_string).collect();
    assert_eq!(tiers[0], "scalar", "{tiers:?}");
    if cfg!(target_arch = "x86_64") && std::arch::is_x86_feature_detected!("avx2") {
        assert!(tiers.iter().any(|t| t == "avx2"), "{tiers:?}");
    }
    tiers
}

/// Logits at every position, computed `batch` tokens per pass, and the greedy
/// continuation of a text prompt, on each tier: all equal to the scalar
/// tier's output.
fn check(model: &str, ids: &str, prompt: &str, top: &str, new_tokens: &str) {
    let tiers = tiers();
    for batch in ["1", "3", "8", "64"] {
        let args = [
            "logits", "-m", model, "-t", "2", "--batch", batch, "--ids", ids, "--top", top,
        ];
        let want = hearth("scalar", &args);
        assert!(want.lines().count() >= 2, "{want}");
        for tier in &tiers[1..] {
            let got = hearth(tier, &args);
            assert!(
                got == want,
                "{model}, batch {batch}: {tier} logits differ from scalar's"
            );
        }
    }
    let args = [
        "complete",
        "-m",
        model,
        "-t",
        "2",
        "-p",
        prompt,
        "-n",
        new_tokens,
        "--temp",
        "0",
        "--ignore-eos",
        "--json",
    ];
    let want = hearth("scalar", &args);
    let v: serde_json::Value = serde_json::from_str(want.trim()).expect("JSON");
    assert_eq!(
        v["generated_ids"].as_array().map(Vec::len),
        new_tokens.parse().ok(),
        "{want}"
    );
    for tier in &tiers[1..] {
        assert_eq!(hearth(tier, &args), want, "{model}: {tier} greedy text");
    }
}

#[test]
fn tiny_models_agree_on_every_tier() {
    // 20 ids: batch 1 and 3 take the decode kernels, 8 the four-column
    // tiles, 64 the panel GEMM.
    let ids = "2,17,300,45,9,120,77,8,250,33,61,500,12,99,140,7,220,310,5,88";
    for m in [
        "gemma3/model-f32.gguf",
        "gemma3/model-q8_0.gguf",
        "gemma3_h256/model-q4_k_m.gguf",
        "gemma3_h256/model-q6_k.gguf",
        "gemma4_e2b_h256/model-q4_k_m.gguf",
        "gemma3n_h256/model-q4_k_m.gguf",
    ] {
        check(&fixture(m), ids, "hello world", "512", "24");
    }
}

#[test]
fn the_real_model_agrees_on_every_tier() {
    // "The capital of France is" and a few more tokens, ids from the
    // model's tokenizer.
    let ids = "2,818,5279,529,7001,563,9079,236761,669,5279";
    check(
        &real_model(),
        ids,
        "Write a short story about a village by the sea.",
        "64",
        "32",
    );
}
