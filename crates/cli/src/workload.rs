//! `specdec bench --workload`: every method on every record, interleaved, in one process.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use serde::Serialize;
use specdec_engine::{
    DraftMethod, Engine, GenerateOutput, GenerateRequest, Outcome, PoolName, SamplingParams,
    Scheduler, SpecStats, Speculation,
};
use specdec_runtime::{Node, SeqInput, Want};
use specdec_workloads::{read_jsonl, Record};

use crate::common::{self, Loaded, ModelArgs};
use crate::draft_args::DraftArgs;

pub struct Options {
    pub model: ModelArgs,
    pub path: PathBuf,
    pub methods: Vec<DraftMethod>,
    pub warm: Option<PathBuf>,
    pub json: bool,
    pub sampling: SamplingParams,
    pub drafting: DraftArgs,
    /// Records generated together through the engine's scheduler.
    pub concurrency: usize,
}

#[derive(Serialize)]
struct Divergence {
    position: usize,
    top2_gap: f32,
}

#[derive(Serialize)]
struct RecordRow {
    id: String,
    method: &'static str,
    prompt_tokens: usize,
    completion_tokens: usize,
    elapsed_ms: f64,
    prefill_ms: f64,
    /// Completion tokens per second of decoding (prefill, identical for all methods,
    /// excluded).
    tokens_per_second: f64,
    forward_passes: usize,
    mean_accepted_length: f64,
    drafted_tokens: usize,
    accepted_tokens: usize,
    /// Time spent drafting (included in the decode time).
    draft_ms: f64,
    identical_to_plain: bool,
    first_divergence: Option<Divergence>,
    token_ids: Vec<u32>,
}

#[derive(Serialize)]
struct SummaryRow {
    method: &'static str,
    records: usize,
    completion_tokens: usize,
    elapsed_ms: f64,
    decode_ms: f64,
    tokens_per_second: f64,
    speedup_vs_none: f64,
    mean_accepted_length: f64,
    identical_records: usize,
    /// Completion tokens per second of wall time with `concurrency` records in flight
    /// (prefill included): the throughput a batch of clients sees.
    aggregate_tokens_per_second: f64,
    accepted_by_position: Vec<usize>,
    accepted_by_source: BTreeMap<&'static str, usize>,
}

fn request(
    loaded: &Loaded,
    r: &Record,
    opts: &Options,
    method: DraftMethod,
    pool: Option<PoolName>,
) -> anyhow::Result<GenerateRequest> {
    let prompt = loaded.prompt_tokens(&r.prompt, r.chat, None)?;
    let references = r
        .references
        .iter()
        .map(|t| loaded.tokenizer.encode(t, false))
        .collect::<Result<_, _>>()?;
    Ok(GenerateRequest {
        sampling: opts.sampling.clone(),
        speculation: Speculation {
            method,
            max_draft: opts.drafting.budget,
            references,
            pool,
            ..Speculation::default()
        },
        ..GenerateRequest::new(prompt, r.max_tokens)
    })
}

/// Each method drafts from a pool of its own, so no method sees an answer another method
/// produced for the same record.
fn method_pool(m: DraftMethod) -> PoolName {
    PoolName::parse(&format!("bench-{}", m.name())).expect("a valid pool name")
}

/// A record's place in the group being run; benchmark records are never cancelled.
struct Slot(usize);

impl specdec_engine::Job for Slot {}

/// Runs `reqs` through the scheduler, as many at a time as it has room for, admitting the
/// next as soon as one finishes (continuous batching); their outputs in order and the
/// wall time.
fn run_together(
    sched: &mut Scheduler<'_, Slot>,
    reqs: Vec<GenerateRequest>,
) -> anyhow::Result<(Vec<GenerateOutput>, f64)> {
    let t0 = Instant::now();
    let n = reqs.len();
    let mut outs: Vec<Option<GenerateOutput>> = (0..n).map(|_| None).collect();
    let mut queue = reqs.into_iter().enumerate();
    loop {
        while sched.has_room() {
            let Some((i, req)) = queue.next() else { break };
            sched
                .admit(req, Box::new(|_: &str| true), Slot(i), None)
                .map_err(|(_, e)| e)?;
        }
        if sched.is_idle() {
            break;
        }
        for f in sched.step(&mut |_, _| {}) {
            match f.outcome {
                Outcome::Done(out) => outs[f.job.0] = Some(*out),
                Outcome::Expired(_) => {
                    anyhow::bail!("a record ran past a deadline it did not have")
                }
                Outcome::Failed(e) => return Err(e.into()),
            }
        }
    }
    let outs = outs
        .into_iter()
        .map(|o| o.expect("every record finished"))
        .collect();
    Ok((outs, t0.elapsed().as_secs_f64()))
}

/// Where `got` first differs from `plain`, with the target's top-2 logit gap there.
fn divergence(
    loaded: &Loaded,
    prompt: &[u32],
    plain: &[u32],
    got: &[u32],
) -> anyhow::Result<Option<Divergence>> {
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
    let mut seq = loaded.model.new_sequence();
    let nodes = Node::chain(&tokens);
    let logits = loaded.model.forward(&mut [SeqInput {
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

pub fn run(opts: &Options) -> anyhow::Result<()> {
    let records = read_jsonl(&opts.path)?;
    let mut methods = vec![DraftMethod::None];
    methods.extend(opts.methods.iter().filter(|m| **m != DraftMethod::None));
    let loaded = common::load(&opts.model)?;
    // One engine for every method: it keeps acceptance statistics per drafter, so no
    // method's statistics size another's drafts, and one measured cost curve.
    let vocab = loaded.model.config().vocab;
    let engine =
        Engine::new(&loaded.model, &loaded.tokenizer).with_pools(opts.drafting.pools(vocab)?);
    let concurrency = opts.concurrency.max(1);
    let mut sched: Scheduler<'_, Slot> = Scheduler::new(engine, concurrency);
    if let Some(warm) = &opts.warm {
        let recs = read_jsonl(warm)?;
        eprintln!("warming the trie with {} records ...", recs.len());
        for r in &recs {
            let req = request(&loaded, r, opts, DraftMethod::Trie, None)?;
            run_together(&mut sched, vec![req])?;
        }
    }
    let pools = sched.engine_mut().pools_mut();
    let snapshot = pools.global().deep_clone();
    for m in &methods {
        pools.insert(method_pool(*m), snapshot.deep_clone());
    }
    let mut rows: Vec<(usize, RecordRow, SpecStats)> = Vec::new();
    let mut wall = vec![0f64; methods.len()];
    let (mut oracle_tokens, mut oracle_steps) = (0, 0);
    let mut done = 0;
    // Methods take turns on groups of records (one record at a time without concurrency,
    // as before); within a group up to `concurrency` records are in flight, refilled as
    // they finish, so the group's tail is the only time the batch runs short.
    let group_size = if concurrency == 1 { 1 } else { 4 * concurrency };
    for group in records.chunks(group_size) {
        let mut plain: Vec<Vec<u32>> = Vec::new();
        // Each record is tokenized once; every method runs a copy of it.
        let base = group
            .iter()
            .map(|r| request(&loaded, r, opts, DraftMethod::None, None))
            .collect::<anyhow::Result<Vec<_>>>()?;
        for (mi, m) in methods.iter().enumerate() {
            let reqs = base
                .iter()
                .map(|q| {
                    let mut q = q.clone();
                    q.speculation.method = *m;
                    q.speculation.pool = Some(method_pool(*m));
                    q
                })
                .collect();
            let (outs, secs) = run_together(&mut sched, reqs)
                .with_context(|| format!("records from {} with {}", group[0].id, m.name()))?;
            wall[mi] += secs;
            for (k, (r, out)) in group.iter().zip(outs).enumerate() {
                if mi == 0 {
                    oracle_tokens += out.token_ids.len();
                    oracle_steps += crate::oracle::copy_steps(
                        &base[k].prompt,
                        &base[k].speculation.references,
                        &out.token_ids,
                        opts.drafting.budget,
                    );
                    plain.push(out.token_ids.clone());
                }
                let first_divergence =
                    divergence(&loaded, &base[k].prompt, &plain[k], &out.token_ids)?;
                let row = record_row(r, m.name(), &out, first_divergence);
                if !opts.json {
                    eprintln!(
                        "[{}/{}] {:<24} {:<10} {:>4} tok {:>7.1} tok/s  MAL {:.2}{}",
                        done + k + 1,
                        records.len(),
                        r.id,
                        m.name(),
                        row.completion_tokens,
                        row.tokens_per_second,
                        row.mean_accepted_length,
                        if row.identical_to_plain {
                            ""
                        } else {
                            "  DIFFERS"
                        }
                    );
                }
                rows.push((mi, row, out.spec));
            }
        }
        done += group.len();
    }
    let summary = summarize(&methods, &rows, &wall);
    let oracle_mal = oracle_tokens as f64 / oracle_steps.max(1) as f64;
    if opts.json {
        let records: Vec<&RecordRow> = rows.iter().map(|(_, r, _)| r).collect();
        println!(
            "{}",
            serde_json::json!({ "records": records, "summary": summary,
                "concurrency": concurrency,
                "copy_oracle_mean_accepted_length": oracle_mal })
        );
    } else {
        print_table(&summary, concurrency);
        println!(
            "\ncopy oracle: always copying the longest true continuation found in the prompt, \
             references or output so far (at most {} tokens) gives MAL {oracle_mal:.2}",
            opts.drafting.budget
        );
    }
    if let Some(path) = &opts.drafting.trie {
        let last = method_pool(*methods.last().expect("one method"));
        let pool = sched.engine_mut().pools_mut().pool(Some(&last))?;
        pool.save(path)
            .with_context(|| format!("saving trie {} and its history", path.display()))?;
    }
    Ok(())
}

fn record_row(
    r: &Record,
    method: &'static str,
    out: &GenerateOutput,
    first_divergence: Option<Divergence>,
) -> RecordRow {
    let decode_s = (out.elapsed - out.prefill_time).as_secs_f64();
    RecordRow {
        id: r.id.clone(),
        method,
        prompt_tokens: out.prompt_tokens,
        completion_tokens: out.completion_tokens,
        elapsed_ms: out.elapsed.as_secs_f64() * 1e3,
        prefill_ms: out.prefill_time.as_secs_f64() * 1e3,
        tokens_per_second: out.completion_tokens as f64 / decode_s.max(1e-9),
        forward_passes: out.forward_passes,
        mean_accepted_length: out.spec.mean_accepted_length(out.completion_tokens),
        drafted_tokens: out.spec.drafted_tokens,
        accepted_tokens: out.spec.accepted_tokens,
        draft_ms: out.spec.draft_time.as_secs_f64() * 1e3,
        identical_to_plain: first_divergence.is_none(),
        first_divergence,
        token_ids: out.token_ids.clone(),
    }
}

fn summarize(
    methods: &[DraftMethod],
    rows: &[(usize, RecordRow, SpecStats)],
    wall: &[f64],
) -> Vec<SummaryRow> {
    let mut out: Vec<SummaryRow> = Vec::new();
    for (mi, m) in methods.iter().enumerate() {
        let mine: Vec<_> = rows.iter().filter(|(i, _, _)| *i == mi).collect();
        let tokens: usize = mine.iter().map(|(_, r, _)| r.completion_tokens).sum();
        let elapsed: f64 = mine.iter().map(|(_, r, _)| r.elapsed_ms).sum();
        let decode: f64 = mine
            .iter()
            .map(|(_, r, _)| r.elapsed_ms - r.prefill_ms)
            .sum();
        let mut spec = SpecStats::default();
        for (_, _, o) in &mine {
            spec.merge(o);
        }
        let tps = tokens as f64 / (decode / 1e3).max(1e-9);
        out.push(SummaryRow {
            method: m.name(),
            records: mine.len(),
            completion_tokens: tokens,
            elapsed_ms: elapsed,
            decode_ms: decode,
            tokens_per_second: tps,
            speedup_vs_none: out.first().map_or(1.0, |none| tps / none.tokens_per_second),
            mean_accepted_length: spec.mean_accepted_length(tokens),
            identical_records: mine.iter().filter(|(_, r, _)| r.identical_to_plain).count(),
            aggregate_tokens_per_second: tokens as f64 / wall[mi].max(1e-9),
            accepted_by_position: spec.accepted_by_position,
            accepted_by_source: spec.accepted_by_source,
        });
    }
    out
}

fn print_table(summary: &[SummaryRow], concurrency: usize) {
    println!(
        "{:<10} {:>7} {:>8} {:>10} {:>8} {:>8} {:>6} {:>10} {:>10}",
        "method",
        "records",
        "tokens",
        "decode_ms",
        "tok/s",
        "speedup",
        "MAL",
        "identical",
        "aggr tok/s"
    );
    for s in summary {
        println!(
            "{:<10} {:>7} {:>8} {:>10.0} {:>8.1} {:>7.2}x {:>6.2} {:>6}/{} {:>10.1}",
            s.method,
            s.records,
            s.completion_tokens,
            s.decode_ms,
            s.tokens_per_second,
            s.speedup_vs_none,
            s.mean_accepted_length,
            s.identical_records,
            s.records,
            s.aggregate_tokens_per_second
        );
    }
    println!("(aggr tok/s: completion tokens per second of wall time, prefill included, {concurrency} record(s) in flight)");
    println!("\naccepted by position (steps whose accepted path reached depth d):");
    for s in summary.iter().skip(1) {
        let cells: Vec<String> = s
            .accepted_by_position
            .iter()
            .take(16)
            .map(|c| c.to_string())
            .collect();
        println!("{:<10} {}", s.method, cells.join(" "));
    }
}
