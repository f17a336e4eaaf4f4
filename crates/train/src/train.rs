//! The training loop's pieces: a batch built from teacher users, one optimiser step,
//! seeded epoch orders, and checkpoints.
//!
//! A batch holds, per user, one sequence per teacher beam (prompt + the beam but its last
//! token) and one for the ground truth, right-padded to the longest (the attention is
//! causal, so padding after a sequence never reaches its rows). One draft forward gives
//! the rows the losses read: each teacher position once, and each ground-truth position.

use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use candle_nn::{AdamW, Optimizer, ParamsAdamW};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};

use crate::loss::{self, Objective};
use crate::model::{Draft, DraftConfig};
use crate::teacher::TeacherUser;
use crate::TrainError;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainOptions {
    pub objective: Objective,
    /// Weight of the alignment loss (ignored by CE).
    pub alpha: f64,
    pub learning_rate: f64,
    pub users_per_step: usize,
    pub epochs: usize,
    pub seed: u64,
}

impl TrainOptions {
    pub fn new(objective: Objective, alpha: f64) -> Self {
        TrainOptions {
            objective,
            alpha,
            learning_rate: 1e-3,
            users_per_step: 4,
            epochs: 3,
            seed: 0,
        }
    }
}

/// A batch's tensors.
pub struct Batch {
    /// `[sequences, len]` token ids.
    pub tokens: Tensor,
    /// Flat row indices (`sequence * len + position`) of the teacher positions, then of
    /// the ground-truth positions.
    pub rows: Vec<u32>,
    pub n_align: usize,
    /// `[n_align, width]`: allowed tokens, mask, target log p renormalised over them.
    pub allowed: Tensor,
    pub mask: Tensor,
    pub log_p: Tensor,
    /// `[rows - n_align]`: the ground-truth tokens.
    pub truth: Tensor,
}

impl Batch {
    pub fn new(users: &[&TeacherUser]) -> Result<Batch, TrainError> {
        let mut seqs: Vec<Vec<u32>> = Vec::new();
        // (sequence, position in it, allowed) per teacher position; (sequence, position,
        // token) per ground-truth position.
        let mut align = Vec::new();
        let mut truth = Vec::new();
        for u in users {
            let base = seqs.len();
            let p = u.prompt.len();
            for b in &u.beams {
                seqs.push([&u.prompt[..], &b[..b.len() - 1]].concat());
            }
            for pos in &u.positions {
                align.push((base + pos.beam, p - 1 + pos.depth, &pos.allowed));
            }
            let s = seqs.len();
            seqs.push([&u.prompt[..], &u.truth[..u.truth.len() - 1]].concat());
            for (j, &t) in u.truth.iter().enumerate() {
                truth.push((s, p - 1 + j, t));
            }
        }
        let len = seqs.iter().map(Vec::len).max().unwrap_or(0);
        let flat: Vec<u32> = seqs
            .iter()
            .flat_map(|s| s.iter().copied().chain(std::iter::repeat(0)).take(len))
            .collect();
        let width = align.iter().map(|a| a.2.len()).max().unwrap_or(1).max(1);
        let n_align = align.len();
        let (mut allowed, mut mask, mut log_p) = (
            vec![0u32; n_align * width],
            vec![0f32; n_align * width],
            vec![0f32; n_align * width],
        );
        let mut rows = Vec::with_capacity(n_align + truth.len());
        for (r, (s, pos, a)) in align.iter().enumerate() {
            rows.push((s * len + pos) as u32);
            let lse = log_sum_exp(a.iter().map(|x| x.1 as f64));
            for (i, &(t, lp)) in a.iter().enumerate() {
                allowed[r * width + i] = t;
                mask[r * width + i] = 1.0;
                log_p[r * width + i] = (lp as f64 - lse) as f32;
            }
        }
        rows.extend(truth.iter().map(|&(s, pos, _)| (s * len + pos) as u32));
        let truth: Vec<u32> = truth.iter().map(|t| t.2).collect();
        let dev = &Device::Cpu;
        Ok(Batch {
            tokens: Tensor::from_vec(flat, (seqs.len(), len), dev)?,
            rows,
            n_align,
            allowed: Tensor::from_vec(allowed, (n_align, width), dev)?,
            mask: Tensor::from_vec(mask, (n_align, width), dev)?,
            log_p: Tensor::from_vec(log_p, (n_align, width), dev)?,
            truth: Tensor::new(truth.as_slice(), dev)?,
        })
    }
}

fn log_sum_exp(xs: impl Iterator<Item = f64> + Clone) -> f64 {
    let m = xs.clone().fold(f64::NEG_INFINITY, f64::max);
    m + xs.map(|x| (x - m).exp()).sum::<f64>().ln()
}

/// One step's losses.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepLoss {
    pub total: f64,
    pub ce: f64,
    pub align: f64,
}

/// The loss of `draft` on `batch` under `opts` (a scalar tensor to differentiate).
pub fn batch_loss(
    draft: &Draft,
    batch: &Batch,
    opts: &TrainOptions,
) -> Result<(Tensor, StepLoss), TrainError> {
    let logits = draft.logits_at(&batch.tokens, &batch.rows)?;
    let n = batch.rows.len();
    let ce = loss::cross_entropy(
        &logits.narrow(0, batch.n_align, n - batch.n_align)?,
        &batch.truth,
    )?;
    let alpha = match opts.objective {
        Objective::Ce => 0.0,
        _ => opts.alpha,
    };
    let (total, align) = if alpha > 0.0 && batch.n_align > 0 {
        let at = logits
            .narrow(0, 0, batch.n_align)?
            .gather(&batch.allowed, 1)?;
        let log_q = loss::masked_log_softmax(&at, &batch.mask)?;
        let align = loss::align(opts.objective, &log_q, &batch.log_p, &batch.mask)?;
        (((&ce * (1.0 - alpha))? + (&align * alpha)?)?, Some(align))
    } else {
        (ce.clone(), None)
    };
    let scalar = |t: &Tensor| -> Result<f64, TrainError> { Ok(t.to_scalar::<f32>()? as f64) };
    let losses = StepLoss {
        total: scalar(&total)?,
        ce: scalar(&ce)?,
        align: align.as_ref().map(scalar).transpose()?.unwrap_or(0.0),
    };
    Ok((total, losses))
}

/// A draft and its optimiser.
pub struct Trainer {
    pub draft: Draft,
    pub opts: TrainOptions,
    opt: AdamW,
}

impl Trainer {
    pub fn new(draft: Draft, opts: TrainOptions) -> Result<Self, TrainError> {
        let params = ParamsAdamW {
            lr: opts.learning_rate,
            weight_decay: 0.0,
            ..ParamsAdamW::default()
        };
        let opt = AdamW::new(draft.vars_in_order(), params)?;
        Ok(Trainer { draft, opts, opt })
    }

    /// One optimiser step on `users`.
    pub fn step(&mut self, users: &[&TeacherUser]) -> Result<StepLoss, TrainError> {
        let batch = Batch::new(users)?;
        let (loss, losses) = batch_loss(&self.draft, &batch, &self.opts)?;
        self.opt.backward_step(&loss)?;
        Ok(losses)
    }

    /// The order users are visited in epoch `epoch`: a permutation seeded by the seed and
    /// the epoch, so a resumed run visits what an uninterrupted one would.
    pub fn epoch_order(&self, users: usize, epoch: usize) -> Vec<usize> {
        let mut order: Vec<usize> = (0..users).collect();
        let seed = self.opts.seed ^ (epoch as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        order.shuffle(&mut rand::rngs::StdRng::seed_from_u64(seed));
        order
    }
}

/// What a checkpoint records beside the parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckpointMeta {
    pub config: DraftConfig,
    pub opts: TrainOptions,
    /// Epochs finished.
    pub epochs_done: usize,
}

/// A checkpoint's two files: the parameters (safetensors) and their description (JSON).
pub fn checkpoint_paths(base: &Path) -> (PathBuf, PathBuf) {
    let mut json = base.as_os_str().to_owned();
    json.push(".json");
    (base.to_path_buf(), PathBuf::from(json))
}

/// Saves `draft` after `epochs_done` epochs (the JSON last, so a present JSON means the
/// parameters beside it are whole). Adam's moments are not saved: a resumed run restarts
/// them at the epoch boundary.
pub fn save_checkpoint(
    base: &Path,
    draft: &Draft,
    opts: &TrainOptions,
    epochs_done: usize,
) -> Result<(), TrainError> {
    let (st, json) = checkpoint_paths(base);
    draft.vars.save(&st)?;
    let meta = CheckpointMeta {
        config: draft.config.clone(),
        opts: opts.clone(),
        epochs_done,
    };
    std::fs::write(&json, serde_json::to_vec_pretty(&meta)?)?;
    Ok(())
}

/// The draft saved at `base` and its description.
pub fn load_checkpoint(base: &Path) -> Result<(Draft, CheckpointMeta), TrainError> {
    let (st, json) = checkpoint_paths(base);
    let meta: CheckpointMeta = serde_json::from_slice(&std::fs::read(&json)?)?;
    let mut draft = Draft::new(meta.config.clone(), 0, None)?;
    draft.vars.load(&st)?;
    Ok((draft, meta))
}
