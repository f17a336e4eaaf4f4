//! `specdec rec knowledge`: the knowledge job (the library is `specdec_rec::job`).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use specdec_engine::{DraftMethod, Engine, HistoryConfig, Pools, SamplingParams};
use specdec_rec::job::{self, JobOptions, Shard, Summary, Warmup};

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
    /// Draft method: none, reference, prompt, trie, suffix, history or auto (the job has
    /// no draft model: `model` is refused).
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
    /// Share what records teach the group pools with the other shards through Redis
    /// (`redis://HOST[:PORT][/DB]`), so each group's pool learns from its members in every
    /// shard. Strict records only. A Redis that is down is retried; the job goes on.
    #[arg(long, value_name = "URL")]
    pub shared_state: Option<String>,
    /// Size relaxed records' drafts for a full batch of N (default: --concurrency). Their
    /// texts depend on it: pin it to resume a relaxed job at another concurrency.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub relaxed_batch: Option<u64>,
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
        if self.draft == DraftMethod::Model {
            anyhow::bail!("the knowledge job drafts without a draft model: choose none, reference, prompt, trie, suffix, history or auto");
        }
        // The job decodes greedily.
        let spec = self.verify.spec(self.draft, &SamplingParams::default())?;
        let shard = Shard::resolve(self.shard, |name| std::env::var(name).ok())?;
        Ok(JobOptions {
            spec,
            budget: self.budget,
            max_tokens: self.max_tokens,
            concurrency: self.concurrency,
            warmup: match self.warmup {
                WarmupArg::First => Warmup::First,
                WarmupArg::Only => Warmup::Only,
                WarmupArg::Skip => Warmup::Skip,
            },
            shard,
            resume: self.resume,
            save_every: Some(Duration::from_secs(self.save_every)),
            shared_state: self.shared_state.clone(),
            relaxed_batch: self.relaxed_batch.map(|b| b as usize),
            ..JobOptions::default()
        })
    }
}

/// SIGINT and SIGTERM set the first flag (the job stops admitting, finishes what is in
/// flight and saves); a second one while it is set exits at once with 130. The second
/// holds the number of the signal that stopped the job (0: none), for the exit status.
fn stop_flags() -> anyhow::Result<(Arc<AtomicBool>, Arc<AtomicUsize>)> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let stop = Arc::new(AtomicBool::new(false));
    let signal = Arc::new(AtomicUsize::new(0));
    for sig in [SIGINT, SIGTERM] {
        // Registered first, so it sees the flag as the previous signal left it.
        signal_hook::flag::register_conditional_shutdown(sig, 130, Arc::clone(&stop))?;
        signal_hook::flag::register_usize(sig, Arc::clone(&signal), sig as usize)?;
        signal_hook::flag::register(sig, Arc::clone(&stop))?;
    }
    Ok((stop, signal))
}

/// The exit status of a run stopped by `signal` (if any) that ended with `summary`.
///
/// A stop that left records unstarted is not a success, whichever signal asked for it: a
/// script or a Kubernetes Job would count the shard done and never run them. It exits
/// 128 + the signal, as a shell reports a process the signal ended (130 for SIGINT, 143
/// for SIGTERM; a retried pod resumes them). A stop that came after every record was
/// admitted finished them all, so the run is judged as one never stopped: 0, or 2 when
/// records failed, input lines were malformed or a pool save failed (a rerun with
/// --resume redoes only those that failed).
fn exit_status(signal: Option<i32>, summary: &Summary) -> i32 {
    match signal {
        Some(sig) if summary.not_started > 0 => 128 + sig,
        _ if !summary.succeeded() => 2,
        _ => 0,
    }
}

/// The signal's name, for the message at exit.
fn signal_name(sig: i32) -> &'static str {
    match sig {
        signal_hook::consts::SIGINT => "SIGINT",
        signal_hook::consts::SIGTERM => "SIGTERM",
        _ => "a signal",
    }
}

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
    let mut signal = None;
    let summary = if !prepared.has_work() {
        // Nothing left (a rerun of a finished shard): no model needed.
        prepared.summary().clone()
    } else {
        let (stop, stopped_by) = stop_flags()?;
        let loaded = common::load(&args.model)?;
        let context = loaded.model.config().context_length;
        // Every prompt has a token, so such a --max-tokens fails every record without its
        // own: refused before any runs. (The engine added the two unchecked, so a value
        // near 2^64 wrapped past its context check and ran.)
        if opts.max_tokens >= context {
            anyhow::bail!(
                "--max-tokens {} leaves no room for a prompt in the model's context of \
                 {context} tokens",
                opts.max_tokens
            );
        }
        let vocab = loaded.model.config().vocab;
        let pools = Pools::open(None, args.pools.clone(), vocab, HistoryConfig::default())?;
        let engine = Engine::new(&loaded.model, &loaded.tokenizer).with_pools(pools);
        let summary = job::execute(prepared, engine, &loaded.template, &opts, &stop)?;
        signal = match stopped_by.load(Ordering::SeqCst) {
            0 => None,
            sig => i32::try_from(sig).ok(),
        };
        summary
    };
    eprintln!("{summary}");
    let status = exit_status(signal, &summary);
    if let Some(sig) = signal.filter(|_| status > 2) {
        eprintln!(
            "stopped by {} with {} records not started: exit {status}; run again with \
             --resume for them",
            signal_name(sig),
            summary.not_started
        );
    }
    if status != 0 {
        std::process::exit(status);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use signal_hook::consts::{SIGINT, SIGTERM};

    fn summary(not_started: usize, failed: usize) -> Summary {
        Summary {
            total: 10,
            done: 10 - not_started - failed,
            failed,
            not_started,
            interrupted: not_started > 0,
            ..Summary::default()
        }
    }

    /// Ctrl-C with records unstarted exited 0, as if the shard were done.
    #[test]
    fn an_interrupted_run_with_records_left_exits_non_zero() {
        assert_eq!(exit_status(Some(SIGINT), &summary(3, 0)), 130);
        assert_eq!(exit_status(Some(SIGTERM), &summary(3, 0)), 143);
        // Unstarted records outrank failed ones: a retry resumes both.
        assert_eq!(exit_status(Some(SIGINT), &summary(3, 1)), 130);
    }

    #[test]
    fn a_run_stopped_after_every_record_was_admitted_exits_as_if_never_stopped() {
        for sig in [None, Some(SIGINT), Some(SIGTERM)] {
            assert_eq!(exit_status(sig, &summary(0, 0)), 0);
            assert_eq!(exit_status(sig, &summary(0, 1)), 2);
        }
        let malformed = Summary {
            malformed: 1,
            ..summary(0, 0)
        };
        assert_eq!(exit_status(Some(SIGINT), &malformed), 2);
        let unsaved = Summary {
            save_failures: 1,
            ..summary(0, 0)
        };
        assert_eq!(exit_status(None, &unsaved), 2);
    }
}
