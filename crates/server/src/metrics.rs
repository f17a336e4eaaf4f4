//! Prometheus metrics under vLLM's names (`vllm:` prefix, `model_name` label), so
//! dashboards built for vLLM's speculative decoding work unchanged. Written by hand: the
//! client crates cannot emit the colon vLLM's names carry.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

use specdec_engine::SpecStats;

struct Histogram {
    bounds: &'static [f64],
    /// Per bucket (not cumulative), then sum and count.
    state: Mutex<(Vec<u64>, f64, u64)>,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            state: Mutex::new((vec![0; bounds.len()], 0.0, 0)),
        }
    }

    fn observe(&self, v: f64) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = self.bounds.iter().position(|&b| v <= b) {
            s.0[i] += 1;
        }
        s.1 += v;
        s.2 += 1;
    }

    fn render(&self, out: &mut String, name: &str, help: &str, label: &str) {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (b, c) in self.bounds.iter().zip(&s.0) {
            cumulative += c;
            let _ = writeln!(out, "{name}_bucket{{{label},le=\"{b}\"}} {cumulative}");
        }
        let _ = writeln!(out, "{name}_bucket{{{label},le=\"+Inf\"}} {}", s.2);
        let _ = writeln!(out, "{name}_sum{{{label}}} {}", s.1);
        let _ = writeln!(out, "{name}_count{{{label}}} {}", s.2);
    }
}

const LATENCY_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0,
];
const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0,
];

/// Server-wide counters; cheap to update from the engine thread.
pub struct Metrics {
    label: String,
    drafts: AtomicU64,
    draft_tokens: AtomicU64,
    accepted_tokens: AtomicU64,
    accepted_per_pos: Mutex<Vec<u64>>,
    generation_tokens: AtomicU64,
    prompt_tokens: AtomicU64,
    finished: Mutex<BTreeMap<&'static str, u64>>,
    waiting: AtomicI64,
    running: AtomicI64,
    e2e: Histogram,
    ttft: Histogram,
}

impl Metrics {
    pub fn new(model_name: &str) -> Self {
        let escaped = model_name.replace('\\', "\\\\").replace('"', "\\\"");
        Metrics {
            label: format!("model_name=\"{escaped}\""),
            drafts: AtomicU64::new(0),
            draft_tokens: AtomicU64::new(0),
            accepted_tokens: AtomicU64::new(0),
            accepted_per_pos: Mutex::new(Vec::new()),
            generation_tokens: AtomicU64::new(0),
            prompt_tokens: AtomicU64::new(0),
            finished: Mutex::new(BTreeMap::new()),
            waiting: AtomicI64::new(0),
            running: AtomicI64::new(0),
            e2e: Histogram::new(LATENCY_BUCKETS),
            ttft: Histogram::new(TTFT_BUCKETS),
        }
    }

    pub fn queued(&self, delta: i64) {
        self.waiting.fetch_add(delta, Relaxed);
    }

    pub fn running(&self, delta: i64) {
        self.running.fetch_add(delta, Relaxed);
    }

    pub fn first_token(&self, after: Duration) {
        self.ttft.observe(after.as_secs_f64());
    }

    /// One decode step's tokens, as they are emitted (so counters move during a request).
    pub fn step(&self, emitted: usize) {
        self.generation_tokens.fetch_add(emitted as u64, Relaxed);
    }

    /// A request ended: its speculation counters and latency.
    pub fn finished(
        &self,
        reason: &'static str,
        prompt: usize,
        spec: &SpecStats,
        latency: Duration,
    ) {
        self.prompt_tokens.fetch_add(prompt as u64, Relaxed);
        self.drafts.fetch_add(spec.draft_steps as u64, Relaxed);
        self.draft_tokens
            .fetch_add(spec.drafted_tokens as u64, Relaxed);
        self.accepted_tokens
            .fetch_add(spec.accepted_tokens as u64, Relaxed);
        {
            let mut per = self
                .accepted_per_pos
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if per.len() < spec.accepted_by_position.len() {
                per.resize(spec.accepted_by_position.len(), 0);
            }
            for (p, &n) in per.iter_mut().zip(&spec.accepted_by_position) {
                *p += n as u64;
            }
        }
        *self
            .finished
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(reason)
            .or_default() += 1;
        self.e2e.observe(latency.as_secs_f64());
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let l = &self.label;
        let mut out = String::new();
        let mut line = |name: &str, kind: &str, help: &str, value: String| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{{l}}} {value}"
            );
        };
        let counters = [
            (
                "vllm:spec_decode_num_drafts_total",
                "Verify steps that carried a draft.",
                &self.drafts,
            ),
            (
                "vllm:spec_decode_num_draft_tokens_total",
                "Draft tokens verified.",
                &self.draft_tokens,
            ),
            (
                "vllm:spec_decode_num_accepted_tokens_total",
                "Draft tokens accepted.",
                &self.accepted_tokens,
            ),
            (
                "vllm:generation_tokens_total",
                "Tokens generated.",
                &self.generation_tokens,
            ),
            (
                "vllm:prompt_tokens_total",
                "Prompt tokens of finished requests.",
                &self.prompt_tokens,
            ),
        ];
        for (name, help, c) in counters {
            line(name, "counter", help, c.load(Relaxed).to_string());
        }
        line(
            "vllm:num_requests_waiting",
            "gauge",
            "Requests queued for the engine.",
            self.waiting.load(Relaxed).to_string(),
        );
        line(
            "vllm:num_requests_running",
            "gauge",
            "Requests being generated.",
            self.running.load(Relaxed).to_string(),
        );
        let name = "vllm:spec_decode_num_accepted_tokens_per_pos_total";
        let _ = writeln!(
            out,
            "# HELP {name} Draft tokens accepted at each depth of the draft.\n# TYPE {name} counter"
        );
        for (p, n) in self
            .accepted_per_pos
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .enumerate()
        {
            let _ = writeln!(out, "{name}{{{l},position=\"{p}\"}} {n}");
        }
        let name = "vllm:request_success_total";
        let _ = writeln!(
            out,
            "# HELP {name} Requests finished, by reason.\n# TYPE {name} counter"
        );
        for (reason, n) in self
            .finished
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            let _ = writeln!(out, "{name}{{{l},finished_reason=\"{reason}\"}} {n}");
        }
        self.e2e.render(
            &mut out,
            "vllm:e2e_request_latency_seconds",
            "Request latency from arrival to the last token.",
            l,
        );
        self.ttft.render(
            &mut out,
            "vllm:time_to_first_token_seconds",
            "Time from arrival to the first token.",
            l,
        );
        out
    }
}
