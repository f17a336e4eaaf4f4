//! Prometheus metrics under vLLM's names (`vllm:` prefix, `model_name` label), so
//! dashboards built for vLLM's speculative decoding work unchanged. Written by hand: the
//! client crates cannot emit the colon vLLM's names carry.

use std::collections::BTreeMap;
use std::fmt::{Display, Write};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use specdec_engine::{PoolSize, SpecStats};

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
        let mut s = lock(&self.state);
        if let Some(i) = self.bounds.iter().position(|&b| v <= b) {
            s.0[i] += 1;
        }
        s.1 += v;
        s.2 += 1;
    }

    fn render(&self, out: &mut String, name: &str, help: &str, label: &str) {
        let s = lock(&self.state);
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
    /// Speculation totals over finished requests.
    spec: Mutex<SpecStats>,
    generation_tokens: AtomicU64,
    prompt_tokens: AtomicU64,
    finished: Mutex<BTreeMap<&'static str, u64>>,
    /// `/v1/recommend` requests answered, by outcome.
    recommended: Mutex<BTreeMap<&'static str, u64>>,
    waiting: AtomicI64,
    running: AtomicI64,
    e2e: Histogram,
    ttft: Histogram,
    /// Prompt tokens of finished requests, and those of them read from the prefix cache.
    prefix_queries: AtomicU64,
    prefix_hits: AtomicU64,
    /// `--shared-state`'s link counters, once it started.
    shared: OnceLock<Arc<specdec_shared_state::Stats>>,
    /// Other replicas' lessons by what folding did with them.
    folded: Mutex<BTreeMap<&'static str, u64>>,
    /// Per pool label: finished requests and their speculation totals.
    pool_spec: Mutex<BTreeMap<String, (u64, SpecStats)>>,
    /// What the pools in memory held when the engine thread last looked.
    pool_sizes: Mutex<Vec<PoolSize>>,
    /// Whether the engine can serve (`GET /health`).
    pub health: Health,
}

/// Steps in a row failing for every request after which the engine is reported unhealthy
/// (one request that fails by itself fails only its steps; a broken engine fails all).
pub const UNHEALTHY_AFTER_FAILING_STEPS: usize = 5;

/// The engine thread's health, as the worker reports it.
#[derive(Debug, Default)]
pub struct Health {
    stopped: AtomicBool,
    failing_steps: AtomicUsize,
}

impl Health {
    /// The engine thread ended (shutdown, or a panic outside any step).
    pub fn engine_stopped(&self) {
        self.stopped.store(true, Relaxed);
    }

    /// Steps in a row in which every request failed (0 after a step that succeeded).
    pub fn failing_steps(&self, n: usize) {
        self.failing_steps.store(n, Relaxed);
    }

    /// `Err(reason)` when the engine cannot serve requests.
    pub fn check(&self) -> Result<(), String> {
        if self.stopped.load(Relaxed) {
            return Err("the engine thread is not running".into());
        }
        let n = self.failing_steps.load(Relaxed);
        if n >= UNHEALTHY_AFTER_FAILING_STEPS {
            return Err(format!(
                "the last {n} engine steps failed for every request"
            ));
        }
        Ok(())
    }
}

impl Metrics {
    /// Empty counters for the model `model_name` (every series is labelled with it).
    pub fn new(model_name: &str) -> Self {
        let escaped = escape_label(model_name);
        Metrics {
            label: format!("model_name=\"{escaped}\""),
            spec: Mutex::new(SpecStats::default()),
            generation_tokens: AtomicU64::new(0),
            prompt_tokens: AtomicU64::new(0),
            finished: Mutex::new(BTreeMap::new()),
            recommended: Mutex::new(BTreeMap::new()),
            waiting: AtomicI64::new(0),
            running: AtomicI64::new(0),
            e2e: Histogram::new(LATENCY_BUCKETS),
            ttft: Histogram::new(TTFT_BUCKETS),
            prefix_queries: AtomicU64::new(0),
            prefix_hits: AtomicU64::new(0),
            shared: OnceLock::new(),
            folded: Mutex::new(BTreeMap::new()),
            pool_spec: Mutex::new(BTreeMap::new()),
            pool_sizes: Mutex::new(Vec::new()),
            health: Health::default(),
        }
    }

    /// Adds `delta` (+1 or -1) to the requests waiting.
    pub fn queued(&self, delta: i64) {
        self.waiting.fetch_add(delta, Relaxed);
    }

    /// (requests queued, requests running).
    pub fn in_flight(&self) -> (i64, i64) {
        (self.waiting.load(Relaxed), self.running.load(Relaxed))
    }

    /// Adds `delta` (+1 or -1) to the requests running.
    pub fn running(&self, delta: i64) {
        self.running.fetch_add(delta, Relaxed);
    }

    /// Records a request's time to first token, `after` its arrival.
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
        lock(&self.spec).merge(spec);
        *lock(&self.finished).entry(reason).or_default() += 1;
        self.e2e.observe(latency.as_secs_f64());
    }

    /// A generation's prompt: `prompt` tokens, `cached` of them from the prefix cache.
    pub fn prefix(&self, prompt: usize, cached: usize) {
        self.prefix_queries.fetch_add(prompt as u64, Relaxed);
        self.prefix_hits.fetch_add(cached as u64, Relaxed);
    }

    /// Reports `--shared-state`'s counters from now on.
    pub fn shared_state(&self, stats: Arc<specdec_shared_state::Stats>) {
        let _ = self.shared.set(stats);
    }

    /// What folding other replicas' lessons did (`applied`, `skipped`, `dropped`).
    pub fn folded(&self, folds: &specdec_shared_state::Folds) {
        let mut by = lock(&self.folded);
        let outcomes = [
            ("applied", folds.applied),
            ("skipped", folds.skipped),
            ("dropped", folds.dropped),
        ];
        for (outcome, n) in outcomes.into_iter().filter(|&(_, n)| n > 0) {
            *by.entry(outcome).or_default() += n as u64;
        }
    }

    /// A finished request drafted from the pool labelled `pool` (see
    /// `specdec_engine::Pools::label`).
    pub fn pool_finished(&self, pool: &str, spec: &SpecStats) {
        let mut by = lock(&self.pool_spec);
        let (n, total) = by.entry(pool.to_string()).or_default();
        *n += 1;
        total.merge(spec);
    }

    /// What the pools in memory hold now.
    pub fn pool_sizes(&self, sizes: Vec<PoolSize>) {
        *lock(&self.pool_sizes) = sizes;
    }

    /// A recommendation ended: `ok`, `invalid`, `error` or `cancelled`.
    pub fn recommended(&self, outcome: &'static str) {
        *lock(&self.recommended).entry(outcome).or_default() += 1;
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let l = &self.label;
        let mut out = String::new();
        let spec = lock(&self.spec).clone();
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
                spec.draft_steps as u64,
            ),
            (
                "vllm:spec_decode_num_draft_tokens_total",
                "Draft tokens verified.",
                spec.drafted_tokens as u64,
            ),
            (
                "vllm:spec_decode_num_accepted_tokens_total",
                "Draft tokens accepted.",
                spec.accepted_tokens as u64,
            ),
            (
                "vllm:generation_tokens_total",
                "Tokens generated.",
                self.generation_tokens.load(Relaxed),
            ),
            (
                "vllm:prompt_tokens_total",
                "Prompt tokens of finished requests.",
                self.prompt_tokens.load(Relaxed),
            ),
        ];
        for (name, help, n) in counters {
            line(name, "counter", help, n.to_string());
        }
        line(
            "vllm:prefix_cache_queries_total",
            "counter",
            "Prompt tokens of finished requests looked up in the prefix cache.",
            self.prefix_queries.load(Relaxed).to_string(),
        );
        line(
            "vllm:prefix_cache_hits_total",
            "counter",
            "Prompt tokens read from the prefix cache.",
            self.prefix_hits.load(Relaxed).to_string(),
        );
        if let Some(st) = self.shared.get() {
            let shared = [
                (
                    "published",
                    "Lessons this replica published.",
                    &st.published,
                ),
                ("received", "Other replicas' lessons read.", &st.received),
                ("dropped", "Lessons dropped unpublished.", &st.dropped),
                (
                    "malformed",
                    "Stream entries that were not lessons.",
                    &st.malformed,
                ),
                (
                    "repeated",
                    "Stream entries skipped as a second copy of one already read.",
                    &st.repeated,
                ),
            ];
            for (what, help, n) in shared {
                let name = format!("specdec:shared_state_{what}_total");
                line(&name, "counter", help, n.load(Relaxed).to_string());
            }
            line(
                "specdec:shared_state_held",
                "gauge",
                "Lessons held while Redis is unreachable.",
                st.held.load(Relaxed).to_string(),
            );
            // The subscriber reads all the time, so it notices an outage within seconds;
            // the publisher connects when it has something to send (an outage then shows
            // as lessons held).
            let up = st.subscriber_up.load(Relaxed) as u8;
            line(
                "specdec:shared_state_connected",
                "gauge",
                "1 while the link that reads other replicas' lessons is up.",
                up.to_string(),
            );
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
        labelled(
            &mut out,
            "vllm:spec_decode_num_accepted_tokens_per_pos_total",
            "Draft tokens accepted at each depth of the draft.",
            l,
            "position",
            spec.accepted_by_position.iter().enumerate(),
        );
        labelled(
            &mut out,
            "vllm:request_success_total",
            "Requests finished, by reason.",
            l,
            "finished_reason",
            lock(&self.finished).iter(),
        );
        labelled(
            &mut out,
            "specdec:recommend_requests_total",
            "Recommendations (/v1/recommend) answered, by outcome.",
            l,
            "outcome",
            lock(&self.recommended).iter(),
        );
        if self.shared.get().is_some() {
            labelled(
                &mut out,
                "specdec:shared_state_folded_total",
                "Other replicas' lessons, by what folding did with them.",
                l,
                "outcome",
                lock(&self.folded).iter(),
            );
        }
        let by_pool = lock(&self.pool_spec).clone();
        let pool_counters: [Family<(u64, SpecStats), u64>; 3] = [
            (
                "specdec:pool_requests_total",
                "Finished requests that drafted from the pool.",
                |p| p.0,
            ),
            (
                "specdec:pool_draft_tokens_total",
                "Draft tokens verified, by pool.",
                |p| p.1.drafted_tokens as u64,
            ),
            (
                "specdec:pool_accepted_tokens_total",
                "Draft tokens accepted, by pool.",
                |p| p.1.accepted_tokens as u64,
            ),
        ];
        for (name, help, value) in pool_counters {
            let rows = by_pool.iter().map(|(pool, p)| (pool, value(p)));
            labelled(&mut out, name, help, l, "pool", rows);
        }
        let sizes = lock(&self.pool_sizes).clone();
        let gauges: [Family<PoolSize, usize>; 3] = [
            (
                "specdec:pools_loaded",
                "Drafting pools in memory, by pool (tenants' pools as one).",
                |p| p.pools,
            ),
            (
                "specdec:pool_trie_nodes",
                "Lookahead trie nodes, by pool.",
                |p| p.trie_nodes,
            ),
            (
                "specdec:pool_history_tokens",
                "History index tokens, by pool.",
                |p| p.history_tokens,
            ),
        ];
        for (name, help, value) in gauges {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            for p in &sizes {
                let pool = escape_label(&p.label);
                let _ = writeln!(out, "{name}{{{l},pool=\"{pool}\"}} {}", value(p));
            }
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

/// A metric family read from a per-pool value: its name, its help, and how to read it.
type Family<T, V> = (&'static str, &'static str, fn(&T) -> V);

/// A counter family with one extra label: its header, then a line per (label value, count).
fn labelled<K: Display, V: Display>(
    out: &mut String,
    name: &str,
    help: &str,
    base: &str,
    key: &str,
    rows: impl IntoIterator<Item = (K, V)>,
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
    for (k, v) in rows {
        let k = escape_label(&k.to_string());
        let _ = writeln!(out, "{name}{{{base},{key}=\"{k}\"}} {v}");
    }
}

/// A label value as the text format writes it: backslash, double quote and line feed
/// escaped, so no value can end its line or start another.
pub fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// Metrics stay readable after a panic elsewhere poisoned a lock.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
