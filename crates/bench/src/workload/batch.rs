//! Running requests through the engine's scheduler as a benchmark does: continuous
//! batching of a group, and every method's pool put back between repetitions.

use std::time::Instant;

use specdec_engine::{
    DraftMethod, Forced, GenerateOutput, GenerateRequest, Outcome, Pool, PoolName, Pools, Scheduler,
};

use super::method_pool;
use crate::BenchError;

/// Every method's pool, to put back before each repetition of a record: a method must not
/// learn from its own earlier repetition of the same record (the engine's acceptance
/// memories are put back beside it). Pools hold a trie and a history index each today;
/// what else a pool comes to hold must be copied here too.
pub struct PoolSnapshot(Vec<(PoolName, Pool)>);

impl PoolSnapshot {
    /// `pool` copied as every method's.
    pub fn from_pool(methods: &[DraftMethod], pool: &Pool) -> Self {
        PoolSnapshot(
            methods
                .iter()
                .map(|m| (method_pool(*m), pool.deep_clone()))
                .collect(),
        )
    }

    /// Copies of every method's pool.
    pub fn take(pools: &mut Pools, methods: &[DraftMethod]) -> Result<Self, BenchError> {
        let mut out = Vec::new();
        for m in methods {
            let name = method_pool(*m);
            let pool = pools.pool(Some(&name))?.deep_clone();
            out.push((name, pool));
        }
        Ok(PoolSnapshot(out))
    }

    /// Puts the copies back.
    pub fn restore(&self, pools: &mut Pools) {
        for (name, pool) in &self.0 {
            pools.insert(name.clone(), pool.deep_clone());
        }
    }
}

/// A record's place in the group being run; benchmark records are never cancelled.
pub struct Slot(usize);

impl specdec_engine::Job for Slot {}

/// What running a group of requests together gave.
pub struct Together {
    /// The outputs, in the requests' order.
    pub outs: Vec<GenerateOutput>,
    /// Wall seconds.
    pub secs: f64,
    /// Wall seconds of the steps in which a running request emitted nothing because it
    /// was still reading its prompt: prefill's share of the batch's time, which batching
    /// does not shrink (a prompt's rows cost the same in any batch).
    pub prefill_secs: f64,
    /// Of the scheduler's steps (one per entry of `step_rows`), those that carried a
    /// prompt's rows.
    pub prefill_steps: usize,
    /// Each scheduler step's rows: every running request's prompt chunk or pending token and draft
    /// nodes, together in one forward (priced by [`crate::cost::CostCurve::forwards_ms`]).
    pub step_rows: Vec<usize>,
}

/// Runs `reqs` through the scheduler, as many at a time as it has room for, admitting the
/// next as soon as one finishes (continuous batching).
pub fn run_together(
    sched: &mut Scheduler<'_, Slot>,
    reqs: Vec<GenerateRequest>,
) -> Result<Together, BenchError> {
    run_forced_together(sched, reqs.into_iter().map(|r| (r, None)).collect())
}

/// [`run_together`], each request with its output forced where it has a [`Forced`] rule.
pub fn run_forced_together(
    sched: &mut Scheduler<'_, Slot>,
    reqs: Vec<(GenerateRequest, Option<Forced>)>,
) -> Result<Together, BenchError> {
    let t0 = Instant::now();
    let (mut prefill_secs, mut prefill_steps) = (0.0, 0);
    let mut step_rows = Vec::new();
    let n = reqs.len();
    let mut outs: Vec<Option<GenerateOutput>> = (0..n).map(|_| None).collect();
    let mut queue = reqs.into_iter().enumerate();
    loop {
        while sched.has_room() {
            let Some((i, (req, forced))) = queue.next() else {
                break;
            };
            let sink = Box::new(|_: &str| true);
            match forced {
                None => sched.admit(req, sink, Slot(i), None),
                Some(f) => sched.admit_forced(req, f, sink, Slot(i), None),
            }
            .map_err(|(_, e)| e)?;
        }
        if sched.is_idle() {
            break;
        }
        // A decoding request emits a token each step or finishes (on a stop token it
        // emits none); one that does neither is still reading its prompt.
        let (running, step) = (sched.running(), Instant::now());
        let mut advanced: Vec<usize> = Vec::new();
        let finished = sched.step(&mut |job: &Slot, _| advanced.push(job.0));
        step_rows.push(sched.last_step_rows());
        advanced.extend(finished.iter().map(|f| f.job.0));
        advanced.sort_unstable();
        advanced.dedup();
        if advanced.len() < running {
            prefill_secs += step.elapsed().as_secs_f64();
            prefill_steps += 1;
        }
        for f in finished {
            match f.outcome {
                Outcome::Done(out) => outs[f.job.0] = Some(*out),
                Outcome::Expired(_) => {
                    return Err(BenchError::Setup(
                        "a record ran past a deadline it did not have".into(),
                    ))
                }
                Outcome::Failed(e) => return Err(e.into()),
                Outcome::Ranked(_) | Outcome::Unranked { .. } => {
                    return Err(BenchError::Setup(
                        "a beam search's outcome from a scheduler that runs none".into(),
                    ))
                }
            }
        }
    }
    let outs = outs
        .into_iter()
        .map(|o| o.expect("every record finished"))
        .collect();
    Ok(Together {
        outs,
        secs: t0.elapsed().as_secs_f64(),
        prefill_secs,
        prefill_steps,
        step_rows,
    })
}
