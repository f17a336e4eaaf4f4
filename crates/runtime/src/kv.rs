//! Per-sequence KV cache with a scratch area for draft nodes and commit.
//!
//! Rows `0..len` hold the committed tokens in order. A forward writes its nodes' keys and
//! values into the scratch rows `len..len + nodes` (node j at row `len + j`); `commit` then
//! gathers the accepted root-to-leaf path to rows `len..len + path.len()`. Accepted nodes
//! come in increasing flat order and land at or below their scratch row, so the gather is
//! in place and touches at most path-length rows per layer.

use crate::RuntimeError;

/// One sequence's cache and its bookkeeping.
#[derive(Clone)]
pub struct Sequence {
    pub(crate) len: usize,
    /// Per layer: keys then values, `capacity` rows of `kv_dim` floats each.
    pub(crate) k: Vec<Vec<f32>>,
    pub(crate) v: Vec<Vec<f32>>,
    kv_dim: usize,
    max_len: usize,
    /// Parent links of the last forward's nodes, to check commits against.
    pub(crate) pending: Vec<Option<u32>>,
    /// Tokens committed so far, in order.
    tokens: Vec<u32>,
    pending_tokens: Vec<u32>,
}

impl Sequence {
    pub(crate) fn new(n_layers: usize, kv_dim: usize, max_len: usize) -> Self {
        Sequence {
            len: 0,
            k: vec![Vec::new(); n_layers],
            v: vec![Vec::new(); n_layers],
            kv_dim,
            max_len,
            pending: Vec::new(),
            tokens: Vec::new(),
            pending_tokens: Vec::new(),
        }
    }

    /// Number of committed tokens.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The committed tokens.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// The context length of the model this sequence belongs to.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// Makes room for `extra` scratch rows after the committed prefix.
    pub(crate) fn reserve(&mut self, extra: usize) -> Result<(), RuntimeError> {
        let need = self.len + extra;
        if need > self.max_len {
            return Err(RuntimeError::ContextOverflow {
                needed: need,
                limit: self.max_len,
            });
        }
        let rows = need * self.kv_dim;
        for buf in self.k.iter_mut().chain(self.v.iter_mut()) {
            if buf.len() < rows {
                // Grow geometrically so long generations do not reallocate every step.
                let target = rows.max(buf.len() * 3 / 2).min(self.max_len * self.kv_dim);
                buf.resize(target, 0.0);
            }
        }
        Ok(())
    }

    pub(crate) fn set_pending(&mut self, nodes: &[crate::Node]) {
        self.pending.clear();
        self.pending.extend(nodes.iter().map(|n| n.parent));
        self.pending_tokens.clear();
        self.pending_tokens.extend(nodes.iter().map(|n| n.token));
    }

    /// Keeps the last forward's nodes `path` (a chain: the first a root, each next one a
    /// child of the previous) as committed tokens and drops every other node.
    pub fn commit(&mut self, path: &[usize]) -> Result<(), RuntimeError> {
        let mut prev: Option<u32> = None;
        for &j in path {
            let ok = j < self.pending.len() && self.pending[j] == prev;
            if !ok {
                return Err(RuntimeError::BadCommit(format!(
                    "node {j} is not a child of {prev:?} in the last forward"
                )));
            }
            prev = Some(j as u32);
        }
        let d = self.kv_dim;
        for (depth, &j) in path.iter().enumerate() {
            if j != depth {
                let (src, dst) = ((self.len + j) * d, (self.len + depth) * d);
                for buf in self.k.iter_mut().chain(self.v.iter_mut()) {
                    buf.copy_within(src..src + d, dst);
                }
            }
            self.tokens.push(self.pending_tokens[j]);
        }
        self.len += path.len();
        self.pending.clear();
        self.pending_tokens.clear();
        Ok(())
    }

    /// Commits every node of the last forward, which must have been a single chain.
    pub fn commit_all(&mut self) -> Result<(), RuntimeError> {
        let path: Vec<usize> = (0..self.pending.len()).collect();
        self.commit(&path)
    }

    /// Drops committed tokens after `len` (rollback to an earlier state).
    pub fn truncate(&mut self, len: usize) {
        if len < self.len {
            self.len = len;
            self.tokens.truncate(len);
        }
        self.pending.clear();
        self.pending_tokens.clear();
    }
}
