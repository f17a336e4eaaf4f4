//! AtSpeed's benchmark: generative recommendation over held-out users, plain constrained
//! beam search against jump-forward and speculative beam search (strict and relaxed, per
//! draft), interleaved per user in one process, with ranking quality, target forwards per
//! request, accepted steps per round and times; every exact mode's list is checked against
//! plain's for every user. `rec eval` and `rec eval-draft` parse flags and print it.

use std::time::Instant;

use serde::Serialize;
use specdec_engine::beam::{BeamOptions, BeamOutput, BeamRunner, DraftScoring};
use specdec_engine::budget::CostModel;
use specdec_engine::{Model, Tokenizer};
use specdec_rec::recommend::users::EvalCase;
use specdec_rec::recommend::{ItemCatalogue, RankingMetrics};

use crate::report::{distribution_plot, speedup_distribution_plot, Report, Section, Table};
use crate::BenchError;

/// How an arm searches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BeamMode {
    /// Constrained beam search, one forward per step: the reference.
    Plain,
    /// Plain, with the catalogue's single continuations appended without a forward.
    JumpForward,
    /// Speculative beam search returning plain's list exactly.
    Strict,
    /// Speculative beam search accepting by the relaxed rule.
    Relaxed,
}

impl BeamMode {
    /// Whether the mode drafts.
    pub fn drafts(self) -> bool {
        matches!(self, BeamMode::Strict | BeamMode::Relaxed)
    }

    /// Its name in tables.
    pub fn name(self) -> &'static str {
        match self {
            BeamMode::Plain => "plain",
            BeamMode::JumpForward => "jump-forward",
            BeamMode::Strict => "strict",
            BeamMode::Relaxed => "relaxed",
        }
    }
}

/// One configuration evaluated: a mode, its search options, and the draft it speculates
/// with (an index into [`BeamSetup::drafts`]).
#[derive(Clone, Debug)]
pub struct BeamArm {
    /// The mode.
    pub mode: BeamMode,
    /// The draft, for a speculative mode.
    pub draft: Option<usize>,
    /// The search's options (K, the draft's plans, the verification rule).
    pub options: BeamOptions,
}

/// A draft model of the target's vocabulary.
pub struct BeamDraft<'a> {
    /// Its name in tables.
    pub name: String,
    /// The model.
    pub model: &'a Model,
    /// How its logits score catalogue items.
    pub scoring: DraftScoring,
}

/// What the arms search with.
pub struct BeamSetup<'a> {
    /// The target.
    pub target: &'a Model,
    /// Its tokenizer (the users' prompts are text).
    pub tokenizer: &'a Tokenizer,
    /// The catalogue every list is drawn from.
    pub catalogue: &'a ItemCatalogue,
    /// The drafts the speculative arms use.
    pub drafts: Vec<BeamDraft<'a>>,
}

/// One arm's figures over the users.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ModeRow {
    /// The mode's name.
    pub mode: &'static str,
    /// The draft's name, for a speculative mode.
    pub draft: Option<String>,
    /// Whether its lists may differ from plain's by design.
    pub relaxed: bool,
    /// Users searched.
    pub users: usize,
    /// Recall of the held-out item at 5.
    pub recall_5: f64,
    /// NDCG at 5.
    pub ndcg_5: f64,
    /// Recall at 10.
    pub recall_10: f64,
    /// NDCG at 10.
    pub ndcg_10: f64,
    /// Target forwards per request after the prompt's prefill.
    pub forwards_per_request: f64,
    /// Target rows per request after the prefill.
    pub target_rows_per_request: f64,
    /// Draft forwards per request.
    pub draft_forwards_per_request: f64,
    /// Beam steps accepted per drafted round.
    pub accepted_steps_per_round: f64,
    /// Beam steps per target forward.
    pub steps_per_forward: f64,
    /// Tokens of the K returned items per second of the search (after the prefill).
    pub tokens_per_s: f64,
    /// The search's milliseconds per request, after the prefill.
    pub decode_ms_per_request: f64,
    /// The same with the prefill.
    pub total_ms_per_request: f64,
    /// The shared prefill's milliseconds per request (the target's, plus the draft's).
    pub prefill_ms_per_request: f64,
    /// Plain's decode time over this mode's, from the totals.
    pub decode_speedup: f64,
    /// Plain's target forwards over this mode's.
    pub forward_ratio: f64,
    /// The lowest per-user decode speedup.
    pub worst_user_speedup: f64,
    /// Users whose decode speedup fell below 1/1.03.
    pub users_slower: usize,
    /// Searches that stopped drafting part way (their plan proved too dear).
    pub drafts_cut: usize,
    /// Searches that dropped a tree before its forward (it could not pay at any acceptance).
    pub drafts_priced_out: usize,
    /// Users whose list differs from plain's (exact modes must have none).
    pub differing: usize,
    /// Per user, in order: the decode speedup over plain.
    pub per_user_speedup: Vec<f64>,
    /// Per user, in order: target forwards after the prefill.
    pub per_user_forwards: Vec<usize>,
}

impl ModeRow {
    /// Its name in tables: the mode, the draft it speculates with, "(relaxed)".
    pub fn label(&self) -> String {
        let name = arm_label(self.mode, self.draft.as_deref());
        if self.relaxed {
            format!("{name} (relaxed)")
        } else {
            name
        }
    }
}

/// An arm's name in tables: its mode, and the draft it speculates with.
pub fn arm_label(mode: &str, draft: Option<&str>) -> String {
    match draft {
        Some(d) => format!("{mode} [{d}]"),
        None => mode.to_string(),
    }
}

/// What a speculative arm's plan chooser measured: one plan.
#[derive(Clone, Debug, Serialize)]
pub struct PlanRow {
    /// Draft beams (N) per drafted step; 0 for the plan without a draft.
    pub draft_beams: usize,
    /// Drafted steps (gamma) per round.
    pub draft_steps: usize,
    /// Forced tokens appended after each leaf of the draft tree.
    pub forced_after_draft: usize,
    /// Searches run with it.
    pub searches: usize,
    /// Milliseconds per beam step (an average).
    pub ms_per_search: f64,
}

/// A speculative arm's plans.
#[derive(Clone, Debug, Serialize)]
pub struct ArmPlans {
    /// The mode's name.
    pub mode: &'static str,
    /// The draft's name.
    pub draft: Option<String>,
    /// Its plans.
    pub plans: Vec<PlanRow>,
}

/// Measured milliseconds by rows (`None` where no forward of that size ran).
pub type Curve = Vec<(usize, Option<f64>)>;

/// The whole evaluation, as `rec eval --json` prints it (beside the machine and the users'
/// selection, which the caller knows).
#[derive(Clone, Debug, Serialize)]
pub struct BeamEval {
    /// K, the list's length.
    pub k: usize,
    /// Users evaluated.
    pub users: usize,
    /// Per arm, in the arms' order (plain first).
    pub modes: Vec<ModeRow>,
    /// The target's forward time by rows at the users' typical context, learned in the run.
    pub target_cost_ms_by_rows: Curve,
    /// Each speculative arm's plans.
    pub plans: Vec<ArmPlans>,
    /// Each draft's forward time by rows.
    pub draft_cost_ms_by_rows: Vec<(String, Curve)>,
}

impl BeamEval {
    /// Whether an exact arm's list differed from plain's for some user.
    pub fn exact_differs(&self) -> bool {
        self.modes.iter().any(|r| !r.relaxed && r.differing > 0)
    }
}

struct Acc {
    runner_ms: Vec<f64>,
    out: Vec<BeamOutput>,
    metrics: RankingMetrics,
}

/// Runs `arms` over `cases`, one prefill per user (and per draft) that every arm forks,
/// the arms' order rotating from user to user so a slow moment of the machine is spread.
/// `arms[0]` must be plain: it is the reference. `progress` hears of each user done.
pub fn evaluate(
    setup: &BeamSetup<'_>,
    cases: &[EvalCase],
    arms: &[BeamArm],
    progress: &mut dyn FnMut(usize),
) -> Result<BeamEval, BenchError> {
    if arms.first().map(|a| a.mode) != Some(BeamMode::Plain) {
        return Err(BenchError::Setup(
            "the first arm must be plain: it is the reference".into(),
        ));
    }
    if let Some(a) = arms.iter().find(|a| a.mode.drafts() != a.draft.is_some()) {
        return Err(BenchError::Setup(format!(
            "a {} arm {} a draft",
            a.mode.name(),
            if a.mode.drafts() { "needs" } else { "takes no" }
        )));
    }
    if let Some(d) = arms
        .iter()
        .filter_map(|a| a.draft)
        .find(|&d| d >= setup.drafts.len())
    {
        return Err(BenchError::Setup(format!("no draft {d}")));
    }
    let prompts: Vec<Vec<u32>> = cases
        .iter()
        .map(|c| setup.tokenizer.encode(&c.prompt, false))
        .collect::<Result<_, _>>()?;
    let mut runners: Vec<BeamRunner> = arms
        .iter()
        .map(|a| match a.draft.map(|d| &setup.drafts[d]) {
            None => BeamRunner::new(setup.target, None),
            Some(d) => BeamRunner::new(setup.target, Some(d.model as &dyn specdec_engine::Target))
                .map(|r| r.with_draft_scoring(d.scoring)),
        })
        .collect::<Result<_, _>>()?;
    // Per draft, the first arm that speculates with it: it prefills that draft.
    let prefiller: Vec<Option<usize>> = (0..setup.drafts.len())
        .map(|d| arms.iter().position(|a| a.draft == Some(d)))
        .collect();
    let mut accs: Vec<Acc> = arms
        .iter()
        .map(|_| Acc {
            runner_ms: Vec::new(),
            out: Vec::new(),
            metrics: RankingMetrics::new(&[5, 10]),
        })
        .collect();
    let mut prefill_ms = Vec::with_capacity(prompts.len());
    for (u, (case, prompt)) in cases.iter().zip(&prompts).enumerate() {
        // One target prefill per user (and one per draft) that every arm forks: prefill is
        // the same work in every mode, so the arms compare on what follows it. Its time is
        // reported on its own.
        let plain = runners[0].prefill(std::slice::from_ref(prompt), false)?;
        let mut with_draft = Vec::with_capacity(prefiller.len());
        for r in &prefiller {
            with_draft.push(match r {
                Some(r) => Some(runners[*r].prefill_draft(&plain)?),
                None => None,
            });
        }
        let draft_ms: Vec<f64> = with_draft
            .iter()
            .map(|p| p.as_ref().and_then(|p| p.ms().1).unwrap_or(0.0))
            .collect();
        prefill_ms.push((plain.ms().0, draft_ms));
        for j in 0..arms.len() {
            let i = (u + j) % arms.len();
            let pre = match arms[i].draft {
                Some(d) => with_draft[d]
                    .as_ref()
                    .expect("a draft used by an arm is prefilled"),
                None => &plain,
            };
            let started = Instant::now();
            let mut out =
                runners[i].run_prefilled(setup.catalogue.trie(), pre, &arms[i].options)?;
            accs[i]
                .runner_ms
                .push(started.elapsed().as_secs_f64() * 1e3);
            let out = out.pop().expect("one output per prompt");
            let ranked: Vec<usize> = out.items.iter().map(|r| r.entry).collect();
            accs[i]
                .metrics
                .add(setup.catalogue, &ranked, case.target_item);
            accs[i].out.push(out);
        }
        progress(u + 1);
    }
    let modes = summarize(setup, &accs, arms, &prefill_ms);
    // The curves at the users' typical context (the cost model keeps one per context band).
    let ctx = prompts.iter().map(Vec::len).sum::<usize>() / prompts.len().max(1);
    let draft_cost_ms_by_rows = prefiller
        .iter()
        .zip(&setup.drafts)
        .filter_map(|(r, d)| {
            Some((
                d.name.clone(),
                cost_figures(runners[(*r)?].draft_cost()?, ctx),
            ))
        })
        .collect();
    let plans = arms
        .iter()
        .zip(&runners)
        .filter(|(a, _)| a.mode.drafts())
        .map(|(a, r)| ArmPlans {
            mode: a.mode.name(),
            draft: a.draft.map(|d| setup.drafts[d].name.clone()),
            plans: r
                .plan_report()
                .iter()
                .map(|p| PlanRow {
                    draft_beams: p.draft_beams,
                    draft_steps: p.draft_steps,
                    forced_after_draft: p.forced_after_draft,
                    searches: p.searches,
                    ms_per_search: p.cost,
                })
                .collect(),
        })
        .collect();
    Ok(BeamEval {
        k: arms[0].options.k,
        users: cases.len(),
        modes,
        target_cost_ms_by_rows: cost_figures(runners[0].target_cost(), ctx),
        plans,
        draft_cost_ms_by_rows,
    })
}

fn summarize(
    setup: &BeamSetup<'_>,
    accs: &[Acc],
    arms: &[BeamArm],
    prefill_ms: &[(f64, Vec<f64>)],
) -> Vec<ModeRow> {
    let plain = &accs[0];
    let plain_decode: f64 = plain.runner_ms.iter().sum();
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
            let decode_ms: f64 = a.runner_ms.iter().sum();
            let forwards = sum(&|o| o.stats.decode_forwards() as f64);
            let rounds = sum(&|o| o.stats.drafted_rounds as f64);
            let tokens = sum(&|o| o.items.iter().map(|r| r.tokens.len()).sum::<usize>() as f64);
            let per_user: Vec<f64> = plain
                .runner_ms
                .iter()
                .zip(&a.runner_ms)
                .map(|(p, m)| p / m.max(1e-9))
                .collect();
            ModeRow {
                mode: arm.mode.name(),
                draft: arm.draft.map(|d| setup.drafts[d].name.clone()),
                relaxed: arm.mode == BeamMode::Relaxed,
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
                per_user_forwards: a.out.iter().map(|o| o.stats.decode_forwards()).collect(),
                per_user_speedup: per_user,
            }
        })
        .collect()
}

const CURVE_ROWS: [usize; 12] = [1, 2, 4, 8, 10, 12, 16, 24, 32, 48, 64, 128];

fn cost_figures(c: &CostModel, ctx: usize) -> Curve {
    CURVE_ROWS
        .iter()
        .map(|&r| (r, c.observed(r, ctx)))
        .collect()
}

/// `curve` as "rows: ms" pairs, where a forward of that size ran.
pub fn format_curve(curve: &[(usize, Option<f64>)]) -> String {
    curve
        .iter()
        .filter_map(|(r, m)| m.map(|m| format!("{r}: {m:.1}")))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `--report DIR`'s page: the modes' table, target forwards per request by mode and the
/// per-user speedup distribution. `intro` says what ran and on which machine.
pub fn report(eval: &BeamEval, intro: Vec<String>) -> Report {
    let table = Table {
        header: [
            "mode",
            "R@10",
            "N@10",
            "fwd/req",
            "draft fwd/req",
            "acc/round",
            "decode ms/req",
            "speedup",
            "worst user",
            "differing",
        ]
        .map(String::from)
        .to_vec(),
        rows: eval
            .modes
            .iter()
            .map(|r| {
                vec![
                    r.label(),
                    format!("{:.4}", r.recall_10),
                    format!("{:.4}", r.ndcg_10),
                    format!("{:.2}", r.forwards_per_request),
                    format!("{:.2}", r.draft_forwards_per_request),
                    format!("{:.2}", r.accepted_steps_per_round),
                    format!("{:.1}", r.decode_ms_per_request),
                    format!("{:.2}x", r.decode_speedup),
                    format!("{:.2}x", r.worst_user_speedup),
                    r.differing.to_string(),
                ]
            })
            .collect(),
    };
    let forwards: Vec<(String, Vec<f64>)> = eval
        .modes
        .iter()
        .map(|r| {
            (
                r.label(),
                r.per_user_forwards.iter().map(|&f| f as f64).collect(),
            )
        })
        .collect();
    let speedups: Vec<(String, Vec<f64>)> = eval
        .modes
        .iter()
        .skip(1)
        .map(|r| (r.label(), r.per_user_speedup.clone()))
        .collect();
    Report {
        title: format!("Beam search, K = {}, {} users", eval.k, eval.users),
        intro,
        sections: vec![Section {
            heading: "Modes".into(),
            text: vec![format!(
                "Times are after the prompt's prefill, which every mode shares; the target's \
                 forward ms by rows in this run: {}.",
                format_curve(&eval.target_cost_ms_by_rows)
            )],
            table: Some(table),
            plots: vec![
                distribution_plot(
                    &forwards,
                    "forwards.svg",
                    "Target forwards per request by mode",
                    "target forwards after the prefill",
                ),
                speedup_distribution_plot(
                    &speedups,
                    "speedups.svg",
                    "Per-user decode speedup over plain beam search",
                ),
            ],
        }],
    }
}
