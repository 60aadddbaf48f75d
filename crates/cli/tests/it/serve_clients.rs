//! The clients people already run, unchanged, against `hearth serve`: the
//! official `ollama` and `anthropic` Python clients, OpenAI's Agents SDK,
//! instructor and LangChain (from PyPI, in the venv under target/) on the
//! real model, and on the
//! tiny vision model for images, through
//! `crates/server/tests/{ollama,anthropic,agents,frameworks}_client.py`.

use crate::serve_common;

use serve_common::{python_with, real_model, Server};
use std::path::Path;
use std::process::Command;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
const KEY: &str = "hearth-clients-key";

/// Run one client script against the two servers; its stdout must end with
/// `all NAME client checks passed`.
fn run_script(name: &str, text: &Server, vision: &Server, model: &Path) {
    let python = python_with(&[
        ("ollama", "ollama>=0.6,<1"),
        ("anthropic", "anthropic>=0.70,<3"),
        ("agents", "openai-agents>=0.24,<1"),
        ("instructor", "instructor>=1.17,<2"),
        ("langchain.agents", "langchain>=1,<2"),
        ("langchain_openai", "langchain-openai>=1,<2"),
    ]);
    let out = Command::new(&python)
        .arg(Path::new(ROOT).join(format!("crates/server/tests/{name}_client.py")))
        .env("HEARTH_HOST", format!("http://{}", text.addr))
        .env("HEARTH_BASE_URL", format!("http://{}/v1", text.addr))
        .env("HEARTH_MODEL_ID", "gemma-3-270m-q4_k_m")
        .env("HEARTH_API_KEY", KEY)
        .env("HEARTH_MODEL_FILE", model)
        .env("HEARTH_VISION_HOST", format!("http://{}", vision.addr))
        .env(
            "HEARTH_IMAGE",
            format!("{ROOT}/tests/fixtures/tiny/gemma3_vision/img_a.png"),
        )
        .env_remove("OLLAMA_HOST")
        .env_remove("ANTHROPIC_BASE_URL")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_API_KEY")
        .output()
        .expect("run the client script");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(&format!("all {name} client checks passed")),
        "{name}_client.py failed ({:?})\nstdout:\n{stdout}\nstderr:\n{}\nserver:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        text.stderr()
    );
}

#[test]
fn the_clients_and_frameworks_drive_the_real_model() {
    let model = real_model();
    let mut text = Server::start(
        model.to_str().expect("UTF-8 model path"),
        &[
            "--parallel",
            "2",
            "--ctx",
            "1024",
            "--api-key",
            KEY,
            "-t",
            "2",
            // The Ollama client's pull checks; the vision server runs without it.
            "--allow-pull",
        ],
    );
    let vision_dir = format!("{ROOT}/tests/fixtures/tiny/gemma3_vision/");
    let mut vision = Server::start(&vision_dir, &["--ctx", "128", "--api-key", KEY]);
    run_script("ollama", &text, &vision, &model);
    run_script("anthropic", &text, &vision, &model);
    // An agent with a tool and a typed output, through both of the SDK's
    // models (issue 92).
    run_script("agents", &text, &vision, &model);
    // instructor's typed extraction and a LangChain agent whose typed
    // response is the provider's structured output beside its tools.
    run_script("frameworks", &text, &vision, &model);
    text.assert_alive();
    vision.assert_alive();
}
