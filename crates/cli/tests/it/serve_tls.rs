//! `hearth serve --tls-cert … --tls-key …`: the official `openai` client
//! talks to the server over HTTPS with a self-signed certificate it is told
//! to trust (and refuses it when not told); plain HTTP to the port gets a
//! plain 400 saying to use https; a certificate that cannot be read stops
//! the server at start, naming the file.

use crate::serve_common;

use serve_common::{python_with, Server, TINY};
use std::path::Path;
use std::process::Command;

/// A self-signed certificate for 127.0.0.1 and localhost, as PEM files.
fn certificate(dir: &Path) -> (String, String) {
    let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()])
        .expect("a self-signed certificate");
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    std::fs::write(&cert, made.cert.pem()).unwrap();
    std::fs::write(&key, made.key_pair.serialize_pem()).unwrap();
    (
        cert.to_str().unwrap().to_string(),
        key.to_str().unwrap().to_string(),
    )
}

const CLIENT: &str = r#"
import json, ssl, sys, time
import httpx, openai
addr, cert = sys.argv[1], sys.argv[2]
trusted = ssl.create_default_context(cafile=cert)
for _ in range(600):
    try:
        if httpx.get(f"https://{addr}/health", verify=trusted).status_code == 200:
            break
    except httpx.HTTPError:
        pass
    time.sleep(0.1)
client = openai.OpenAI(base_url=f"https://{addr}/v1", api_key="none",
                       http_client=httpx.Client(verify=trusted), max_retries=0)
r = client.chat.completions.create(model="model-f32", max_tokens=4, temperature=0,
                                   messages=[{"role": "user", "content": "hello"}])
models = [m.id for m in client.models.list().data]
untrusted = openai.OpenAI(base_url=f"https://{addr}/v1", api_key="none", max_retries=0)
try:
    untrusted.models.list()
    refused = False
except openai.APIConnectionError:
    refused = True
print(json.dumps({"model": r.model, "tokens": r.usage.completion_tokens,
                  "models": models, "untrusted_refused": refused}))
"#;

#[test]
fn the_openai_client_talks_https_and_plain_http_is_refused() {
    let python = python_with(&[("openai", "openai>=1.40,<3")]);
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = certificate(dir.path());
    let mut server = Server::start_command(
        &[
            "serve",
            "-m",
            TINY,
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "-t",
            "1",
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
        ],
        &[],
    );
    let out = Command::new(&python)
        .args(["-c", CLIENT, &server.addr, &cert])
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "{}\nserver: {}",
        String::from_utf8_lossy(&out.stderr),
        server.stderr()
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["model"], "model-f32", "{v}");
    assert!(v["tokens"].as_u64().unwrap() >= 1, "{v}");
    assert_eq!(v["models"], serde_json::json!(["model-f32"]));
    assert_eq!(v["untrusted_refused"], true, "{v}");

    // Plain HTTP to the TLS port: a readable refusal, and the server goes on.
    let plain = server.request("GET", "/health", &[], b"");
    assert_eq!(plain.status, 400);
    assert!(plain.text().contains("https://"), "{}", plain.text());
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "the server exited"
    );
    assert!(!server.stderr().contains("panicked"), "{}", server.stderr());
}

#[test]
fn an_unreadable_certificate_stops_the_server_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let (_, key) = certificate(dir.path());
    let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args([
            "serve",
            "-m",
            TINY,
            "--port",
            "0",
            "--tls-cert",
            "/no/such/cert.pem",
        ])
        .args(["--tls-key", &key])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/no/such/cert.pem"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}
