//! End to end: structured output on the real model through the official
//! `openai` Python client, with `jsonschema` validating every answer
//! (`crates/server/tests/structured_client.py`): 33 JSON Schemas, Pydantic
//! models through the client's `parse`, GBNF and regex, tool calls (required,
//! named, auto, round trips streamed and not) and bad constraints.

use crate::serve_common;

use serve_common::{python_with, real_model, Server};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

#[test]
fn structured_output_always_parses_and_validates() {
    let model = real_model();
    let python = python_with(&[
        ("openai", "openai>=1.40,<3"),
        ("jsonschema", "jsonschema>=4.18"),
    ]);
    let mut s = Server::start(
        model.to_str().expect("UTF-8 model path"),
        &["--parallel", "2", "--ctx", "2048", "-t", "2"],
    );
    let script = Path::new(ROOT).join("crates/server/tests/structured_client.py");
    let out = Command::new(&python)
        .arg(&script)
        .env("HEARTH_BASE_URL", format!("http://{}/v1", s.addr))
        .env("HEARTH_MODEL_ID", "gemma-3-270m-q4_k_m")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_API_KEY")
        .output()
        .expect("run structured_client.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "structured_client.py failed ({:?})\nstdout:\n{stdout}\nstderr:\n{stderr}\nserver:\n{}",
        out.status,
        s.stderr()
    );
    assert!(stdout.contains("all structured output checks passed"));
    s.assert_alive();
    s.sigterm();
    let st = s.wait_exit(Duration::from_secs(30));
    assert!(st.success(), "server exit {st:?}");
}
