//! The grading page in headless Chromium, driven through chromedriver
//! (WebDriver, via `fantoccini`): grade 3 answers by keyboard, reload and
//! see the progress resume, see markup in answers shown as literal text
//! with no script run, and find 3 FastChat rows in the judgment file.
//!
//! Slow and needs Chromium, so it is `#[ignore]`d: run it with
//! `scripts/test-browser.sh`, which installs Chromium when missing. Without
//! `chromedriver` on PATH the test says so and passes without checking.
//! It saves a screenshot of the page to `<target dir>/grade-page.png`.

use fantoccini::actions::{InputSource, KeyAction, KeyActions};
use fantoccini::key::Key;
use fantoccini::{Client, ClientBuilder, Locator};
use hearth_eval::fastchat::{read_jsonl, AnswerRow, JudgmentRow};
use hearth_eval::grade::{self, GradeConfig};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Appended to every answer: if the page ever parsed an answer as HTML,
/// the script or the image's error handler would set `__pwned` and raise
/// an alert.
const MARKUP: &str = "\n</div><script>window.__pwned=1;alert(1)</script>\
<img src=x onerror=\"window.__pwned=2;alert(2)\"><b>bold?</b>";

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

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Copies the test answers with [`MARKUP`] in every turn.
fn marked_answers(dir: &Path) -> Vec<PathBuf> {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/answers");
    ["gemma-2b-it.jsonl", "gpt-3.5-turbo.jsonl"]
        .iter()
        .map(|name| {
            let (rows, _) = read_jsonl::<AnswerRow>(&data.join(name)).unwrap();
            let mut text = String::new();
            for mut r in rows {
                for t in &mut r.choices[0].turns {
                    t.push_str(MARKUP);
                }
                text.push_str(&serde_json::to_string(&r).unwrap());
                text.push('\n');
            }
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            path
        })
        .collect()
}

async fn press(c: &Client, keys: &[char]) {
    let mut a = KeyActions::new("keyboard".into());
    for &k in keys {
        a = a.then(KeyAction::Down { value: k });
    }
    for &k in keys.iter().rev() {
        a = a.then(KeyAction::Up { value: k });
    }
    c.perform_actions(a).await.expect("key actions");
}

async fn text(c: &Client, css: &str) -> String {
    c.find(Locator::Css(css))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

async fn wait_for_text(c: &Client, css: &str, want: &str) {
    let start = Instant::now();
    loop {
        let got = text(c, css).await;
        if got == want {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{css}: wanted {want:?}, have {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The answer on screen is the literal markup, the DOM has no element made
/// from it, no script of it ran and no alert is open.
async fn assert_inert(c: &Client) {
    let answer = c
        .execute(
            "return document.getElementById('answer').textContent",
            vec![],
        )
        .await
        .unwrap();
    let answer = answer.as_str().unwrap_or_default().to_string();
    assert!(
        answer.ends_with(MARKUP),
        "markup not shown as text: {answer:?}"
    );
    let probe = c
        .execute(
            "return [typeof window.__pwned, document.images.length, \
             document.querySelectorAll('#answer *, #context-answer *, b').length, \
             document.scripts.length]",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(probe, serde_json::json!(["undefined", 0, 0, 1]), "{probe}");
    let alert = c.get_alert_text().await;
    assert!(
        matches!(&alert, Err(e) if e.is_no_such_alert()),
        "an alert is open: {alert:?}"
    );
}

/// Starts chromedriver on a free port and opens a headless Chromium session
/// through it (the system's `chromium` when it is on PATH).
async fn open_browser(chromedriver: &Path) -> (Driver, Client) {
    let port = free_port();
    let driver = Driver(
        Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver"),
    );
    let mut opts = serde_json::json!({
        "args": ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                 "--disable-gpu", "--window-size=1280,1000"]
    });
    if let Some(chromium) = on_path("chromium") {
        opts["binary"] = chromium.display().to_string().into();
    }
    let mut caps = serde_json::Map::new();
    caps.insert("goog:chromeOptions".into(), opts);
    let mut builder = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new());
    builder.capabilities(caps);
    // chromedriver needs a moment before it listens.
    let start = Instant::now();
    let c = loop {
        match builder.connect(&format!("http://127.0.0.1:{port}")).await {
            Ok(c) => break c,
            Err(e) if start.elapsed() < Duration::from_secs(30) => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("cannot reach chromedriver: {e}"),
        }
    };
    (driver, c)
}

/// Grades 3 items: keys 5, 6 and 0 (= 10); Enter saves; the third with a
/// note, saved by Ctrl+Enter from inside the note. Each item's heading as
/// it was shown.
async fn grade_three(c: &Client) -> Vec<String> {
    let mut shown = Vec::new();
    for (k, key) in ['5', '6', '0'].into_iter().enumerate() {
        assert_inert(c).await;
        shown.push(text(c, "#meta").await);
        press(c, &[key]).await;
        let pressed = text(c, "#ratings button[aria-pressed=true]").await;
        let want = if key == '0' {
            "10".to_string()
        } else {
            key.to_string()
        };
        assert_eq!(pressed, want);
        if k == 2 {
            let note = c.find(Locator::Id("note")).await.unwrap();
            note.click().await.unwrap();
            note.send_keys("typed 1 2 3 in the note").await.unwrap();
            press(c, &[Key::Control.into(), Key::Enter.into()]).await;
        } else {
            press(c, &[Key::Enter.into()]).await;
        }
        wait_for_text(c, "#progress-text", &format!("{} / 12 graded", k + 1)).await;
    }
    shown
}

/// Saves a screenshot of the end of the answer (the markup, as text) to
/// `<target dir>/grade-page.png`.
async fn screenshot_answer(c: &Client) {
    c.execute(
        "document.getElementById('answer').scrollIntoView({block: 'end'}); \
         window.scrollBy(0, 140)",
        vec![],
    )
    .await
    .unwrap();
    let png = c.screenshot().await.unwrap();
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap_or(Path::new("target"))
        .join("grade-page.png");
    std::fs::write(&shot, &png).unwrap();
    println!("screenshot: {}", shot.display());
    assert!(png.starts_with(b"\x89PNG"));
}

/// The judgment file holds the 3 grades as FastChat rows, in order, each
/// for the item whose heading was `shown`.
fn assert_three_rows(out: &Path, shown: &[String]) {
    let (rows, torn) = read_jsonl::<JudgmentRow>(out).unwrap();
    assert_eq!(torn, None);
    assert_eq!(rows.len(), 3, "{rows:?}");
    let scores: Vec<f64> = rows.iter().map(|r| r.score).collect();
    assert_eq!(scores, [5.0, 6.0, 10.0]);
    for (r, meta) in rows.iter().zip(shown) {
        assert_eq!(r.judge[0], "human:browser");
        assert!(["gemma-2b-it", "gpt-3.5-turbo"].contains(&r.model.as_str()));
        let want = format!("Question {} · ", r.question_id);
        assert!(meta.starts_with(&want), "{meta} vs {r:?}");
        assert!(meta.ends_with(&format!("turn {}", r.turn)), "{meta}");
    }
    assert_eq!(rows[0].judgment, "human rating");
    assert_eq!(rows[2].judgment, "typed 1 2 3 in the note");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs chromium + chromedriver: run scripts/test-browser.sh"]
async fn grade_three_by_keyboard_then_resume() {
    let Some(chromedriver) = on_path("chromedriver") else {
        println!(
            "SKIPPED grade_browser: chromedriver is not on PATH \
             (scripts/install-chromium.sh installs it; scripts/test-browser.sh runs this)"
        );
        return;
    };

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("model_judgment/human_single.jsonl");
    let server = grade::start(GradeConfig {
        answers: marked_answers(dir.path()),
        out: out.clone(),
        grader: "browser".into(),
        seed: 7,
        port: 0,
    })
    .unwrap();
    let (_driver, c) = open_browser(&chromedriver).await;

    c.goto(&server.url()).await.unwrap();
    wait_for_text(&c, "#progress-text", "0 / 12 graded").await;
    let shown = grade_three(&c).await;

    // Reload: the page resumes from the server's record.
    c.refresh().await.unwrap();
    wait_for_text(&c, "#progress-text", "3 / 12 graded").await;
    assert_inert(&c).await;
    screenshot_answer(&c).await;

    c.close().await.unwrap();
    server.shutdown().unwrap();
    assert_three_rows(&out, &shown);
}
