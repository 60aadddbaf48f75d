//! The bounded pool that runs every CPU-heavy step of a request off the
//! async runtime: reading a large JSON body, templating and tokenizing,
//! compiling a grammar, decoding an image or a clip, writing a large
//! answer. The runtime has two worker threads; one of them busy for a
//! second on a tokenizer makes `/health` wait that second. Here a fixed
//! set of threads takes the steps from a bounded queue: past it a request
//! is answered 503 with Retry-After, so a burst of heavy requests neither
//! piles up threads nor queues without end.
//!
//! Each step also names the memory it may take (worked out from sizes its
//! request already knows, as the request's budget checks do), and the steps
//! running at once may together take one request budget
//! (`--request-memory`): a step that does not fit waits for running ones
//! to finish. So four clients' largest requests at once take what one
//! takes, not four times that.

use crate::error::ApiError;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use tokio::sync::Semaphore;

/// A step of a request, boxed for the queue.
type Step = Box<dyn FnOnce() + Send>;

/// Stack of each pool thread. The steps recurse over client input
/// (templates, grammars, schemas, JSON) within their depth bounds; this is
/// the main thread's 8 MiB doubled, reserved, not committed.
const STACK_BYTES: usize = 16 << 20;

/// Steps that may run at once and wait, and the threads that run them.
pub(crate) struct WorkPool {
    queue: Sender<Step>,
    /// Steps admitted and not yet finished: running or waiting.
    admitted: Arc<AtomicUsize>,
    threads: usize,
    waiting: usize,
    /// The memory running steps may take together, a permit a byte.
    memory: Arc<Semaphore>,
    /// That memory's size, the most one step can be given.
    memory_bytes: u32,
}

/// Gives a step's place back when it is done, run or dropped unrun.
struct Admitted(Arc<AtomicUsize>);

impl Drop for Admitted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl WorkPool {
    /// A pool of `threads` threads (at least one), room for `waiting` steps
    /// in front of them, and `memory` bytes its running steps may take
    /// together (at most 4 GiB counted).
    pub(crate) fn new(threads: usize, waiting: usize, memory: usize) -> std::io::Result<Self> {
        let threads = threads.max(1);
        let memory_bytes = u32::try_from(memory).unwrap_or(u32::MAX).max(1);
        let (queue, steps) = mpsc::channel::<Step>();
        let steps = Arc::new(Mutex::new(steps));
        for i in 0..threads {
            let steps = Arc::clone(&steps);
            std::thread::Builder::new()
                .name(format!("hearth-prep-{i}"))
                .stack_size(STACK_BYTES)
                .spawn(move || run_steps(&steps))?;
        }
        Ok(Self {
            queue,
            admitted: Arc::new(AtomicUsize::new(0)),
            threads,
            waiting,
            memory: Arc::new(Semaphore::new(memory_bytes as usize)),
            memory_bytes,
        })
    }

    /// Run `step`, which may take `memory` bytes, on the pool and wait for
    /// its result. With every thread busy and `waiting` steps queued it is
    /// a 503 naming the limits; an admitted step waits until its memory
    /// fits beside the running steps' (a step larger than the pool's memory
    /// runs alone). A panic in `step` ends this request with a 500 and
    /// leaves the pool running. A step whose request went away before a
    /// thread took it is skipped.
    pub(crate) async fn run<T, F>(&self, memory: u64, step: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let room = self.threads + self.waiting;
        let admit = |n: usize| (n < room).then_some(n + 1);
        if self
            .admitted
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, admit)
            .is_err()
        {
            return Err(self.busy());
        }
        let place = Admitted(Arc::clone(&self.admitted));
        let bytes = u32::try_from(memory)
            .unwrap_or(u32::MAX)
            .min(self.memory_bytes);
        let held = Arc::clone(&self.memory)
            .acquire_many_owned(bytes)
            .await
            .map_err(|_| ApiError::unavailable("The server is shutting down.", 1))?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let boxed: Step = Box::new(move || {
            if tx.is_closed() {
                return;
            }
            let result = catch_unwind(AssertUnwindSafe(step));
            // Free the place and the memory before the caller hears, so its
            // next step finds them free.
            drop((place, held));
            let _ = tx.send(result);
        });
        if self.queue.send(boxed).is_err() {
            return Err(ApiError::unavailable("The server is shutting down.", 1));
        }
        match rx.await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(panic)) => Err(ApiError::internal(format!(
                "preparing the request failed: {}",
                panic_text(&panic)
            ))),
            Err(_) => Err(ApiError::internal("the preparing thread stopped")),
        }
    }

    /// The 503 of a full pool.
    fn busy(&self) -> ApiError {
        ApiError {
            code: Some("prep_queue_full"),
            ..ApiError::unavailable(
                format!(
                    "The server is busy preparing other requests: {} run at once and {} wait, \
                     its limits (--prep-threads, --prep-queue). Retry shortly.",
                    self.threads, self.waiting
                ),
                1,
            )
        }
    }
}

/// The nice value of the pool's threads: below the HTTP threads and the
/// model's, so that on a machine whose cores the steps fill, `/health` and
/// the streams already generating still get theirs (the kernel gives a
/// thread of nice 10 about a tenth of a core beside one of nice 0).
#[cfg(target_os = "linux")]
const NICE: i32 = 10;

/// A pool thread: take steps until the pool is dropped.
fn run_steps(steps: &Mutex<mpsc::Receiver<Step>>) {
    // On Linux a nice value is a thread's own; where it is the process's,
    // the pool keeps the default rather than slow the whole server.
    #[cfg(target_os = "linux")]
    let _ = rustix::process::setpriority_process(Some(rustix::thread::gettid()), NICE);
    loop {
        // A step never panics out (it is caught inside), so the lock is
        // never poisoned by one; recover anyway rather than stop.
        let next = steps.lock().unwrap_or_else(|e| e.into_inner()).recv();
        match next {
            Ok(step) => step(),
            Err(_) => return,
        }
    }
}

/// The message of a caught panic.
fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn a_full_pool_answers_503_naming_its_flags() {
        let rt = runtime();
        let pool = Arc::new(WorkPool::new(1, 1, 1 << 20).unwrap());
        let (release, gate) = std::sync::mpsc::channel::<()>();
        let gate = Arc::new(Mutex::new(gate));
        rt.block_on(async {
            // One step runs (held on the gate), one waits: the pool is full.
            let mut held = Vec::new();
            for _ in 0..2 {
                let (pool, gate) = (Arc::clone(&pool), Arc::clone(&gate));
                held.push(tokio::spawn(async move {
                    pool.run(0, move || gate.lock().unwrap().recv().unwrap())
                        .await
                }));
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let err = pool.run(0, || ()).await.unwrap_err();
            assert_eq!(err.status.as_u16(), 503);
            assert_eq!(err.retry_after, Some(1));
            assert!(err.message.contains("--prep-threads"), "{}", err.message);
            assert!(err.message.contains("--prep-queue"), "{}", err.message);
            for _ in 0..2 {
                release.send(()).unwrap();
            }
            for h in held {
                h.await.unwrap().unwrap();
            }
            // Room again.
            assert_eq!(pool.run(0, || 7).await.unwrap(), 7);
        });
    }

    #[test]
    fn without_a_queue_a_step_is_taken_only_by_an_idle_thread() {
        let rt = runtime();
        let pool = Arc::new(WorkPool::new(1, 0, 1 << 20).unwrap());
        let (release, gate) = std::sync::mpsc::channel::<()>();
        rt.block_on(async {
            assert_eq!(pool.run(0, || 1).await.unwrap(), 1);
            let held = {
                let pool = Arc::clone(&pool);
                tokio::spawn(async move { pool.run(0, move || gate.recv().unwrap()).await })
            };
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert_eq!(pool.run(0, || 2).await.unwrap_err().status.as_u16(), 503);
            release.send(()).unwrap();
            held.await.unwrap().unwrap();
            assert_eq!(pool.run(0, || 3).await.unwrap(), 3);
        });
    }

    #[test]
    fn a_panicking_step_is_a_500_and_the_pool_goes_on() {
        let rt = runtime();
        let pool = WorkPool::new(1, 4, 1 << 20).unwrap();
        rt.block_on(async {
            let err = pool
                .run(0, || -> u8 { panic!("boom in a step") })
                .await
                .unwrap_err();
            assert_eq!(err.status.as_u16(), 500);
            assert!(err.message.contains("boom in a step"), "{}", err.message);
            assert_eq!(pool.run(0, || 1 + 1).await.unwrap(), 2);
        });
    }

    /// The most steps of `memory` bytes each, 16 of them sent at once to
    /// a pool of two threads and `pool_memory` bytes, that ran at once.
    fn most_at_once(pool_memory: usize, memory: u64) -> usize {
        let rt = runtime();
        let pool = Arc::new(WorkPool::new(2, 64, pool_memory).unwrap());
        let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        rt.block_on(async {
            let steps: Vec<_> = (0..16)
                .map(|_| {
                    let (pool, now, most) =
                        (Arc::clone(&pool), Arc::clone(&now), Arc::clone(&most));
                    tokio::spawn(async move {
                        pool.run(memory, move || {
                            let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                            most.fetch_max(n, Ordering::SeqCst);
                            std::thread::sleep(Duration::from_millis(5));
                            now.fetch_sub(1, Ordering::SeqCst);
                        })
                        .await
                    })
                })
                .collect();
            for s in steps {
                s.await.unwrap().unwrap();
            }
        });
        most.load(Ordering::SeqCst)
    }

    #[test]
    fn steps_run_on_at_most_the_pools_threads() {
        assert_eq!(most_at_once(1 << 20, 1000), 2);
    }

    #[test]
    fn steps_whose_memory_does_not_fit_together_run_one_at_a_time() {
        assert_eq!(most_at_once(1000, 600), 1);
        // A step larger than the pool's memory runs, alone.
        assert_eq!(most_at_once(1000, 5000), 1);
        assert_eq!(most_at_once(1000, 500), 2);
    }
}
