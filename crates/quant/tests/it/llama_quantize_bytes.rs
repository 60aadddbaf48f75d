//! Our K-quant and IQ4 quantizers against bytes llama.cpp's `llama-quantize`
//! wrote: the tiny Gemma 3 fixture (hidden 256, so every matrix takes
//! K-quants and IQ4_XS) quantized from its f32 GGUF to Q4_K_M, Q6_K, IQ4_NL
//! and IQ4_XS (see tests/fixtures/tiny/SOURCE.md).

use gguf::GgufFile;
use hearth_quant::{quantize, GgmlType};
use std::path::PathBuf;

fn fixture(name: &str) -> GgufFile {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tiny/gemma3_h256")
        .join(name);
    GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn f32_values(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Quantizes every K-quant and IQ4 tensor of `quantized` from the f32 file
/// and counts the tensors (per type) whose bytes match.
fn compare(quantized: &str) -> Vec<(GgmlType, usize)> {
    let src = fixture("model-f32.gguf");
    let want = fixture(quantized);
    let mut counts: Vec<(GgmlType, usize)> = Vec::new();
    for t in want.tensors() {
        use GgmlType::{IQ4_NL, IQ4_XS, Q4_K, Q5_K, Q6_K};
        if !matches!(t.ty, Q4_K | Q5_K | Q6_K | IQ4_NL | IQ4_XS) {
            continue;
        }
        let s = src.tensor(&t.name).expect("tensor in the f32 file");
        assert_eq!(s.ty, GgmlType::F32);
        let x = f32_values(src.tensor_data(s));
        let expected = want.tensor_data(t);
        let mut got = vec![0u8; expected.len()];
        quantize(t.ty, &x, &mut got).unwrap();
        let bad_blocks = got
            .chunks(t.ty.block_bytes())
            .zip(expected.chunks(t.ty.block_bytes()))
            .filter(|(a, b)| a != b)
            .count();
        assert_eq!(
            bad_blocks,
            0,
            "{} ({}): {bad_blocks} of {} blocks differ from llama.cpp",
            t.name,
            t.ty,
            got.len() / t.ty.block_bytes()
        );
        match counts.iter_mut().find(|(ty, _)| *ty == t.ty) {
            Some((_, n)) => *n += 1,
            None => counts.push((t.ty, 1)),
        }
    }
    counts
}

#[test]
fn q4_k_m_tensors_match_llama_quantize_bit_for_bit() {
    let counts = compare("model-q4_k_m.gguf");
    // Q6_K: token_embd, plus attn_v and ffn_down of layers 2 and 5 (the
    // "more bits" layers of 6); Q4_K: the other 38 matrices.
    assert_eq!(counts, vec![(GgmlType::Q6_K, 5), (GgmlType::Q4_K, 38)]);
}

#[test]
fn q6_k_tensors_match_llama_quantize_bit_for_bit() {
    let counts = compare("model-q6_k.gguf");
    assert_eq!(counts, vec![(GgmlType::Q6_K, 43)]);
}

/// IQ4_NL and IQ4_XS (`quantize_iq4_nl`/`quantize_iq4_xs` without an
/// importance matrix: the best of 15 scales per block of 32, then for
/// IQ4_XS a 6-bit multiplier of the super-block's scale) give llama.cpp's
/// bytes; the tied embedding stays Q6_K in both files.
#[test]
fn iq4_tensors_match_llama_quantize_bit_for_bit() {
    let counts = compare("model-iq4_nl.gguf");
    assert_eq!(counts, vec![(GgmlType::Q6_K, 1), (GgmlType::IQ4_NL, 42)]);
    let counts = compare("model-iq4_xs.gguf");
    assert_eq!(counts, vec![(GgmlType::Q6_K, 1), (GgmlType::IQ4_XS, 42)]);
}
