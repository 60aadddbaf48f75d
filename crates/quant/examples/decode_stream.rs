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

/// The measured shapes: weight type, rows, columns, and whether the rows
/// are interleaved by eight (the decode layout a loader makes).
const SHAPES: [(GgmlType, usize, usize, bool); 12] = [
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
];

fn main() {
    let mut args = std::env::args().skip(1);
    let threads: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(1);
    let mib: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(768);
    let pool = ThreadPool::new(threads);
    let bw = read_bandwidth(&pool, 3);
    println!("threads {threads}, read bandwidth {:.1} GB/s", bw / 1e9);
    for (ty, rows, cols, grouped) in SHAPES {
        if !selected(ty) {
            continue;
        }
        // ROWS=n shrinks the matrices to n rows (weights in L2: the
        // kernels' own rate).
        let rows = env_number("ROWS").unwrap_or(rows);
        let weights = Weights::new(ty, rows, cols, grouped, mib);
        let mats = weights.matrices();
        let batch = env_number("BATCH").unwrap_or(1);
        let best = best_pass_seconds(&pool, &mats, batch);
        let gbs = (weights.copies * weights.bytes) as f64 / best / 1e9;
        println!(
            "{:5}{} {rows}x{cols}: {gbs:5.1} GB/s ({:.0}%), {:.1} us per product",
            ty.name(),
            if grouped { " x8" } else { "" },
            100.0 * gbs * 1e9 / bw,
            best / weights.copies as f64 * 1e6
        );
    }
}

/// Whether `TYPES` (say `BF16,Q8_0`) lets `ty` run; all run without it.
fn selected(ty: GgmlType) -> bool {
    std::env::var("TYPES").map_or(true, |only| {
        only.split(',').any(|t| t.eq_ignore_ascii_case(ty.name()))
    })
}

/// The environment variable `name` read as a number, if it is set and one.
fn env_number(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}

/// One quantized matrix copied end to end until the copies fill `mib` MiB,
/// so that a pass over them all reads from memory rather than the caches.
struct Weights {
    ty: GgmlType,
    rows: usize,
    cols: usize,
    grouped: bool,
    /// Bytes of one copy.
    bytes: usize,
    copies: usize,
    all: Vec<u8>,
}

impl Weights {
    fn new(ty: GgmlType, rows: usize, cols: usize, grouped: bool, mib: usize) -> Self {
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
        Self {
            ty,
            rows,
            cols,
            grouped,
            bytes,
            copies,
            all,
        }
    }

    /// Every copy as a matrix the kernels take.
    fn matrices(&self) -> Vec<Matrix<'_>> {
        (0..self.copies)
            .map(|c| {
                let data = &self.all[c * self.bytes..(c + 1) * self.bytes];
                if self.grouped {
                    Matrix::interleaved(self.ty, self.rows, self.cols, data).unwrap()
                } else {
                    Matrix::new(self.ty, self.rows, self.cols, data).unwrap()
                }
            })
            .collect()
    }
}

/// The fastest of several passes multiplying `batch` activation rows by
/// every matrix in turn, in seconds; a single matrix (in the caches) gets
/// many more passes so that its short time settles.
fn best_pass_seconds(pool: &ThreadPool, mats: &[Matrix], batch: usize) -> f64 {
    let (rows, cols) = (mats[0].rows(), mats[0].cols());
    let x: Vec<f32> = (0..batch * cols).map(|i| (i % 7) as f32 - 3.0).collect();
    let mut out = vec![0f32; batch * rows];
    let mut scratch = Vec::new();
    let mut best = f64::INFINITY;
    for _ in 0..if mats.len() == 1 { 2000 } else { 4 } {
        let t0 = Instant::now();
        for m in mats {
            matmul(
                pool,
                Product::new(&[m], &x, batch),
                &mut [&mut out[..]],
                &mut scratch,
            )
            .unwrap();
        }
        best = best.min(t0.elapsed().as_secs_f64());
    }
    best
}
