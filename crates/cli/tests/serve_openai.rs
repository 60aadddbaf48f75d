//! End to end: the real binary serves the real model, and the official
//! `openai` Python client (from PyPI, in a venv under target/) drives it
//! through `crates/server/tests/openai_client.py`.

mod serve_common;

use serve_common::{python_with, real_model, Server};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

#[test]
fn the_openai_python_client_drives_the_real_model() {
    let model = real_model();
    let python = python_with(&[("openai", "openai>=1.40,<3")]);
    let ctx = "512";
    let key = "hearth-test-key";
    let mut s = Server::start(
        model.to_str().expect("UTF-8 model path"),
        &["--parallel", "2", "--ctx", ctx, "--api-key", key, "-t", "2"],
    );
    let script = Path::new(ROOT).join("crates/server/tests/openai_client.py");
    let out = Command::new(&python)
        .arg(&script)
        .env("HEARTH_BASE_URL", format!("http://{}/v1", s.addr))
        .env("HEARTH_API_KEY", key)
        .env("HEARTH_MODEL_ID", "gemma-3-270m-q4_k_m")
        .env("HEARTH_CTX", ctx)
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_API_KEY")
        .output()
        .expect("run openai_client.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "openai_client.py failed ({:?})\nstdout:\n{stdout}\nstderr:\n{stderr}\nserver:\n{}",
        out.status,
        s.stderr()
    );
    assert!(stdout.contains("all openai client checks passed"));
    s.assert_alive();
    s.sigterm();
    let st = s.wait_exit(Duration::from_secs(30));
    assert!(st.success(), "server exit {st:?}");
}
