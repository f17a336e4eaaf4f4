//! Throughput against concurrency: one workload run at several concurrencies, each method's
//! aggregate tokens per second (prefill included) as more requests share a forward.
//!
//! On a CPU, a forward over eight rows costs about two of one row (the weights stream
//! once), so plain batching alone multiplies throughput; speculation must add to it,
//! not only win alone. The sweep shows both on one plot.

use serde::Serialize;

use super::{SummaryRow, WorkloadRun};
use crate::report::{Plot, Series};

/// One method at one concurrency.
#[derive(Clone, Debug, Serialize)]
pub struct SweepRow {
    /// Records in flight at once.
    pub concurrency: usize,
    /// The method.
    pub method: &'static str,
    /// Completion tokens over wall time, prefill included.
    pub aggregate_tokens_per_second: f64,
    /// Over the same method's at the sweep's lowest concurrency.
    pub vs_lowest_concurrency: f64,
    /// Over plain decoding's (`none`) at the same concurrency.
    pub vs_none: f64,
    /// `vs_lowest_concurrency` on modeled time: both runs' batched forwards priced by
    /// their rows on the lowest concurrency's cost curve (see
    /// `SummaryRow::forwards_by_rows`), free of the machine's drift between runs that
    /// take turns minutes apart.
    pub modeled_vs_lowest_concurrency: f64,
    /// `vs_none` on modeled time (the run's `SummaryRow::modeled_aggregate_speedup_vs_none`).
    pub modeled_vs_none: f64,
    /// The wall time's share in steps that carried a prompt's rows (see
    /// `SummaryRow::prefill_share`).
    pub prefill_share: f64,
}

/// The sweep's rows, concurrency-major in the order of `runs`, methods in their order.
pub fn sweep_rows(runs: &[WorkloadRun]) -> Vec<SweepRow> {
    fn find<'r>(run: &'r WorkloadRun, method: &str) -> Option<&'r SummaryRow> {
        run.summary
            .iter()
            .find(|s| s.method == method && s.aggregate_tokens_per_second.is_some())
    }
    let Some(lowest) = runs.iter().min_by_key(|r| r.concurrency) else {
        return Vec::new();
    };
    // Completion tokens per modeled second, runs of every concurrency priced on one curve.
    let modeled_tps = |run: &WorkloadRun, s: &SummaryRow| {
        let forwards = s.forwards_by_rows.as_deref().unwrap_or_default();
        let secs = lowest.cost_curve.forwards_ms(forwards) / 1e3 / run.repeats.max(1) as f64;
        s.completion_tokens as f64 / secs.max(1e-9)
    };
    let ratio = |a: f64, b: Option<f64>| b.map_or(1.0, |b| a / b.max(1e-9));
    let mut rows = Vec::new();
    for run in runs {
        let none = find(run, specdec_engine::DraftMethod::None.name());
        for s in &run.summary {
            let Some(tps) = s.aggregate_tokens_per_second else {
                continue;
            };
            let base = find(lowest, s.method);
            let modeled = modeled_tps(run, s);
            rows.push(SweepRow {
                concurrency: run.concurrency,
                method: s.method,
                aggregate_tokens_per_second: tps,
                vs_lowest_concurrency: ratio(tps, base.and_then(|b| b.aggregate_tokens_per_second)),
                vs_none: ratio(tps, none.and_then(|n| n.aggregate_tokens_per_second)),
                modeled_vs_lowest_concurrency: ratio(modeled, base.map(|b| modeled_tps(lowest, b))),
                modeled_vs_none: s.modeled_aggregate_speedup_vs_none.unwrap_or(1.0),
                prefill_share: s.prefill_share.unwrap_or(0.0),
            });
        }
    }
    rows
}

/// Aggregate tokens per second against concurrency, one line per method.
pub fn throughput_plot(rows: &[SweepRow], file: &str) -> Plot {
    let mut methods: Vec<&'static str> = Vec::new();
    for r in rows {
        if !methods.contains(&r.method) {
            methods.push(r.method);
        }
    }
    Plot {
        file: file.into(),
        title: "Throughput against concurrency".into(),
        x_label: "records in flight".into(),
        y_label: "completion tokens per second (prefill included)".into(),
        series: methods
            .into_iter()
            .map(|m| {
                let mut points: Vec<(f64, f64)> = rows
                    .iter()
                    .filter(|r| r.method == m)
                    .map(|r| (r.concurrency as f64, r.aggregate_tokens_per_second))
                    .collect();
                points.sort_by(|a, b| a.0.total_cmp(&b.0));
                Series::new(m, points)
            })
            .collect(),
    }
}
