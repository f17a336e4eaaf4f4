//! `specdec rec eval-draft`: drafts side by side on held-out users. For each draft,
//! strict and relaxed speculative beam search (accepted steps per round, target forwards
//! per request, wall time), against plain constrained beam search and jump-forward, all
//! interleaved per user in one process (what `rec eval` runs, with one arm per draft).

use std::path::PathBuf;

use anyhow::bail;
use clap::Args as ClapArgs;

use super::beam_args::{file_label, BeamArgs};
use super::eval::{evaluate, Arm, Mode, UserArgs};
use crate::common::ModelArgs;

#[derive(ClapArgs, Debug)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The drafts to compare (GGUF files with the target's vocabulary), named in the table
    /// by their file stems; --draft-model and --self-draft add one more.
    pub drafts: Vec<PathBuf>,
    #[command(flatten)]
    pub beam: BeamArgs,
    #[command(flatten)]
    pub users: UserArgs,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let setup = super::movielens_setup(&args.model)?;
    let meta = &setup.loaded.meta;
    let mut drafts = Vec::new();
    for p in &args.drafts {
        let path = crate::common::model_path(Some(p))?;
        let d = args.beam.load_draft_at(&path, meta, args.model.threads)?;
        drafts.push((file_label(p), d));
    }
    if let Some(d) = args
        .beam
        .load_draft(meta, &setup.path, args.model.threads)?
    {
        drafts.push((args.beam.draft_name(), d));
    }
    if drafts.is_empty() {
        bail!("no draft to evaluate: give draft files, --draft-model FILE or --self-draft LAYERS");
    }
    let mut arms = vec![
        Arm {
            mode: Mode::Plain,
            draft: None,
        },
        Arm {
            mode: Mode::JumpForward,
            draft: None,
        },
    ];
    for d in 0..drafts.len() {
        for mode in [Mode::Strict, Mode::Relaxed] {
            arms.push(Arm {
                mode,
                draft: Some(d),
            });
        }
    }
    evaluate(&setup, &drafts, &arms, &args.beam, &args.users)
}
