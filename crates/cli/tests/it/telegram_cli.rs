//! `hearth telegram` on the real model against a local stand-in of the Bot
//! API: it answers, remembers across a restart of the process, stops
//! cleanly on SIGTERM, and refuses to start without a token.

use crate::serve_common;

use bot::fake::FakeBotApi;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const TOKEN: &str = "4242:cli-TEST";

fn start(api: &FakeBotApi, state: &std::path::Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["telegram", "-m"])
        .arg(serve_common::real_model())
        .args([
            "-n",
            "6",
            "--temp",
            "0",
            "-t",
            "2",
            "--request-timeout",
            "2",
        ])
        .args(["--api-url", api.url(), "--state"])
        .arg(state)
        .env("TELEGRAM_BOT_TOKEN", TOKEN)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("hearth runs")
}

/// SIGTERM, then the exit status and what it printed.
fn terminate(child: Child) -> (std::process::ExitStatus, String) {
    let pid = child.id().to_string();
    let _ = Command::new("kill").args(["-TERM", &pid]).status();
    let out = child.wait_with_output().expect("hearth exits");
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_bot_answers_on_the_real_model_and_remembers_after_a_restart() {
    let api = FakeBotApi::start(TOKEN).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let bot = start(&api, dir.path());
    api.push_text(77, "/start");
    api.push_text(77, "The capital of France is");
    let got = api.wait_for(77, 2, Duration::from_secs(120));
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got[0].contains("gemma-3-270m-q4_k_m"), "{}", got[0]);
    assert!(!got[1].trim().is_empty());
    let (status, err) = terminate(bot);
    assert!(status.success(), "{err}");
    assert!(err.contains("stopping"), "{err}");

    let bot = start(&api, dir.path());
    api.push_text(77, "/stats");
    let got = api.wait_for(77, 3, Duration::from_secs(120));
    assert!(
        got[2].contains("Replies: 1") && got[2].contains("Turns remembered: 1"),
        "{}",
        got[2]
    );
    let (status, err) = terminate(bot);
    assert!(status.success(), "{err}");
}

#[test]
fn no_token_is_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["telegram", "-m", "/nonexistent.gguf"])
        .env_remove("TELEGRAM_BOT_TOKEN")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("TELEGRAM_BOT_TOKEN") && err.contains("@BotFather"),
        "{err}"
    );
}
