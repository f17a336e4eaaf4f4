//! `specdec bench replay`: drafters over a recorded run's outputs, without the target's
//! forwards (see `specdec_bench::replay`), side by side with what the real run measured.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use serde::Deserialize;
use specdec_bench::cost::CostCurve;
use specdec_bench::replay::{replay, summarize, Recorded, ReplayRow, ReplaySummary, COPY_ORACLE};
use specdec_engine::budget::CostModel;
use specdec_engine::{DraftMethod, DraftModel, Engine, GenerateRequest, ModelMeta, Speculation};
use specdec_runtime::ReplayTarget;
use specdec_workloads::read_jsonl;

use crate::common::{self, ModelArgs};
use crate::draft_args::DraftArgs;

#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// The recorded run: what `specdec bench --workload W --json` printed (its plain
    /// outputs are replayed, its cost curve prices the steps).
    #[arg(long)]
    run: PathBuf,
    /// The workload that run read (prompts and references).
    #[arg(long)]
    workload: PathBuf,
    /// Methods to replay (`none` always runs first).
    #[arg(long, value_delimiter = ',', default_value = "none,reference,suffix,auto", value_parser = DraftMethod::parse)]
    draft: Vec<DraftMethod>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Also write a report into this directory: `index.md` with the table, and SVG plots
    /// (acceptance by position, per-record modeled speedups).
    #[arg(long, value_name = "DIR")]
    report: Option<PathBuf>,
    #[command(flatten)]
    drafting: DraftArgs,
    #[command(flatten)]
    model: ModelArgs,
}

/// The part of a `bench --json` report a replay reads.
#[derive(Deserialize)]
struct Run {
    records: Vec<RunRecord>,
    cost_curve: Option<Vec<(usize, f64)>>,
    verify: String,
    forced: Option<String>,
    model: Option<String>,
}

#[derive(Deserialize)]
struct RunRecord {
    id: String,
    method: String,
    completion_tokens: usize,
    mean_accepted_length: f64,
    modeled_speedup_vs_none: f64,
    token_ids: Vec<u32>,
    #[serde(default)]
    stop_token: Option<u32>,
}

/// A method's replayed figures beside the real run's on the same records.
#[derive(serde::Serialize)]
struct Compared<'a> {
    replay: &'a ReplaySummary,
    real_mean_accepted_length: Option<f64>,
    real_modeled_speedup_vs_none: Option<f64>,
    /// Replayed over real mean accepted length, minus one.
    mean_accepted_length_error: Option<f64>,
}

pub fn run(args: ReplayArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.run)
        .with_context(|| format!("reading {}", args.run.display()))?;
    let run: Run = serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not a `specdec bench --workload .. --json` report",
            args.run.display()
        )
    })?;
    anyhow::ensure!(
        run.verify == "strict" && run.forced.is_none(),
        "{} was verified `{}`{}: only a strict run's outputs are the target's own, which is \
         what a replay assumes",
        args.run.display(),
        run.verify,
        if run.forced.is_some() { ", forced" } else { "" }
    );
    let curve = run
        .cost_curve
        .and_then(CostCurve::from_points)
        .context("the run has no cost curve (record it again with this version's `bench`)")?;
    let cost = CostModel::measured(curve.points()).context("the run's cost curve is unusable")?;
    for &m in &args.draft {
        args.drafting.check(m)?;
    }
    let path = common::model_path(args.model.model.as_deref())?;
    if let (Some(recorded), Some(name)) = (&run.model, path.file_name()) {
        if *recorded != name.to_string_lossy() {
            eprintln!(
                "warning: the run was recorded with {recorded}, the replay tokenizes for {}",
                name.to_string_lossy()
            );
        }
    }
    // The model's metadata only: its weights are never read.
    let meta = ModelMeta::open(&path)?;
    let target = ReplayTarget::new(&meta.config);
    let mut engine = Engine::new(&target, &meta.tokenizer)
        .with_cost_model(cost)
        .with_pools(args.drafting.pools(meta.config.vocab)?);
    if let Some(p) = &args.drafting.draft_model {
        let draft_path = common::model_path(Some(p))?;
        engine = engine.with_draft_model(
            DraftModel::load(&draft_path, &meta, &path, args.model.threads)
                .with_context(|| format!("loading the draft model {}", draft_path.display()))?,
        );
    }
    let plain: BTreeMap<&str, &RunRecord> = run
        .records
        .iter()
        .filter(|r| r.method == DraftMethod::None.name())
        .map(|r| (r.id.as_str(), r))
        .collect();
    let mut records = Vec::new();
    for r in read_jsonl(&args.workload)? {
        let Some(out) = plain.get(r.id.as_str()) else {
            continue;
        };
        let prompt = common::prompt_tokens(&meta, &r.prompt, r.chat, None)?;
        let references = r
            .references
            .iter()
            .map(|t| meta.tokenizer.encode(t, false))
            .collect::<Result<_, _>>()?;
        let request = GenerateRequest {
            speculation: Speculation {
                max_draft: args.drafting.budget,
                references,
                ..Speculation::default()
            },
            ..GenerateRequest::new(prompt, r.max_tokens.max(out.token_ids.len()))
        };
        records.push(Recorded {
            id: r.id,
            request,
            output: out.token_ids.clone(),
            stop_token: out.stop_token,
            oracle_sources: Vec::new(),
        });
    }
    anyhow::ensure!(
        !records.is_empty(),
        "no record of {} has a plain output in {}",
        args.workload.display(),
        args.run.display()
    );
    let t0 = std::time::Instant::now();
    let rows = replay(
        &mut engine,
        &curve,
        &records,
        &args.draft,
        args.drafting.budget,
    )?;
    let secs = t0.elapsed().as_secs_f64();
    let summary = summarize(&rows);
    let compared: Vec<Compared<'_>> = summary
        .iter()
        .map(|s| {
            let real = real_figures(&run.records, &rows, s.method);
            Compared {
                replay: s,
                real_mean_accepted_length: real.map(|r| r.0),
                real_modeled_speedup_vs_none: real.map(|r| r.1),
                mean_accepted_length_error: real.map(|r| s.mean_accepted_length / r.0 - 1.0),
            }
        })
        .collect();
    if let Some(dir) = &args.report {
        let index = write_report(dir, &args, &rows, &compared)?;
        eprintln!("report: {}", index.display());
    }
    if args.json {
        println!(
            "{}",
            serde_json::json!({ "records": rows, "summary": compared, "seconds": secs })
        );
        return Ok(());
    }
    println!(
        "replay of {} records of {} ({secs:.1} s, no target forward; steps priced on the \
         run's cost curve)",
        records.len(),
        args.run.display()
    );
    println!(
        "{:<11} {:>7} {:>9} {:>8} {:>9} {:>9} {:>6} | {:>8} {:>9}",
        "method", "records", "MAL", "modeled", "floor", "<0.95x", "", "real MAL", "real mod."
    );
    for c in &compared {
        let s = c.replay;
        println!(
            "{:<11} {:>7} {:>9.2} {:>7.2}x {:>8.2}x {:>9} {:>6} | {:>8} {:>9}",
            s.method,
            s.records,
            s.mean_accepted_length,
            s.modeled_speedup_vs_none,
            s.min_record_modeled_speedup,
            s.records_below_0_95_modeled,
            c.mean_accepted_length_error
                .map_or(String::new(), |e| format!("{:+.1}%", e * 100.0)),
            c.real_mean_accepted_length
                .map_or("-".into(), |m| format!("{m:.2}")),
            c.real_modeled_speedup_vs_none
                .map_or("-".into(), |m| format!("{m:.2}x")),
        );
    }
    println!(
        "(MAL: tokens per decode step; modeled: none's modeled decode time over the method's; \
         floor: the lowest per-record modeled speedup; the signed figure is the replay's MAL \
         against the real run's, on the same records; {COPY_ORACLE}: the cheapest plan that \
         drafts only copyable stretches of the true output, the ceiling of any copying \
         drafter)"
    );
    Ok(())
}

/// The real run's mean accepted length and modeled speedup for `method` over the records
/// the replay covered, if the run measured that method.
fn real_figures(records: &[RunRecord], replayed: &[ReplayRow], method: &str) -> Option<(f64, f64)> {
    let (mut tokens, mut steps, mut seen) = (0.0, 0.0, false);
    for r in records.iter().filter(|r| r.method == method) {
        if !replayed.iter().any(|p| p.id == r.id) {
            continue;
        }
        tokens += r.completion_tokens as f64;
        steps += r.completion_tokens as f64 / r.mean_accepted_length.max(1e-9);
        seen = true;
    }
    if !seen {
        return None;
    }
    Some((
        tokens / steps.max(1e-9),
        modeled_speedup(records, replayed, method),
    ))
}

/// none's modeled decode time over the method's, combined over records as the replay's
/// summary combines them, from the run's per-record speedups (each record's plain time is
/// the replay's, which prices the same plain steps on the same curve).
fn modeled_speedup(records: &[RunRecord], replayed: &[ReplayRow], method: &str) -> f64 {
    let (mut plain, mut mine) = (0.0, 0.0);
    for r in records.iter().filter(|r| r.method == method) {
        let Some(p) = replayed
            .iter()
            .find(|p| p.id == r.id && p.method == DraftMethod::None.name())
        else {
            continue;
        };
        plain += p.modeled_decode_ms;
        mine += p.modeled_decode_ms / r.modeled_speedup_vs_none.max(1e-9);
    }
    plain / mine.max(1e-9)
}

/// `--report DIR`: the replay's table beside the real run's, and its plots.
fn write_report(
    dir: &std::path::Path,
    args: &ReplayArgs,
    rows: &[ReplayRow],
    compared: &[Compared<'_>],
) -> anyhow::Result<PathBuf> {
    use specdec_bench::report::{
        acceptance_plot, speedup_distribution_plot, Report, Section, Table,
    };
    let drafted = || compared.iter().map(|c| c.replay.method).skip(1);
    let acceptance: Vec<(String, Vec<usize>, usize)> = drafted()
        .map(|m| {
            let mine = rows.iter().filter(|r| r.method == m);
            let mut by = Vec::new();
            let mut steps = 0;
            for r in mine {
                steps += r.decode_steps;
                by.resize(by.len().max(r.accepted_by_position.len()), 0);
                for (d, n) in r.accepted_by_position.iter().enumerate() {
                    by[d] += n;
                }
            }
            (m.to_string(), by, steps)
        })
        .collect();
    let speedups: Vec<(String, Vec<f64>)> = drafted()
        .map(|m| {
            let v = rows
                .iter()
                .filter(|r| r.method == m)
                .map(|r| r.modeled_speedup_vs_none)
                .collect();
            (m.to_string(), v)
        })
        .collect();
    let speedup_plot = speedup_distribution_plot(
        &speedups,
        "speedup_modeled.svg",
        "Per-record modeled speedup (replay)",
    );
    let fmt = |v: Option<f64>, f: &dyn Fn(f64) -> String| v.map_or("-".to_string(), f);
    let table = Table {
        header: [
            "method",
            "records",
            "MAL",
            "modeled",
            "modeled floor",
            "<0.95x",
            "real MAL",
            "MAL error",
            "real modeled",
        ]
        .map(String::from)
        .to_vec(),
        rows: compared
            .iter()
            .map(|c| {
                let s = c.replay;
                vec![
                    s.method.to_string(),
                    s.records.to_string(),
                    format!("{:.2}", s.mean_accepted_length),
                    format!("{:.2}x", s.modeled_speedup_vs_none),
                    format!("{:.2}x", s.min_record_modeled_speedup),
                    s.records_below_0_95_modeled.to_string(),
                    fmt(c.real_mean_accepted_length, &|m| format!("{m:.2}")),
                    fmt(c.mean_accepted_length_error, &|e| {
                        format!("{:+.1}%", e * 100.0)
                    }),
                    fmt(c.real_modeled_speedup_vs_none, &|m| format!("{m:.2}x")),
                ]
            })
            .collect(),
    };
    let report = Report {
        title: format!("specdec bench replay: {}", args.workload.display()),
        intro: vec![format!(
            "Drafters replayed over the plain outputs recorded in `{}`, without the target's \
             forwards: each step is priced on that run's forward cost curve. `real` columns \
             are the recorded run's own figures on the same records.",
            args.run.display()
        )],
        sections: vec![Section {
            heading: "Replay against the real run".into(),
            text: vec![],
            table: Some(table),
            plots: vec![acceptance_plot(&acceptance, "acceptance.svg"), speedup_plot],
        }],
    };
    Ok(report.write(dir)?)
}
