//! Offline replay: what drafters would do on outputs already written, without the target.
//!
//! A strict run's outputs are the target's own choices, so each of them can be forced
//! back through the engine (see `Forced::replay`) over a [`ReplayTarget`], which has the
//! model's shape and does none of its work: every drafter, the budget policy and the
//! verification run as in the real run, on the trees it would verify, and each step is
//! priced on the run's measured cost curve. Acceptance comes out as it would from a real
//! run with the same drafter and draft sizes; what a configuration would gain is known in
//! seconds instead of a model run's minutes (ArcticInference's simulator and llama.cpp's
//! `lookup-stats` answer the same question). The draft sizes follow the measured curve
//! rather than the real run's timings, which is why a replay is checked against a real
//! run on the same records (`specdec bench replay` prints both).
//!
//! [`ReplayTarget`]: specdec_runtime::ReplayTarget

use std::sync::Arc;

use serde::Serialize;
use specdec_engine::{DraftMethod, Engine, Forced, GenerateRequest, PoolName};

use crate::cost::CostCurve;
use crate::workload::{method_pool, record_floor};
use crate::BenchError;

/// One recorded output to replay: the request that produced it (prompt, references,
/// speculation settings; its method is replaced by each replayed one) and the target's
/// tokens after the prompt.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// The record's name.
    pub id: String,
    /// The request as the real run made it (its `max_tokens` too: drafts near the end
    /// are capped by what is left of it).
    pub request: GenerateRequest,
    /// The target's output (token ids after the prompt).
    pub output: Vec<u32>,
    /// The stop token that ended the output, if one did (the engine leaves it out of the
    /// output, but the target chose it in a step of its own or with the last tokens).
    pub stop_token: Option<u32>,
    /// What else the copy oracle may copy from besides the prompt and the references: what
    /// the record's pool held when it ran (a knowledge record's earlier group texts), which
    /// the drafters see through the pool instead. Shared: a job's records each list every
    /// earlier text of their group.
    pub oracle_sources: Vec<Arc<[u32]>>,
}

/// One record under one drafter, replayed.
#[derive(Clone, Debug, Serialize)]
pub struct ReplayRow {
    /// The record.
    pub id: String,
    /// The drafter.
    pub method: &'static str,
    /// Tokens written (the recording's).
    pub completion_tokens: usize,
    /// Target forwards after the prefill.
    pub decode_steps: usize,
    /// Tokens per decode step.
    pub mean_accepted_length: f64,
    /// `accepted_by_position[d]`: steps whose accepted path reached depth d + 1.
    pub accepted_by_position: Vec<usize>,
    /// `steps_by_size[k]`: decode steps that verified k drafted nodes (0: a plain step).
    pub steps_by_size: Vec<usize>,
    /// What the decode steps cost on the curve: each step's forward over its node count.
    pub modeled_decode_ms: f64,
    /// `none`'s modeled decode time over this one's (the same tokens).
    pub modeled_speedup_vs_none: f64,
    /// Time spent drafting and sizing drafts, measured (a draft model's forwards are real).
    pub draft_ms: f64,
}

/// The name of the rows of the priced copy oracle (see [`crate::oracle::Copyable::cheapest`]),
/// which every replay adds after the methods': the ceiling of any copying drafter on
/// each record.
pub const COPY_ORACLE: &str = "copy-oracle";

/// Replays every record under every method (`none` first, then the others in order),
/// record by record, as the workload benchmark interleaves them, and adds each record's
/// copy oracle ([`COPY_ORACLE`]). `engine` runs over a
/// `ReplayTarget` with its cost model from `curve` (`CostModel::measured`), and with the
/// pools and draft model the methods need. Rows are record-major, `none`'s first.
pub fn replay(
    engine: &mut Engine<'_>,
    curve: &CostCurve,
    records: &[Recorded],
    methods: &[DraftMethod],
    budget: usize,
) -> Result<Vec<ReplayRow>, BenchError> {
    let mut order = vec![DraftMethod::None];
    order.extend(methods.iter().copied().filter(|&m| m != DraftMethod::None));
    let mut rows = Vec::with_capacity(records.len() * order.len());
    let vocab = engine.target().config().vocab;
    for r in records {
        let written = r.output.iter().chain(&r.stop_token);
        if let Some(&token) = written.clone().find(|&&t| t as usize >= vocab) {
            return Err(BenchError::ReplayToken {
                id: r.id.clone(),
                token,
                vocab,
            });
        }
        // Shared by every method's replay of the record.
        let expected: Arc<[u32]> = r.request.prompt.iter().chain(written).copied().collect();
        let mut plain_ms = None;
        for &m in &order {
            let mut req = r.request.clone();
            req.speculation.method = m;
            req.speculation.pool = Some(replay_pool(r, m)?);
            // The real run's token budget where a stop token ended it (drafts near the end
            // are capped by what is left of it, as the real run's were); the output's own
            // length where the budget did.
            if r.stop_token.is_none() {
                req.max_tokens = r.output.len();
            }
            let out =
                engine
                    .generate_forced(&req, Forced::replay(Arc::clone(&expected)), &mut |_| true)?;
            if out.token_ids != r.output {
                let at = out
                    .token_ids
                    .iter()
                    .zip(&r.output)
                    .take_while(|(a, b)| a == b)
                    .count();
                return Err(BenchError::ReplayDiverged {
                    id: r.id.clone(),
                    got: out.token_ids.len(),
                    want: r.output.len(),
                    at,
                });
            }
            let modeled = curve.steps_ms(&out.spec.steps_by_size);
            let plain = *plain_ms.get_or_insert(modeled);
            rows.push(ReplayRow {
                id: r.id.clone(),
                method: m.name(),
                completion_tokens: out.completion_tokens,
                decode_steps: out.spec.steps,
                mean_accepted_length: out.spec.mean_accepted_length(out.completion_tokens),
                accepted_by_position: out.spec.accepted_by_position.clone(),
                steps_by_size: out.spec.steps_by_size.clone(),
                modeled_decode_ms: modeled,
                modeled_speedup_vs_none: plain / modeled.max(1e-9),
                draft_ms: out.spec.draft_time.as_secs_f64() * 1e3,
            });
        }
        let sources: Vec<&[u32]> = (r.request.speculation.references.iter())
            .map(Vec::as_slice)
            .chain(r.oracle_sources.iter().map(|s| &s[..]))
            .collect();
        let plan = crate::oracle::Copyable::new(
            &r.request.prompt,
            &sources,
            &expected[r.request.prompt.len()..],
            budget,
        )
        .cheapest(curve);
        let mut accepted_by_position = vec![0; plan.steps_by_size.len().saturating_sub(1)];
        for (k, &n) in plan.steps_by_size.iter().enumerate() {
            for reached in &mut accepted_by_position[..k] {
                *reached += n;
            }
        }
        let completion_tokens = r.output.len();
        rows.push(ReplayRow {
            id: r.id.clone(),
            method: COPY_ORACLE,
            completion_tokens,
            decode_steps: plan.steps(),
            mean_accepted_length: completion_tokens as f64 / plan.steps().max(1) as f64,
            accepted_by_position,
            modeled_speedup_vs_none: plain_ms.unwrap_or(plan.ms) / plan.ms.max(1e-9),
            steps_by_size: plan.steps_by_size,
            modeled_decode_ms: plan.ms,
            draft_ms: 0.0,
        });
    }
    Ok(rows)
}

/// The pool a method's replay of `r` drafts from and feeds: the record's own pool where
/// it names one (a knowledge record's group), one copy per method so that no method learns
/// from another's replay; else the method's benchmark pool, as in the workload benchmark.
fn replay_pool(r: &Recorded, m: DraftMethod) -> Result<PoolName, BenchError> {
    Ok(match &r.request.speculation.pool {
        Some(p) => PoolName::parse(&format!("{}.{}", p.as_str(), m.name()))?,
        None => method_pool(m),
    })
}

/// A method's figures over every record of a replay (or of a real run, from its rows).
#[derive(Clone, Debug, Serialize)]
pub struct ReplaySummary {
    /// The drafter.
    pub method: &'static str,
    /// Records replayed.
    pub records: usize,
    /// Tokens over decode steps, over all records.
    pub mean_accepted_length: f64,
    /// `none`'s modeled decode time over this method's, over all records.
    pub modeled_speedup_vs_none: f64,
    /// The lowest per-record modeled speedup.
    pub min_record_modeled_speedup: f64,
    /// Records whose modeled speedup is below 0.95.
    pub records_below_0_95_modeled: usize,
}

/// Per-method totals of `rows`, in the order methods first appear.
pub fn summarize(rows: &[ReplayRow]) -> Vec<ReplaySummary> {
    let mut methods: Vec<&'static str> = Vec::new();
    for r in rows {
        if !methods.contains(&r.method) {
            methods.push(r.method);
        }
    }
    let plain_ms: f64 = rows
        .iter()
        .filter(|r| r.method == DraftMethod::None.name())
        .map(|r| r.modeled_decode_ms)
        .sum();
    methods
        .into_iter()
        .map(|m| {
            let mine: Vec<&ReplayRow> = rows.iter().filter(|r| r.method == m).collect();
            let tokens: usize = mine.iter().map(|r| r.completion_tokens).sum();
            let steps: usize = mine.iter().map(|r| r.decode_steps).sum();
            let ms: f64 = mine.iter().map(|r| r.modeled_decode_ms).sum();
            let (lowest, below) = record_floor(mine.iter().map(|r| r.modeled_speedup_vs_none));
            ReplaySummary {
                method: m,
                records: mine.len(),
                mean_accepted_length: tokens as f64 / steps.max(1) as f64,
                modeled_speedup_vs_none: plain_ms / ms.max(1e-9),
                min_record_modeled_speedup: lowest,
                records_below_0_95_modeled: below,
            }
        })
        .collect()
}
