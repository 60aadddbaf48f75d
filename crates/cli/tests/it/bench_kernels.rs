//! `hearth bench` on a tiny model: the kernel set it ran is named, a lower
//! set can be forced (`--cpu`, `HEARTH_CPU`), and one the CPU lacks is a
//! clean error.

use std::process::{Command, Output};

const TINY_Q8: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/fixtures/tiny/gemma3/model-q8_0.gguf"
);

fn hearth(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hearth"));
    cmd.args(args)
        .env_remove("HEARTH_CPU")
        .env("RUST_BACKTRACE", "0");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run hearth")
}

/// JSON rows of a short bench run.
fn rows(extra: &[&str], env: &[(&str, &str)]) -> Vec<serde_json::Value> {
    let mut args = vec![
        "bench", "-m", TINY_Q8, "-p", "16", "-n", "4", "-r", "1", "-t", "1", "--json",
    ];
    args.extend_from_slice(extra);
    let out = hearth(&args, env);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "bench failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON row"))
        .collect()
}

#[test]
fn bench_names_and_forces_the_kernel_set() {
    let best = rows(&[], &[]);
    assert_eq!(best.len(), 2, "{best:?}");
    let kernels = best[0]["kernels"]
        .as_str()
        .expect("kernels field")
        .to_string();
    assert!(
        ["scalar", "avx2", "avxvnni", "avx512"].contains(&kernels.as_str()),
        "{kernels}"
    );
    // Decode rows carry the weight traffic and the machine's bandwidth.
    let tg = &best[1];
    assert_eq!(tg["test"], "tg4");
    assert!(tg["decode_gbps"].as_f64().expect("decode_gbps") > 0.0);
    assert!(tg["read_bandwidth_gbps"].as_f64().expect("read bandwidth") > 0.1);
    assert!(
        best[0]["decode_gbps"].is_null(),
        "pp rows have no decode traffic"
    );

    // Every CPU runs the scalar set; both ways of asking for it work.
    for forced in [
        rows(&["--cpu", "scalar"], &[]),
        rows(&[], &[("HEARTH_CPU", "scalar")]),
    ] {
        assert!(
            forced.iter().all(|r| r["kernels"] == "scalar"),
            "{forced:?}"
        );
    }
}

#[test]
fn an_unknown_kernel_set_is_a_clean_error() {
    let out = hearth(
        &[
            "bench", "-m", TINY_Q8, "-p", "16", "-n", "0", "--cpu", "neon9000",
        ],
        &[],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("neon9000") && err.contains("scalar"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn the_table_header_names_the_cores() {
    let out = hearth(
        &[
            "bench", "-m", TINY_Q8, "-p", "16", "-n", "0", "-r", "1", "-t", "1",
        ],
        &[],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let cores = stdout
        .lines()
        .find(|l| l.starts_with("cores: "))
        .unwrap_or_else(|| panic!("no cores line: {stdout}"));
    // "cores: P physical, L logical CPUs", or L alone where P is unknown.
    let numbers: Vec<usize> = cores
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    assert!(
        matches!(numbers.as_slice(), [p, l] if 1 <= *p && p <= l)
            || matches!(numbers.as_slice(), [l] if *l >= 1),
        "{cores}"
    );
}
