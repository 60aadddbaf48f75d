//! Counters and gauges, rendered as Prometheus text at `/metrics`.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Everything `/metrics` reports; shared by the HTTP side and the scheduler.
#[derive(Debug, Default)]
pub struct Metrics {
    /// HTTP requests by (endpoint, status).
    requests: Mutex<BTreeMap<(&'static str, u16), u64>>,
    /// Whether the model is loaded.
    pub loaded: AtomicBool,
    /// Generations that ran to their end.
    pub completed: AtomicU64,
    /// Generations ended because the client went away or the server stopped.
    pub cancelled: AtomicU64,
    /// Generations ended by the per-request time limit (counted in
    /// `completed` too: they end with `length`).
    pub time_limited: AtomicU64,
    /// Jobs refused because the queue was full.
    pub rejected: AtomicU64,
    /// Panics caught (bugs): in the scheduler, the embedding batcher or a
    /// request's handler.
    pub panics: AtomicU64,
    /// Prompt tokens of admitted requests.
    pub prompt_tokens: AtomicU64,
    /// Tokens generated.
    pub completion_tokens: AtomicU64,
    /// Prompt tokens computed by prefill.
    pub prefill_evaluated: AtomicU64,
    /// Prompt tokens reused from a slot's cache instead of computed.
    pub prefill_saved: AtomicU64,
    /// Jobs waiting for a slot.
    pub queue_depth: AtomicU64,
    /// Queue capacity.
    pub queue_capacity: AtomicU64,
    /// Slots generating now.
    pub slots_busy: AtomicU64,
    /// Slots in all.
    pub slots_total: AtomicU64,
    /// Tokens produced by decode steps.
    decode_tokens: AtomicU64,
    /// Microseconds spent in decode steps.
    decode_micros: AtomicU64,
    /// Guard steps by (guard, outcome).
    guard_steps: Mutex<BTreeMap<(String, String), u64>>,
    /// Per guard: extra model calls, tokens (prompt + generated), milliseconds.
    guard_costs: Mutex<BTreeMap<String, [u64; 3]>>,
}

impl Metrics {
    /// Count one HTTP response.
    pub fn record_request(&self, endpoint: &'static str, status: u16) {
        let mut map = self.requests.lock().unwrap_or_else(|e| e.into_inner());
        *map.entry((endpoint, status)).or_default() += 1;
    }

    /// Count one round of decode steps.
    pub fn record_decode(&self, tokens: u64, took: Duration) {
        self.decode_tokens.fetch_add(tokens, Ordering::Relaxed);
        self.decode_micros
            .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
    }

    /// Count what the guards did for one reply.
    pub fn record_guard(&self, trace: &guard::Trace) {
        let mut steps = self.guard_steps.lock().unwrap_or_else(|e| e.into_inner());
        let mut costs = self.guard_costs.lock().unwrap_or_else(|e| e.into_inner());
        for st in &trace.steps {
            let outcome = serde_json::to_value(st.outcome)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            *steps
                .entry((st.guard.name().to_string(), outcome))
                .or_default() += 1;
            let c = costs.entry(st.guard.name().to_string()).or_default();
            c[0] += st.calls as u64;
            c[1] += (st.prompt_tokens + st.completion_tokens) as u64;
            c[2] += st.ms;
        }
    }

    /// Generated tokens per second of decoding, over the server's life.
    pub fn decode_tokens_per_s(&self) -> f64 {
        let t = self.decode_tokens.load(Ordering::Relaxed) as f64;
        let us = self.decode_micros.load(Ordering::Relaxed) as f64;
        if us > 0.0 {
            t / (us / 1e6)
        } else {
            0.0
        }
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        self.render_plain(&mut out);
        self.render_labelled(&mut out);
        self.render_guard_costs(&mut out);
        out
    }

    /// The counters and gauges without labels.
    fn render_plain(&self, out: &mut String) {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed).to_string();
        let values: [String; 15] = [
            u8::from(self.loaded.load(Ordering::Relaxed)).to_string(),
            get(&self.completed),
            get(&self.cancelled),
            get(&self.time_limited),
            get(&self.rejected),
            get(&self.panics),
            get(&self.prompt_tokens),
            get(&self.completion_tokens),
            get(&self.prefill_evaluated),
            get(&self.prefill_saved),
            get(&self.queue_depth),
            get(&self.queue_capacity),
            get(&self.slots_busy),
            get(&self.slots_total),
            format!("{:.3}", self.decode_tokens_per_s()),
        ];
        for ((name, kind, help), value) in PLAIN.iter().zip(values) {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            let _ = writeln!(out, "{name} {value}");
        }
    }

    /// Requests by endpoint and status, guard steps by guard and outcome.
    fn render_labelled(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "# HELP hearth_requests_total HTTP requests answered, by endpoint and status."
        );
        let _ = writeln!(out, "# TYPE hearth_requests_total counter");
        let map = self.requests.lock().unwrap_or_else(|e| e.into_inner());
        for ((endpoint, status), n) in map.iter() {
            let _ = writeln!(
                out,
                "hearth_requests_total{{endpoint=\"{endpoint}\",status=\"{status}\"}} {n}"
            );
        }
        drop(map);
        let _ = writeln!(
            out,
            "# HELP hearth_guard_steps_total Guard steps, by guard and outcome (computed, passed, repaired, flagged, could_not_verify)."
        );
        let _ = writeln!(out, "# TYPE hearth_guard_steps_total counter");
        let steps = self.guard_steps.lock().unwrap_or_else(|e| e.into_inner());
        for ((guard, outcome), n) in steps.iter() {
            let _ = writeln!(
                out,
                "hearth_guard_steps_total{{guard=\"{guard}\",outcome=\"{outcome}\"}} {n}"
            );
        }
        drop(steps);
    }

    /// What each guard's extra work cost.
    fn render_guard_costs(&self, out: &mut String) {
        let costs = self.guard_costs.lock().unwrap_or_else(|e| e.into_inner());
        for (i, (name, help)) in [
            (
                "hearth_guard_model_calls_total",
                "Extra model calls made by each guard.",
            ),
            (
                "hearth_guard_tokens_total",
                "Tokens (prompt and generated) of each guard's extra calls.",
            ),
            (
                "hearth_guard_milliseconds_total",
                "Time spent in each guard.",
            ),
        ]
        .into_iter()
        .enumerate()
        {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} counter");
            for (guard, c) in costs.iter() {
                let _ = writeln!(out, "{name}{{guard=\"{guard}\"}} {}", c[i]);
            }
        }
    }
}

/// The counters and gauges without labels: name, type and help, in the
/// order [`Metrics::render`] writes them.
const PLAIN: [(&str, &str, &str); 15] = [
    (
        "hearth_model_loaded",
        "gauge",
        "1 once the model is loaded.",
    ),
    (
        "hearth_generations_completed_total",
        "counter",
        "Generations that ran to their end.",
    ),
    (
        "hearth_generations_cancelled_total",
        "counter",
        "Generations cancelled (client gone or shutdown).",
    ),
    (
        "hearth_generations_time_limited_total",
        "counter",
        "Generations ended with finish_reason length by --max-request-secs.",
    ),
    (
        "hearth_requests_rejected_total",
        "counter",
        "Requests refused because the queue was full.",
    ),
    (
        "hearth_internal_errors_total",
        "counter",
        "Panics caught (bugs): in the scheduler, the embedding batcher or a handler.",
    ),
    (
        "hearth_prompt_tokens_total",
        "counter",
        "Prompt tokens of admitted requests.",
    ),
    (
        "hearth_completion_tokens_total",
        "counter",
        "Tokens generated (cancelled generations included).",
    ),
    (
        "hearth_prefill_tokens_evaluated_total",
        "counter",
        "Prompt tokens computed by prefill.",
    ),
    (
        "hearth_prefill_tokens_saved_total",
        "counter",
        "Prompt tokens reused from the prefix cache instead of computed.",
    ),
    (
        "hearth_queue_depth",
        "gauge",
        "Requests waiting for a slot (every loaded model's queue).",
    ),
    (
        "hearth_queue_capacity",
        "gauge",
        "Most requests that may wait, per loaded model.",
    ),
    (
        "hearth_slots_busy",
        "gauge",
        "Slots generating now (every loaded model's).",
    ),
    (
        "hearth_slots_total",
        "gauge",
        "Slots (parallel sequences) per loaded model.",
    ),
    (
        "hearth_decode_tokens_per_second",
        "gauge",
        "Generated tokens per second of decoding, all slots together.",
    ),
];

/// One scheduler's share of a gauge that every loaded model's scheduler
/// adds to (busy slots, queued jobs): it remembers what it last reported
/// and moves the gauge by the difference, so the gauge is their sum.
#[derive(Debug, Default)]
pub(crate) struct GaugeShare {
    reported: u64,
}

impl GaugeShare {
    /// Report `value` as this scheduler's share of `gauge`.
    pub(crate) fn set(&mut self, gauge: &AtomicU64, value: u64) {
        let old = std::mem::replace(&mut self.reported, value);
        if value >= old {
            gauge.fetch_add(value - old, Ordering::Relaxed);
        } else {
            gauge.fetch_sub(old - value, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod gauge_tests {
    use super::*;

    #[test]
    fn shares_add_up_and_leave_nothing_behind() {
        let gauge = AtomicU64::new(0);
        let (mut a, mut b) = (GaugeShare::default(), GaugeShare::default());
        a.set(&gauge, 3);
        b.set(&gauge, 2);
        assert_eq!(gauge.load(Ordering::Relaxed), 5);
        a.set(&gauge, 1);
        assert_eq!(gauge.load(Ordering::Relaxed), 3);
        a.set(&gauge, 0);
        b.set(&gauge, 0);
        assert_eq!(gauge.load(Ordering::Relaxed), 0);
    }
}
