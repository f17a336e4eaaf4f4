//! The rows a workload run reports: one per record and method, and per-method summaries.

use std::borrow::Borrow;
use std::collections::BTreeMap;

use serde::Serialize;
use specdec_engine::{DraftMethod, GenerateOutput, Pools, SpecStats};
use specdec_workloads::{Record, RecordClass};

use super::method_pool;
use crate::cost::CostCurve;
use crate::BenchError;

/// Where an output first differs from plain decoding's.
#[derive(Serialize)]
pub struct Divergence {
    /// The first token that differs.
    pub position: usize,
    /// The target's top-2 logit gap there (a near tie is noise, not a bug).
    pub top2_gap: f32,
}

/// One record under one method (its median repetition).
#[derive(Serialize)]
pub struct RecordRow {
    /// The record.
    pub id: String,
    /// The record's class, for workloads with classes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class: Option<RecordClass>,
    /// The method.
    pub method: &'static str,
    /// The output was the record's forced text, not the model's (see `--forced`).
    pub forced: bool,
    /// Tokens of the prompt.
    pub prompt_tokens: usize,
    /// Tokens written.
    pub completion_tokens: usize,
    /// Wall time, prefill included.
    pub elapsed_ms: f64,
    /// Time until the prompt was in the cache.
    pub prefill_ms: f64,
    /// Wall time after prefill.
    pub decode_ms: f64,
    /// Completion tokens per second of decoding (prefill, identical for all methods,
    /// excluded); with repeats, the median repetition's (the other fields are its too).
    pub tokens_per_second: f64,
    /// The lowest and highest tokens per second over the repetitions.
    pub tokens_per_second_range: [f64; 2],
    /// Repetitions run.
    pub repeats: usize,
    /// tokens_per_second over `none`'s on the same record.
    pub speedup_vs_none: f64,
    /// What this record's decode forwards cost on the run's measured cost curve (each
    /// step's forward over its node count), free of the machine's run-to-run noise.
    pub modeled_decode_ms: f64,
    /// `none`'s modeled_decode_ms over this one's (the same tokens).
    pub modeled_speedup_vs_none: f64,
    /// Target forwards, prefill included.
    pub forward_passes: usize,
    /// Tokens per decode step.
    pub mean_accepted_length: f64,
    /// Drafted tokens verified.
    pub drafted_tokens: usize,
    /// Drafted tokens accepted.
    pub accepted_tokens: usize,
    /// Accepted tokens that were not the target's own choice (0 under strict).
    pub relaxed_tokens: usize,
    /// Time spent drafting (included in the decode time).
    pub draft_ms: f64,
    /// The output equals plain decoding's.
    pub identical_to_plain: bool,
    /// Where it first differs from plain decoding's, if it does.
    pub first_divergence: Option<Divergence>,
    /// The output's tokens (what `bench replay` replays).
    pub token_ids: Vec<u32>,
    /// The stop token that ended the output, if one did (not in `token_ids`).
    pub stop_token: Option<u32>,
}

/// One method's totals over a set of records.
#[derive(Serialize)]
pub struct SummaryRow {
    /// The method.
    pub method: &'static str,
    /// The outputs were forced.
    pub forced: bool,
    /// Records summed.
    pub records: usize,
    /// Tokens written.
    pub completion_tokens: usize,
    /// Wall time, prefill included.
    pub elapsed_ms: f64,
    /// Wall time after prefill.
    pub decode_ms: f64,
    /// Completion tokens per second of decoding.
    pub tokens_per_second: f64,
    /// tokens_per_second over `none`'s.
    pub speedup_vs_none: f64,
    /// Tokens per decode step.
    pub mean_accepted_length: f64,
    /// Accepted tokens that were not the target's own choice (0 under strict).
    pub relaxed_tokens: usize,
    /// Records whose output equals plain decoding's.
    pub identical_records: usize,
    /// The per-record floor: the lowest per-record speedup vs `none`, and how many records
    /// fall below 0.95x (a method may win on average and still lose on some records).
    pub min_record_speedup: f64,
    /// Records below 0.95x.
    pub records_below_0_95: usize,
    /// The same three figures on modeled decode time (see `RecordRow::modeled_decode_ms`):
    /// `none`'s modeled decode time over this method's.
    pub modeled_speedup_vs_none: f64,
    /// The lowest per-record modeled speedup.
    pub min_record_modeled_speedup: f64,
    /// Records below 0.95x, modeled.
    pub records_below_0_95_modeled: usize,
    /// Completion tokens per second of wall time with `concurrency` records in flight
    /// (prefill included): the throughput a batch of clients sees. Whole runs only (a
    /// class's records share their batches' wall time with others).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aggregate_tokens_per_second: Option<f64>,
    /// Of that wall time, the share spent in steps that carried a prompt's rows (some
    /// request still reading its prompt). Batching does not shrink it: a prompt's rows
    /// cost the same in any batch, so it bounds what more requests in flight can gain.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefill_share: Option<f64>,
    /// `none`'s batches' modeled time over this method's, each step's forward priced by
    /// all its rows on the cost curve (prefill included; see
    /// [`crate::cost::CostCurve::forwards_ms`]): whether the drafts pay for the rows they
    /// add to the batch's forwards, free of the drift between the methods' turns that
    /// the aggregate throughput carries. Whole runs only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modeled_aggregate_speedup_vs_none: Option<f64>,
    /// The batches' forwards counted by rows (`[n]`: forwards over n rows), every
    /// repetition's: what the modeled figures price, and what a sweep prices every
    /// concurrency's run on one curve with. Whole runs only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forwards_by_rows: Option<Vec<usize>>,
    /// `accepted_by_position[d]`: decode steps whose accepted path reached depth d + 1.
    pub accepted_by_position: Vec<usize>,
    /// Accepted tokens by draft source.
    pub accepted_by_source: BTreeMap<&'static str, usize>,
}

/// One record's result under one method.
pub(crate) struct Row {
    pub(crate) method: usize,
    pub(crate) row: RecordRow,
    pub(crate) spec: SpecStats,
}

/// Index of the median of `reps` by decode time; of the two middle ones for an even count,
/// the faster (a shared machine's noise only ever slows a run down).
pub(crate) fn median_rep<O: Borrow<GenerateOutput>>(reps: &[O]) -> usize {
    let decode = |o: &O| {
        let o = o.borrow();
        o.elapsed.saturating_sub(o.prefill_time)
    };
    let mut order: Vec<usize> = (0..reps.len()).collect();
    order.sort_by_key(|&i| decode(&reps[i]));
    order[(order.len() - 1) / 2]
}

/// The lowest and highest of `values`.
pub(crate) fn span(values: impl Iterator<Item = f64>) -> [f64; 2] {
    values.fold([f64::INFINITY, f64::NEG_INFINITY], |[lo, hi], v| {
        [lo.min(v), hi.max(v)]
    })
}

/// A record's progress line: its median repetition and, with repeats, the spread.
pub(crate) fn progress(
    r: &Record,
    m: &DraftMethod,
    row: &RecordRow,
    reps: &[GenerateOutput],
) -> String {
    let mut tps = String::new();
    let mut mal = String::new();
    if reps.len() > 1 {
        let [lo, hi] = row.tokens_per_second_range;
        tps = format!(" ({lo:.1}-{hi:.1})");
        // Repetitions start from the same pools and acceptance memory, so their MALs
        // should agree (draft sizing still follows the forwards' live timings).
        let [lo, hi] = span(
            reps.iter()
                .map(|o| o.spec.mean_accepted_length(o.completion_tokens)),
        );
        if hi - lo > 0.005 {
            mal = format!(" ({lo:.2}-{hi:.2})");
        }
    }
    if row.relaxed_tokens > 0 {
        mal.push_str(&format!("  {} relaxed", row.relaxed_tokens));
    }
    format!(
        "{:<24} {:<10} {:>4} tok {:>7.1} tok/s{tps}  MAL {:.2}{mal}{}{}",
        r.id,
        m.name(),
        row.completion_tokens,
        row.tokens_per_second,
        row.mean_accepted_length,
        if row.identical_to_plain {
            ""
        } else {
            "  DIFFERS"
        },
        if row.forced { "  forced" } else { "" }
    )
}

/// A record's row from its repetitions `reps`, reported as `out` (the median one).
pub(crate) fn record_row(
    curve: &CostCurve,
    r: &Record,
    method: &'static str,
    reps: &[GenerateOutput],
    out: &GenerateOutput,
    first_divergence: Option<Divergence>,
) -> RecordRow {
    RecordRow {
        id: r.id.clone(),
        class: r.class,
        method,
        forced: out.forced,
        prompt_tokens: out.prompt_tokens,
        completion_tokens: out.completion_tokens,
        elapsed_ms: out.elapsed.as_secs_f64() * 1e3,
        prefill_ms: out.prefill_time.as_secs_f64() * 1e3,
        decode_ms: decode_secs(out) * 1e3,
        tokens_per_second: decode_tps(out),
        tokens_per_second_range: span(reps.iter().map(decode_tps)),
        repeats: reps.len(),
        speedup_vs_none: 1.0,
        modeled_decode_ms: curve.steps_ms(&out.spec.steps_by_size),
        modeled_speedup_vs_none: 1.0,
        forward_passes: out.forward_passes,
        mean_accepted_length: out.spec.mean_accepted_length(out.completion_tokens),
        drafted_tokens: out.spec.drafted_tokens,
        accepted_tokens: out.spec.accepted_tokens,
        relaxed_tokens: out.spec.relaxed_tokens,
        draft_ms: out.spec.draft_time.as_secs_f64() * 1e3,
        identical_to_plain: first_divergence.is_none(),
        first_divergence,
        token_ids: out.token_ids.clone(),
        stop_token: out.stop_token,
    }
}

/// Per method, how its batches ran (each method's figures summed over its groups).
#[derive(Clone, Debug)]
pub(crate) struct BatchTimes {
    /// Wall seconds, a repetition's share each.
    pub wall: Vec<f64>,
    /// Wall seconds of the steps that carried a prompt's rows, the same way.
    pub prefill: Vec<f64>,
    /// The batches' forwards counted by rows, every repetition's.
    pub forwards_by_rows: Vec<Vec<usize>>,
}

impl BatchTimes {
    pub(crate) fn new(methods: usize) -> Self {
        BatchTimes {
            wall: vec![0.0; methods],
            prefill: vec![0.0; methods],
            forwards_by_rows: vec![Vec::new(); methods],
        }
    }
}

/// Per-method totals over `rows`; `batches` gives the aggregate throughput, prefill's
/// share and the batches' modeled speedup on `curve` (whole runs only).
pub(crate) fn summarize(
    methods: &[DraftMethod],
    rows: &[&Row],
    batches: Option<(&BatchTimes, &CostCurve)>,
) -> Vec<SummaryRow> {
    let mut out: Vec<SummaryRow> = Vec::new();
    for (mi, m) in methods.iter().enumerate() {
        let mine: Vec<&RecordRow> = rows
            .iter()
            .filter(|r| r.method == mi)
            .map(|r| &r.row)
            .collect();
        let tokens: usize = mine.iter().map(|r| r.completion_tokens).sum();
        let elapsed: f64 = mine.iter().map(|r| r.elapsed_ms).sum();
        let decode: f64 = mine.iter().map(|r| r.decode_ms).sum();
        let mut spec = SpecStats::default();
        for r in rows.iter().filter(|r| r.method == mi) {
            spec.merge(&r.spec);
        }
        let tps = tokens as f64 / (decode / 1e3).max(1e-9);
        let modeled: f64 = mine.iter().map(|r| r.modeled_decode_ms).sum();
        let plain_modeled: f64 = rows
            .iter()
            .filter(|r| r.method == 0)
            .map(|r| r.row.modeled_decode_ms)
            .sum();
        let floor = record_floor(mine.iter().map(|r| r.speedup_vs_none));
        let modeled_floor = record_floor(mine.iter().map(|r| r.modeled_speedup_vs_none));
        out.push(SummaryRow {
            method: m.name(),
            forced: mine.iter().any(|r| r.forced),
            records: mine.len(),
            completion_tokens: tokens,
            elapsed_ms: elapsed,
            decode_ms: decode,
            tokens_per_second: tps,
            speedup_vs_none: out.first().map_or(1.0, |none| tps / none.tokens_per_second),
            mean_accepted_length: spec.mean_accepted_length(tokens),
            relaxed_tokens: spec.relaxed_tokens,
            identical_records: mine.iter().filter(|r| r.identical_to_plain).count(),
            min_record_speedup: floor.0,
            records_below_0_95: floor.1,
            modeled_speedup_vs_none: plain_modeled / modeled.max(1e-9),
            min_record_modeled_speedup: modeled_floor.0,
            records_below_0_95_modeled: modeled_floor.1,
            aggregate_tokens_per_second: batches.map(|(b, _)| tokens as f64 / b.wall[mi].max(1e-9)),
            prefill_share: batches.map(|(b, _)| b.prefill[mi] / b.wall[mi].max(1e-9)),
            modeled_aggregate_speedup_vs_none: batches.map(|(b, curve)| {
                curve.forwards_ms(&b.forwards_by_rows[0])
                    / curve.forwards_ms(&b.forwards_by_rows[mi]).max(1e-9)
            }),
            forwards_by_rows: batches.map(|(b, _)| b.forwards_by_rows[mi].clone()),
            accepted_by_position: spec.accepted_by_position,
            accepted_by_source: spec.accepted_by_source,
        });
    }
    out
}

/// What a method's history index holds at the end of a run.
/// What a method's history index holds at the end of a run.
#[derive(Serialize)]
pub struct HistorySize {
    /// The method.
    pub method: &'static str,
    /// Requests indexed.
    pub documents: usize,
    /// Tokens indexed.
    pub tokens: usize,
    /// Bytes the index takes.
    pub memory_bytes: usize,
    /// Its size per million tokens, in MiB.
    pub mib_per_million_tokens: f64,
}

pub(crate) fn history_sizes(
    pools: &mut Pools,
    methods: &[DraftMethod],
) -> Result<Vec<HistorySize>, BenchError> {
    let mut out = Vec::new();
    for &m in methods
        .iter()
        .filter(|m| matches!(m, DraftMethod::History | DraftMethod::Auto))
    {
        let pool = pools.pool(Some(&method_pool(m)))?;
        let h = pool.history.lock().unwrap_or_else(|e| e.into_inner());
        out.push(HistorySize {
            method: m.name(),
            documents: h.documents(),
            tokens: h.tokens(),
            memory_bytes: h.memory_bytes(),
            mib_per_million_tokens: h.memory_bytes() as f64 / (1 << 20) as f64 * 1e6
                / h.tokens().max(1) as f64,
        });
    }
    Ok(out)
}

/// The per-record floor of `speedups`: the lowest, and how many are below 0.95x (a method
/// may win on average and still lose on some records).
/// An output's decode seconds (prefill excluded).
pub(crate) fn decode_secs(o: &GenerateOutput) -> f64 {
    o.elapsed.saturating_sub(o.prefill_time).as_secs_f64()
}

/// An output's completion tokens per decode second.
pub(crate) fn decode_tps(o: &GenerateOutput) -> f64 {
    o.completion_tokens as f64 / decode_secs(o).max(1e-9)
}

pub(crate) fn record_floor(speedups: impl Iterator<Item = f64>) -> (f64, usize) {
    speedups.fold((f64::INFINITY, 0), |(lo, below), v| {
        (lo.min(v), below + usize::from(v < 0.95))
    })
}
