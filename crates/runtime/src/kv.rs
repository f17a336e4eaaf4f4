//! Per-sequence KV cache with a scratch area for draft nodes, commit, and copy-on-write
//! forks.
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
//!
//! # Segments and forks
//!
//! The positions live in *segments*: runs of whole key blocks, each behind an `Arc`. The
//! last segment, the *tail*, is where a sequence writes; the earlier ones are frozen, and
//! each is read up to where the next begins. A sequence that never forks has one segment,
//! its tail, grown in place as before. A fork (`fork`, `clone`, `prefix`, `branch`)
//! shares every segment, the tail included, without copying. Nothing shared is ever
//! written: a sequence about to write to a shared tail first *splits* it, keeping the
//! shared segment frozen up to its last whole committed block and writing from there on
//! to a new tail of its own, into which the partial last block (and any scratch rows
//! still needed) is copied. A shared tail with fewer than [`MIN_SHARED_BLOCKS`] whole
//! committed blocks is copied whole instead, so chains of forks do not fragment the
//! cache into many tiny segments. Attention reads a sequence segment by segment with the
//! same per-score and per-value operations, in the same order, as over one buffer, so a
//! fork's logits are bit-identical to a full copy's.

use std::sync::Arc;

use specdec_kernels::{kt_index, AlignedF32};

use crate::sequence::{SequenceState, TokenLog};

/// Positions per key block.
const BLOCK: usize = 16;

/// A shared tail is split (its whole committed blocks kept shared) only from this many
/// blocks on; a shorter one is copied into the new tail.
pub(crate) const MIN_SHARED_BLOCKS: usize = 4;

/// Positions `start..start + cap` of every layer and KV head; `start` and `cap` are
/// multiples of 16.
///
/// One cache-line-aligned allocation holds, per layer and KV head
/// `b = layer * n_kv + head` in turn, its keys then its values, `head_dim · cap` floats
/// each. Keys are in blocks: element d of position p at `kt_index(p - start, d,
/// head_dim * 16)`; values by position: element d of position p at
/// `(p - start) * head_dim + d`. So every key block and value row starts on a cache line,
/// and one attention item's keys and values are one stream. (A `Vec` per layer and head
/// started 16 bytes into a line: one-row attention read a cold 1000-token cache 1.1x
/// slower, Zen 4.)
struct Segment {
    start: usize,
    cap: usize,
    /// Number of (layer, KV head) pairs.
    heads: usize,
    head_dim: usize,
    data: AlignedF32,
}

impl Segment {
    /// A zeroed segment.
    fn zeroed(start: usize, cap: usize, heads: usize, head_dim: usize) -> Segment {
        Segment {
            start,
            cap,
            heads,
            head_dim,
            data: AlignedF32::zeroed(2 * heads * head_dim * cap),
        }
    }

    fn end(&self) -> usize {
        self.start + self.cap
    }

    /// Floats of one head's keys (or values).
    fn span(&self) -> usize {
        self.head_dim * self.cap
    }

    fn k(&self, b: usize) -> &[f32] {
        let n = self.span();
        &self.data[2 * b * n..][..n]
    }

    fn v(&self, b: usize) -> &[f32] {
        let n = self.span();
        &self.data[(2 * b + 1) * n..][..n]
    }

    /// Keys and values of head `b`, writable.
    fn kv_mut(&mut self, b: usize) -> (&mut [f32], &mut [f32]) {
        let n = self.span();
        self.data[2 * b * n..(2 * b + 2) * n].split_at_mut(n)
    }

    /// This segment with room for `cap` positions (a multiple of 16), keeping the first
    /// `min(cap, self.cap)`: whole key blocks and value rows, so a prefix of each buffer.
    fn with_cap(&self, cap: usize) -> Segment {
        let mut new = Segment::zeroed(self.start, cap, self.heads, self.head_dim);
        let keep = self.head_dim * cap.min(self.cap);
        for b in 0..self.heads {
            let (k, v) = new.kv_mut(b);
            k[..keep].copy_from_slice(&self.k(b)[..keep]);
            v[..keep].copy_from_slice(&self.v(b)[..keep]);
        }
        new
    }
}

/// Positions `start..end` of one layer and KV head, stored contiguously: element d of
/// position p's key at `kt_index(p - start, d, stride)`, of its value at
/// `(p - start) * head_dim + d`.
pub(crate) struct Run<'a> {
    pub start: usize,
    pub end: usize,
    pub k: &'a [f32],
    pub v: &'a [f32],
}

/// One sequence's cache and its tokens: the CPU runtime's [`SequenceState`].
///
/// `Clone` is a fork: the copy shares the cache and either side's later writes leave the
/// other unchanged.
#[derive(Clone)]
pub(crate) struct KvCache {
    /// Frozen segments in position order; each is read up to the next one's start (the
    /// last one up to the tail's).
    frozen: Vec<Arc<Segment>>,
    /// The segment holding the partial last block and the scratch rows; written only
    /// while this sequence holds it alone. Its start is at most the committed length.
    tail: Arc<Segment>,
    n_kv: usize,
    head_dim: usize,
    /// The committed tokens (their count is the committed length) and the last forward's
    /// nodes, to check commits against and take tokens from.
    log: TokenLog,
}

impl KvCache {
    pub(crate) fn new(n_layers: usize, n_kv: usize, head_dim: usize, max_len: usize) -> Self {
        KvCache {
            frozen: Vec::new(),
            tail: Arc::new(Segment::zeroed(0, 0, n_layers * n_kv, head_dim)),
            n_kv,
            head_dim,
            log: TokenLog::new(max_len),
        }
    }

    /// Number of committed tokens.
    pub(crate) fn len(&self) -> usize {
        self.log.len()
    }

    /// Floats of one position's keys and values over every layer and KV head.
    fn floats_per_position(&self) -> usize {
        2 * self.tail.heads * self.head_dim
    }

    /// Makes room for `extra` scratch positions after the committed prefix, in a tail
    /// this sequence holds alone. The forward's plan has checked that they fit in the
    /// context (`Batch::plan`).
    pub(crate) fn reserve(&mut self, extra: usize) {
        let len = self.len();
        let need = len + extra;
        debug_assert!(need <= self.log.max_len(), "checked by the forward's plan");
        if Arc::get_mut(&mut self.tail).is_none() {
            // Shared: split, keeping the last forward's scratch rows for a commit.
            let keep: Vec<usize> = (len..len + self.log.pending().len()).collect();
            self.split_tail(&keep, need);
        }
        if need <= self.tail.end() {
            return;
        }
        // Grow geometrically (in whole key blocks) so long generations reallocate rarely.
        let start = self.tail.start;
        let end = need
            .max(start + self.tail.cap * 3 / 2)
            .max(start + 64)
            .min(self.log.max_len())
            .next_multiple_of(BLOCK);
        let tail = Arc::get_mut(&mut self.tail).expect("the tail was made unique above");
        *tail = tail.with_cap(end - start);
    }

    /// Replaces a shared tail with one this sequence holds alone, covering positions up to
    /// at least `need`: the committed partial block is copied to it, then the positions
    /// `keep` (scratch rows, in order) to `len`, `len + 1`, ... The shared tail stays as a
    /// frozen segment up to the last whole committed block, unless it holds fewer than
    /// [`MIN_SHARED_BLOCKS`] of them (then it is copied from its start).
    fn split_tail(&mut self, keep: &[usize], need: usize) {
        let len = self.len();
        let old = Arc::clone(&self.tail);
        let cut = len / BLOCK * BLOCK;
        let start = if cut - old.start >= MIN_SHARED_BLOCKS * BLOCK {
            self.frozen.push(Arc::clone(&old));
            cut
        } else {
            old.start
        };
        let cap = need.max(len + keep.len()).next_multiple_of(BLOCK) - start;
        let (d, bs) = (self.head_dim, self.key_block_stride());
        let mut new = Segment::zeroed(start, cap, old.heads, d);
        let moves = (start..len)
            .map(|p| (p, p))
            .chain(keep.iter().enumerate().map(|(i, &src)| (src, len + i)));
        for (src, dst) in moves {
            let (s, t) = (src - old.start, dst - start);
            for b in 0..old.heads {
                let (nk, nv) = new.kv_mut(b);
                let (ok, ov) = (old.k(b), old.v(b));
                for e in 0..d {
                    nk[kt_index(t, e, bs)] = ok[kt_index(s, e, bs)];
                }
                nv[t * d..(t + 1) * d].copy_from_slice(&ov[s * d..(s + 1) * d]);
            }
        }
        self.tail = Arc::new(new);
    }

    /// Floats between consecutive key blocks.
    pub(crate) fn key_block_stride(&self) -> usize {
        self.head_dim * BLOCK
    }

    /// The positions of layer `layer`, KV head `g`, segment by segment in order: frozen
    /// segments up to where the next begins, then the whole tail (scratch rows included).
    pub(crate) fn runs(&self, layer: usize, g: usize) -> impl Iterator<Item = Run<'_>> {
        let b = layer * self.n_kv + g;
        let ends = self
            .frozen
            .iter()
            .skip(1)
            .chain([&self.tail])
            .map(|s| s.start);
        self.frozen
            .iter()
            .zip(ends)
            .map(move |(s, end)| Run {
                start: s.start,
                end,
                k: s.k(b),
                v: s.v(b),
            })
            .chain([self.tail_run(layer, g)])
    }

    /// The tail of layer `layer`, KV head `g`: every scratch row lies in it.
    pub(crate) fn tail_run(&self, layer: usize, g: usize) -> Run<'_> {
        let b = layer * self.n_kv + g;
        Run {
            start: self.tail.start,
            end: self.tail.end(),
            k: self.tail.k(b),
            v: self.tail.v(b),
        }
    }

    /// Stores the key and value (all KV heads, `n_kv × head_dim` each) of position `pos`,
    /// a scratch row of the last `reserve`.
    pub(crate) fn write(&mut self, layer: usize, pos: usize, key: &[f32], value: &[f32]) {
        let (hd, bs, n_kv) = (self.head_dim, self.key_block_stride(), self.n_kv);
        let tail = Arc::get_mut(&mut self.tail).expect("reserve makes the tail unique");
        let p = pos - tail.start;
        for g in 0..n_kv {
            let (kg, vg) = tail.kv_mut(layer * n_kv + g);
            for (d, &x) in key[g * hd..(g + 1) * hd].iter().enumerate() {
                kg[kt_index(p, d, bs)] = x;
            }
            vg[p * hd..(p + 1) * hd].copy_from_slice(&value[g * hd..(g + 1) * hd]);
        }
    }

    fn gather_in_place(&mut self, path: &[usize]) {
        let (d, bs) = (self.head_dim, self.key_block_stride());
        let base = self.len();
        let tail = Arc::get_mut(&mut self.tail).expect("checked by the caller");
        for (depth, &j) in path.iter().enumerate() {
            if j != depth {
                let (src, dst) = (base + j - tail.start, base + depth - tail.start);
                for b in 0..tail.heads {
                    let (k, v) = tail.kv_mut(b);
                    for e in 0..d {
                        k[kt_index(dst, e, bs)] = k[kt_index(src, e, bs)];
                    }
                    v.copy_within(src * d..(src + 1) * d, dst * d);
                }
            }
        }
    }
}

impl SequenceState for KvCache {
    fn log(&self) -> &TokenLog {
        &self.log
    }

    fn log_mut(&mut self) -> &mut TokenLog {
        &mut self.log
    }

    /// Nothing is copied now: each side's first write copies at most the partial last
    /// block (and the last forward's scratch rows it still needs).
    fn fork(&self) -> Box<dyn SequenceState> {
        Box::new(self.clone())
    }

    /// The accepted path's rows are gathered to the committed positions: in place in a
    /// tail this sequence holds alone, else into a tail of its own.
    fn keep(&mut self, path: &[usize]) {
        let base = self.len();
        let moves = path.iter().enumerate().any(|(depth, &j)| j != depth);
        if moves {
            if Arc::get_mut(&mut self.tail).is_some() {
                self.gather_in_place(path);
            } else {
                // Shared (a fork or branch took the scratch rows along): the path goes
                // straight to a tail of our own.
                let keep: Vec<usize> = path.iter().map(|&j| base + j).collect();
                self.split_tail(&keep, base + path.len());
            }
        }
    }

    /// A segment held alone counts whole (its allocation, growth headroom included); a
    /// shared one counts only the blocks this sequence reads (for the tail, up to its last
    /// committed block).
    fn memory_bytes(&self) -> usize {
        let per_position = self.floats_per_position() * std::mem::size_of::<f32>();
        let frozen_ends = self
            .frozen
            .iter()
            .skip(1)
            .chain([&self.tail])
            .map(|s| s.start);
        let frozen: usize = self
            .frozen
            .iter()
            .zip(frozen_ends)
            .map(|(s, end)| {
                if Arc::strong_count(s) == 1 {
                    s.cap
                } else {
                    end - s.start
                }
            })
            .sum();
        let tail = if Arc::strong_count(&self.tail) == 1 {
            self.tail.cap
        } else {
            (self.len().next_multiple_of(BLOCK) - self.tail.start).min(self.tail.cap)
        };
        (frozen + tail) * per_position
    }

    /// Every segment, by its address, at its whole allocation.
    fn allocations(&self, each: &mut dyn FnMut(usize, usize)) {
        let per_position = self.floats_per_position() * std::mem::size_of::<f32>();
        for seg in self.frozen.iter().chain([&self.tail]) {
            each(Arc::as_ptr(seg) as usize, seg.cap * per_position);
        }
    }

    /// Each segment held alone keeps the blocks it is read through (the tail: its
    /// committed blocks and the last forward's scratch rows). Shared segments are left as
    /// they are.
    fn shrink_to_fit(&mut self) {
        let ends: Vec<usize> = self.frozen.iter().skip(1).map(|s| s.start).collect();
        let tail_start = self.tail.start;
        for (seg, end) in self
            .frozen
            .iter_mut()
            .zip(ends.into_iter().chain([tail_start]))
        {
            if let Some(s) = Arc::get_mut(seg) {
                s.shrink(end - s.start);
            }
        }
        let used = (self.len() + self.log.pending().len()).next_multiple_of(BLOCK) - tail_start;
        if let Some(t) = Arc::get_mut(&mut self.tail) {
            let cap = used.min(t.cap);
            t.shrink(cap);
        }
    }

    fn truncated(&mut self) {
        // The segment holding position `len` becomes the tail again (written only once it
        // is this sequence's alone); later segments are released.
        let len = self.len();
        while self.tail.start > len {
            self.tail = self
                .frozen
                .pop()
                .expect("the first segment starts at position 0");
        }
    }
}

impl Segment {
    fn shrink(&mut self, cap: usize) {
        if cap < self.cap {
            *self = self.with_cap(cap);
        }
    }
}

#[cfg(test)]
mod tests;
