//! Our Q2_K..Q6_K quantizers against llama.cpp's C reference quantizers, and
//! our dequantization of those bytes against gguf-py's, on 2048 blocks of ten
//! styles (zeros, constants, outliers, one sign, ties, tiny scales, …).
//! `tests/fixtures/make_kquant_fixtures.py` wrote the hashes; this test rebuilds
//! the same input from the same integer streams.

use hearth_quant::{dequantize, quantize, row_size, GgmlType};
use serde_json::Value;

fn splitmix(seed: u64, idx: u64) -> u64 {
    let mut z = seed.wrapping_add((idx + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> String {
    let h = bytes.into_iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{h:016x}")
}

fn f32_bytes(v: &[f32]) -> impl Iterator<Item = u8> + '_ {
    v.iter().flat_map(|x| x.to_le_bytes())
}

/// The script's `make_input`, in the same f32 operations.
fn make_input(g: &Value) -> Vec<f32> {
    let seed_values = g["seed_values"].as_u64().unwrap();
    let seed_styles = g["seed_styles"].as_u64().unwrap();
    let styles = g["styles"].as_u64().unwrap();
    let n_blocks = g["n_blocks"].as_u64().unwrap();
    let mut out = Vec::with_capacity(n_blocks as usize * 256);
    for b in 0..n_blocks {
        let u: Vec<u64> = (0..256)
            .map(|j| splitmix(seed_values, b * 256 + j))
            .collect();
        let x: Vec<f32> = u
            .iter()
            .map(|&u| (u >> 40) as f32 * 2f32.powi(-23) - 1.0)
            .collect();
        let s = splitmix(seed_styles, b);
        let scale = 2f32.powi(((s >> 8) % 24) as i32 - 16);
        let sign = if (s >> 24) & 1 == 1 { 1.0f32 } else { -1.0 };
        let mut y: Vec<f32> = match s % styles {
            0 | 3 | 9 => x.iter().map(|v| v * scale).collect(),
            1 => x.iter().map(|v| v * v * v * scale).collect(),
            2 => x
                .iter()
                .zip(&u)
                .map(|(v, u)| if (u >> 8) & 7 == 0 { v * scale } else { 0.0 })
                .collect(),
            4 => x
                .iter()
                .map(|v| (v.abs() * scale + 0.25 * scale) * sign)
                .collect(),
            5 => vec![x[0] * scale; 256],
            6 => vec![0.0; 256],
            7 => u
                .iter()
                .map(|u| ((u >> 59) as i64 - 16) as f32 * scale)
                .collect(),
            _ => {
                let tiny = 2f32.powi(-(14 + ((s >> 8) % 10) as i32));
                x.iter().map(|v| v * tiny).collect()
            }
        };
        match s % styles {
            3 => y[((s >> 16) % 256) as usize] = 64.0 * scale * sign,
            9 => y[128..].fill(0.0),
            _ => {}
        }
        out.extend(y);
    }
    out
}

#[test]
fn k_quants_match_llama_cpp_and_gguf_py_on_ten_block_styles() {
    let path = format!(
        "{}/tests/fixtures/kquant_llamacpp.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let f: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let x = make_input(&f["generator"]);
    assert_eq!(
        fnv1a(f32_bytes(&x)),
        f["input_fnv1a"].as_str().unwrap(),
        "the rebuilt input differs from the script's"
    );
    let chunk = f["generator"]["chunk_blocks"].as_u64().unwrap() as usize * 256;
    let types = f["types"].as_object().unwrap();
    assert_eq!(types.len(), 5);
    for (name, chunks) in types {
        let ty = GgmlType::ALL
            .into_iter()
            .find(|t| t.name() == name)
            .unwrap();
        let mut q = vec![0u8; row_size(ty, x.len()).unwrap()];
        quantize(ty, &x, &mut q).unwrap();
        let mut y = vec![0f32; x.len()];
        dequantize(ty, &q, &mut y).unwrap();
        let qchunk = row_size(ty, chunk).unwrap();
        let chunks = chunks.as_array().unwrap();
        assert_eq!(chunks.len(), x.len() / chunk);
        for (c, want) in chunks.iter().enumerate() {
            let bytes = fnv1a(q[c * qchunk..(c + 1) * qchunk].iter().copied());
            assert_eq!(
                bytes,
                want["bytes"].as_str().unwrap(),
                "{ty}: blocks {}..{} differ from llama.cpp's",
                c * chunk / 256,
                (c + 1) * chunk / 256
            );
            let deq = fnv1a(f32_bytes(&y[c * chunk..(c + 1) * chunk]));
            assert_eq!(
                deq,
                want["dequant"].as_str().unwrap(),
                "{ty}: dequantized blocks {}..{} differ from gguf-py's",
                c * chunk / 256,
                (c + 1) * chunk / 256
            );
        }
    }
}
