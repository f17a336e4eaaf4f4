//! `specdec rec eval`: generative recommendation over the evaluation users, plain
//! constrained beam search against jump-forward and speculative beam search (strict and
//! relaxed), interleaved per user in one process (`specdec_bench::beams`). Prints
//! Recall/NDCG@5/10, target forwards per request, accepted steps per round, tokens/s and
//! wall time, fails when an exact mode's list differs from plain's for some user, and with
//! `--report DIR` writes the table and plots.

use std::path::PathBuf;

use anyhow::bail;
use clap::{Args as ClapArgs, ValueEnum};
use specdec_bench::beams::{self, BeamArm, BeamDraft, BeamEval, BeamMode, BeamSetup};
use specdec_engine::beam::{BeamOptions, BeamVerify};
use specdec_rec::recommend::{self, Target};

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
        self.bench().drafts()
    }

    fn bench(self) -> BeamMode {
        match self {
            Mode::Plain => BeamMode::Plain,
            Mode::JumpForward => BeamMode::JumpForward,
            Mode::Strict => BeamMode::Strict,
            Mode::Relaxed => BeamMode::Relaxed,
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
    /// Also write a report into this directory: `index.md` with the table, and SVG plots
    /// (target forwards per request by mode, per-user speedups).
    #[arg(long)]
    pub report: Option<PathBuf>,
}

/// One configuration evaluated: a mode, with one of the drafts when it speculates.
#[derive(Clone, Debug)]
pub struct Arm {
    pub mode: Mode,
    pub draft: Option<usize>,
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

/// Runs `arms` over the users (`specdec_bench::beams::evaluate`) and prints the
/// comparison; fails when an exact arm's list differs from plain's. `arms[0]` must be
/// plain: it is the reference.
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
    let options = |m: Mode| -> BeamOptions {
        match m {
            Mode::Plain => BeamOptions::plain(beam.k),
            Mode::JumpForward => BeamOptions::jump_forward(beam.k),
            Mode::Strict => beam.speculative(BeamVerify::Strict),
            Mode::Relaxed => beam.speculative(BeamVerify::Relaxed { seed: beam.seed }),
        }
    };
    let bench_arms: Vec<BeamArm> = arms
        .iter()
        .map(|a| BeamArm {
            mode: a.mode.bench(),
            draft: a.draft,
            options: options(a.mode),
        })
        .collect();
    let bench_setup = BeamSetup {
        target: &loaded.model,
        tokenizer: &loaded.meta.tokenizer,
        catalogue,
        drafts: drafts
            .iter()
            .map(|(name, d)| BeamDraft {
                name: name.clone(),
                model: &d.model,
                scoring: d.draft_scoring,
            })
            .collect(),
    };
    let bar = specdec_rec::progress::bar(cases.len() as u64, "users");
    let eval = beams::evaluate(&bench_setup, &cases, &bench_arms, &mut |done| {
        bar.set_position(done as u64)
    })?;
    bar.finish_and_clear();
    for r in eval.modes.iter().filter(|r| !r.relaxed && r.differing > 0) {
        tracing::error!(
            "{}: {} users' lists differ from plain beam search's",
            r.label(),
            r.differing
        );
    }
    let machine = crate::rec::cpu_name();
    if users.json {
        let mut v = serde_json::to_value(&eval)?;
        v["machine"] = machine.clone().into();
        v["skipped"] = users.skip.into();
        v["target"] = format!("{:?}", users.target).to_lowercase().into();
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print(&eval);
        println!("machine: {machine}");
    }
    if let Some(dir) = &users.report {
        let intro = vec![format!(
            "`specdec rec eval`: {} held-out users ({:?} item) after skipping {}, on {machine}; \
             the modes take turns per user after one shared prefill.",
            eval.users, users.target, users.skip
        )];
        let index = beams::report(&eval, intro).write(dir)?;
        eprintln!("report: {}", index.display());
    }
    if eval.exact_differs() {
        bail!("an exact mode differed from plain beam search");
    }
    Ok(())
}

fn print(eval: &BeamEval) {
    print_table(eval);
    println!(
        "target forward ms by rows (learned in this run): {}",
        beams::format_curve(&eval.target_cost_ms_by_rows)
    );
    for (name, c) in &eval.draft_cost_ms_by_rows {
        println!(
            "draft {name} forward ms by rows: {}",
            beams::format_curve(c)
        );
    }
    for r in eval.modes.iter().filter(|r| r.mode != "plain") {
        println!(
            "{}: {} of {} users slower than plain by more than 3%{}",
            r.label(),
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
    for a in &eval.plans {
        let name = beams::arm_label(a.mode, a.draft.as_deref());
        for p in &a.plans {
            println!(
                "{name} plan: N {} gamma {} forced after the draft {}: {} searches, {:.1} ms each",
                p.draft_beams, p.draft_steps, p.forced_after_draft, p.searches, p.ms_per_search
            );
        }
    }
}

fn print_table(eval: &BeamEval) {
    println!(
        "K = {}, {} users (Recall/NDCG over the held-out item; times after the prompt's prefill)",
        eval.k, eval.users
    );
    println!(
        "{:<30} {:>6} {:>6} {:>6} {:>6} {:>8} {:>8} {:>7} {:>9} {:>8} {:>9} {:>8} {:>8} {:>7} {:>7} {:>6}",
        "mode", "R@5", "N@5", "R@10", "N@10", "fwd/req", "rows/req", "dfwd/req", "acc/round", "tok/s", "decode ms", "total ms", "speedup", "fwd x", "worst", "diff"
    );
    for r in &eval.modes {
        println!(
            "{:<30} {:>6.4} {:>6.4} {:>6.4} {:>6.4} {:>8.2} {:>8.1} {:>7.2} {:>9.2} {:>8.1} {:>9.1} {:>8.1} {:>7.2}x {:>6.2}x {:>6.2}x {:>6}",
            r.label(), r.recall_5, r.ndcg_5, r.recall_10, r.ndcg_10, r.forwards_per_request, r.target_rows_per_request,
            r.draft_forwards_per_request, r.accepted_steps_per_round, r.tokens_per_s, r.decode_ms_per_request,
            r.total_ms_per_request, r.decode_speedup, r.forward_ratio, r.worst_user_speedup, r.differing
        );
    }
}
