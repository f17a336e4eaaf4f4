//! Continuous batching: requests are admitted while there is room, every step runs one
//! forward for all of them together, and each leaves as soon as it is done. Any caller
//! drives it (the server's engine thread, the workload bench, batch jobs) with its own
//! payload per request; the scheduler owns the engine and the loop's policy: cancellation,
//! deadlines, a failure confined to the request that caused it, periodic saves of what the
//! drafting pools learned.
//!
//! A recommendation's beam search is a request like a chat: admitted under the same
//! bound, its rows (a prompt chunk, or a round's beam trees) in the same forward as the
//! chats', cancelled and timed out the same way. A chat's next tokens so wait for one
//! round of a search, never for a whole search.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

use specdec_drafters::Drafter;
use specdec_verify::Forced;

use crate::beam::{BeamOptions, BeamOutput, BeamRunner, BeamTask, Catalogue};
use crate::budget::CostModel;
use crate::engine::{Engine, Forwarded};
use crate::generation::{Generation, Sink};
use crate::request::{GenerateOutput, GenerateRequest};
use crate::EngineError;

/// A caller's payload for one request.
pub trait Job {
    /// Whether the caller gave up on the request (its client went away); checked before
    /// every step, so a cancelled request frees its slot at once.
    fn is_cancelled(&self) -> bool {
        false
    }
}

impl Job for () {}

/// How a request left the scheduler.
#[derive(Debug)]
pub enum Outcome {
    /// It ended: a stop, its length, or cancelled (see `finish_reason`).
    Done(Box<GenerateOutput>),
    /// It ran past its deadline; what it produced until then.
    Expired(Box<GenerateOutput>),
    /// A step failed for this request alone.
    Failed(EngineError),
    /// A beam search ended: the K best entries after each of its prompts.
    Ranked(Vec<BeamOutput>),
    /// A beam search ended before its lists: cancelled, or (`expired`) past its
    /// deadline.
    Unranked {
        /// It ran past its deadline (else it was cancelled).
        expired: bool,
    },
}

/// A request that left, with the caller's payload.
#[derive(Debug)]
pub struct Finished<J> {
    /// The payload the caller submitted the request with.
    pub job: J,
    /// How it left.
    pub outcome: Outcome,
}

/// Progress of one request in the last step.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    /// Tokens it emitted in this step.
    pub new_tokens: usize,
    /// Whether these are its first tokens.
    pub first: bool,
}

struct Active<J> {
    gen: Generation<'static>,
    job: J,
    deadline: Option<Instant>,
    expired: bool,
    failed: Option<EngineError>,
    emitted: usize,
}

struct Searching<J> {
    task: BeamTask,
    job: J,
    deadline: Option<Instant>,
    /// Why it stops without lists: `Some(true)` past its deadline, `Some(false)` cancelled.
    stopped: Option<bool>,
    failed: Option<EngineError>,
    /// It put inputs in this step's forward (prepared without failing).
    prepared: bool,
}

/// The batching loop over one engine.
pub struct Scheduler<'m, J> {
    engine: Engine<'m>,
    max_concurrent: usize,
    active: Vec<Active<J>>,
    /// Beam searches, and the runner that prepares their rounds.
    beams: Option<BeamRunner<'m>>,
    searching: Vec<Searching<J>>,
    /// Steps taken: which search's rows go first.
    turn: usize,
    save_every: Option<Duration>,
    last_save: Instant,
    /// Steps in a row in which every request failed.
    failing_steps: usize,
    /// Rows of the last step's forward (see [`Scheduler::last_step_rows`]).
    last_rows: usize,
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// A step carrying searches' rows beside generations costs at most this many times what
/// the generations' rows alone would (as the cost model prices them): a chat's next
/// tokens wait for a share of a search's round, not for all of it.
const SHARED_STEP_COST: f64 = 3.0;

/// Rows a step gives searches whatever the budget, so they advance.
const MIN_BEAM_ROWS: usize = 8;

/// The rows searches may put in a step beside the running generations (each one row and
/// its drafts, counted as one): unbounded with no generation running.
fn beam_rows<J>(cost: &CostModel, active: &[Active<J>]) -> usize {
    let running = || active.iter().filter(|a| !a.gen.is_finished());
    let text = running().count();
    if text == 0 {
        return usize::MAX;
    }
    let ctx = running().map(|a| a.gen.context_len()).sum::<usize>() / text;
    let limit = SHARED_STEP_COST * cost.relative(text, ctx);
    (1..=1024)
        .take_while(|&r| cost.relative(text + r, ctx) <= limit)
        .last()
        .unwrap_or(0)
}

/// Runs `f` with a panic turned into an error.
fn guarded<T>(f: impl FnOnce() -> Result<T, EngineError>) -> Result<T, EngineError> {
    catch_unwind(AssertUnwindSafe(f))
        .unwrap_or_else(|p| Err(EngineError::Panicked(panic_message(p))))
}

/// One engine step, with a panic turned into an error.
fn guarded_step(
    engine: &mut Engine<'_>,
    batch: &mut [&mut Generation<'static>],
) -> Result<(), EngineError> {
    guarded(|| engine.step(batch))
}

impl<'m, J: Job> Scheduler<'m, J> {
    /// At most `max_concurrent` requests are generated together.
    pub fn new(mut engine: Engine<'m>, max_concurrent: usize) -> Self {
        // A relaxed request's drafts are sized for a full batch: what a node costs among
        // `max_concurrent` members, whichever members are in flight.
        engine.set_relaxed_batch(max_concurrent);
        Scheduler {
            engine,
            max_concurrent: max_concurrent.max(1),
            active: Vec::new(),
            beams: None,
            searching: Vec::new(),
            turn: 0,
            save_every: None,
            last_save: Instant::now(),
            failing_steps: 0,
            last_rows: 0,
        }
    }

    /// Saves what the drafting pools learned at most this often while requests finish (a
    /// crash loses at most that much).
    pub fn saving_every(mut self, every: Duration) -> Self {
        self.save_every = Some(every);
        self
    }

    /// Runs beam searches ([`Scheduler::admit_search`]) with `runner`, whose target must
    /// be the engine's.
    pub fn with_beams(mut self, runner: BeamRunner<'m>) -> Self {
        self.beams = Some(runner);
        self
    }

    /// The runner beam searches run with, if any.
    pub fn beam_runner(&self) -> Option<&BeamRunner<'m>> {
        self.beams.as_ref()
    }

    /// The engine the requests run on.
    pub fn engine(&self) -> &Engine<'m> {
        &self.engine
    }

    /// The engine, mutable (to save drafting state or manage pools between steps).
    pub fn engine_mut(&mut self) -> &mut Engine<'m> {
        &mut self.engine
    }

    /// The most requests it runs together.
    pub fn capacity(&self) -> usize {
        self.max_concurrent
    }

    /// Requests running: generations and beam searches.
    pub fn running(&self) -> usize {
        self.active.len() + self.searching.len()
    }

    /// Whether another request can start now (fewer than `max_concurrent` running).
    pub fn has_room(&self) -> bool {
        self.running() < self.max_concurrent
    }

    /// Rows (draft tree nodes, prompt tokens, beam rows) of the last step's one forward
    /// for all its requests: what pricing a step on a cost curve needs. 0 when the step
    /// ran no forward, or ran one per request after the batched one failed.
    pub fn last_step_rows(&self) -> usize {
        self.last_rows
    }

    /// Whether no request is running.
    pub fn is_idle(&self) -> bool {
        self.active.is_empty() && self.searching.is_empty()
    }

    /// Steps in a row (up to the last one that ran a forward) in which every request
    /// failed: 0 once any step succeeds for any request. A rising count means the engine,
    /// not a request, is broken.
    pub fn failing_steps(&self) -> usize {
        self.failing_steps
    }

    /// Starts `req`; it joins the next step. A request the engine refuses comes back with
    /// its payload and the reason.
    pub fn admit(
        &mut self,
        req: GenerateRequest,
        sink: Sink<'static>,
        job: J,
        deadline: Option<Instant>,
    ) -> Result<(), (J, EngineError)> {
        let gen = self.engine.start(req, sink);
        self.enter(gen, job, deadline)
    }

    /// Benchmarks only: starts `req` with its output forced (see
    /// [`Engine::start_forced`]).
    pub fn admit_forced(
        &mut self,
        req: GenerateRequest,
        forced: Forced,
        sink: Sink<'static>,
        job: J,
        deadline: Option<Instant>,
    ) -> Result<(), (J, EngineError)> {
        let gen = self.engine.start_forced(req, forced, sink);
        self.enter(gen, job, deadline)
    }

    /// Starts `req` with a drafter of the caller's (or none: plain decoding).
    pub fn admit_with(
        &mut self,
        req: GenerateRequest,
        drafter: Option<Box<dyn Drafter>>,
        sink: Sink<'static>,
        job: J,
        deadline: Option<Instant>,
    ) -> Result<(), (J, EngineError)> {
        let gen = self.engine.start_with(req, drafter, sink);
        self.enter(gen, job, deadline)
    }

    /// Starts a beam search for the K best entries of `cat` after each prompt; it joins
    /// the next step. Refused (with its payload) when the scheduler runs no beam
    /// searches or the request is invalid.
    pub fn admit_search(
        &mut self,
        cat: Arc<Catalogue>,
        prompts: Vec<Vec<u32>>,
        opts: BeamOptions,
        job: J,
        deadline: Option<Instant>,
    ) -> Result<(), (J, EngineError)> {
        let Some(runner) = self.beams.as_ref() else {
            return Err((
                job,
                EngineError::InvalidRequest("this engine runs no beam searches".into()),
            ));
        };
        match guarded(|| runner.begin(cat, prompts, opts)) {
            Ok(task) => {
                self.searching.push(Searching {
                    task,
                    job,
                    deadline,
                    stopped: None,
                    failed: None,
                    prepared: false,
                });
                Ok(())
            }
            Err(e) => Err((job, e)),
        }
    }

    fn enter(
        &mut self,
        gen: Result<Generation<'static>, EngineError>,
        job: J,
        deadline: Option<Instant>,
    ) -> Result<(), (J, EngineError)> {
        match gen {
            Ok(gen) => {
                self.active.push(Active {
                    gen,
                    job,
                    deadline,
                    expired: false,
                    failed: None,
                    emitted: 0,
                });
                Ok(())
            }
            Err(e) => Err((job, e)),
        }
    }

    /// Runs one step for every request in flight and returns those that left. `progress`
    /// hears about every request that emitted tokens.
    pub fn step(&mut self, progress: &mut dyn FnMut(&J, Progress)) -> Vec<Finished<J>> {
        let now = Instant::now();
        for a in &mut self.active {
            if a.gen.is_finished() {
                continue;
            }
            if a.job.is_cancelled() {
                a.gen.cancel();
            } else if a.deadline.is_some_and(|d| now >= d) {
                a.gen.cancel();
                a.expired = true;
            }
        }
        for s in &mut self.searching {
            if s.job.is_cancelled() {
                s.stopped = Some(false);
            } else if s.deadline.is_some_and(|d| now >= d) {
                s.stopped = Some(true);
            }
        }
        self.run_step();
        for a in &mut self.active {
            let n = a.gen.tokens().len();
            if n > a.emitted {
                progress(
                    &a.job,
                    Progress {
                        new_tokens: n - a.emitted,
                        first: a.emitted == 0,
                    },
                );
                a.emitted = n;
            }
        }
        let mut done = Vec::new();
        let mut i = 0;
        while i < self.active.len() {
            let a = &self.active[i];
            if a.gen.is_finished() || a.failed.is_some() {
                let a = self.active.swap_remove(i);
                done.push(self.leave(a));
            } else {
                i += 1;
            }
        }
        let mut i = 0;
        while i < self.searching.len() {
            let s = &self.searching[i];
            if s.task.is_done() || s.failed.is_some() || s.stopped.is_some() {
                let mut s = self.searching.swap_remove(i);
                let outcome = match (s.failed, s.stopped) {
                    (Some(e), _) => Outcome::Failed(e),
                    (None, Some(expired)) => Outcome::Unranked { expired },
                    (None, None) => Outcome::Ranked(s.task.take_output().unwrap_or_default()),
                };
                done.push(Finished {
                    job: s.job,
                    outcome,
                });
            } else {
                i += 1;
            }
        }
        if !done.is_empty() {
            self.maybe_save();
        }
        done
    }

    /// Prepares each running search's share of the next forward (a failure, or a panic,
    /// fails that search alone).
    fn prepare_searches(&mut self, max_nodes: usize) {
        let Some(runner) = self.beams.as_mut() else {
            return;
        };
        let cost = self.engine.cost();
        for s in &mut self.searching {
            s.prepared = false;
            if s.stopped.is_some() || s.failed.is_some() || s.task.is_done() {
                continue;
            }
            match guarded(|| runner.prepare(cost, &mut s.task, max_nodes)) {
                Ok(()) => s.prepared = true,
                Err(e) => {
                    tracing::error!("a beam search failed: {e}");
                    s.failed = Some(e);
                }
            }
        }
    }

    /// Hands `logits` (and the forward's `ms`) to the search; a failure fails it alone.
    fn absorb_search(
        runner: &mut BeamRunner<'m>,
        engine: &Engine<'m>,
        s: &mut Searching<J>,
        logits: Vec<specdec_runtime::Logits>,
        ms: f64,
    ) {
        if let Err(e) = guarded(|| runner.absorb(engine.cost(), &mut s.task, logits, ms)) {
            tracing::error!("a beam search failed: {e}");
            s.failed = Some(e);
        }
    }

    /// One batched forward for the generations and the searches; if it fails, each member
    /// is retried alone so that only the requests that fail by themselves are failed.
    fn run_step(&mut self) {
        self.last_rows = 0;
        let mut left = beam_rows(self.engine.cost(), &self.active);
        // A tree is forwarded whole: beside generations, none is larger than a step's share.
        self.prepare_searches(left.max(MIN_BEAM_ROWS));
        let mut batch: Vec<&mut Generation<'static>> = self
            .active
            .iter_mut()
            .filter(|a| !a.gen.is_finished())
            .map(|a| &mut a.gen)
            .collect();
        let mut owners: Vec<(usize, usize)> = Vec::new();
        let mut extra = Vec::new();
        let mut extra_load = (0, 0);
        // Whose rows go first turns with every step, so no search starves another.
        self.turn = self.turn.wrapping_add(1);
        let n = self.searching.len();
        let first = if n > 0 { self.turn % n } else { 0 };
        let (before, after) = self.searching.split_at_mut(first);
        for (i, s) in after.iter_mut().chain(before.iter_mut()).enumerate() {
            if !s.prepared {
                continue;
            }
            // The first search in turn always advances; the others share what is left.
            let budget = if owners.is_empty() {
                left.max(MIN_BEAM_ROWS)
            } else {
                left
            };
            let (inputs, (rows, ctx)) = s.task.inputs(budget);
            left = left.saturating_sub(rows);
            owners.push(((i + first) % n, inputs.len()));
            extra.extend(inputs);
            extra_load = (extra_load.0 + rows, extra_load.1 + ctx);
        }
        if batch.is_empty() && owners.is_empty() {
            return;
        }
        let engine = &mut self.engine;
        let shared = guarded(|| engine.step_sharing(&mut batch, extra, extra_load));
        drop(batch);
        let e = match shared {
            Ok(Forwarded { logits, ms, rows }) => {
                self.failing_steps = 0;
                self.last_rows = rows;
                let runner = self.beams.as_mut();
                let mut logits = logits.into_iter();
                if let Some(runner) = runner {
                    for (i, n) in owners {
                        let mine: Vec<_> = logits.by_ref().take(n).collect();
                        Self::absorb_search(runner, &self.engine, &mut self.searching[i], mine, ms);
                    }
                }
                return;
            }
            Err(e) => e,
        };
        let live = self.active.iter().filter(|a| !a.gen.is_finished()).count() + owners.len();
        tracing::warn!("a batched step of {live} requests failed ({e}); retrying each alone");
        let mut first = Some(e);
        let mut any_ok = false;
        for a in self.active.iter_mut().filter(|a| !a.gen.is_finished()) {
            let result = if live == 1 {
                Err(first.take().expect("one error"))
            } else {
                guarded_step(&mut self.engine, &mut [&mut a.gen])
            };
            match result {
                Ok(()) => any_ok = true,
                Err(e) => {
                    tracing::error!("a request failed: {e}");
                    a.gen.cancel();
                    a.failed = Some(e);
                }
            }
        }
        if let Some(runner) = self.beams.as_mut() {
            for (i, _) in owners {
                let s = &mut self.searching[i];
                let result = if live == 1 {
                    Err(first.take().expect("one error"))
                } else {
                    let engine = &mut self.engine;
                    let task = &mut s.task;
                    guarded(|| {
                        let (inputs, load) = task.inputs(usize::MAX);
                        engine.step_sharing(&mut [], inputs, load)
                    })
                };
                match result {
                    Ok(Forwarded { logits, ms, .. }) => {
                        any_ok = true;
                        Self::absorb_search(runner, &self.engine, s, logits, ms);
                    }
                    Err(e) => {
                        tracing::error!("a beam search failed: {e}");
                        s.failed = Some(e);
                    }
                }
            }
        }
        if any_ok {
            self.failing_steps = 0;
        } else {
            self.failing_steps += 1;
            tracing::warn!(
                "{} steps in a row failed for every request",
                self.failing_steps
            );
        }
    }

    fn leave(&mut self, a: Active<J>) -> Finished<J> {
        let out = Box::new(self.engine.finish(a.gen));
        let outcome = match (a.failed, a.expired) {
            (Some(e), _) => Outcome::Failed(e),
            (None, true) => Outcome::Expired(out),
            (None, false) => Outcome::Done(out),
        };
        Finished {
            job: a.job,
            outcome,
        }
    }

    fn maybe_save(&mut self) {
        if let Some(every) = self.save_every {
            if self.last_save.elapsed() >= every && self.engine.pools().is_dirty() {
                self.engine.save_drafting_state_in_background();
                self.last_save = Instant::now();
            }
        }
    }

    /// Runs every request in flight to its end; what the callers would have heard.
    pub fn drain(&mut self, progress: &mut dyn FnMut(&J, Progress)) -> Vec<Finished<J>> {
        let mut done = Vec::new();
        while !self.is_idle() {
            done.extend(self.step(progress));
        }
        done
    }
}
