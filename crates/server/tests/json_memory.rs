//! The request budget's estimate of what reading a body's JSON takes is an
//! upper bound: measured with a counting allocator on bodies of the shapes
//! that amplify most (millions of tiny values) and on ordinary ones.
//! A binary of its own: its counting allocator is the whole process's.

use hearth_server::api;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system allocator, keeping the bytes live now and the most since the
/// last reset.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call goes to `System` unchanged; the counts beside it are atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(layout.size(), Ordering::SeqCst) + layout.size();
        PEAK.fetch_max(live, Ordering::SeqCst);
        // SAFETY: the caller's contract, passed on to `System` unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::SeqCst);
        // SAFETY: the caller's contract, passed on to `System` unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // Both blocks are live while the data moves.
        let live = LIVE.fetch_add(new_size, Ordering::SeqCst) + new_size;
        PEAK.fetch_max(live, Ordering::SeqCst);
        // SAFETY: the caller's contract, passed on to `System` unchanged.
        let out = unsafe { System.realloc(ptr, layout, new_size) };
        LIVE.fetch_sub(layout.size(), Ordering::SeqCst);
        out
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The most bytes `parse` allocated beyond what was live before it.
fn peak_of(parse: impl FnOnce()) -> usize {
    let base = LIVE.load(Ordering::SeqCst);
    PEAK.store(base, Ordering::SeqCst);
    parse();
    PEAK.load(Ordering::SeqCst) - base
}

#[test]
fn the_estimate_bounds_what_parsing_takes() {
    let defaults = engine::SamplingParams::default();
    let message = |content: &str| format!(r#"{{"role":"user","content":{content:?}}}"#);
    let bodies: Vec<(&str, String)> = vec![
        (
            "one long message",
            format!(r#"{{"messages":[{}]}}"#, message(&"word ".repeat(200_000))),
        ),
        (
            "many small messages",
            format!(
                r#"{{"messages":[{}]}}"#,
                vec![message("hi"); 50_000].join(",")
            ),
        ),
        (
            "an array of tiny objects",
            format!(
                r#"{{"messages":[{}]}}"#,
                vec![r#"{"a":0}"#; 100_000].join(",")
            ),
        ),
        (
            "an array of zeros",
            format!(r#"{{"prompt":[{}]}}"#, vec!["0"; 500_000].join(",")),
        ),
        (
            "nested arrays",
            format!(r#"{{"x":[{}]}}"#, vec!["[]"; 300_000].join(",")),
        ),
        (
            "a wide object",
            format!(
                "{{{}}}",
                (0..50_000)
                    .map(|i| format!(r#""k{i}":{{}}"#))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        ),
    ];
    for (what, body) in bodies {
        let estimate = hearth_server::json_memory(body.as_bytes()) as usize;
        let peak = peak_of(|| {
            let _ = api::parse_chat(body.as_bytes(), &defaults);
        });
        let value = peak_of(|| {
            let _ = serde_json::from_slice::<serde_json::Value>(body.as_bytes());
        });
        eprintln!(
            "{what}: {} bytes, parse peak {peak}, Value {value}, estimate {estimate}",
            body.len()
        );
        assert!(
            estimate >= peak.max(value),
            "{what}: estimate {estimate} < peak {peak} / {value}"
        );
        // Not wildly over either: within 8 times what it bounds.
        assert!(
            estimate < 8 * peak.max(value).max(body.len()),
            "{what}: estimate {estimate}"
        );
    }
}
