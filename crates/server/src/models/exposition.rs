//! The models' lines of the Prometheus exposition (`/metrics`): loads, and
//! what each loaded model takes.

use super::Models;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// The model lines of the exposition: loads, and what each loaded model
/// takes.
pub(crate) fn render_metrics(models: &Models) -> String {
    let mut out = String::new();
    let mut put = |name: &str, kind: &str, help: &str, rows: Vec<(String, String)>| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (labels, value) in rows {
            let _ = writeln!(out, "{name}{labels} {value}");
        }
    };
    let count = |a: &AtomicU64| vec![(String::new(), a.load(Ordering::Relaxed).to_string())];
    put(
        "hearth_model_loads_total",
        "counter",
        "Models loaded since the start (a pinned model counts once).",
        count(&models.loads),
    );
    put(
        "hearth_model_load_failures_total",
        "counter",
        "Model loads that failed.",
        count(&models.load_failures),
    );
    let loaded = models.in_memory();
    put(
        "hearth_models_loaded",
        "gauge",
        "Models in memory now.",
        vec![(String::new(), loaded.len().to_string())],
    );
    put(
        "hearth_model_memory_bytes",
        "gauge",
        "What each model in memory takes: its files and its slots' caches.",
        loaded
            .iter()
            .map(|l| {
                (
                    format!("{{model=\"{}\"}}", label(&l.id)),
                    l.bytes.to_string(),
                )
            })
            .collect(),
    );
    out
}

/// A Prometheus label value: backslash, quote and newline escaped.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
