//! `specdec bench --workload`: every method on every record, interleaved, in one process.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use serde::Serialize;
use specdec_engine::{
    Acceptance, DraftMethod, Engine, Forced, GenerateOutput, GenerateRequest, Outcome, Pool,
    PoolName, Pools, SamplingParams, Scheduler, SpecStats, Speculation,
};
use specdec_runtime::{Node, SeqInput, Want};
use specdec_workloads::{read_jsonl, Record, RecordClass};

use crate::common::{self, Loaded, ModelArgs};
use crate::cost::{cost_curve, CostCurve};
use crate::draft_args::DraftArgs;

pub struct Options {
    pub model: ModelArgs,
    pub path: PathBuf,
    pub methods: Vec<DraftMethod>,
    pub warm: Option<PathBuf>,
    pub json: bool,
    pub sampling: SamplingParams,
    /// The rule every method's drafts are verified by (`--forced` overrides it, beside the
    /// requests: no request can ask for forced output).
    pub acceptance: Acceptance,
    pub drafting: DraftArgs,
    /// Records generated together through the engine's scheduler.
    pub concurrency: usize,
    /// Forces every output to this field of its record (LLMA's forced-output benchmark).
    pub forced: Option<ForcedField>,
    /// Timed runs of each record per method, interleaved; the median is reported.
    pub repeats: usize,
}

/// A record field `--forced` can make the output: the text a capable model would write,
/// so drafting is measured on realistic answers even when the model is too small to write
/// them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ForcedField {
    Answer,
}

impl ForcedField {
    fn name(self) -> &'static str {
        match self {
            ForcedField::Answer => "answer",
        }
    }

    fn text(self, r: &Record) -> Option<&str> {
        match self {
            ForcedField::Answer => r.answer.as_deref(),
        }
    }
}

#[derive(Serialize)]
struct Divergence {
    position: usize,
    top2_gap: f32,
}

#[derive(Serialize)]
struct RecordRow {
    id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    class: Option<RecordClass>,
    method: &'static str,
    /// The output was the record's forced text, not the model's (see `--forced`).
    forced: bool,
    prompt_tokens: usize,
    completion_tokens: usize,
    elapsed_ms: f64,
    prefill_ms: f64,
    decode_ms: f64,
    /// Completion tokens per second of decoding (prefill, identical for all methods,
    /// excluded); with repeats, the median repetition's (the other fields are its too).
    tokens_per_second: f64,
    /// The lowest and highest tokens per second over the repetitions.
    tokens_per_second_range: [f64; 2],
    repeats: usize,
    /// tokens_per_second over `none`'s on the same record.
    speedup_vs_none: f64,
    /// What this record's decode forwards cost on the run's measured cost curve (each
    /// step's forward over its node count), free of the machine's run-to-run noise.
    modeled_decode_ms: f64,
    /// `none`'s modeled_decode_ms over this one's (the same tokens).
    modeled_speedup_vs_none: f64,
    forward_passes: usize,
    mean_accepted_length: f64,
    drafted_tokens: usize,
    accepted_tokens: usize,
    /// Accepted tokens that were not the target's own choice (0 under strict).
    relaxed_tokens: usize,
    /// Time spent drafting (included in the decode time).
    draft_ms: f64,
    identical_to_plain: bool,
    first_divergence: Option<Divergence>,
    token_ids: Vec<u32>,
}

#[derive(Serialize)]
struct SummaryRow {
    method: &'static str,
    forced: bool,
    records: usize,
    completion_tokens: usize,
    elapsed_ms: f64,
    decode_ms: f64,
    tokens_per_second: f64,
    speedup_vs_none: f64,
    mean_accepted_length: f64,
    /// Accepted tokens that were not the target's own choice (0 under strict).
    relaxed_tokens: usize,
    identical_records: usize,
    /// The per-record floor: the lowest per-record speedup vs `none`, and how many records
    /// fall below 0.95x (a method may win on average and still lose on some records).
    min_record_speedup: f64,
    records_below_0_95: usize,
    /// The same three figures on modeled decode time (see `RecordRow::modeled_decode_ms`).
    modeled_speedup_vs_none: f64,
    min_record_modeled_speedup: f64,
    records_below_0_95_modeled: usize,
    /// Completion tokens per second of wall time with `concurrency` records in flight
    /// (prefill included): the throughput a batch of clients sees. Whole runs only (a
    /// class's records share their batches' wall time with others).
    #[serde(skip_serializing_if = "Option::is_none")]
    aggregate_tokens_per_second: Option<f64>,
    accepted_by_position: Vec<usize>,
    accepted_by_source: BTreeMap<&'static str, usize>,
}

/// A record's request, with the rule that forces its output when `forced` names a field.
fn request(
    loaded: &Loaded,
    r: &Record,
    opts: &Options,
    method: DraftMethod,
    forced: Option<ForcedField>,
) -> anyhow::Result<(GenerateRequest, Option<Forced>)> {
    let prompt = loaded.prompt_tokens(&r.prompt, r.chat, None)?;
    let references = r
        .references
        .iter()
        .map(|t| loaded.tokenizer.encode(t, false))
        .collect::<Result<_, _>>()?;
    let mut max_tokens = r.max_tokens;
    let mut forcing = None;
    if let Some(field) = forced {
        let text = field.text(r).with_context(|| {
            format!(
                "record {} has no `{}` field, which --forced {} needs",
                r.id,
                field.name(),
                field.name()
            )
        })?;
        let output = loaded.tokenizer.encode(text, false)?;
        anyhow::ensure!(
            !output.is_empty(),
            "record {}: its `{}` is empty",
            r.id,
            field.name()
        );
        // The generation ends with the forced text.
        max_tokens = max_tokens.min(output.len());
        forcing = Some(Forced::new([prompt.as_slice(), &output].concat()));
    }
    let req = GenerateRequest {
        sampling: opts.sampling.clone(),
        speculation: Speculation {
            method,
            max_draft: opts.drafting.budget,
            references,
            acceptance: opts.acceptance.clone(),
            ..Speculation::default()
        },
        ..GenerateRequest::new(prompt, max_tokens)
    };
    Ok((req, forcing))
}

/// Each method drafts from a pool of its own, so no method sees an answer another method
/// produced for the same record.
fn method_pool(m: DraftMethod) -> PoolName {
    PoolName::parse(&format!("bench-{}", m.name())).expect("a valid pool name")
}

/// Every method's pool, to put back before each repetition of a record: a method must not
/// learn from its own earlier repetition of the same record. Pools hold a trie each today;
/// what else a pool comes to hold must be copied here too.
struct PoolSnapshot(Vec<(PoolName, Pool)>);

impl PoolSnapshot {
    fn take(pools: &mut Pools, methods: &[DraftMethod]) -> anyhow::Result<Self> {
        let mut out = Vec::new();
        for m in methods {
            let name = method_pool(*m);
            let pool = pools.pool(Some(&name))?.deep_clone();
            out.push((name, pool));
        }
        Ok(PoolSnapshot(out))
    }

    fn restore(&self, pools: &mut Pools) {
        for (name, pool) in &self.0 {
            pools.insert(name.clone(), pool.deep_clone());
        }
    }
}

/// A record's place in the group being run; benchmark records are never cancelled.
pub(crate) struct Slot(usize);

impl specdec_engine::Job for Slot {}

/// Runs `reqs` through the scheduler, as many at a time as it has room for, admitting the
/// next as soon as one finishes (continuous batching); their outputs in order and the
/// wall time.
pub(crate) fn run_together(
    sched: &mut Scheduler<'_, Slot>,
    reqs: Vec<GenerateRequest>,
) -> anyhow::Result<(Vec<GenerateOutput>, f64)> {
    run_forced_together(sched, reqs.into_iter().map(|r| (r, None)).collect())
}

/// [`run_together`], each request with its output forced where it has a [`Forced`] rule.
fn run_forced_together(
    sched: &mut Scheduler<'_, Slot>,
    reqs: Vec<(GenerateRequest, Option<Forced>)>,
) -> anyhow::Result<(Vec<GenerateOutput>, f64)> {
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
                    anyhow::bail!("a record ran past a deadline it did not have")
                }
                Outcome::Failed(e) => return Err(e.into()),
                Outcome::Ranked(_) | Outcome::Unranked { .. } => {
                    anyhow::bail!("a beam search's outcome from a scheduler that runs none")
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

/// One record's result under one method.
struct Row {
    method: usize,
    row: RecordRow,
    spec: SpecStats,
}

/// Index of the median of `reps` by decode time; of the two middle ones for an even count,
/// the faster (a shared machine's noise only ever slows a run down).
fn median_rep(reps: &[GenerateOutput]) -> usize {
    let decode = |o: &GenerateOutput| o.elapsed.saturating_sub(o.prefill_time);
    let mut order: Vec<usize> = (0..reps.len()).collect();
    order.sort_by_key(|&i| decode(&reps[i]));
    order[(order.len() - 1) / 2]
}

pub fn run(opts: &Options) -> anyhow::Result<()> {
    let records = read_jsonl(&opts.path)?;
    if let Some(field) = opts.forced {
        // Before the model loads: a missing field is a workload problem.
        if let Some(r) = records.iter().find(|r| field.text(r).is_none()) {
            anyhow::bail!(
                "record {} has no `{}` field, which --forced {} needs (faq-forced workloads have it)",
                r.id,
                field.name(),
                field.name()
            );
        }
    }
    let repeats = opts.repeats.max(1);
    let mut methods = vec![DraftMethod::None];
    methods.extend(opts.methods.iter().filter(|m| **m != DraftMethod::None));
    for &m in &methods {
        opts.drafting.check(m)?;
    }
    let loaded = common::load(&opts.model)?;
    let draft_model = opts.drafting.draft_model(&loaded, opts.model.threads)?;
    // Measured once, before any record: prices every record's decode steps alike (a
    // 300-token prefix, about these workloads' typical context).
    let curve = cost_curve(&loaded, 5, 300)?;
    // One engine for every method: it keeps acceptance statistics per drafter, so no
    // method's statistics size another's drafts, and one measured cost curve.
    let vocab = loaded.model.config().vocab;
    let mut engine =
        Engine::new(&loaded.model, &loaded.tokenizer).with_pools(opts.drafting.pools(vocab)?);
    if let Some(d) = draft_model {
        engine = engine.with_draft_model(d);
    }
    let concurrency = opts.concurrency.max(1);
    let mut sched: Scheduler<'_, Slot> = Scheduler::new(engine, concurrency);
    if let Some(warm) = &opts.warm {
        let recs = read_jsonl(warm)?;
        eprintln!("warming the trie with {} records ...", recs.len());
        for r in &recs {
            let (req, _) = request(&loaded, r, opts, DraftMethod::Trie, None)?;
            run_together(&mut sched, vec![req])?;
        }
    }
    let pools = sched.engine_mut().pools_mut();
    let global = pools.global().deep_clone();
    // Every method starts from the (warmed) global pool.
    PoolSnapshot(
        methods
            .iter()
            .map(|m| (method_pool(*m), global.deep_clone()))
            .collect(),
    )
    .restore(pools);
    let mut rows: Vec<Row> = Vec::new();
    let mut wall = vec![0f64; methods.len()];
    let (mut oracle_tokens, mut oracle_steps) = (0, 0);
    let mut done = 0;
    // Methods take turns on groups of records (one record at a time without concurrency,
    // as before); within a group up to `concurrency` records are in flight, refilled as
    // they finish, so the group's tail is the only time the batch runs short. Repetitions
    // take turns the same way: none, m1, m2, none, m1, m2, ...
    let group_size = if concurrency == 1 { 1 } else { 4 * concurrency };
    for group in records.chunks(group_size) {
        // Each record is tokenized once; every method runs a copy of it.
        let base = group
            .iter()
            .map(|r| request(&loaded, r, opts, DraftMethod::None, opts.forced))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let snapshot = if repeats > 1 {
            Some(PoolSnapshot::take(
                sched.engine_mut().pools_mut(),
                &methods,
            )?)
        } else {
            None
        };
        // outs[method][record][repetition]
        let mut outs: Vec<Vec<Vec<GenerateOutput>>> =
            vec![(0..group.len()).map(|_| Vec::new()).collect(); methods.len()];
        for rep in 0..repeats {
            if let (Some(s), true) = (&snapshot, rep > 0) {
                s.restore(sched.engine_mut().pools_mut());
            }
            for (mi, m) in methods.iter().enumerate() {
                let reqs = base
                    .iter()
                    .map(|(q, forced)| {
                        let mut q = q.clone();
                        q.speculation.method = *m;
                        q.speculation.pool = Some(method_pool(*m));
                        (q, forced.clone())
                    })
                    .collect();
                let (got, secs) = run_forced_together(&mut sched, reqs)
                    .with_context(|| format!("records from {} with {}", group[0].id, m.name()))?;
                wall[mi] += secs / repeats as f64;
                for (k, out) in got.into_iter().enumerate() {
                    outs[mi][k].push(out);
                }
            }
        }
        // Each record's plain output, decode tokens/s and modeled decode time.
        let mut plain: Vec<(Vec<u32>, f64, f64)> = Vec::new();
        for (mi, m) in methods.iter().enumerate() {
            for (k, (r, reps)) in group.iter().zip(&outs[mi]).enumerate() {
                if reps.iter().any(|o| o.token_ids != reps[0].token_ids) {
                    eprintln!("warning: {} with {}: repetitions differ", r.id, m.name());
                }
                let out = &reps[median_rep(reps)];
                if mi == 0 {
                    oracle_tokens += out.token_ids.len();
                    oracle_steps += crate::oracle::copy_steps(
                        &base[k].0.prompt,
                        &base[k].0.speculation.references,
                        &out.token_ids,
                        opts.drafting.budget,
                    );
                }
                let first_divergence = match plain.get(k) {
                    Some((p, _, _)) => divergence(&loaded, &base[k].0.prompt, p, &out.token_ids)?,
                    None => None,
                };
                let mut row = record_row(&curve, r, m.name(), reps, out, first_divergence);
                if mi == 0 {
                    plain.push((
                        out.token_ids.clone(),
                        row.tokens_per_second,
                        row.modeled_decode_ms,
                    ));
                }
                row.speedup_vs_none = row.tokens_per_second / plain[k].1.max(1e-9);
                row.modeled_speedup_vs_none = plain[k].2 / row.modeled_decode_ms.max(1e-9);
                if !opts.json {
                    eprintln!(
                        "[{}/{}] {}",
                        done + k + 1,
                        records.len(),
                        progress(r, m, &row, reps)
                    );
                }
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
    let summary = summarize(&methods, &all, Some(&wall));
    // A table per class, in class order, when the workload has classes.
    let classes: BTreeSet<RecordClass> = records.iter().filter_map(|r| r.class).collect();
    let by_class: Vec<(&'static str, Vec<SummaryRow>)> = classes
        .iter()
        .map(|c| {
            let mine: Vec<&Row> = rows.iter().filter(|r| r.row.class == Some(*c)).collect();
            (c.name(), summarize(&methods, &mine, None))
        })
        .collect();
    let oracle_mal = oracle_tokens as f64 / oracle_steps.max(1) as f64;
    let history = history_sizes(sched.engine_mut().pools_mut(), &methods)?;
    if opts.json {
        let records: Vec<&RecordRow> = rows.iter().map(|r| &r.row).collect();
        println!(
            "{}",
            serde_json::json!({ "records": records, "summary": summary,
                "classes": by_class.iter().map(|(c, s)| (*c, s)).collect::<BTreeMap<_, _>>(),
                "concurrency": concurrency,
                "repeats": repeats,
                "forced": opts.forced.map(ForcedField::name),
                "verify": opts.acceptance.name(),
                "history_index": history,
                "copy_oracle_mean_accepted_length": oracle_mal })
        );
    } else {
        if let Some(field) = opts.forced {
            println!(
                "forced: every output is its record's `{}`; drafts are accepted against it, \
                 not the model's choice (this measures drafting, not the model)",
                field.name()
            );
        }
        if !by_class.is_empty() {
            println!("all records:");
        }
        let relaxed = matches!(opts.acceptance, Acceptance::Relaxed(_));
        if let Acceptance::Relaxed(rule) = &opts.acceptance {
            println!(
                "verify: relaxed (top-{}, tau {}); outputs may differ from plain decoding, \
                 `relaxed` counts tokens accepted only because of the relaxation",
                rule.top_k(),
                rule.tau()
            );
        }
        print_table(&summary, relaxed);
        for (class, s) in &by_class {
            println!("\nclass {class}:");
            print_table(s, relaxed);
        }
        println!(
            "(speedup: decode tok/s over none's; floor: the lowest per-record speedup, \
             <0.95x: records below 0.95x; aggr tok/s: completion tokens per second of wall \
             time, prefill included, {concurrency} record(s) in flight{})",
            if repeats > 1 {
                format!("; per record the median of {repeats} repetitions")
            } else {
                String::new()
            }
        );
        print_positions(&summary);
        println!(
            "\ncopy oracle: always copying the longest true continuation found in the prompt, \
             references or output so far (at most {} tokens) gives MAL {oracle_mal:.2}",
            opts.drafting.budget
        );
        for h in &history {
            println!(
                "history index of {}'s pool: {} requests, {} tokens in {:.1} MiB \
                 ({:.0} MiB per million tokens)",
                h.method,
                h.documents,
                h.tokens,
                h.memory_bytes as f64 / (1 << 20) as f64,
                h.mib_per_million_tokens
            );
        }
    }
    if let Some(path) = &opts.drafting.trie {
        let last = method_pool(*methods.last().expect("one method"));
        let pool = sched.engine_mut().pools_mut().pool(Some(&last))?;
        pool.save(path)
            .with_context(|| format!("saving trie {} and its history", path.display()))?;
    }
    Ok(())
}

/// The lowest and highest of `values`.
fn span(values: impl Iterator<Item = f64>) -> [f64; 2] {
    values.fold([f64::INFINITY, f64::NEG_INFINITY], |[lo, hi], v| {
        [lo.min(v), hi.max(v)]
    })
}

/// A record's progress line: its median repetition and, with repeats, the spread.
fn progress(r: &Record, m: &DraftMethod, row: &RecordRow, reps: &[GenerateOutput]) -> String {
    let mut tps = String::new();
    let mut mal = String::new();
    if reps.len() > 1 {
        let [lo, hi] = row.tokens_per_second_range;
        tps = format!(" ({lo:.1}-{hi:.1})");
        // Repetitions start from the same pools, so their MALs should agree (draft
        // sizing still learns across requests).
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
fn record_row(
    curve: &CostCurve,
    r: &Record,
    method: &'static str,
    reps: &[GenerateOutput],
    out: &GenerateOutput,
    first_divergence: Option<Divergence>,
) -> RecordRow {
    let tps = |o: &GenerateOutput| {
        let decode_s = (o.elapsed.saturating_sub(o.prefill_time)).as_secs_f64();
        o.completion_tokens as f64 / decode_s.max(1e-9)
    };
    RecordRow {
        id: r.id.clone(),
        class: r.class,
        method,
        forced: out.forced,
        prompt_tokens: out.prompt_tokens,
        completion_tokens: out.completion_tokens,
        elapsed_ms: out.elapsed.as_secs_f64() * 1e3,
        prefill_ms: out.prefill_time.as_secs_f64() * 1e3,
        decode_ms: out.elapsed.saturating_sub(out.prefill_time).as_secs_f64() * 1e3,
        tokens_per_second: tps(out),
        tokens_per_second_range: span(reps.iter().map(tps)),
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
    }
}

/// Per-method totals over `rows`; `wall` (per method) gives the aggregate throughput.
fn summarize(methods: &[DraftMethod], rows: &[&Row], wall: Option<&[f64]>) -> Vec<SummaryRow> {
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
            min_record_speedup: mine
                .iter()
                .map(|r| r.speedup_vs_none)
                .fold(f64::INFINITY, f64::min),
            records_below_0_95: mine.iter().filter(|r| r.speedup_vs_none < 0.95).count(),
            modeled_speedup_vs_none: plain_modeled / modeled.max(1e-9),
            min_record_modeled_speedup: mine
                .iter()
                .map(|r| r.modeled_speedup_vs_none)
                .fold(f64::INFINITY, f64::min),
            records_below_0_95_modeled: mine
                .iter()
                .filter(|r| r.modeled_speedup_vs_none < 0.95)
                .count(),
            aggregate_tokens_per_second: wall.map(|w| tokens as f64 / w[mi].max(1e-9)),
            accepted_by_position: spec.accepted_by_position,
            accepted_by_source: spec.accepted_by_source,
        });
    }
    out
}

/// What a method's history index holds at the end of a run.
#[derive(Serialize)]
struct HistorySize {
    method: &'static str,
    documents: usize,
    tokens: usize,
    memory_bytes: usize,
    mib_per_million_tokens: f64,
}

fn history_sizes(pools: &mut Pools, methods: &[DraftMethod]) -> anyhow::Result<Vec<HistorySize>> {
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

/// The summary table; with `relaxed`, a column of relaxed tokens.
fn print_table(summary: &[SummaryRow], relaxed: bool) {
    let forced = summary.iter().any(|s| s.forced);
    println!(
        "{:<10} {:>7} {:>8} {:>10} {:>8} {:>8} {:>6} {:>10} {:>6} {:>6} {:>7} {:>7} {:>7} {:>10}{}{}",
        "method",
        "records",
        "tokens",
        "decode_ms",
        "tok/s",
        "speedup",
        "MAL",
        "identical",
        "floor",
        "<0.95x",
        "modeled",
        "mfloor",
        "m<0.95x",
        "aggr tok/s",
        if relaxed { "  relaxed" } else { "" },
        if forced { "  output" } else { "" }
    );
    for s in summary {
        let aggr = s
            .aggregate_tokens_per_second
            .map_or("-".to_string(), |a| format!("{a:.1}"));
        println!(
            "{:<10} {:>7} {:>8} {:>10.0} {:>8.1} {:>7.2}x {:>6.2} {:>10} {:>5.2}x {:>6} {:>6.2}x {:>6.2}x {:>7} {:>10}{}{}",
            s.method,
            s.records,
            s.completion_tokens,
            s.decode_ms,
            s.tokens_per_second,
            s.speedup_vs_none,
            s.mean_accepted_length,
            format!("{}/{}", s.identical_records, s.records),
            s.min_record_speedup,
            s.records_below_0_95,
            s.modeled_speedup_vs_none,
            s.min_record_modeled_speedup,
            s.records_below_0_95_modeled,
            aggr,
            if relaxed {
                format!(" {:>8}", s.relaxed_tokens)
            } else {
                String::new()
            },
            if s.forced { "  forced" } else { "" }
        );
    }
}

fn print_positions(summary: &[SummaryRow]) {
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
