//! How close one matrix-vector product over a real model's largest tensor gets
//! to the memory bandwidth: `cargo run --release -p hearth-quant --example
//! head_bandwidth -- MODEL.gguf [TENSOR] [THREADS] [BATCH]`.

use gguf::GgufFile;
use hearth_quant::{matmul, Matrix, ThreadPool};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .get(1)
        .expect("usage: head_bandwidth MODEL.gguf [TENSOR] [THREADS]");
    let name = args.get(2).map_or("token_embd.weight", String::as_str);
    let threads: usize = args.get(3).and_then(|t| t.parse().ok()).unwrap_or(2);
    let batch: usize = args.get(4).and_then(|t| t.parse().ok()).unwrap_or(1);
    let file = GgufFile::open(path).expect("cannot open model");
    let info = file.tensor(name).expect("no such tensor").clone();
    let (cols, rows) = (info.dims[0] as usize, info.n_rows() as usize);
    let data = file.tensor_data(&info);
    let m = Matrix::new(info.ty, rows, cols, data).expect("bad matrix");
    let pool = ThreadPool::new(threads);
    let x: Vec<f32> = (0..cols * batch)
        .map(|i| ((i * 7919) % 113) as f32 / 50.0 - 1.0)
        .collect();
    let mut out = vec![0.0f32; rows * batch];
    let mut scratch = Vec::new();
    let reps = 20;
    matmul(&pool, &m, &x, batch, &mut out, &mut scratch).expect("shapes match");
    let t = Instant::now();
    for _ in 0..reps {
        matmul(&pool, &m, &x, batch, &mut out, &mut scratch).expect("shapes match");
    }
    let s = t.elapsed().as_secs_f64() / reps as f64;
    println!(
        "{name} {} {rows}x{cols} batch {batch}: {:.2} ms per product, {:.1} GB/s, {:.1} GMAC/s ({threads} threads)",
        info.ty,
        s * 1e3,
        data.len() as f64 / s / 1e9,
        (rows * cols * batch) as f64 / s / 1e9
    );
    // Plain read of the same bytes, split the same way, as the bandwidth bar.
    let sum = std::sync::atomic::AtomicU64::new(0);
    let t = Instant::now();
    for _ in 0..reps {
        pool.for_each_chunk(data.len() / 64, |r| {
            let mut acc = 0u64;
            for c in data[r.start * 64..r.end * 64].chunks_exact(64) {
                acc = acc.wrapping_add(u64::from_le_bytes(c[..8].try_into().unwrap_or_default()));
                acc =
                    acc.wrapping_add(u64::from_le_bytes(c[32..40].try_into().unwrap_or_default()));
            }
            sum.fetch_add(acc, std::sync::atomic::Ordering::Relaxed);
        });
    }
    let s = t.elapsed().as_secs_f64() / reps as f64;
    println!(
        "plain read of the same bytes: {:.2} ms, {:.1} GB/s (checksum {})",
        s * 1e3,
        data.len() as f64 / s / 1e9,
        sum.into_inner() % 10
    );
}
