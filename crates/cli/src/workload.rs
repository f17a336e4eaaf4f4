//! `specdec bench --workload`: the command line of the workload benchmark. The harness
//! (methods x records x repeats, interleaved) is `specdec_bench::workload`; this builds the
//! requests, the engine and its scheduler, and prints or saves what the harness returns.

use std::path::PathBuf;

use anyhow::Context;
use specdec_bench::workload::{
    self, method_pool, Prepared, Progress, Slot, SummaryRow, SweepRow, WorkloadRun,
};
use specdec_engine::{
    Acceptance, DraftMethod, Engine, Forced, GenerateRequest, SamplingParams, Scheduler,
    Speculation,
};
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
    /// The rule every method's drafts are verified by (`--forced` overrides it, beside the
    /// requests: no request can ask for forced output).
    pub acceptance: Acceptance,
    pub drafting: DraftArgs,
    /// Records generated together through the engine's scheduler: one run per value.
    pub concurrency: Vec<usize>,
    /// Forces every output to this field of its record (LLMA's forced-output benchmark).
    pub forced: Option<ForcedField>,
    /// Timed runs of each record per method, interleaved; the median is reported.
    pub repeats: usize,
    /// A directory to write the report into (`index.md` and SVG plots).
    pub report: Option<PathBuf>,
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
    let mut methods = vec![DraftMethod::None];
    methods.extend(opts.methods.iter().filter(|m| **m != DraftMethod::None));
    for &m in &methods {
        opts.drafting.check(m)?;
    }
    anyhow::ensure!(
        !opts.concurrency.is_empty(),
        "give at least one --concurrency"
    );
    let loaded = common::load(&opts.model)?;
    let warm = match &opts.warm {
        Some(path) => {
            let recs = read_jsonl(path)?;
            eprintln!("warming the trie with {} records ...", recs.len());
            recs.iter()
                .map(|r| Ok(request(&loaded, r, opts, DraftMethod::Trie, None)?.0))
                .collect::<anyhow::Result<Vec<_>>>()?
        }
        None => Vec::new(),
    };
    // Each record is tokenized once; every method runs a copy of its request.
    let work = records
        .into_iter()
        .map(|r| {
            let (request, forced) = request(&loaded, &r, opts, DraftMethod::None, opts.forced)?;
            Ok(Prepared {
                record: r,
                request,
                forced,
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let model_name = loaded
        .path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned());
    let sweep = opts.concurrency.len() > 1;
    let mut runs = Vec::new();
    // The last run's scheduler, whose pool `--trie` saves: saved after each run, the file
    // would be loaded by the next run's engine, which is to start fresh.
    let mut last = None;
    for &concurrency in &opts.concurrency {
        // A fresh engine per concurrency: no run sizes its drafts on what an earlier one
        // learned, and each measures its own cost curve.
        let mut sched = scheduler(&loaded, opts, concurrency)?;
        if sweep && !opts.json {
            eprintln!("concurrency {concurrency} ...");
        }
        let run = workload::run(
            &mut sched,
            &loaded.model,
            &loaded.tokenizer,
            &work,
            warm.clone(),
            &workload::Options {
                methods: methods.clone(),
                repeats: opts.repeats,
                max_draft: opts.drafting.budget,
                forced: opts.forced.map(ForcedField::name),
                verify: opts.acceptance.name(),
                model: model_name.clone(),
            },
            &mut |p| match p {
                Progress::Record(line) if !opts.json => eprintln!("{line}"),
                Progress::Record(_) => {}
                Progress::Warning(w) => eprintln!("warning: {w}"),
            },
        )?;
        if !opts.json {
            if sweep {
                println!("\n== concurrency {concurrency} ==");
            }
            print_run(&run, opts);
        }
        runs.push(run);
        last = Some(sched);
    }
    if let (Some(path), Some(sched)) = (&opts.drafting.trie, last.as_mut()) {
        let pool = method_pool(*methods.last().expect("one method"));
        let pool = sched.engine_mut().pools_mut().pool(Some(&pool))?;
        pool.save(path)
            .with_context(|| format!("saving trie {} and its history", path.display()))?;
    }
    let throughput = sweep.then(|| workload::sweep_rows(&runs));
    if opts.json {
        match &throughput {
            Some(rows) => println!(
                "{}",
                serde_json::json!({ "runs": runs, "throughput": rows })
            ),
            None => println!("{}", serde_json::to_string(&runs[0])?),
        }
    } else if let Some(rows) = &throughput {
        print_sweep(rows);
    }
    if let Some(dir) = &opts.report {
        let exec = loaded.model.executor();
        let view = |run| crate::workload_report::RunView {
            model: model_name.as_deref().unwrap_or(""),
            isa: exec.isa().name(),
            threads: exec.threads(),
            workload: &opts.path,
            run,
        };
        let index = match &throughput {
            None => crate::workload_report::write(dir, &view(&runs[0]))?,
            Some(rows) => {
                let views: Vec<_> = runs.iter().map(view).collect();
                crate::workload_report::write_sweep(dir, &views, rows)?
            }
        };
        eprintln!("report: {}", index.display());
    }
    Ok(())
}

/// A scheduler of `concurrency` over a fresh engine with the methods' pools and draft
/// model. One engine serves every method: it keeps acceptance statistics per drafter, so
/// no method's statistics size another's drafts.
fn scheduler<'m>(
    loaded: &'m Loaded,
    opts: &Options,
    concurrency: usize,
) -> anyhow::Result<Scheduler<'m, Slot>> {
    let vocab = loaded.model.config().vocab;
    let mut engine =
        Engine::new(&loaded.model, &loaded.tokenizer).with_pools(opts.drafting.pools(vocab)?);
    if let Some(d) = opts.drafting.draft_model(loaded, opts.model.threads)? {
        engine = engine.with_draft_model(d);
    }
    Ok(Scheduler::new(engine, concurrency.max(1)))
}

/// Throughput against concurrency, as a person reads it.
fn print_sweep(rows: &[SweepRow]) {
    println!("\nthroughput against concurrency (completion tokens per second of wall time, prefill included):");
    println!(
        "{:>11} {:<10} {:>10} {:>14} {:>9} {:>14} {:>9} {:>8}",
        "concurrency",
        "method",
        "aggr tok/s",
        "x lowest conc.",
        "x none",
        "modeled x low.",
        "x none",
        "prefill"
    );
    for r in rows {
        println!(
            "{:>11} {:<10} {:>10.1} {:>13.2}x {:>8.2}x {:>13.2}x {:>8.2}x {:>7.0}%",
            r.concurrency,
            r.method,
            r.aggregate_tokens_per_second,
            r.vs_lowest_concurrency,
            r.vs_none,
            r.modeled_vs_lowest_concurrency,
            r.modeled_vs_none,
            100.0 * r.prefill_share
        );
    }
    println!(
        "(modeled: the same ratios with batched forwards priced by their rows, every \
         concurrency's on the lowest one's cost curve, free of the drift between runs; \
         prefill: the share of wall time in steps that carried a prompt's rows; batching \
         does not shrink it)"
    );
}

/// The run's tables, as a person reads them.
fn print_run(run: &WorkloadRun, opts: &Options) {
    if let Some(field) = opts.forced {
        println!(
            "forced: every output is its record's `{}`; drafts are accepted against it, \
             not the model's choice (this measures drafting, not the model)",
            field.name()
        );
    }
    if !run.classes.is_empty() {
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
    print_table(&run.summary, relaxed);
    for (class, s) in &run.classes {
        println!("\nclass {class}:");
        print_table(s, relaxed);
    }
    println!(
        "(speedup: decode tok/s over none's; floor: the lowest per-record speedup, \
         <0.95x: records below 0.95x; aggr tok/s: completion tokens per second of wall \
         time, prefill included, {} record(s) in flight; aggr model: none's batches' time \
         over the method's with each forward priced by its rows on the cost curve{})",
        run.concurrency,
        if run.repeats > 1 {
            format!("; per record the median of {} repetitions", run.repeats)
        } else {
            String::new()
        }
    );
    print_positions(&run.summary);
    println!(
        "\ncopy oracle: always copying the longest true continuation found in the prompt, \
         references or output so far (at most {} tokens) gives MAL {:.2}; copying only as \
         deep as pays on this machine's cost curve, it would run at {:.2}x plain (the \
         ceiling of any copying drafter)",
        opts.drafting.budget, run.copy_oracle_mean_accepted_length, run.copy_oracle_ceiling
    );
    println!(
        "perfect drafter: always drafting the true continuation (at most {} tokens) would \
         run at {:.2}x plain on this machine's cost curve, verifying {} nodes a step",
        opts.drafting.budget, run.perfect_drafter_ceiling, run.perfect_drafter_nodes
    );
    for h in &run.history_index {
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

/// The summary table; with `relaxed`, a column of relaxed tokens.
fn print_table(summary: &[SummaryRow], relaxed: bool) {
    let forced = summary.iter().any(|s| s.forced);
    println!(
        "{:<10} {:>7} {:>8} {:>10} {:>8} {:>8} {:>6} {:>10} {:>6} {:>6} {:>7} {:>7} {:>7} {:>10} {:>10}{}{}",
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
        "aggr model",
        if relaxed { "  relaxed" } else { "" },
        if forced { "  output" } else { "" }
    );
    for s in summary {
        let aggr = s
            .aggregate_tokens_per_second
            .map_or("-".to_string(), |a| format!("{a:.1}"));
        println!(
            "{:<10} {:>7} {:>8} {:>10.0} {:>8.1} {:>7.2}x {:>6.2} {:>10} {:>5.2}x {:>6} {:>6.2}x {:>6.2}x {:>7} {:>10} {:>10}{}{}",
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
            s.modeled_aggregate_speedup_vs_none
                .map_or("-".to_string(), |m| format!("{m:.2}x")),
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
