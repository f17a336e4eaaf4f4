//! The draft model text requests speculate with (`--draft model`): loaded once, shared by
//! every request's [`ModelDrafter`], each with its own cache.

use std::path::Path;
use std::sync::Arc;

use specdec_drafters::{ModelDrafter, ModelDrafterConfig, TargetClock};
use specdec_runtime::Target;

use crate::beam::DraftScoring;
use crate::load::{load_draft, ModelMeta};
use crate::EngineError;

/// A draft model for text speculation and its prior cost relative to the target.
#[derive(Clone)]
pub struct DraftModel {
    model: Arc<dyn Target>,
    cost_ratio: f64,
    /// How the file says its drafts score catalogue items (beam search reads it).
    scoring: DraftScoring,
    /// The target's one-row forward time, as the engine measures it.
    clock: Arc<TargetClock>,
}

impl DraftModel {
    /// `model` drafting for a target it costs `cost_ratio` of per forward (until the
    /// drafters measure both).
    pub fn new(model: Arc<dyn Target>, cost_ratio: f64) -> Self {
        DraftModel {
            model,
            cost_ratio,
            scoring: DraftScoring::default(),
            clock: Arc::default(),
        }
    }

    /// Loads the draft model at `path` for the target read from `target_path` (same
    /// vocabulary: see [`load_draft`]). Its prior cost is the ratio of the two files'
    /// sizes: decoding reads every weight once per forward, so on a CPU the forward's time
    /// follows the bytes.
    pub fn load(
        path: &Path,
        target: &ModelMeta,
        target_path: &Path,
        threads: usize,
    ) -> Result<Self, EngineError> {
        let draft = load_draft(path, target, threads)?;
        let size = |p: &Path| std::fs::metadata(p).map(|m| m.len() as f64).ok();
        let ratio = match (size(path), size(target_path)) {
            (Some(d), Some(t)) if t > 0.0 => d / t,
            _ => 0.5,
        };
        tracing::info!(
            "draft model {} for text speculation (prior cost {:.2} of a target forward)",
            path.display(),
            ratio
        );
        Ok(DraftModel {
            scoring: draft.draft_scoring,
            ..DraftModel::new(Arc::new(draft.model), ratio)
        })
    }

    /// Where the engine records the target's one-row forward time for the drafters.
    pub(crate) fn clock(&self) -> &TargetClock {
        &self.clock
    }

    /// How the draft scores catalogue items in a recommendation's beam search.
    pub fn scoring(&self) -> DraftScoring {
        self.scoring
    }

    /// The model.
    pub fn model(&self) -> &Arc<dyn Target> {
        &self.model
    }

    /// A drafter for one request to a target of `vocab` tokens whose generation ends at
    /// `stop_tokens`. `measure`: size drafts by measured times (else by the prior cost
    /// alone, so the drafts depend only on the text, as a relaxed request needs).
    pub fn drafter(&self, vocab: usize, stop_tokens: &[u32], measure: bool) -> ModelDrafter {
        ModelDrafter::new(
            self.model.clone(),
            ModelDrafterConfig {
                cost_ratio: self.cost_ratio,
                target_clock: Some(self.clock.clone()),
                vocab_limit: vocab,
                stop_tokens: stop_tokens.to_vec(),
                measure,
                ..ModelDrafterConfig::default()
            },
        )
    }
}

impl std::fmt::Debug for DraftModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DraftModel")
            .field("model", &self.model.config().name)
            .field("cost_ratio", &self.cost_ratio)
            .finish()
    }
}
