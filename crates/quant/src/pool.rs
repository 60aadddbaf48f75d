//! The persistent worker pool every parallel operation shares.
//!
//! A thin wrapper over a dedicated `rayon` pool, kept behind our own type so it can
//! later become a spin-then-park pool without touching callers.

use std::ops::Range;

use rayon::prelude::*;

/// One persistent pool of worker threads; work is split by contiguous ranges.
pub struct ThreadPool {
    inner: Option<rayon::ThreadPool>,
    threads: usize,
}

impl std::fmt::Debug for ThreadPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadPool")
            .field("threads", &self.threads)
            .finish()
    }
}

impl ThreadPool {
    /// A pool of `threads` workers (at least 1; with 1, work runs on the caller).
    ///
    /// If the OS refuses to start the threads, the pool degrades to running on the
    /// caller rather than failing: slower, but correct.
    pub fn new(threads: usize) -> Self {
        let threads = threads.max(1);
        let inner = if threads > 1 {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .thread_name(|i| format!("hearth-worker-{i}"))
                .build()
                .ok()
        } else {
            None
        };
        let threads = if inner.is_some() { threads } else { 1 };
        ThreadPool { inner, threads }
    }

    /// Number of worker threads.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Runs `f` on one of the pool's own threads. Parallel operations inside
    /// it are then forked from within the pool instead of being handed over
    /// from outside and waited for with a sleep, which is most of the cost of a
    /// small operation (a decode step makes about a hundred and fifty).
    pub fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        match &self.inner {
            Some(pool) => pool.install(f),
            _ => f(),
        }
    }

    /// Runs `f(i)` for every `i` in `0..tasks`, in parallel, and returns when all are done.
    pub fn run<F>(&self, tasks: usize, f: F)
    where
        F: Fn(usize) + Sync + Send,
    {
        match &self.inner {
            Some(pool) if tasks > 1 => pool.install(|| (0..tasks).into_par_iter().for_each(&f)),
            _ => (0..tasks).for_each(f),
        }
    }

    /// Splits `0..n` into at most [`threads`](Self::threads) near-equal contiguous
    /// ranges and runs `f(range)` on each in parallel.
    pub fn for_each_chunk<F>(&self, n: usize, f: F)
    where
        F: Fn(Range<usize>) + Sync + Send,
    {
        let parts = self.threads.min(n);
        self.run(parts, |t| f(split_range(n, parts, t)));
    }

    /// Splits `data` into chunks of `chunk_len` (the last may be shorter) and runs
    /// `f(chunk_index, chunk)` on each in parallel.
    pub fn for_each_chunk_mut<T, F>(&self, data: &mut [T], chunk_len: usize, f: F)
    where
        T: Send,
        F: Fn(usize, &mut [T]) + Sync + Send,
    {
        let chunk_len = chunk_len.max(1);
        match &self.inner {
            Some(pool) if data.len() > chunk_len => pool.install(|| {
                data.par_chunks_mut(chunk_len)
                    .enumerate()
                    .for_each(|(i, c)| f(i, c))
            }),
            _ => data
                .chunks_mut(chunk_len)
                .enumerate()
                .for_each(|(i, c)| f(i, c)),
        }
    }
}

/// Part `t` of `parts` near-equal contiguous parts of `0..n`.
pub(crate) fn split_range(n: usize, parts: usize, t: usize) -> Range<usize> {
    let parts = parts.max(1);
    let (q, r) = (n / parts, n % parts);
    let start = t * q + t.min(r);
    start..start + q + usize::from(t < r)
}

/// Physical core count (logical count where that is unknown), the default thread count.
pub fn default_threads() -> usize {
    let logical = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    physical_cores().map_or(logical, |p| p.clamp(1, logical))
}

/// Distinct (package, core) pairs in /proc/cpuinfo; `None` off Linux or when absent.
fn physical_cores() -> Option<usize> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let mut cores = std::collections::HashSet::new();
    let mut package = None;
    for line in info.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        match key.trim() {
            "physical id" => package = value.trim().parse::<u32>().ok(),
            "core id" => {
                cores.insert((package, value.trim().parse::<u32>().ok()?));
            }
            _ => {}
        }
    }
    (!cores.is_empty()).then_some(cores.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn split_covers_everything_once() {
        for n in 0..40 {
            for parts in 1..9 {
                let mut next = 0;
                for t in 0..parts {
                    let r = split_range(n, parts, t);
                    assert_eq!(r.start, next);
                    next = r.end;
                }
                assert_eq!(next, n);
            }
        }
    }

    #[test]
    fn pool_runs_every_task() {
        for threads in [1, 2, 3] {
            let pool = ThreadPool::new(threads);
            let sum = AtomicUsize::new(0);
            pool.for_each_chunk(1000, |r| {
                sum.fetch_add(r.sum::<usize>(), Ordering::Relaxed);
            });
            assert_eq!(sum.load(Ordering::Relaxed), 999 * 1000 / 2);
            let mut v = vec![0usize; 103];
            pool.for_each_chunk_mut(&mut v, 10, |i, c| c.iter_mut().for_each(|x| *x = i));
            assert!(v.iter().enumerate().all(|(j, &x)| x == j / 10));
        }
        assert!(default_threads() >= 1);
    }
}
