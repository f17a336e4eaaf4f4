//! `specdec rec knowledge`: the knowledge job (the library is `specdec_rec::job`).

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use specdec_engine::{DraftMethod, Engine, HistoryConfig, Pools, SamplingParams};
use specdec_rec::job::{self, JobOptions, Shard, Warmup};

use crate::common::{self, ModelArgs};
use crate::verify_args::VerifyArgs;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The records (JSONL, one `KnowledgeRecord` a line).
    #[arg(long)]
    pub input: PathBuf,
    /// Where each finished record is appended (JSONL); must be empty or absent unless
    /// --resume.
    #[arg(long)]
    pub output: PathBuf,
    /// Folder of the group pools (`GROUP.trie`, `GROUP.history`), loaded and saved back;
    /// without it the pools live in memory for the run. One folder per process: two
    /// processes do not merge their pools' history files.
    #[arg(long)]
    pub pools: Option<PathBuf>,
    /// Draft method: none, reference, prompt, trie, suffix, history or auto.
    #[arg(long, default_value = "auto", value_parser = DraftMethod::parse)]
    pub draft: DraftMethod,
    /// Most draft nodes per step; the engine adapts below it.
    #[arg(long, default_value_t = 32)]
    pub budget: usize,
    /// For records without their own max_tokens.
    #[arg(long, default_value_t = 256)]
    pub max_tokens: usize,
    /// Records generated together (continuous batching).
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// Run only the records of shard I of N (0-based); JOB_COMPLETION_INDEX and
    /// JOB_COMPLETIONS (a Kubernetes Indexed Job) supply it when set.
    #[arg(long, value_parser = parse_shard)]
    pub shard: Option<Shard>,
    /// Skip the records the output already has (a torn last line is cut and redone).
    #[arg(long)]
    pub resume: bool,
    /// first: warm-up records, then targets; only: warm-up records; skip: targets.
    #[arg(long, value_enum, default_value_t = WarmupArg::First)]
    pub warmup: WarmupArg,
    /// Saves the pools at most this often (seconds) while records finish, and at the end.
    #[arg(long, default_value_t = 60)]
    pub save_every: u64,
    /// The rule for records without their own `verify` (a record's `verify`, `top_k`
    /// and `tau` override it).
    #[command(flatten)]
    pub verify: VerifyArgs,
    #[command(flatten)]
    pub model: ModelArgs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum WarmupArg {
    First,
    Only,
    Skip,
}

fn parse_shard(s: &str) -> Result<Shard, String> {
    Shard::parse(s).map_err(|e| e.to_string())
}

impl Args {
    fn options(&self) -> anyhow::Result<JobOptions> {
        // The job decodes greedily.
        let acceptance = self.verify.acceptance(&SamplingParams::default())?;
        let shard = Shard::resolve(self.shard, |name| std::env::var(name).ok())?;
        Ok(JobOptions {
            method: self.draft,
            budget: self.budget,
            max_tokens: self.max_tokens,
            concurrency: self.concurrency,
            acceptance,
            warmup: match self.warmup {
                WarmupArg::First => Warmup::First,
                WarmupArg::Only => Warmup::Only,
                WarmupArg::Skip => Warmup::Skip,
            },
            shard,
            resume: self.resume,
            save_every: Some(Duration::from_secs(self.save_every)),
            ..JobOptions::default()
        })
    }
}

/// SIGINT and SIGTERM set the first flag (the job stops admitting, finishes what is in
/// flight and saves); a second one while it is set exits at once with 130. SIGTERM also
/// sets the second.
fn stop_flags() -> anyhow::Result<(Arc<AtomicBool>, Arc<AtomicBool>)> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let stop = Arc::new(AtomicBool::new(false));
    let term = Arc::new(AtomicBool::new(false));
    for sig in [SIGINT, SIGTERM] {
        // Registered first, so it sees the flag as the previous signal left it.
        signal_hook::flag::register_conditional_shutdown(sig, 130, Arc::clone(&stop))?;
        signal_hook::flag::register(sig, Arc::clone(&stop))?;
    }
    signal_hook::flag::register(SIGTERM, Arc::clone(&term))?;
    Ok((stop, term))
}

/// SIGTERM's exit status when records were left unstarted: not 0, because a Kubernetes Job
/// would count the index complete and never do them; a retried pod resumes instead.
const TERMINATED_EARLY: i32 = 143;

pub fn run(args: Args) -> anyhow::Result<()> {
    // Flags first: a bad one fails before the model loads.
    let opts = args.options()?;
    if let Some(dir) = &args.pools {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the pools folder {}", dir.display()))?;
    }
    if let Some(s) = opts.shard {
        eprintln!("shard {s}");
    }
    // The files before the model: a bad input or output fails at once.
    let prepared = job::prepare(&args.input, &args.output, &opts)?;
    let mut terminated = false;
    let summary = if prepared.remaining() == 0 {
        // Nothing left (a rerun of a finished shard): no model needed.
        prepared.summary().clone()
    } else {
        let (stop, term) = stop_flags()?;
        let loaded = common::load(&args.model)?;
        let vocab = loaded.model.config().vocab;
        let pools = Pools::open(None, args.pools.clone(), vocab, HistoryConfig::default())?;
        let engine = Engine::new(&loaded.model, &loaded.tokenizer).with_pools(pools);
        let summary = job::execute(prepared, engine, &loaded.template, &opts, &stop)?;
        terminated = term.load(std::sync::atomic::Ordering::SeqCst);
        summary
    };
    eprintln!("{summary}");
    if terminated && summary.not_started > 0 {
        eprintln!(
            "stopped by SIGTERM with {} records not started: exit {TERMINATED_EARLY} so that \
             a retry resumes them",
            summary.not_started
        );
        std::process::exit(TERMINATED_EARLY);
    }
    if !summary.succeeded() {
        // Distinct from 1 (the job could not run): the shard ran to its end, but some
        // records need a look (see the errors above); a rerun with --resume redoes
        // only those that failed.
        std::process::exit(2);
    }
    Ok(())
}
