//! Per-sequence KV cache with a scratch area for draft nodes and commit.
//!
//! Positions `0..len` hold the committed tokens in order. A forward writes its nodes' keys
//! and values at the scratch positions `len..len + nodes` (node j at `len + j`); `commit`
//! then gathers the accepted root-to-leaf path to positions `len..len + path.len()`.
//! Accepted nodes come in increasing flat order and land at or below their scratch
//! position, so the gather is in place and touches at most path-length positions.
//!
//! Each KV head has its own buffers, so attention for one head streams contiguous memory.
//! Keys are stored transposed in blocks of 16 positions (`[block][head_dim][16]`) so that
//! attention scores vectorize across positions and growing the cache only appends blocks;
//! values are stored by position (`[capacity][head_dim]`) so weighted sums vectorize
//! across elements.

use specdec_kernels::kt_index;

use crate::RuntimeError;

/// One sequence's cache and its bookkeeping.
#[derive(Clone)]
pub struct Sequence {
    /// Per layer and KV head, keys in blocks: element d of position p at
    /// `kt_index(p, d, head_dim * 16)`.
    pub(crate) k: Vec<Vec<Vec<f32>>>,
    /// Per layer and KV head, values by position: element d of position p at
    /// `p * head_dim + d`.
    pub(crate) v: Vec<Vec<Vec<f32>>>,
    /// Positions allocated.
    cap: usize,
    head_dim: usize,
    max_len: usize,
    /// The last forward's nodes, to check commits against and take tokens from.
    pending: Vec<crate::Node>,
    /// Tokens committed so far, in order (their count is the committed length).
    tokens: Vec<u32>,
}

impl Sequence {
    pub(crate) fn new(n_layers: usize, n_kv: usize, head_dim: usize, max_len: usize) -> Self {
        Sequence {
            k: vec![vec![Vec::new(); n_kv]; n_layers],
            v: vec![vec![Vec::new(); n_kv]; n_layers],
            cap: 0,
            head_dim,
            max_len,
            pending: Vec::new(),
            tokens: Vec::new(),
        }
    }

    /// Number of committed tokens.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The committed tokens.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// The context length of the model this sequence belongs to.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// Makes room for `extra` scratch positions after the committed prefix.
    pub(crate) fn reserve(&mut self, extra: usize) -> Result<(), RuntimeError> {
        let need = self.len() + extra;
        if need > self.max_len {
            return Err(RuntimeError::ContextOverflow {
                needed: need,
                limit: self.max_len,
            });
        }
        if need <= self.cap {
            return Ok(());
        }
        // Grow geometrically (in whole key blocks) so long generations reallocate rarely.
        let cap = need
            .max(self.cap * 3 / 2)
            .max(64)
            .min(self.max_len)
            .next_multiple_of(16);
        let d = self.head_dim;
        for buf in self.k.iter_mut().chain(self.v.iter_mut()).flatten() {
            buf.resize(d * cap, 0.0);
        }
        self.cap = cap;
        Ok(())
    }

    /// Floats between consecutive key blocks.
    pub(crate) fn key_block_stride(&self) -> usize {
        self.head_dim * 16
    }

    /// Stores the key and value (all KV heads, `n_kv × head_dim` each) of position `pos`.
    pub(crate) fn write(&mut self, layer: usize, pos: usize, key: &[f32], value: &[f32]) {
        let (hd, bs) = (self.head_dim, self.key_block_stride());
        for (g, kg) in self.k[layer].iter_mut().enumerate() {
            for (d, &x) in key[g * hd..(g + 1) * hd].iter().enumerate() {
                kg[kt_index(pos, d, bs)] = x;
            }
        }
        for (g, vg) in self.v[layer].iter_mut().enumerate() {
            vg[pos * hd..(pos + 1) * hd].copy_from_slice(&value[g * hd..(g + 1) * hd]);
        }
    }

    pub(crate) fn set_pending(&mut self, nodes: &[crate::Node]) {
        self.pending.clear();
        self.pending.extend_from_slice(nodes);
    }

    /// Keeps the last forward's nodes `path` (a chain: the first a root, each next one a
    /// child of the previous) as committed tokens and drops every other node.
    pub fn commit(&mut self, path: &[usize]) -> Result<(), RuntimeError> {
        if let Some(k) = specdec_tree::chain_break(&self.pending, path) {
            let prev = k.checked_sub(1).map(|i| path[i]);
            return Err(RuntimeError::BadCommit(format!(
                "node {} is not a child of {prev:?} in the last forward",
                path[k]
            )));
        }
        let (d, bs) = (self.head_dim, self.key_block_stride());
        let base = self.len();
        for (depth, &j) in path.iter().enumerate() {
            if j != depth {
                let (src, dst) = (base + j, base + depth);
                for k in self.k.iter_mut().flatten() {
                    for e in 0..d {
                        k[kt_index(dst, e, bs)] = k[kt_index(src, e, bs)];
                    }
                }
                for v in self.v.iter_mut().flatten() {
                    v.copy_within(src * d..(src + 1) * d, dst * d);
                }
            }
            self.tokens.push(self.pending[j].token);
        }
        self.pending.clear();
        Ok(())
    }

    /// Commits every node of the last forward, which must have been a single chain.
    pub fn commit_all(&mut self) -> Result<(), RuntimeError> {
        let path: Vec<usize> = (0..self.pending.len()).collect();
        self.commit(&path)
    }

    /// A copy holding only the first `len` committed tokens, for a request that shares
    /// that prefix: it continues exactly as this sequence would have from there.
    pub fn prefix(&self, len: usize) -> Sequence {
        let len = len.min(self.len());
        // Whole key blocks; `self.cap` is a multiple of 16 and at least `len`.
        let cap = len.next_multiple_of(16).min(self.cap);
        let floats = self.head_dim * cap;
        let copy = |bufs: &Vec<Vec<Vec<f32>>>| -> Vec<Vec<Vec<f32>>> {
            bufs.iter()
                .map(|layer| layer.iter().map(|b| b[..floats].to_vec()).collect())
                .collect()
        };
        Sequence {
            k: copy(&self.k),
            v: copy(&self.v),
            cap,
            head_dim: self.head_dim,
            max_len: self.max_len,
            pending: Vec::new(),
            tokens: self.tokens[..len].to_vec(),
        }
    }

    /// Bytes of cache memory this sequence holds.
    pub fn memory_bytes(&self) -> usize {
        let per_buf = self.head_dim * self.cap * std::mem::size_of::<f32>();
        per_buf * self.k.iter().chain(&self.v).map(Vec::len).sum::<usize>()
    }

    /// Drops committed tokens after `len` (rollback to an earlier state).
    pub fn truncate(&mut self, len: usize) {
        self.tokens.truncate(len);
        self.pending.clear();
    }
}
