//! `specdec bench`: the forward cost curve and workload runs.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde::Serialize;
use specdec_runtime::{Node, SeqInput, Want};

use crate::common::{self, ModelArgs};
use crate::draft_args::DraftArgs;
use crate::generate::SamplingArgs;
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
    #[command(flatten)]
    sampling: SamplingArgs,
    #[command(flatten)]
    drafting: DraftArgs,
    #[command(flatten)]
    model: ModelArgs,
}

#[derive(Subcommand, Debug)]
enum BenchCommand {
    /// Time one forward over n = 1..64 tree nodes after a 100-token prefix.
    VerifyCost {
        #[arg(long)]
        json: bool,
        /// Timed repeats per n (interleaved across n); the median is reported.
        #[arg(long, default_value_t = 15)]
        repeats: usize,
        #[command(flatten)]
        model: ModelArgs,
    },
}

pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    match args.command {
        Some(BenchCommand::VerifyCost {
            json,
            repeats,
            model,
        }) => verify_cost(&model, repeats, json),
        None => {
            let path = args
                .workload
                .context("give --workload FILE.jsonl or a subcommand (verify-cost)")?;
            crate::workload::run(&crate::workload::Options {
                model: args.model,
                path,
                methods: args.draft,
                warm: args.warm,
                json: args.json,
                sampling: args.sampling.params(),
                drafting: args.drafting,
            })
        }
    }
}

const SIZES: [usize; 7] = [1, 2, 4, 8, 16, 32, 64];
const PREFIX: usize = 100;

#[derive(Serialize)]
struct CostRow {
    n: usize,
    ms: f64,
    ratio: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn verify_cost(args: &ModelArgs, repeats: usize, json: bool) -> anyhow::Result<()> {
    let loaded = common::load(args)?;
    let text = include_str!("../../../data/passage.txt");
    let mut tokens = loaded.tokenizer.encode(text, false)?;
    anyhow::ensure!(tokens.len() >= PREFIX + 64, "passage too short");
    tokens.truncate(PREFIX + 64);
    let model = &loaded.model;
    let mut seq = model.new_sequence();
    let prefix = Node::chain(&tokens[..PREFIX]);
    model.forward(&mut [SeqInput {
        seq: &mut seq,
        nodes: &prefix,
        want: Want::None,
    }])?;
    seq.commit_all()?;
    let mut times = vec![Vec::new(); SIZES.len()];
    // One untimed round warms caches and the thread pool.
    for round in 0..repeats.max(1) + 1 {
        for (i, &n) in SIZES.iter().enumerate() {
            let nodes = Node::chain(&tokens[PREFIX..PREFIX + n]);
            let t = Instant::now();
            model.forward(&mut [SeqInput {
                seq: &mut seq,
                nodes: &nodes,
                want: Want::All,
            }])?;
            if round > 0 {
                times[i].push(t.elapsed().as_secs_f64() * 1e3);
            }
        }
    }
    let base = median(times[0].clone());
    let rows: Vec<CostRow> = SIZES
        .iter()
        .zip(times)
        .map(|(&n, t)| {
            let ms = median(t);
            CostRow {
                n,
                ms,
                ratio: ms / base,
            }
        })
        .collect();
    if json {
        println!("{}", serde_json::json!({ "rows": rows }));
    } else {
        println!(
            "forward over n nodes after a {PREFIX}-token prefix ({} threads, {})",
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
