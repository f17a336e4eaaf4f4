//! `specdec rec bench`: LASER's benchmark (`specdec_bench::knowledge`): plain, strict with
//! no pool, one global pool or per-group pools, and relaxed with per-group pools, each at
//! concurrency 1 and N, interleaved in one process; this prints its tables or JSON.

use std::path::PathBuf;

use specdec_bench::knowledge::{self, KnowledgeModel, KnowledgeOptions, Progress, SummaryRow};

use crate::common::{self, ModelArgs};
use crate::verify_args::VerifyArgs;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Knowledge records (`rec prepare`'s users.jsonl and/or items.jsonl); their target
    /// members are benchmarked.
    #[arg(long = "records", required = true)]
    pub records: Vec<PathBuf>,
    /// The warm pools: the `--pools` folder of a `rec knowledge --warmup only` run over
    /// the same records. Read only; without it every pool starts empty.
    #[arg(long)]
    pub pools: Option<PathBuf>,
    /// Without `--pools`: warm-up members per group to generate first (strict, batched)
    /// into fresh pools.
    #[arg(long, default_value_t = 24)]
    pub warmup: usize,
    /// Only these groups (default: every group of the records).
    #[arg(long, value_delimiter = ',')]
    pub groups: Vec<String>,
    /// Target members per group (the first in file order).
    #[arg(long, default_value_t = 4)]
    pub targets: usize,
    /// Records in flight in the batched phase (1: skip it).
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// Times the batched phase runs, each from the warm pools on fresh engines: a chunk of
    /// records in flight is one measurement, so a batched speedup is the median round's
    /// (each round's throughput over plain's in that round), with the range beside it.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Tokens per record (a record's own max_tokens overrides).
    #[arg(long, default_value_t = 256)]
    pub max_tokens: usize,
    /// Most draft nodes per step.
    #[arg(long, default_value_t = 32)]
    pub budget: usize,
    /// The relaxed configuration's rule (`--verify` itself is ignored: every
    /// configuration but relaxed-group is strict).
    #[command(flatten)]
    pub verify: VerifyArgs,
    /// One JSON object on stdout instead of tables.
    #[arg(long)]
    pub json: bool,
}

fn print_table(rows: &[SummaryRow]) {
    println!(
        "{:<14} {:>3} {:>7} {:>7} {:>8} {:>8} {:>11} {:>7} {:>6} {:>6} {:>7} {:>6} {:>7} {:>9}",
        "config",
        "c",
        "records",
        "tokens",
        "tok/s",
        "speedup",
        "range",
        "modeled",
        "floor",
        "MAL",
        "oracle",
        "oMAL",
        "relaxed",
        "identical"
    );
    for s in rows {
        let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}x"));
        println!(
            "{:<14} {:>3} {:>7} {:>7} {:>8.1} {:>7.2}x {:>11} {:>7} {:>6} {:>6.2} {:>7} {:>6} {:>6.1}% {:>9}",
            s.config,
            s.concurrency,
            s.records,
            s.completion_tokens,
            s.tokens_per_second,
            s.speedup_vs_plain,
            s.speedup_range
                .map_or("-".to_string(), |[lo, hi]| format!("{lo:.2}-{hi:.2}x")),
            format!("{:.2}x", s.modeled_speedup_vs_plain),
            opt(s.min_record_speedup),
            s.mean_accepted_length,
            opt(s.copy_oracle_ceiling),
            s.copy_oracle_mean_accepted_length
                .map_or("-".to_string(), |v| format!("{v:.2}")),
            100.0 * s.relaxed_accept_rate,
            format!("{}/{}", s.identical_to_plain, s.records),
        );
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let relaxed = args.verify.relaxed()?;
    let loaded = common::load(&args.model)?;
    let m = KnowledgeModel {
        model: &loaded.model,
        tokenizer: &loaded.tokenizer,
        template: &loaded.template,
    };
    let opts = KnowledgeOptions {
        pools: args.pools.clone(),
        warmup: args.warmup,
        groups: args.groups.clone(),
        targets: args.targets,
        concurrency: args.concurrency,
        rounds: args.rounds,
        max_tokens: args.max_tokens,
        budget: args.budget,
        relaxed,
    };
    let quiet = args.json;
    let mut progress = |p: Progress<'_>| match p {
        _ if quiet => {}
        Progress::Warmup {
            members,
            tokens,
            seconds,
        } => eprintln!("warm-up: {members} members, {tokens} tokens in {seconds:.1} s"),
        Progress::Chunk {
            concurrency,
            round: (round, rounds),
            done,
            of,
            id,
            speeds,
        } => {
            let line: Vec<String> = speeds.iter().map(|(c, s)| format!("{c} {s:.0}")).collect();
            let round = if rounds > 1 {
                format!(" round {}/{rounds}", round + 1)
            } else {
                String::new()
            };
            eprintln!(
                "[c={concurrency}{round} {done}/{of}] {id}: tok/s {}",
                line.join(", ")
            );
        }
    };
    let run = knowledge::run(&m, &args.records, &opts, &mut progress)?;
    if args.json {
        println!("{}", serde_json::to_string(&run)?);
        return Ok(());
    }
    println!(
        "{} target records of {} groups ({}), relaxed top-k {} tau {}",
        run.targets,
        run.groups.len(),
        run.groups.iter().cloned().collect::<Vec<_>>().join(", "),
        run.relaxed.top_k,
        run.relaxed.tau
    );
    print_table(&run.summary);
    println!(
        "(speedup: over plain at the same concurrency; at c=1 decode tok/s with prefill \
         excluded, at c>1 completion tokens per second of wall time, the median round's \
         ratio to plain in the same round and the rounds' range; modeled: each step's \
         forward priced by the measured cost curve, at c>1 each batched forward by all its \
         rows (the median round); floor: lowest per-record speedup; \
         oracle, oMAL: the copy oracle's ceiling on the cost curve and its mean accepted \
         length over what the configuration's pool held and the text it wrote; relaxed: \
         accepted draft tokens only the relaxation let through)"
    );
    println!(
        "a perfect drafter here: {:.2}x at {} nodes a step (the measured cost curve)",
        run.perfect_drafter_ceiling, run.perfect_drafter_nodes
    );
    for (c, v) in &run.batched_vs_plain_concurrency_1 {
        println!(
            "c={} {c}: {v:.2}x plain decoding one record at a time",
            args.concurrency
        );
    }
    Ok(())
}
