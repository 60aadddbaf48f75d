//! The command lines the deployment files give Hearth really run: the
//! Containerfile's ENTRYPOINT + CMD serve (the model path and port swapped
//! for the tiny fixture and a free port) and its HEALTHCHECK passes against
//! that server and fails against a closed port; the Kubernetes container
//! arguments serve too; Fly's `HEARTH_IDLE_EXIT` is read from the
//! environment and ends the server. The image itself is built and run by
//! `scripts/container.sh`, which needs podman; this catches a flag renamed
//! in the CLI but not in the files, with nothing but the binary.

use crate::serve_common;

use serve_common::{Server, TINY};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

fn repo_file(rel: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The Containerfile's instructions, continuation lines joined, comments
/// dropped: (keyword, rest of the line).
fn instructions(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && current.is_empty()) {
            continue;
        }
        if let Some(head) = trimmed.strip_suffix('\\') {
            current.push_str(head);
            current.push(' ');
            continue;
        }
        current.push_str(trimmed);
        let whole = std::mem::take(&mut current);
        if let Some((kw, rest)) = whole.split_once(char::is_whitespace) {
            out.push((kw.to_uppercase(), rest.trim().to_string()));
        }
    }
    out
}

/// A JSON-array (exec form) instruction argument.
fn exec_form(rest: &str) -> Vec<String> {
    serde_json::from_str(rest).unwrap_or_else(|e| panic!("not an exec-form array: {rest}: {e}"))
}

/// The one instruction `kw` (the last one wins, as in a real build).
fn last(instrs: &[(String, String)], kw: &str) -> String {
    instrs
        .iter()
        .rev()
        .find(|(k, _)| k == kw)
        .map(|(_, r)| r.clone())
        .unwrap_or_else(|| panic!("no {kw} in the Containerfile"))
}

/// `args`, with the image's model path and port swapped for ones this test
/// can use: the fixture, and port 0 (the server prints the real one).
fn localize(args: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(args.len());
    for a in args {
        let prev = out.last().map(String::as_str);
        out.push(match (prev, a.as_str()) {
            (_, "/models/model.gguf") => TINY.to_string(),
            (Some("--port"), _) => "0".to_string(),
            (Some("--host"), _) => "127.0.0.1".to_string(),
            _ => a.clone(),
        });
    }
    out
}

fn health(args: &[String]) -> std::process::ExitStatus {
    health_with(args, None)
}

/// `hearth health ARGS` with HEARTH_API_KEY set to `key` (or unset).
fn health_with(args: &[String], key: Option<&str>) -> std::process::ExitStatus {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hearth"));
    cmd.env_remove("HEARTH_API_KEY");
    if let Some(key) = key {
        cmd.env("HEARTH_API_KEY", key);
    }
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run hearth health")
}

/// The HEALTHCHECK command with its URL's port replaced.
fn healthcheck_at(check: &[String], port: &str) -> Vec<String> {
    assert_eq!(
        check.first().map(String::as_str),
        Some("hearth"),
        "{check:?}"
    );
    check[1..]
        .iter()
        .map(|a| a.replace("127.0.0.1:8080", &format!("127.0.0.1:{port}")))
        .collect()
}

#[test]
fn the_containerfile_command_serves_and_its_healthcheck_probes_it() {
    let instrs = instructions(&repo_file("Containerfile"));
    let from = last(&instrs, "FROM");
    assert_eq!(from, "scratch", "nothing may come from a registry");
    let entry = exec_form(&last(&instrs, "ENTRYPOINT"));
    let cmd = exec_form(&last(&instrs, "CMD"));
    assert_eq!(entry.first().map(String::as_str), Some("hearth"));
    assert!(cmd.contains(&"/models/model.gguf".to_string()), "{cmd:?}");
    let check_line = last(&instrs, "HEALTHCHECK");
    let check = exec_form(
        check_line
            .split_once("CMD ")
            .map(|(_, c)| c)
            .expect("HEALTHCHECK ... CMD [...]"),
    );
    assert!(
        check.iter().any(|a| a.ends_with(":8080/health")),
        "{check:?}"
    );
    let exposed = last(&instrs, "EXPOSE");
    assert_eq!(exposed, "8080");
    assert!(cmd.windows(2).any(|w| w[0] == "--port" && w[1] == "8080"));

    // Prompt states go to the data volume, which the image makes writable
    // by its user.
    let cache_dir = instrs
        .iter()
        .filter(|(k, _)| k == "ENV")
        .find_map(|(_, v)| v.strip_prefix("HEARTH_CACHE_DIR="))
        .expect("ENV HEARTH_CACHE_DIR=... in the Containerfile")
        .to_string();
    assert!(cache_dir.starts_with("/data/"), "{cache_dir}");
    assert!(
        instrs.iter().any(|(k, v)| k == "COPY"
            && v.contains("--chown=65534:65534")
            && v.ends_with(" /data/")),
        "/data/ belongs to the image's user"
    );

    // The image runs `ENTRYPOINT CMD`; here on a free port and the fixture,
    // its states in a folder of this test's.
    let mut full: Vec<String> = entry[1..].to_vec();
    full.extend(cmd);
    let full = localize(&full);
    let refs: Vec<&str> = full.iter().map(String::as_str).collect();
    let states = tempfile::tempdir().unwrap();
    let states_dir = states.path().join("prompt-cache");
    let states_env = states_dir.to_str().unwrap();
    let mut server = Server::start_command(&refs, &[("HEARTH_CACHE_DIR", states_env)]);
    assert!(
        server.stderr().contains(&format!("MiB in {states_env}")),
        "{}",
        server.stderr()
    );
    let port = server.addr.rsplit(':').next().unwrap().to_string();

    let ok = health(&healthcheck_at(&check, &port));
    assert!(
        ok.success(),
        "HEALTHCHECK failed against a healthy server: {ok:?}"
    );
    server.sigterm();
    let st = server.wait_exit(Duration::from_secs(30));
    assert!(st.success(), "{st:?}\n{}", server.stderr());

    // With HEARTH_API_KEY in the container's environment /health is behind
    // the key, and the same HEALTHCHECK sends it from there.
    let mut keyed = Server::start_command(&refs, &[("HEARTH_API_KEY", "k3y")]);
    let port = keyed.addr.rsplit(':').next().unwrap().to_string();
    let ok = health_with(&healthcheck_at(&check, &port), Some("k3y"));
    assert!(ok.success(), "HEALTHCHECK with the key: {ok:?}");
    let wrong = health_with(&healthcheck_at(&check, &port), Some("nope"));
    assert_eq!(wrong.code(), Some(1), "a wrong key must fail the probe");
    keyed.sigterm();
    assert!(keyed.wait_exit(Duration::from_secs(30)).success());

    // Nothing listens now: the same probe must fail, with 1 (not clap's 2).
    let down = health(&healthcheck_at(&check, &port));
    assert_eq!(down.code(), Some(1), "probe of a closed port: {down:?}");
}

#[test]
fn the_kubernetes_arguments_serve() {
    let yaml = repo_file("deploy/k8s/hearth.yaml");
    let mut seen = 0;
    // Each Deployment's `args: [...]` is a flow sequence over two lines,
    // which is also JSON.
    for (i, _) in yaml.match_indices("args: [") {
        let start = i + "args: ".len();
        let end = start + yaml[start..].find(']').expect("closing ]") + 1;
        let flat: String = yaml[start..end]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let args: Vec<String> =
            serde_json::from_str(&flat).unwrap_or_else(|e| panic!("{flat}: {e}"));
        // The image's ENTRYPOINT comes first.
        let mut full = vec!["serve".to_string(), "--host".into(), "0.0.0.0".into()];
        full.extend(args);
        let full = localize(&full);
        let refs: Vec<&str> = full.iter().map(String::as_str).collect();
        let mut server = Server::start_command(&refs, &[]);
        server.sigterm();
        let st = server.wait_exit(Duration::from_secs(30));
        assert!(st.success(), "{st:?}\n{}", server.stderr());
        seen += 1;
    }
    assert_eq!(seen, 2, "two shards, each with its arguments");
}

#[test]
fn flys_idle_exit_comes_from_the_environment() {
    let toml = repo_file("deploy/fly/fly.toml");
    let value = toml
        .lines()
        .find_map(|l| l.trim().strip_prefix("HEARTH_IDLE_EXIT = "))
        .expect("HEARTH_IDLE_EXIT in [env]")
        .trim_matches('"');
    let secs: f64 = value.parse().expect("a number of seconds");
    assert!(
        secs >= 60.0,
        "an idle limit of {secs} s would stop it between turns"
    );
    // The same variable, with a short limit, ends a real server.
    let args = [
        "serve",
        "-m",
        TINY,
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "-t",
        "1",
    ];
    let mut server = Server::start_command(&args, &[("HEARTH_IDLE_EXIT", "2")]);
    let st = server.wait_exit(Duration::from_secs(30));
    assert!(st.success(), "{st:?}\n{}", server.stderr());
    assert!(server.stderr().contains("idle for"), "{}", server.stderr());
}
