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

/// Runs `reqs` through the scheduler, as many at a time as it has room for, admitting the
/// next as soon as one finishes (continuous batching); their outputs in order and the
/// wall time.
pub fn run_together(
    sched: &mut Scheduler<'_, Slot>,
    reqs: Vec<GenerateRequest>,
) -> Result<(Vec<GenerateOutput>, f64), BenchError> {
    run_forced_together(sched, reqs.into_iter().map(|r| (r, None)).collect())
}

/// [`run_together`], each request with its output forced where it has a [`Forced`] rule.
pub fn run_forced_together(
    sched: &mut Scheduler<'_, Slot>,
    reqs: Vec<(GenerateRequest, Option<Forced>)>,
) -> Result<(Vec<GenerateOutput>, f64), BenchError> {
    let t0 = Instant::now();
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
        for f in sched.step(&mut |_, _| {}) {
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
    Ok((outs, t0.elapsed().as_secs_f64()))
}
