//! `specdec draft self`: draft models derived from the target.

use std::path::PathBuf;

use anyhow::Context;
use clap::Subcommand;
use specdec_gguf::GgufFile;

#[derive(Subcommand, Debug)]
pub enum DraftCommand {
    /// Write a self-draft: the model's first L blocks with its embeddings, final norm and
    /// head (and its tokenizer), so speculative decoding with a draft model runs before a
    /// trained draft exists.
    #[command(name = "self")]
    SelfDraft {
        /// Blocks to keep (1 to the model's block count minus one).
        #[arg(long)]
        layers: usize,
        /// The GGUF file to write (atomically: a temporary file, then a rename).
        #[arg(long)]
        out: PathBuf,
        /// The target model (default: $SPECDEC_MODEL, else the default model).
        #[arg(long)]
        model: Option<PathBuf>,
        /// Shuffle every tensor's quantization blocks with this seed: a deliberately bad
        /// draft (valid weights, meaningless predictions), for tests.
        #[arg(long)]
        scramble_seed: Option<u64>,
        /// Declare how the draft's logits are to be read (`specdec.draft.scoring`):
        /// `catalogue` makes beam search compute and renormalise just the catalogue's
        /// allowed tokens (meant for drafts trained that way; a self-draft so marked drafts
        /// from the target's distribution renormalised over them).
        #[arg(long, value_enum)]
        scoring: Option<crate::rec::beam_args::DraftScoringArg>,
    },
}

pub fn run(cmd: DraftCommand) -> anyhow::Result<()> {
    match cmd {
        DraftCommand::SelfDraft {
            layers,
            out,
            model,
            scramble_seed,
            scoring,
        } => {
            let path = crate::common::model_path(model.as_deref())?;
            let src = GgufFile::open(&path)?;
            let mut draft = specdec_gguf::truncate_blocks(&src, layers, scramble_seed)
                .with_context(|| format!("deriving a draft from {}", path.display()))?;
            if let Some(s) = scoring {
                let name = specdec_engine::beam::DraftScoring::from(s).name();
                draft = draft.kv(
                    specdec_engine::beam::DRAFT_SCORING_KEY,
                    specdec_gguf::Value::String(name.into()),
                );
            }
            let bytes = draft
                .write_to(&out)
                .with_context(|| format!("writing {}", out.display()))?;
            let scrambled =
                scramble_seed.map_or(String::new(), |s| format!(", scrambled with seed {s}"));
            println!(
                "wrote {} ({layers} layers of {}, {} tensors, {bytes} bytes{scrambled})",
                out.display(),
                path.display(),
                draft.tensors.len()
            );
        }
    }
    Ok(())
}
