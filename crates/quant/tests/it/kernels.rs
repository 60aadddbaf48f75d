//! SIMD kernels against their scalar twins, quantized dots against float dots,
//! matmul against a naive loop, and error handling.

use hearth_quant as quant;
use proptest::prelude::*;
use quant::{
    dequantize, quantize, quantize_activation, scalar, testing, vec_dot, vec_dot_type, GgmlType,
    Matrix, QuantError,
};
use threads::ThreadPool;

/// The types every test here runs, with [`GgmlType::LATTICE`] after them.
const WEIGHT_TYPES: [GgmlType; 16] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::Q8_K,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
];

/// Offsets of the f16 scale fields in one block, which must hold finite values.
fn f16_fields(ty: GgmlType) -> &'static [usize] {
    match ty {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => &[0],
        GgmlType::IQ4_NL | GgmlType::IQ4_XS => &[0],
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
        GgmlType::Q2_K => &[80, 82],
        GgmlType::Q3_K => &[108],
        GgmlType::Q6_K => &[208],
        _ => &[],
    }
}

/// Simple deterministic generator so failures reproduce from the proptest seed.
pub(crate) struct Rng(pub(crate) u64);
impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// A float in [-1, 1).
    pub(crate) fn f32(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
}

/// Random but valid weight bytes for `n` elements of `ty`.
fn random_weights(ty: GgmlType, n: usize, rng: &mut Rng) -> Vec<u8> {
    if !ty.is_quantized() {
        let x: Vec<f32> = (0..n).map(|_| rng.f32() * 2.0).collect();
        let mut out = vec![0u8; n * ty.block_bytes()];
        quantize(ty, &x, &mut out).unwrap();
        return out;
    }
    if let Ok(w) = testing::random_lattice_blocks(ty, n / ty.block_len(), 0.05, || rng.next()) {
        return w;
    }
    if ty == GgmlType::Q8_K {
        let x: Vec<f32> = (0..n).map(|_| rng.f32()).collect();
        let mut out = vec![0u8; ty.row_bytes(n as u64).unwrap() as usize];
        quantize(ty, &x, &mut out).unwrap();
        return out;
    }
    let bb = ty.block_bytes();
    let mut out: Vec<u8> = (0..n / ty.block_len() * bb)
        .map(|_| rng.next() as u8)
        .collect();
    for block in out.chunks_exact_mut(bb) {
        for &off in f16_fields(ty) {
            let v = half::f16::from_f32(rng.f32() * 0.05);
            block[off..off + 2].copy_from_slice(&v.to_bits().to_le_bytes());
        }
    }
    out
}

fn random_acts(ty: GgmlType, n: usize, rng: &mut Rng, scale: f32) -> (Vec<f32>, Vec<u8>) {
    let x: Vec<f32> = (0..n).map(|_| rng.f32() * scale).collect();
    let at = vec_dot_type(ty);
    let mut a = vec![0u8; at.row_bytes(n as u64).unwrap() as usize];
    quantize_activation(at, &x, &mut a).unwrap();
    (x, a)
}

fn deq(ty: GgmlType, bytes: &[u8], n: usize) -> Vec<f32> {
    let mut v = vec![0f32; n];
    dequantize(ty, bytes, &mut v).unwrap();
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn simd_matches_scalar(seed in 1u64.., nblocks in 1usize..6, scale in 0.01f32..100.0) {
        let mut rng = Rng(seed);
        for ty in WEIGHT_TYPES.into_iter().chain(GgmlType::LATTICE) {
            let n = nblocks * 256;
            let w = random_weights(ty, n, &mut rng);
            let (_, a) = random_acts(ty, n, &mut rng, scale);
            let reference = scalar::vec_dot(ty, n, &w, &a).unwrap();
            // Every tier adds in the scalar reference's order: the same bits.
            for set in testing::kernel_sets() {
                let got = testing::vec_dot_with(set, ty, n, &w, &a).unwrap();
                prop_assert_eq!(got.to_bits(), reference.to_bits(),
                    "{} on {}: {} vs scalar {}", ty, set, got, reference);
            }
            prop_assert_eq!(vec_dot(ty, n, &w, &a).unwrap().to_bits(), reference.to_bits());
        }
    }

    /// Q4_K, Q6_K, Q5_0 and Q8_0 rows interleaved in groups of eight: every table's
    /// interleaved kernels give each row the scalar reference's dot to the
    /// bit, and so does every product through the layout (decode rows,
    /// batched rows, the panel product of a prefill), on the table in use.
    #[test]
    fn interleaved_rows_match_scalar_rows(seed in 1u64.., groups in 1usize..4, nblocks in 1usize..5, scale in 0.01f32..100.0) {
        for ty in [GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q5_0, GgmlType::Q8_0] {
            let mut rng = Rng(seed);
            // The 32-value types take an odd number of blocks too (the
            // kernels' last block), and more than a kernel's chunk of 32.
            let blocks = if ty.block_len() == 256 { nblocks } else { 17 * nblocks };
            let (rows, cols) = (8 * groups, ty.block_len() * blocks);
            let w = random_weights(ty, rows * cols, &mut rng);
            let packed = quant::interleave(ty, rows, cols, &w, |_| {}).unwrap().unwrap();
            prop_assert_eq!(packed.len(), w.len());
            let (plain, grouped) = (Matrix::new(ty, rows, cols, &w).unwrap(), Matrix::interleaved(ty, rows, cols, &packed).unwrap());
            let rb = plain.row_bytes();
            // Six activation rows: four through the four-row kernel, two alone.
            let (x, a) = random_acts(ty, 6 * cols, &mut rng, scale);
            let x = &x[..cols];
            let arow = a.len() / 6;
            let want: Vec<f32> = (0..6 * rows)
                .map(|i| {
                    let (b, r) = (i / rows, i % rows);
                    scalar::vec_dot(ty, cols, &w[r * rb..(r + 1) * rb], &a[b * arow..(b + 1) * arow]).unwrap()
                })
                .collect();
            for set in testing::kernel_sets() {
                let mut got = vec![0f32; 6 * rows];
                if testing::interleaved_rows_with(set, &grouped, &a, 6, &mut got).unwrap() {
                    prop_assert_eq!(got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), "{} {}", ty, set);
                }
            }
            let pool = ThreadPool::new(2);
            for batch in [1usize, 3, 4, 9, 16, 21] {
                let xs: Vec<f32> = (0..batch * cols).map(|i| x[i % cols] * (1.0 + (i / cols) as f32)).collect();
                let mut outs = [vec![0f32; batch * rows], vec![0f32; batch * rows]];
                for (m, out) in [&plain, &grouped].into_iter().zip(outs.iter_mut()) {
                    let mut scratch = Vec::new();
                    quant::matmul(&pool, quant::Product::new(&[m], &xs, batch), &mut [&mut out[..]], &mut scratch).unwrap();
                }
                let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                prop_assert_eq!(bits(&outs[1]), bits(&outs[0]), "{} batch {}", ty, batch);
            }
            let mut row = vec![0f32; cols];
            let mut want_row = vec![0f32; cols];
            grouped.dequantize_row(rows - 3, &mut row).unwrap();
            plain.dequantize_row(rows - 3, &mut want_row).unwrap();
            prop_assert_eq!(row, want_row);
        }
    }

    /// Whole rows dequantized on every tier are the portable code's bits,
    /// for any bytes (NaN and infinite scales included; a NaN is any NaN,
    /// as the sum of two may keep either's payload).
    #[test]
    fn every_tier_dequantizes_to_the_portable_bits(seed in 1u64.., nblocks in 1usize..5) {
        let mut rng = Rng(seed);
        for ty in WEIGHT_TYPES.into_iter().chain(GgmlType::LATTICE) {
            let n = nblocks * 256;
            let bytes: Vec<u8> = (0..quant::row_size(ty, n).unwrap()).map(|_| rng.next() as u8).collect();
            let mut want = vec![0f32; n];
            testing::dequantize_with("scalar", ty, &bytes, &mut want).unwrap();
            for set in testing::kernel_sets() {
                let mut got = vec![0f32; n];
                testing::dequantize_with(set, ty, &bytes, &mut got).unwrap();
                let bits = |v: &[f32]| v.iter().map(|v| if v.is_nan() { u32::MAX } else { v.to_bits() }).collect::<Vec<_>>();
                prop_assert_eq!(bits(&got), bits(&want), "{} on {}", ty, set);
            }
        }
    }

    #[test]
    fn float_kernels_match_scalar_any_length(seed in 1u64.., n in 0usize..300) {
        let mut rng = Rng(seed);
        for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
            let w = random_weights(ty, n, &mut rng);
            let x: Vec<f32> = (0..n).map(|_| rng.f32()).collect();
            let reference = scalar::vec_dot_f32(ty, &w, &x).unwrap();
            for set in testing::kernel_sets() {
                let got = testing::vec_dot_f32_with(set, ty, &w, &x).unwrap();
                prop_assert_eq!(got.to_bits(), reference.to_bits(),
                    "{} on {}: {} vs {}", ty, set, got, reference);
            }
        }
    }

    #[test]
    fn quantized_dot_matches_dequantized_dot(seed in 1u64.., nblocks in 1usize..4) {
        let mut rng = Rng(seed);
        for ty in WEIGHT_TYPES.into_iter().chain(GgmlType::LATTICE) {
            let n = nblocks * 256;
            let w = random_weights(ty, n, &mut rng);
            let (x, a) = random_acts(ty, n, &mut rng, 1.0);
            let wd = deq(ty, &w, n);
            let exact: f32 = wd.iter().zip(&x).map(|(p, q)| p * q).sum();
            let mag: f32 = wd.iter().zip(&x).map(|(p, q)| (p * q).abs()).sum::<f32>() + 1e-6;
            let got = vec_dot(ty, n, &w, &a).unwrap();
            // 8-bit activations: each term is off by at most about 1/127 of the block max.
            prop_assert!((got - exact).abs() <= 0.02 * mag, "{ty}: {got} vs {exact} (mag {mag})");
        }
    }
}

/// An empty matrix, and a type or row count the layout does not take, are
/// left as they are rather than refused or panicked on.
#[test]
fn interleaving_leaves_what_it_cannot_rearrange() {
    for (ty, rows, cols) in [
        (GgmlType::Q8_0, 0, 64),
        (GgmlType::Q8_0, 8, 0),
        (GgmlType::Q5_0, 12, 32),
        (GgmlType::Q5_K, 8, 256),
    ] {
        let data = vec![0u8; ty.row_bytes(cols as u64).unwrap() as usize * rows];
        let got = quant::interleave(ty, rows, cols, &data, |_| {}).unwrap();
        assert!(got.is_none(), "{ty} {rows}x{cols}");
    }
}

/// Large batches take the panel GEMM, which sums blocks in another order:
/// equal to the vector kernels up to f32 rounding of the terms.
#[test]
fn batched_matmul_matches_vector_kernels() {
    let mut rng = Rng(7);
    for threads in [1, 2] {
        let pool = ThreadPool::new(threads);
        let mut scratch = Vec::new();
        for ty in [
            GgmlType::Q8_0,
            GgmlType::Q5_0,
            GgmlType::Q4_0,
            GgmlType::Q4_1,
            GgmlType::Q5_1,
            GgmlType::Q2_K,
            GgmlType::Q3_K,
            GgmlType::Q4_K,
            GgmlType::Q5_K,
            GgmlType::Q6_K,
            GgmlType::IQ4_NL,
            GgmlType::IQ4_XS,
        ]
        .into_iter()
        .chain(GgmlType::LATTICE)
        {
            let (rows, cols, batch) = (45, 512, 37);
            let w = random_weights(ty, rows * cols, &mut rng);
            let m = Matrix::new(ty, rows, cols, &w).unwrap();
            let x: Vec<f32> = (0..batch * cols).map(|_| rng.f32()).collect();
            let mut out = vec![f32::NAN; batch * rows];
            single_product(&pool, &m, &x, batch, &mut out, &mut scratch).unwrap();
            let at = vec_dot_type(ty);
            let mut a = vec![0u8; at.row_bytes(cols as u64).unwrap() as usize];
            let mut wrow = vec![0.0f32; cols];
            for b in 0..batch {
                let xb = &x[b * cols..(b + 1) * cols];
                quantize_activation(at, xb, &mut a).unwrap();
                for r in 0..rows {
                    let want = vec_dot(ty, cols, m.row(r), &a).unwrap();
                    m.dequantize_row(r, &mut wrow).unwrap();
                    let mag: f32 = wrow.iter().zip(xb).map(|(p, q)| (p * q).abs()).sum();
                    let got = out[b * rows + r];
                    assert!(
                        (got - want).abs() <= 1e-5 * mag + 1e-6,
                        "{ty} threads {threads} batch row {b} row {r}: {got} vs {want} (mag {mag})"
                    );
                }
            }
        }
    }
}

/// A float product of every decode-sized batch (one to fifteen rows, which
/// take the float tiles in groups) gives each output the bits of the scalar
/// reference's dot of its weight and activation rows, at a width whose
/// groups take one weight row at a time and one whose groups take several,
/// on one and two threads.
#[test]
fn float_batches_equal_single_dots_bitwise() {
    let mut rng = Rng(19);
    for threads in [1, 2] {
        let pool = ThreadPool::new(threads);
        let mut scratch = Vec::new();
        for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
            for cols in [520, 2056] {
                let rows = 23;
                let w = random_weights(ty, rows * cols, &mut rng);
                let m = Matrix::new(ty, rows, cols, &w).unwrap();
                for batch in 1..16 {
                    let x: Vec<f32> = (0..batch * cols).map(|_| rng.f32()).collect();
                    let mut out = vec![f32::NAN; batch * rows];
                    single_product(&pool, &m, &x, batch, &mut out, &mut scratch).unwrap();
                    for b in 0..batch {
                        let xb = &x[b * cols..(b + 1) * cols];
                        for r in 0..rows {
                            let want = scalar::vec_dot_f32(ty, m.row(r), xb).unwrap();
                            let got = out[b * rows + r];
                            assert_eq!(
                                got.to_bits(),
                                want.to_bits(),
                                "{ty} cols {cols} batch {batch} threads {threads} row {b}, {r}"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn matmul_matches_naive_loop() {
    let mut rng = Rng(42);
    for threads in [1, 2, 3] {
        let pool = ThreadPool::new(threads);
        let mut scratch = Vec::new();
        for ty in WEIGHT_TYPES.into_iter().chain(GgmlType::LATTICE) {
            let (rows, cols) = (37, 512);
            let w = random_weights(ty, rows * cols, &mut rng);
            let m = Matrix::new(ty, rows, cols, &w).unwrap();
            for batch in [1, 4, 7] {
                let x: Vec<f32> = (0..batch * cols).map(|_| rng.f32()).collect();
                let mut out = vec![f32::NAN; batch * rows];
                single_product(&pool, &m, &x, batch, &mut out, &mut scratch).unwrap();
                let at = vec_dot_type(ty);
                let mut a = vec![0u8; at.row_bytes(cols as u64).unwrap() as usize];
                for b in 0..batch {
                    let xb = &x[b * cols..(b + 1) * cols];
                    for r in 0..rows {
                        let want = if ty.is_quantized() {
                            quantize_activation(at, xb, &mut a).unwrap();
                            vec_dot(ty, cols, m.row(r), &a).unwrap()
                        } else {
                            quant::vec_dot_f32(ty, m.row(r), xb).unwrap()
                        };
                        assert_eq!(
                            out[b * rows + r],
                            want,
                            "{ty} threads {threads} batch {batch} row {r}"
                        );
                    }
                }
            }
        }
    }
}

/// Several matrices of mixed types against the same activations in one
/// product give each matrix's product alone to the bit, on every thread
/// count, for decode-sized batches (fused) and a prefill-sized one (one by
/// one), float weights included.
#[test]
fn matmul_many_matches_separate_products() {
    let mut rng = Rng(11);
    let cols = 512;
    let shapes = [
        (GgmlType::Q5_0, 37),
        (GgmlType::Q8_0, 64),
        (GgmlType::Q4_K, 21),
        (GgmlType::Q6_K, 8),
        (GgmlType::F16, 9),
        // Second matrices of the Q5_0 and Q4_K formats: a prefill-sized
        // batch computes each pair as one panel product.
        (GgmlType::Q5_0, 70),
        (GgmlType::Q4_K, 40),
    ];
    let weights: Vec<Vec<u8>> = shapes
        .iter()
        .map(|&(ty, rows)| random_weights(ty, rows * cols, &mut rng))
        .collect();
    let ms: Vec<Matrix> = shapes
        .iter()
        .zip(&weights)
        .map(|(&(ty, rows), w)| Matrix::new(ty, rows, cols, w).unwrap())
        .collect();
    for threads in [1, 2, 3] {
        let pool = ThreadPool::new(threads);
        let mut scratch = Vec::new();
        for batch in [1, 3, 5, 17, 150] {
            let x: Vec<f32> = (0..batch * cols).map(|_| rng.f32()).collect();
            let sets: [Vec<&Matrix>; 5] = [
                ms[..4].iter().collect(),
                ms[..5].iter().collect(),
                ms[1..3].iter().collect(),
                vec![&ms[0], &ms[5], &ms[2], &ms[6]],
                vec![&ms[5], &ms[0]],
            ];
            for refs in sets {
                let set = refs.clone();
                let mut outs: Vec<Vec<f32>> = set
                    .iter()
                    .map(|m| vec![f32::NAN; batch * m.rows()])
                    .collect();
                let mut views: Vec<&mut [f32]> = outs.iter_mut().map(|o| &mut o[..]).collect();
                let product = quant::Product::new(&refs, &x, batch);
                quant::matmul(&pool, product, &mut views, &mut scratch).unwrap();
                for (&m, got) in set.iter().zip(&outs) {
                    let mut want = vec![f32::NAN; batch * m.rows()];
                    single_product(&pool, m, &x, batch, &mut want, &mut scratch).unwrap();
                    let same = got
                        .iter()
                        .zip(&want)
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{} threads {threads} batch {batch}", m.ty());
                }
            }
        }
        // Shapes that do not fit are errors.
        let refs: Vec<&Matrix> = ms[..2].iter().collect();
        let mut a = vec![0.0; 37];
        let mut b = vec![0.0; 64];
        let mut views: Vec<&mut [f32]> = vec![&mut a, &mut b];
        let short = quant::Product::new(&refs, &[0.0; 100], 1);
        assert!(quant::matmul(&pool, short, &mut views, &mut scratch).is_err());
        let fewer_outputs = quant::Product::new(&refs, &[0.0; 512], 1);
        assert!(quant::matmul(&pool, fewer_outputs, &mut views[..1], &mut scratch).is_err());
        // A gate over other than two matrices of one shape.
        let act = |_: &mut [f32], _: &[f32]| {};
        let gate = || {
            Some(quant::Gate {
                act: &act,
                next: None,
            })
        };
        let one = [&ms[0]];
        let lone_gate = quant::Product {
            gate: gate(),
            ..quant::Product::new(&one, &[0.0; 512], 1)
        };
        assert!(quant::matmul(&pool, lone_gate, &mut views[..1], &mut scratch).is_err());
        let mismatched = quant::Product {
            gate: gate(),
            ..quant::Product::new(&refs, &[0.0; 512], 1)
        };
        assert!(quant::matmul(&pool, mismatched, &mut views, &mut scratch).is_err());
    }
}

/// `out = m x`: one matrix's product.
fn single_product(
    pool: &ThreadPool,
    m: &Matrix,
    x: &[f32],
    batch: usize,
    out: &mut [f32],
    scratch: &mut Vec<u8>,
) -> Result<(), quant::QuantError> {
    quant::matmul(
        pool,
        quant::Product::new(&[m], x, batch),
        &mut [out],
        scratch,
    )
}

/// The gated product of `ws` over `x` into `outs`, `act` applied, `outs[0]`
/// quantized for `next` where that pays.
#[allow(clippy::too_many_arguments)]
fn gated(
    pool: &ThreadPool,
    ws: [&Matrix; 2],
    x: &[f32],
    batch: usize,
    mut outs: [&mut [f32]; 2],
    scratch: &mut Vec<u8>,
    act: &(dyn Fn(&mut [f32], &[f32]) + Sync),
    next: Option<(&Matrix, &mut quant::PreparedActs)>,
) {
    let product = quant::Product {
        gate: Some(quant::Gate { act, next }),
        ..quant::Product::new(&ws, x, batch)
    };
    quant::matmul(pool, product, &mut outs, scratch).unwrap();
}

/// The activation the gated tests apply: the gate's half through tanh,
/// times up.
fn tanh_gate(g: &mut [f32], u: &[f32]) {
    for (g, &u) in g.iter_mut().zip(u) {
        *g = (*g * 0.5).tanh() * u;
    }
}

/// Whether two outputs hold the same bits.
fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.iter().zip(b).all(|(a, b)| a.to_bits() == b.to_bits())
}

/// Gate and up with the activation applied by the product's tasks give the
/// separate products followed by the activation, to the bit, for decode
/// and prefill batches and on every thread count.
#[test]
fn matmul_gated_matches_products_then_activation() {
    let mut rng = Rng(12);
    let cols = 256;
    // Pairs of one format (the panel product applies the activation in its
    // tasks, over partial panels too) and of two (applied after it).
    for (ty, ty_up, rows) in [
        (GgmlType::Q5_0, GgmlType::Q5_0, 200),
        (GgmlType::Q4_K, GgmlType::Q4_K, 64),
        (GgmlType::Q4_K, GgmlType::Q4_K, 1000),
        (GgmlType::Q4_K, GgmlType::Q6_K, 96),
        (GgmlType::Q5_0, GgmlType::Q5_0, 512),
        (GgmlType::F16, GgmlType::F16, 33),
    ] {
        let wg = random_weights(ty, rows * cols, &mut rng);
        let wu = random_weights(ty_up, rows * cols, &mut rng);
        let (g, u) = (
            Matrix::new(ty, rows, cols, &wg).unwrap(),
            Matrix::new(ty_up, rows, cols, &wu).unwrap(),
        );
        for threads in [1, 2, 5] {
            let pool = ThreadPool::new(threads);
            let mut scratch = Vec::new();
            for batch in [1, 2, 7, 40, 150] {
                let x: Vec<f32> = (0..batch * cols).map(|_| rng.f32()).collect();
                let step = GatedStep {
                    pool: &pool,
                    threads,
                    g: &g,
                    u: &u,
                    x: &x,
                    batch,
                };
                let want = step.check_against_separate_products(&mut scratch);
                // The next product from the activations the gated one
                // quantized as its tasks completed their blocks: the same
                // bits as quantizing the gated output afterwards.
                for ty_next in [
                    GgmlType::Q4_K,
                    GgmlType::Q6_K,
                    GgmlType::Q8_0,
                    GgmlType::Q5_0,
                ] {
                    if !rows.is_multiple_of(ty_next.block_len()) {
                        continue;
                    }
                    let wn = random_weights(ty_next, 48 * rows, &mut rng);
                    let next = Matrix::new(ty_next, 48, rows, &wn).unwrap();
                    step.check_next_product_takes_its_acts(&next, &want, &mut scratch);
                }
            }
        }
    }
}

/// One gated product to check: gate and up over one batch, on one pool.
struct GatedStep<'a> {
    pool: &'a ThreadPool,
    /// The pool's thread count, for messages.
    threads: usize,
    g: &'a Matrix<'a>,
    u: &'a Matrix<'a>,
    x: &'a [f32],
    batch: usize,
}

/// What the separate products give: the activated gate and up.
struct GatedOutputs {
    gate: Vec<f32>,
    up: Vec<f32>,
}

impl GatedStep<'_> {
    /// Outputs of the right size for this step's products.
    fn zeroed(&self) -> GatedOutputs {
        let n = self.batch * self.g.rows();
        GatedOutputs {
            gate: vec![0.0; n],
            up: vec![0.0; n],
        }
    }

    /// Asserts the gated product equals the separate products followed by
    /// the activation, and returns the latter.
    fn check_against_separate_products(&self, scratch: &mut Vec<u8>) -> GatedOutputs {
        let (ty, threads, batch) = (self.g.ty(), self.threads, self.batch);
        let mut got = self.zeroed();
        gated(
            self.pool,
            [self.g, self.u],
            self.x,
            batch,
            [&mut got.gate, &mut got.up],
            scratch,
            &tanh_gate,
            None,
        );
        let mut want = self.zeroed();
        single_product(self.pool, self.g, self.x, batch, &mut want.gate, scratch).unwrap();
        single_product(self.pool, self.u, self.x, batch, &mut want.up, scratch).unwrap();
        tanh_gate(&mut want.gate, &want.up);
        assert!(
            same_bits(&got.up, &want.up),
            "{ty} up, {threads} threads, batch {batch}"
        );
        assert!(
            same_bits(&got.gate, &want.gate),
            "{ty} gate, {threads} threads, batch {batch}"
        );
        want
    }

    /// Asserts the gated product that quantizes its output for `next`
    /// still gives `want`, leaves the activations ready where it should,
    /// and that `next` over them gives its product of `want.gate`.
    fn check_next_product_takes_its_acts(
        &self,
        next: &Matrix,
        want: &GatedOutputs,
        scratch: &mut Vec<u8>,
    ) {
        let (ty, ty_next, threads, batch) = (self.g.ty(), next.ty(), self.threads, self.batch);
        let mut ready = quant::PreparedActs::default();
        let mut got = self.zeroed();
        let next_of = Some((next, &mut ready));
        let outs = [&mut got.gate[..], &mut got.up[..]];
        gated(
            self.pool,
            [self.g, self.u],
            self.x,
            batch,
            outs,
            scratch,
            &tanh_gate,
            next_of,
        );
        assert!(same_bits(&got.gate, &want.gate) && same_bits(&got.up, &want.up));
        // Decode batches of quantized weights have them ready, and every
        // prefill batch (the next product is a panel product: all four
        // types have one).
        let fused = batch >= 16 || ty != GgmlType::F16;
        assert_eq!(ready.is_ready(), fused, "{ty} -> {ty_next}, batch {batch}");
        let (mut out, mut want_out) = (vec![0.0; batch * 48], vec![0.0; batch * 48]);
        let ws = [next];
        let product = quant::Product {
            prepared: Some(&mut ready),
            ..quant::Product::new(&ws, &got.gate, batch)
        };
        quant::matmul(self.pool, product, &mut [&mut out[..]], scratch).unwrap();
        assert!(!ready.is_ready(), "used up");
        single_product(self.pool, next, &want.gate, batch, &mut want_out, scratch).unwrap();
        assert!(
            same_bits(&out, &want_out),
            "{ty} -> {ty_next}, {threads} threads, batch {batch}"
        );
    }
}

/// Row `i` of the activations the prepared-rows test makes.
fn make_row(i: usize, row: &mut [f32]) {
    for (j, v) in row.iter_mut().enumerate() {
        *v = ((i * 7 + j * 13) % 97) as f32 / 48.0 - 1.0;
    }
}

/// Rows made by `PreparedActs::make_rows` (and, for a prefill batch,
/// quantized by the tasks that made them) give the products of the same
/// rows made first and quantized by the product, to the bit: for one
/// matrix, for several of one format and of two (the second quantizes its
/// own), on every thread count. Prepared activations serve only a product
/// of the shape they were made for, and one product.
#[test]
fn prepared_rows_give_the_same_products() {
    let mut rng = Rng(31);
    let cols = 512;
    for (ty, ty2) in [
        (GgmlType::Q4_K, GgmlType::Q4_K),
        (GgmlType::Q4_K, GgmlType::Q6_K),
        (GgmlType::Q5_0, GgmlType::Q8_0),
        (GgmlType::Q6_K, GgmlType::Q5_0),
        (GgmlType::F16, GgmlType::Q4_K),
    ] {
        let (w1, w2) = (
            random_weights(ty, 40 * cols, &mut rng),
            random_weights(ty2, 72 * cols, &mut rng),
        );
        let (m1, m2) = (
            Matrix::new(ty, 40, cols, &w1).unwrap(),
            Matrix::new(ty2, 72, cols, &w2).unwrap(),
        );
        for threads in [1, 2, 5] {
            let pool = ThreadPool::new(threads);
            let mut scratch = Vec::new();
            for batch in [1, 7, 16, 50, 130] {
                let mut want_x = vec![0.0; batch * cols];
                want_x
                    .chunks_exact_mut(cols)
                    .enumerate()
                    .for_each(|(i, r)| make_row(i, r));
                let step = PreparedStep {
                    pool: &pool,
                    threads,
                    m1: &m1,
                    m2: &m2,
                    want_x: &want_x,
                    batch,
                };
                let mut ready = quant::PreparedActs::default();
                let mut x = vec![f32::NAN; batch * cols];
                ready
                    .make_rows(&pool, &m1, &mut x, batch, &make_row)
                    .unwrap();
                assert!(same_bits(&x, &want_x), "{ty}, batch {batch}: the rows made");
                let panel = batch >= 16 && ty != GgmlType::F16;
                assert_eq!(ready.is_ready(), panel, "{ty}, batch {batch}");
                let (mut got, want) = step.check_one_matrix(&mut ready, &x, &mut scratch);
                ready
                    .make_rows(&pool, &m1, &mut x, batch, &make_row)
                    .unwrap();
                step.check_two_matrices(&mut ready, &x, &want, &mut scratch);
                ready
                    .make_rows(&pool, &m1, &mut x, batch, &make_row)
                    .unwrap();
                step.check_another_batch_is_not_served(&mut ready, &x, &mut got, &mut scratch);
            }
        }
    }
}

/// One batch of the prepared-rows test: its rows made plainly (`want_x`)
/// and the two matrices the products multiply them by (40 and 72 rows).
struct PreparedStep<'a> {
    pool: &'a ThreadPool,
    /// The pool's thread count, for messages.
    threads: usize,
    m1: &'a Matrix<'a>,
    m2: &'a Matrix<'a>,
    want_x: &'a [f32],
    batch: usize,
}

impl PreparedStep<'_> {
    /// One matrix over the prepared rows `x`: asserts it uses them up and
    /// equals the plain product, and returns both outputs (the prepared
    /// one, then the plain one).
    fn check_one_matrix(
        &self,
        ready: &mut quant::PreparedActs,
        x: &[f32],
        scratch: &mut Vec<u8>,
    ) -> (Vec<f32>, Vec<f32>) {
        let (ty, threads, batch) = (self.m1.ty(), self.threads, self.batch);
        let (mut got, mut want) = (vec![0.0; batch * 40], vec![0.0; batch * 40]);
        let one = [self.m1];
        let product = quant::Product {
            prepared: Some(ready),
            ..quant::Product::new(&one, x, batch)
        };
        quant::matmul(self.pool, product, &mut [&mut got[..]], scratch).unwrap();
        assert!(!ready.is_ready(), "used up");
        let plain = quant::Product::new(&one, self.want_x, batch);
        quant::matmul(self.pool, plain, &mut [&mut want[..]], scratch).unwrap();
        assert!(
            same_bits(&got, &want),
            "{ty}, {threads} threads, batch {batch}"
        );
        (got, want)
    }

    /// Two matrices, of one format or two, over the prepared rows `x`:
    /// asserts they use them up and equal the plain products (`want` is
    /// the first's).
    fn check_two_matrices(
        &self,
        ready: &mut quant::PreparedActs,
        x: &[f32],
        want: &[f32],
        scratch: &mut Vec<u8>,
    ) {
        let (ty, ty2, batch) = (self.m1.ty(), self.m2.ty(), self.batch);
        let (mut g1, mut g2) = (vec![0.0; batch * 40], vec![0.0; batch * 72]);
        let two = [self.m1, self.m2];
        let product = quant::Product {
            prepared: Some(ready),
            ..quant::Product::new(&two, x, batch)
        };
        quant::matmul(self.pool, product, &mut [&mut g1, &mut g2], scratch).unwrap();
        assert!(!ready.is_ready(), "used up");
        let mut want2 = vec![0.0; batch * 72];
        let plain = quant::Product::new(&two[1..], self.want_x, batch);
        quant::matmul(self.pool, plain, &mut [&mut want2[..]], scratch).unwrap();
        assert!(
            same_bits(&g1, want) && same_bits(&g2, &want2),
            "{ty} and {ty2}, batch {batch}"
        );
    }

    /// Rows prepared for this batch, offered to a product of fewer rows:
    /// not taken, and used up all the same. `got` is the output buffer the
    /// one-matrix check filled (its head is overwritten).
    fn check_another_batch_is_not_served(
        &self,
        ready: &mut quant::PreparedActs,
        x: &[f32],
        got: &mut [f32],
        scratch: &mut Vec<u8>,
    ) {
        let (ty, batch) = (self.m1.ty(), self.batch);
        let fewer = batch - batch / 2;
        let one = [self.m1];
        let mut want_fewer = vec![0.0; fewer * 40];
        let plain = quant::Product::new(&one, self.want_x, fewer);
        quant::matmul(self.pool, plain, &mut [&mut want_fewer[..]], scratch).unwrap();
        let product = quant::Product {
            prepared: Some(ready),
            ..quant::Product::new(&one, x, fewer)
        };
        quant::matmul(self.pool, product, &mut [&mut got[..]], scratch).unwrap();
        assert!(!ready.is_ready());
        let got = &got[..fewer * 40];
        assert!(
            same_bits(got, &want_fewer),
            "{ty}, batch {batch}: another batch"
        );
    }
}

#[test]
fn bad_inputs_are_errors_not_panics() {
    let mut dst = [0f32; 32];
    assert!(matches!(
        dequantize(GgmlType::Q8_0, &[0u8; 10], &mut dst),
        Err(QuantError::BufferTooShort { .. })
    ));
    assert!(matches!(
        dequantize(GgmlType::Q8_0, &[0u8; 34], &mut dst[..31]),
        Err(QuantError::NotBlockMultiple { .. })
    ));
    assert!(matches!(
        dequantize(GgmlType::I32, &[0u8; 128], &mut dst),
        Err(QuantError::Unsupported(_))
    ));
    let mut out = [0u8; 8];
    assert!(quantize(GgmlType::Q8_0, &[0.0; 32], &mut out).is_err());
    assert!(quantize(GgmlType::Q8_0, &[0.0; 33], &mut [0u8; 64]).is_err());
    assert!(matches!(
        quantize(GgmlType::I8, &[0.0; 32], &mut [0u8; 64]),
        Err(QuantError::Unsupported(_))
    ));
    assert!(Matrix::new(GgmlType::Q4_K, 2, 256, &[0u8; 144]).is_err());
    assert!(Matrix::new(GgmlType::Q4_K, 2, 100, &[0u8; 288]).is_err());
    assert!(Matrix::new(GgmlType::I64, 1, 1, &[0u8; 8]).is_err());
    let w = [0u8; 2 * 34];
    let m = Matrix::new(GgmlType::Q8_0, 2, 32, &w).unwrap();
    assert!(m.row(2).is_empty());
    assert!(m.dequantize_row(2, &mut dst).is_err());
    assert!(m.dequantize_row(0, &mut dst[..16]).is_err());
    assert!(m.dequantize_row(1, &mut dst).is_ok());
    let pool = ThreadPool::new(1);
    let mut scratch = Vec::new();
    let mut o = [0f32; 2];
    assert!(single_product(&pool, &m, &[0.0; 31], 1, &mut o, &mut scratch).is_err());
    assert!(quant::matmul(
        &pool,
        quant::Product::new(&[&m], &[0.0; 32], 1),
        &mut [&mut o[..1]],
        &mut scratch
    )
    .is_err());
    assert!(single_product(&pool, &m, &[0.0; 32], 1, &mut o, &mut scratch).is_ok());
    // Dot products over rows shorter than their length are errors, not NaN or a panic.
    assert!(quant::vec_dot(GgmlType::Q8_0, 64, &w[..34], &[0u8; 68]).is_err());
    assert!(quant::vec_dot(GgmlType::Q8_0, 64, &w, &[0u8; 67]).is_err());
    assert!(quant::vec_dot(GgmlType::Q8_0, 33, &w, &[0u8; 68]).is_err());
    assert!(quant::vec_dot(GgmlType::Q8_0, 64, &w, &[0u8; 68]).is_ok());
    assert!(quant::vec_dot_f32(GgmlType::Q8_0, &w, &[0.0; 4]).is_err());
    assert!(quant::vec_dot_f32(GgmlType::F32, &[0u8; 8], &[0.0; 4]).is_err());
    assert!(testing::vec_dot_with("no-such-set", GgmlType::Q8_0, 32, &w, &[0u8; 34]).is_err());
}

#[test]
fn q8_k_activation_follows_llama_cpp() {
    let mut x = [0.25f32; 256];
    x[7] = -2.0;
    let mut b = [0u8; 292];
    quantize(GgmlType::Q8_K, &x, &mut b).unwrap();
    let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    // The signed extreme maps to -127 (iscale = -127/max); 0.25 * 63.5 rounds to 16.
    assert_eq!(b[4 + 7] as i8, -127);
    assert!((d - 2.0 / 127.0).abs() < 1e-7, "d = {d}");
    assert_eq!(b[4] as i8, 16);
    let bsum0 = i16::from_le_bytes([b[260], b[261]]) as i32;
    assert_eq!(bsum0, (0..16).map(|i| b[4 + i] as i8 as i32).sum::<i32>());
}
