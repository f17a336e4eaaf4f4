//! `specdec bench`: the forward cost curve and workload runs.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde::{Deserialize, Serialize};
use specdec_engine::{Engine, GenerateRequest};
use specdec_runtime::{Node, SeqInput, Want};

use crate::common::{self, ModelArgs};

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: Option<BenchCommand>,
    /// A JSONL file of records {id, prompt, references?, max_tokens, chat}.
    #[arg(long)]
    workload: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
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
            workload(&args.model, &path, args.json)
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Record {
    id: String,
    prompt: String,
    #[serde(default)]
    #[allow(dead_code)] // Used by the reference drafter; plain decoding ignores it.
    references: Vec<String>,
    #[serde(default = "default_max_tokens")]
    max_tokens: usize,
    #[serde(default)]
    chat: bool,
}

fn default_max_tokens() -> usize {
    128
}

#[derive(Serialize)]
struct RecordRow {
    id: String,
    method: &'static str,
    completion_tokens: usize,
    elapsed_ms: f64,
    tokens_per_second: f64,
    forward_passes: usize,
    token_ids: Vec<u32>,
}

#[derive(Serialize)]
struct SummaryRow {
    method: &'static str,
    records: usize,
    completion_tokens: usize,
    elapsed_ms: f64,
    tokens_per_second: f64,
}

fn workload(args: &ModelArgs, path: &PathBuf, json: bool) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading workload {}", path.display()))?;
    let records: Vec<Record> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l)
                .with_context(|| format!("{}:{}: bad workload record", path.display(), i + 1))
        })
        .collect::<anyhow::Result<_>>()?;
    let loaded = common::load(args)?;
    let engine = Engine::new(&loaded.model, &loaded.tokenizer);
    let method = "none";
    let mut rows = Vec::new();
    for r in &records {
        let prompt = loaded.prompt_tokens(&r.prompt, r.chat, None)?;
        let req = GenerateRequest::new(prompt, r.max_tokens);
        let out = engine
            .generate(&req, None, &mut |_| true)
            .with_context(|| format!("record {}", r.id))?;
        let ms = out.elapsed.as_secs_f64() * 1e3;
        rows.push(RecordRow {
            id: r.id.clone(),
            method,
            completion_tokens: out.completion_tokens,
            elapsed_ms: ms,
            tokens_per_second: out.completion_tokens as f64 / (ms / 1e3),
            forward_passes: out.forward_passes,
            token_ids: out.token_ids,
        });
    }
    let tokens: usize = rows.iter().map(|r| r.completion_tokens).sum();
    let ms: f64 = rows.iter().map(|r| r.elapsed_ms).sum();
    let summary = vec![SummaryRow {
        method,
        records: rows.len(),
        completion_tokens: tokens,
        elapsed_ms: ms,
        tokens_per_second: tokens as f64 / (ms / 1e3),
    }];
    if json {
        println!(
            "{}",
            serde_json::json!({ "records": rows, "summary": summary })
        );
    } else {
        println!(
            "{:<10} {:>8} {:>10} {:>12} {:>8}",
            "method", "records", "tokens", "elapsed_ms", "tok/s"
        );
        for s in &summary {
            println!(
                "{:<10} {:>8} {:>10} {:>12.1} {:>8.1}",
                s.method, s.records, s.completion_tokens, s.elapsed_ms, s.tokens_per_second
            );
        }
    }
    Ok(())
}
