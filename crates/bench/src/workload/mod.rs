//! The workload benchmark's harness: every method on every record, interleaved, in one
//! process, with every output checked against plain decoding's and every decode step
//! priced on the measured cost curve. The command line builds the requests and prints
//! what [`run`] returns; the JSON report is [`WorkloadRun`] as it serializes.

mod batch;
mod rows;
mod sweep;

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use specdec_engine::{DraftMethod, Forced, GenerateOutput, GenerateRequest, PoolName, Scheduler};
use specdec_runtime::{Node, SeqInput, Target, Want};
use specdec_tokenizer::Tokenizer;
use specdec_workloads::{Record, RecordClass};

pub use batch::{run_forced_together, run_together, PoolSnapshot, Slot, Together};
pub use rows::{Divergence, HistorySize, RecordRow, SummaryRow};
pub use sweep::{sweep_rows, throughput_plot, SweepRow};

use crate::cost::{cost_curve, tally_rows, CostCurve};
use crate::BenchError;
pub(crate) use rows::{decode_secs, decode_tps, median_rep, record_floor, span};
use rows::{history_sizes, progress, record_row, summarize, BatchTimes, Row};

/// Each method drafts from a pool of its own, so no method sees an answer another method
/// produced for the same record (a replay names its pools alike).
pub fn method_pool(m: DraftMethod) -> PoolName {
    PoolName::parse(&format!("bench-{}", m.name())).expect("a valid pool name")
}

/// One record to run: the record, and its request (prompt, references, sampling and
/// speculation settings; the method is set per run) with the rule that forces its output
/// where the run is forced.
pub struct Prepared {
    /// The record as the workload file has it.
    pub record: Record,
    /// Its request.
    pub request: GenerateRequest,
    /// Its forced output, for a forced run.
    pub forced: Option<Forced>,
}

/// How a workload is run.
pub struct Options {
    /// The methods, `none` first (it is added when missing).
    pub methods: Vec<DraftMethod>,
    /// Timed runs of each record per method, interleaved; the median is reported.
    pub repeats: usize,
    /// The deepest copy the copy oracle may make in a step (the drafts' budget).
    pub max_draft: usize,
    /// What the outputs are forced to, named (`None` for the model's own outputs).
    pub forced: Option<&'static str>,
    /// The verification rule's name (`strict`, `relaxed`, ...).
    pub verify: &'static str,
    /// The model file's name, for the report.
    pub model: Option<String>,
}

/// What the harness reports while it runs.
pub enum Progress {
    /// A record finished under a method: its line for a person watching.
    Record(String),
    /// Something a person must hear of even when only the report is read (repetitions of
    /// a record that wrote different tokens, say).
    Warning(String),
}

/// A finished workload run: what `bench --workload --json` prints.
#[derive(Serialize)]
pub struct WorkloadRun {
    /// One row per record and method, record-major, `none` first.
    pub records: Vec<RecordRow>,
    /// Per-method totals over all records.
    pub summary: Vec<SummaryRow>,
    /// Per-method totals by record class, for workloads with classes.
    pub classes: BTreeMap<&'static str, Vec<SummaryRow>>,
    /// Records in flight at once.
    pub concurrency: usize,
    /// Repetitions per record and method.
    pub repeats: usize,
    /// What the outputs were forced to, if anything.
    pub forced: Option<&'static str>,
    /// The verification rule.
    pub verify: &'static str,
    /// What the history-keeping methods' indexes hold at the end.
    pub history_index: Vec<HistorySize>,
    /// The copy oracle's mean accepted length over plain's outputs (its reach: copying
    /// all it can every step, see [`crate::oracle`]).
    pub copy_oracle_mean_accepted_length: f64,
    /// The copy oracle's speedup over plain decoding on the cost curve, each step copying
    /// only as deep as pays (see [`crate::oracle::Copyable::cheapest`]): the ceiling of any
    /// copying drafter on these outputs and this machine.
    pub copy_oracle_ceiling: f64,
    /// A perfect drafter's speedup on the cost curve, drafting at most the run's budget
    /// (see [`CostCurve::perfect_drafter`]): the ceiling of any drafter on this machine.
    pub perfect_drafter_ceiling: f64,
    /// The forward size (nodes) that ceiling takes.
    pub perfect_drafter_nodes: usize,
    /// The forward cost curve every modeled figure is priced on (what `bench replay`
    /// prices its steps on, too).
    pub cost_curve: CostCurve,
    /// The model file's name.
    pub model: Option<String>,
}

/// Runs `work` under every method of `opts` through `sched` (whose engine runs over
/// `target` with the pools and draft model the methods need; its capacity is the
/// concurrency), after generating `warm` unmeasured. `progress` hears of each record and
/// method as they finish, and of anything amiss.
pub fn run(
    sched: &mut Scheduler<'_, Slot>,
    target: &dyn Target,
    tokenizer: &Tokenizer,
    work: &[Prepared],
    warm: Vec<GenerateRequest>,
    opts: &Options,
    progress_line: &mut dyn FnMut(Progress),
) -> Result<WorkloadRun, BenchError> {
    let repeats = opts.repeats.max(1);
    let mut methods = vec![DraftMethod::None];
    methods.extend(opts.methods.iter().filter(|m| **m != DraftMethod::None));
    // Measured once, before any record: prices every record's decode steps alike (a
    // 300-token prefix, about these workloads' typical context).
    let curve = cost_curve(target, tokenizer, 5, 300)?;
    let concurrency = sched.capacity();
    for req in warm {
        run_together(sched, vec![req])?;
    }
    let pools = sched.engine_mut().pools_mut();
    let global = pools.global().deep_clone();
    // Every method starts from the (warmed) global pool.
    PoolSnapshot::from_pool(&methods, &global).restore(pools);
    let mut rows: Vec<Row> = Vec::new();
    let mut batches = BatchTimes::new(methods.len());
    let (mut oracle_tokens, mut oracle_steps) = (0, 0);
    // Modeled milliseconds of plain's decode steps and of the priced copy oracle's.
    let (mut plain_ms, mut oracle_ms) = (0.0, 0.0);
    let mut done = 0;
    // Methods take turns on groups of records (one record at a time without concurrency);
    // within a group up to `concurrency` records are in flight, refilled as they finish,
    // so the group's tail is the only time the batch runs short. Repetitions take turns
    // the same way: none, m1, m2, none, m1, m2, ... With nothing to take turns with (one
    // method, one repetition), the whole workload is one group: a group's tail is time
    // the batch runs short, which plain batching's throughput should not pay for each
    // 32 records.
    let group_size = match (concurrency, methods.len() * repeats) {
        (1, _) => 1,
        (_, 1) => work.len().max(1),
        _ => 4 * concurrency,
    };
    for group in work.chunks(group_size) {
        // What the methods learned before this group: their pools and the acceptance that
        // sizes their drafts. Each repetition starts from it, so none drafts from what an
        // earlier repetition of the same records taught.
        let snapshot = if repeats > 1 {
            Some((
                PoolSnapshot::take(sched.engine_mut().pools_mut(), &methods)?,
                sched.engine().shared_acceptance().clone(),
            ))
        } else {
            None
        };
        // outs[method][record][repetition]
        let mut outs: Vec<Vec<Vec<GenerateOutput>>> =
            vec![(0..group.len()).map(|_| Vec::new()).collect(); methods.len()];
        for rep in 0..repeats {
            if let (Some((pools, acceptance)), true) = (&snapshot, rep > 0) {
                pools.restore(sched.engine_mut().pools_mut());
                sched.engine_mut().set_shared_acceptance(acceptance.clone());
            }
            for (mi, m) in methods.iter().enumerate() {
                let reqs = group
                    .iter()
                    .map(|p| {
                        let mut q = p.request.clone();
                        q.speculation.method = *m;
                        q.speculation.pool = Some(method_pool(*m));
                        (q, p.forced.clone())
                    })
                    .collect();
                let got = run_forced_together(sched, reqs).map_err(|e| {
                    BenchError::Setup(format!(
                        "records from {} with {}: {e}",
                        group[0].record.id,
                        m.name()
                    ))
                })?;
                batches.wall[mi] += got.secs / repeats as f64;
                batches.prefill[mi] += got.prefill_secs / repeats as f64;
                tally_rows(&mut batches.forwards_by_rows[mi], &got.step_rows);
                for (k, out) in got.outs.into_iter().enumerate() {
                    outs[mi][k].push(out);
                }
            }
        }
        // Each record's plain output, decode tokens/s and modeled decode time.
        let mut plain: Vec<(Vec<u32>, f64, f64)> = Vec::new();
        for (mi, m) in methods.iter().enumerate() {
            for (k, (p, reps)) in group.iter().zip(&outs[mi]).enumerate() {
                let r = &p.record;
                if reps.iter().any(|o| o.token_ids != reps[0].token_ids) {
                    progress_line(Progress::Warning(format!(
                        "{} with {}: repetitions differ",
                        r.id,
                        m.name()
                    )));
                }
                let out = &reps[median_rep(reps)];
                if mi == 0 {
                    oracle_tokens += out.token_ids.len();
                    // The stop token's step is priced (plain's steps include it); the
                    // reach counts the output's own tokens, as it always has.
                    let written = out.written();
                    let copyable = crate::oracle::Copyable::new(
                        &p.request.prompt,
                        &p.request.speculation.references,
                        &written,
                        opts.max_draft,
                    );
                    oracle_steps += copyable.reach_steps(out.token_ids.len());
                    oracle_ms += copyable.cheapest(&curve).ms;
                }
                let first_divergence = match plain.get(k) {
                    Some((plain, _, _)) => {
                        divergence(target, &p.request.prompt, plain, &out.token_ids)?
                    }
                    None => None,
                };
                let mut row = record_row(&curve, r, m.name(), reps, out, first_divergence);
                if mi == 0 {
                    plain_ms += row.modeled_decode_ms;
                    plain.push((
                        out.token_ids.clone(),
                        row.tokens_per_second,
                        row.modeled_decode_ms,
                    ));
                }
                row.speedup_vs_none = row.tokens_per_second / plain[k].1.max(1e-9);
                row.modeled_speedup_vs_none = plain[k].2 / row.modeled_decode_ms.max(1e-9);
                progress_line(Progress::Record(format!(
                    "[{}/{}] {}",
                    done + k + 1,
                    work.len(),
                    progress(r, m, &row, reps)
                )));
                rows.push(Row {
                    method: mi,
                    row,
                    spec: out.spec.clone(),
                });
            }
        }
        done += group.len();
    }
    let all: Vec<&Row> = rows.iter().collect();
    let summary = summarize(&methods, &all, Some((&batches, &curve)));
    // Totals per class, in class order, when the workload has classes.
    let classes: BTreeSet<RecordClass> = work.iter().filter_map(|p| p.record.class).collect();
    let classes = classes
        .iter()
        .map(|c| {
            let mine: Vec<&Row> = rows.iter().filter(|r| r.row.class == Some(*c)).collect();
            (c.name(), summarize(&methods, &mine, None))
        })
        .collect();
    let history_index = history_sizes(sched.engine_mut().pools_mut(), &methods)?;
    let ceiling = curve.perfect_drafter(opts.max_draft);
    Ok(WorkloadRun {
        records: rows.into_iter().map(|r| r.row).collect(),
        summary,
        classes,
        concurrency,
        repeats,
        forced: opts.forced,
        verify: opts.verify,
        history_index,
        copy_oracle_mean_accepted_length: oracle_tokens as f64 / oracle_steps.max(1) as f64,
        copy_oracle_ceiling: plain_ms / oracle_ms.max(1e-9),
        perfect_drafter_ceiling: ceiling.0,
        perfect_drafter_nodes: ceiling.1,
        cost_curve: curve,
        model: opts.model.clone(),
    })
}

/// Where `got` first differs from `plain`, with the target's top-2 logit gap there.
fn divergence(
    target: &dyn Target,
    prompt: &[u32],
    plain: &[u32],
    got: &[u32],
) -> Result<Option<Divergence>, BenchError> {
    let Some(position) = plain
        .iter()
        .zip(got)
        .position(|(a, b)| a != b)
        .or_else(|| (plain.len() != got.len()).then(|| plain.len().min(got.len())))
    else {
        return Ok(None);
    };
    let mut tokens = prompt.to_vec();
    tokens.extend(&plain[..position]);
    let mut seq = target.new_sequence();
    let nodes = Node::chain(&tokens);
    let logits = target.forward(&mut [SeqInput {
        seq: &mut seq,
        nodes: &nodes,
        want: Want::Last,
    }])?;
    let mut row = logits[0].row(0).to_vec();
    row.sort_by(|a, b| b.total_cmp(a));
    Ok(Some(Divergence {
        position,
        top2_gap: row[0] - row[1],
    }))
}
