//! How fast this machine streams memory into the cores: the ceiling for a
//! decode step, which reads every weight once.

use crate::pool::{split_range, ThreadPool};
use std::time::Instant;

/// Bytes per sample: far past any last-level cache (servers have 300 MiB
/// of L3 now), so the reads come from memory.
const PROBE_BYTES: usize = 1 << 30;

/// The best of `reps` timed passes (after one untimed) in which `pool`'s
/// threads each sum their share of a 1 GiB buffer, in bytes per second. A
/// pass reads as a decode step does: every thread its own contiguous run,
/// once. The threads write their own runs first, so on a machine of
/// several memory nodes each reads from its own.
pub fn read_bandwidth(pool: &ThreadPool, reps: usize) -> f64 {
    let words = PROBE_BYTES / 8;
    let parts = pool.threads();
    let mut buf = vec![0u64; words];
    let per = words.div_ceil(parts);
    pool.for_each_chunk_mut(&mut buf, per, |i, run| {
        for (j, w) in run.iter_mut().enumerate() {
            *w = (i * per + j) as u64;
        }
    });
    let mut best = f64::INFINITY;
    for _ in 0..reps.max(1) + 1 {
        let sums: Vec<std::sync::atomic::AtomicU64> =
            (0..parts).map(|_| Default::default()).collect();
        let t0 = Instant::now();
        pool.run(parts, |t| {
            let mine = &buf[split_range(words, parts, t)];
            // Eight independent lanes keep several loads in flight and let
            // the compiler use vector adds.
            let mut acc = [0u64; 8];
            for chunk in mine.chunks_exact(8) {
                for (a, &v) in acc.iter_mut().zip(chunk) {
                    *a = a.wrapping_add(v);
                }
            }
            let s = acc.iter().fold(0u64, |s, &v| s.wrapping_add(v));
            sums[t].store(s, std::sync::atomic::Ordering::Relaxed);
        });
        best = best.min(t0.elapsed().as_secs_f64());
        std::hint::black_box(&sums);
    }
    PROBE_BYTES as f64 / best
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The probe reports a plausible rate: above 100 MB/s (any machine
    /// that runs the tests) and below 10 TB/s (no machine reads that fast),
    /// so a loop the compiler dropped would be caught.
    #[test]
    fn bandwidth_is_plausible() {
        let pool = ThreadPool::new(1);
        let bw = read_bandwidth(&pool, 1);
        assert!((1e8..1e13).contains(&bw), "{bw} B/s");
    }
}
