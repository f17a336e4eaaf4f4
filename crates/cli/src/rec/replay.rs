//! `specdec rec replay`: the knowledge job's drafting replayed over a strict job's outputs,
//! without the target's forwards (see `specdec_bench::replay`): every record in the job's
//! order drafts from its group's pool, which learns each record as the job's pools did, so
//! pool and drafter changes for LASER are tuned in seconds, not a model run's minutes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use clap::Args as ClapArgs;
use serde::Deserialize;
use specdec_bench::cost::CostCurve;
use specdec_bench::replay::{replay, summarize, Recorded, ReplayRow, COPY_ORACLE};
use specdec_engine::budget::CostModel;
use specdec_engine::{
    DraftMethod, DraftModel, Engine, GenerateRequest, HistoryConfig, ModelMeta, PoolName,
    Speculation,
};
use specdec_rec::job::read_input;
use specdec_rec::quality::read_knowledge;
use specdec_rec::{KnowledgeOutput, KnowledgeRecord, Role, VerifyMode};
use specdec_runtime::ReplayTarget;

use crate::common::{self, ModelArgs};

#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The knowledge records the job read (`rec prepare`'s users.jsonl and/or items.jsonl).
    #[arg(long, required = true)]
    records: Vec<PathBuf>,
    /// The strict job's output (`rec knowledge --output`), replayed in its order, which is
    /// the order its pools learned in.
    #[arg(long)]
    knowledge: PathBuf,
    /// A report with the measured cost curve to price steps on: `rec bench --json` or
    /// `bench --json` on the same model and machine.
    #[arg(long)]
    run: PathBuf,
    /// Methods to replay (`none` always runs first).
    #[arg(long, value_delimiter = ',', default_value = "none,auto", value_parser = DraftMethod::parse)]
    draft: Vec<DraftMethod>,
    /// Each group's first N records only feed its pool: the summary counts the rest, which
    /// draft from at least N texts of their group (a job's targets after its warm-up).
    #[arg(long, default_value_t = 0)]
    warm: usize,
    /// Most draft nodes per step.
    #[arg(long, default_value_t = 32)]
    budget: usize,
    /// The job's `--max-tokens`, for records without their own (drafts near a record's end
    /// are capped by what is left of it, as the job's were).
    #[arg(long, default_value_t = 256)]
    max_tokens: usize,
    /// The draft model of `--draft model` (and one more part of `auto`): a GGUF file or a
    /// known model's short name with the target's vocabulary. Its forwards are real: the
    /// JSON's `draft_ms` holds their time, which the modeled speedup leaves out.
    #[arg(long)]
    draft_model: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    model: ModelArgs,
}

/// The part of a benchmark report the replay reads.
#[derive(Deserialize)]
struct Run {
    cost_curve: Option<Vec<(usize, f64)>>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.run)
        .with_context(|| format!("reading {}", args.run.display()))?;
    let run: Run = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a benchmark's JSON report", args.run.display()))?;
    let curve = run
        .cost_curve
        .and_then(CostCurve::from_points)
        .with_context(|| format!("{} has no usable cost curve", args.run.display()))?;
    let cost = CostModel::measured(curve.points()).context("the run's cost curve is unusable")?;
    let path = common::model_path(args.model.model.as_deref())?;
    // The model's metadata only: its weights are never read.
    let meta = ModelMeta::open(&path)?;
    let target = ReplayTarget::new(&meta.config);
    let mut engine = Engine::new(&target, &meta.tokenizer).with_cost_model(cost);
    if let Some(p) = &args.draft_model {
        let draft_path = common::model_path(Some(p))?;
        engine = engine.with_draft_model(
            DraftModel::load(&draft_path, &meta, &path, args.model.threads)
                .with_context(|| format!("loading the draft model {}", draft_path.display()))?,
        );
    } else if args.draft.contains(&DraftMethod::Model) {
        anyhow::bail!("--draft model needs --draft-model");
    }

    let mut by_id: BTreeMap<String, KnowledgeRecord> = BTreeMap::new();
    for p in &args.records {
        let input = read_input(p, &Default::default())?;
        if let Some(m) = input.malformed.first() {
            anyhow::bail!("{}: {m}", p.display());
        }
        by_id.extend(
            input
                .tasks
                .into_iter()
                .map(|t| (t.record.id.clone(), t.record)),
        );
    }
    let outputs = read_outputs(&args.knowledge)?;
    let (records, counted) = recorded(&meta, &by_id, &outputs, &args)?;
    let t0 = std::time::Instant::now();
    let rows = replay(&mut engine, &curve, &records, &args.draft, args.budget)?;
    let secs = t0.elapsed().as_secs_f64();
    let rows: Vec<ReplayRow> = rows
        .into_iter()
        .filter(|r| counted.contains_key(&r.id))
        .collect();
    let summary = summarize(&rows);
    if args.json {
        println!(
            "{}",
            serde_json::json!({ "records": rows, "summary": summary, "seconds": secs })
        );
        return Ok(());
    }
    let roles = counted.values().fold([0, 0], |mut n, r| {
        n[usize::from(*r == Role::Target)] += 1;
        n
    });
    println!(
        "replay of {} records of {} in the job's order ({secs:.1} s, no target forward); \
         counted: {} warm-up and {} target records past each group's first {}",
        records.len(),
        args.knowledge.display(),
        roles[0],
        roles[1],
        args.warm
    );
    println!(
        "{:<11} {:>7} {:>7} {:>8} {:>7} {:>7}",
        "method", "records", "MAL", "modeled", "floor", "<0.95x"
    );
    for s in &summary {
        println!(
            "{:<11} {:>7} {:>7.2} {:>7.2}x {:>6.2}x {:>7}",
            s.method,
            s.records,
            s.mean_accepted_length,
            s.modeled_speedup_vs_none,
            s.min_record_modeled_speedup,
            s.records_below_0_95_modeled
        );
    }
    println!(
        "(each record drafts from its group's pool holding the group's earlier records, one \
         pool per method; MAL: tokens per decode step; modeled: none's modeled decode time \
         over the method's on the run's cost curve; floor: the lowest per-record modeled \
         speedup; {COPY_ORACLE}: the cheapest plan drafting only stretches of the true output \
         found in the prompt or the group's earlier texts)"
    );
    Ok(())
}

/// A strict job's output lines, in file order (read as `rec quality` reads them).
fn read_outputs(path: &Path) -> anyhow::Result<Vec<KnowledgeOutput>> {
    let out = read_knowledge(path)?;
    if let Some(o) = out.iter().find(|o| o.verify != VerifyMode::Strict) {
        anyhow::bail!(
            "{}: {} was verified relaxed; a replay needs the target's own output",
            path.display(),
            o.id
        );
    }
    Ok(out)
}

/// The outputs as replayable records, each naming its group's pool and giving the copy
/// oracle the group's earlier texts (as its pool's history holds them: prompt tail and
/// output); and the records the summary counts, with their roles.
fn recorded(
    meta: &ModelMeta,
    by_id: &BTreeMap<String, KnowledgeRecord>,
    outputs: &[KnowledgeOutput],
    args: &Args,
) -> anyhow::Result<(Vec<Recorded>, BTreeMap<String, Role>)> {
    // What a pool's history keeps of each request: its prompt's tail, then its output.
    let history = HistoryConfig::default();
    let mut seen: BTreeMap<&str, Vec<Arc<[u32]>>> = BTreeMap::new();
    let mut records = Vec::new();
    let mut counted = BTreeMap::new();
    for o in outputs {
        let r = by_id
            .get(&o.id)
            .with_context(|| format!("{} is in the job's output but not in the records", o.id))?;
        let prompt = common::prompt_tokens(meta, &r.prompt, true, None)?;
        let earlier = seen.entry(r.group.as_str()).or_default();
        if earlier.len() >= args.warm {
            counted.insert(o.id.clone(), r.role);
        }
        let written: Vec<u32> = o.token_ids.iter().chain(&o.stop_token).copied().collect();
        let doc = history.document(&prompt, &written).into();
        let request = GenerateRequest {
            speculation: Speculation {
                max_draft: args.budget,
                pool: Some(PoolName::parse(&r.group)?),
                ..Speculation::default()
            },
            ..GenerateRequest::new(prompt, r.max_tokens.unwrap_or(args.max_tokens))
        };
        records.push(Recorded {
            id: o.id.clone(),
            request,
            output: o.token_ids.clone(),
            stop_token: o.stop_token,
            oracle_sources: earlier.clone(),
        });
        earlier.push(doc);
    }
    Ok((records, counted))
}
