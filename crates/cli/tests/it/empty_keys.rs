//! An empty key is refused at start, never taken for "no key": a blank
//! `HEARTH_API_KEY` or `--api-key ""` would otherwise open a server its
//! operator meant to lock, and a blank bot token or webhook secret would
//! start a bot that cannot or should not run.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const TINY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/fixtures/tiny/gemma3/model-f32.gguf"
);

/// Run `hearth ARGS` with `envs`; its exit code and stderr. A command that
/// is still running after a minute (it started instead of refusing) is
/// killed and fails the test.
fn refused(args: &[&str], envs: &[(&str, &str)]) -> (i32, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(args)
        .env_remove("HEARTH_API_KEY")
        .env_remove("TELEGRAM_BOT_TOKEN")
        .env_remove("TELEGRAM_WEBHOOK_SECRET")
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("`hearth {}` started instead of refusing", args.join(" "));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status.code().unwrap_or(-1), err)
}

#[test]
fn serve_refuses_an_empty_api_key() {
    let serve = ["serve", "-m", TINY, "--host", "127.0.0.1", "--port", "0"];
    for (flag, env) in [
        (Some(""), None),
        (Some("   "), None),
        (None, Some("")),
        (None, Some(" ")),
    ] {
        let mut args = serve.to_vec();
        if let Some(k) = flag {
            args.extend(["--api-key", k]);
        }
        let envs: Vec<(&str, &str)> = env.map(|v| ("HEARTH_API_KEY", v)).into_iter().collect();
        let (code, err) = refused(&args, &envs);
        assert_eq!(code, 1, "{flag:?} {env:?}: {err}");
        assert!(err.contains("API key is empty"), "{err}");
        assert!(!err.contains("listening on"), "{err}");
    }
}

#[test]
fn telegram_refuses_an_empty_token_or_webhook_secret() {
    // Nothing listens at this Bot API: a bot that started would reach no one.
    let api = ["--api-url", "http://127.0.0.1:9"];
    let (code, err) = refused(
        &["telegram", "-m", TINY, api[0], api[1]],
        &[("TELEGRAM_BOT_TOKEN", " ")],
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("TELEGRAM_BOT_TOKEN is unset or empty"),
        "{err}"
    );
    let (code, err) = refused(
        &[
            "telegram",
            "-m",
            TINY,
            "--webhook-url",
            "https://bot.example/hook",
            "--listen",
            "127.0.0.1:0",
            api[0],
            api[1],
        ],
        &[
            ("TELEGRAM_BOT_TOKEN", "4242:empty-TEST"),
            ("TELEGRAM_WEBHOOK_SECRET", ""),
        ],
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("TELEGRAM_WEBHOOK_SECRET must be 1 to 256"),
        "{err}"
    );
}
