use std::time::Instant;
fn main() {
    let cases = [(64usize, 4304usize, 1152usize, 4304usize), (64, 1152, 4304, 1152), (64, 1152, 1152, 1152), (64, 4096, 72, 4096), (64, 72, 4096, 1152)];
    for (m, n, k, ldb) in cases {
        let a = vec![0.5f32; m * k];
        let b = vec![0.25f32; k * ldb];
        let mut c = vec![0.0f32; m * n];
        let reps = 20;
        let t = Instant::now();
        for _ in 0..reps {
            hearth_quant::vector::sgemm(m, n, k, &a, k, &b, ldb, &mut c, n).unwrap();
        }
        let s = t.elapsed().as_secs_f64() / reps as f64;
        println!("m{m} n{n} k{k} ldb{ldb}: {:.2} ms, {:.1} GFLOPS", s * 1e3, 2.0 * (m * n * k) as f64 / s / 1e9);
        let mut pb = hearth_quant::vector::PackedB::new();
        pb.pack(k, n, &b, ldb).unwrap();
        let t = Instant::now();
        for _ in 0..reps {
            hearth_quant::vector::sgemm_packed(m, &a, k, &pb, &mut c, n).unwrap();
        }
        let s = t.elapsed().as_secs_f64() / reps as f64;
        println!("   packed: {:.2} ms, {:.1} GFLOPS", s * 1e3, 2.0 * (m * n * k) as f64 / s / 1e9);
    }
}
#[allow(dead_code)]
fn packed() {}
