//! Every file type against llama.cpp's `llama_model_quantize` on the tiny
//! Gemma 3 fixture (hidden 256): the same type per tensor and the same file,
//! byte for byte. `tests/fixtures/make_llama_quantize_hashes.py` recorded
//! llama.cpp's outputs as hashes.

use gguf::GgufFile;
use hearth_convert::{quantize_gguf, FileType};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::path::PathBuf;

fn path(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(rel)
}

#[test]
fn every_file_type_matches_llama_quantize_byte_for_byte() {
    let text = std::fs::read_to_string(path("tests/fixtures/llama_quantize.json")).unwrap();
    let want: Value = serde_json::from_str(&text).unwrap();
    let names: Vec<&str> = want["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let src = GgufFile::open(path("../../tests/fixtures/tiny/gemma3_h256/model-f32.gguf")).unwrap();
    let files = want["files"].as_object().unwrap();
    assert_eq!(
        files.len(),
        FileType::ALL.len(),
        "a file type is not covered"
    );
    for (name, expect) in files {
        let ftype = FileType::from_name(name).unwrap();
        let bytes = quantize_gguf(&src, ftype).unwrap().to_bytes();
        let ours = GgufFile::from_bytes(bytes.clone()).unwrap();
        let got: Vec<(&str, &str)> = ours
            .tensors()
            .iter()
            .map(|t| (t.name.as_str(), t.ty.name()))
            .collect();
        let expected: Vec<(&str, &str)> = names
            .iter()
            .copied()
            .zip(expect["types"].as_str().unwrap().split(' '))
            .collect();
        assert_eq!(got, expected, "{ftype}: tensor order or types differ");
        assert_eq!(
            bytes.len() as u64,
            expect["size"].as_u64().unwrap(),
            "{ftype}: size"
        );
        let sha: String = Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            sha,
            expect["sha256"].as_str().unwrap(),
            "{ftype}: bytes differ"
        );
    }
}
