//! `hearth logits --image`: the per-position logits of an image prompt, and
//! the image embeddings, printed for outside checks, agree with transformers'
//! goldens of the tiny Gemma 3 vision model; bad images fail with a message
//! and exit status 1.

use crate::npy;

use std::path::PathBuf;
use std::process::{Command, Output};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tiny/gemma3_vision")
        .join(name)
}

fn hearth(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(args)
        .output()
        .unwrap()
}

fn lines(out: &Output) -> Vec<serde_json::Value> {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The embeddings of the first image `logits --embeddings` printed.
fn embeddings(out: &Output) -> (serde_json::Value, Vec<f32>) {
    let rows = lines(out);
    assert_eq!(rows.len(), 1);
    let got = rows[0]["embeddings"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| {
            r.as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap() as f32)
        })
        .collect();
    (rows[0].clone(), got)
}

#[test]
fn logits_of_a_two_image_prompt_match_transformers() {
    let (model, mmproj) = (fixture("model-f32.gguf"), fixture("mmproj-f32.gguf"));
    let (a, c) = (fixture("img_a.png"), fixture("img_c.png"));
    let out = hearth(&[
        "logits",
        "-m",
        model.to_str().unwrap(),
        "--mmproj",
        mmproj.to_str().unwrap(),
        "--image",
        a.to_str().unwrap(),
        "--image",
        c.to_str().unwrap(),
        "-p",
        "Compare <start_of_image> and<start_of_image>: which is the license?",
        "--full",
        // transformers in f32: an f32 cache, as the engine's image tests.
        "--kv-cache",
        "f32",
        "-t",
        "2",
    ]);
    let rows = lines(&out);
    let (shape, want) = npy::read_npy_f32(&fixture("logits_2_f16proj.npy"));
    assert_eq!(rows.len(), shape[0]);
    let got: Vec<f32> = rows
        .iter()
        .flat_map(|row| {
            row["logits"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap() as f32)
        })
        .collect();
    let err = npy::rel_err(&got, &want);
    assert!(err < 1e-4, "relative error {err}");
    // The image positions carry the soft token's id (511 in this vocabulary).
    let soft = rows.iter().filter(|r| r["id"] == 511).count();
    assert_eq!(soft, 32);
}

#[test]
fn embeddings_print_as_rows_of_the_text_width() {
    let dir = fixture("");
    let a = fixture("img_a.png");
    let out = hearth(&[
        "logits",
        "-m",
        dir.to_str().unwrap(),
        "--image",
        a.to_str().unwrap(),
        "--embeddings",
    ]);
    let (row, got) = embeddings(&out);
    let (_, want) = npy::read_npy_f32(&fixture("embd_img_a.npy"));
    assert_eq!(row["tokens"], 16);
    let err = npy::rel_err(&got, &want);
    assert!(err < 1e-4, "relative error {err}");
}

#[test]
fn bad_images_fail_cleanly() {
    let dir = std::env::temp_dir().join(format!("hearth-bad-images-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let png = std::fs::read(fixture("img_a.png")).unwrap();
    let jpeg = std::fs::read(fixture("img_b.jpg")).unwrap();
    let cases = [
        ("empty.png", Vec::new(), "empty"),
        (
            "truncated.png",
            png[..png.len() / 3].to_vec(),
            "cannot decode",
        ),
        (
            "truncated.jpg",
            jpeg[..jpeg.len() / 2].to_vec(),
            "cannot decode",
        ),
        ("text.jpg", b"not an image at all".to_vec(), "cannot decode"),
    ];
    let model = fixture("");
    for (name, bytes, says) in cases {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        let out = hearth(&[
            "complete",
            "-m",
            model.to_str().unwrap(),
            "--image",
            path.to_str().unwrap(),
            "-p",
            "x",
            "-n",
            "1",
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {err}");
        assert!(err.contains(says), "{name}: {err}");
        assert!(!err.contains("panicked"), "{name}: {err}");
    }
    // An image for a text-only model.
    let text_only = fixture("model-f32.gguf");
    let out = hearth(&[
        "complete",
        "-m",
        text_only.to_str().unwrap(),
        "--image",
        fixture("img_a.png").to_str().unwrap(),
        "-p",
        "x",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no vision tower"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn jpeg_and_webp_files_are_read() {
    let dir = fixture("");
    for (name, like) in [
        ("img_b.jpg", "embd_img_b.npy"),
        ("img_a.webp", "embd_img_a.npy"),
    ] {
        let out = hearth(&[
            "logits",
            "-m",
            dir.to_str().unwrap(),
            "--image",
            fixture(name).to_str().unwrap(),
            "--embeddings",
        ]);
        let (_, got) = embeddings(&out);
        let (_, want) = npy::read_npy_f32(&fixture(like));
        let err = npy::rel_err(&got, &want);
        // Lossless WebP holds the PNG's pixels; JPEG's compression moves
        // them a little, so its embeddings are near the PNG's, not equal.
        let limit = if name.ends_with(".webp") { 1e-4 } else { 0.5 };
        assert!(err < limit, "{name}: relative difference {err}");
    }
}

#[test]
fn the_projector_is_found_as_the_model_is() {
    // An `hf:` spec not pulled yet: the store says how to get it, offline.
    let home = tempfile::tempdir().unwrap();
    let model = fixture("model-f32.gguf");
    let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .env("HEARTH_HOME", home.path())
        .args(["logits", "-m", model.to_str().unwrap(), "--image"])
        .arg(fixture("img_a.png"))
        .args([
            "--embeddings",
            "--mmproj",
            "hf:ggml-org/gemma-3-4b-it-GGUF/mmproj-model-f16.gguf",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("hearth pull hf:ggml-org"), "{err}");
    // A missing path is named.
    let out = hearth(&[
        "logits",
        "-m",
        model.to_str().unwrap(),
        "--mmproj",
        "/nonexistent/mmproj.gguf",
        "--embeddings",
        "--image",
        fixture("img_a.png").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/mmproj.gguf"));
}
