//! The bot against a local stand-in of the Bot API, with a scripted model:
//! a conversation with its commands, memory across a restart, long replies,
//! the allowlist, the rate limit, webhooks and their secret, a Bot API that
//! fails or hangs, and bad input.

use engine::ChatMessage;
use hearth_bot::fake::{message, FakeBotApi, Fault};
use hearth_bot::{run, Backoff, BotConfig, BotError, Brain, BrainReply, Mode};
use serde_json::json;
use std::collections::HashSet;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

const TOKEN: &str = "123456:TEST-token";
const WAIT: Duration = Duration::from_secs(15);

/// Replies "re: LAST (N msgs)"; "long" gets a 10,000-character answer in
/// paragraphs, "slow" takes 600 ms. Counts calls and how many overlap.
#[derive(Default)]
struct Scripted {
    calls: AtomicUsize,
    running: AtomicUsize,
    most_at_once: AtomicUsize,
}

impl Brain for Scripted {
    fn reply(&self, m: &[ChatMessage], _guard: bool) -> Result<BrainReply, String> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_at_once.fetch_max(now, Ordering::SeqCst);
        let last = m.last().map(|m| m.content.clone()).unwrap_or_default();
        let text = match last.as_str() {
            "long" => (0..20)
                .map(|i| format!("Paragraph {i}. {}", "word ".repeat(99).trim_end()))
                .collect::<Vec<_>>()
                .join("\n\n"),
            "slow" => {
                std::thread::sleep(Duration::from_millis(600));
                "done slowly".into()
            }
            _ => format!("re: {last} ({} msgs)", m.len()),
        };
        self.running.fetch_sub(1, Ordering::SeqCst);
        Ok(BrainReply {
            text,
            prompt_tokens: 10,
            completion_tokens: 3,
            ms: 5,
            guard_changed: false,
        })
    }
    fn fits(&self, m: &[ChatMessage]) -> bool {
        m.iter().map(|m| m.content.len()).sum::<usize>() < 100_000
    }
    fn name(&self) -> String {
        "scripted".into()
    }
}

/// A bot running on its own thread and runtime.
struct Running {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Result<(), BotError>>>,
}

impl Running {
    fn start(cfg: BotConfig, brain: Arc<dyn Brain>) -> Self {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(run(cfg, brain, async {
                let _ = rx.await;
            }))
        });
        Self {
            stop: Some(tx),
            thread: Some(thread),
        }
    }

    fn stop(mut self) -> Result<(), BotError> {
        let _ = self.stop.take().unwrap().send(());
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn config(api: &FakeBotApi, state: &Path) -> BotConfig {
    let mut c = BotConfig::new(TOKEN.into(), state.to_path_buf());
    c.api_url = Some(api.url().into());
    c.poll_wait = Duration::from_secs(1);
    c.request_timeout = Duration::from_secs(1);
    c.backoff = Backoff {
        first: Duration::from_millis(50),
        max: Duration::from_millis(400),
    };
    c.drain = Duration::from_secs(5);
    c
}

fn scripted() -> Arc<Scripted> {
    Arc::new(Scripted::default())
}

#[test]
fn start_chat_reset_and_memory_across_a_restart() {
    let api = FakeBotApi::start(TOKEN).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let brain = scripted();
    let bot = Running::start(config(&api, dir.path()), brain.clone());
    api.push_text(7, "/start");
    api.push_text(7, "hello");
    api.push_text(7, "again");
    let got = api.wait_for(7, 3, WAIT);
    assert!(
        got[0].contains("scripted") && got[0].contains("/reset"),
        "{got:?}"
    );
    assert_eq!(got[1..], ["re: hello (1 msgs)", "re: again (3 msgs)"]);
    api.push_text(7, "/system Be terse.");
    api.push_text(7, "/reset");
    api.push_text(7, "fresh");
    let got = api.wait_for(7, 6, WAIT);
    assert_eq!(got[4], "Forgotten (2 turns). Let's start over.");
    assert_eq!(got[5], "re: fresh (2 msgs)", "system + the new message");
    assert!(
        api.actions().iter().any(|(c, a)| *c == 7 && a == "typing"),
        "typing shown while the model works"
    );
    bot.stop().unwrap();
    assert_eq!(api.unacknowledged(), 0);

    // A new process on the same state: the turn and the system prompt stay.
    let bot = Running::start(config(&api, dir.path()), brain.clone());
    api.push_text(7, "after");
    let got = api.wait_for(7, 7, WAIT);
    assert_eq!(
        got[6], "re: after (4 msgs)",
        "system, fresh, its reply, after"
    );
    api.push_text(7, "/stats");
    let stats = api.wait_for(7, 8, WAIT).pop().unwrap();
    assert!(
        stats.contains("Replies: 4") && stats.contains("System prompt: set"),
        "{stats}"
    );
    bot.stop().unwrap();
    assert_eq!(
        brain.calls.load(Ordering::SeqCst),
        4,
        "each message asked once"
    );
}

#[test]
fn a_long_reply_is_split_at_paragraphs() {
    let api = FakeBotApi::start(TOKEN).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let _bot = Running::start(config(&api, dir.path()), scripted());
    api.push_text(3, "long");
    let got = api.wait_for(3, 3, WAIT);
    assert_eq!(got.len(), 3, "10,000 characters in three messages");
    for part in &got {
        assert!(part.encode_utf16().count() <= 4096);
        assert!(
            part.starts_with("Paragraph "),
            "cut at a paragraph: {}",
            &part[..20]
        );
    }
    let whole = got.join("\n\n");
    assert_eq!(whole.matches("Paragraph ").count(), 20);
}

#[test]
fn a_chat_not_on_the_allowlist_gets_one_line_and_no_model() {
    let api = FakeBotApi::start(TOKEN).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let brain = scripted();
    let mut cfg = config(&api, dir.path());
    cfg.allow = Some(HashSet::from([1]));
    cfg.rate_limit = 2;
    let _bot = Running::start(cfg, brain.clone());
    for _ in 0..5 {
        api.push_text(2, "let me in");
    }
    api.push_text(1, "hi");
    assert_eq!(api.wait_for(1, 1, WAIT), ["re: hi (1 msgs)"]);
    let stranger = api.wait_for(2, 2, Duration::from_millis(500));
    assert_eq!(
        stranger.len(),
        1,
        "one polite line, not one per message: {stranger:?}"
    );
    assert!(stranger[0].contains("private"));
    assert_eq!(brain.calls.load(Ordering::SeqCst), 1);
}

#[test]
fn a_burst_beyond_the_rate_limit() {
    let api = FakeBotApi::start(TOKEN).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let brain = scripted();
    let mut cfg = config(&api, dir.path());
    cfg.rate_limit = 3;
    let _bot = Running::start(cfg, brain.clone());
    for i in 0..8 {
        api.push_text(5, &format!("m{i}"));
    }
    let got = api.wait_for(5, 4, WAIT);
    std::thread::sleep(Duration::from_millis(300));
    let got_later = api.sent_to(5);
    assert_eq!(got, got_later, "nothing more arrives");
    assert_eq!(got.len(), 4, "{got:?}");
    assert_eq!(got.iter().filter(|t| t.starts_with("re: m")).count(), 3);
    assert_eq!(
        got.iter()
            .filter(|t| t.contains("faster than I can answer"))
            .count(),
        1
    );
    assert_eq!(brain.calls.load(Ordering::SeqCst), 3);
}

#[test]
fn several_chats_are_answered_at_once_each_in_order() {
    let api = FakeBotApi::start(TOKEN).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let brain = scripted();
    let _bot = Running::start(config(&api, dir.path()), brain.clone());
    for chat in 10..14 {
        api.push_text(chat, "slow");
        api.push_text(chat, "next");
    }
    for chat in 10..14 {
        assert_eq!(
            api.wait_for(chat, 2, WAIT),
            ["done slowly", "re: next (3 msgs)"]
        );
    }
    assert!(
        brain.most_at_once.load(Ordering::SeqCst) >= 2,
        "chats overlap"
    );
}

#[test]
fn an_answer_cut_off_by_shutdown_is_given_after_the_restart() {
    let api = FakeBotApi::start(TOKEN).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let brain = scripted();
    let mut cfg = config(&api, dir.path());
    cfg.drain = Duration::from_millis(100);
    let bot = Running::start(cfg, brain.clone());
    api.push_text(4, "slow");
    // Stop while the model is still at work.
    let t0 = std::time::Instant::now();
    while brain.running.load(Ordering::SeqCst) == 0 && t0.elapsed() < WAIT {
        std::thread::sleep(Duration::from_millis(5));
    }
    bot.stop().unwrap();
    assert!(api.sent_to(4).is_empty());
    let bot = Running::start(config(&api, dir.path()), brain.clone());
    assert_eq!(api.wait_for(4, 1, WAIT), ["done slowly"]);
    bot.stop().unwrap();
}

#[test]
fn a_failing_or_hanging_bot_api_loses_nothing() {
    let api = FakeBotApi::start(TOKEN).unwrap();
    let dir = tempfile::tempdir().unwrap();
    api.fail_polls(&[
        Fault::Status(500),
        Fault::RetryAfter(1),
        Fault::Hang(Duration::from_secs(3)),
        Fault::Status(502),
    ]);
    api.fail_sends(&[
        Fault::Status(500),
        Fault::RetryAfter(1),
        Fault::Hang(Duration::from_secs(3)),
        Fault::Status(503),
    ]);
    let brain = scripted();
    let _bot = Running::start(config(&api, dir.path()), brain.clone());
    for i in 0..3 {
        api.push_text(9, &format!("q{i}"));
    }
    let got = api.wait_for(9, 3, Duration::from_secs(30));
    assert_eq!(
        got,
        ["re: q0 (1 msgs)", "re: q1 (3 msgs)", "re: q2 (5 msgs)"]
    );
    assert!(
        api.calls("sendMessage") >= 7,
        "four failures, three deliveries"
    );
    assert!(api.calls("getUpdates") >= 5);
    assert_eq!(
        brain.calls.load(Ordering::SeqCst),
        3,
        "no answer asked twice"
    );
}

#[test]
fn photos_are_read_by_a_model_with_a_vision_tower() {
    // The tiny random Gemma 3 vision model: the photo's embeddings go
    // through the shared decoder with the chat's messages.
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny/gemma3_vision");
    let opts = engine::RunOptions {
        threads: Some(1),
        ctx: Some(256),
        ..engine::RunOptions::default()
    };
    let engine = Arc::new(engine::Engine::load(&fixture, &opts).unwrap());
    let brain = hearth_bot::EngineBrain::new(engine, 2, None, 6, Default::default(), "tiny".into());
    let api = FakeBotApi::start(TOKEN).unwrap();
    let dir = tempfile::tempdir().unwrap();
    api.add_file("pic", std::fs::read(fixture.join("img_a.png")).unwrap());
    api.add_file("junk", b"not a picture".to_vec());
    let _bot = Running::start(config(&api, dir.path()), Arc::new(brain.unwrap()));
    api.push_photo(5, "pic", Some("What is this?"));
    api.push_photo(5, "missing", None);
    api.push_photo(5, "junk", None);
    api.push_text(5, "/stats");
    let got = api.wait_for(5, 4, WAIT);
    assert_eq!(got.len(), 4, "{got:?}");
    assert!(
        !got[0].contains("can't") && !got[0].starts_with("Sorry"),
        "{got:?}"
    );
    assert!(got[1].contains("could not fetch that photo"), "{got:?}");
    assert!(got[2].contains("could not read that photo"), "{got:?}");
    // One reply, whose prompt held the picture's 16 soft tokens.
    assert!(got[3].contains("Replies: 1"), "{got:?}");
    let prompt = prompt_tokens(&got[3]);
    assert!(prompt > 16, "{prompt} prompt tokens");
    assert_eq!(api.calls("download"), 2, "the missing file has no download");
    // A text-only model says so without downloading.
    let api = FakeBotApi::start(TOKEN).unwrap();
    let dir = tempfile::tempdir().unwrap();
    api.add_file("pic", vec![1, 2, 3]);
    let _bot = Running::start(config(&api, dir.path()), scripted());
    api.push_photo(6, "pic", None);
    let got = api.wait_for(6, 1, WAIT);
    assert!(got[0].contains("can't read a photo"), "{got:?}");
    assert_eq!(api.calls("getFile"), 0);
}

/// The prompt tokens a `/stats` reply counts.
fn prompt_tokens(stats: &str) -> usize {
    stats
        .split("Tokens: ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap()
}

#[test]
fn voice_notes_are_heard_by_a_model_with_an_audio_tower() {
    // The tiny random Gemma 3n audio model: the voice note (Ogg Opus, as
    // Telegram records them) goes through the audio tower and the shared
    // decoder with the chat's messages.
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    let opts = engine::RunOptions {
        threads: Some(1),
        ctx: Some(256),
        ..engine::RunOptions::default()
    };
    let engine =
        Arc::new(engine::Engine::load(fixtures.join("tiny/gemma3n_audio"), &opts).unwrap());
    let brain = hearth_bot::EngineBrain::new(engine, 2, None, 6, Default::default(), "tiny".into());
    let api = FakeBotApi::start(TOKEN).unwrap();
    let dir = tempfile::tempdir().unwrap();
    api.add_file(
        "note",
        std::fs::read(fixtures.join("audio/speech.opus")).unwrap(),
    );
    api.add_file("junk", b"not audio".to_vec());
    let _bot = Running::start(config(&api, dir.path()), Arc::new(brain.unwrap()));
    api.push_voice(7, "note");
    api.push_voice(7, "missing");
    api.push_voice(7, "junk");
    api.push_text(7, "/stats");
    let got = api.wait_for(7, 4, WAIT);
    assert_eq!(got.len(), 4, "{got:?}");
    assert!(
        !got[0].contains("can't") && !got[0].starts_with("Sorry"),
        "{got:?}"
    );
    assert!(
        got[1].contains("could not fetch that voice note"),
        "{got:?}"
    );
    assert!(got[2].contains("could not read that voice note"), "{got:?}");
    // One reply, whose prompt held the clip's 24 audio tokens.
    assert!(got[3].contains("Replies: 1"), "{got:?}");
    let prompt = prompt_tokens(&got[3]);
    assert!(prompt > 24, "{prompt} prompt tokens");
    // A model that does not hear says so without downloading.
    let api = FakeBotApi::start(TOKEN).unwrap();
    let dir = tempfile::tempdir().unwrap();
    api.add_file("note", vec![1, 2, 3]);
    let _bot = Running::start(config(&api, dir.path()), scripted());
    api.push_voice(8, "note");
    let got = api.wait_for(8, 1, WAIT);
    assert!(got[0].contains("can't read a voice note"), "{got:?}");
    assert_eq!(api.calls("getFile"), 0);
}

#[test]
fn a_refused_token_stops_the_bot_with_a_clear_error() {
    let api = FakeBotApi::start("999:other").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let bot = Running::start(config(&api, dir.path()), scripted());
    let t0 = std::time::Instant::now();
    while !bot.thread.as_ref().unwrap().is_finished() && t0.elapsed() < WAIT {
        std::thread::sleep(Duration::from_millis(20));
    }
    let e = bot.stop().unwrap_err();
    assert!(matches!(e, BotError::Token(_)), "{e}");
    assert!(e.to_string().contains("@BotFather"));
}

#[test]
fn bad_input_is_answered_or_ignored_and_the_bot_stays_up() {
    let api = FakeBotApi::start(TOKEN).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let brain = scripted();
    let mut cfg = config(&api, dir.path());
    cfg.rate_limit = 0;
    let _bot = Running::start(cfg, brain.clone());
    // Missing fields (without a chat: ignored; without a date: answered),
    // an unknown kind, a wrong type.
    api.push_update(json!({"message": {"message_id": 1, "text": "no chat"}}));
    api.push_update(json!({"message": {"chat": {"id": 8}, "text": "no date"}}));
    api.push_update(json!({"some_future_kind": {"x": 1}}));
    api.push_update(json!({"message": "not an object"}));
    // Media the model cannot read.
    api.push_update(json!({"message": message(8, json!({"photo": [{"file_id": "f", "file_unique_id": "u", "width": 9, "height": 9}]}))}));
    api.push_update(json!({"message": message(8, json!({"voice": {"file_id": "f", "file_unique_id": "u", "duration": 2}}))}));
    api.push_text(8, "/frobnicate now");
    api.push_text(8, &"x".repeat(1 << 20));
    api.push_text(8, "still there?");
    let got = api.wait_for(8, 6, WAIT);
    assert_eq!(got[0], "re: no date (1 msgs)", "{got:?}");
    assert!(got[1].contains("can't read a photo"));
    assert!(got[2].contains("can't read a voice note"));
    assert!(got[3].contains("/frobnicate") && got[3].contains("/help"));
    assert!(got[4].contains("too long"));
    assert_eq!(got[5], "re: still there? (3 msgs)");
    assert_eq!(brain.calls.load(Ordering::SeqCst), 2);

    // A flood of 100 updates from 100 chats: every one answered.
    for chat in 1000..1100 {
        api.push_text(chat, "flood");
    }
    for chat in 1000..1100 {
        assert_eq!(
            api.wait_for(chat, 1, WAIT),
            ["re: flood (1 msgs)"],
            "chat {chat}"
        );
    }
    assert_eq!(api.unacknowledged(), 0);
}

/// POST `body` to `addr` at `path` with an optional secret header; the
/// status code.
fn post(addr: std::net::SocketAddr, path: &str, secret: Option<&str>, body: &str) -> u16 {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    let header = secret
        .map(|v| format!("X-Telegram-Bot-Api-Secret-Token: {v}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{header}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn free_port() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

#[test]
fn webhook_deliveries_need_the_secret() {
    let api = FakeBotApi::start(TOKEN).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let brain = scripted();
    let addr = free_port();
    let mut cfg = config(&api, dir.path());
    let url = format!("http://{addr}/telegram/hook");
    cfg.mode = Mode::Webhook {
        url: url.clone(),
        listen: addr,
        secret: "s3cret-Token_1".into(),
        limits: server::Limits::default(),
    };
    let _bot = Running::start(cfg, brain.clone());
    let t0 = std::time::Instant::now();
    while api.webhook().is_none() && t0.elapsed() < WAIT {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(api.webhook(), Some((url, "s3cret-Token_1".into())));
    let update = |id: u64, text: &str| {
        json!({"update_id": id, "message": message(21, json!({"text": text}))}).to_string()
    };
    assert_eq!(
        post(addr, "/telegram/hook", None, &update(1, "no secret")),
        401
    );
    assert_eq!(
        post(addr, "/telegram/hook", Some("wrong"), &update(2, "wrong")),
        401
    );
    assert_eq!(
        post(addr, "/telegram/hook", Some("s3cret-Token_1"), "{not json"),
        400
    );
    assert_eq!(
        post(
            addr,
            "/telegram/hook",
            Some("s3cret-Token_1"),
            &update(3, "hi")
        ),
        200
    );
    // Telegram repeats a delivery it thinks failed: answered once.
    assert_eq!(
        post(
            addr,
            "/telegram/hook",
            Some("s3cret-Token_1"),
            &update(3, "hi")
        ),
        200
    );
    assert_eq!(
        post(
            addr,
            "/telegram/hook",
            Some("s3cret-Token_1"),
            &update(4, "more")
        ),
        200
    );
    let got = api.wait_for(21, 2, WAIT);
    assert_eq!(got, ["re: hi (1 msgs)", "re: more (3 msgs)"]);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(api.sent_to(21).len(), 2);
    assert_eq!(
        brain.calls.load(Ordering::SeqCst),
        2,
        "the unauthorised posts asked nothing"
    );
    assert_eq!(api.calls("getUpdates"), 0, "no polling in webhook mode");
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
}

#[test]
fn a_chat_resumes_from_its_stored_prompt_state() {
    // The tiny random Gemma 3 on one slot: a second chat takes the slot
    // between two messages of the first, whose next prompt then starts from
    // its stored state; after a restart, from the state's file.
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tiny/gemma3/model-f32.gguf");
    let opts = engine::RunOptions {
        threads: Some(1),
        ctx: Some(512),
        ..engine::RunOptions::default()
    };
    let engine = Arc::new(engine::Engine::load(&fixture, &opts).unwrap());
    let dir = tempfile::tempdir().unwrap();
    let states = dir.path().join("prompt-cache");
    let open = || {
        let cache = prompt_cache::PromptCache::open(&prompt_cache::CacheConfig {
            ram_bytes: 64 << 20,
            dir: Some(states.clone()),
            disk_bytes: 64 << 20,
        })
        .unwrap();
        let cache = Arc::new(cache);
        let scoped = prompt_cache::ScopedCache {
            cache: Arc::clone(&cache),
            ns: prompt_cache::Namespace([1; 32]),
        };
        let store: Arc<dyn engine::PromptStore> = Arc::new(scoped);
        (cache, store)
    };
    let brain = |store| {
        let b = hearth_bot::EngineBrain::new(
            Arc::clone(&engine),
            1,
            Some(store),
            6,
            Default::default(),
            "tiny".into(),
        );
        Arc::new(b.unwrap())
    };
    let api = FakeBotApi::start(TOKEN).unwrap();
    let (cache, store) = open();
    let bot = Running::start(config(&api, dir.path()), brain(store));
    let long = "tell me about rivers and the sea and the rain ".repeat(6);
    api.push_text(1, &long);
    api.wait_for(1, 1, WAIT);
    api.push_text(2, "something else entirely, about mountains");
    api.wait_for(2, 1, WAIT);
    api.push_text(1, "and then?");
    api.wait_for(1, 2, WAIT);
    let hits = |c: &prompt_cache::PromptCache| {
        let s = c.stats();
        (
            s.ram_hits.load(Ordering::Relaxed),
            s.disk_hits.load(Ordering::Relaxed),
        )
    };
    assert_eq!(hits(&cache), (1, 0), "chat 1 came back to a taken slot");
    bot.stop().unwrap();
    cache.flush();

    let (cache, store) = open();
    let _bot = Running::start(config(&api, dir.path()), brain(store));
    api.push_text(1, "and after that?");
    api.wait_for(1, 3, WAIT);
    assert_eq!(hits(&cache), (0, 1), "from the file, after the restart");
}
