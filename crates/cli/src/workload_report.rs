//! `bench --workload W --report DIR`: the run's tables and plots as a report directory
//! (see `specdec_bench::report`).

use std::path::Path;

use anyhow::Context;

use specdec_bench::report::{
    acceptance_plot, cost_curve_plot, speedup_distribution_plot, Report, Section, Table,
};

use specdec_bench::workload::{throughput_plot, RecordRow, SummaryRow, SweepRow, WorkloadRun};

/// What the report is drawn from: the run, and where it ran.
pub(crate) struct RunView<'a> {
    pub model: &'a str,
    pub isa: &'a str,
    pub threads: usize,
    pub workload: &'a Path,
    pub run: &'a WorkloadRun,
}

/// Writes the report into `dir`; returns the index's path.
pub(crate) fn write(dir: &Path, view: &RunView<'_>) -> anyhow::Result<std::path::PathBuf> {
    let run = view.run;
    let curve = &run.cost_curve;
    let mut sections = vec![Section {
        heading: "All records".into(),
        text: vec![format!(
            "Speedup is decode tokens per second over plain decoding's (`none`) on the same \
             records; modeled prices each decode step on the forward cost curve below, free \
             of run-to-run noise; floor is the worst record's speedup. The copy oracle \
             (always copying the longest true continuation from the prompt, references or \
             output so far) reaches a mean accepted length of {:.2}, and {:.2}x plain \
             copying only as deep as pays on the cost curve (the ceiling of any copying \
             drafter). A perfect drafter \
             (always drafting the true continuation, as deep as pays on the cost curve, \
             {} nodes a step) would reach {:.2}x: the ceiling of any drafter on this machine.",
            run.copy_oracle_mean_accepted_length,
            run.copy_oracle_ceiling,
            run.perfect_drafter_nodes,
            run.perfect_drafter_ceiling
        )],
        table: Some(summary_table(&run.summary)),
        plots: vec![
            speedup_distribution_plot(
                &per_record(run, |r| r.speedup_vs_none),
                "speedup.svg",
                "Per-record speedup over plain decoding",
            ),
            speedup_distribution_plot(
                &per_record(run, |r| r.modeled_speedup_vs_none),
                "speedup_modeled.svg",
                "Per-record modeled speedup (steps priced on the cost curve)",
            ),
            acceptance_plot(
                &run.summary
                    .iter()
                    .skip(1)
                    .map(|s| {
                        let steps = s.completion_tokens as f64 / s.mean_accepted_length.max(1e-9);
                        (
                            s.method.to_string(),
                            s.accepted_by_position.clone(),
                            steps.round() as usize,
                        )
                    })
                    .collect::<Vec<_>>(),
                "acceptance.svg",
            ),
        ],
    }];
    for (class, s) in &run.classes {
        sections.push(Section {
            heading: format!("Class {class}"),
            table: Some(summary_table(s)),
            ..Section::default()
        });
    }
    sections.push(Section {
        heading: "Forward cost".into(),
        text: vec![
            "One forward over n tree nodes after a 300-token prefix, median of 5, measured \
             before the first record; every modeled figure above is priced on it."
                .into(),
        ],
        table: Some(Table {
            header: vec!["nodes".into(), "ms".into(), "x one node".into()],
            rows: curve
                .points()
                .iter()
                .map(|&(n, ms)| {
                    vec![
                        n.to_string(),
                        format!("{ms:.2}"),
                        format!("{:.2}", ms / curve.ms(1)),
                    ]
                })
                .collect(),
        }),
        plots: vec![cost_curve_plot(curve, "cost_curve.svg")],
    });
    let report = Report {
        title: format!("specdec bench: {}", view.workload.display()),
        intro: vec![format!(
            "Model `{}`, {} threads ({}), {} records, {} in flight, median of {} \
             repetition(s) per record, verification `{}`.",
            view.model,
            view.threads,
            view.isa,
            run.records
                .iter()
                .filter(|r| r.method == specdec_engine::DraftMethod::None.name())
                .count(),
            run.concurrency,
            run.repeats,
            run.verify
        )],
        sections,
    };
    Ok(report.write(dir)?)
}

/// A sweep's report: each run's report in `dir/concurrency-N/`, and in `dir/index.md`
/// throughput against concurrency (table and plot) with links to them. Returns the
/// index's path.
pub(crate) fn write_sweep(
    dir: &Path,
    views: &[RunView<'_>],
    rows: &[SweepRow],
) -> anyhow::Result<std::path::PathBuf> {
    let mut links = Vec::new();
    for v in views {
        let sub = format!("concurrency-{}", v.run.concurrency);
        write(&dir.join(&sub), v)?;
        links.push(format!(
            "- [{} in flight]({sub}/index.md): every method's table, per-record speedups, \
             acceptance and the cost curve measured at the start of that run",
            v.run.concurrency
        ));
    }
    let first = views.first().context("a sweep has runs")?;
    let report = Report {
        title: format!(
            "specdec bench: {}, throughput against concurrency",
            first.workload.display()
        ),
        intro: vec![format!(
            "Model `{}`, {} threads ({}), one run per concurrency, one after the other, each \
             on a fresh engine; within a run the methods take turns on groups of records. \
             Aggregate throughput is completion tokens over wall time, prefill included: \
             what a batch of clients sees.",
            first.model, first.threads, first.isa
        )],
        sections: vec![
            Section {
                heading: "Throughput".into(),
                text: vec![
                    "x lowest: over the same method's throughput at the sweep's lowest \
                     concurrency; x none: over plain decoding's at the same concurrency; \
                     modeled: the same ratios with batched forwards priced by their \
                     rows, every concurrency's on the lowest one's cost curve, free of the \
                     machine's drift between runs; \
                     prefill: the share of wall time in steps that carried a prompt's rows, \
                     which batching does not shrink."
                        .into(),
                ],
                table: Some(Table {
                    header: [
                        "concurrency",
                        "method",
                        "tok/s",
                        "x lowest",
                        "x none",
                        "modeled x lowest",
                        "modeled x none",
                        "prefill",
                    ]
                    .map(String::from)
                    .to_vec(),
                    rows: rows
                        .iter()
                        .map(|r| {
                            vec![
                                r.concurrency.to_string(),
                                r.method.to_string(),
                                format!("{:.1}", r.aggregate_tokens_per_second),
                                format!("{:.2}x", r.vs_lowest_concurrency),
                                format!("{:.2}x", r.vs_none),
                                format!("{:.2}x", r.modeled_vs_lowest_concurrency),
                                format!("{:.2}x", r.modeled_vs_none),
                                format!("{:.0}%", 100.0 * r.prefill_share),
                            ]
                        })
                        .collect(),
                }),
                plots: vec![throughput_plot(rows, "throughput.svg")],
            },
            Section {
                heading: "Each run".into(),
                text: vec![links.join("\n")],
                ..Section::default()
            },
        ],
    };
    Ok(report.write(dir)?)
}

fn per_record(run: &WorkloadRun, f: impl Fn(&RecordRow) -> f64) -> Vec<(String, Vec<f64>)> {
    run.summary
        .iter()
        .skip(1)
        .map(|s| {
            let values = run
                .records
                .iter()
                .filter(|r| r.method == s.method)
                .map(&f)
                .collect();
            (s.method.to_string(), values)
        })
        .collect()
}

fn summary_table(summary: &[SummaryRow]) -> Table {
    Table {
        header: [
            "method",
            "records",
            "tokens",
            "tok/s",
            "speedup",
            "floor",
            "<0.95x",
            "modeled",
            "modeled floor",
            "MAL",
            "identical",
        ]
        .map(String::from)
        .to_vec(),
        rows: summary
            .iter()
            .map(|s| {
                vec![
                    s.method.to_string(),
                    s.records.to_string(),
                    s.completion_tokens.to_string(),
                    format!("{:.1}", s.tokens_per_second),
                    format!("{:.2}x", s.speedup_vs_none),
                    format!("{:.2}x", s.min_record_speedup),
                    s.records_below_0_95.to_string(),
                    format!("{:.2}x", s.modeled_speedup_vs_none),
                    format!("{:.2}x", s.min_record_modeled_speedup),
                    format!("{:.2}", s.mean_accepted_length),
                    format!("{}/{}", s.identical_records, s.records),
                ]
            })
            .collect(),
    }
}
