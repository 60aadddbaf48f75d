//! IQ4_NL and IQ4_XS end to end with no model file: weight rows written
//! block by block by this file's own writer (ggml-common.h's layouts and
//! its own copy of the value table, so a shared misreading of the bits
//! would show), then multiplied through `quant::matmul` at a decode size
//! (one row, the vector kernels) and a prefill size (the panel GEMM), and
//! dequantized as the `--precise` path reads them, each against the f32
//! product of the values the writer meant.

use crate::kernels::Rng;
use hearth_quant as quant;
use quant::{dequantize, GgmlType, Matrix};
use threads::ThreadPool;

/// `kvalues_iq4nl` (ggml-common.h).
const TABLE: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// A scale rounded to f16 as a block stores it: its bytes and value.
fn f16_scale(rng: &mut Rng) -> ([u8; 2], f32) {
    let h = half::f16::from_f32(0.002 + 0.02 * rng.f32().abs());
    (h.to_bits().to_le_bytes(), h.to_f32())
}

/// Rows of bytes and the values they mean.
struct Written {
    bytes: Vec<u8>,
    values: Vec<f32>,
}

/// 32 random indices as 16 bytes of nibbles (element `j` low in byte `j`,
/// `j + 16` high), their values `scale · TABLE[i]` appended to `values`.
fn nibbles(rng: &mut Rng, scale: f32, bytes: &mut Vec<u8>, values: &mut Vec<f32>) {
    let idx: Vec<u8> = (0..32).map(|_| (rng.next() >> 60) as u8).collect();
    bytes.extend((0..16).map(|j| idx[j] | idx[j + 16] << 4));
    values.extend(idx.iter().map(|&i| scale * f32::from(TABLE[i as usize])));
}

/// `block_iq4_nl`: d, then 16 bytes of nibbles; value `d · TABLE[i]`.
fn write_iq4_nl(rng: &mut Rng, n: usize) -> Written {
    let (mut bytes, mut values) = (Vec::new(), Vec::new());
    for _ in 0..n / 32 {
        let (d_bytes, d) = f16_scale(rng);
        bytes.extend(d_bytes);
        nibbles(rng, d, &mut bytes, &mut values);
    }
    Written { bytes, values }
}

/// `block_iq4_xs`: d, `scales_h` (two high bits of sub-block `ib`'s 6-bit
/// scale at bit `2 ib`), `scales_l` (its low four bits, nibble `ib % 2` of
/// byte `ib / 2`), then eight IQ4_NL-style nibble runs; value
/// `d · (ls − 32) · TABLE[i]`, `d · (ls − 32)` rounded first as ggml does.
fn write_iq4_xs(rng: &mut Rng, n: usize) -> Written {
    let (mut bytes, mut values) = (Vec::new(), Vec::new());
    for _ in 0..n / 256 {
        let (d_bytes, d) = f16_scale(rng);
        let ls: Vec<u8> = (0..8).map(|_| (rng.next() >> 58) as u8).collect();
        let high = (0..8).fold(0u16, |h, ib| h | u16::from(ls[ib] >> 4) << (2 * ib));
        bytes.extend(d_bytes);
        bytes.extend(high.to_le_bytes());
        bytes.extend((0..4).map(|k| (ls[2 * k] & 15) | (ls[2 * k + 1] & 15) << 4));
        for &l in &ls {
            nibbles(rng, d * (f32::from(l) - 32.0), &mut bytes, &mut values);
        }
    }
    Written { bytes, values }
}

/// The exact product of weight row `w` and activation row `x`, and the sum
/// of the terms' magnitudes (the scale of the rounding errors).
fn exact(w: &[f32], x: &[f32]) -> (f64, f64) {
    w.iter().zip(x).fold((0.0, 0.0), |(s, m), (&a, &b)| {
        let p = f64::from(a) * f64::from(b);
        (s + p, m + p.abs())
    })
}

/// One weight type written by `write`, through every path.
fn check(ty: GgmlType, cols: usize, write: fn(&mut Rng, usize) -> Written) {
    let rows = 45;
    let mut rng = Rng(0x1c4e_5eed_0000_0001 ^ cols as u64);
    let w = write(&mut rng, rows * cols);
    assert_eq!(w.bytes.len(), quant::row_size(ty, rows * cols).unwrap());
    // The format reads back the values the writer meant, to the bit.
    let mut deq = vec![0.0f32; rows * cols];
    dequantize(ty, &w.bytes, &mut deq).unwrap();
    for (i, (a, b)) in deq.iter().zip(&w.values).enumerate() {
        assert_eq!(a.to_bits(), b.to_bits(), "{ty} element {i}: {a} vs {b}");
    }
    let m = Matrix::new(ty, rows, cols, &w.bytes).unwrap();
    let pool = ThreadPool::new(2);
    let mut scratch = Vec::new();
    for batch in [1, 3, 20] {
        let x: Vec<f32> = (0..batch * cols).map(|_| rng.f32()).collect();
        let mut out = vec![f32::NAN; batch * rows];
        quant::matmul(
            &pool,
            quant::Product::new(&[&m], &x, batch),
            &mut [&mut out],
            &mut scratch,
        )
        .unwrap();
        let mut row = vec![0.0f32; cols];
        for b in 0..batch {
            let xb = &x[b * cols..(b + 1) * cols];
            for r in 0..rows {
                let (want, mag) = exact(&w.values[r * cols..(r + 1) * cols], xb);
                // 8-bit activations: each term off by about 1/254 of its
                // block's largest activation.
                let got = f64::from(out[b * rows + r]);
                let what = format!("{ty} batch {batch} act {b} row {r}");
                assert!((got - want).abs() <= 0.01 * mag, "{what}: {got} vs {want}");
                // `--precise`: f32 activations against the row dequantized.
                m.dequantize_row(r, &mut row).unwrap();
                let precise: f32 = row.iter().zip(xb).map(|(a, b)| a * b).sum();
                let err = (f64::from(precise) - want).abs();
                assert!(err <= 1e-4 * mag, "{what} precise: {precise} vs {want}");
            }
        }
    }
}

/// IQ4_NL at a width that is not a whole number of 256-blocks (as a
/// 270M's 640, where llama-quantize's IQ4_XS mix falls back to IQ4_NL).
#[test]
fn iq4_nl_products_match_the_written_values() {
    check(GgmlType::IQ4_NL, 640, write_iq4_nl);
}

/// IQ4_XS at four super-blocks a row.
#[test]
fn iq4_xs_products_match_the_written_values() {
    check(GgmlType::IQ4_XS, 1024, write_iq4_xs);
}
