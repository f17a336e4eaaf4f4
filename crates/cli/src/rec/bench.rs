//! `specdec rec bench`: knowledge generation on a group's target members, in one process
//! and interleaved, under five configurations: plain decoding; strict speculation with no
//! pool, with one global pool and with per-group pools; relaxed speculation with per-group
//! pools. Each runs at concurrency 1 and at concurrency N.
//!
//! Pools come warmed from a `rec knowledge --warmup only --pools DIR` run (the production
//! flow): per-group pools are copies of DIR's, the global pool is all of them merged. Each
//! configuration has its own engine (its own learned acceptance and cost) and its own
//! copies of the pools, which learn from that configuration's outputs only, so no
//! configuration drafts from another's answer to the same record; the concurrency-N phase
//! starts again from the warm pools.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use serde::Serialize;
use specdec_engine::{
    Acceptance, DraftMethod, Engine, GenerateOutput, GenerateRequest, Pool, PoolName, Pools,
    Relaxed, Scheduler, SpecStats, Speculation, SpeculationSpec,
};
use specdec_rec::job::read_input;
use specdec_rec::{KnowledgeRecord, Role};

use crate::common::{self, Loaded, ModelArgs};
use crate::verify_args::VerifyArgs;
use specdec_bench::cost::{cost_curve, CostCurve};
use specdec_bench::workload::{run_together, Slot};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Knowledge records (`rec prepare`'s users.jsonl and/or items.jsonl); their target
    /// members are benchmarked.
    #[arg(long = "records", required = true)]
    pub records: Vec<PathBuf>,
    /// The warm pools: the `--pools` folder of a `rec knowledge --warmup only` run over
    /// the same records. Read only; without it every pool starts empty.
    #[arg(long)]
    pub pools: Option<PathBuf>,
    /// Without `--pools`: warm-up members per group to generate first (strict, batched)
    /// into fresh pools.
    #[arg(long, default_value_t = 24)]
    pub warmup: usize,
    /// Only these groups (default: every group of the records).
    #[arg(long, value_delimiter = ',')]
    pub groups: Vec<String>,
    /// Target members per group (the first in file order).
    #[arg(long, default_value_t = 4)]
    pub targets: usize,
    /// Records in flight in the batched phase (1: skip it).
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// Tokens per record (a record's own max_tokens overrides).
    #[arg(long, default_value_t = 256)]
    pub max_tokens: usize,
    /// Most draft nodes per step.
    #[arg(long, default_value_t = 32)]
    pub budget: usize,
    /// The relaxed configuration's rule (`--verify` itself is ignored: every
    /// configuration but relaxed-group is strict).
    #[command(flatten)]
    pub verify: VerifyArgs,
    /// One JSON object on stdout instead of tables.
    #[arg(long)]
    pub json: bool,
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

fn group_pool(group: &str) -> anyhow::Result<PoolName> {
    PoolName::parse(group).with_context(|| format!("group `{group}` is not a valid pool name"))
}

/// The warm pools: each group's (from `source`; empty when it has none) and their merge.
fn warm_pools(
    source: &mut Pools,
    groups: &BTreeSet<String>,
) -> anyhow::Result<Vec<(PoolName, Pool)>> {
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
fn read_records(paths: &[PathBuf]) -> anyhow::Result<Vec<KnowledgeRecord>> {
    let mut out = Vec::new();
    for path in paths {
        let input = read_input(path, &SpeculationSpec::default())?;
        if let Some(m) = input.malformed.first() {
            anyhow::bail!("{}: {m}", path.display());
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
struct RecordRow {
    id: String,
    group: String,
    config: &'static str,
    concurrency: usize,
    completion_tokens: usize,
    decode_ms: f64,
    tokens_per_second: f64,
    speedup_vs_plain: f64,
    modeled_speedup_vs_plain: f64,
    mean_accepted_length: f64,
    relaxed_tokens: usize,
    identical_to_plain: bool,
}

#[derive(Serialize)]
struct SummaryRow {
    config: &'static str,
    concurrency: usize,
    verify: &'static str,
    records: usize,
    completion_tokens: usize,
    /// Concurrency 1: completion tokens per second of decoding (prefill, the same for every
    /// configuration, excluded). Concurrency N: per second of wall time, prefill included.
    tokens_per_second: f64,
    speedup_vs_plain: f64,
    /// Concurrency 1 only: the same on each step's forward priced by the measured cost
    /// curve, free of the machine's run-to-run noise.
    #[serde(skip_serializing_if = "Option::is_none")]
    modeled_speedup_vs_plain: Option<f64>,
    /// Concurrency 1 only: the lowest per-record speedup, and records below 0.95x.
    #[serde(skip_serializing_if = "Option::is_none")]
    min_record_speedup: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    records_below_0_95: Option<usize>,
    mean_accepted_length: f64,
    /// Accepted draft tokens that only the relaxation let through, over all accepted draft
    /// tokens.
    relaxed_accept_rate: f64,
    relaxed_tokens: usize,
    identical_to_plain: usize,
}

fn request(loaded: &Loaded, r: &KnowledgeRecord, args: &Args) -> anyhow::Result<GenerateRequest> {
    let prompt = loaded.prompt_tokens(&r.prompt, true, None)?;
    Ok(GenerateRequest::new(
        prompt,
        r.max_tokens.unwrap_or(args.max_tokens),
    ))
}

/// A configuration's copy of a record's request; `k` makes the no-pool pool unique.
fn configured(
    base: &GenerateRequest,
    c: &Config,
    group: &str,
    k: usize,
    budget: usize,
) -> GenerateRequest {
    let pool = match c.pool {
        PoolKind::None => PoolName::parse(&format!("bench-nopool-{k}")).expect("valid"),
        PoolKind::Global => PoolName::parse(GLOBAL).expect("valid"),
        PoolKind::Group => group_pool(group).expect("checked when the pools were made"),
    };
    GenerateRequest {
        speculation: Speculation {
            method: c.method,
            max_draft: budget,
            pool: Some(pool),
            acceptance: c.acceptance.clone(),
            ..Speculation::default()
        },
        ..base.clone()
    }
}

/// Generates the warm-up members (strict, batched) into `pools`, each feeding its group's.
fn generate_warmup(
    loaded: &Loaded,
    args: &Args,
    members: &[KnowledgeRecord],
    pools: Pools,
) -> anyhow::Result<Pools> {
    let t0 = Instant::now();
    let engine = Engine::new(&loaded.model, &loaded.tokenizer).with_pools(pools);
    let mut sched: Scheduler<'_, Slot> = Scheduler::new(engine, args.concurrency.max(1));
    let c = &Config::strict("warm-up", PoolKind::Group);
    let reqs = members
        .iter()
        .enumerate()
        .map(|(k, r)| {
            Ok(configured(
                &request(loaded, r, args)?,
                c,
                &r.group,
                k,
                args.budget,
            ))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let (outs, _) = run_together(&mut sched, reqs).context("generating the warm-up members")?;
    let tokens: usize = outs.iter().map(|o| o.completion_tokens).sum();
    if !args.json {
        eprintln!(
            "warm-up: {} members, {tokens} tokens in {:.1} s",
            members.len(),
            t0.elapsed().as_secs_f64()
        );
    }
    Ok(std::mem::replace(
        sched.engine_mut().pools_mut(),
        Pools::in_memory(),
    ))
}

fn decode_tps(o: &GenerateOutput) -> f64 {
    let s = o.elapsed.saturating_sub(o.prefill_time).as_secs_f64();
    o.completion_tokens as f64 / s.max(1e-9)
}

/// One phase: every configuration on every target, at `concurrency`; `outputs[config][record]`
/// and each configuration's wall seconds.
fn phase(
    loaded: &Loaded,
    configs: &[Config],
    warm: &[(PoolName, Pool)],
    targets: &[Target],
    concurrency: usize,
    budget: usize,
    quiet: bool,
) -> anyhow::Result<(Vec<Vec<GenerateOutput>>, Vec<f64>)> {
    let mut scheds: Vec<Scheduler<'_, Slot>> = configs
        .iter()
        .map(|_| {
            let engine =
                Engine::new(&loaded.model, &loaded.tokenizer).with_pools(fresh_pools(warm));
            Scheduler::new(engine, concurrency)
        })
        .collect();
    let mut outs: Vec<Vec<GenerateOutput>> = configs.iter().map(|_| Vec::new()).collect();
    let mut wall = vec![0f64; configs.len()];
    // Configurations take turns on chunks of records (one record at concurrency 1), so
    // the machine's drift falls on all of them alike.
    let chunk = if concurrency == 1 { 1 } else { 2 * concurrency };
    let mut start = 0;
    for group in targets.chunks(chunk) {
        for (ci, c) in configs.iter().enumerate() {
            let reqs = group
                .iter()
                .enumerate()
                .map(|(j, t)| configured(&t.request, c, &t.record.group, start + j, budget))
                .collect();
            let (got, secs) = run_together(&mut scheds[ci], reqs)
                .with_context(|| format!("{} from {}", c.name, group[0].record.id))?;
            wall[ci] += secs;
            outs[ci].extend(got);
        }
        start += group.len();
        if !quiet {
            let last = outs[0].len() - 1;
            let line: Vec<String> = configs
                .iter()
                .zip(&outs)
                .map(|(c, o)| format!("{} {:.0}", c.name, decode_tps(&o[last])))
                .collect();
            eprintln!(
                "[c={concurrency} {}/{}] {}: tok/s {}",
                start,
                targets.len(),
                targets[last].record.id,
                line.join(", ")
            );
        }
    }
    Ok((outs, wall))
}

#[allow(clippy::too_many_arguments)]
fn summarize(
    configs: &[Config],
    targets: &[Target],
    outs: &[Vec<GenerateOutput>],
    wall: &[f64],
    concurrency: usize,
    curve: &CostCurve,
    rows: &mut Vec<RecordRow>,
) -> Vec<SummaryRow> {
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
        let mut speedups = Vec::new();
        for (k, (o, p)) in mine.iter().zip(plain).enumerate() {
            let speedup = decode_tps(o) / decode_tps(p).max(1e-9);
            speedups.push(speedup);
            rows.push(RecordRow {
                id: targets[k].record.id.clone(),
                group: targets[k].record.group.clone(),
                config: c.name,
                concurrency,
                completion_tokens: o.completion_tokens,
                decode_ms: o.elapsed.saturating_sub(o.prefill_time).as_secs_f64() * 1e3,
                tokens_per_second: decode_tps(o),
                speedup_vs_plain: speedup,
                modeled_speedup_vs_plain: modeled(p) / modeled(o).max(1e-9),
                mean_accepted_length: o.spec.mean_accepted_length(o.completion_tokens),
                relaxed_tokens: o.spec.relaxed_tokens,
                identical_to_plain: o.token_ids == p.token_ids,
            });
        }
        let tps = if concurrency == 1 {
            let decode: f64 = mine
                .iter()
                .map(|o| o.elapsed.saturating_sub(o.prefill_time).as_secs_f64())
                .sum();
            tokens as f64 / decode.max(1e-9)
        } else {
            tokens as f64 / wall[ci].max(1e-9)
        };
        let single = concurrency == 1;
        let plain_modeled: f64 = plain.iter().map(modeled).sum();
        let my_modeled: f64 = mine.iter().map(modeled).sum();
        out.push(SummaryRow {
            config: c.name,
            concurrency,
            verify: c.acceptance.name(),
            records: mine.len(),
            completion_tokens: tokens,
            tokens_per_second: tps,
            speedup_vs_plain: out
                .first()
                .map_or(1.0, |p: &SummaryRow| tps / p.tokens_per_second),
            modeled_speedup_vs_plain: single.then(|| plain_modeled / my_modeled.max(1e-9)),
            min_record_speedup: single
                .then(|| speedups.iter().copied().fold(f64::INFINITY, f64::min)),
            records_below_0_95: single.then(|| speedups.iter().filter(|&&s| s < 0.95).count()),
            mean_accepted_length: spec.mean_accepted_length(tokens),
            relaxed_accept_rate: spec.relaxed_tokens as f64 / spec.accepted_tokens.max(1) as f64,
            relaxed_tokens: spec.relaxed_tokens,
            identical_to_plain: identical,
        });
    }
    out
}

fn print_table(rows: &[SummaryRow]) {
    println!(
        "{:<14} {:>3} {:>7} {:>7} {:>8} {:>8} {:>7} {:>6} {:>6} {:>7} {:>9}",
        "config",
        "c",
        "records",
        "tokens",
        "tok/s",
        "speedup",
        "modeled",
        "floor",
        "MAL",
        "relaxed",
        "identical"
    );
    for s in rows {
        let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}x"));
        println!(
            "{:<14} {:>3} {:>7} {:>7} {:>8.1} {:>7.2}x {:>7} {:>6} {:>6.2} {:>6.1}% {:>9}",
            s.config,
            s.concurrency,
            s.records,
            s.completion_tokens,
            s.tokens_per_second,
            s.speedup_vs_plain,
            opt(s.modeled_speedup_vs_plain),
            opt(s.min_record_speedup),
            s.mean_accepted_length,
            100.0 * s.relaxed_accept_rate,
            format!("{}/{}", s.identical_to_plain, s.records),
        );
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let relaxed = args.verify.relaxed()?;
    let all = read_records(&args.records)?;
    let (records, groups) = pick(&all, Role::Target, &args.groups, args.targets);
    anyhow::ensure!(
        !records.is_empty(),
        "no target records{} in {:?}",
        if args.groups.is_empty() {
            ""
        } else {
            " of the chosen groups"
        },
        args.records
    );
    let loaded = common::load(&args.model)?;
    let vocab = loaded.model.config().vocab;
    let mut source = Pools::open(None, args.pools.clone(), vocab, Default::default())?;
    if args.pools.is_none() {
        let (members, _) = pick(&all, Role::Warmup, &args.groups, args.warmup);
        source = generate_warmup(&loaded, &args, &members, source)?;
    }
    let warm = warm_pools(&mut source, &groups)?;
    let targets = records
        .into_iter()
        .map(|record| {
            let request = request(&loaded, &record, &args)?;
            Ok(Target { record, request })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let configs = configs(relaxed);
    let curve = cost_curve(&loaded.model, &loaded.tokenizer, 5, 300)?;
    let t0 = Instant::now();
    let mut rows = Vec::new();
    let (outs, wall) = phase(
        &loaded,
        &configs,
        &warm,
        &targets,
        1,
        args.budget,
        args.json,
    )?;
    let mut summary = summarize(&configs, &targets, &outs, &wall, 1, &curve, &mut rows);
    let plain_single = summary[0].tokens_per_second;
    if args.concurrency > 1 {
        let (outs, wall) = phase(
            &loaded,
            &configs,
            &warm,
            &targets,
            args.concurrency,
            args.budget,
            args.json,
        )?;
        summary.extend(summarize(
            &configs,
            &targets,
            &outs,
            &wall,
            args.concurrency,
            &curve,
            &mut rows,
        ));
    }
    let batched_vs_single: Vec<(&str, f64)> = summary
        .iter()
        .filter(|s| s.concurrency > 1)
        .map(|s| (s.config, s.tokens_per_second / plain_single.max(1e-9)))
        .collect();
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "summary": summary,
                "records": rows,
                "groups": groups,
                "concurrency": args.concurrency,
                "relaxed": {"top_k": relaxed.top_k(), "tau": relaxed.tau()},
                "batched_vs_plain_concurrency_1": batched_vs_single
                    .iter().map(|(c, v)| (*c, *v)).collect::<BTreeMap<_, _>>(),
                "seconds": t0.elapsed().as_secs_f64(),
            })
        );
        return Ok(());
    }
    println!(
        "{} target records of {} groups ({}), relaxed top-k {} tau {}",
        targets.len(),
        groups.len(),
        groups.iter().cloned().collect::<Vec<_>>().join(", "),
        relaxed.top_k(),
        relaxed.tau()
    );
    print_table(&summary);
    println!(
        "(speedup: over plain at the same concurrency; at c=1 decode tok/s with prefill \
         excluded, at c>1 completion tokens per second of wall time; modeled: each step's \
         forward priced by the measured cost curve; floor: lowest per-record speedup; \
         relaxed: accepted draft tokens only the relaxation let through)"
    );
    for (c, v) in &batched_vs_single {
        println!(
            "c={} {c}: {v:.2}x plain decoding one record at a time",
            args.concurrency
        );
    }
    Ok(())
}
