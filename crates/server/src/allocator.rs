//! How the C allocator hands memory back, set once when the server starts.
//!
//! glibc serves a block of at least its mmap threshold with a mapping of
//! its own, unmapped when freed; but after such a block is freed it raises
//! the threshold to that block's size (up to 32 MiB) and keeps freed heap
//! memory up to twice that in every arena. A server that reads 30 MiB
//! bodies on several threads then keeps each thread's last body mapped:
//! four clients sending the largest bodies doubled the server's peak
//! memory over what it held at once. A fixed threshold turns the raising
//! off, so a large body's memory goes back when it is freed.

/// Blocks of this size and more get mappings of their own: far above the
/// allocations of a decoding step (a row of logits is 1 MiB), far below a
/// large body.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD: libc::c_int = 4 << 20;

/// Free memory at the top of a heap past this is given back.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const TRIM_THRESHOLD: libc::c_int = 1 << 20;

/// Fix glibc's thresholds (see the module's doc); elsewhere nothing.
pub(crate) fn return_large_blocks() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets two of the allocator's numbers, which it
    // reads under its own lock; no pointer is passed.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
    }
}
