//! `specdec bench`: the forward cost curve and workload runs.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde::Serialize;

use crate::common::{self, ModelArgs};
use crate::draft_args::DraftArgs;
use crate::sampling_args::SamplingArgs;
use crate::verify_args::VerifyArgs;
use crate::workload::ForcedField;
use specdec_bench::cost::cost_curve_at;
use specdec_engine::DraftMethod;

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: Option<BenchCommand>,
    /// A JSONL file of records {id, prompt, references?, max_tokens, chat}.
    #[arg(long)]
    workload: Option<PathBuf>,
    /// Methods to compare, run side by side on every record (`none` always runs first).
    #[arg(long, value_delimiter = ',', default_value = "none,reference,trie,suffix,auto", value_parser = DraftMethod::parse)]
    draft: Vec<DraftMethod>,
    /// A workload generated first (not measured) to warm the trie.
    #[arg(long)]
    warm: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Also write a report into this directory: `index.md` with the tables, and SVG plots
    /// (per-record speedups, acceptance by position, the forward cost curve).
    #[arg(long, value_name = "DIR")]
    report: Option<PathBuf>,
    /// Records generated together, batched through the engine's scheduler (outputs are
    /// the same at any concurrency). Several values (`1,2,4,8`) run the workload once per
    /// concurrency, each on a fresh engine, and add throughput against concurrency (a
    /// table, and a plot in the report).
    #[arg(long, value_delimiter = ',', default_value = "1", value_parser = clap::value_parser!(u64).range(1..=256))]
    concurrency: Vec<u64>,
    /// Make every output this record field (LLMA's forced-output benchmark): the target
    /// still verifies every draft tree, but drafts are accepted against the field's tokens,
    /// not the model's choice. Measures drafting on realistic answers; not plain decoding.
    #[arg(long, value_enum)]
    forced: Option<ForcedField>,
    /// Timed runs of each record per method, interleaved (none, m1, .., none, m1, ..),
    /// every method's pool put back before each; per record the median is reported.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=100))]
    repeats: u64,
    #[command(flatten)]
    sampling: SamplingArgs,
    #[command(flatten)]
    drafting: DraftArgs,
    #[command(flatten)]
    verify: VerifyArgs,
    #[command(flatten)]
    model: ModelArgs,
}

#[derive(Subcommand, Debug)]
enum BenchCommand {
    /// Time one forward over n tree nodes (1..64 by default) after a prefix of committed tokens.
    VerifyCost {
        #[arg(long)]
        json: bool,
        /// Timed repeats per n (interleaved across n); the median is reported.
        #[arg(long, default_value_t = 15)]
        repeats: usize,
        /// Committed tokens the nodes attend to (attention grows with them).
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=100_000))]
        prefix: u64,
        /// Node counts to time, ascending from 1 (say 1,8,9,10,12,16 to see the steps a
        /// kernel's row groups make between the default powers of two).
        #[arg(long, value_delimiter = ',', default_values_t = specdec_bench::cost::SIZES)]
        nodes: Vec<usize>,
        #[command(flatten)]
        model: ModelArgs,
    },
    /// Each forward size (n = 1..64 nodes, at each prefix) against this machine's floor:
    /// the bytes it must read over the measured streaming bandwidth, or its multiply-adds
    /// over the measured peak rates, whichever is larger; and against a second floor with
    /// the matmul kernels' own measured rate (on cached weights) in place of the peak.
    Roofline {
        #[arg(long)]
        json: bool,
        /// Timed repeats per n (interleaved across n); the median is reported.
        #[arg(long, default_value_t = 15)]
        repeats: usize,
        /// Committed tokens the nodes attend to, one table each.
        #[arg(long, value_delimiter = ',', default_value = "100,1000")]
        prefix: Vec<usize>,
        /// The bandwidth probe's buffer (make it several times the last-level cache).
        #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(64..=16384))]
        buffer_mib: u64,
        /// Node counts whose forward is profiled phase by phase at each prefix.
        #[arg(long, value_delimiter = ',', default_value = "1,16")]
        profile: Vec<usize>,
        /// Also write a report here: `index.md` with the table and, per prefix, the
        /// measured curve against its floors (SVG).
        #[arg(long, value_name = "DIR")]
        report: Option<std::path::PathBuf>,
        #[command(flatten)]
        model: ModelArgs,
    },
    /// Drafters over a recorded strict run's outputs without the target's forwards: each
    /// method's acceptance and modeled speedup in seconds, beside the real run's figures.
    Replay(crate::replay_cmd::ReplayArgs),
}

pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    match args.command {
        Some(BenchCommand::VerifyCost {
            json,
            repeats,
            prefix,
            nodes,
            model,
        }) => verify_cost(&model, repeats, prefix as usize, &nodes, json),
        Some(BenchCommand::Roofline {
            json,
            repeats,
            prefix,
            buffer_mib,
            profile,
            report,
            model,
        }) => {
            anyhow::ensure!(!prefix.is_empty(), "give at least one --prefix");
            let opts = specdec_bench::roofline::RooflineOptions {
                repeats,
                prefixes: prefix,
                buffer_mib: buffer_mib as usize,
                profile_nodes: profile,
            };
            crate::roofline::run(&model, &opts, json, report.as_deref())
        }
        Some(BenchCommand::Replay(r)) => crate::replay_cmd::run(r),
        None => {
            let path = args.workload.context(
                "give --workload FILE.jsonl or a subcommand (verify-cost, roofline, replay)",
            )?;
            // The forced rule decides acceptance itself; it has no relaxed variant.
            anyhow::ensure!(
                args.forced.is_none() || !args.verify.is_relaxed(),
                "--forced and --verify relaxed cannot be combined: a forced output accepts \
                 drafts against the given text, not the target's top-k"
            );
            let sampling = args.sampling.params();
            let acceptance = args.verify.acceptance(&sampling)?;
            crate::workload::run(&crate::workload::Options {
                model: args.model,
                path,
                methods: args.draft,
                warm: args.warm,
                json: args.json,
                sampling,
                acceptance,
                drafting: args.drafting,
                concurrency: args.concurrency.iter().map(|&c| c as usize).collect(),
                forced: args.forced,
                repeats: args.repeats as usize,
                report: args.report,
            })
        }
    }
}

#[derive(Serialize)]
struct CostRow {
    n: usize,
    ms: f64,
    ratio: f64,
}

fn verify_cost(
    args: &ModelArgs,
    repeats: usize,
    prefix: usize,
    nodes: &[usize],
    json: bool,
) -> anyhow::Result<()> {
    let loaded = common::load(args)?;
    let model = &loaded.model;
    let curve = cost_curve_at(&loaded.model, &loaded.tokenizer, repeats, prefix, nodes)?;
    let base = curve.ms(1);
    let rows: Vec<CostRow> = curve
        .points()
        .iter()
        .map(|&(n, ms)| CostRow {
            n,
            ms,
            ratio: ms / base,
        })
        .collect();
    if json {
        println!("{}", serde_json::json!({ "rows": rows }));
    } else {
        println!(
            "forward over n nodes after a {prefix}-token prefix ({} threads, {})",
            model.executor().threads(),
            model.executor().isa().name()
        );
        println!("{:>4} {:>9} {:>7}", "n", "ms", "ratio");
        for r in &rows {
            println!("{:>4} {:>9.2} {:>7.2}", r.n, r.ms, r.ratio);
        }
    }
    Ok(())
}
