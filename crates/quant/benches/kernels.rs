//! vec_dot per weight type and kernel set, and a 640x2048 matmul.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use hearth_quant::{
    matmul, quantize, quantize_activation, testing, vec_dot_type, vector, GgmlType, Matrix, Product,
};
use std::hint::black_box;
use threads::{default_threads, ThreadPool};

const TYPES: [GgmlType; 14] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q5_0,
    GgmlType::Q8_0,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::IQ2_XXS,
    GgmlType::IQ2_S,
    GgmlType::IQ3_XXS,
    GgmlType::IQ3_S,
    GgmlType::IQ1_M,
];

/// Deterministic pseudo-random values in [-1, 1).
fn values(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2654435761) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s >> 8) as f32 / (1u32 << 23) as f32 - 1.0
        })
        .collect()
}

/// Weights of type `ty`: random bytes with sane f16 scales for formats this crate
/// cannot quantize to, quantized values otherwise.
fn weights(ty: GgmlType, n: usize) -> Vec<u8> {
    let bytes = ty.row_bytes(n as u64).unwrap() as usize;
    let mut w = vec![0u8; bytes];
    if quantize(ty, &values(n, 7), &mut w).is_ok() {
        return w;
    }
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    if let Ok(w) = testing::random_lattice_blocks(ty, n / ty.block_len(), 0.01, next) {
        return w;
    }
    let noise = values(bytes, 11);
    for (b, v) in w.iter_mut().zip(noise) {
        *b = (v * 127.0) as i8 as u8;
    }
    let scales: &[usize] = match ty {
        GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
        GgmlType::Q6_K => &[208],
        _ => &[],
    };
    for block in w.chunks_exact_mut(ty.block_bytes()) {
        for &o in scales {
            block[o..o + 2].copy_from_slice(&half::f16::from_f32(0.01).to_bits().to_le_bytes());
        }
    }
    w
}

fn bench_vec_dot(c: &mut Criterion) {
    let n = 4096;
    let mut g = c.benchmark_group("vec_dot_4096");
    g.throughput(Throughput::Elements(n as u64));
    for ty in TYPES {
        let w = weights(ty, n);
        let x = values(n, 3);
        let at = vec_dot_type(ty);
        let mut a = vec![0u8; at.row_bytes(n as u64).unwrap() as usize];
        quantize_activation(at, &x, &mut a).unwrap();
        for set in testing::kernel_sets() {
            g.bench_with_input(BenchmarkId::new(ty.name(), set), &set, |b, set| {
                b.iter(|| testing::vec_dot_with(set, ty, n, black_box(&w), black_box(&a)).unwrap())
            });
        }
    }
    g.finish();
}

fn bench_matmul(c: &mut Criterion) {
    let (rows, cols) = (640, 2048);
    let pool = ThreadPool::new(default_threads());
    let mut g = c.benchmark_group("matmul_640x2048");
    g.throughput(Throughput::Elements((rows * cols) as u64));
    for ty in [
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q5_0,
        GgmlType::Q4_K,
        GgmlType::Q6_K,
        GgmlType::F16,
        GgmlType::BF16,
    ] {
        let w = weights(ty, rows * cols);
        let m = Matrix::new(ty, rows, cols, &w).unwrap();
        // 2, 3, 5 and 9 rows: speculation's checks of 1, 2, 4 and 8 drafts.
        for batch in [1usize, 2, 3, 4, 5, 8, 9] {
            let x = values(cols * batch, 5);
            let mut out = vec![0f32; rows * batch];
            let mut scratch = Vec::new();
            g.bench_function(BenchmarkId::new(ty.name(), format!("batch{batch}")), |b| {
                b.iter(|| {
                    matmul(
                        &pool,
                        Product::new(&[&m], black_box(&x), batch),
                        &mut [&mut out[..]],
                        &mut scratch,
                    )
                    .unwrap()
                })
            });
        }
    }
    g.finish();
}

/// A decode product's rows on one thread, one at a time against four at a
/// time, for the 32-block types on a small model's width (640 columns: 20
/// blocks a row) with the weights in L2, so the kernels' own cost shows.
fn bench_decode_rows(c: &mut Criterion) {
    let (rows, cols) = (256, 640);
    let mut g = c.benchmark_group("decode_rows_256x640");
    g.throughput(Throughput::Elements((rows * cols) as u64));
    for ty in [GgmlType::Q8_0, GgmlType::Q5_0, GgmlType::Q4_0] {
        let w = weights(ty, rows * cols);
        let m = Matrix::new(ty, rows, cols, &w).unwrap();
        let x = values(cols, 9);
        let mut a = vec![0u8; GgmlType::Q8_0.row_bytes(cols as u64).unwrap() as usize];
        quantize_activation(GgmlType::Q8_0, &x, &mut a).unwrap();
        let mut out = vec![0f32; rows];
        for set in testing::kernel_sets() {
            for four in [false, true] {
                if four && !testing::decode_rows_with(set, &m, &a, &mut out, true).unwrap() {
                    continue;
                }
                let name = format!("{set}/{}", if four { "rows4" } else { "rows1" });
                g.bench_function(BenchmarkId::new(ty.name(), name), |b| {
                    b.iter(|| testing::decode_rows_with(set, &m, black_box(&a), &mut out, four))
                });
            }
        }
    }
    g.finish();
}

/// The prefill tile alone: one 32-row panel against 64 activation rows, per
/// kernel set (multiply-adds per second = elements per second).
fn bench_gemm_tile(c: &mut Criterion) {
    let batch = 64;
    for cols in [640usize, 2048] {
        let mut g = c.benchmark_group(format!("gemm_tile_{cols}"));
        g.throughput(Throughput::Elements((32 * batch * cols) as u64));
        for ty in [
            GgmlType::Q5_0,
            GgmlType::Q8_0,
            GgmlType::Q4_K,
            GgmlType::Q6_K,
        ] {
            if !cols.is_multiple_of(ty.block_len()) {
                continue;
            }
            let t =
                testing::TileBench::new(ty, cols, &values(32 * cols, 9), &values(batch * cols, 4))
                    .unwrap();
            for set in testing::kernel_sets() {
                g.bench_with_input(BenchmarkId::new(ty.name(), set), &set, |b, set| {
                    b.iter(|| t.run(set).unwrap())
                });
            }
        }
        g.finish();
    }
}

/// Packing weight panels for the prefill tiles (weights per second), over
/// a matrix larger than the caches, as a prefill product reads it.
fn bench_gemm_pack(c: &mut Criterion) {
    // PACK_ROWS=N packs N rows of 2048 instead, a matrix that stays in
    // cache, to time the packer's own work apart from the memory reads.
    let (rows, cols) = std::env::var("PACK_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or((16384usize, 4096usize), |r| (r, 2048));
    let mut g = c.benchmark_group("gemm_pack");
    g.throughput(Throughput::Elements((rows * cols) as u64));
    for ty in [
        GgmlType::Q4_0,
        GgmlType::Q5_0,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
    ] {
        let data = weights(ty, rows * cols);
        let w = Matrix::new(ty, rows, cols, &data).unwrap();
        g.bench_function(ty.name(), |b| {
            b.iter(|| testing::pack_panels(black_box(&w)).unwrap())
        });
    }
    g.finish();
}

/// The f32 panel product at a vision encoder's attention shapes, per
/// kernel set (multiply-adds per second): 4096 patches, heads 72 wide, a
/// block of 64 queries; the scores `K·Qᵀ` (4096 × 72 by 72 × 64) and the
/// values `Vᵀ·P` (72 × 4096 by 4096 × 64); and one block of a float weight's
/// product (256 activation rows of 1152 by 256 weight rows), and of an audio
/// tower's, whose rows are a power of two of floats apart (1024 and 4096).
fn bench_sgemm_packed(c: &mut Criterion) {
    for (name, m, k, n) in [
        ("scores", 4096usize, 72usize, 64usize),
        ("values", 72, 4096, 64),
        ("weights", 256, 1152, 256),
        ("weights_1024", 256, 1024, 256),
        ("weights_4096", 256, 4096, 256),
    ] {
        let mut g = c.benchmark_group(format!("sgemm_packed_{name}"));
        g.throughput(Throughput::Elements((m * k * n) as u64));
        let a = values(m * k, 3);
        let mut b = vector::PackedB::new();
        b.pack(k, n, &values(k * n, 5), n).unwrap();
        let mut out = vec![0.0f32; m * n];
        for set in testing::kernel_sets() {
            g.bench_with_input(BenchmarkId::from_parameter(set), &set, |bch, set| {
                bch.iter(|| testing::sgemm_packed_with(set, m, &a, k, &b, &mut out, n).unwrap())
            });
        }
        g.finish();
    }
}

/// Prefill products of real shapes (a 512-row batch through the panel
/// product, packing included) on one thread: the 1B's gate and down
/// projections and the 4B's, whose panels outgrow L1 and L2 (multiply-adds
/// per second = elements per second).
fn bench_prefill_shapes(c: &mut Criterion) {
    let batch = 512;
    let pool = ThreadPool::new(1);
    let mut g = c.benchmark_group("prefill_512");
    g.sample_size(10);
    for (name, ty, rows, cols) in [
        ("1b_gate", GgmlType::Q5_0, 6912usize, 1152usize),
        ("1b_down", GgmlType::Q6_K, 1152, 6912),
        ("4b_gate", GgmlType::Q4_K, 10240, 2560),
        ("4b_down", GgmlType::Q6_K, 2560, 10240),
    ] {
        g.throughput(Throughput::Elements((rows * cols * batch) as u64));
        let w = weights(ty, rows * cols);
        let m = Matrix::new(ty, rows, cols, &w).unwrap();
        let x = values(cols * batch, 5);
        let mut out = vec![0f32; rows * batch];
        let mut scratch = Vec::new();
        g.bench_function(name, |b| {
            b.iter(|| {
                matmul(
                    &pool,
                    Product::new(&[&m], black_box(&x), batch),
                    &mut [&mut out[..]],
                    &mut scratch,
                )
                .unwrap()
            })
        });
    }
    g.finish();
}

/// Quantizing a 512-row batch for the panel product on one thread, per
/// activation form and kernel set (values per second): the 1B's inputs of
/// its Q5_0 projections (Q8_0, groups of 32) and of its Q6_K down
/// projection (Q8_K, groups of 16), and the 4B's Q4_K input (Q8_K, 32).
fn bench_panel_acts(c: &mut Criterion) {
    let batch = 512;
    let mut g = c.benchmark_group("panel_acts_512");
    for (name, ty, cols) in [
        ("q5_0_1152", GgmlType::Q5_0, 1152usize),
        ("q6_k_6912", GgmlType::Q6_K, 6912),
        ("q4_k_2560", GgmlType::Q4_K, 2560),
    ] {
        g.throughput(Throughput::Elements((cols * batch) as u64));
        let x = values(cols * batch, 6);
        let mut acts = testing::PanelActs::default();
        for set in testing::kernel_sets() {
            g.bench_with_input(BenchmarkId::new(name, set), &set, |b, set| {
                b.iter(|| {
                    testing::panel_acts_with(set, ty, black_box(&x), cols, &mut acts).unwrap()
                })
            });
        }
    }
    g.finish();
}

criterion_group!(
    benches,
    bench_panel_acts,
    bench_gemm_pack,
    bench_sgemm_packed,
    bench_vec_dot,
    bench_matmul,
    bench_decode_rows,
    bench_gemm_tile,
    bench_prefill_shapes
);
criterion_main!(benches);
