//! Crash consistency, shown: the real `hearth` binary is SIGKILLed at random
//! instants (seeded; the seed is printed, and `HEARTH_CRASH_SEED` replays
//! it) while it writes each of its stores, then restarted, again and again.
//! After every kill the store must open, every record committed before the
//! kill must be there unchanged, and only the work in flight may be missing;
//! the restart must say what the last run lost or left.
//!
//! Stores: the MT-Bench tape, judgments (`eval judge` and `eval grade`), the
//! Telegram bot's redb state, the model cache (`hearth pull` from a local
//! stand-in of the Hub) and `hearth quantize`'s output. No real model: the
//! tiny random fixture answers, and stand-ins play the Hub, the judge and
//! Telegram. `HEARTH_CRASH_KILLS` sets the kills per store (default 50);
//! scripts/crash-test.sh runs them all and collects the result lines.

// SIGKILL, and reading a child's output while it writes (pread), are Unix's.
#![cfg(unix)]

use crate::crash_common;

use bot::fake::FakeBotApi;
use crash_common::*;
use serde_json::Value;
use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const ZERO: Duration = Duration::ZERO;

fn eval_data(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../eval/tests/data")
        .join(rel)
}

/// The answers `eval judge` and `eval grade` work on: 80 questions, 2 turns.
fn answers() -> PathBuf {
    eval_data("model_answer/ultrachat_baseline.jsonl")
}

/// Kill instants run past the calibrated length of a whole run, so some runs
/// finish and the next starts a fresh cycle.
fn past(full: Duration) -> Duration {
    full * 6 / 5
}

/// The restart's line about a torn last line it found (`tail` the bytes after
/// the last newline when it started): checks it and counts it. When it said
/// nothing, it must have been killed before it got there, and so left the
/// file as it was (`before`, `after`).
fn check_tail_said(t: &mut Tally, run: &Run, tail: &[u8], before: &[u8], after: &[u8]) {
    if tail.is_empty() {
        return;
    }
    let whole = serde_json::from_slice::<Value>(tail).is_ok();
    let cut = format!("cut off {} bytes", tail.len());
    if run.stderr.contains("was torn") || run.stderr.contains("has no final newline") {
        t.said += 1;
        t.check(
            if whole {
                run.stderr.contains("has no final newline")
            } else {
                run.stderr.contains(&cut)
            },
            || {
                format!(
                    "the restart misreported the torn tail ({cut}):\n{}",
                    run.stderr
                )
            },
        );
    } else {
        t.check(run.killed && before == after, || {
            format!(
                "a torn tail of {} bytes was repaired without a word:\n{}",
                tail.len(),
                run.stderr
            )
        });
    }
}

/// After a kill: tear the last whole line now and then (what a power cut in
/// the middle of a write leaves; SIGKILL alone almost never splits one
/// small write). That line was never committed: the ledger forgets it.
fn maybe_tear(
    t: &mut Tally,
    rng: &mut Rng,
    path: &Path,
    ledger: &mut Ledger,
    torn: &mut usize,
) -> Option<Value> {
    if !rng.chance(0.2) {
        return None;
    }
    tear_last_line(path, rng)?;
    *torn += 1;
    let line = ledger.committed.pop()?;
    t.in_flight_lost += 1;
    serde_json::from_slice(&line).ok()
}

#[test]
fn the_mt_bench_tape_survives_sigkill() {
    let (mut rng, seed) = Rng::new(1);
    let mut t = Tally::new("mt-bench tape", seed);
    let n = kills(50);
    let ids: Vec<u32> = (81..=100).collect();
    let list = ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    let cmd = |out: &Path| {
        let mut c = hearth();
        c.args(["eval", "mt-bench", "-m", TINY, "-t", "1", "--out"])
            .arg(out)
            .args(["--model-id", "tiny", "--questions", &list])
            .args(["--max-tokens", "4", "--parallel", "2", "--resume"]);
        c
    };
    let scratch = tempfile::tempdir().unwrap();
    let cal = run_killed(&mut cmd(scratch.path()), Duration::from_secs(120));
    t.check(cal.ok(), || format!("a whole run failed:\n{}", cal.stderr));
    // The kill window follows the fastest whole run seen (the first may have
    // run beside the other stores' tests).
    let mut full = cal.wall;

    let dir = tempfile::tempdir().unwrap();
    let tape = dir.path().join("model_answer/tiny.jsonl");
    let mut ledger = Ledger::default();
    let (mut torn, mut natural) = (0, 0);
    for _ in 0..n * 20 {
        if t.kills >= n {
            break;
        }
        let before = std::fs::read(&tape).unwrap_or_default();
        let (_, tail) = split_lines(&before);
        let run = run_killed(&mut cmd(dir.path()), rng.instant(ZERO, past(full)));
        t.check(run.killed || run.status.success(), || {
            format!("the run failed:\n{}", run.stderr)
        });
        let after = std::fs::read(&tape).unwrap_or_default();
        check_tail_said(&mut t, &run, &tail, &before, &after);
        let rows = ledger.check(&mut t, &after);
        let on_tape: Vec<u64> = rows
            .iter()
            .map(|r| r["question_id"].as_u64().unwrap_or(0))
            .collect();
        let distinct: BTreeSet<u64> = on_tape.iter().copied().collect();
        t.check(distinct.len() == on_tape.len(), || {
            format!("a question is on the tape twice: {on_tape:?}")
        });
        if run.killed {
            t.kills += 1;
            // A tail this run left (not one it was killed before repairing).
            if !split_lines(&after).1.is_empty() && after != before {
                natural += 1;
            }
            maybe_tear(&mut t, &mut rng, &tape, &mut ledger, &mut torn);
        } else {
            t.completed += 1;
            if before.is_empty() {
                // A whole run from nothing: the kill window.
                full = full.min(run.wall);
            }
            let want: BTreeSet<u64> = ids.iter().map(|&i| u64::from(i)).collect();
            t.check(distinct == want, || {
                format!("a finished run left {distinct:?} on the tape")
            });
            std::fs::remove_file(&tape).unwrap();
            ledger = Ledger::default();
        }
    }
    t.check(t.kills >= n, || format!("only {} kills landed", t.kills));
    t.note(format!(
        "torn_tails_natural={natural} torn_tails_injected={torn} questions_per_cycle={}",
        ids.len()
    ));
    t.report();
}

/// A stand-in for an OpenAI-compatible judge: every judgment rates 7.
fn fake_judge() -> Http {
    Http::start(|req, s| {
        if req.method != "POST" || !req.path.ends_with("/chat/completions") {
            respond(s, "404 Not Found", &[], b"");
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
        let body = br#"{"choices":[{"index":0,"message":{"role":"assistant","content":"Fine. Rating: [[7]]"},"finish_reason":"stop"}]}"#;
        respond(
            s,
            "200 OK",
            &[("Content-Type", "application/json".into())],
            body,
        );
    })
}

fn judgment_key(r: &Value) -> String {
    format!(
        "{}/{}/{}/{}",
        r["question_id"], r["model"], r["turn"], r["judge"][1]
    )
}

#[test]
fn judgments_survive_sigkill() {
    let (mut rng, seed) = Rng::new(2);
    let mut t = Tally::new("judgments (eval judge)", seed);
    let n = kills(50);
    let judge = fake_judge();
    let url = format!("{}/v1", judge.url());
    let cmd = |out: &Path| {
        let mut c = hearth();
        c.args(["eval", "judge", "--answers"])
            .arg(answers())
            .args(["--judge-url", &url, "--judge-model", "fake-judge", "--out"])
            .arg(out)
            .args(["--parallel", "2", "--attempts", "1", "--timeout", "10"]);
        c
    };
    let scratch = tempfile::tempdir().unwrap();
    let cal = run_killed(&mut cmd(scratch.path()), Duration::from_secs(120));
    t.check(cal.ok(), || format!("a whole run failed:\n{}", cal.stderr));
    // The kill window follows the fastest whole run seen (the first may have
    // run beside the other stores' tests).
    let mut full = cal.wall;
    let per_cycle = 160;
    let asked_before = judge.requests.load(std::sync::atomic::Ordering::SeqCst);

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("model_judgment/fake-judge_single.jsonl");
    let mut ledger = Ledger::default();
    let (mut torn, mut cycles_rows) = (0, 0);
    for _ in 0..n * 20 {
        if t.kills >= n {
            break;
        }
        let before = std::fs::read(&file).unwrap_or_default();
        let (_, tail) = split_lines(&before);
        let run = run_killed(&mut cmd(dir.path()), rng.instant(ZERO, past(full)));
        t.check(run.killed || run.status.success(), || {
            format!("the run failed:\n{}", run.stderr)
        });
        let after = std::fs::read(&file).unwrap_or_default();
        check_tail_said(&mut t, &run, &tail, &before, &after);
        let rows = ledger.check(&mut t, &after);
        let keys: Vec<String> = rows.iter().map(judgment_key).collect();
        let distinct: HashSet<&String> = keys.iter().collect();
        t.check(distinct.len() == keys.len(), || {
            "a judgment is in the file twice".to_string()
        });
        if run.killed {
            t.kills += 1;
            maybe_tear(&mut t, &mut rng, &file, &mut ledger, &mut torn);
        } else {
            t.completed += 1;
            if before.is_empty() {
                // A whole run from nothing: the kill window.
                full = full.min(run.wall);
            }
            t.check(distinct.len() == per_cycle, || {
                format!("a finished run left {} judgments", distinct.len())
            });
            cycles_rows += per_cycle;
            std::fs::remove_file(&file).unwrap();
            ledger = Ledger::default();
        }
    }
    t.check(t.kills >= n, || format!("only {} kills landed", t.kills));
    let asked = judge.requests.load(std::sync::atomic::Ordering::SeqCst) - asked_before;
    let kept = cycles_rows + ledger.committed.len();
    t.note(format!(
        "judge_requests={asked} judgments_kept={kept} asked_again_after_a_kill={} torn_tails_injected={torn}",
        (asked as usize).saturating_sub(kept)
    ));
    t.report();
}

/// Reads the port from `eval grade`'s "grading page: http://127.0.0.1:PORT/".
fn grade_port(cap: &Captured, child: &mut std::process::Child) -> Option<u16> {
    let end = Instant::now() + Duration::from_secs(30);
    while Instant::now() < end {
        let err = cap.stderr();
        if let Some(rest) = err.split("grading page: http://127.0.0.1:").nth(1) {
            return rest.split('/').next()?.parse().ok();
        }
        if child.try_wait().unwrap().is_some() {
            return None;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    None
}

#[test]
fn human_grades_survive_sigkill() {
    let (mut rng, seed) = Rng::new(3);
    let mut t = Tally::new("judgments (eval grade)", seed);
    let n = kills(50);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("human_single.jsonl");
    let mut ledger = Ledger::default();
    // (question, turn) of every grade the page was told was saved, this cycle.
    let mut acked: BTreeSet<(u64, u64)> = BTreeSet::new();
    let (mut torn, mut unanswered) = (0, 0);
    let mut window = Duration::from_millis(300);
    for _ in 0..n * 20 {
        if t.kills >= n {
            break;
        }
        let before = std::fs::read(&file).unwrap_or_default();
        let (_, tail) = split_lines(&before);
        let cap = Captured::new();
        let mut cmd = grade_command(&file);
        cap.attach(&mut cmd);
        let mut child = cmd.spawn().unwrap();
        let port = grade_port(&cap, &mut child);
        let Some(port) = port else {
            t.fail(format!("the grading page did not start:\n{}", cap.stderr()))
        };
        // The page grades as fast as it can; the server dies at a random instant.
        let delay = rng.instant(ZERO, window);
        let serving = Instant::now();
        let killer = Killer::after(child, delay);
        let done = grade_as_fast_as_possible(&t, port, &mut acked, &mut unanswered);
        let run = killer.stop(&cap);
        let after = std::fs::read(&file).unwrap_or_default();
        // The page started, so it said what it found before it served.
        t.check(
            tail.is_empty() || run.stderr.contains("grading page"),
            || run.stderr.clone(),
        );
        check_tail_said(&mut t, &run, &tail, &before, &after);
        let distinct = check_grades_on_file(&mut t, &mut ledger, &after, &acked);
        if done {
            t.completed += 1;
            if before.is_empty() {
                // A whole grading from nothing: the kill window.
                window = window.min(past(serving.elapsed()));
            }
            t.check(distinct.len() == 160, || {
                format!("a finished grading left {} grades", distinct.len())
            });
            std::fs::remove_file(&file).unwrap();
            ledger = Ledger::default();
            acked.clear();
        } else if run.killed {
            t.kills += 1;
            if let Some(r) = maybe_tear(&mut t, &mut rng, &file, &mut ledger, &mut torn) {
                acked.remove(&grade_key(&r));
            }
        }
    }
    t.check(t.kills >= n, || format!("only {} kills landed", t.kills));
    t.note(format!(
        "grades_without_an_answer={unanswered} torn_tails_injected={torn}"
    ));
    t.report();
}

/// `eval grade` of the answers into `file`, its page on a free port.
fn grade_command(file: &Path) -> std::process::Command {
    let mut cmd = hearth();
    cmd.args(["eval", "grade", "--answers"])
        .arg(answers())
        .arg("--out")
        .arg(file)
        .args(["--grader", "crash", "--port", "0", "--seed", "7"]);
    cmd
}

/// The (question, turn) a grade or a grading item is of.
fn grade_key(r: &Value) -> (u64, u64) {
    (
        r["question_id"].as_u64().unwrap_or(0),
        r["turn"].as_u64().unwrap_or(0),
    )
}

/// A thread that SIGKILLs a child at a set instant, unless stopped first.
struct Killer {
    child: std::sync::Arc<std::sync::Mutex<std::process::Child>>,
    stop: std::sync::mpsc::Sender<()>,
    /// Says whether it killed the child.
    thread: std::thread::JoinHandle<bool>,
}

impl Killer {
    /// Kills `child` `delay` from now.
    fn after(child: std::process::Child, delay: Duration) -> Self {
        let child = std::sync::Arc::new(std::sync::Mutex::new(child));
        let (stop, rx) = std::sync::mpsc::channel::<()>();
        let thread = {
            let child = child.clone();
            std::thread::spawn(move || {
                if rx.recv_timeout(delay).is_err() {
                    let mut c = child.lock().unwrap();
                    let _ = c.kill();
                    let _ = c.wait();
                    true
                } else {
                    false
                }
            })
        };
        Self {
            child,
            stop,
            thread,
        }
    }

    /// Stops the thread, kills the child if it is still there, and what
    /// the run did (its output in `cap`).
    fn stop(self, cap: &Captured) -> Run {
        let _ = self.stop.send(());
        let killed = self.thread.join().unwrap();
        {
            let mut c = self.child.lock().unwrap();
            let _ = c.kill();
            let _ = c.wait();
        }
        Run {
            killed,
            status: self.child.lock().unwrap().wait().unwrap(),
            stdout: cap.stdout(),
            stderr: cap.stderr(),
            wall: ZERO,
        }
    }
}

/// Grades every item the page on `port` hands out, one after the other,
/// until it says all are graded (true) or stops answering (false). Grades
/// it acknowledged go into `acked`; grades it never answered are counted
/// in `unanswered`.
fn grade_as_fast_as_possible(
    t: &Tally,
    port: u16,
    acked: &mut BTreeSet<(u64, u64)>,
    unanswered: &mut usize,
) -> bool {
    let mut next: Option<Value> =
        request(port, "GET", "/api/next", None).and_then(|(_, b)| serde_json::from_str(&b).ok());
    while let Some(item) = next.take() {
        if item["done"] == true {
            return true;
        }
        let key = grade_key(&item);
        let body = serde_json::json!({"item": item["item"], "score": 1 + key.0 % 10});
        match request(port, "POST", "/api/grade", Some(&body.to_string())) {
            Some((200, b)) => {
                acked.insert(key);
                next = serde_json::from_str(&b).ok();
            }
            Some((status, b)) => t.fail(format!("a grade was refused: {status} {b}")),
            None => *unanswered += 1,
        }
    }
    false
}

/// The grades file after a run (`after`): its committed lines are there
/// (the ledger's check), no item is graded twice, and no grade the page
/// acknowledged is gone. Returns the (question, turn) of the grades on it.
fn check_grades_on_file(
    t: &mut Tally,
    ledger: &mut Ledger,
    after: &[u8],
    acked: &BTreeSet<(u64, u64)>,
) -> BTreeSet<(u64, u64)> {
    let rows = ledger.check(t, after);
    let on_file: Vec<(u64, u64)> = rows.iter().map(grade_key).collect();
    let distinct: BTreeSet<(u64, u64)> = on_file.iter().copied().collect();
    t.check(distinct.len() == on_file.len(), || {
        "an item is graded twice".to_string()
    });
    let missing: Vec<_> = acked.difference(&distinct).collect();
    if !missing.is_empty() {
        t.lost += missing.len();
        t.fail(format!(
            "grades the page was told were saved are gone: {missing:?}"
        ));
    }
    distinct
}

const TOKEN: &str = "4242:crash-TEST";

#[test]
fn the_bot_state_survives_sigkill() {
    let (mut rng, seed) = Rng::new(4);
    let mut t = Tally::new("bot state (redb)", seed);
    let n = kills(50);
    let api = FakeBotApi::start(TOKEN).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("telegram.redb");
    let cmd = || telegram_command(&api, dir.path());
    let mut chats = Chats::new(&api);
    let mut repaired = 0;
    let full = bot_calibration(&t, &cmd, &mut chats);

    for _ in 0..n * 20 {
        if t.kills >= n {
            break;
        }
        let cap = Captured::new();
        let mut c = cmd();
        cap.attach(&mut c);
        let start = Instant::now();
        let mut child = c.spawn().unwrap();
        chats.push(1 + rng.below(3));
        let killed = kill_at(&mut child, start + rng.instant(ZERO, past(full)));
        let err = cap.stderr();
        t.check(killed, || format!("the bot stopped by itself:\n{err}"));
        t.kills += 1;
        // Every start (all after a kill) says the last run did not stop cleanly.
        if err.contains("running (") {
            t.check(err.contains("did not stop cleanly"), || err.clone());
            t.said += 1;
        }
        // Every other kill, look inside.
        if rng.chance(0.5) {
            continue;
        }
        if check_bot_store_after_kill(&mut t, &db, &chats) {
            repaired += 1;
        }
    }
    a_last_bot_start_answers_everything(&mut t, &cmd, &chats);
    let twice = check_bot_store_after_clean_stop(&mut t, &db, &chats);
    t.note(format!(
        "updates={} replies_sent_twice={twice} redb_repairs_seen={repaired}",
        chats.sent.len()
    ));
    t.report();
}

/// `hearth telegram` on the tiny model against the fake Bot API `api`, its
/// state in `state`.
fn telegram_command(api: &FakeBotApi, state: &Path) -> std::process::Command {
    let mut c = hearth();
    c.args(["telegram", "-m", TINY, "-n", "4", "--temp", "0", "-t", "1"])
        .args([
            "--parallel",
            "2",
            "--rate-limit",
            "0",
            "--request-timeout",
            "2",
        ])
        .args(["--shutdown-timeout", "2", "--api-url", api.url(), "--state"])
        .arg(state)
        .env("TELEGRAM_BOT_TOKEN", TOKEN);
    c
}

/// The chats that wrote to the bot through the fake Bot API: one update
/// per chat.
struct Chats<'a> {
    api: &'a FakeBotApi,
    /// Chat id and update id, in the order they were sent.
    sent: Vec<(i64, u64)>,
    /// The last chat id taken.
    last: i64,
}

impl<'a> Chats<'a> {
    fn new(api: &'a FakeBotApi) -> Self {
        Self {
            api,
            sent: Vec::new(),
            last: 1000,
        }
    }

    /// `k` new chats each send one message.
    fn push(&mut self, k: u64) {
        for _ in 0..k {
            self.last += 1;
            let chat = self.last;
            let id = self.api.push_text(chat, &format!("hello from chat {chat}"));
            self.sent.push((chat, id));
        }
    }
}

/// Calibration: start the bot, have it answer three new chats, kill it.
/// Returns how long the answers took.
fn bot_calibration(
    t: &Tally,
    cmd: &impl Fn() -> std::process::Command,
    chats: &mut Chats,
) -> Duration {
    let cap = Captured::new();
    let mut c = cmd();
    cap.attach(&mut c);
    let start = Instant::now();
    let mut child = c.spawn().unwrap();
    chats.push(3);
    for &(chat, _) in &chats.sent {
        let got = chats.api.wait_for(chat, 1, Duration::from_secs(60));
        t.check(!got.is_empty(), || format!("no answer:\n{}", cap.stderr()));
    }
    let full = start.elapsed();
    kill_at(&mut child, Instant::now());
    full
}

/// After a kill: the store opens, every record in it decodes, and nothing
/// committed is missing (each update still to be answered or answered,
/// never both; never neither once Telegram was told it is stored). True
/// when redb said it repaired the file.
fn check_bot_store_after_kill(t: &mut Tally, db: &Path, chats: &Chats) -> bool {
    let store = match bot::store::Store::open(db) {
        Ok(s) => s,
        Err(e) => t.fail(format!(
            "the state database does not open after a kill: {e}"
        )),
    };
    t.check(store.was_unclean(), || {
        "a database left open by a killed bot was taken for cleanly closed".into()
    });
    let repaired = store.was_repaired();
    let inbox: HashSet<u64> = match store.inbox() {
        Ok(i) => i.into_iter().map(|(id, _)| id).collect(),
        Err(e) => t.fail(format!("the inbox does not read: {e}")),
    };
    let _ = store.next_outgoing().unwrap_or_else(|e| t.fail(e));
    let offset = store.offset().unwrap_or_else(|e| t.fail(e));
    // Updates are acknowledged in order: the first (pushed - unacknowledged).
    let acked = (chats.sent.len() - chats.api.unacknowledged()) as u64;
    t.check(offset > acked || acked == 0, || {
        format!(
            "Telegram was told updates up to {acked} are stored; the store's offset is {offset}"
        )
    });
    for &(chat, id) in &chats.sent {
        let state = store.chat(chat).unwrap_or_else(|e| t.fail(e));
        let replies = state.stats.replies;
        let queued = inbox.contains(&id);
        let sent = chats.api.sent_to(chat).len();
        // Still to be answered, or answered (memory, outbox and inbox
        // moved in one transaction): never both. Never neither, once
        // Telegram was told it is stored.
        let waiting = queued && replies == 0 && sent == 0;
        let answered = !queued && replies == 1;
        let unseen = !queued && replies == 0 && sent == 0;
        if id <= acked {
            t.committed_checked += 1;
        }
        if !(waiting || answered || (unseen && id > acked)) {
            if unseen {
                t.lost += 1;
            } else {
                t.corrupt += 1;
            }
            t.fail(format!(
                "update {id} (chat {chat}, acknowledged {}): in inbox {queued}, replies in memory {replies}, sent {sent}",
                id <= acked
            ));
        }
    }
    repaired
}

/// A last start answers everything still in flight, then stops cleanly on
/// SIGTERM, having said the run before it did not.
fn a_last_bot_start_answers_everything(
    t: &mut Tally,
    cmd: &impl Fn() -> std::process::Command,
    chats: &Chats,
) {
    let cap = Captured::new();
    let mut c = cmd();
    cap.attach(&mut c);
    let child = c.spawn().unwrap();
    let up = Instant::now() + Duration::from_secs(60);
    while !cap.stderr().contains("running (") && Instant::now() < up {
        std::thread::sleep(Duration::from_millis(5));
    }
    for &(chat, _) in &chats.sent {
        let got = chats.api.wait_for(chat, 1, Duration::from_secs(60));
        if got.is_empty() {
            t.lost += 1;
        }
    }
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let out = child.wait_with_output().unwrap();
    let err = cap.stderr();
    t.check(out.status.success(), || format!("no clean stop:\n{err}"));
    t.check(t.lost == 0, || {
        format!("{} chats never got their answer", t.lost)
    });
    t.check(err.contains("did not stop cleanly"), || err.clone());
    t.said += 1;
}

/// After the clean stop: nothing is left in the inbox or the outbox, every
/// chat was answered once in memory, and the store knows it was closed
/// cleanly. Replies Telegram got twice (sent, but killed before marked
/// sent) are the work in flight lost; returns their count.
fn check_bot_store_after_clean_stop(t: &mut Tally, db: &Path, chats: &Chats) -> usize {
    let store = bot::store::Store::open(db).unwrap();
    t.check(store.inbox().unwrap().is_empty(), || "inbox left".into());
    t.check(store.outbox_len().unwrap() == 0, || "outbox left".into());
    let twice = chats
        .sent
        .iter()
        .filter(|(c, _)| chats.api.sent_to(*c).len() > 1)
        .count();
    for &(chat, _) in &chats.sent {
        let replies = store.chat(chat).unwrap().stats.replies;
        t.check(replies == 1, || {
            format!("chat {chat} answered {replies} times")
        });
    }
    // In flight at a kill: a reply sent but not yet marked sent goes out again.
    t.in_flight_lost = twice;
    t.check(!store.was_unclean(), || {
        "a clean stop was taken for a crash".into()
    });
    twice
}

fn sha256_hex(b: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

/// A stand-in for the Hub serving one LFS file slowly (8 KiB every 0.4 ms),
/// so kills land mid-download; honours `Range` as hf-hub's resume needs.
struct FakeHub {
    http: Http,
    ranges: Shared<Vec<u64>>,
    served: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

fn fake_hub(body: Vec<u8>) -> FakeHub {
    let etag = sha256_hex(&body);
    let ranges: Shared<Vec<u64>> = Default::default();
    let served = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (r2, s2) = (ranges.clone(), served.clone());
    let http = Http::start(move |req, s| {
        if req.path != "/owner/repo/resolve/main/model.gguf" {
            respond(s, "404 Not Found", &[], b"");
            return;
        }
        let len = body.len();
        let (a, b) = match req.header("range").and_then(|r| r.strip_prefix("bytes=")) {
            Some(r) => {
                let (a, b) = r.split_once('-').unwrap_or((r, ""));
                let a: usize = a.parse().unwrap_or(0);
                let b: usize = b.parse().map(|b: usize| b + 1).unwrap_or(len);
                (a.min(len), b.min(len))
            }
            None => (0, len),
        };
        if b - a > 1 {
            r2.lock().unwrap().push(a as u64);
        }
        let head = format!(
            "HTTP/1.1 206 Partial Content\r\nContent-Length: {}\r\nContent-Range: bytes {a}-{}/{len}\r\nETag: \"{etag}\"\r\nX-Repo-Commit: {COMMIT}\r\nAccept-Ranges: bytes\r\nConnection: close\r\n\r\n",
            b - a,
            b.saturating_sub(1)
        );
        use std::io::Write;
        if s.write_all(head.as_bytes()).is_err() || req.method == "HEAD" {
            return;
        }
        for chunk in body[a..b].chunks(8192) {
            if s.write_all(chunk).is_err() {
                return;
            }
            s2.fetch_add(chunk.len() as u64, std::sync::atomic::Ordering::SeqCst);
            std::thread::sleep(Duration::from_micros(400));
        }
    });
    FakeHub {
        http,
        ranges,
        served,
    }
}

#[test]
fn the_model_cache_survives_sigkill() {
    let (mut rng, seed) = Rng::new(5);
    let mut t = Tally::new("model cache (hearth pull)", seed);
    let n = kills(50);
    let body: Vec<u8> = (0..1_000_003u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let hub = fake_hub(body.clone());
    let cmd = |home: &Path| pull_command(home, &hub);
    let scratch = tempfile::tempdir().unwrap();
    let cal = run_killed(&mut cmd(scratch.path()), Duration::from_secs(60));
    t.check(cal.ok(), || format!("a whole pull failed:\n{}", cal.stderr));
    // The kill window follows the fastest whole run seen (the first may have
    // run beside the other stores' tests).
    let mut full = cal.wall;
    let served_before = hub.served.load(std::sync::atomic::Ordering::SeqCst);
    hub.ranges.lock().unwrap().clear();

    let home = tempfile::tempdir().unwrap();
    let cache = PulledRepo::in_home(home.path());
    let (mut had_it, mut cycles) = (false, 0u64);
    for _ in 0..n * 20 {
        if t.kills >= n {
            break;
        }
        let partial = cache.parts();
        let had_it_before = had_it;
        let run = run_killed(&mut cmd(home.path()), rng.instant(ZERO, past(full)));
        t.check(run.killed || run.status.success(), || {
            format!("the pull failed:\n{}", run.stderr)
        });
        if run.stderr.contains("resuming") {
            t.said += 1;
        }
        check_the_pulled_file(&mut t, &cache, &body, &mut had_it);
        if run.killed {
            t.kills += 1;
        } else {
            t.completed += 1;
            if partial.is_empty() && !had_it_before {
                // A whole download from nothing: the kill window.
                full = full.min(run.wall);
            }
            check_a_finished_pull(&t, &run, &cache, &partial);
            // A fresh cache for the next cycle.
            std::fs::remove_dir_all(home.path().join("models")).unwrap();
            had_it = false;
            cycles += 1;
        }
    }
    t.check(t.kills >= n, || format!("only {} kills landed", t.kills));
    let resumed = hub
        .ranges
        .lock()
        .unwrap()
        .iter()
        .filter(|&&a| a > 0)
        .count();
    let served = hub.served.load(std::sync::atomic::Ordering::SeqCst) - served_before;
    let needed = cycles * body.len() as u64;
    t.in_flight_lost = resumed;
    t.note(format!(
        "downloads_resumed={resumed} bytes_served={served} bytes_needed_by_finished_cycles={needed}"
    ));
    t.report();
}

/// `hearth pull` of the fake Hub's file into the cache under `home`.
fn pull_command(home: &Path, hub: &FakeHub) -> std::process::Command {
    let mut c = hearth();
    c.args(["pull", "hf:owner/repo/model.gguf", "--quiet"])
        .env("HEARTH_HOME", home)
        .env("HF_ENDPOINT", hub.http.url());
    c
}

/// Where the pulled repository lives in a cache.
struct PulledRepo {
    repo: PathBuf,
    /// The file at its final name.
    snapshot: PathBuf,
}

impl PulledRepo {
    fn in_home(home: &Path) -> Self {
        let repo = home.join("models/hf/models--owner--repo");
        let snapshot = repo.join("snapshots").join(COMMIT).join("model.gguf");
        Self { repo, snapshot }
    }

    /// The file at its final name, as a resolve finds it: refs/main, then
    /// the snapshot.
    fn resolvable(&self) -> Option<Vec<u8>> {
        std::fs::read_to_string(self.repo.join("refs/main"))
            .ok()
            .filter(|c| c == COMMIT)
            .and_then(|_| std::fs::read(&self.snapshot).ok())
    }

    /// The partial downloads among the blobs.
    fn parts(&self) -> Vec<PathBuf> {
        std::fs::read_dir(self.repo.join("blobs"))
            .map(|d| {
                d.flatten()
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|x| x == "part"))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// After a run: a file at its final name is the whole `body`, and once it
/// was there (`had_it`, which this sets) it stays.
fn check_the_pulled_file(t: &mut Tally, cache: &PulledRepo, body: &[u8], had_it: &mut bool) {
    match cache.resolvable() {
        Some(bytes) => {
            t.committed_checked += 1;
            if bytes != body {
                t.corrupt += 1;
                t.fail(format!(
                    "the cached file at its final name is damaged ({} bytes)",
                    bytes.len()
                ));
            }
            *had_it = true;
        }
        None if *had_it => {
            t.lost += 1;
            t.fail("a pulled file vanished from the cache");
        }
        None => {}
    }
}

/// A pull that finished printed the snapshot's path, said so where it
/// resumed a partial download (`partial`, those before it ran), and left
/// no partial download.
fn check_a_finished_pull(t: &Tally, run: &Run, cache: &PulledRepo, partial: &[PathBuf]) {
    t.check(
        run.stdout.trim() == cache.snapshot.to_str().unwrap(),
        || format!("printed {:?}", run.stdout),
    );
    t.check(
        partial.is_empty() || run.stderr.contains("resuming"),
        || {
            format!(
                "a partial download ({partial:?}) was resumed without a word:\n{}",
                run.stderr
            )
        },
    );
    t.check(cache.parts().is_empty(), || "a .part file is left".into());
}

#[test]
fn quantize_output_survives_sigkill() {
    let (mut rng, seed) = Rng::new(6);
    let mut t = Tally::new("quantize output", seed);
    let n = kills(50);
    let input = tiny_fixture("gemma3_h256/model-f32.gguf");
    // What a previous, finished run left at the output's name.
    let old = std::fs::read(tiny_fixture("gemma3_h256/model-q4_k_m.gguf")).unwrap();
    let cmd = |out: &Path| quantize_command(&input, out);
    let scratch = tempfile::tempdir().unwrap();
    let reference = scratch.path().join("ref.gguf");
    let cal = run_killed(&mut cmd(&reference), Duration::from_secs(120));
    t.check(cal.ok(), || format!("a whole run failed:\n{}", cal.stderr));
    // The kill window follows the fastest whole run seen (the first may have
    // run beside the other stores' tests).
    let mut full = cal.wall;
    let new = std::fs::read(&reference).unwrap();
    assert_ne!(new, old);

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.gguf");
    let (mut partial_left, mut mid_write) = (0, 0);
    for _ in 0..n * 20 {
        if t.kills >= n {
            break;
        }
        let had_old = rng.chance(0.5);
        if had_old {
            std::fs::write(&out, &old).unwrap();
        } else if out.exists() {
            std::fs::remove_file(&out).unwrap();
        }
        let before = temp_files(dir.path());
        let run = quantize_killed(&mut rng, &mut cmd(&out), full, dir.path(), &before);
        t.check(run.killed || run.status.success(), || {
            format!("the run failed:\n{}", run.stderr)
        });
        // At the output's name: the old file or the whole new one, nothing else.
        match std::fs::read(&out) {
            Ok(b) if b == new => t.committed_checked += 1,
            Ok(b) if had_old && b == old => t.committed_checked += 1,
            Ok(b) => {
                t.corrupt += 1;
                t.fail(format!("the output holds {} other bytes", b.len()))
            }
            Err(_) if had_old => {
                t.lost += 1;
                t.fail("the old output vanished")
            }
            Err(_) => {}
        }
        let now = temp_files(dir.path());
        check_leftovers_removed_with_a_word(&mut t, &run, &before, &now);
        if run.killed {
            t.kills += 1;
            let fresh: Vec<&PathBuf> = now.iter().filter(|p| !before.contains(p)).collect();
            if !fresh.is_empty() {
                partial_left += 1;
            }
            // Killed while the output was being written (not before).
            if fresh
                .iter()
                .any(|p| std::fs::metadata(p).is_ok_and(|m| m.len() > 0))
            {
                mid_write += 1;
            }
        } else {
            t.completed += 1;
            full = full.min(run.wall);
            t.check(now.is_empty(), || format!("temporary files left: {now:?}"));
        }
    }
    t.check(t.kills >= n, || format!("only {} kills landed", t.kills));
    t.in_flight_lost = partial_left;
    t.note(format!(
        "partial_outputs_left_by_kills={partial_left} of_them_killed_mid_write={mid_write}"
    ));
    t.report();
}

/// `hearth quantize` of `input` to Q8_0 at `out`.
fn quantize_command(input: &Path, out: &Path) -> std::process::Command {
    let mut c = hearth();
    c.arg("quantize")
        .arg(input)
        .arg(out)
        .args(["--type", "q8_0", "-q", "-t", "1"]);
    c
}

/// The temporary files in `dir`, sorted.
fn temp_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().ends_with(".tmp"))
        .collect();
    v.sort();
    v
}

/// Runs a quantization (`full` long when whole) and kills it: a third of
/// the kills land anywhere, a third late, and a third while the output is
/// being written (once a temporary file in `dir` not among `before` has
/// bytes, within the next 2 ms).
fn quantize_killed(
    rng: &mut Rng,
    cmd: &mut std::process::Command,
    full: Duration,
    dir: &Path,
    before: &[PathBuf],
) -> Run {
    match rng.below(3) {
        0 => run_killed(cmd, rng.instant(ZERO, full * 11 / 10)),
        1 => run_killed(cmd, rng.instant(full * 3 / 4, full * 11 / 10)),
        _ => {
            let writing = || {
                temp_files(dir)
                    .iter()
                    .any(|p| !before.contains(p) && std::fs::metadata(p).is_ok_and(|m| m.len() > 0))
            };
            let extra = rng.instant(ZERO, Duration::from_millis(2));
            run_killed_when(cmd, full * 3, writing, extra)
        }
    }
}

/// Leftovers of earlier kills (`before` the run, gone `now`): never removed
/// without a word.
fn check_leftovers_removed_with_a_word(
    t: &mut Tally,
    run: &Run,
    before: &[PathBuf],
    now: &[PathBuf],
) {
    for p in before {
        if !now.contains(p) {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            t.check(run.stderr.contains(&name), || {
                format!("{name} was removed without a word:\n{}", run.stderr)
            });
            t.said += 1;
        }
    }
}
