//! The deep-stack thread Jinja renders run on, one per calling thread and
//! kept for its next render.
//!
//! A render needs a stack that grows with its step limit (a gigabyte at
//! the default, see `RENDER_STACK_BYTES_PER_STEP`). Starting a thread with
//! such a stack for every render maps and unmaps that gigabyte each time,
//! and under qemu-user (the AArch64 tests) each start leaked memory in
//! proportion to the stack. So each thread that renders keeps a render
//! thread, replaced only when a template asks for a deeper stack; it ends
//! when its caller does (the job channel closes).

use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;

/// A job for the render thread: runs and sends its answer itself.
type Job = Box<dyn FnOnce() + Send>;

/// A render thread and the stack it was started with.
struct Worker {
    stack_bytes: usize,
    jobs: mpsc::Sender<Job>,
}

thread_local! {
    /// This thread's render thread, started by its first render.
    static WORKER: RefCell<Option<Worker>> = const { RefCell::new(None) };
}

/// Why [`run`] has no answer: the job panicked.
#[derive(Debug)]
pub(super) struct Panicked;

/// Runs `job` on a thread with at least `stack_bytes` of stack, its panic
/// turned into [`Panicked`]. When no such thread can be started the job
/// runs here, on the caller's stack.
pub(super) fn run<T, F>(stack_bytes: usize, job: F) -> Result<T, Panicked>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let (answer, answered) = mpsc::sync_channel(1);
    let send: Job = Box::new(move || {
        let _ = answer.send(catch_unwind(AssertUnwindSafe(job)));
    });
    let unsent = WORKER.with(|cell| {
        let mut worker = cell.borrow_mut();
        if worker.as_ref().is_none_or(|w| w.stack_bytes < stack_bytes) {
            *worker = start(stack_bytes);
        }
        match worker.as_ref() {
            Some(w) => w.jobs.send(send).err().map(|e| e.0),
            None => Some(send),
        }
    });
    if let Some(send) = unsent {
        // No render thread: the job runs here, on the caller's stack.
        WORKER.with(|cell| cell.borrow_mut().take());
        send();
    }
    answered.recv().map_err(|_| Panicked)?.map_err(|_| Panicked)
}

/// Starts a render thread with `stack_bytes` of stack; `None` if the
/// system refuses one.
fn start(stack_bytes: usize) -> Option<Worker> {
    let (jobs, inbox) = mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name("chat-template".into())
        .stack_size(stack_bytes)
        .spawn(move || {
            for job in inbox {
                job();
            }
        })
        .ok()?;
    Some(Worker { stack_bytes, jobs })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Recurses `depth` frames of about a kilobyte each.
    fn deep(depth: u32) -> u32 {
        let frame = std::hint::black_box([depth as u8; 1024]);
        if depth == 0 {
            return u32::from(frame[0]);
        }
        deep(depth - 1) + u32::from(frame[1] & 1)
    }

    #[test]
    fn a_job_gets_the_stack_it_asks_for_and_the_thread_is_kept() {
        // 64 MiB of frames: more than a default thread's 2 MiB.
        assert_eq!(run(256 << 20, || deep(64 * 1024)).unwrap(), 32 * 1024);
        let first = run(256 << 20, || std::thread::current().id()).unwrap();
        let again = run(64 << 20, || std::thread::current().id()).unwrap();
        assert_eq!(first, again, "a shallower job reuses the render thread");
        let deeper = run(512 << 20, || std::thread::current().id()).unwrap();
        assert_ne!(first, deeper, "a deeper stack needs a new thread");
        assert_ne!(deeper, std::thread::current().id());
    }

    #[test]
    fn a_panic_is_an_error_and_the_thread_renders_on() {
        let before = run(64 << 20, || std::thread::current().id()).unwrap();
        assert!(run(64 << 20, || -> u32 { panic!("a template engine bug") }).is_err());
        assert_eq!(
            run(64 << 20, || std::thread::current().id()).unwrap(),
            before
        );
    }
}
