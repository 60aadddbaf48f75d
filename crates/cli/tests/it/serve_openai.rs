//! End to end: the real binary serves the real model, and the official
//! `openai` Python client (from PyPI, in a venv under target/) drives it
//! through `crates/server/tests/openai_client.py`.

use crate::serve_common;

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
        // Exact products and an f32 cache, so a decode step computes what a
        // whole-sequence pass does: with 8-bit activations and an f16 cache
        // the two paths round differently and logprobs move by up to ~0.05.
        &[
            "--parallel",
            "2",
            "--ctx",
            ctx,
            "--api-key",
            key,
            "-t",
            "2",
            "--precise",
        ],
    );
    let script = Path::new(ROOT).join("crates/server/tests/openai_client.py");
    let logprobs_out = tempfile::NamedTempFile::new().unwrap();
    let out = Command::new(&python)
        .arg(&script)
        .env("HEARTH_BASE_URL", format!("http://{}/v1", s.addr))
        .env("HEARTH_API_KEY", key)
        .env("HEARTH_MODEL_ID", "gemma-3-270m-q4_k_m")
        .env("HEARTH_CTX", ctx)
        .env("HEARTH_LOGPROBS_OUT", logprobs_out.path())
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
    logprobs_are_the_models(&model, logprobs_out.path());
    s.assert_alive();
    s.sigterm();
    let st = s.wait_exit(Duration::from_secs(30));
    assert!(st.success(), "server exit {st:?}");
}

/// Each log-probability the server returned for a greedy 20-token reply is
/// `hearth logits`' log-softmax for that token at that place, within 1e-3.
fn logprobs_are_the_models(model: &Path, served: &Path) {
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(served).unwrap()).unwrap();
    let ids = |k: &str| -> Vec<u64> {
        v[k].as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect()
    };
    let (prompt, reply) = (ids("prompt"), ids("reply"));
    let logprobs: Vec<f64> = v["logprobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    let all: Vec<String> = prompt
        .iter()
        .chain(&reply[..reply.len() - 1])
        .map(u64::to_string)
        .collect();
    let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["logits", "-m"])
        .arg(model)
        .args([
            "-c",
            "512",
            "-t",
            "2",
            "--precise",
            "--top",
            "1",
            "--ids",
            &all.join(","),
        ])
        .output()
        .expect("run hearth logits");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut worst = 0f64;
    for (j, (&id, &served)) in reply.iter().zip(&logprobs).enumerate() {
        let row = &rows[prompt.len() - 1 + j];
        let top = &row["top"][0];
        assert_eq!(top[0].as_u64(), Some(id), "greedy token {j}: {row}");
        let want = top[1].as_f64().unwrap() - row["logsumexp"].as_f64().unwrap();
        worst = worst.max((want - served).abs());
        assert!(
            (want - served).abs() < 1e-3,
            "token {j}: served {served}, hearth logits {want}"
        );
    }
    eprintln!(
        "logprobs of {} tokens match hearth logits within {worst:.2e}",
        reply.len()
    );
}

/// Responses stored by the server: a conversation chained by
/// `previous_response_id` through the official client, across a restart
/// (the first server killed, as a crash would), then read and deleted.
#[test]
fn stored_responses_chain_a_conversation_across_a_restart() {
    let model = real_model();
    let python = python_with(&[("openai", "openai>=1.40,<3")]);
    let home = tempfile::tempdir().unwrap();
    let state = home.path().join("chain.json");
    let key = "hearth-chain-key";
    let model_arg = model.to_str().expect("UTF-8 model path");
    let start = || {
        Server::start_command(
            &[
                "serve",
                "-m",
                model_arg,
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "-t",
                "2",
                "--api-key",
                key,
            ],
            &[("HEARTH_HOME", home.path().to_str().unwrap())],
        )
    };
    for phase in ["1", "2"] {
        let s = start();
        let out = Command::new(&python)
            .arg(Path::new(ROOT).join("crates/server/tests/responses_chain.py"))
            .arg(phase)
            .env("HEARTH_BASE_URL", format!("http://{}/v1", s.addr))
            .env("HEARTH_API_KEY", key)
            .env("HEARTH_MODEL_ID", "gemma-3-270m-q4_k_m")
            .env("HEARTH_CHAIN_STATE", &state)
            .env_remove("OPENAI_BASE_URL")
            .env_remove("OPENAI_API_KEY")
            .output()
            .expect("run responses_chain.py");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains(&format!("phase {phase} passed")),
            "phase {phase}: {:?}\nstdout:\n{stdout}\nstderr:\n{}\nserver:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            s.stderr()
        );
        // Dropping the server kills it (SIGKILL): what was stored is on disk.
    }
    assert!(home.path().join("responses.jsonl").is_file());
}
