//! Decode products streamed from memory: how many bytes a second a batch-1
//! product of each weight type reads when its weights are far past the
//! caches, against the machine's read bandwidth at the same threads.
//!
//! `cargo run --release -p hearth-quant --example decode_stream -- [threads] [MiB]`
//!
//! `BATCH=n` multiplies `n` activation rows at once (a batched decode step
//! of `n` sequences, bound by compute rather than memory); `TYPES=BF16,Q8_0`
//! runs only those types.

use hearth_quant::{interleave, matmul, quantize, GgmlType, Matrix, Product};
use std::time::Instant;
use threads::{read_bandwidth, ThreadPool};

#[expect(
    clippy::too_many_lines,
    reason = "longer than a screen; issue 91 splits it"
)]
fn main() {
    let mut args = std::env::args().skip(1);
    let threads: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(1);
    let mib: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(768);
    let pool = ThreadPool::new(threads);
    let bw = read_bandwidth(&pool, 3);
    println!("threads {threads}, read bandwidth {:.1} GB/s", bw / 1e9);
    for (ty, rows, cols, grouped) in [
        (GgmlType::Q5_0, 6912, 1152, false),
        (GgmlType::Q5_0, 6912, 1152, true),
        (GgmlType::Q8_0, 6912, 1152, false),
        (GgmlType::Q8_0, 6912, 1152, true),
        (GgmlType::Q4_0, 6912, 1152, false),
        (GgmlType::Q4_K, 1152, 6912, false),
        (GgmlType::Q4_K, 1152, 6912, true),
        (GgmlType::Q6_K, 1152, 6912, false),
        (GgmlType::Q6_K, 1152, 6912, true),
        (GgmlType::Q5_K, 1152, 6912, false),
        (GgmlType::BF16, 6144, 640, false),
        (GgmlType::BF16, 1536, 2048, false),
    ] {
        // TYPES=BF16,Q8_0 runs only those.
        if let Ok(only) = std::env::var("TYPES") {
            if !only.split(',').any(|t| t.eq_ignore_ascii_case(ty.name())) {
                continue;
            }
        }
        // ROWS=n shrinks the matrices to n rows (weights in L2: the
        // kernels' own rate).
        let rows = std::env::var("ROWS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(rows);
        let n = rows * cols;
        let src: Vec<f32> = (0..n)
            .map(|i| ((i * 2654435761) % 1000) as f32 / 500.0 - 1.0)
            .collect();
        let bytes = ty.row_bytes(cols as u64).unwrap() as usize * rows;
        let mut one = vec![0u8; bytes];
        quantize(ty, &src, &mut one).unwrap();
        // The decode layout a loader makes where the kernels read it.
        if grouped {
            one = interleave(ty, rows, cols, &one, |_| {}).unwrap().unwrap();
        }
        let copies = (mib << 20) / bytes + 1;
        let mut all = Vec::with_capacity(copies * bytes);
        for _ in 0..copies {
            all.extend_from_slice(&one);
        }
        let mats: Vec<Matrix> = (0..copies)
            .map(|c| {
                let data = &all[c * bytes..(c + 1) * bytes];
                if grouped {
                    Matrix::interleaved(ty, rows, cols, data).unwrap()
                } else {
                    Matrix::new(ty, rows, cols, data).unwrap()
                }
            })
            .collect();
        let batch: usize = std::env::var("BATCH")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1);
        let x: Vec<f32> = (0..batch * cols).map(|i| (i % 7) as f32 - 3.0).collect();
        let mut out = vec![0f32; batch * rows];
        let mut scratch = Vec::new();
        let mut best = f64::INFINITY;
        for _ in 0..if copies == 1 { 2000 } else { 4 } {
            let t0 = Instant::now();
            for m in &mats {
                matmul(
                    &pool,
                    Product::new(&[m], &x, batch),
                    &mut [&mut out[..]],
                    &mut scratch,
                )
                .unwrap();
            }
            best = best.min(t0.elapsed().as_secs_f64());
        }
        let gbs = (copies * bytes) as f64 / best / 1e9;
        println!(
            "{:5}{} {rows}x{cols}: {gbs:5.1} GB/s ({:.0}%), {:.1} us per product",
            ty.name(),
            if grouped { " x8" } else { "" },
            100.0 * gbs * 1e9 / bw,
            best / copies as f64 * 1e6
        );
    }
}
