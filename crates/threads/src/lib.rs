//! The persistent worker pool every parallel operation shares, and the
//! memory-bandwidth probe ([`read_bandwidth`]) that measures what its
//! threads can stream.
//!
//! A decode step makes about a hundred and fifty small parallel operations,
//! each a few tens of microseconds. Waking a sleeping thread through the OS
//! for each costs about as much as the work, so the workers spin on an epoch
//! counter between operations and park only after a spell of idleness. The
//! calling thread takes tasks too: a pool of `n` threads starts `n - 1`.
//!
//! One operation runs at a time. A task is claimed by one `fetch_add` on a
//! counter that carries the operation's epoch in its high half, and the
//! operation's closure and task count are read only after a claim: a claim
//! of a task that exists keeps its operation alive until the task is done,
//! so what is read belongs to the claimed operation, and a worker that
//! wakes late claims nothing of an operation it did not see. No lock is
//! taken on the way to a task, so sixteen threads meeting at the start of
//! an operation pass one cache line around once each instead of queueing
//! on a mutex.

mod bandwidth;

pub use bandwidth::read_bandwidth;

use std::cell::Cell;
use std::collections::HashMap;
use std::ops::Range;
use std::panic::Location;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long an idle worker spins before it parks.
const SPIN: Duration = Duration::from_micros(200);

/// The most tasks one operation may have: claims past the last task (one
/// or two per thread per operation) must never carry into the epoch half
/// of the claim counter.
const MAX_TASKS: usize = (u32::MAX / 2) as usize;

thread_local! {
    /// Set while this thread runs a task, so a nested parallel call runs
    /// serially instead of waiting on the pool it is part of.
    static IN_TASK: Cell<bool> = const { Cell::new(false) };
}

/// A value alone on its cache line (two lines, for the adjacent-line
/// prefetcher), so threads spinning on one counter do not slow the
/// writes to another.
#[repr(align(128))]
struct Line<T>(T);

impl<T> std::ops::Deref for Line<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// The closure of the operation in flight, as the caller holds it.
type TaskFn<'a> = &'a (dyn Fn(usize) + Sync);

struct Shared {
    /// `epoch << 32 | next task to claim`.
    state: Line<AtomicU64>,
    /// `epoch << 32 | task count` of the operation in flight.
    job: Line<AtomicU64>,
    /// Points at the caller's [`TaskFn`] of the operation in flight.
    func: AtomicPtr<TaskFn<'static>>,
    /// Tasks of the current operation finished.
    done: Line<AtomicUsize>,
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
    /// Set while operations are profiled by call site (`hearth bench --profile`).
    profiling: AtomicBool,
    /// When the pool started: the clock `published_ns` counts from.
    born: Instant,
    /// When the operation in flight was handed out, in ns since `born`
    /// (profiling only).
    published_ns: AtomicU64,
    /// Delays from handing out to each worker's first claim, and their
    /// count, for the operation in flight (profiling only).
    wake_ns: AtomicU64,
    wakes: AtomicU64,
    sites: Mutex<HashMap<&'static Location<'static>, SiteProfile>>,
    /// When the last profiled operation ended, in ns since `born`.
    last_end_ns: AtomicU64,
}

impl Shared {
    fn epoch(&self) -> u64 {
        self.state.load(Ordering::Acquire) >> 32
    }

    /// Claims and runs tasks until none is left in the operation its last
    /// claim counted against.
    fn work(&self, worker: bool) {
        let mut first = worker && self.profiling.load(Ordering::Relaxed);
        loop {
            let st = self.state.fetch_add(1, Ordering::AcqRel);
            let (epoch, task) = (st >> 32, st & 0xffff_ffff);
            let job = self.job.load(Ordering::Acquire);
            // A claim past the last task, or against an operation that has
            // since finished (only possible past its last task), is void.
            if job >> 32 != epoch || task >= job & 0xffff_ffff {
                return;
            }
            if first {
                first = false;
                let at = self.born.elapsed().as_nanos() as u64;
                let delay = at.saturating_sub(self.published_ns.load(Ordering::Relaxed));
                self.wake_ns.fetch_add(delay, Ordering::Relaxed);
                self.wakes.fetch_add(1, Ordering::Relaxed);
            }
            // SAFETY: `func` was stored before the operation was published
            // and points at the caller's closure, which `ThreadPool::run`
            // keeps alive until every task of the operation has finished;
            // this claim is of a task of that operation, not yet finished.
            let f: TaskFn<'static> = unsafe { *self.func.load(Ordering::Acquire) };
            IN_TASK.with(|t| t.set(true));
            let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(task as usize)));
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
            let start = Instant::now();
            self.work(true);
            self.worker_busy_ns
                .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
    }
}

/// What the operations started from one place in the code cost, summed
/// (see [`ThreadPool::set_profiling`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SiteProfile {
    /// Operations started there.
    pub ops: u64,
    /// Tasks they had, all together.
    pub tasks: u64,
    /// From handing each out to its last task finishing.
    pub wall: Duration,
    /// Of that, the calling thread waiting for workers after its own tasks.
    pub caller_wait: Duration,
    /// From handing out to a worker's first claim, summed over the workers
    /// that claimed a task.
    pub wake: Duration,
    /// Workers that claimed a task, summed over the operations.
    pub wakes: u64,
    /// The calling thread's time between the end of the pool's previous
    /// operation and the start of these: serial work done just before them.
    pub gap_before: Duration,
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
            state: Line(AtomicU64::new(0)),
            job: Line(AtomicU64::new(0)),
            func: AtomicPtr::new(std::ptr::null_mut()),
            done: Line(AtomicUsize::new(0)),
            panicked: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            park: Mutex::new(()),
            wake: Condvar::new(),
            shutdown: AtomicBool::new(false),
            ops: AtomicU64::new(0),
            caller_wait_ns: AtomicU64::new(0),
            worker_busy_ns: AtomicU64::new(0),
            profiling: AtomicBool::new(false),
            born: Instant::now(),
            published_ns: AtomicU64::new(0),
            wake_ns: AtomicU64::new(0),
            wakes: AtomicU64::new(0),
            sites: Mutex::new(HashMap::new()),
            last_end_ns: AtomicU64::new(0),
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

    /// Turns profiling by call site on or off (off by default). While it is
    /// on, every operation's wall time, the caller's wait and the workers'
    /// wake-up delays are summed by the place in the code that started it
    /// (through `#[track_caller]`, so the place is the caller's caller where
    /// the pool's own helpers and the products pass it on); read them with
    /// [`profile`](Self::profile). It costs a clock reading per claim.
    pub fn set_profiling(&self, on: bool) {
        self.shared.last_end_ns.store(0, Ordering::Relaxed);
        self.shared.profiling.store(on, Ordering::Relaxed);
    }

    /// The profile gathered so far (see [`set_profiling`](Self::set_profiling)),
    /// by call site (`file:line`), most wall time first; reading it clears it.
    pub fn profile(&self) -> Vec<(String, SiteProfile)> {
        let mut sites = self.shared.sites.lock().unwrap_or_else(|p| p.into_inner());
        let mut all: Vec<_> = sites
            .drain()
            .map(|(at, p)| (format!("{}:{}", at.file(), at.line()), p))
            .collect();
        all.sort_by_key(|s| std::cmp::Reverse(s.1.wall));
        all
    }

    /// Runs `f(i)` for every `i` in `0..tasks`, in parallel, and returns when all are done.
    ///
    /// # Panics
    /// When a task panics (after every task has finished).
    #[track_caller]
    pub fn run<F>(&self, tasks: usize, f: F)
    where
        F: Fn(usize) + Sync + Send,
    {
        if tasks <= 1 || self.workers.is_empty() || IN_TASK.with(|t| t.get()) || tasks > MAX_TASKS {
            (0..tasks).for_each(f);
            return;
        }
        let site = Location::caller();
        let mut epoch = self.submit.lock().unwrap_or_else(|p| p.into_inner());
        *epoch += 1;
        let sh = &*self.shared;
        let profiling = sh.profiling.load(Ordering::Relaxed);
        let published = Instant::now();
        let dyn_f: TaskFn<'_> = &f;
        // SAFETY: the erased reference is only called through claims of
        // tasks of this operation (see `Shared::work`), and this function
        // does not return before every task has finished (`done == tasks`),
        // so no call outlives `f`, nor `dyn_f` that `func` points at.
        let f_static: TaskFn<'static> = unsafe { std::mem::transmute(dyn_f) };
        sh.func.store(
            &f_static as *const TaskFn<'static> as *mut _,
            Ordering::Relaxed,
        );
        sh.done.store(0, Ordering::Relaxed);
        sh.panicked.store(false, Ordering::Relaxed);
        if profiling {
            sh.published_ns
                .store(sh.born.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
        sh.job.store(*epoch << 32 | tasks as u64, Ordering::Release);
        // Publishing: a claim that reads this epoch sees everything above.
        sh.state.store(*epoch << 32, Ordering::Release);
        if sh.sleepers.load(Ordering::SeqCst) > 0 {
            let _guard = sh.park.lock().unwrap_or_else(|p| p.into_inner());
            sh.wake.notify_all();
        }
        sh.work(false);
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
        let finished = Instant::now();
        let waited = finished - waiting;
        sh.caller_wait_ns
            .fetch_add(waited.as_nanos() as u64, Ordering::Relaxed);
        sh.ops.fetch_add(1, Ordering::Relaxed);
        if profiling {
            let start_ns = published.duration_since(sh.born).as_nanos() as u64;
            let last = sh.last_end_ns.swap(
                finished.duration_since(sh.born).as_nanos() as u64,
                Ordering::Relaxed,
            );
            let mut sites = sh.sites.lock().unwrap_or_else(|p| p.into_inner());
            let p = sites.entry(site).or_default();
            // The first operation after profiling starts has no previous one.
            if last > 0 {
                p.gap_before += Duration::from_nanos(start_ns.saturating_sub(last));
            }
            p.ops += 1;
            p.tasks += tasks as u64;
            p.wall += finished - published;
            p.caller_wait += waited;
            p.wake += Duration::from_nanos(sh.wake_ns.swap(0, Ordering::Relaxed));
            p.wakes += sh.wakes.swap(0, Ordering::Relaxed);
        }
        if sh.panicked.load(Ordering::Acquire) {
            panic!("a parallel task panicked");
        }
    }

    /// Splits `0..n` into at most [`threads`](Self::threads) near-equal contiguous
    /// ranges and runs `f(range)` on each in parallel.
    #[track_caller]
    pub fn for_each_chunk<F>(&self, n: usize, f: F)
    where
        F: Fn(Range<usize>) + Sync + Send,
    {
        let parts = self.threads.min(n);
        self.run(parts, |t| f(split_range(n, parts, t)));
    }

    /// Splits `data` into chunks of `chunk_len` (the last may be shorter) and runs
    /// `f(chunk_index, chunk)` on each in parallel.
    #[track_caller]
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
    let (physical, logical) = core_counts();
    physical.map_or(logical, |p| p.clamp(1, logical))
}

/// The physical cores (`None` where /proc/cpuinfo does not say) and the
/// logical CPUs this process may run on. Two logical CPUs a core share one
/// core's vector units, so a compute-bound prefill gains little from the
/// second: `hearth bench` prints both.
pub fn core_counts() -> (Option<usize>, usize) {
    let logical = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    (physical_cores(), logical)
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
        let (physical, logical) = core_counts();
        assert!(logical >= 1 && physical.is_none_or(|p| p >= 1));
        assert!(default_threads() <= logical);
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

    /// Many threads (more than this machine has cores, so workers are
    /// preempted mid-claim) over many operations of varying size: every
    /// task of every operation runs exactly once, with its own closure.
    #[test]
    fn every_task_runs_once_with_many_threads() {
        let pool = ThreadPool::new(12);
        for op in 0..3000usize {
            let tasks = 1 + op % 37;
            let hits: Vec<AtomicUsize> = (0..tasks).map(|_| AtomicUsize::new(0)).collect();
            pool.run(tasks, |i| {
                hits[i].fetch_add(op + 1, Ordering::Relaxed);
            });
            for (i, h) in hits.iter().enumerate() {
                assert_eq!(h.load(Ordering::Relaxed), op + 1, "op {op} task {i}");
            }
        }
    }

    /// Profiling by call site counts each operation once, at the line
    /// that started it.
    #[test]
    fn profile_names_the_call_site() {
        let pool = ThreadPool::new(3);
        pool.set_profiling(true);
        for _ in 0..10 {
            pool.run(6, |_| std::hint::black_box(()));
        }
        let line = line!() - 2;
        pool.set_profiling(false);
        pool.run(6, |_| ());
        let profile = pool.profile();
        assert_eq!(profile.len(), 1);
        let (site, p) = &profile[0];
        assert!(site.ends_with(&format!("lib.rs:{line}")), "{site}");
        assert_eq!((p.ops, p.tasks), (10, 60));
        assert!(p.caller_wait <= p.wall);
        assert!(pool.profile().is_empty());
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
