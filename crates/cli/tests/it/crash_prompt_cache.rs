//! Crash consistency of the prompt-state store: `hearth serve --cache-dir`
//! is SIGKILLed at random instants just after it answers (while the turn's
//! state is being written: within 4 ms, or 40 ms half the time), now and
//! then a state file is cut short (what a power cut could leave), and the
//! server is started again on the same folder, `HEARTH_CRASH_KILLS` times (default 50). Every start must serve:
//! a turn resumed from a stored state answers exactly as the uninterrupted
//! conversation does, one without a state exactly as a fresh prompt does, a
//! damaged file is ignored and said so, and no temporary file outlives a
//! start. The seed is printed; `HEARTH_CRASH_SEED` replays it.

#![cfg(unix)]

use crate::crash_common;
use crate::serve_common;

use crash_common::{kills, Rng, Tally};
use serde_json::{json, Value};
use serve_common::{Server, TINY};
use std::path::Path;
use std::time::{Duration, Instant};

const CONVERSATIONS: usize = 4;

/// Turn two of conversation `c`: its first question, an answer, and a
/// second question.
fn second_turn(c: usize) -> Vec<Value> {
    let first: String = (0..10)
        .map(|i| format!("Topic {c} line {i} goes on about topic {c}."))
        .collect::<Vec<_>>()
        .join(" ");
    vec![
        json!({"role": "user", "content": first}),
        json!({"role": "assistant", "content": format!("An answer about topic {c}.")}),
        json!({"role": "user", "content": "And then?"}),
    ]
}

/// The answer and the tokens reused.
fn ask(server: &Server, messages: &[Value]) -> (String, u64) {
    let body = json!({
        "messages": messages, "max_tokens": 12, "temperature": 1.0,
        "top_k": 0, "top_p": 1.0, "min_p": 0.0, "seed": 5,
    });
    let r = server.post("/v1/chat/completions", &body.to_string());
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    (
        v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        v["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap(),
    )
}

fn serve(cache: &[&str]) -> Server {
    let mut args = vec!["--ctx", "1024", "--parallel", "1"];
    args.extend(cache);
    Server::start(TINY, &args)
}

/// What each conversation's second turn must answer: computed whole, and
/// after the same turn left its state (the prompt reused but its last
/// token), on a server without a store.
fn references() -> Vec<[(String, u64); 2]> {
    let bare = serve(&["--cache-ram", "0"]);
    (0..CONVERSATIONS)
        .map(|c| {
            let fresh = ask(&bare, &second_turn(c));
            let again = ask(&bare, &second_turn(c));
            assert_eq!(fresh.1, 0);
            assert!(again.1 > 100, "{again:?}");
            [fresh, again]
        })
        .collect()
}

fn files(dir: &Path, ext: &str) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(ext))
        .collect()
}

#[test]
fn prompt_states_survive_sigkill() {
    let want = references();
    let (mut rng, seed) = Rng::new(0x70c4);
    let mut t = Tally::new("prompt-cache", seed);
    let n = kills(50);
    let dir = tempfile::tempdir().unwrap();
    let dir_arg = dir.path().to_str().unwrap();
    let (mut hits, mut torn) = (0, 0);
    while t.kills < n {
        let mut server = serve(&["--cache-dir", dir_arg]);
        let stderr = server.stderr();
        t.check(files(dir.path(), ".tmp").is_empty(), || {
            format!("a temporary file outlived the start: {stderr}")
        });
        let c = rng.below(CONVERSATIONS as u64) as usize;
        let (answer, cached) = ask(&server, &second_turn(c));
        let expected = &want[c][usize::from(cached > 0)];
        t.check(
            (answer.as_str(), cached) == (expected.0.as_str(), expected.1),
            || format!("conversation {c}: {answer:?} reusing {cached}, want {expected:?}"),
        );
        hits += usize::from(cached > 0);
        t.committed_checked += 1;
        // The state is being written now: kill within a few milliseconds
        // (half the time within 40, so that on a disk whose fsync is slow
        // some writes finish and later starts resume from them).
        let window = if rng.chance(0.5) { 4 } else { 40 };
        let at = Instant::now() + rng.instant(Duration::ZERO, Duration::from_millis(window));
        t.kills += usize::from(crash_common::kill_at(&mut server.child, at));
        // A damaged file is said when it is found: at the start or on a hit.
        t.said += server.stderr().matches("ignoring").count();
        // Now and then, what a power cut could leave: a file cut short.
        let written = files(dir.path(), ".hpc");
        if !written.is_empty() && rng.chance(0.15) {
            let victim = &written[rng.below(written.len() as u64) as usize];
            let len = std::fs::metadata(victim).unwrap().len();
            let f = std::fs::File::options().write(true).open(victim).unwrap();
            f.set_len(rng.below(len)).unwrap();
            torn += 1;
        }
    }
    t.note(format!("resumed_from_store={hits} files_cut_short={torn}"));
    t.report();
    t.check(hits > 0, || {
        "no turn was ever served from a stored state".into()
    });
    t.check(torn == 0 || t.said > 0, || {
        "files were cut short and no start said it ignored one".into()
    });
}
