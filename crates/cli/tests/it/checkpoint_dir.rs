//! `-m DIR`: Hugging Face checkpoint directories through the binary, in
//! their stored precision and requantized at load with `--quant`.

use std::path::PathBuf;
use std::process::Command;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tiny")
        .join(name)
}

fn reference(name: &str) -> (Vec<u64>, Vec<u64>) {
    let text = std::fs::read_to_string(fixture(name).join("reference.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let ids = |k: &str| {
        v[k].as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect()
    };
    (ids("tokens"), ids("argmax"))
}

/// Top-1 id at every position, from `hearth logits`.
fn top1(dir: &PathBuf, tokens: &[u64], extra: &[&str]) -> Vec<u64> {
    let ids = tokens
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["logits", "-t", "2", "--top", "1", "--ids", &ids, "-m"])
        .arg(dir)
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["top"][0][0].as_u64().unwrap()
        })
        .collect()
}

#[test]
fn checkpoint_directories_reproduce_transformers_argmax() {
    for name in ["gemma2", "gemma3", "gemma4_e2b", "gemma4_31b", "gemma4_moe"] {
        let (tokens, argmax) = reference(name);
        assert_eq!(top1(&fixture(name), &tokens, &[]), argmax, "{name}");
    }
}

#[test]
fn checkpoint_directories_quantized_at_load_stay_close() {
    for (name, q) in [
        ("gemma3", "q8_0"),
        ("gemma4_31b", "q8_0"),
        ("gemma2", "q8_0"),
    ] {
        let (tokens, argmax) = reference(name);
        let got = top1(&fixture(name), &tokens, &["--quant", q]);
        let agree = got.iter().zip(&argmax).filter(|(a, b)| a == b).count();
        eprintln!("{name} --quant {q}: argmax agrees {agree}/{}", argmax.len());
        assert!(
            agree * 10 >= argmax.len() * 8,
            "{name} {q}: {agree}/{}",
            argmax.len()
        );
    }
}

#[test]
fn bad_quant_type_and_bad_directory_are_clear_errors() {
    let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["logits", "--ids", "2", "--quant", "q9_z", "-m"])
        .arg(fixture("gemma3"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown quantization type `q9_z`"));

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.json"), r#"{"model_type": "mamba"}"#).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["logits", "--ids", "2", "-m"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("`mamba`") && !err.contains("panicked"),
        "{err}"
    );
}
