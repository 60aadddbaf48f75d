//! Our block decoding and reference quantizers against gguf-py's (see
//! `tests/fixtures/make_fixtures.py`, which wrote these files).

use hearth_quant::{dequantize, quantize, GgmlType};
use serde_json::Value;

const FILES: [&str; 12] = [
    "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k",
];

fn ty_named(name: &str) -> GgmlType {
    GgmlType::ALL
        .into_iter()
        .find(|t| t.name() == name)
        .unwrap_or_else(|| panic!("unknown type {name}"))
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

fn load(name: &str) -> Value {
    let path = format!("{}/tests/fixtures/{name}.json", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn dequantize_matches_gguf_py_bit_for_bit() {
    for name in FILES {
        let f = load(name);
        let ty = ty_named(f["type"].as_str().unwrap());
        let n = f["n"].as_u64().unwrap() as usize;
        let bytes = hex(f["bytes"].as_str().unwrap());
        let want = floats(&f["dequant"]);
        let mut got = vec![0f32; n];
        dequantize(ty, &bytes, &mut got).unwrap();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.to_bits(), w.to_bits(), "{ty} element {i}: {g} vs {w}");
        }
    }
}

#[test]
fn quantize_matches_gguf_py_bytes() {
    let mut checked = 0;
    for name in FILES {
        let f = load(name);
        if f["source"] != "quantize" {
            continue;
        }
        let ty = ty_named(f["type"].as_str().unwrap());
        let input = floats(&f["input"]);
        let want = hex(f["bytes"].as_str().unwrap());
        let mut got = vec![0u8; want.len()];
        quantize(ty, &input, &mut got).unwrap();
        assert_eq!(got, want, "{ty} quantized bytes differ from gguf-py");
        checked += 1;
    }
    assert!(
        checked >= 7,
        "expected gguf-py quantizer fixtures, found {checked}"
    );
}

/// The lattice formats (IQ2, IQ3, IQ1) decode as gguf-py does, through
/// every entry of every grid (`tests/fixtures/make_lattice_fixtures.py`),
/// on every kernel table: the output's SHA-256 and first values are
/// gguf-py's.
#[test]
fn lattice_formats_dequantize_as_gguf_py() {
    use sha2::{Digest, Sha256};
    let fixture = load("lattice");
    let cases = fixture.as_array().unwrap();
    assert_eq!(cases.len(), 7);
    for case in cases {
        let ty = ty_named(case["type"].as_str().unwrap());
        let bytes = hex(case["bytes"].as_str().unwrap());
        let n = bytes.len() / ty.block_bytes() * ty.block_len();
        for set in hearth_quant::testing::kernel_sets() {
            let mut got = vec![0f32; n];
            hearth_quant::testing::dequantize_with(set, ty, &bytes, &mut got).unwrap();
            let first = floats(&case["first"]);
            for (i, (g, w)) in got.iter().zip(&first).enumerate() {
                assert_eq!(
                    g.to_bits(),
                    w.to_bits(),
                    "{ty} on {set}, element {i}: {g} vs {w}"
                );
            }
            let le: Vec<u8> = got.iter().flat_map(|v| v.to_le_bytes()).collect();
            let digest: String = Sha256::digest(&le)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            assert_eq!(digest, case["sha256"].as_str().unwrap(), "{ty} on {set}");
        }
    }
}
