//! The store on its own (states of made-up bytes): the longest usable
//! prefix within a namespace, one state per conversation, the RAM and disk
//! bounds, files that outlive the process, and damaged files ignored.

use engine::{MediaSpan, SavedKv, SavedPrompt};
use hearth_prompt_cache::{CacheConfig, Namespace, PromptCache};
use std::sync::atomic::Ordering;

/// A state of `tokens` whose cache bytes are `per_token` bytes a token,
/// derived from the tokens (so a wrong file shows).
fn state(tokens: &[u32], per_token: usize) -> SavedPrompt {
    SavedPrompt {
        tokens: tokens.to_vec(),
        media: Vec::new(),
        kv: SavedKv::whole(
            tokens
                .iter()
                .flat_map(|t| std::iter::repeat_n((*t % 251) as u8, per_token))
                .collect(),
        ),
    }
}

fn convo(seed: u32, len: usize) -> Vec<u32> {
    (0..len as u32).map(|i| seed * 1000 + i).collect()
}

fn ram_only(bytes: u64) -> PromptCache {
    PromptCache::open(&CacheConfig {
        ram_bytes: bytes,
        dir: None,
        disk_bytes: 0,
    })
    .unwrap()
}

fn on_disk(dir: &std::path::Path, ram: u64, disk: u64) -> PromptCache {
    PromptCache::open(&CacheConfig {
        ram_bytes: ram,
        dir: Some(dir.to_path_buf()),
        disk_bytes: disk,
    })
    .unwrap()
}

const A: Namespace = Namespace([1; 32]);
const B: Namespace = Namespace([2; 32]);

#[test]
fn the_longest_usable_prefix_in_the_namespace_is_found() {
    let cache = ram_only(1 << 20);
    let system: Vec<u32> = (0..50).collect();
    let one = [system.clone(), convo(1, 30)].concat();
    let two = [system.clone(), convo(2, 40)].concat();
    cache.store(A, state(&one, 4));
    cache.store(A, state(&two, 4));
    let prompt = [two.clone(), vec![7, 7]].concat();
    let hit = cache.lookup(&A, &prompt, &[], 0).unwrap();
    assert_eq!(hit.keep, two.len());
    assert_eq!(*hit.saved, state(&two, 4));
    // Only the shared system prompt: the other conversation serves 50.
    let third = [system.clone(), convo(3, 5)].concat();
    assert_eq!(cache.lookup(&A, &third, &[], 0).unwrap().keep, 50);
    // Among states that serve as much, the one holding the least past it,
    // though not the most recent: the shorter rewind (a ring that has
    // wrapped may not reach further back).
    let shared = ram_only(1 << 20);
    let short = [system.clone(), convo(5, 100)].concat();
    let long = [system.clone(), convo(6, 200)].concat();
    shared.store(A, state(&short, 4));
    shared.store(A, state(&long, 4));
    let hit = shared.lookup(&A, &third, &[], 0).unwrap();
    assert_eq!((hit.keep, &*hit.saved), (50, &state(&short, 4)));
    // Not beyond what the caller holds, nor for fewer than 32 tokens more;
    // never across namespaces.
    assert!(cache.lookup(&A, &third, &[], 50).is_none());
    assert!(cache.lookup(&A, &third, &[], 19).is_none());
    assert_eq!(cache.lookup(&A, &third, &[], 18).unwrap().keep, 50);
    assert!(cache.lookup(&B, &prompt, &[], 0).is_none());
    assert_eq!(cache.stats().misses.load(Ordering::Relaxed), 3);
    // Another picture at the same place is not shared.
    let pic = |key| MediaSpan {
        pos: 40,
        tokens: 5,
        key: [key; 32],
    };
    cache.store(
        A,
        SavedPrompt {
            media: vec![pic(1)],
            ..state(&convo(4, 70), 4)
        },
    );
    let other = convo(4, 80);
    assert_eq!(cache.lookup(&A, &other, &[pic(2)], 0).unwrap().keep, 40);
    assert_eq!(cache.lookup(&A, &other, &[pic(1)], 0).unwrap().keep, 70);
    // A namespace narrowed to a caller is another namespace.
    assert_ne!(A.for_caller(Some(&[9; 32])), A);
    assert_eq!(A.for_caller(None), A);
}

#[test]
fn a_conversation_keeps_one_state_and_ram_stays_within_its_bound() {
    let cache = ram_only(100_000);
    let mut turns = convo(1, 100);
    for _ in 0..10 {
        turns.extend(convo(9, 50));
        cache.store(A, state(&turns, 16));
    }
    assert_eq!(cache.entries().len(), 1, "each turn replaces the last");
    // Many conversations: the oldest go, the bound holds.
    for seed in 10..60 {
        cache.store(A, state(&convo(seed, 200), 16));
        assert!(cache.stats().ram_bytes.load(Ordering::Relaxed) <= 100_000);
    }
    assert!(cache.lookup(&A, &convo(59, 201), &[], 0).is_some());
    assert!(cache.lookup(&A, &convo(10, 201), &[], 0).is_none());
    assert!(cache.stats().ram_evictions.load(Ordering::Relaxed) > 0);
    // Larger than the whole bound: not kept.
    cache.store(A, state(&convo(70, 10_000), 16));
    assert!(cache.stats().ram_bytes.load(Ordering::Relaxed) <= 100_000);
}

#[test]
fn files_outlive_the_process_within_the_disk_bound() {
    let dir = tempfile::tempdir().unwrap();
    {
        let cache = on_disk(dir.path(), 20_000, 1 << 20);
        for seed in 0..5 {
            cache.store(A, state(&convo(seed, 300), 16));
        }
        cache.flush();
        // RAM holds the last few; the rest come back from their files.
        assert!(cache.stats().ram_bytes.load(Ordering::Relaxed) <= 20_000);
        let hit = cache.lookup(&A, &convo(0, 301), &[], 0).unwrap();
        assert_eq!(*hit.saved, state(&convo(0, 300), 16));
        assert_eq!(cache.stats().disk_hits.load(Ordering::Relaxed), 1);
    }
    // A new process finds them all.
    let cache = on_disk(dir.path(), 20_000, 1 << 20);
    assert_eq!(cache.entries().len(), 5);
    for seed in 0..5 {
        let hit = cache.lookup(&A, &convo(seed, 301), &[], 0).unwrap();
        assert_eq!(hit.keep, 300);
        assert_eq!(*hit.saved, state(&convo(seed, 300), 16));
    }
    // A smaller disk bound drops the least recently used files.
    drop(cache);
    let cache = on_disk(dir.path(), 20_000, 12_000);
    let bytes = cache.stats().disk_bytes.load(Ordering::Relaxed);
    assert!(bytes <= 12_000 && bytes > 0, "{bytes}");
    let files = std::fs::read_dir(dir.path()).unwrap().count();
    assert_eq!(files, cache.entries().len());
    // Cleared, nothing is left.
    cache.clear();
    cache.flush();
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn damaged_files_and_leftovers_are_ignored_and_removed() {
    let dir = tempfile::tempdir().unwrap();
    {
        let cache = on_disk(dir.path(), 1 << 20, 1 << 20);
        cache.store(A, state(&convo(1, 300), 16));
        cache.store(A, state(&convo(2, 300), 16));
        cache.flush();
    }
    let mut files: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    // One file's cache bytes flipped, one cut short, a killed writer's
    // temporary file beside them.
    let mut bytes = std::fs::read(&files[0]).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 1;
    std::fs::write(&files[0], &bytes).unwrap();
    let len = std::fs::metadata(&files[1]).unwrap().len();
    std::fs::File::options()
        .write(true)
        .open(&files[1])
        .unwrap()
        .set_len(len - 10)
        .unwrap();
    let name = files[1].file_name().unwrap().to_string_lossy().into_owned();
    let leftover = dir.path().join(format!(".{name}.999-1.tmp"));
    std::fs::write(&leftover, b"half").unwrap();

    let cache = on_disk(dir.path(), 1 << 20, 1 << 20);
    assert!(!leftover.exists() && !files[1].exists(), "removed at start");
    assert_eq!(cache.entries().len(), 1);
    // The flipped one passes the header check and fails the checksum.
    assert!(cache.lookup(&A, &convo(1, 301), &[], 0).is_none());
    assert!(cache.lookup(&A, &convo(2, 301), &[], 0).is_none());
    assert_eq!(cache.stats().files_ignored.load(Ordering::Relaxed), 2);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// A saved cache in the engine's format for `tokens`: a global layer
/// holding every position and a ring holding the last `ring`, rows of 64
/// bytes derived from the position's token and `salt` (the same prefix
/// computed alike gives the same rows).
fn cache_state(tokens: &[u32], ring: usize, salt: u8) -> SavedPrompt {
    const ROW: usize = 64;
    let n = tokens.len();
    let mut kv = vec![1u8];
    kv.extend((n as u64).to_le_bytes());
    kv.extend(2u64.to_le_bytes());
    for first in [0, n.saturating_sub(ring)] {
        for word in [first, ROW, ROW] {
            kv.extend((word as u64).to_le_bytes());
        }
        for kind in [0u8, 1] {
            for t in &tokens[first..] {
                kv.extend(std::iter::repeat_n((*t as u8) ^ kind ^ salt, ROW));
            }
        }
    }
    SavedPrompt {
        tokens: tokens.to_vec(),
        media: Vec::new(),
        kv: SavedKv::whole(kv),
    }
}

#[test]
fn rows_states_share_are_held_once() {
    let system: Vec<u32> = (0..640).collect();
    let convos: Vec<Vec<u32>> = (1..=8)
        .map(|c| [system.clone(), convo(c, 100)].concat())
        .collect();
    let full = |s: &SavedPrompt| (s.kv.len() + 4 * s.tokens.len()) as u64;
    let cache = ram_only(1 << 30);
    for c in &convos {
        cache.store(A, cache_state(c, 300, 0));
    }
    // Shared: the global layer's 10 blocks of 64 system positions, and the
    // ring's 3 (positions 448..640; it holds 440..740), keys and values.
    let shared = (10 + 3) * 64 * 64 * 2;
    let one = full(&cache_state(&convos[0], 300, 0));
    let gauge = || cache.stats().ram_bytes.load(Ordering::Relaxed);
    assert_eq!(gauge(), 8 * one - 7 * shared);
    // Each state comes back with its own bytes.
    for c in &convos {
        let prompt = [c.clone(), vec![1]].concat();
        let hit = cache.lookup(&A, &prompt, &[], 0).unwrap();
        assert_eq!(*hit.saved, cache_state(c, 300, 0));
        assert!(hit.saved.kv.parts().len() > 1);
    }
    // The same tokens computed into other bits share nothing.
    let other = [system.clone(), convo(20, 100)].concat();
    cache.store(A, cache_state(&other, 300, 9));
    assert_eq!(gauge(), 9 * one - 7 * shared);
    let hit = cache.lookup(&A, &[other.clone(), vec![1]].concat(), &[], 0);
    assert_eq!(*hit.unwrap().saved, cache_state(&other, 300, 9));
    // Nor across namespaces.
    cache.store(B, cache_state(&convos[0], 300, 0));
    assert_eq!(gauge(), 10 * one - 7 * shared);
    cache.clear();
    assert_eq!(gauge(), 0);
    // Within a bound of three whole states, more fit once they share.
    let bounded = ram_only(3 * one);
    for c in &convos {
        bounded.store(A, cache_state(c, 300, 0));
        assert!(bounded.stats().ram_bytes.load(Ordering::Relaxed) <= 3 * one);
    }
    let held = bounded.entries().iter().filter(|e| e.ram_bytes > 0).count();
    assert!(held >= 4, "{held} states in RAM");
    for e in bounded.entries().iter().filter(|e| e.ram_bytes > 0) {
        assert!(e.shared_bytes > 0);
    }
}
