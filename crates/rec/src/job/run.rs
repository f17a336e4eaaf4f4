//! The job's loop: records decode together through the engine's scheduler, admitted while
//! there is room and refilled as each finishes; each finished record is written (and on
//! disk) before it counts as done. A stop request ends admission; the records in flight
//! finish and are written, and the pools are saved.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver};
use std::time::{Duration, Instant};

use specdec_engine::{
    Acceptance, ChatTemplate, DraftMethod, Engine, EngineError, GenerateOutput, GenerateRequest,
    Learned, Outcome, Scheduler, Speculation, SpeculationSpec,
};
use specdec_shared_state::{Folding, SharedConfig, SharedState};

use super::input::{read_input, Task};
use super::output::OutputFile;
use super::progress::{Progress, Summary};
use super::queue::{Queue, Warmup};
use super::replay::{self, Replay};
use super::shard::Shard;
use crate::records::{KnowledgeOutput, Role, VerifyMode};
use crate::RecError;

/// How a job runs.
#[derive(Clone, Debug)]
pub struct JobOptions {
    /// The draft method, and the rule for records without their own `verify` (strict or
    /// relaxed).
    pub spec: SpeculationSpec,
    /// Most draft nodes per step.
    pub budget: usize,
    /// For records without their own `max_tokens`.
    pub max_tokens: usize,
    /// Records generated together.
    pub concurrency: usize,
    /// Which records run: warm-up first, warm-up only, or targets only.
    pub warmup: Warmup,
    /// The shard this process runs (`None`: every record).
    pub shard: Option<Shard>,
    /// Skip the records the output already has (see [`OutputFile::open`]).
    pub resume: bool,
    /// Saves what the pools learned at most this often while records finish (they are
    /// saved at the end in any case).
    pub save_every: Option<Duration>,
    /// How often a progress line is printed when stderr is not a terminal.
    pub progress_every: Duration,
    /// `redis://HOST[:PORT][/DB]`: shards (and any other engine of the model) share what
    /// their records teach the group pools through it, so a group's pool learns from its
    /// members in every shard. Strict records only: a relaxed record's text depends on
    /// what its pool held, which sharing would make a matter of timing.
    pub shared_state: Option<String>,
    /// The full batch relaxed records' drafts are sized for (their texts depend on it);
    /// `None`: `concurrency`. Pinned, a job resumed at another concurrency writes what an
    /// uninterrupted one would have.
    pub relaxed_batch: Option<usize>,
}

impl Default for JobOptions {
    fn default() -> Self {
        JobOptions {
            spec: SpeculationSpec {
                method: DraftMethod::Auto,
                acceptance: Acceptance::Strict,
            },
            budget: 32,
            max_tokens: 256,
            concurrency: 8,
            warmup: Warmup::First,
            shard: None,
            resume: false,
            save_every: Some(Duration::from_secs(60)),
            progress_every: Duration::from_secs(10),
            shared_state: None,
            relaxed_batch: None,
        }
    }
}

/// A record in flight.
struct Slot {
    task: Task,
}

impl specdec_engine::Job for Slot {}

/// The record's greedy request: its prompt in the chat template, drafting from its
/// group's pool.
fn request(
    engine: &Engine<'_>,
    template: &ChatTemplate,
    task: &Task,
    opts: &JobOptions,
) -> Result<GenerateRequest, EngineError> {
    let prompt = task.chat_prompt(engine, template)?;
    let max_tokens = task.record.max_tokens.unwrap_or(opts.max_tokens);
    Ok(GenerateRequest {
        speculation: Speculation {
            max_draft: opts.budget,
            pool: Some(task.pool.clone()),
            ..task.spec.clone().into()
        },
        ..GenerateRequest::new(prompt, max_tokens)
    })
}

/// The output line of `task`'s generation `out`.
fn output_line(task: &Task, out: &GenerateOutput) -> KnowledgeOutput {
    let r = &task.record;
    let (verify, top_k, tau) = match &task.spec.acceptance {
        Acceptance::Relaxed(x) => (VerifyMode::Relaxed, Some(x.top_k()), Some(x.tau())),
        Acceptance::Strict => (VerifyMode::Strict, None, None),
    };
    KnowledgeOutput {
        id: r.id.clone(),
        kind: r.kind,
        group: r.group.clone(),
        role: r.role,
        user_id: r.user_id,
        item_id: r.item_id,
        text: out.text.clone(),
        token_ids: out.token_ids.clone(),
        stop_token: out.stop_token,
        finish_reason: out.finish_reason.as_str().into(),
        verify,
        top_k,
        tau,
        relaxed_tokens: out.spec.relaxed_tokens,
        completion_tokens: out.completion_tokens,
        forward_passes: out.forward_passes,
        mean_accepted_length: out.spec.mean_accepted_length(out.completion_tokens),
        elapsed_ms: out.elapsed.as_secs_f64() * 1e3,
    }
}

/// A job whose files are read and checked, ready to run: everything that can fail before
/// the model is needed has (so a bad flag or file fails before a long model load).
#[derive(Debug)]
pub struct Prepared {
    queue: Queue,
    output: OutputFile,
    /// Where the output is (the replay's marker goes beside it).
    output_path: PathBuf,
    summary: Summary,
    /// Set when a record is relaxed: its learning is then fed in a fixed order.
    replay: Option<Replay>,
}

impl Prepared {
    /// Records this run will generate.
    pub fn remaining(&self) -> usize {
        self.queue.len()
    }

    /// Whether the run has anything to do: records to generate, or (with relaxed
    /// records) finished ones whose learning is not in the saved pools yet, as when an
    /// earlier run was killed after its last record and before saving them.
    pub fn has_work(&self) -> bool {
        self.remaining() > 0 || self.replay.as_ref().is_some_and(Replay::has_unfed)
    }

    /// The counts so far (malformed lines, records already done, other shards).
    pub fn summary(&self) -> &Summary {
        &self.summary
    }
}

/// Reads the input (logging each malformed line with its number), opens the output (see
/// [`OutputFile::open`]) and picks this run's records: its shard's, less those done.
pub fn prepare(input: &Path, output: &Path, opts: &JobOptions) -> Result<Prepared, RecError> {
    let mut summary = Summary::default();
    let parsed = read_input(input, &opts.spec)?;
    for m in &parsed.malformed {
        tracing::error!("{}: {m}", input.display());
    }
    summary.malformed = parsed.malformed.len();
    let (out_file, done) = OutputFile::open(output, opts.resume)?;
    // Only drafts from pools can depend on what other records taught them.
    let relaxed =
        opts.spec.method.uses_pool() && parsed.tasks.iter().any(|t| t.spec.acceptance.is_relaxed());
    if relaxed && opts.shared_state.is_some() {
        return Err(RecError::Invalid(
            "--shared-state needs strict records: a relaxed record's text depends on what its              pool held when it ran, and with shared pools that depends on other shards' timing              (run relaxed jobs without --shared-state, each shard with its own --pools)"
                .into(),
        ));
    }
    let mut tasks = Vec::new();
    let mut done_tasks = Vec::new();
    for t in parsed.tasks {
        if opts.shard.is_some_and(|s| !s.contains(&t.record.id)) {
            summary.other_shards += 1;
        } else if done.contains(&t.record.id) {
            summary.already_done += 1;
            done_tasks.push(t);
        } else {
            tasks.push(t);
        }
    }
    let queue = Queue::new(tasks, opts.warmup);
    summary.total = queue.len();
    let replay = relaxed.then(|| {
        let mut outputs = replay::done_outputs(output);
        let done: Vec<_> = Queue::new(done_tasks, opts.warmup)
            .into_tasks()
            .filter_map(|t| outputs.remove(&t.record.id).map(|o| (t, o)))
            .collect();
        let in_pools = replay::read_marker(output);
        Replay::new(&queue.tasks().cloned().collect::<Vec<_>>(), done, &in_pools)
    });
    Ok(Prepared {
        queue,
        output: out_file,
        output_path: output.to_path_buf(),
        summary,
        replay,
    })
}

/// [`prepare`] then [`execute`].
pub fn run(
    engine: Engine<'_>,
    template: &ChatTemplate,
    input: &Path,
    output: &Path,
    opts: &JobOptions,
    stop: &AtomicBool,
) -> Result<Summary, RecError> {
    execute(prepare(input, output, opts)?, engine, template, opts, stop)
}

/// Runs a prepared job on `engine` (its pools are the ones records draft from and feed)
/// and returns what it did. `template` wraps each prompt; `stop` (set by a signal
/// handler) ends admission. Per-record problems are counted in the summary and logged;
/// an error is returned only for what stops the whole job (a failed write).
pub fn execute(
    job: Prepared,
    engine: Engine<'_>,
    template: &ChatTemplate,
    opts: &JobOptions,
    stop: &AtomicBool,
) -> Result<Summary, RecError> {
    let start = Instant::now();
    let Prepared {
        mut queue,
        output: mut out_file,
        output_path,
        mut summary,
        mut replay,
    } = job;
    let mut shared = match &opts.shared_state {
        Some(url) => Some(Sharing::start(url, engine.tokenizer())?),
        None => None,
    };
    let engine = match shared {
        Some(_) => engine.sharing_learning(),
        None => engine,
    };
    let mut sched: Scheduler<'_, Slot> = Scheduler::new(engine, opts.concurrency);
    if let Some(batch) = opts.relaxed_batch {
        sched.engine_mut().set_relaxed_batch(batch);
    }
    // With relaxed records the pools are written once, at the end (see `replay`).
    if let (Some(every), None) = (opts.save_every, &replay) {
        sched = sched.saving_every(every);
    }
    let mut progress = Progress::for_stderr(summary.total, opts.progress_every);
    let mut warmups_running = 0usize;
    let fail = |summary: &mut Summary,
                replay: &mut Option<Replay>,
                task: &Task,
                e: &dyn std::fmt::Display| {
        tracing::error!("record {} (line {}): {e}", task.record.id, task.line);
        summary.failed += 1;
        if let Some(r) = replay {
            r.finished(task, None);
        }
    };
    let result = loop {
        if stop.load(Ordering::Relaxed) && !queue.is_empty() {
            summary.interrupted = true;
            summary.not_started = queue.abandon();
            progress.println(&format!(
                "stopping: finishing {} records in flight, {} not started (run again with \
                 --resume for them)",
                sched.running(),
                summary.not_started
            ));
        }
        while sched.has_room() {
            let Some(task) = queue.next(warmups_running) else {
                break;
            };
            if replay.as_ref().is_some_and(|r| !r.ready(&task)) {
                // It drafts from records still generating: it waits for them.
                queue.put_back(task);
                break;
            }
            let req = match request(sched.engine(), template, &task, opts) {
                Ok(r) => r,
                Err(e) => {
                    fail(&mut summary, &mut replay, &task, &e);
                    continue;
                }
            };
            let drafter = match &mut replay {
                None => None,
                Some(r) => {
                    match r.pool_for(sched.engine_mut(), template, opts.spec.method, &task) {
                        Ok(pool) => Some(opts.spec.method.drafter(&pool, None)),
                        Err(e) => {
                            fail(&mut summary, &mut replay, &task, &e);
                            continue;
                        }
                    }
                }
            };
            let warmup = task.record.role == Role::Warmup;
            let sink = Box::new(|_: &str| true);
            let admitted = match drafter {
                None => sched.admit(req, sink, Slot { task }, None),
                Some(d) => sched.admit_with(req, d, sink, Slot { task }, None),
            };
            match admitted {
                Ok(()) => warmups_running += usize::from(warmup),
                Err((slot, e)) => fail(&mut summary, &mut replay, &slot.task, &e),
            }
        }
        // Idle after admitting means nothing is left: with no warm-up running the queue
        // hands out whatever it still has.
        if sched.is_idle() {
            if !queue.is_empty() {
                // Every record before a waiting one was admitted and has left, so this
                // never happens; if it did, say so rather than end quietly.
                tracing::error!("{} records could not be admitted", queue.len());
                summary.interrupted = true;
                summary.not_started = queue.abandon();
            }
            break Ok(());
        }
        if let Some(s) = &mut shared {
            s.exchange(sched.engine_mut());
        }
        let finished = sched.step(&mut |_, p| progress.tokens(p.new_tokens));
        let mut write_error = None;
        for f in finished {
            let task = f.job.task;
            if task.record.role == Role::Warmup {
                warmups_running -= 1;
            }
            match f.outcome {
                Outcome::Done(out) => {
                    if let Err(e) = out_file.append(&output_line(&task, &out)) {
                        write_error.get_or_insert(e);
                        continue;
                    }
                    if let Some(r) = &mut replay {
                        r.finished(&task, Some(out.token_ids.clone()));
                    }
                    summary.done += 1;
                    summary.completion_tokens += out.completion_tokens;
                    summary.decode_steps += out.spec.steps;
                    summary.relaxed_tokens += out.spec.relaxed_tokens;
                }
                Outcome::Expired(_) => {
                    fail(&mut summary, &mut replay, &task, &"ran past a deadline")
                }
                Outcome::Failed(e) => fail(&mut summary, &mut replay, &task, &e),
                // This scheduler runs no beam searches.
                Outcome::Ranked(_) | Outcome::Unranked { .. } => {
                    fail(&mut summary, &mut replay, &task, &"not a generation")
                }
            }
        }
        progress.update(&summary);
        if let Some(e) = write_error {
            break Err(e);
        }
    };
    progress.finish();
    if let Some(s) = shared.take() {
        // The last records' lessons go out before the job ends.
        s.state.finish(sched.engine_mut(), Duration::from_secs(5));
    }
    if let Some(r) = &mut replay {
        if summary.interrupted || result.is_err() {
            // The output is the journal: `--resume` feeds the pools from it in order.
            tracing::info!(
                "the pools are not saved: with relaxed records they are written once every \
                 record is done (--resume feeds them from the output)"
            );
            summary.elapsed = start.elapsed();
            return result.map(|()| summary);
        }
        if let Err(e) = r.feed_all(sched.engine_mut(), template, opts.spec.method) {
            tracing::error!("could not feed the pools the job's records: {e}");
            summary.save_failures += 1;
        }
    }
    // Saved even when a write failed: what the pools learned is still good.
    // (The engine logs each failure with its file and cause.)
    let saved = sched.engine_mut().save_drafting_state();
    summary.save_failures += saved.iter().filter(|(_, r)| r.is_err()).count();
    if let (Some(r), 0) = (&replay, summary.save_failures) {
        if let Err(e) = replay::write_marker(&output_path, r.fed_ids()) {
            tracing::error!("could not record which records the pools hold: {e}");
            summary.save_failures += 1;
        }
    }
    summary.elapsed = start.elapsed();
    result.map(|()| summary)
}

/// The job's side of `--shared-state`.
struct Sharing {
    state: SharedState,
    incoming: Receiver<Vec<Learned>>,
    /// Other shards' lessons not folded yet.
    folding: Folding,
}

impl Sharing {
    fn start(url: &str, tokenizer: &specdec_engine::Tokenizer) -> Result<Sharing, RecError> {
        let (tx, incoming) = sync_channel(64);
        let cfg = SharedConfig::for_vocabulary(url, tokenizer);
        let state = SharedState::start(cfg, move |batch| tx.send(batch).is_ok())?;
        Ok(Sharing {
            state,
            incoming,
            folding: Folding::default(),
        })
    }

    /// Publishes what finished records taught their pools and folds in what other shards'
    /// records did (a pool still being read from its files gets its lesson later).
    fn exchange(&mut self, engine: &mut Engine<'_>) {
        self.state.publish_learned(engine);
        while let Ok(batch) = self.incoming.try_recv() {
            self.folding.receive(batch);
        }
        self.folding.fold(engine, usize::MAX);
    }
}
