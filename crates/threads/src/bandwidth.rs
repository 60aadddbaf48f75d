//! How fast this machine streams memory into the cores: the ceiling for a
//! decode step, which reads every weight once.

use crate::{split_range, ThreadPool};
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
            let s = sum_streaming(&buf[split_range(words, parts, t)]);
            sums[t].store(s, std::sync::atomic::Ordering::Relaxed);
        });
        best = best.min(t0.elapsed().as_secs_f64());
        std::hint::black_box(&sums);
    }
    PROBE_BYTES as f64 / best
}

/// How far ahead of the sum the probe asks for lines: the decode kernels
/// prefetch their weights too, and a core streams faster when it does (one
/// Xeon core, 1 GiB: 11.5 GB/s without, 14.0 at 2 KiB, 14.3 at 4 KiB).
const PREFETCH_AHEAD: usize = 4096;

/// The wrapping sum of `words`, read front to back as a decode kernel reads
/// its weights: sixteen independent lanes (vector adds, several loads in
/// flight) and a software prefetch a little ahead of them.
fn sum_streaming(words: &[u64]) -> u64 {
    let mut acc = [0u64; 16];
    let base = words.as_ptr() as *const u8;
    for (i, chunk) in words.chunks_exact(16).enumerate() {
        prefetch(base.wrapping_add(i * 128 + PREFETCH_AHEAD));
        prefetch(base.wrapping_add(i * 128 + PREFETCH_AHEAD + 64));
        for (a, &v) in acc.iter_mut().zip(chunk) {
            *a = a.wrapping_add(v);
        }
    }
    let tail = words.chunks_exact(16).remainder();
    tail.iter()
        .chain(&acc)
        .fold(0u64, |s, &v| s.wrapping_add(v))
}

/// Asks for the cache line at `p` (a hint: nothing where there is no such
/// instruction).
#[inline(always)]
fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint and never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch(p as *const i8, std::arch::x86_64::_MM_HINT_T0)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The streaming sum is the plain sum, tails included.
    #[test]
    fn streaming_sum_is_the_sum() {
        for n in [0usize, 1, 15, 16, 17, 1000] {
            let w: Vec<u64> = (0..n as u64)
                .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
                .collect();
            let want = w.iter().fold(0u64, |s, &v| s.wrapping_add(v));
            assert_eq!(sum_streaming(&w), want, "{n} words");
        }
    }

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
