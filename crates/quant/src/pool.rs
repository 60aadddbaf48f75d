//! The persistent worker pool every parallel operation shares.
//!
//! A decode step makes about a hundred and fifty small parallel operations,
//! each a few tens of microseconds. Waking a sleeping thread through the OS
//! for each costs about as much as the work, so the workers spin on an epoch
//! counter between operations and park only after a spell of idleness. The
//! calling thread takes tasks too: a pool of `n` threads starts `n - 1`.
//!
//! One operation runs at a time. Tasks are claimed from a counter that
//! carries the operation's epoch in its high half, so a worker that wakes
//! late can never claim a task of a later operation with an earlier
//! operation's closure.

use std::cell::Cell;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long an idle worker spins before it parks.
const SPIN: Duration = Duration::from_micros(200);

thread_local! {
    /// Set while this thread runs a task, so a nested parallel call runs
    /// serially instead of waiting on the pool it is part of.
    static IN_TASK: Cell<bool> = const { Cell::new(false) };
}

/// The operation in flight: its closure with the lifetime erased (see
/// [`ThreadPool::run`] for why that is sound), its epoch and task count.
#[derive(Clone, Copy)]
struct Job {
    f: &'static (dyn Fn(usize) + Sync),
    epoch: u64,
    tasks: u64,
}

struct Shared {
    /// `epoch << 32 | next task to claim`.
    state: AtomicU64,
    job: Mutex<Option<Job>>,
    /// Tasks of the current operation finished.
    done: AtomicUsize,
    /// A task of the current operation panicked.
    panicked: AtomicBool,
    sleepers: AtomicUsize,
    park: Mutex<()>,
    wake: Condvar,
    shutdown: AtomicBool,
    /// Parallel operations run (those that went to the workers).
    ops: AtomicU64,
    /// Nanoseconds callers spent waiting for workers to finish an
    /// operation after running out of tasks of their own.
    caller_wait_ns: AtomicU64,
    /// Nanoseconds workers spent running tasks, all workers together.
    worker_busy_ns: AtomicU64,
}

impl Shared {
    fn epoch(&self) -> u64 {
        self.state.load(Ordering::SeqCst) >> 32
    }

    /// Claims and runs tasks of `job` until none is left.
    fn work(&self, job: Job) {
        loop {
            let st = self.state.load(Ordering::Acquire);
            let next = st & 0xffff_ffff;
            if st >> 32 != job.epoch || next >= job.tasks {
                return;
            }
            if self
                .state
                .compare_exchange_weak(st, st + 1, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
            {
                continue;
            }
            IN_TASK.with(|t| t.set(true));
            let ok =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (job.f)(next as usize)));
            IN_TASK.with(|t| t.set(false));
            if ok.is_err() {
                self.panicked.store(true, Ordering::Release);
            }
            self.done.fetch_add(1, Ordering::AcqRel);
        }
    }

    fn worker(&self) {
        let mut seen = 0u64;
        loop {
            let start = Instant::now();
            let mut spins = 0u32;
            loop {
                if self.shutdown.load(Ordering::Acquire) {
                    return;
                }
                let e = self.epoch();
                if e != seen {
                    seen = e;
                    break;
                }
                spins += 1;
                if !spins.is_multiple_of(64) || start.elapsed() < SPIN {
                    std::hint::spin_loop();
                    continue;
                }
                let mut guard = self.park.lock().unwrap_or_else(|p| p.into_inner());
                self.sleepers.fetch_add(1, Ordering::SeqCst);
                while self.epoch() == seen && !self.shutdown.load(Ordering::SeqCst) {
                    guard = self.wake.wait(guard).unwrap_or_else(|p| p.into_inner());
                }
                self.sleepers.fetch_sub(1, Ordering::SeqCst);
            }
            let job = *self.job.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(job) = job.filter(|j| j.epoch == seen) {
                let start = Instant::now();
                self.work(job);
                self.worker_busy_ns
                    .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
            }
        }
    }
}

/// Where a pool's threads spent their time: what `hearth bench` reports
/// of a step's synchronisation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Parallel operations handed to the workers.
    pub ops: u64,
    /// Time the calling thread waited at the end of operations for workers
    /// still running tasks.
    pub caller_wait: Duration,
    /// Time the workers spent running tasks, all workers together. The
    /// rest of their time they wait: for the next operation while the
    /// caller works alone, or at the end of one.
    pub worker_busy: Duration,
}

impl std::ops::Sub for PoolStats {
    type Output = PoolStats;

    /// What ran between two readings.
    fn sub(self, earlier: PoolStats) -> PoolStats {
        PoolStats {
            ops: self.ops.saturating_sub(earlier.ops),
            caller_wait: self.caller_wait.saturating_sub(earlier.caller_wait),
            worker_busy: self.worker_busy.saturating_sub(earlier.worker_busy),
        }
    }
}

/// One persistent pool of worker threads; work is split by contiguous ranges.
pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<std::thread::JoinHandle<()>>,
    /// Serializes operations from different threads.
    submit: Mutex<u64>,
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
    /// If the OS refuses to start some threads, the pool runs with those it
    /// got: slower, but correct.
    pub fn new(threads: usize) -> Self {
        let shared = Arc::new(Shared {
            state: AtomicU64::new(0),
            job: Mutex::new(None),
            done: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            park: Mutex::new(()),
            wake: Condvar::new(),
            shutdown: AtomicBool::new(false),
            ops: AtomicU64::new(0),
            caller_wait_ns: AtomicU64::new(0),
            worker_busy_ns: AtomicU64::new(0),
        });
        let workers: Vec<_> = (1..threads.max(1))
            .map_while(|i| {
                let s = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("hearth-worker-{i}"))
                    .spawn(move || s.worker())
                    .ok()
            })
            .collect();
        let threads = workers.len() + 1;
        ThreadPool {
            shared,
            workers,
            submit: Mutex::new(0),
            threads,
        }
    }

    /// Number of worker threads, the caller included.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Counters of the work so far (see [`PoolStats`]); the difference of
    /// two readings covers what ran between them.
    pub fn stats(&self) -> PoolStats {
        let sh = &*self.shared;
        PoolStats {
            ops: sh.ops.load(Ordering::Relaxed),
            caller_wait: Duration::from_nanos(sh.caller_wait_ns.load(Ordering::Relaxed)),
            worker_busy: Duration::from_nanos(sh.worker_busy_ns.load(Ordering::Relaxed)),
        }
    }

    /// Runs `f`. Kept for callers written against a pool that had to be
    /// entered first; the caller takes part in every operation now.
    pub fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        f()
    }

    /// Runs `f(i)` for every `i` in `0..tasks`, in parallel, and returns when all are done.
    ///
    /// # Panics
    /// When a task panics (after every task has finished).
    pub fn run<F>(&self, tasks: usize, f: F)
    where
        F: Fn(usize) + Sync + Send,
    {
        if tasks <= 1
            || self.workers.is_empty()
            || IN_TASK.with(|t| t.get())
            || tasks > u32::MAX as usize
        {
            (0..tasks).for_each(f);
            return;
        }
        let mut epoch = self.submit.lock().unwrap_or_else(|p| p.into_inner());
        *epoch += 1;
        let sh = &*self.shared;
        let dyn_f: &(dyn Fn(usize) + Sync) = &f;
        // SAFETY: the erased reference is only called through claims of this
        // epoch (see `Shared::work`), and this function does not return
        // before every claimed task has finished (`done == tasks`) and the
        // job slot is cleared, so no call outlives `f`.
        let f_static: &'static (dyn Fn(usize) + Sync) = unsafe { std::mem::transmute(dyn_f) };
        let job = Job {
            f: f_static,
            epoch: *epoch,
            tasks: tasks as u64,
        };
        *sh.job.lock().unwrap_or_else(|p| p.into_inner()) = Some(job);
        sh.done.store(0, Ordering::SeqCst);
        sh.panicked.store(false, Ordering::SeqCst);
        sh.state.store(*epoch << 32, Ordering::SeqCst);
        if sh.sleepers.load(Ordering::SeqCst) > 0 {
            let _guard = sh.park.lock().unwrap_or_else(|p| p.into_inner());
            sh.wake.notify_all();
        }
        sh.work(job);
        let waiting = Instant::now();
        let mut spins = 0u32;
        while sh.done.load(Ordering::Acquire) < tasks {
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(1024) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        sh.caller_wait_ns
            .fetch_add(waiting.elapsed().as_nanos() as u64, Ordering::Relaxed);
        sh.ops.fetch_add(1, Ordering::Relaxed);
        *sh.job.lock().unwrap_or_else(|p| p.into_inner()) = None;
        if sh.panicked.load(Ordering::Acquire) {
            panic!("a parallel task panicked");
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
        if data.len() <= chunk_len || self.workers.is_empty() {
            data.chunks_mut(chunk_len)
                .enumerate()
                .for_each(|(i, c)| f(i, c));
            return;
        }
        // Each task takes its own chunk out of its own (never contended) slot.
        let chunks: Vec<Mutex<&mut [T]>> = data.chunks_mut(chunk_len).map(Mutex::new).collect();
        self.run(chunks.len(), |i| {
            let mut c = chunks[i].lock().unwrap_or_else(|p| p.into_inner());
            f(i, &mut c)
        });
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        {
            let _guard = self.shared.park.lock().unwrap_or_else(|p| p.into_inner());
            self.shared.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
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

/// The first error the workers of a parallel loop report (the pool's tasks
/// cannot return one).
pub struct FirstError<E>(Mutex<Option<E>>);

impl<E> FirstError<E> {
    /// No error yet.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        Self(Mutex::new(None))
    }

    /// Record `e` (a later one replaces it; any will do).
    pub fn set(&self, e: E) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
    }

    /// `Err` with the recorded error, if any.
    pub fn into_result(self) -> Result<(), E> {
        match self.0.into_inner().unwrap_or_else(|p| p.into_inner()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
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

    /// Many small operations back to back (the decode pattern), with idle
    /// gaps long enough for the workers to park, and nested calls.
    #[test]
    fn pool_survives_parking_and_nesting() {
        let pool = ThreadPool::new(3);
        let total = AtomicUsize::new(0);
        for round in 0..2000 {
            if round % 500 == 0 {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            pool.run(4, |i| {
                total.fetch_add(i + 1, Ordering::Relaxed);
                // A nested operation runs serially on this thread.
                pool.run(2, |j| {
                    total.fetch_add(j, Ordering::Relaxed);
                });
            });
        }
        assert_eq!(total.load(Ordering::Relaxed), 2000 * (10 + 4));
    }

    /// Operations from several threads at once are serialized, not mixed.
    #[test]
    fn pool_serves_concurrent_callers() {
        let pool = ThreadPool::new(2);
        let total = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    for _ in 0..300 {
                        pool.for_each_chunk(10, |r| {
                            total.fetch_add(r.len(), Ordering::Relaxed);
                        });
                    }
                });
            }
        });
        assert_eq!(total.load(Ordering::Relaxed), 3 * 300 * 10);
    }

    /// A panicking task surfaces as a panic of the caller, and the pool
    /// keeps working afterwards.
    #[test]
    fn pool_reports_a_panicking_task() {
        let pool = ThreadPool::new(2);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.run(8, |i| assert!(i != 5, "task 5 fails"));
        }));
        assert!(r.is_err());
        let n = AtomicUsize::new(0);
        pool.run(8, |_| {
            n.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(n.load(Ordering::Relaxed), 8);
    }
}
