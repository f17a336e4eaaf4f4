//! `specdec bench`: the forward cost curve and workload runs.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde::Serialize;
use specdec_runtime::{Node, SeqInput, Want};

use crate::common::{self, Loaded, ModelArgs};
use crate::draft_args::DraftArgs;
use crate::generate::SamplingArgs;
use crate::verify_args::{VerifyArgs, VerifyRule};
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
    /// Records generated together, batched through the engine's scheduler (outputs are
    /// the same at any concurrency).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=256))]
    concurrency: u64,
    /// Make every output this record field (LLMA's forced-output benchmark): the target
    /// still verifies every draft tree, but drafts are accepted against the field's tokens,
    /// not the model's choice. Measures drafting on realistic answers; not plain decoding.
    #[arg(long, value_enum)]
    forced: Option<crate::workload::ForcedField>,
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
    /// Time one forward over n = 1..64 tree nodes after a prefix of committed tokens.
    VerifyCost {
        #[arg(long)]
        json: bool,
        /// Timed repeats per n (interleaved across n); the median is reported.
        #[arg(long, default_value_t = 15)]
        repeats: usize,
        /// Committed tokens the nodes attend to (attention grows with them).
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=100_000))]
        prefix: u64,
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
        #[command(flatten)]
        model: ModelArgs,
    },
}

pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    match args.command {
        Some(BenchCommand::VerifyCost {
            json,
            repeats,
            prefix,
            model,
        }) => verify_cost(&model, repeats, prefix as usize, json),
        Some(BenchCommand::Roofline {
            json,
            repeats,
            prefix,
            buffer_mib,
            profile,
            model,
        }) => {
            anyhow::ensure!(!prefix.is_empty(), "give at least one --prefix");
            crate::roofline::run(
                &model,
                repeats,
                &prefix,
                buffer_mib as usize,
                &profile,
                json,
            )
        }
        None => {
            let path = args
                .workload
                .context("give --workload FILE.jsonl or a subcommand (verify-cost, roofline)")?;
            // The forced rule decides acceptance itself; it has no relaxed variant.
            anyhow::ensure!(
                args.forced.is_none() || args.verify.rule == VerifyRule::Strict,
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
                concurrency: args.concurrency as usize,
                forced: args.forced,
                repeats: args.repeats as usize,
            })
        }
    }
}

const SIZES: [usize; 7] = [1, 2, 4, 8, 16, 32, 64];
/// Untimed forwards of the same size before each timed one. Decoding runs forwards of
/// similar sizes back to back; a forward timed right after a much larger one is slower
/// (about 10% at n = 1 after n = 64 here), which made the curve look flatter than what
/// decoding pays.
const SETTLE: usize = 2;

#[derive(Serialize)]
struct CostRow {
    n: usize,
    ms: f64,
    ratio: f64,
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The forward cost curve: milliseconds of one forward over n = 1, 2, 4, ..., 64 chained
/// nodes after `prefix` committed tokens (median of `repeats` interleaved timings).
pub fn cost_curve(loaded: &Loaded, repeats: usize, prefix: usize) -> anyhow::Result<CostCurve> {
    let max = *SIZES.last().expect("sizes");
    let (mut seq, tokens) = prefilled(loaded, prefix, max)?;
    let model = &loaded.model;
    let mut times = vec![Vec::new(); SIZES.len()];
    // One untimed round warms caches and the thread pool.
    for round in 0..repeats.max(1) + 1 {
        for (i, &n) in SIZES.iter().enumerate() {
            let nodes = Node::chain(&tokens[prefix..prefix + n]);
            for settle in (0..=SETTLE).rev() {
                let t = Instant::now();
                model.forward(&mut [SeqInput {
                    seq: &mut seq,
                    nodes: &nodes,
                    want: Want::All,
                }])?;
                if round > 0 && settle == 0 {
                    times[i].push(t.elapsed().as_secs_f64() * 1e3);
                }
            }
        }
    }
    Ok(CostCurve(
        SIZES
            .iter()
            .zip(times)
            .map(|(&n, t)| (n, median(t)))
            .collect(),
    ))
}

/// A sequence holding `prefix` committed tokens of a real passage, and the passage's
/// tokens (repeated as often as needed) for `prefix + extra` positions, the rest to feed
/// as nodes.
pub fn prefilled(
    loaded: &Loaded,
    prefix: usize,
    extra: usize,
) -> anyhow::Result<(specdec_runtime::Sequence, Vec<u32>)> {
    let model = &loaded.model;
    let limit = model.config().context_length;
    anyhow::ensure!(
        prefix + extra <= limit,
        "--prefix {prefix} plus {extra} nodes exceeds the model's context ({limit})"
    );
    // A real passage, repeated as often as the prefix needs (cost does not depend on
    // which tokens they are).
    let text = include_str!("../../../data/passage.txt");
    let one = loaded.tokenizer.encode(text, false)?;
    anyhow::ensure!(!one.is_empty(), "empty passage");
    let tokens: Vec<u32> = one.iter().copied().cycle().take(prefix + extra).collect();
    let mut seq = model.new_sequence();
    for chunk in tokens[..prefix].chunks(512) {
        model.forward(&mut [SeqInput {
            seq: &mut seq,
            nodes: &Node::chain(chunk),
            want: Want::None,
        }])?;
        seq.commit_all()?;
    }
    Ok((seq, tokens))
}

/// Measured forward cost by node count (see [`cost_curve`]).
pub struct CostCurve(Vec<(usize, f64)>);

impl CostCurve {
    /// The measured (nodes, milliseconds) pairs.
    pub fn points(&self) -> &[(usize, f64)] {
        &self.0
    }

    /// Milliseconds of a forward over `n` nodes: linear between the measured sizes, and
    /// beyond the largest along its last segment.
    pub fn ms(&self, n: usize) -> f64 {
        let p = &self.0;
        let i = p.partition_point(|&(m, _)| m < n).clamp(1, p.len() - 1);
        let ((n0, t0), (n1, t1)) = (p[i - 1], p[i]);
        let f = (n as f64 - n0 as f64) / (n1 - n0) as f64;
        (t0 + f * (t1 - t0)).max(0.0)
    }

    /// What decode steps cost: `steps_by_size[k]` forwards over `1 + k` nodes each.
    pub fn steps_ms(&self, steps_by_size: &[usize]) -> f64 {
        steps_by_size
            .iter()
            .enumerate()
            .map(|(k, &n)| n as f64 * self.ms(1 + k))
            .sum()
    }
}

fn verify_cost(args: &ModelArgs, repeats: usize, prefix: usize, json: bool) -> anyhow::Result<()> {
    let loaded = common::load(args)?;
    let model = &loaded.model;
    let curve = cost_curve(&loaded, repeats, prefix)?;
    let base = curve.ms(1);
    let rows: Vec<CostRow> = curve
        .0
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
