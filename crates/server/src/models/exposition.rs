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
    if let Some(cache) = &models.cache {
        put_prompt_cache(&mut out, cache.stats());
    }
    out
}

/// The prompt-state store's counters and gauges.
fn put_prompt_cache(out: &mut String, stats: &prompt_cache::Stats) {
    let rows: [(&str, &str, &str, &AtomicU64); 11] = [
        (
            "hearth_prompt_cache_hits_total",
            "counter",
            "Prompts that started from a stored state held in RAM.",
            &stats.ram_hits,
        ),
        (
            "hearth_prompt_cache_disk_hits_total",
            "counter",
            "Prompts that started from a stored state read from its file.",
            &stats.disk_hits,
        ),
        (
            "hearth_prompt_cache_misses_total",
            "counter",
            "Prompts for which no stored state served more than their slot held.",
            &stats.misses,
        ),
        (
            "hearth_prompt_cache_stored_total",
            "counter",
            "States stored after a finished generation.",
            &stats.stored,
        ),
        (
            "hearth_prompt_cache_ram_evictions_total",
            "counter",
            "States dropped from RAM to stay within --cache-ram.",
            &stats.ram_evictions,
        ),
        (
            "hearth_prompt_cache_disk_evictions_total",
            "counter",
            "State files removed to stay within --cache-disk.",
            &stats.disk_evictions,
        ),
        (
            "hearth_prompt_cache_files_written_total",
            "counter",
            "State files written.",
            &stats.files_written,
        ),
        (
            "hearth_prompt_cache_files_ignored_total",
            "counter",
            "Damaged or unreadable state files ignored and removed.",
            &stats.files_ignored,
        ),
        (
            "hearth_prompt_cache_unloadable_total",
            "counter",
            "Stored states found that would not load (the prompt was computed).",
            &stats.unloadable,
        ),
        (
            "hearth_prompt_cache_ram_bytes",
            "gauge",
            "Bytes of states in RAM.",
            &stats.ram_bytes,
        ),
        (
            "hearth_prompt_cache_disk_bytes",
            "gauge",
            "Bytes of state files.",
            &stats.disk_bytes,
        ),
    ];
    for (name, kind, help, value) in rows {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        let _ = writeln!(out, "{name} {}", value.load(Ordering::Relaxed));
    }
}

/// A Prometheus label value: backslash, quote and newline escaped.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
