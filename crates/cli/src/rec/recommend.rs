//! `specdec rec recommend`: the K items a user's history leads the model to, by
//! catalogue-constrained beam search (plain, jump-forward or speculative).

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args as ClapArgs, ValueEnum};
use specdec_engine::beam::{BeamOptions, BeamRunner, BeamVerify};
pub use specdec_rec::recommend::mode_name;
use specdec_rec::recommend::{answer_json, recommend, CatalogueSource, ItemCatalogue};

use super::beam_args::{BeamArgs, BeamVerifyArg};
use crate::common::{self, ModelArgs};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SearchMode {
    Plain,
    JumpForward,
    Speculative,
}

#[derive(ClapArgs, Debug)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub beam: BeamArgs,
    /// The titles watched, oldest first, separated by `;` (as the catalogue writes them,
    /// e.g. "Toy Story (1995); Babe (1995)"; an unknown title is kept as free text, and
    /// an empty history is allowed).
    #[arg(long, default_value = "")]
    pub history: String,
    /// A catalogue file of titles, one per line (default: MovieLens-100k's items).
    #[arg(long)]
    pub catalogue: Option<PathBuf>,
    /// How to search (default: speculative with a draft, else jump-forward; all exact
    /// except relaxed verification).
    #[arg(long, value_enum)]
    pub mode: Option<SearchMode>,
    /// How drafted beam steps are verified: strict returns plain beam search's list bit for
    /// bit; relaxed is AtSpeed's relaxed sampling (seeded), reported as relaxed.
    #[arg(long, value_enum, default_value_t = BeamVerifyArg::Strict)]
    pub verify: BeamVerifyArg,
    /// Print JSON instead of the list.
    #[arg(long)]
    pub json: bool,
}

/// The catalogue a command names: a titles file, else MovieLens (fetched and cached).
pub fn load_catalogue(
    file: Option<&std::path::Path>,
    tok: &specdec_engine::Tokenizer,
) -> anyhow::Result<ItemCatalogue> {
    let source = CatalogueSource::file_or_movielens(file);
    source
        .load(tok)
        .with_context(|| format!("loading the catalogue {}", source.describe()))
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let path = common::model_path(args.model.model.as_deref())?;
    let loaded = specdec_engine::Loaded::open(&path, args.model.threads)?;
    let tok = loaded.meta.tokenizer.clone();
    let catalogue = load_catalogue(args.catalogue.as_deref(), &tok)?;
    let mode = args.mode.unwrap_or(if args.beam.wants_draft() {
        SearchMode::Speculative
    } else {
        SearchMode::JumpForward
    });
    let draft = match mode {
        SearchMode::Speculative => Some(
            args.beam
                .load_draft(&loaded.meta, &path, args.model.threads)?
                .context("--mode speculative needs --draft-model FILE or --self-draft LAYERS")?,
        ),
        _ => None,
    };
    let opts = match mode {
        SearchMode::Plain => BeamOptions::plain(args.beam.k),
        SearchMode::JumpForward => BeamOptions::jump_forward(args.beam.k),
        SearchMode::Speculative => args.beam.speculative(match args.verify {
            BeamVerifyArg::Strict => BeamVerify::Strict,
            BeamVerifyArg::Relaxed => BeamVerify::Relaxed {
                seed: args.beam.seed,
            },
        }),
    };
    let history: Vec<String> = args
        .history
        .split(';')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(String::from)
        .collect();
    for t in &history {
        if catalogue.entry_of_title(t).is_none() {
            tracing::warn!("`{t}` is not in the catalogue: it stays in the prompt as free text");
        }
    }
    let mut runner = BeamRunner::new(
        &loaded.model,
        draft
            .as_ref()
            .map(|d| &d.model as &dyn specdec_engine::Target),
    )?
    .with_draft_scoring(draft.as_ref().map(|d| d.draft_scoring).unwrap_or_default());
    let rec = recommend(&mut runner, &catalogue, &tok, &[history], &opts)?
        .pop()
        .expect("one recommendation per history");
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&answer_json(&rec, &opts))?
        );
    } else {
        for (i, item) in rec.items.iter().enumerate() {
            println!(
                "{:>3}. {:>9.4}  {}  (item {})",
                i + 1,
                item.score,
                item.title,
                ids(&item.item_ids)
            );
        }
        let s = &rec.stats;
        println!(
            "{} search{}: {} target forwards after the prompt, {} steps, {} draft forwards, {:.1} ms ({:.1} ms prefill)",
            mode_name(&opts),
            if s.relaxed { " (relaxed: not plain beam search's list)" } else { "" },
            s.decode_forwards(),
            s.steps,
            s.draft_forwards,
            s.prefill_ms + s.forward_ms + s.draft_ms + s.verify_ms,
            s.prefill_ms
        );
    }
    Ok(())
}

fn ids(ids: &[u32]) -> String {
    if ids.is_empty() {
        return "-".into();
    }
    ids.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
