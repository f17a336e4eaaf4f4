//! Checkpoints a killed training run resumes from without loss: the draft's parameters,
//! the optimiser's moments and step count, and where in which epoch it stood. Resuming
//! continues exactly as the uninterrupted run would have (the epoch orders are seeded).
//!
//! A checkpoint at `BASE` is `BASE.json` naming a generation, and that generation's two
//! safetensors files (`BASE.gN.params.safetensors`, `BASE.gN.adam.safetensors`). A new
//! generation's files are written whole before the JSON is replaced (by rename), and the
//! old generation is removed only then, so a crash at any point leaves a whole checkpoint.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::model::{Draft, DraftConfig};
use crate::train::{TrainOptions, Trainer};
use crate::TrainError;

/// What a checkpoint records beside the tensors.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckpointMeta {
    /// The draft's hyper-parameters.
    pub config: DraftConfig,
    /// The run's options, so a resumed run trains as the original would.
    pub opts: TrainOptions,
    /// Epochs finished.
    pub epochs_done: usize,
    /// Optimiser steps finished in epoch `epochs_done` (the one in progress).
    pub steps_done: usize,
    /// Optimiser steps in all.
    pub optimizer_steps: usize,
    generation: u64,
}

fn json_path(base: &Path) -> PathBuf {
    with_suffix(base, ".json")
}

fn with_suffix(base: &Path, suffix: &str) -> PathBuf {
    let mut s = base.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

fn data_paths(base: &Path, generation: u64) -> (PathBuf, PathBuf) {
    (
        with_suffix(base, &format!(".g{generation}.params.safetensors")),
        with_suffix(base, &format!(".g{generation}.adam.safetensors")),
    )
}

/// Whether a checkpoint exists at `base`.
pub fn checkpoint_exists(base: &Path) -> bool {
    json_path(base).exists()
}

fn read_meta(base: &Path) -> Result<CheckpointMeta, TrainError> {
    Ok(serde_json::from_slice(&std::fs::read(json_path(base))?)?)
}

/// Saves `trainer` after `epochs_done` epochs and `steps_done` steps of the next.
pub fn save_checkpoint(
    base: &Path,
    trainer: &Trainer,
    epochs_done: usize,
    steps_done: usize,
) -> Result<(), TrainError> {
    let previous = read_meta(base).ok().map(|m| m.generation);
    let generation = previous.map_or(0, |g| g + 1);
    let (params, adam) = data_paths(base, generation);
    trainer.draft.vars.save(&params)?;
    candle_core::safetensors::save(&trainer.opt.moments(), &adam)?;
    let meta = CheckpointMeta {
        config: trainer.draft.config.clone(),
        opts: trainer.opts.clone(),
        epochs_done,
        steps_done,
        optimizer_steps: trainer.steps(),
        generation,
    };
    // The data files must be on disk before the JSON that names them is.
    for f in [&params, &adam] {
        std::fs::File::open(f)?.sync_all()?;
    }
    specdec_fs::write_atomic(&json_path(base), &serde_json::to_vec_pretty(&meta)?)
        .map_err(std::io::Error::from)?;
    if let Some(g) = previous {
        let (p, a) = data_paths(base, g);
        for f in [p, a] {
            // A leftover file wastes space only; the JSON no longer names it.
            if let Err(e) = std::fs::remove_file(&f) {
                tracing::warn!(
                    "could not remove the old checkpoint file {}: {e}",
                    f.display()
                );
            }
        }
    }
    Ok(())
}

/// The trainer saved at `base` (draft, options and optimiser state) and its description.
pub fn load_checkpoint(base: &Path) -> Result<(Trainer, CheckpointMeta), TrainError> {
    let meta = read_meta(base)?;
    let (params, adam) = data_paths(base, meta.generation);
    let mut draft = Draft::new(meta.config.clone(), 0, None)?;
    draft.vars.load(&params)?;
    let moments = candle_core::safetensors::load(&adam, &candle_core::Device::Cpu)?;
    let mut trainer = Trainer::new(draft, meta.opts.clone())?;
    trainer.opt.restore(meta.optimizer_steps, &moments)?;
    Ok((trainer, meta))
}
