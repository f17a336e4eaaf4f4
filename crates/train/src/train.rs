//! The training loop's pieces: a batch built from teacher users, one optimiser step and
//! seeded epoch orders.
//!
//! A batch holds one tree per user (see [`Batch`]); one draft forward gives the rows the
//! losses read: each teacher position with a choice once, and each of the ground truth's.

use std::collections::{BTreeMap, HashMap};

use candle_core::{Device, Tensor};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};

use crate::loss::{self, Objective};
use crate::model::{Draft, Layout};
use crate::optim::{AdamW, ParamsAdamW};
use crate::teacher::TeacherUser;
use crate::TrainError;

/// How a draft is trained: objective, loss weight and optimisation schedule.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainOptions {
    /// The alignment objective.
    pub objective: Objective,
    /// Weight of the alignment loss (ignored by CE).
    pub alpha: f64,
    /// AdamW's learning rate.
    pub learning_rate: f64,
    /// Users per optimiser step (one batch).
    pub users_per_step: usize,
    /// Passes over the teacher data.
    pub epochs: usize,
    /// Seeds each epoch's user order.
    pub seed: u64,
}

impl TrainOptions {
    /// `objective` with alignment weight `alpha`, and the default schedule: learning rate
    /// 1e-3, 4 users per step, 3 epochs, seed 0.
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

/// A batch's tensors. Each user is one row of the batch holding a tree: the prompt, then
/// its teacher beams and its ground truth as branches sharing their common prefixes, so
/// the prompt is computed once per user, not once per beam.
///
/// Only positions where the catalogue leaves a choice are read, and only over the tokens
/// it allows there: the draft is used under the catalogue's constraint (it scores trie
/// children renormalised, `specdec.draft.scoring = catalogue`), a forced token carries no
/// loss, and the logits head is computed over the batch's allowed tokens alone.
pub struct Batch {
    /// `[users, len]` token ids and their tree layout.
    pub tokens: Tensor,
    /// Positions and attention of each row's tree.
    pub layout: Layout,
    /// Flat row indices (`user * len + node`) of the teacher positions, then of the
    /// ground truth's.
    pub rows: Vec<u32>,
    /// How many of `rows` are teacher positions (the rest are the ground truth's).
    pub n_align: usize,
    /// `[columns]`: every token allowed at some row.
    pub columns: Tensor,
    /// `[rows, width]`: each row's allowed tokens as indices into `columns`, and a mask.
    pub allowed: Tensor,
    /// `[rows, width]`: 1 on `allowed`'s real entries, 0 on padding.
    pub mask: Tensor,
    /// `[n_align, width]`: the target's log p renormalised over the allowed tokens.
    pub log_p: Tensor,
    /// `[rows - n_align]`: the ground truth's token as an index into its row's allowed.
    pub truth: Tensor,
}

/// One user's tree: tokens, parents, and a lookup of children.
#[derive(Default)]
struct Tree {
    tokens: Vec<u32>,
    parents: Vec<Option<usize>>,
    children: HashMap<(usize, u32), usize>,
}

impl Tree {
    fn new(prompt: &[u32]) -> Tree {
        let mut t = Tree::default();
        for (i, &tok) in prompt.iter().enumerate() {
            t.tokens.push(tok);
            t.parents.push(i.checked_sub(1));
        }
        t
    }

    /// The nodes of `tokens` below node `from`, added where missing.
    fn path(&mut self, from: usize, tokens: &[u32]) -> Vec<usize> {
        let mut at = from;
        tokens
            .iter()
            .map(|&tok| {
                at = *self.children.entry((at, tok)).or_insert_with(|| {
                    self.tokens.push(tok);
                    self.parents.push(Some(at));
                    self.tokens.len() - 1
                });
                at
            })
            .collect()
    }
}

/// A row the losses read: its node, its allowed tokens, and what it is scored against.
struct Read {
    user: usize,
    node: usize,
    allowed: Vec<u32>,
    /// The target's log-probabilities of `allowed` (teacher rows).
    log_p: Option<Vec<f32>>,
    /// The ground truth's index in `allowed` (truth rows).
    truth: Option<u32>,
}

impl Batch {
    /// The batch of `users`, one tree per user; an error if a user's teacher data does not
    /// fit its beams and ground truth.
    pub fn new(users: &[&TeacherUser]) -> Result<Batch, TrainError> {
        let mut trees = Vec::with_capacity(users.len());
        let (mut align, mut truth) = (Vec::new(), Vec::new());
        for (ui, u) in users.iter().enumerate() {
            if u.prompt.is_empty() {
                return Err(TrainError::Teacher(format!(
                    "user {} has no prompt",
                    u.user
                )));
            }
            let mut tree = Tree::new(&u.prompt);
            let last = u.prompt.len() - 1;
            // The node after a prefix of `ids`' tokens (depth 0: the prompt's last).
            let at = |ids: &[usize], depth: usize| match depth {
                0 => Some(last),
                d => ids.get(d - 1).copied(),
            };
            let beams: Vec<Vec<usize>> = u
                .beams
                .iter()
                .map(|b| tree.path(last, &b[..b.len().saturating_sub(1)]))
                .collect();
            for pos in u.positions.iter().filter(|p| p.allowed.len() > 1) {
                let node = beams
                    .get(pos.beam)
                    .and_then(|ids| at(ids, pos.depth))
                    .ok_or_else(|| bad_position(u, pos.beam, pos.depth))?;
                align.push(Read {
                    user: ui,
                    node,
                    allowed: pos.allowed.iter().map(|a| a.0).collect(),
                    log_p: Some(renormalised(&pos.allowed)),
                    truth: None,
                });
            }
            let ids = tree.path(last, &u.truth[..u.truth.len().saturating_sub(1)]);
            for (depth, allowed) in &u.truth_choices {
                let tok = u.truth.get(*depth).copied();
                let (Some(node), Some(i)) = (
                    at(&ids, *depth),
                    tok.and_then(|t| allowed.iter().position(|&a| a == t)),
                ) else {
                    return Err(TrainError::Teacher(format!(
                        "user {}: the ground truth has no allowed token at depth {depth}",
                        u.user
                    )));
                };
                truth.push(Read {
                    user: ui,
                    node,
                    allowed: allowed.clone(),
                    log_p: None,
                    truth: Some(i as u32),
                });
            }
            trees.push(tree);
        }
        let len = trees
            .iter()
            .map(|t| t.tokens.len())
            .max()
            .unwrap_or(0)
            .max(1);
        let flat: Vec<u32> = trees
            .iter()
            .flat_map(|t| {
                t.tokens
                    .iter()
                    .copied()
                    .chain(std::iter::repeat(0))
                    .take(len)
            })
            .collect();
        let parents: Vec<Vec<Option<usize>>> = trees.iter().map(|t| t.parents.clone()).collect();
        let layout = Layout::trees(&parents, len)?;
        let n_align = align.len();
        let reads: Vec<&Read> = align.iter().chain(&truth).collect();
        let mut columns: BTreeMap<u32, u32> = reads
            .iter()
            .flat_map(|r| r.allowed.iter().map(|&t| (t, 0)))
            .collect();
        for (i, c) in columns.values_mut().enumerate() {
            *c = i as u32;
        }
        let width = reads
            .iter()
            .map(|r| r.allowed.len())
            .max()
            .unwrap_or(1)
            .max(1);
        let n = reads.len();
        let (mut allowed, mut mask) = (vec![0u32; n * width], vec![0f32; n * width]);
        let mut log_p = vec![0f32; n_align * width];
        for (r, read) in reads.iter().enumerate() {
            for (i, t) in read.allowed.iter().enumerate() {
                allowed[r * width + i] = columns[t];
                mask[r * width + i] = 1.0;
            }
            if let Some(lp) = &read.log_p {
                log_p[r * width..][..lp.len()].copy_from_slice(lp);
            }
        }
        let rows = reads
            .iter()
            .map(|r| (r.user * len + r.node) as u32)
            .collect();
        let truth: Vec<u32> = truth.iter().filter_map(|r| r.truth).collect();
        let columns: Vec<u32> = columns.into_keys().collect();
        let dev = &Device::Cpu;
        Ok(Batch {
            tokens: Tensor::from_vec(flat, (trees.len(), len), dev)?,
            layout,
            rows,
            n_align,
            columns: Tensor::new(columns.as_slice(), dev)?,
            allowed: Tensor::from_vec(allowed, (n, width), dev)?,
            mask: Tensor::from_vec(mask, (n, width), dev)?,
            log_p: Tensor::from_vec(log_p, (n_align, width), dev)?,
            truth: Tensor::new(truth.as_slice(), dev)?,
        })
    }
}

fn bad_position(u: &TeacherUser, beam: usize, depth: usize) -> TrainError {
    TrainError::Teacher(format!(
        "user {}: position (beam {beam}, depth {depth}) is not on a beam",
        u.user
    ))
}

/// Log-probabilities renormalised over the listed tokens.
fn renormalised(allowed: &[(u32, f32)]) -> Vec<f32> {
    let m = allowed
        .iter()
        .fold(f64::NEG_INFINITY, |m, a| m.max(a.1 as f64));
    let lse = m + allowed
        .iter()
        .map(|a| (a.1 as f64 - m).exp())
        .sum::<f64>()
        .ln();
    allowed.iter().map(|a| (a.1 as f64 - lse) as f32).collect()
}

/// One step's losses.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepLoss {
    /// The loss minimised: `(1 - alpha) * ce + alpha * align`.
    pub total: f64,
    /// Ground-truth cross-entropy.
    pub ce: f64,
    /// The alignment loss (0 when it is not used).
    pub align: f64,
}

/// The loss of `draft` on `batch` under `opts` (a scalar tensor to differentiate).
pub fn batch_loss(
    draft: &Draft,
    batch: &Batch,
    opts: &TrainOptions,
) -> Result<(Tensor, StepLoss), TrainError> {
    let logits = draft.logits_at(
        &batch.tokens,
        Some(&batch.layout),
        &batch.rows,
        Some(&batch.columns),
    )?;
    let log_q = loss::masked_log_softmax(&logits.gather(&batch.allowed, 1)?, &batch.mask)?;
    let n = batch.rows.len();
    let ce = if n > batch.n_align {
        loss::cross_entropy(
            &log_q.narrow(0, batch.n_align, n - batch.n_align)?,
            &batch.truth,
        )?
    } else {
        Tensor::zeros((), log_q.dtype(), log_q.device())?
    };
    let alpha = match opts.objective {
        Objective::Ce => 0.0,
        _ => opts.alpha,
    };
    let (total, align) = if alpha > 0.0 && batch.n_align > 0 {
        let log_q = log_q.narrow(0, 0, batch.n_align)?;
        let mask = batch.mask.narrow(0, 0, batch.n_align)?;
        let align = loss::align(opts.objective, &log_q, &batch.log_p, &mask)?;
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
    /// The draft being trained.
    pub draft: Draft,
    /// How it is trained.
    pub opts: TrainOptions,
    pub(crate) opt: AdamW,
}

impl Trainer {
    /// A trainer for `draft` with a fresh AdamW (moments zero, no weight decay).
    pub fn new(draft: Draft, opts: TrainOptions) -> Result<Self, TrainError> {
        let params = ParamsAdamW {
            lr: opts.learning_rate,
            weight_decay: 0.0,
            ..ParamsAdamW::default()
        };
        let opt = AdamW::new(draft.named_vars_in_order(), params)?;
        Ok(Trainer { draft, opts, opt })
    }

    /// One optimiser step on `users`.
    pub fn step(&mut self, users: &[&TeacherUser]) -> Result<StepLoss, TrainError> {
        let batch = Batch::new(users)?;
        let (loss, losses) = batch_loss(&self.draft, &batch, &self.opts)?;
        self.opt.backward_step(&loss)?;
        Ok(losses)
    }

    /// Optimiser steps taken so far (counting those before a resumed checkpoint).
    pub fn steps(&self) -> usize {
        self.opt.steps()
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
