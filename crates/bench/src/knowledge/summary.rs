//! What `rec bench` reports: per-record rows and per-configuration summaries of a phase's
//! rounds, with the copy oracle's ceiling over what each configuration's pool held.

use std::collections::BTreeMap;

use serde::Serialize;
use specdec_engine::{GenerateOutput, Pool, PoolName, SpecStats};

use super::{Config, PoolKind, Round, Target, GLOBAL};
use crate::cost::{median, CostCurve};
use crate::workload::{decode_secs, decode_tps, median_rep, record_floor, span};

/// One record's result under one configuration.
#[derive(Serialize)]
#[allow(missing_docs)] // the fields are the JSON's, named for what they hold
pub struct RecordRow {
    pub id: String,
    pub group: String,
    pub config: &'static str,
    pub concurrency: usize,
    pub completion_tokens: usize,
    pub decode_ms: f64,
    pub tokens_per_second: f64,
    pub speedup_vs_plain: f64,
    pub modeled_speedup_vs_plain: f64,
    pub mean_accepted_length: f64,
    pub relaxed_tokens: usize,
    pub identical_to_plain: bool,
}

/// One configuration at one concurrency.
#[derive(Serialize)]
#[allow(missing_docs)] // the fields are the JSON's, named for what they hold
pub struct SummaryRow {
    pub config: &'static str,
    pub concurrency: usize,
    pub verify: &'static str,
    pub records: usize,
    pub completion_tokens: usize,
    /// Concurrency 1: completion tokens per second of decoding (prefill, the same for every
    /// configuration, excluded). Concurrency N: per second of wall time, prefill included.
    pub tokens_per_second: f64,
    pub speedup_vs_plain: f64,
    /// The same on each step's forward priced by the measured cost curve, free of the
    /// machine's run-to-run noise. Concurrency 1: each record's decode steps; concurrency
    /// N: each batched forward by all its rows, prefill included (median of the rounds),
    /// so it says whether drafts pay for the rows they add to plain batching's forwards.
    pub modeled_speedup_vs_plain: f64,
    /// Concurrency N: the lowest and highest of the rounds' speedups (the median is
    /// `speedup_vs_plain`), with more than one round.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speedup_range: Option<[f64; 2]>,
    /// Concurrency N: rounds run, and records whose text differed between rounds (none
    /// expected: every configuration's text depends on the text alone).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rounds: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub records_differing_between_rounds: Option<usize>,
    /// Concurrency 1 only: the lowest per-record speedup, and records below 0.95x.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_record_speedup: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub records_below_0_95: Option<usize>,
    pub mean_accepted_length: f64,
    /// Concurrency 1, speculative configurations: the copy oracle over what this
    /// configuration's pool could offer (the record's prompt, the pool's warm texts and the
    /// outputs the pool learned earlier in the run, none for `strict-nopool`) and over the
    /// text this configuration wrote ([`crate::oracle`]): its mean accepted length copying
    /// all it can each step, and its speedup over plain on the cost curve copying as deep
    /// as pays, the ceiling of any drafter from those sources.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub copy_oracle_mean_accepted_length: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub copy_oracle_ceiling: Option<f64>,
    /// Accepted draft tokens that only the relaxation let through, over all accepted draft
    /// tokens.
    pub relaxed_accept_rate: f64,
    pub relaxed_tokens: usize,
    pub identical_to_plain: usize,
}

/// The texts each warm pool holds, by pool name, for the copy oracle.
type PoolTexts = BTreeMap<String, Vec<Vec<u32>>>;

pub(super) fn warm_texts(warm: &[(PoolName, Pool)]) -> PoolTexts {
    warm.iter()
        .map(|(name, pool)| {
            let history = pool.history.lock().unwrap_or_else(|e| e.into_inner());
            let docs = history.documents_held().map(<[u32]>::to_vec).collect();
            (name.as_str().to_string(), docs)
        })
        .collect()
}

/// The copy oracle over one configuration's concurrency-1 outputs (in run order, so each
/// record may copy from what its pool learned of the records before it): (copied tokens,
/// reach steps, modeled ms of the cheapest copying plan).
fn copy_oracle(
    c: &Config,
    targets: &[Target],
    mine: &[GenerateOutput],
    warm: &PoolTexts,
    curve: &CostCurve,
    budget: usize,
) -> (usize, usize, f64) {
    let pool_of = |t: &Target| match c.pool {
        PoolKind::None => None,
        PoolKind::Global => Some(GLOBAL.to_string()),
        PoolKind::Group => Some(t.record.group.clone()),
    };
    let mut learned = PoolTexts::new();
    let (mut tokens, mut steps, mut ms) = (0, 0, 0.0);
    for (t, o) in targets.iter().zip(mine) {
        let written = o.written();
        let pool = pool_of(t);
        let refs: Vec<&[u32]> = pool
            .iter()
            .flat_map(|p| {
                let warm = warm.get(p).into_iter().flatten();
                warm.chain(learned.get(p).into_iter().flatten())
            })
            .map(Vec::as_slice)
            .collect();
        let copyable = crate::oracle::Copyable::new(&t.request.prompt, &refs, &written, budget);
        tokens += o.token_ids.len();
        steps += copyable.reach_steps(o.token_ids.len());
        ms += copyable.cheapest(curve).ms;
        if let Some(p) = pool {
            let docs = learned.entry(p).or_default();
            docs.push(t.request.prompt.clone());
            docs.push(written);
        }
    }
    (tokens, steps, ms)
}

/// Adds the copy oracle's figures to the concurrency-1 summary rows of the speculative
/// configurations (`summary[ci]` is `configs[ci]`'s, plain first).
pub(super) fn add_copy_oracle(
    summary: &mut [SummaryRow],
    configs: &[Config],
    targets: &[Target],
    outs: &[Vec<GenerateOutput>],
    warm: &PoolTexts,
    curve: &CostCurve,
    budget: usize,
) {
    let plain_ms: f64 = outs[0]
        .iter()
        .map(|o| curve.steps_ms(&o.spec.steps_by_size))
        .sum();
    for (ci, c) in configs.iter().enumerate().skip(1) {
        let (tokens, steps, ms) = copy_oracle(c, targets, &outs[ci], warm, curve, budget);
        summary[ci].copy_oracle_mean_accepted_length = Some(tokens as f64 / steps.max(1) as f64);
        summary[ci].copy_oracle_ceiling = Some(plain_ms / ms.max(1e-9));
    }
}

/// Each configuration's outputs of a phase: per record, the round whose decode time is the
/// median; and how many records' texts differed between rounds.
fn median_outputs(rounds: &[Round]) -> (Vec<Vec<GenerateOutput>>, Vec<usize>) {
    let configs = rounds[0].outs.len();
    (0..configs)
        .map(|ci| {
            let mut differing = 0;
            let picked = (0..rounds[0].outs[ci].len())
                .map(|k| {
                    let reps: Vec<&GenerateOutput> =
                        rounds.iter().map(|r| &r.outs[ci][k]).collect();
                    if reps.iter().any(|o| o.token_ids != reps[0].token_ids) {
                        differing += 1;
                    }
                    reps[median_rep(&reps)].clone()
                })
                .collect();
            (picked, differing)
        })
        .unzip()
}

pub(super) fn summarize(
    configs: &[Config],
    targets: &[Target],
    rounds: &[Round],
    concurrency: usize,
    curve: &CostCurve,
    rows: &mut Vec<RecordRow>,
) -> Vec<SummaryRow> {
    let (outs, differing) = median_outputs(rounds);
    let plain = &outs[0];
    let modeled = |o: &GenerateOutput| curve.steps_ms(&o.spec.steps_by_size);
    let mut out = Vec::new();
    for (ci, c) in configs.iter().enumerate() {
        let mine = &outs[ci];
        let tokens: usize = mine.iter().map(|o| o.completion_tokens).sum();
        let mut spec = SpecStats::default();
        mine.iter().for_each(|o| spec.merge(&o.spec));
        let identical = mine
            .iter()
            .zip(plain)
            .filter(|(o, p)| o.token_ids == p.token_ids)
            .count();
        let speedup =
            |o: &GenerateOutput, p: &GenerateOutput| decode_tps(o) / decode_tps(p).max(1e-9);
        for (k, (o, p)) in mine.iter().zip(plain).enumerate() {
            rows.push(RecordRow {
                id: targets[k].record.id.clone(),
                group: targets[k].record.group.clone(),
                config: c.name,
                concurrency,
                completion_tokens: o.completion_tokens,
                decode_ms: decode_secs(o) * 1e3,
                tokens_per_second: decode_tps(o),
                speedup_vs_plain: speedup(o, p),
                modeled_speedup_vs_plain: modeled(p) / modeled(o).max(1e-9),
                mean_accepted_length: o.spec.mean_accepted_length(o.completion_tokens),
                relaxed_tokens: o.spec.relaxed_tokens,
                identical_to_plain: o.token_ids == p.token_ids,
            });
        }
        let single = concurrency == 1;
        // Concurrency N: each round's completion tokens per second of wall time, and its
        // ratio to plain's in the same round.
        let round_tps = |r: &Round, ci: usize| {
            let tokens: usize = r.outs[ci].iter().map(|o| o.completion_tokens).sum();
            tokens as f64 / r.wall[ci].max(1e-9)
        };
        let ratios: Vec<f64> = rounds
            .iter()
            .map(|r| round_tps(r, ci) / round_tps(r, 0).max(1e-9))
            .collect();
        let tps = if single {
            let decode: f64 = mine.iter().map(decode_secs).sum();
            tokens as f64 / decode.max(1e-9)
        } else {
            median(rounds.iter().map(|r| round_tps(r, ci)).collect())
        };
        let speedup_vs_plain = if single {
            out.first()
                .map_or(1.0, |p: &SummaryRow| tps / p.tokens_per_second)
        } else {
            median(ratios.clone())
        };
        let several = !single && rounds.len() > 1;
        let floor =
            single.then(|| record_floor(mine.iter().zip(plain).map(|(o, p)| speedup(o, p))));
        let modeled_speedup = if single {
            let plain_modeled: f64 = plain.iter().map(modeled).sum();
            let my_modeled: f64 = mine.iter().map(modeled).sum();
            plain_modeled / my_modeled.max(1e-9)
        } else {
            let batch = |r: &Round, ci: usize| curve.forwards_ms(&r.forwards_by_rows[ci]);
            median(
                rounds
                    .iter()
                    .map(|r| batch(r, 0) / batch(r, ci).max(1e-9))
                    .collect(),
            )
        };
        out.push(SummaryRow {
            config: c.name,
            concurrency,
            verify: c.acceptance.name(),
            records: mine.len(),
            completion_tokens: tokens,
            tokens_per_second: tps,
            speedup_vs_plain,
            speedup_range: several.then(|| span(ratios.into_iter())),
            rounds: (!single).then_some(rounds.len()),
            records_differing_between_rounds: several.then_some(differing[ci]),
            modeled_speedup_vs_plain: modeled_speedup,
            min_record_speedup: floor.map(|f| f.0),
            records_below_0_95: floor.map(|f| f.1),
            mean_accepted_length: spec.mean_accepted_length(tokens),
            copy_oracle_mean_accepted_length: None,
            copy_oracle_ceiling: None,
            relaxed_accept_rate: spec.relaxed_tokens as f64 / spec.accepted_tokens.max(1) as f64,
            relaxed_tokens: spec.relaxed_tokens,
            identical_to_plain: identical,
        });
    }
    out
}
