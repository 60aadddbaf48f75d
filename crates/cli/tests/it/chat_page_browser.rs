//! The chat page at `/` in headless Chromium, driven through chromedriver
//! (WebDriver, via `fantoccini`), against `hearth serve --models` holding
//! the real 270M, a second chat model and the tiny vision model:
//!
//! - type a message and see tokens arrive before the reply ends; Stop it
//!   mid-reply (Esc); Regenerate; edit the question and resend; reload and
//!   find the conversation; rename one conversation and delete another;
//! - switch model between two loaded files; attach an image on the vision
//!   model and a voice note on the audio one (refused, with the reason, on
//!   a model without the tower);
//! - replies whose text is `<img src=x onerror=alert(1)>` and
//!   `[x](javascript:alert(1))` (the real model held to that text by a
//!   regex) render as inert text: no dialog, no image, no script, no link;
//! - replies that froze the page's first renderer (100k backticks or `[`,
//!   100k nested quotes) are drawn, their text kept;
//! - a guard switched on shows its trace folded under the reply;
//! - with `--api-key`, the page asks for the key once and keeps it;
//! - on a server started with two `--lora` adapters, the settings list
//!   them (the server's scale as placeholder, the file as label) and a
//!   scale typed there goes in the request's `lora`, with every adapter;
//!   none typed, no `lora`; a model without adapters shows no such group;
//! - the page's weight on a cold load, stated; screenshots at 1280 and 360
//!   px wide (into docs/img with HEARTH_UPDATE_SCREENSHOTS=1, else beside
//!   the target folder).
//!
//! Slow and needs Chromium, so it is `#[ignore]`d: `scripts/test-browser.sh`
//! runs it. Without `chromedriver` on PATH it says so and checks nothing.

use crate::serve_common;

use fantoccini::actions::{InputSource, KeyAction, KeyActions};
use fantoccini::key::Key;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};
use serve_common::{serve_models, tiny_fixture, Server, TINY};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn on_path(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// Kills the chromedriver this test started, however the test ends.
struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The real 270M (by its cache name, so it is listed as `gemma3-270m`), the
/// tiny Gemma 3 as a second chat model, and the tiny vision and audio
/// models, each with its projector in a folder of its own.
fn models_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let link = |from: &Path, to: &str| {
        let to = dir.path().join(to);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(from, to).unwrap();
    };
    link(&serve_common::real_model(), "gemma-3-270m-q4_k_m.gguf");
    link(&tiny_fixture("gemma3/model-q8_0.gguf"), "tiny-gemma3.gguf");
    link(
        &tiny_fixture("gemma3_vision/model-f32.gguf"),
        "vision/model-f32.gguf",
    );
    link(
        &tiny_fixture("gemma3_vision/mmproj-f32.gguf"),
        "vision/mmproj-f32.gguf",
    );
    link(
        &tiny_fixture("gemma4_audio/model-f32.gguf"),
        "audio/model-f32.gguf",
    );
    link(
        &tiny_fixture("gemma4_audio/mmproj-f32.gguf"),
        "audio/mmproj-f32.gguf",
    );
    dir
}

async fn connect(port: u16) -> Client {
    let mut opts = json!({
        "args": ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                 "--disable-gpu", "--window-size=1280,900"]
    });
    if let Some(chromium) = on_path("chromium") {
        opts["binary"] = chromium.display().to_string().into();
    }
    let mut caps = serde_json::Map::new();
    caps.insert("goog:chromeOptions".into(), opts);
    let mut builder = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new());
    builder.capabilities(caps);
    let start = Instant::now();
    loop {
        match builder.connect(&format!("http://127.0.0.1:{port}")).await {
            Ok(c) => return c,
            Err(_) if start.elapsed() < Duration::from_secs(30) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("cannot reach chromedriver: {e}"),
        }
    }
}

async fn js(c: &Client, script: &str) -> Value {
    c.execute(script, vec![]).await.expect(script)
}

/// Wait until `script` returns `true`.
async fn until(c: &Client, what: &str, limit: Duration, script: &str) {
    let start = Instant::now();
    while js(c, script).await != json!(true) {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn press(c: &Client, key: Key) {
    let a = KeyActions::new("keyboard".into())
        .then(KeyAction::Down { value: key.into() })
        .then(KeyAction::Up { value: key.into() });
    c.perform_actions(a).await.expect("key actions");
}

async fn type_message(c: &Client, text: &str) {
    let input = c.find(Locator::Id("input")).await.unwrap();
    input.click().await.unwrap();
    input.send_keys(text).await.unwrap();
    press(c, Key::Enter).await;
}

async fn choose_model(c: &Client, id: &str) {
    let script = format!(
        "const s=document.getElementById('model'); s.value={id:?}; \
         s.dispatchEvent(new Event('change')); return s.value"
    );
    assert_eq!(js(c, &script).await, json!(id));
}

async fn set_setting(c: &Client, id: &str, value: &str) {
    let script = format!(
        "const e=document.getElementById({id:?}); e.value={value:?}; \
         e.dispatchEvent(new Event('input', {{bubbles: true}})); return e.value"
    );
    js(c, &script).await;
}

const BUSY: &str = "return !document.getElementById('stop').hidden";
const IDLE: &str = "return document.getElementById('stop').hidden";
const LAST: &str = "const m=[...document.querySelectorAll('.msg.assistant')].pop();";

async fn last_reply(c: &Client) -> Value {
    js(
        c,
        &format!(
            "{LAST} return m ? {{text: m.querySelector('.body').textContent, \
             stats: (m.querySelector('.stats')||{{}}).textContent || '', \
             who: m.querySelector('.who').textContent, \
             error: (m.querySelector('.err')||{{}}).textContent || ''}} : null"
        ),
    )
    .await
}

/// Wait until the last reply is finished: Stop hidden, its stats shown.
async fn wait_finished(c: &Client, what: &str) {
    let script = format!(
        "{LAST} return !!m && document.getElementById('stop').hidden && !!m.querySelector('.stats')"
    );
    until(c, what, Duration::from_secs(60), &script).await;
}

/// A new chat on `model`.
async fn new_chat(c: &Client, model: &str) {
    c.find(Locator::Id("new"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    choose_model(c, model).await;
}

/// In a new chat on `model`, attach `file` and ask `prompt`; the reply,
/// which must carry no error.
async fn ask_with_attachment(c: &Client, model: &str, file: &Path, prompt: &str) -> Value {
    new_chat(c, model).await;
    let attach = js(c, "return document.getElementById('attach').disabled").await;
    assert_eq!(attach, json!(false), "{model} takes no attachment");
    let input = c.find(Locator::Id("file")).await.unwrap();
    let path = file.canonicalize().unwrap();
    input.send_keys(path.to_str().unwrap()).await.unwrap();
    let one_chip = "return document.querySelectorAll('#attachments .chip').length === 1";
    until(c, "the attachment", Duration::from_secs(10), one_chip).await;
    type_message(c, prompt).await;
    wait_finished(c, "the reply to the attachment").await;
    let reply = last_reply(c).await;
    assert_eq!(reply["error"], "", "{reply}");
    reply
}

/// The next request the page sends carries `extra` (the page has no field
/// for a grammar; the test adds one so the real model writes `text`).
async fn hold_next_request(c: &Client, regex: &str) {
    let script = format!(
        "const orig=window.fetch; window.fetch=(url,init)=>{{ \
           if(init&&init.body&&String(url).includes('/chat/completions')){{ \
             const b=JSON.parse(init.body); b.regex={regex:?}; b.temperature=0; \
             init={{...init, body: JSON.stringify(b)}}; window.fetch=orig; }} \
           return orig(url,init); }}; return true"
    );
    js(c, &script).await;
}

async fn assert_inert(c: &Client, shown: &str) {
    let probe = js(
        c,
        &format!(
            "{LAST} const b=m.querySelector('.body'); return {{ \
               text: b.textContent, pwned: typeof window.__pwned, \
               images: b.querySelectorAll('img').length, \
               scripts: document.scripts.length, \
               handlers: [...document.querySelectorAll('*')].filter(e=>[...e.attributes].some(a=>a.name.startsWith('on'))).length, \
               js_links: [...document.querySelectorAll('a')].filter(a=>/^\\s*javascript:/i.test(a.getAttribute('href')||'')).length }}"
        ),
    )
    .await;
    assert!(
        probe["text"].as_str().unwrap().contains(shown),
        "not shown as text: {probe}"
    );
    assert_eq!(probe["pwned"], "undefined", "{probe}");
    assert_eq!(probe["images"], 0, "{probe}");
    assert_eq!(probe["scripts"], 1, "{probe}");
    assert_eq!(probe["handlers"], 0, "{probe}");
    assert_eq!(probe["js_links"], 0, "{probe}");
    let alert = c.get_alert_text().await;
    assert!(
        matches!(&alert, Err(e) if e.is_no_such_alert()),
        "an alert is open: {alert:?}"
    );
}

async fn screenshot(c: &Client, width: u32, height: u32, name: &str) {
    c.set_window_size(width, height).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let png = c.screenshot().await.unwrap();
    assert!(png.starts_with(b"\x89PNG"));
    let dir = if std::env::var_os("HEARTH_UPDATE_SCREENSHOTS").is_some() {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/img")
    } else {
        Path::new(env!("CARGO_TARGET_TMPDIR")).to_path_buf()
    };
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, &png).unwrap();
    println!("screenshot: {}", path.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs chromium + chromedriver: run scripts/test-browser.sh"]
async fn chat_page_end_to_end() {
    let Some(chromedriver) = on_path("chromedriver") else {
        println!(
            "SKIPPED chat_page_browser: chromedriver is not on PATH \
             (scripts/install-chromium.sh installs it; scripts/test-browser.sh runs this)"
        );
        return;
    };
    let dir = models_dir();
    let server = serve_models(dir.path(), &["--max-loaded", "2"]);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap();
    let _driver = Driver(
        Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver"),
    );
    let c = connect(port).await;
    let url = format!("http://{}/", server.addr);
    c.goto(&url).await.unwrap();
    until(
        &c,
        "the model list",
        Duration::from_secs(10),
        "return document.getElementById('model').options.length === 4",
    )
    .await;

    the_cold_load_is_light(&c).await;
    tokens_stream_until_stopped(&c).await;
    regenerate_replaces_the_reply(&c).await;
    an_edited_question_is_answered_again(&c).await;
    // Reload: the conversation is still there.
    c.refresh().await.unwrap();
    until(&c, "the saved conversation", Duration::from_secs(10),
        "return document.querySelectorAll('.msg').length === 2 && \
         document.getElementById('model').options.length === 4 && \
         document.querySelector('#convs [aria-current=true] .title').textContent.startsWith('Tell me a long story')").await;
    another_model_answers_in_the_same_conversation(&c, &server).await;
    attachments_go_to_the_models_with_a_tower(&c).await;
    a_guard_trace_folds_under_the_reply(&c).await;
    hostile_replies_render_inert(&c).await;
    replies_that_froze_the_first_renderer_are_drawn(&c).await;
    conversations_are_renamed_and_deleted(&c).await;
    a_model_without_adapters_shows_none(&c).await;
    lora_scales_go_in_the_request(&c).await;
    the_key_is_asked_for_once(&c, dir.path()).await;
    c.goto(&url).await.unwrap();
    until(
        &c,
        "the first server's page",
        Duration::from_secs(10),
        "return document.getElementById('model').options.length === 4",
    )
    .await;

    // Screenshots, on a conversation with a little of everything.
    js(
        &c,
        "document.querySelector('#convs li:last-child .title').click(); return true",
    )
    .await;
    screenshot(&c, 1280, 900, "chat-page-1280.png").await;
    screenshot(&c, 360, 740, "chat-page-360.png").await;
    c.close().await.unwrap();
}

/// The page's weight on this cold load: the document and everything it
/// fetched (it fetches only the model list).
async fn the_cold_load_is_light(c: &Client) {
    let weight = js(
        c,
        "return performance.getEntriesByType('navigation').concat(performance.getEntriesByType('resource')) \
         .reduce((n,e)=>n+(e.transferSize||e.encodedBodySize||0),0)",
    )
    .await;
    let bytes = weight.as_f64().unwrap();
    println!("page weight, cold load: {bytes} bytes");
    assert!(bytes > 10_000.0 && bytes < 300_000.0, "{bytes}");
}

/// Type, see tokens arrive while the reply is still running, Stop (Esc):
/// the reply says it was stopped and keeps its text.
async fn tokens_stream_until_stopped(c: &Client) {
    choose_model(c, "gemma3-270m").await;
    set_setting(c, "s-max_tokens", "400").await;
    type_message(
        c,
        "Tell me a long story about a dragon who learns to bake bread.",
    )
    .await;
    until(c, "the reply to start", Duration::from_secs(60), &format!(
        "{LAST} return !!m && m.querySelector('.body').textContent.length > 0 && !document.getElementById('stop').hidden"
    )).await;
    let early = last_reply(c).await["text"].as_str().unwrap().len();
    until(c, "more tokens", Duration::from_secs(30), &format!(
        "{LAST} return m.querySelector('.body').textContent.length > {early} && !document.getElementById('stop').hidden"
    )).await;
    assert_eq!(js(c, BUSY).await, json!(true), "still streaming");
    press(c, Key::Escape).await;
    until(c, "the stop", Duration::from_secs(10), IDLE).await;
    let stopped = last_reply(c).await;
    assert!(
        stopped["stats"].as_str().unwrap().contains("stopped"),
        "{stopped}"
    );
    assert!(!stopped["text"].as_str().unwrap().is_empty());
}

/// Regenerate: a new, complete reply in its place.
async fn regenerate_replaces_the_reply(c: &Client) {
    set_setting(c, "s-max_tokens", "12").await;
    c.find(Locator::Css(".regen"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until(c, "the regenerated reply", Duration::from_secs(60), &format!(
        "{LAST} return document.getElementById('stop').hidden && !!m.querySelector('.stats') && /reply tokens/.test(m.querySelector('.stats').textContent)"
    )).await;
    let regenerated = last_reply(c).await;
    assert!(
        regenerated["stats"].as_str().unwrap().contains("tokens/s"),
        "{regenerated}"
    );
    assert_eq!(
        js(c, "return document.querySelectorAll('.msg').length").await,
        json!(2)
    );
}

/// Edit the question and send it again: the reply after it is replaced.
async fn an_edited_question_is_answered_again(c: &Client) {
    js(c, "[...document.querySelectorAll('.msg.user button')].find(b=>b.textContent==='Edit').click(); return true").await;
    let area = c.find(Locator::Css(".edit textarea")).await.unwrap();
    area.clear().await.unwrap();
    area.send_keys("Tell me a long story about a dragon who learns to sing.")
        .await
        .unwrap();
    js(
        c,
        "document.querySelector('.edit button.primary').click(); return true",
    )
    .await;
    until(c, "the reply to the edited question", Duration::from_secs(60), &format!(
        "{LAST} return document.getElementById('stop').hidden && !!m && !!m.querySelector('.stats') && document.querySelectorAll('.msg').length === 2"
    )).await;
    assert_eq!(
        js(
            c,
            "return document.querySelector('.msg.user .body').textContent"
        )
        .await,
        json!("Tell me a long story about a dragon who learns to sing.")
    );
}

/// Another loaded model, in the same conversation: it answers, and the
/// server holds both models.
async fn another_model_answers_in_the_same_conversation(c: &Client, server: &Server) {
    choose_model(c, "tiny-gemma3").await;
    type_message(c, "hello").await;
    until(
        c,
        "the tiny model's reply",
        Duration::from_secs(30),
        &format!(
            "{LAST} return document.getElementById('stop').hidden && !!m.querySelector('.stats')"
        ),
    )
    .await;
    let tiny = last_reply(c).await;
    assert_eq!(tiny["who"], "tiny-gemma3", "{tiny}");
    assert_eq!(tiny["error"], "", "{tiny}");
    let ps = server.request("GET", "/api/ps", &[], b"").json();
    assert_eq!(ps["models"].as_array().unwrap().len(), 2, "{ps}");
}

/// No tower, no attachment, and the page says why; the vision model takes
/// an image, the audio model a voice note.
async fn attachments_go_to_the_models_with_a_tower(c: &Client) {
    let why = js(c, "return [document.getElementById('attach').disabled, document.getElementById('attach-why').textContent]").await;
    assert_eq!(why[0], true);
    assert!(
        why[1].as_str().unwrap().contains("vision or audio"),
        "{why}"
    );

    let png = tiny_fixture("gemma3_vision/img_a.png");
    ask_with_attachment(c, "vision/model-f32", &png, "What is in this picture?").await;
    let images = js(
        c,
        "return document.querySelectorAll('.msg.user img.att').length",
    )
    .await;
    assert_eq!(images, json!(1));
    let wav = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/audio/speech.wav");
    let heard = ask_with_attachment(c, "audio/model-f32", &wav, "Transcribe this.").await;
    assert!(
        heard["stats"].as_str().unwrap().contains("prompt tokens"),
        "{heard}"
    );
    let note = js(
        c,
        "return document.querySelector('.msg.user .body').textContent",
    )
    .await;
    assert!(
        note.as_str().unwrap().starts_with("Voice note: speech.wav"),
        "{note}"
    );
}

/// A guard switched on in the settings: its trace folds under the reply.
/// The conversation is deleted afterwards.
async fn a_guard_trace_folds_under_the_reply(c: &Client) {
    new_chat(c, "gemma3-270m").await;
    js(
        c,
        "const g=document.getElementById('g-calc'); g.checked=true; \
            g.dispatchEvent(new Event('input', {bubbles: true})); return true",
    )
    .await;
    set_setting(c, "s-max_tokens", "24").await;
    type_message(c, "What is 12 times 7?").await;
    wait_finished(c, "the guarded reply").await;
    let guarded = js(
        c,
        &format!(
            "{LAST} return [m.querySelector('.err') ? m.querySelector('.err').textContent : '', \
         [...m.querySelectorAll('details summary')].map(s=>s.textContent), \
         (m.querySelector('details pre')||{{}}).textContent || '']"
        ),
    )
    .await;
    assert_eq!(guarded[0], "", "{guarded}");
    assert_eq!(guarded[1], json!(["Guard trace"]), "{guarded}");
    assert!(guarded[2].as_str().unwrap().contains("calc"), "{guarded}");
    js(
        c,
        "document.querySelector('#convs li:first-child button[title=Delete]').click(); return true",
    )
    .await;
}

/// Hostile replies, written by the real model held to them by a regex,
/// render as inert text, and still do after a reload.
async fn hostile_replies_render_inert(c: &Client) {
    new_chat(c, "gemma3-270m").await;
    for (regex, shown) in [
        (
            r"<img src=x onerror=alert\(1\)>",
            "<img src=x onerror=alert(1)>",
        ),
        (
            r"\[x\]\(javascript:alert\(1\)\)",
            "[x](javascript:alert(1))",
        ),
    ] {
        hold_next_request(c, regex).await;
        type_message(c, "Say it.").await;
        wait_finished(c, "the hostile reply").await;
        assert_inert(c, shown).await;
    }
    c.refresh().await.unwrap();
    until(
        c,
        "the page again",
        Duration::from_secs(10),
        "return document.querySelectorAll('.msg').length === 4",
    )
    .await;
    assert_inert(c, "[x](javascript:alert(1))").await;
}

/// Replies that froze the page's first renderer (a lazy regex took
/// minutes on a line of backticks; a line of `>` nested a quote per
/// character and overflowed the stack): each is drawn within the driver's
/// script timeout, its text kept, its quotes nested 8 deep.
async fn replies_that_froze_the_first_renderer_are_drawn(c: &Client) {
    let drawn = js(
        c,
        "const box=document.createElement('div'), n=100000; \
         return ['a'+'`'.repeat(n), '`'.repeat(n), '['.repeat(n), '>'.repeat(n)+' x', \
                 'x'.repeat(n), '**a '.repeat(n/4), '> '.repeat(n/2)+'x'].map(t=>{ \
           fillBody(box,{role:'assistant',content:t}); \
           return [box.textContent.length, box.querySelectorAll('blockquote').length]; })",
    )
    .await;
    for (i, shown) in drawn.as_array().unwrap().iter().enumerate() {
        let (text, quotes) = (shown[0].as_u64().unwrap(), shown[1].as_u64().unwrap());
        assert!(i == 1 || text >= 50_000, "case {i}: {drawn}");
        assert!(quotes <= 8, "case {i}: {drawn}");
    }
}

/// Rename one conversation and delete another; the list after a reload
/// shows both.
async fn conversations_are_renamed_and_deleted(c: &Client) {
    js(
        c,
        "document.querySelector('#convs li:first-child button[title=Rename]').click(); return true",
    )
    .await;
    // The field opens focused with the old name selected: typing replaces it.
    c.find(Locator::Css("#convs input")).await.unwrap();
    let mut typing = KeyActions::new("keyboard".into());
    for ch in "Hostile replies".chars() {
        typing = typing
            .then(KeyAction::Down { value: ch })
            .then(KeyAction::Up { value: ch });
    }
    c.perform_actions(typing).await.unwrap();
    press(c, Key::Enter).await;
    until(c, "the new name", Duration::from_secs(5),
        "return document.querySelector('#convs li:first-child .title').textContent === 'Hostile replies'").await;
    js(c, "[...document.querySelectorAll('#convs li')].find(li=>li.textContent.startsWith('What is in')).querySelector('button[title=Delete]').click(); return true").await;
    until(
        c,
        "the deletion",
        Duration::from_secs(5),
        "return document.querySelectorAll('#convs li').length === 3",
    )
    .await;
    c.refresh().await.unwrap();
    until(c, "the list after a reload", Duration::from_secs(10),
        "return [...document.querySelectorAll('#convs .title')].map(b=>b.textContent).join('|').startsWith('Hostile replies|Transcribe this.|Tell me a long story')").await;
}

/// With --api-key (a second server on the models in `dir`), the page asks
/// for the key once and keeps it across a reload.
async fn the_key_is_asked_for_once(c: &Client, dir: &Path) {
    let keyed = serve_models(dir, &["--api-key", "sekret"]);
    c.goto(&format!("http://{}/", keyed.addr)).await.unwrap();
    until(
        c,
        "the key dialog",
        Duration::from_secs(10),
        "return document.getElementById('key-dialog').open",
    )
    .await;
    c.find(Locator::Id("key-input"))
        .await
        .unwrap()
        .send_keys("sekret")
        .await
        .unwrap();
    c.find(Locator::Id("key-save"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until(
        c,
        "the models behind the key",
        Duration::from_secs(10),
        "return document.getElementById('model').options.length === 4",
    )
    .await;
    c.refresh().await.unwrap();
    until(c, "the models after a reload", Duration::from_secs(10),
        "return document.getElementById('model').options.length === 4 && !document.getElementById('key-dialog').open").await;
    drop(keyed);
}

/// From now on the page's requests are recorded: `window.__sent` holds
/// every body it sends, `window.__asked` every `/lora-adapters` it has
/// read the answer of.
async fn record_requests(c: &Client) {
    js(
        c,
        "window.__sent=[]; window.__asked=[]; const orig=window.fetch; \
         window.fetch=async (url,init)=>{ \
           if(init&&init.body) window.__sent.push(JSON.parse(init.body)); \
           const r=await orig(url,init); \
           if(String(url).includes('/lora-adapters')){ await r.clone().text(); window.__asked.push(String(url)); } \
           return r; }; return true",
    )
    .await;
}

/// Open (or close) the settings panel by its button.
async fn toggle_settings(c: &Client) {
    c.find(Locator::Id("settings-btn"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
}

/// The settings open on a model without adapters: the page asks the
/// server for them and shows no adapters group.
async fn a_model_without_adapters_shows_none(c: &Client) {
    until(
        c,
        "the model list",
        Duration::from_secs(10),
        "return document.getElementById('model').options.length === 4",
    )
    .await;
    record_requests(c).await;
    toggle_settings(c).await;
    until(
        c,
        "the adapters' answer",
        Duration::from_secs(30),
        "return window.__asked.length === 1 && !document.getElementById('settings').hidden",
    )
    .await;
    // The answer is drawn just after it is read.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let shown = js(
        c,
        "const f=document.getElementById('adapters'); \
         return [f.hidden, f.offsetParent === null, f.querySelectorAll('input').length]",
    )
    .await;
    assert_eq!(shown, json!([true, true, 0]), "{shown}");
    toggle_settings(c).await;
}

/// A server whose model has two adapters (the second off): the settings
/// list both; a scale typed for the second goes in the request with the
/// first at the server's scale; emptied again, no `lora` is sent.
async fn lora_scales_go_in_the_request(c: &Client) {
    let a = tiny_fixture("gemma3/lora_a");
    let b = format!("{}:0", tiny_fixture("gemma3/lora_b-f32.gguf").display());
    let server = Server::start(TINY, &["--lora", a.to_str().unwrap(), "--lora", &b]);
    c.goto(&format!("http://{}/", server.addr)).await.unwrap();
    until(
        c,
        "the adapters server's model",
        Duration::from_secs(10),
        "return document.getElementById('model').options.length === 1",
    )
    .await;
    record_requests(c).await;
    toggle_settings(c).await;
    until(
        c,
        "the adapters group",
        Duration::from_secs(30),
        "const f=document.getElementById('adapters'); \
         return !f.hidden && f.offsetParent !== null && f.querySelectorAll('input').length === 2",
    )
    .await;
    let listed = js(
        c,
        "return [...document.querySelectorAll('#adapters label')].map(l=>{ \
           const i=l.querySelector('input'); return [l.textContent, i.id, i.placeholder, i.value]; })",
    )
    .await;
    let want = json!([
        ["lora_a", "lora-0", "1", ""],
        ["lora_b-f32.gguf", "lora-1", "0", ""]
    ]);
    assert_eq!(listed, want, "{listed}");
    set_setting(c, "s-max_tokens", "4").await;
    let scale = c.find(Locator::Id("lora-1")).await.unwrap();
    scale.send_keys("0.5").await.unwrap();
    let sent = sent_chat(c, "hello").await;
    let want = json!([{"id": 0, "scale": 1}, {"id": 1, "scale": 0.5}]);
    assert_eq!(sent["lora"], want, "{sent}");
    set_setting(c, "lora-1", "").await;
    let sent = sent_chat(c, "again").await;
    assert!(sent.get("lora").is_none(), "{sent}");
    toggle_settings(c).await;
    drop(server);
}

/// Send `text`, wait for the reply, which must carry no error: the body of
/// the chat request the page sent for it.
async fn sent_chat(c: &Client, text: &str) -> Value {
    type_message(c, text).await;
    wait_finished(c, "the reply on the adapters' model").await;
    let reply = last_reply(c).await;
    assert_eq!(reply["error"], "", "{reply}");
    assert!(!reply["stats"].as_str().unwrap().is_empty(), "{reply}");
    js(
        c,
        "return window.__sent.filter(b=>Array.isArray(b.messages)).pop()",
    )
    .await
}
