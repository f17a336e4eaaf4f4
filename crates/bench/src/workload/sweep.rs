//! Throughput against concurrency: one workload run at several concurrencies, each method's
//! aggregate tokens per second (prefill included) as more requests share a forward.
//!
//! On a CPU, a forward over eight rows costs about two of one row (the weights stream
//! once), so plain batching alone multiplies throughput; speculation must add to it,
//! not only win alone. The sweep shows both on one plot.

use serde::Serialize;

use super::WorkloadRun;
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
    /// The wall time's share in steps that carried a prompt's rows (see
    /// `SummaryRow::prefill_share`).
    pub prefill_share: f64,
}

/// The sweep's rows, concurrency-major in the order of `runs`, methods in their order.
pub fn sweep_rows(runs: &[WorkloadRun]) -> Vec<SweepRow> {
    let aggregate = |run: &WorkloadRun, method: &str| {
        run.summary
            .iter()
            .find(|s| s.method == method)
            .and_then(|s| s.aggregate_tokens_per_second)
    };
    let lowest = runs.iter().min_by_key(|r| r.concurrency);
    let mut rows = Vec::new();
    for run in runs {
        let none = aggregate(run, specdec_engine::DraftMethod::None.name());
        for s in &run.summary {
            let Some(tps) = s.aggregate_tokens_per_second else {
                continue;
            };
            let base = lowest.and_then(|l| aggregate(l, s.method));
            rows.push(SweepRow {
                concurrency: run.concurrency,
                method: s.method,
                aggregate_tokens_per_second: tps,
                vs_lowest_concurrency: base.map_or(1.0, |b| tps / b.max(1e-9)),
                vs_none: none.map_or(1.0, |n| tps / n.max(1e-9)),
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
