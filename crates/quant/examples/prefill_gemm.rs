//! Prefill products at a model's shapes: multiply-adds a second of one
//! batched product per weight type, as a prompt's prefill runs them
//! (weights in memory, a batch of activation rows, the kernel set of
//! `HEARTH_CPU`).
//!
//! `cargo run --release -p hearth-quant --example prefill_gemm -- [threads] [batch] [rows] [cols] [type]`
//! (defaults: 1 thread, 512 rows of activations, a Gemma 3 4B FFN's
//! 10240 × 2560, and Q4_K, Q6_K, Q5_0 and Q8_0 in turn; a type name such
//! as `q4_k` runs that one alone).

use hearth_quant::{matmul, quantize, GgmlType, Matrix, Product};
use std::time::Instant;
use threads::ThreadPool;

fn main() {
    let arg = |i: usize, d: usize| -> usize {
        std::env::args()
            .nth(i)
            .and_then(|s| s.parse().ok())
            .unwrap_or(d)
    };
    let (threads, batch, rows, cols) = (arg(1, 1), arg(2, 512), arg(3, 10240), arg(4, 2560));
    let pool = ThreadPool::new(threads);
    println!("threads {threads}, batch {batch}, {rows} x {cols}");
    let x: Vec<f32> = (0..batch * cols)
        .map(|i| ((i * 40503) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    let src: Vec<f32> = (0..rows * cols)
        .map(|i| ((i * 2654435761) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    let only = std::env::args().nth(5);
    for ty in [
        GgmlType::Q4_K,
        GgmlType::Q6_K,
        GgmlType::Q5_0,
        GgmlType::Q8_0,
    ]
    .into_iter()
    .filter(|t| {
        only.as_deref()
            .is_none_or(|o| o.eq_ignore_ascii_case(t.name()))
    }) {
        let bytes = ty.row_bytes(cols as u64).unwrap() as usize * rows;
        let mut w = vec![0u8; bytes];
        quantize(ty, &src, &mut w).unwrap();
        let m = Matrix::new(ty, rows, cols, &w).unwrap();
        let mut out = vec![0f32; rows * batch];
        let mut scratch = Vec::new();
        matmul(
            &pool,
            Product::new(&[&m], &x, batch),
            &mut [&mut out[..]],
            &mut scratch,
        )
        .unwrap();
        let mut best = f64::MAX;
        for _ in 0..5 {
            let t = Instant::now();
            matmul(
                &pool,
                Product::new(&[&m], &x, batch),
                &mut [&mut out[..]],
                &mut scratch,
            )
            .unwrap();
            best = best.min(t.elapsed().as_secs_f64());
        }
        let macs = (rows * cols * batch) as f64;
        println!(
            "{:>5}: {:6.1} G multiply-adds/s (best of 5)",
            ty.name(),
            macs / best / 1e9
        );
    }
}
