//! Embeddings through the clients people already run: the official `openai`
//! client's `embeddings.create` (a string, a list, token ids, `dimensions`,
//! base64 and float), the `ollama` client's `embed` / `embeddings` and
//! `cohere`'s `rerank` (v1 and v2) against `hearth serve` running the tiny
//! EmbeddingGemma from its sentence-transformers directory, compared with
//! sentence-transformers' vectors and similarities, plus the bad inputs the
//! server must refuse and survive (`crates/server/tests/embeddings_client.py`).

use crate::serve_common;

use serve_common::{python_with, Server};
use std::path::Path;
use std::process::Command;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

#[test]
fn the_openai_and_ollama_clients_embed_as_sentence_transformers_does() {
    let python = python_with(&[
        ("openai", "openai>=1.40,<3"),
        ("ollama", "ollama>=0.6,<1"),
        ("cohere", "cohere>=5,<6"),
    ]);
    let fixture = format!("{ROOT}/tests/fixtures/tiny/embeddinggemma");
    let mut server = Server::start(&fixture, &["--ctx", "320", "-t", "2", "--queue", "16"]);
    let out = Command::new(&python)
        .arg(Path::new(ROOT).join("crates/server/tests/embeddings_client.py"))
        .env("HEARTH_HOST", format!("http://{}", server.addr))
        .env("HEARTH_MODEL_ID", "embeddinggemma")
        .env("HEARTH_FIXTURE", &fixture)
        .env("HEARTH_CTX", "320")
        .env_remove("OLLAMA_HOST")
        .env_remove("OPENAI_BASE_URL")
        .output()
        .expect("run the client script");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("all embeddings client checks passed"),
        "embeddings_client.py failed ({:?})\nstdout:\n{stdout}\nstderr:\n{}\nserver:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        server.stderr()
    );
    server.assert_alive();
}
