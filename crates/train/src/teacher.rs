//! Teacher data: for each training user, the target's K beams from plain constrained beam
//! search and, at every position along them, the target's log-probabilities of the tokens
//! the catalogue trie allows there; plus the user's ground-truth next item.
//!
//! Log-probabilities are the target's log-softmax over the *whole* vocabulary (what beam
//! search scores with), not renormalised over the allowed set: the losses renormalise.
//! Beams that share a prefix share its positions: each trie node reached is stored once.
//! Everything is computed through specdec's own runtime, whose forward is deterministic,
//! so the same inputs give the same file.

use std::collections::HashSet;
use std::path::Path;

use serde::{Deserialize, Serialize};
use specdec_engine::beam::{log_normaliser, BeamOptions, BeamRunner, Catalogue};
use specdec_engine::Target;
use specdec_runtime::{Node, SeqInput, Want};

use crate::TrainError;

/// What a teacher file was made from: a cached file is reused only for the same key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TeacherKey {
    /// The target (for example its file name and size).
    pub model: String,
    /// Beam width: beams per user.
    pub k: usize,
    /// Which users, described (for example "valid targets, first 100").
    pub users: String,
    /// What the file holds: files of an older layout are regenerated, not misread.
    #[serde(default)]
    pub format: u32,
}

/// The layout [`generate`] writes (2: with the ground truth's choices).
pub const FORMAT: u32 = 2;

/// One position along a beam: after the prompt and `beam`'s first `depth` tokens.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Position {
    /// Index of the first beam (in [`TeacherUser::beams`]) through this position.
    pub beam: usize,
    /// Tokens of that beam before the position.
    pub depth: usize,
    /// The allowed tokens, by id, with the target's log-probability of each.
    pub allowed: Vec<(u32, f32)>,
}

/// One training user's teacher data.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TeacherUser {
    /// The user's id.
    pub user: u32,
    /// The user's prompt, tokenized.
    pub prompt: Vec<u32>,
    /// The ground-truth item's tokens, its end token last.
    pub truth: Vec<u32>,
    /// The target's K best items' tokens, best first, and their scores.
    pub beams: Vec<Vec<u32>>,
    /// Each beam's score (summed log-probability), in the same order.
    pub scores: Vec<f64>,
    /// Every distinct position along the beams.
    pub positions: Vec<Position>,
    /// Where the catalogue leaves the ground truth a choice: its depth and the allowed
    /// tokens there (the truth's own is `truth[depth]`).
    #[serde(default)]
    pub truth_choices: Vec<(usize, Vec<u32>)>,
}

/// A teacher file: what it was made from and every user's data.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TeacherData {
    /// What the file was made from.
    pub key: TeacherKey,
    /// One entry per training user, in the order given.
    pub users: Vec<TeacherUser>,
}

/// A user to make teacher data for.
pub struct TeacherCase {
    /// The user's id.
    pub user: u32,
    /// The user's prompt, tokenized.
    pub prompt: Vec<u32>,
    /// The ground-truth item's tokens, its end token last.
    pub truth: Vec<u32>,
}

/// Teacher data for `cases`: plain constrained beam search of width `k` on `target`, then
/// one forward per user (all its beams forked from one prefill) for the distributions.
/// `progress` is called after each user.
pub fn generate(
    target: &dyn Target,
    cat: &Catalogue,
    cases: &[TeacherCase],
    key: TeacherKey,
    mut progress: impl FnMut(usize),
) -> Result<TeacherData, TrainError> {
    let mut runner = BeamRunner::new(target, None)?;
    // Jump-forward returns plain beam search's list with fewer forwards.
    let opts = BeamOptions::jump_forward(key.k);
    let mut users = Vec::with_capacity(cases.len());
    for (i, case) in cases.iter().enumerate() {
        let out = runner
            .run(cat, std::slice::from_ref(&case.prompt), &opts)?
            .pop()
            .expect("one output per prompt");
        let beams: Vec<Vec<u32>> = out.items.iter().map(|r| r.tokens.clone()).collect();
        let scores = out.items.iter().map(|r| r.score).collect();
        let positions = beam_positions(target, cat, &case.prompt, &beams)?;
        users.push(TeacherUser {
            user: case.user,
            prompt: case.prompt.clone(),
            truth: case.truth.clone(),
            beams,
            scores,
            positions,
            truth_choices: truth_choices(cat, &case.truth)?,
        });
        progress(i + 1);
    }
    Ok(TeacherData { key, users })
}

/// The target's allowed-token log-probabilities at every distinct position along `beams`.
fn beam_positions(
    target: &dyn Target,
    cat: &Catalogue,
    prompt: &[u32],
    beams: &[Vec<u32>],
) -> Result<Vec<Position>, TrainError> {
    let mut prefilled = target.new_sequence();
    let chain = Node::chain(prompt);
    let root = target.forward(&mut [SeqInput {
        seq: &mut prefilled,
        nodes: &chain,
        want: Want::Last,
    }])?;
    prefilled.commit_all()?;
    let root_row = root[0].get(prompt.len() - 1).expect("last row").to_vec();
    // Each beam but its last token, forked from the prompt's cache, in one forward.
    let chains: Vec<Vec<Node>> = beams
        .iter()
        .map(|b| Node::chain(&b[..b.len() - 1]))
        .collect();
    let mut seqs: Vec<_> = beams.iter().map(|_| prefilled.fork()).collect();
    let logits = {
        let mut inputs: Vec<SeqInput<'_>> = seqs
            .iter_mut()
            .zip(&chains)
            .filter(|(_, c)| !c.is_empty())
            .map(|(seq, nodes)| SeqInput {
                seq,
                nodes,
                want: Want::All,
            })
            .collect();
        target.forward(&mut inputs)?
    };
    let mut logits = logits.into_iter();
    let mut seen = HashSet::new();
    let mut positions = Vec::new();
    for (b, beam) in beams.iter().enumerate() {
        let rows = (beam.len() > 1).then(|| logits.next().expect("one per non-empty chain"));
        let mut node = Catalogue::ROOT;
        for (depth, &tok) in beam.iter().enumerate() {
            if seen.insert(node) {
                let row = match (&rows, depth) {
                    (_, 0) => &root_row[..],
                    (Some(l), d) => l.get(d - 1).expect("every node wanted"),
                    (None, _) => unreachable!("a one-token beam has depth 0 only"),
                };
                let lse = log_normaliser(row);
                let allowed = cat
                    .children(node)
                    .iter()
                    .map(|&(t, _)| (t, (row[t as usize] as f64 - lse) as f32))
                    .collect();
                positions.push(Position {
                    beam: b,
                    depth,
                    allowed,
                });
            }
            node = cat.child(node, tok).ok_or_else(|| {
                TrainError::Teacher(format!("beam {b} leaves the catalogue at depth {depth}"))
            })?;
        }
    }
    Ok(positions)
}

/// The ground truth's choices along its trie path.
fn truth_choices(cat: &Catalogue, truth: &[u32]) -> Result<Vec<(usize, Vec<u32>)>, TrainError> {
    let mut node = Catalogue::ROOT;
    let mut out = Vec::new();
    for (depth, &tok) in truth.iter().enumerate() {
        let kids = cat.children(node);
        if kids.len() > 1 {
            out.push((depth, kids.iter().map(|&(t, _)| t).collect()));
        }
        node = cat.child(node, tok).ok_or_else(|| {
            TrainError::Teacher(format!(
                "the ground truth leaves the catalogue at depth {depth}"
            ))
        })?;
    }
    Ok(out)
}

impl TeacherData {
    /// Writes the data as JSON, atomically (a crash leaves the old file or the new one).
    pub fn save(&self, path: &Path) -> Result<(), TrainError> {
        specdec_fs::write_atomic(path, &serde_json::to_vec(self)?).map_err(std::io::Error::from)?;
        Ok(())
    }

    /// Reads a file [`TeacherData::save`] wrote.
    pub fn load(path: &Path) -> Result<Self, TrainError> {
        Ok(serde_json::from_slice(&std::fs::read(path)?)?)
    }

    /// The cached file at `path` when it was made for `key`, else `None`.
    pub fn load_if(path: &Path, key: &TeacherKey) -> Result<Option<Self>, TrainError> {
        if !path.exists() {
            return Ok(None);
        }
        let data = Self::load(path)?;
        Ok((data.key == *key).then_some(data))
    }
}
