//! End to end: the real binary serves the real model, and the official
//! `openai` Python client (from PyPI, in a venv under target/) drives it
//! through `crates/server/tests/openai_client.py`.

mod serve_common;

use serve_common::{real_model, Server};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// A venv under target/ with `openai` installed; made once, then reused.
fn python_with_openai() -> PathBuf {
    let venv = Path::new(ROOT).join("target/pyenv");
    let python = venv.join("bin/python");
    let has_openai = |py: &Path| {
        Command::new(py)
            .args(["-c", "import openai"])
            .status()
            .is_ok_and(|s| s.success())
    };
    if python.is_file() && has_openai(&python) {
        return python;
    }
    let st = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .expect("run python3 -m venv");
    assert!(st.success(), "python3 -m venv failed");
    let st = Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "openai>=1.40,<3",
        ])
        .status()
        .expect("run pip");
    assert!(st.success(), "pip install openai failed");
    assert!(has_openai(&python), "openai does not import after install");
    python
}

#[test]
fn the_openai_python_client_drives_the_real_model() {
    let model = real_model();
    let python = python_with_openai();
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
