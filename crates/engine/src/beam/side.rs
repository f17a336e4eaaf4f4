//! One model's view of a beam: its cache, the tokens not yet in it, and the logits
//! already known ahead of it.

use std::collections::VecDeque;

use specdec_runtime::{Logits, Sequence};

/// The logits of one node of a forward (shared with the rest of that forward's rows).
#[derive(Clone, Debug)]
pub(crate) struct Row {
    logits: Logits,
    node: usize,
}

impl Row {
    pub fn new(logits: &Logits, node: usize) -> Self {
        debug_assert!(logits.get(node).is_some(), "node {node} has no logits");
        Row {
            logits: logits.clone(),
            node,
        }
    }

    pub fn get(&self) -> &[f32] {
        self.logits.get(self.node).expect("checked at creation")
    }
}

/// A beam's state on one model.
///
/// Either `pending` holds tokens of the beam the cache has not seen (and nothing is
/// known ahead), or the cache holds the whole beam and `ahead[0]` is the distribution of
/// its next token; then the cache may also hold `extra`, tokens the catalogue forces
/// after the beam (jump-forward), with `ahead[j]` the distribution after `extra[..j]`.
#[derive(Clone)]
pub(crate) struct Side {
    pub seq: Sequence,
    pub pending: Vec<u32>,
    pub ahead: VecDeque<Row>,
    pub extra: Vec<u32>,
}

impl Side {
    pub fn new(seq: Sequence, pending: Vec<u32>) -> Self {
        Side {
            seq,
            pending,
            ahead: VecDeque::new(),
            extra: Vec::new(),
        }
    }

    /// This side after `tokens` more of the beam: what is known ahead no longer applies
    /// unless nothing was added.
    pub fn advanced(&self, tokens: &[u32]) -> Side {
        if tokens.is_empty() {
            return self.clone();
        }
        debug_assert!(self.extra.is_empty(), "only a target side runs ahead");
        let mut pending = self.pending.clone();
        pending.extend_from_slice(tokens);
        Side::new(self.seq.fork(), pending)
    }

    /// After a forward of `pending` as one chain: the cache has it all, and its last row's
    /// logits are known.
    pub fn absorb(&mut self, logits: &Logits) -> Result<(), specdec_runtime::RuntimeError> {
        self.seq.commit_all()?;
        let last = self.pending.len() - 1;
        self.pending.clear();
        self.ahead.clear();
        self.ahead.push_back(Row::new(logits, last));
        Ok(())
    }
}
