//! LASER's benchmark: knowledge generation on groups' target members, in one process and
//! interleaved, under five configurations: plain decoding; strict speculation with no pool,
//! with one global pool and with per-group pools; relaxed speculation with per-group pools.
//! Each runs at concurrency 1 and at concurrency N.
//!
//! Pools come warmed: from a `rec knowledge --warmup only --pools DIR` run (the production
//! flow), or generated here from the groups' warm-up members. Per-group pools are copies of
//! the warm ones, the global pool is all of them merged. Each configuration has its own
//! engine (its own learned acceptance and cost) and its own copies of the pools, which learn
//! from that configuration's outputs only, so no configuration drafts from another's answer
//! to the same record; the concurrency-N phase starts again from the warm pools.
//!
//! At concurrency 1 the configurations take turns record by record, so the machine's drift
//! falls on all of them alike. At concurrency N a chunk of records is one measurement, so
//! the phase runs `rounds` times, each from the warm pools on fresh engines: a batched
//! configuration's speedup is the median round's, each round's throughput over plain's in
//! that same round.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Instant;

use serde::Serialize;
use specdec_engine::{
    Acceptance, ChatMessage, ChatTemplate, DraftMethod, Engine, GenerateOutput, GenerateRequest,
    Model, Pool, PoolName, Pools, Relaxed, Scheduler, SpecStats, Speculation, SpeculationSpec,
    Tokenizer,
};
use specdec_rec::job::read_input;
use specdec_rec::{KnowledgeRecord, Role};

use crate::cost::{cost_curve, median, tally_rows, CostCurve};
use crate::workload::{
    decode_secs, decode_tps, median_rep, record_floor, run_together, span, Slot,
};
use crate::BenchError;

/// What to run.
#[derive(Clone, Debug)]
pub struct KnowledgeOptions {
    /// The warm pools' folder (read only); none: generate `warmup` members per group first.
    pub pools: Option<PathBuf>,
    /// Without `pools`: warm-up members per group to generate first (strict, batched).
    pub warmup: usize,
    /// Only these groups (empty: every group of the records).
    pub groups: Vec<String>,
    /// Target members per group (the first in file order).
    pub targets: usize,
    /// Records in flight in the batched phase (1: skip it).
    pub concurrency: usize,
    /// Times the batched phase runs (each from the warm pools, on fresh engines).
    pub rounds: usize,
    /// Tokens per record (a record's own max_tokens overrides).
    pub max_tokens: usize,
    /// Most draft nodes per step.
    pub budget: usize,
    /// The relaxed configuration's rule.
    pub relaxed: Relaxed,
}

/// The model the benchmark runs on.
pub struct KnowledgeModel<'a> {
    /// The target.
    pub model: &'a Model,
    /// Its tokenizer.
    pub tokenizer: &'a Tokenizer,
    /// Its chat template (records are one-turn chats).
    pub template: &'a ChatTemplate,
}

/// Progress, for the caller to show (or not).
pub enum Progress<'a> {
    /// The warm-up members were generated.
    Warmup {
        /// Members generated.
        members: usize,
        /// Their tokens.
        tokens: usize,
        /// Seconds it took.
        seconds: f64,
    },
    /// A chunk of targets finished under every configuration: the last record's decode
    /// speed per configuration.
    Chunk {
        /// Records in flight.
        concurrency: usize,
        /// The phase's run (0-based) and how many it has.
        round: (usize, usize),
        /// Targets done so far.
        done: usize,
        /// Targets in all.
        of: usize,
        /// The chunk's last record.
        id: &'a str,
        /// (configuration, decode tokens per second) of that record.
        speeds: Vec<(&'static str, f64)>,
    },
}

/// The whole run, as `rec bench --json` prints it.
#[derive(Serialize)]
pub struct KnowledgeRun {
    /// Per configuration and concurrency.
    pub summary: Vec<SummaryRow>,
    /// Per record, configuration and concurrency.
    pub records: Vec<RecordRow>,
    /// The groups benchmarked.
    pub groups: BTreeSet<String>,
    /// Target records benchmarked.
    pub targets: usize,
    /// The batched phase's concurrency.
    pub concurrency: usize,
    /// The relaxed configuration's rule.
    pub relaxed: RelaxedRule,
    /// Each batched configuration's throughput over plain decoding one record at a time.
    pub batched_vs_plain_concurrency_1: BTreeMap<&'static str, f64>,
    /// A perfect drafter's speedup on this machine's measured cost curve (every drafted
    /// token accepted, the forward size with the most tokens per millisecond, see
    /// [`CostCurve::perfect_drafter`]): the ceiling of any strict drafter here.
    pub perfect_drafter_ceiling: f64,
    /// The forward size (nodes) that ceiling takes.
    pub perfect_drafter_nodes: usize,
    /// The measured cost curve every modeled figure is priced on (`rec replay --run` prices
    /// its replays on it too).
    pub cost_curve: CostCurve,
    /// Seconds the measured phases took.
    pub seconds: f64,
}

/// The relaxed rule's parameters.
#[derive(Serialize)]
pub struct RelaxedRule {
    /// How many of the target's likeliest tokens a draft may be.
    pub top_k: usize,
    /// The probability a draft other than the argmax must exceed.
    pub tau: f32,
}

/// Which pool a configuration drafts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PoolKind {
    /// Its own prompt and output only (a fresh empty pool per record).
    None,
    /// One pool for every group.
    Global,
    /// The record's group's pool.
    Group,
}

struct Config {
    name: &'static str,
    method: DraftMethod,
    pool: PoolKind,
    acceptance: Acceptance,
}

impl Config {
    /// Strict `auto` drafting from `pool`.
    fn strict(name: &'static str, pool: PoolKind) -> Config {
        Config {
            name,
            method: DraftMethod::Auto,
            pool,
            acceptance: Acceptance::Strict,
        }
    }
}

fn configs(relaxed: Relaxed) -> Vec<Config> {
    vec![
        Config {
            name: "plain",
            method: DraftMethod::None,
            pool: PoolKind::None,
            acceptance: Acceptance::Strict,
        },
        Config::strict("strict-nopool", PoolKind::None),
        Config::strict("strict-global", PoolKind::Global),
        Config::strict("strict-group", PoolKind::Group),
        Config {
            acceptance: Acceptance::Relaxed(relaxed),
            ..Config::strict("relaxed-group", PoolKind::Group)
        },
    ]
}

const GLOBAL: &str = "bench-global";

fn group_pool(group: &str) -> Result<PoolName, BenchError> {
    PoolName::parse(group)
        .map_err(|e| BenchError::Setup(format!("group `{group}` is not a valid pool name: {e}")))
}

/// The warm pools: each group's (from `source`; empty when it has none) and their merge.
fn warm_pools(
    source: &mut Pools,
    groups: &BTreeSet<String>,
) -> Result<Vec<(PoolName, Pool)>, BenchError> {
    let global = Pool::default();
    let mut out = Vec::new();
    for g in groups {
        let name = group_pool(g)?;
        let pool = source.pool(Some(&name))?.deep_clone();
        {
            let trie = pool.trie.lock().unwrap_or_else(|e| e.into_inner());
            global
                .trie
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .merge_max(&trie);
            let history = pool.history.lock().unwrap_or_else(|e| e.into_inner());
            let mut all = global.history.lock().unwrap_or_else(|e| e.into_inner());
            for doc in history.documents_held() {
                all.insert(doc);
            }
        }
        out.push((name, pool));
    }
    out.push((PoolName::parse(GLOBAL)?, global));
    Ok(out)
}

/// Fresh in-memory pools for one configuration (never saved: the warm folder is read only).
fn fresh_pools(warm: &[(PoolName, Pool)]) -> Pools {
    let mut pools = Pools::in_memory();
    for (name, pool) in warm {
        pools.insert(name.clone(), pool.deep_clone());
    }
    pools
}

struct Target {
    record: KnowledgeRecord,
    request: GenerateRequest,
}

/// Every record of `paths`, in order; a malformed line is an error here (a benchmark
/// over part of its input would mislead).
fn read_records(paths: &[PathBuf]) -> Result<Vec<KnowledgeRecord>, BenchError> {
    let mut out = Vec::new();
    for path in paths {
        let input = read_input(path, &SpeculationSpec::default())?;
        if let Some(m) = input.malformed.first() {
            return Err(BenchError::Setup(format!("{}: {m}", path.display())));
        }
        out.extend(input.tasks.into_iter().map(|t| t.record));
    }
    Ok(out)
}

/// The first `per_group` members of `role` of each chosen group, taken round-robin across
/// groups so every stretch of the run covers every group; and the groups.
fn pick(
    all: &[KnowledgeRecord],
    role: Role,
    groups: &[String],
    per_group: usize,
) -> (Vec<KnowledgeRecord>, BTreeSet<String>) {
    let mut by_group: BTreeMap<String, Vec<KnowledgeRecord>> = BTreeMap::new();
    for r in all.iter().cloned() {
        if r.role == role && (groups.is_empty() || groups.contains(&r.group)) {
            let g = by_group.entry(r.group.clone()).or_default();
            if g.len() < per_group {
                g.push(r);
            }
        }
    }
    let names: BTreeSet<String> = by_group.keys().cloned().collect();
    let mut lists: Vec<std::vec::IntoIter<KnowledgeRecord>> =
        by_group.into_values().map(Vec::into_iter).collect();
    let mut out = Vec::new();
    loop {
        let before = out.len();
        for l in &mut lists {
            out.extend(l.next());
        }
        if out.len() == before {
            break;
        }
    }
    (out, names)
}

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

/// A record's request: its prompt as a one-turn chat (the prompt is content: special-token
/// text in it stays text).
fn request(
    m: &KnowledgeModel<'_>,
    r: &KnowledgeRecord,
    max_tokens: usize,
) -> Result<GenerateRequest, BenchError> {
    let messages = [ChatMessage::new("user", r.prompt.clone())];
    let prompt = m.tokenizer.encode_chat(m.template, &messages, true)?;
    Ok(GenerateRequest::new(
        prompt,
        r.max_tokens.unwrap_or(max_tokens),
    ))
}

/// A configuration's copy of a record's request; `k` makes the no-pool pool unique.
fn configured(
    base: &GenerateRequest,
    c: &Config,
    group: &str,
    k: usize,
    budget: usize,
) -> Result<GenerateRequest, BenchError> {
    let pool = match c.pool {
        PoolKind::None => PoolName::parse(&format!("bench-nopool-{k}"))?,
        PoolKind::Global => PoolName::parse(GLOBAL)?,
        PoolKind::Group => group_pool(group)?,
    };
    Ok(GenerateRequest {
        speculation: Speculation {
            method: c.method,
            max_draft: budget,
            pool: Some(pool),
            acceptance: c.acceptance.clone(),
            ..Speculation::default()
        },
        ..base.clone()
    })
}

/// Generates the warm-up members (strict, batched) into `pools`, each feeding its group's.
fn generate_warmup(
    m: &KnowledgeModel<'_>,
    opts: &KnowledgeOptions,
    members: &[KnowledgeRecord],
    pools: Pools,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<Pools, BenchError> {
    let t0 = Instant::now();
    let engine = Engine::new(m.model, m.tokenizer).with_pools(pools);
    let mut sched: Scheduler<'_, Slot> = Scheduler::new(engine, opts.concurrency.max(1));
    let c = &Config::strict("warm-up", PoolKind::Group);
    let reqs = members
        .iter()
        .enumerate()
        .map(|(k, r)| {
            let req = request(m, r, opts.max_tokens)?;
            configured(&req, c, &r.group, k, opts.budget)
        })
        .collect::<Result<Vec<_>, BenchError>>()?;
    let outs = run_together(&mut sched, reqs)?.outs;
    progress(Progress::Warmup {
        members: members.len(),
        tokens: outs.iter().map(|o| o.completion_tokens).sum(),
        seconds: t0.elapsed().as_secs_f64(),
    });
    Ok(std::mem::replace(
        sched.engine_mut().pools_mut(),
        Pools::in_memory(),
    ))
}

/// One run of a phase: `outs[config][record]` and each configuration's wall seconds.
struct Round {
    outs: Vec<Vec<GenerateOutput>>,
    wall: Vec<f64>,
    /// Per configuration, its batches' forwards counted by rows (see
    /// [`CostCurve::forwards_ms`]).
    forwards_by_rows: Vec<Vec<usize>>,
}

/// How a phase runs: records in flight, times it runs, most draft nodes per step.
#[derive(Clone, Copy)]
struct PhaseSetting {
    concurrency: usize,
    rounds: usize,
    budget: usize,
}

/// One phase: every configuration on every target, run `setting.rounds` times.
fn phase(
    m: &KnowledgeModel<'_>,
    configs: &[Config],
    warm: &[(PoolName, Pool)],
    targets: &[Target],
    setting: PhaseSetting,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<Vec<Round>, BenchError> {
    let rounds = setting.rounds.max(1);
    (0..rounds)
        .map(|r| run_round(m, configs, warm, targets, setting, (r, rounds), progress))
        .collect()
}

/// One run of a phase, from the warm pools on fresh engines.
fn run_round(
    m: &KnowledgeModel<'_>,
    configs: &[Config],
    warm: &[(PoolName, Pool)],
    targets: &[Target],
    setting: PhaseSetting,
    round: (usize, usize),
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<Round, BenchError> {
    let PhaseSetting {
        concurrency,
        budget,
        ..
    } = setting;
    let mut scheds: Vec<Scheduler<'_, Slot>> = configs
        .iter()
        .map(|_| {
            let engine = Engine::new(m.model, m.tokenizer).with_pools(fresh_pools(warm));
            Scheduler::new(engine, concurrency)
        })
        .collect();
    let mut outs: Vec<Vec<GenerateOutput>> = configs.iter().map(|_| Vec::new()).collect();
    let mut wall = vec![0f64; configs.len()];
    let mut forwards_by_rows = vec![Vec::new(); configs.len()];
    // Configurations take turns on chunks of records (one record at concurrency 1), so
    // the machine's drift falls on all of them alike; each round starts the turns one
    // configuration later, so none always runs first after a pause.
    let chunk = if concurrency == 1 { 1 } else { 2 * concurrency };
    let mut start = 0;
    for group in targets.chunks(chunk) {
        for i in 0..configs.len() {
            let ci = (i + round.0) % configs.len();
            let c = &configs[ci];
            let reqs = group
                .iter()
                .enumerate()
                .map(|(j, t)| configured(&t.request, c, &t.record.group, start + j, budget))
                .collect::<Result<Vec<_>, BenchError>>()?;
            let got = run_together(&mut scheds[ci], reqs)?;
            wall[ci] += got.secs;
            tally_rows(&mut forwards_by_rows[ci], &got.step_rows);
            outs[ci].extend(got.outs);
        }
        start += group.len();
        let last = outs[0].len() - 1;
        progress(Progress::Chunk {
            concurrency,
            round,
            done: start,
            of: targets.len(),
            id: &targets[last].record.id,
            speeds: configs
                .iter()
                .zip(&outs)
                .map(|(c, o)| (c.name, decode_tps(&o[last])))
                .collect(),
        });
    }
    Ok(Round {
        outs,
        wall,
        forwards_by_rows,
    })
}

/// The texts each warm pool holds, by pool name, for the copy oracle.
type PoolTexts = BTreeMap<String, Vec<Vec<u32>>>;

fn warm_texts(warm: &[(PoolName, Pool)]) -> PoolTexts {
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
fn add_copy_oracle(
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

fn summarize(
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

/// Runs the benchmark on the target members of `records` (files of `rec prepare`).
pub fn run(
    m: &KnowledgeModel<'_>,
    records: &[PathBuf],
    opts: &KnowledgeOptions,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<KnowledgeRun, BenchError> {
    let all = read_records(records)?;
    let (picked, groups) = pick(&all, Role::Target, &opts.groups, opts.targets);
    if picked.is_empty() {
        let which = if opts.groups.is_empty() {
            ""
        } else {
            " of the chosen groups"
        };
        return Err(BenchError::Setup(format!(
            "no target records{which} in {records:?}"
        )));
    }
    let vocab = m.model.config().vocab;
    let mut source = Pools::open(None, opts.pools.clone(), vocab, Default::default())?;
    if opts.pools.is_none() {
        let (members, _) = pick(&all, Role::Warmup, &opts.groups, opts.warmup);
        source = generate_warmup(m, opts, &members, source, progress)?;
    }
    let warm = warm_pools(&mut source, &groups)?;
    let targets = picked
        .into_iter()
        .map(|record| {
            let request = request(m, &record, opts.max_tokens)?;
            Ok(Target { record, request })
        })
        .collect::<Result<Vec<_>, BenchError>>()?;
    let configs = configs(opts.relaxed);
    let curve = cost_curve(m.model, m.tokenizer, 5, 300)?;
    let t0 = Instant::now();
    let mut rows = Vec::new();
    let single = PhaseSetting {
        concurrency: 1,
        rounds: 1,
        budget: opts.budget,
    };
    let rounds = phase(m, &configs, &warm, &targets, single, progress)?;
    let mut summary = summarize(&configs, &targets, &rounds, 1, &curve, &mut rows);
    let outs = &rounds[0].outs;
    let texts = warm_texts(&warm);
    add_copy_oracle(
        &mut summary,
        &configs,
        &targets,
        outs,
        &texts,
        &curve,
        opts.budget,
    );
    let plain_single = summary[0].tokens_per_second;
    if opts.concurrency > 1 {
        let c = opts.concurrency;
        let batched = PhaseSetting {
            concurrency: c,
            rounds: opts.rounds,
            budget: opts.budget,
        };
        let rounds = phase(m, &configs, &warm, &targets, batched, progress)?;
        summary.extend(summarize(&configs, &targets, &rounds, c, &curve, &mut rows));
    }
    let ceiling = curve.perfect_drafter(opts.budget);
    let batched_vs_plain_concurrency_1 = summary
        .iter()
        .filter(|s| s.concurrency > 1)
        .map(|s| (s.config, s.tokens_per_second / plain_single.max(1e-9)))
        .collect();
    Ok(KnowledgeRun {
        summary,
        records: rows,
        groups,
        targets: targets.len(),
        concurrency: opts.concurrency,
        relaxed: RelaxedRule {
            top_k: opts.relaxed.top_k(),
            tau: opts.relaxed.tau(),
        },
        batched_vs_plain_concurrency_1,
        perfect_drafter_ceiling: ceiling.0,
        perfect_drafter_nodes: ceiling.1,
        cost_curve: curve,
        seconds: t0.elapsed().as_secs_f64(),
    })
}
