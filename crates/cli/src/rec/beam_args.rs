//! Options shared by `rec recommend` and `rec eval`: K, the draft model and how beam steps
//! are verified.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, ValueEnum};
use specdec_engine::beam::{BeamOptions, BeamVerify, DraftScoring};
use specdec_engine::{load_draft, Loaded, ModelMeta};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BeamVerifyArg {
    Strict,
    Relaxed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DraftScoringArg {
    Vocabulary,
    Catalogue,
}

impl From<DraftScoringArg> for DraftScoring {
    fn from(a: DraftScoringArg) -> Self {
        match a {
            DraftScoringArg::Vocabulary => DraftScoring::Vocabulary,
            DraftScoringArg::Catalogue => DraftScoring::Catalogue,
        }
    }
}

#[derive(Args, Debug, Clone)]
pub struct BeamArgs {
    /// Items to return (the beam width).
    #[arg(short = 'k', long = "top-k", default_value_t = 10)]
    pub k: usize,
    /// A draft model (a GGUF file or a known model's short name, with the target's
    /// vocabulary) for speculative beam search.
    #[arg(long)]
    pub draft_model: Option<PathBuf>,
    /// Without --draft-model: derive a self-draft from the target's first L blocks (what
    /// `specdec draft self --layers L` writes), cached in the temporary folder.
    #[arg(long)]
    pub self_draft: Option<usize>,
    /// How the draft's logits are read: over the whole vocabulary, or over the catalogue's
    /// allowed tokens only (a draft trained on that distribution; its forwards then compute
    /// just those tokens' logits). Default: what the draft file declares
    /// (`specdec.draft.scoring`), else vocabulary.
    #[arg(long, value_enum)]
    pub draft_scoring: Option<DraftScoringArg>,
    /// Seed of relaxed verification.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The most draft beams per drafted step (N).
    #[arg(long, default_value_t = 20)]
    pub max_beams: usize,
    /// The most drafted steps per round (gamma).
    #[arg(long, default_value_t = 3)]
    pub max_steps: usize,
    /// Always draft N beams for gamma steps (the fewest target forwards) instead of
    /// choosing each search's plan from what the plans cost per search so far.
    #[arg(long)]
    pub fixed: bool,
}

impl BeamArgs {
    pub fn wants_draft(&self) -> bool {
        self.draft_model.is_some() || self.self_draft.is_some()
    }

    /// What to call the draft in reports: its file's stem, or `self-L`.
    pub fn draft_name(&self) -> String {
        match (&self.draft_model, self.self_draft) {
            (Some(p), _) => file_label(p),
            (None, Some(l)) => format!("self-{l}"),
            (None, None) => "none".into(),
        }
    }

    /// The draft model, if one was asked for, checked against the target's vocabulary.
    pub fn load_draft(
        &self,
        target: &ModelMeta,
        target_path: &std::path::Path,
        threads: usize,
    ) -> anyhow::Result<Option<Loaded>> {
        let path = match (&self.draft_model, self.self_draft) {
            (Some(p), _) => crate::common::model_path(Some(p))?,
            (None, Some(layers)) => self_draft_file(target_path, layers)?,
            (None, None) => return Ok(None),
        };
        self.load_draft_at(&path, target, threads).map(Some)
    }

    /// The draft at `path`, checked against the target's vocabulary, scored as
    /// `--draft-scoring` says (else as its file declares).
    pub fn load_draft_at(
        &self,
        path: &std::path::Path,
        target: &ModelMeta,
        threads: usize,
    ) -> anyhow::Result<Loaded> {
        let mut d = load_draft(path, target, threads)
            .with_context(|| format!("loading the draft {}", path.display()))?;
        if let Some(s) = self.draft_scoring {
            d.draft_scoring = s.into();
        }
        tracing::info!(
            "draft {}: scoring {}",
            path.display(),
            d.draft_scoring.name()
        );
        Ok(d)
    }

    /// Speculative options with this request's draft plan.
    pub fn speculative(&self, verify: BeamVerify) -> BeamOptions {
        let mut o = BeamOptions::speculative(self.k, verify);
        let plan = o.draft.as_mut().expect("speculative options draft");
        plan.max_beams = self.max_beams;
        plan.max_steps = self.max_steps;
        plan.adaptive = !self.fixed;
        o
    }
}

/// The self-draft of `target` with `layers` blocks, written once to the temporary folder
/// (named by the target file's size and modification time, so a changed target gets a new
/// one).
fn self_draft_file(target: &std::path::Path, layers: usize) -> anyhow::Result<PathBuf> {
    let meta =
        std::fs::metadata(target).with_context(|| format!("reading {}", target.display()))?;
    let stamp = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs());
    let name = format!("specdec-self-draft-{layers}-{}-{stamp}.gguf", meta.len());
    let path = std::env::temp_dir().join(name);
    if !path.exists() {
        let src = specdec_gguf::GgufFile::open(target)?;
        let draft = specdec_gguf::truncate_blocks(&src, layers, None).with_context(|| {
            format!(
                "deriving a {layers}-block self-draft of {}",
                target.display()
            )
        })?;
        draft
            .write_to(&path)
            .with_context(|| format!("writing {}", path.display()))?;
        tracing::info!("wrote the self-draft {}", path.display());
    }
    Ok(path)
}

/// A file's stem, for labelling it in reports.
/// How a draft given as `p` is named in tables: a GGUF file by its stem, anything else
/// (a known model's short name, `qwen2.5-coder-0.5b`) as given.
pub fn file_label(p: &std::path::Path) -> String {
    if p.extension().is_none_or(|e| e != "gguf") {
        return p.display().to_string();
    }
    p.file_stem().map_or_else(
        || p.display().to_string(),
        |s| s.to_string_lossy().into_owned(),
    )
}
