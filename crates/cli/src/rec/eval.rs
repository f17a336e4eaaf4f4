//! `specdec rec eval`: generative recommendation over the evaluation users, plain
//! constrained beam search against jump-forward and speculative beam search (strict and
//! relaxed), interleaved per user in one process. Prints Recall/NDCG@5/10, target forwards
//! per request, accepted steps per round, tokens/s and wall time, and checks that every
//! exact mode returned plain's list for every user.

use std::time::Instant;

use anyhow::bail;
use clap::{Args as ClapArgs, ValueEnum};
use serde::Serialize;
use specdec_engine::beam::{BeamOptions, BeamOutput, BeamRunner, BeamVerify};
use specdec_engine::budget::CostModel;
use specdec_rec::recommend::{self, RankingMetrics, Target};

use super::beam_args::BeamArgs;
use crate::common::ModelArgs;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    Plain,
    JumpForward,
    Strict,
    Relaxed,
}

impl Mode {
    fn drafts(self) -> bool {
        matches!(self, Mode::Strict | Mode::Relaxed)
    }

    fn name(self) -> &'static str {
        match self {
            Mode::Plain => "plain",
            Mode::JumpForward => "jump-forward",
            Mode::Strict => "strict",
            Mode::Relaxed => "relaxed",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TargetArg {
    Test,
    Valid,
}

#[derive(ClapArgs, Debug)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub beam: BeamArgs,
    /// The modes to compare (plain always runs: it is the reference).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Mode::Plain, Mode::JumpForward, Mode::Strict, Mode::Relaxed])]
    pub modes: Vec<Mode>,
    #[command(flatten)]
    pub users: UserArgs,
}

/// Which users an evaluation covers and how it prints.
#[derive(ClapArgs, Debug, Clone)]
pub struct UserArgs {
    /// Leave out the first N users (for example those a draft was trained on).
    #[arg(long, default_value_t = 0)]
    pub skip: usize,
    /// Evaluate N users only, after the skipped ones (default: all).
    #[arg(long)]
    pub users: Option<usize>,
    /// Which held-out item to find.
    #[arg(long, value_enum, default_value_t = TargetArg::Test)]
    pub target: TargetArg,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// One configuration evaluated: a mode, with one of the drafts when it speculates.
#[derive(Clone, Debug)]
pub struct Arm {
    pub mode: Mode,
    pub draft: Option<usize>,
}

#[derive(Default, Serialize)]
struct Row {
    mode: &'static str,
    /// The draft's name, for a speculative mode.
    draft: Option<String>,
    relaxed: bool,
    users: usize,
    recall_5: f64,
    ndcg_5: f64,
    recall_10: f64,
    ndcg_10: f64,
    /// Target forwards per request after the prompt's prefill.
    forwards_per_request: f64,
    target_rows_per_request: f64,
    draft_forwards_per_request: f64,
    accepted_steps_per_round: f64,
    steps_per_forward: f64,
    /// Tokens of the K returned items per second of the search (after the prefill).
    tokens_per_s: f64,
    decode_ms_per_request: f64,
    total_ms_per_request: f64,
    prefill_ms_per_request: f64,
    /// Plain's decode time over this mode's, from the totals.
    decode_speedup: f64,
    forward_ratio: f64,
    /// The user with the lowest per-user decode speedup, and how many fell below 1/1.03.
    worst_user_speedup: f64,
    users_slower: usize,
    /// Searches that stopped drafting part way (their plan proved too dear).
    drafts_cut: usize,
    /// Searches that dropped a tree before its forward (it could not pay at any acceptance).
    drafts_priced_out: usize,
    /// Users whose list differs from plain's (exact modes must have none).
    differing: usize,
}

struct Acc {
    mode: Mode,
    draft: Option<String>,
    runner_ms: Vec<f64>,
    out: Vec<BeamOutput>,
    metrics: RankingMetrics,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let mut modes = vec![Mode::Plain];
    modes.extend(args.modes.iter().copied().filter(|&m| m != Mode::Plain));
    let speculative = modes.iter().any(|m| m.drafts());
    if speculative && !args.beam.wants_draft() {
        bail!("strict and relaxed speculation need a draft: --draft-model FILE, or --self-draft LAYERS (e.g. 4)");
    }
    let setup = super::movielens_setup(&args.model)?;
    let drafts = match args
        .beam
        .load_draft(&setup.loaded.meta, &setup.path, args.model.threads)?
    {
        Some(d) if speculative => vec![(args.beam.draft_name(), d)],
        _ => Vec::new(),
    };
    let arms: Vec<Arm> = modes
        .iter()
        .map(|&mode| Arm {
            mode,
            draft: mode.drafts().then_some(0),
        })
        .collect();
    evaluate(&setup, &drafts, &arms, &args.beam, &args.users)
}

/// Runs `arms` over the users, one prefill per user (and per draft) that every arm forks,
/// interleaved, and prints the comparison; fails when an exact arm's list differs from
/// plain's. `arms[0]` must be plain: it is the reference.
pub fn evaluate(
    setup: &super::MovieLensSetup,
    drafts: &[(String, specdec_engine::Loaded)],
    arms: &[Arm],
    beam: &BeamArgs,
    users: &UserArgs,
) -> anyhow::Result<()> {
    let super::MovieLensSetup {
        data,
        split,
        loaded,
        catalogue,
        ..
    } = setup;
    assert_eq!(arms[0].mode, Mode::Plain, "plain is the reference");
    let tok = loaded.meta.tokenizer.clone();
    let target = match users.target {
        TargetArg::Test => Target::Test,
        TargetArg::Valid => Target::Valid,
    };
    let mut cases = recommend::eval_cases(data, split, target);
    cases.drain(..users.skip.min(cases.len()));
    if let Some(n) = users.users {
        cases.truncate(n);
    }
    if cases.is_empty() {
        bail!("no users left to evaluate (--skip {})", users.skip);
    }
    let prompts: Vec<Vec<u32>> = cases
        .iter()
        .map(|c| tok.encode(&c.prompt, false))
        .collect::<Result<_, _>>()?;
    let options = |m: Mode| -> BeamOptions {
        match m {
            Mode::Plain => BeamOptions::plain(beam.k),
            Mode::JumpForward => BeamOptions::jump_forward(beam.k),
            Mode::Strict => beam.speculative(BeamVerify::Strict),
            Mode::Relaxed => beam.speculative(BeamVerify::Relaxed { seed: beam.seed }),
        }
    };
    let mut runners: Vec<BeamRunner> = arms
        .iter()
        .map(|a| {
            let Some(d) = a.draft.map(|d| &drafts[d].1) else {
                return BeamRunner::new(&loaded.model, None);
            };
            BeamRunner::new(&loaded.model, Some(&d.model as &dyn specdec_engine::Target))
                .map(|r| r.with_draft_scoring(d.draft_scoring))
        })
        .collect::<Result<_, _>>()?;
    // Per draft, the first arm that speculates with it: it prefills that draft.
    let prefiller: Vec<usize> = (0..drafts.len())
        .map(|d| arms.iter().position(|a| a.draft == Some(d)).unwrap_or(0))
        .collect();
    let mut accs: Vec<Acc> = arms
        .iter()
        .map(|a| Acc {
            mode: a.mode,
            draft: a.draft.map(|d| drafts[d].0.clone()),
            runner_ms: Vec::new(),
            out: Vec::new(),
            metrics: RankingMetrics::new(&[5, 10]),
        })
        .collect();
    let bar = specdec_rec::progress::bar(prompts.len() as u64, "users");
    let mut prefill_ms = Vec::with_capacity(prompts.len());
    for (u, (case, prompt)) in cases.iter().zip(&prompts).enumerate() {
        // One target prefill per user (and one per draft) that every arm forks: prefill is
        // the same work in every mode, so the arms compare on what follows it. Its time is
        // reported on its own.
        let plain = runners[0].prefill(std::slice::from_ref(prompt), false)?;
        let with_draft: Vec<_> = prefiller
            .iter()
            .map(|&r| runners[r].prefill_draft(&plain))
            .collect::<Result<_, _>>()?;
        let draft_ms: Vec<f64> = with_draft.iter().map(|p| p.ms().1.unwrap_or(0.0)).collect();
        prefill_ms.push((plain.ms().0, draft_ms));
        // Rotate which arm goes first, so a slow moment of the machine is spread.
        for j in 0..arms.len() {
            let i = (u + j) % arms.len();
            let pre = arms[i].draft.map_or(&plain, |d| &with_draft[d]);
            let started = Instant::now();
            let mut out =
                runners[i].run_prefilled(catalogue.trie(), pre, &options(arms[i].mode))?;
            accs[i]
                .runner_ms
                .push(started.elapsed().as_secs_f64() * 1e3);
            let out = out.pop().expect("one output per prompt");
            let ranked: Vec<usize> = out.items.iter().map(|r| r.entry).collect();
            accs[i].metrics.add(catalogue, &ranked, case.target_item);
            accs[i].out.push(out);
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    let rows = summarize(&accs, arms, &prefill_ms);
    for r in &rows {
        if !r.relaxed && r.differing > 0 {
            tracing::error!(
                "{}: {} users' lists differ from plain beam search's",
                r.mode,
                r.differing
            );
        }
    }
    // The curves at the users' typical context (the cost model keeps one per context band).
    let ctx = prompts.iter().map(Vec::len).sum::<usize>() / prompts.len().max(1);
    let curve = cost_figures(runners[0].target_cost(), ctx);
    let draft_curves: Vec<(String, Curve)> = prefiller
        .iter()
        .zip(drafts)
        .filter_map(|(&r, (name, _))| {
            Some((name.clone(), cost_figures(runners[r].draft_cost()?, ctx)))
        })
        .collect();
    if users.json {
        let v = serde_json::json!({
            "machine": crate::rec::cpu_name(),
            "k": beam.k,
            "users": cases.len(),
            "skipped": users.skip,
            "target": format!("{:?}", users.target).to_lowercase(),
            "modes": rows,
            "target_cost_ms_by_rows": curve,
            "plans": plans_json(&runners, &accs),
            "draft_cost_ms_by_rows": draft_curves,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print_table(&rows, beam.k, cases.len());
        println!(
            "target forward ms by rows (learned in this run): {}",
            format_curve(&curve)
        );
        for (name, c) in &draft_curves {
            println!("draft {name} forward ms by rows: {}", format_curve(c));
        }
        for r in rows.iter().filter(|r| r.mode != "plain") {
            println!(
                "{}: {} of {} users slower than plain by more than 3%{}",
                label_of(r),
                r.users_slower,
                r.users,
                if r.draft.is_some() {
                    format!(
                        ", {} searches stopped drafting part way, {} priced a tree out",
                        r.drafts_cut, r.drafts_priced_out
                    )
                } else {
                    String::new()
                }
            );
        }
        for (a, r) in accs.iter().zip(&runners) {
            for p in r.plan_report() {
                println!(
                    "{} plan: N {} gamma {} forced after the draft {}: {} searches, {:.1} ms each",
                    label(a.mode.name(), a.draft.as_deref()),
                    p.draft_beams,
                    p.draft_steps,
                    p.forced_after_draft,
                    p.searches,
                    p.cost
                );
            }
        }
        println!("machine: {}", crate::rec::cpu_name());
    }
    if rows.iter().any(|r| !r.relaxed && r.differing > 0) {
        bail!("an exact mode differed from plain beam search");
    }
    Ok(())
}

fn label_of(r: &Row) -> String {
    label(r.mode, r.draft.as_deref())
}

/// A row's name: the mode, and the draft it speculates with.
fn label(mode: &str, draft: Option<&str>) -> String {
    match draft {
        Some(d) => format!("{mode} [{d}]"),
        None => mode.to_string(),
    }
}

fn summarize(accs: &[Acc], arms: &[Arm], prefill_ms: &[(f64, Vec<f64>)]) -> Vec<Row> {
    let plain = &accs[0];
    let decode = |a: &Acc, u: usize| a.runner_ms[u];
    let plain_decode: f64 = (0..plain.out.len()).map(|u| decode(plain, u)).sum();
    let plain_forwards: usize = plain.out.iter().map(|o| o.stats.decode_forwards()).sum();
    accs.iter()
        .zip(arms)
        .map(|(a, arm)| {
            // The prefill is shared: the target's for every arm, plus its draft's.
            let prefill: f64 = prefill_ms
                .iter()
                .map(|(t, d)| t + arm.draft.map_or(0.0, |i| d[i]))
                .sum();
            let n = a.out.len().max(1) as f64;
            let sum = |f: &dyn Fn(&BeamOutput) -> f64| a.out.iter().map(f).sum::<f64>();
            let decode_ms: f64 = (0..a.out.len()).map(|u| decode(a, u)).sum();
            let forwards = sum(&|o| o.stats.decode_forwards() as f64);
            let rounds = sum(&|o| o.stats.drafted_rounds as f64);
            let tokens = sum(&|o| o.items.iter().map(|r| r.tokens.len()).sum::<usize>() as f64);
            let per_user: Vec<f64> = (0..a.out.len())
                .map(|u| decode(plain, u) / decode(a, u).max(1e-9))
                .collect();
            let relaxed = a.mode == Mode::Relaxed;
            Row {
                mode: a.mode.name(),
                draft: a.draft.clone(),
                relaxed,
                users: a.out.len(),
                recall_5: a.metrics.recall(5).unwrap_or(0.0),
                ndcg_5: a.metrics.ndcg(5).unwrap_or(0.0),
                recall_10: a.metrics.recall(10).unwrap_or(0.0),
                ndcg_10: a.metrics.ndcg(10).unwrap_or(0.0),
                forwards_per_request: forwards / n,
                target_rows_per_request: sum(&|o| {
                    (o.stats.target_rows - o.stats.prompt_tokens) as f64
                }) / n,
                draft_forwards_per_request: sum(&|o| o.stats.draft_forwards as f64) / n,
                accepted_steps_per_round: sum(&|o| o.stats.accepted_steps as f64) / rounds.max(1.0),
                steps_per_forward: sum(&|o| o.stats.steps as f64) / forwards.max(1.0),
                tokens_per_s: tokens / (decode_ms / 1e3).max(1e-9),
                decode_ms_per_request: decode_ms / n,
                prefill_ms_per_request: prefill / n,
                total_ms_per_request: (decode_ms + prefill) / n,
                decode_speedup: plain_decode / decode_ms.max(1e-9),
                forward_ratio: plain_forwards as f64 / forwards.max(1.0),
                worst_user_speedup: per_user.iter().copied().fold(f64::INFINITY, f64::min),
                users_slower: per_user.iter().filter(|&&s| s < 1.0 / 1.03).count(),
                drafts_cut: a.out.iter().filter(|o| o.stats.draft_cut).count(),
                drafts_priced_out: a.out.iter().filter(|o| o.stats.draft_priced_out).count(),
                differing: a
                    .out
                    .iter()
                    .zip(&plain.out)
                    .filter(|(x, p)| x.items != p.items)
                    .count(),
            }
        })
        .collect()
}

fn print_table(rows: &[Row], k: usize, users: usize) {
    println!("K = {k}, {users} users (Recall/NDCG over the held-out item; times after the prompt's prefill)");
    println!(
        "{:<30} {:>6} {:>6} {:>6} {:>6} {:>8} {:>8} {:>7} {:>9} {:>8} {:>9} {:>8} {:>8} {:>7} {:>7} {:>6}",
        "mode", "R@5", "N@5", "R@10", "N@10", "fwd/req", "rows/req", "dfwd/req", "acc/round", "tok/s", "decode ms", "total ms", "speedup", "fwd x", "worst", "diff"
    );
    for r in rows {
        let name = if r.relaxed {
            format!("{} (relaxed)", label_of(r))
        } else {
            label_of(r)
        };
        println!(
            "{:<30} {:>6.4} {:>6.4} {:>6.4} {:>6.4} {:>8.2} {:>8.1} {:>7.2} {:>9.2} {:>8.1} {:>9.1} {:>8.1} {:>7.2}x {:>6.2}x {:>6.2}x {:>6}",
            name, r.recall_5, r.ndcg_5, r.recall_10, r.ndcg_10, r.forwards_per_request, r.target_rows_per_request,
            r.draft_forwards_per_request, r.accepted_steps_per_round, r.tokens_per_s, r.decode_ms_per_request,
            r.total_ms_per_request, r.decode_speedup, r.forward_ratio, r.worst_user_speedup, r.differing
        );
    }
}

/// What each speculative arm's plan chooser measured.
fn plans_json(runners: &[BeamRunner], accs: &[Acc]) -> serde_json::Value {
    let per_mode: Vec<serde_json::Value> = accs
        .iter()
        .zip(runners)
        .filter(|(a, _)| a.mode.drafts())
        .map(|(a, r)| {
            let plans: Vec<serde_json::Value> = r
                .plan_report()
                .iter()
                .map(|p| {
                    serde_json::json!({
                        "draft_beams": p.draft_beams,
                        "draft_steps": p.draft_steps,
                        "forced_after_draft": p.forced_after_draft,
                        "searches": p.searches,
                        "ms_per_search": p.cost,
                    })
                })
                .collect();
            serde_json::json!({"mode": a.mode.name(), "draft": a.draft, "plans": plans})
        })
        .collect();
    serde_json::Value::Array(per_mode)
}

const CURVE_ROWS: [usize; 12] = [1, 2, 4, 8, 10, 12, 16, 24, 32, 48, 64, 128];

/// Measured milliseconds by rows (`None` where no forward of that size ran).
type Curve = Vec<(usize, Option<f64>)>;

fn cost_figures(c: &CostModel, ctx: usize) -> Curve {
    CURVE_ROWS
        .iter()
        .map(|&r| (r, c.observed(r, ctx)))
        .collect()
}

fn format_curve(c: &[(usize, Option<f64>)]) -> String {
    c.iter()
        .filter_map(|(r, m)| m.map(|m| format!("{r}: {m:.1}")))
        .collect::<Vec<_>>()
        .join(", ")
}
