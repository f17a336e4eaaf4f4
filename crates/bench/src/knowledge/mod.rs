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
    Model, Pool, PoolName, Pools, Relaxed, Scheduler, Speculation, SpeculationSpec, Tokenizer,
};
use specdec_rec::job::read_input;
use specdec_rec::{KnowledgeRecord, Role};

use crate::cost::{cost_curve, tally_rows, CostCurve};
use crate::workload::{decode_tps, run_together, Slot};
use crate::BenchError;

mod summary;

use summary::{add_copy_oracle, summarize, warm_texts};
pub use summary::{RecordRow, SummaryRow};

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
