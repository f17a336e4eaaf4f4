//! Attention of a forward's rows over their sequences' caches and their own tree paths.

use std::ops::Range;

use specdec_kernels::VecOps;

use super::Model;
use crate::batch::RowInfo;
use crate::kv::KvCache;
use crate::{Node, RuntimeError};

/// Per-thread attention buffers, reused across calls.
#[derive(Default)]
struct Scratch {
    scores: Vec<f32>,
    qs: Vec<f32>,
    acc: Vec<f32>,
    inv: Vec<f32>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}

impl Model {
    /// Blocks of rows for attention: a block's rows belong to one input and share its
    /// committed prefix, so each prefix key and value is loaded once per block. Enough
    /// blocks to keep every thread busy, few enough to share the loads. A small tree is
    /// one block: reading the cache once beats spreading a few rows over the threads
    /// (2 rows at a 1000-token context: 12% faster forward as one block than as two).
    pub(super) fn attention_blocks(&self, input_rows: &[Range<usize>]) -> Vec<Range<usize>> {
        const BLOCK_ROWS: usize = 8;
        const ONE_BLOCK: usize = 4;
        let n_kv = self.config.n_kv_heads;
        let mut blocks = Vec::new();
        for rows in input_rows {
            let per = if rows.len() <= ONE_BLOCK {
                rows.len()
            } else {
                (rows.len() * n_kv)
                    .div_ceil(4 * self.exec.threads())
                    .clamp(1, BLOCK_ROWS)
            };
            let mut b = rows.start;
            while b < rows.end {
                blocks.push(b..(b + per).min(rows.end));
                b += per;
            }
        }
        blocks
    }

    /// Attention of every row; work items are (block of rows, KV head, slice of that KV
    /// head's query heads). The query heads of a group are split over the threads only
    /// when there are fewer (block, KV head) items than threads, so that a thread would
    /// otherwise idle (Gemma 3 270M has one KV head: one row was one item). Each thread
    /// then reads the group's cache, so SmolLM2's 3 KV heads on 2 threads stay whole
    /// (split into 9 items, its one-row forward at a 1000-token context ran 0.82x as
    /// fast). Each head's arithmetic is the same either way.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn attention(
        &self,
        caches: &[&mut KvCache],
        nodes: &[&[Node]],
        rows: &[RowInfo],
        blocks: &[Range<usize>],
        paths: &[Vec<usize>],
        layer: usize,
        qkv: &[f32],
        attn: &mut [f32],
    ) -> Result<(), RuntimeError> {
        let cfg = &self.config;
        let (qd, n_kv, hd) = (cfg.q_dim(), cfg.n_kv_heads, cfg.head_dim);
        let group = cfg.n_heads / n_kv;
        let threads = self.exec.threads();
        let parts = if blocks.len() * n_kv < threads && group.is_multiple_of(threads) {
            threads
        } else {
            1
        };
        let per = group / parts;
        let out = std::sync::Mutex::new(attn);
        let ops = self.exec.vec_ops();
        self.exec.for_each(blocks.len() * n_kv * parts, &|item| {
            let (bg, part) = (item / parts, item % parts);
            let (block, g) = (blocks[bg / n_kv].clone(), bg % n_kv);
            let heads = part * per..(part + 1) * per;
            let item = rows[block.start].item;
            let (seq, nodes) = (&*caches[item], nodes[item].len());
            SCRATCH.with(|s| {
                let mut s = s.borrow_mut();
                let res = self.attend_block(
                    &ops,
                    (seq, nodes),
                    layer,
                    (g, heads.clone()),
                    block.clone(),
                    paths,
                    qkv,
                    &mut s,
                );
                let w = heads.len() * hd;
                let col = (g * group + heads.start) * hd;
                let mut attn = out.lock().unwrap_or_else(|e| e.into_inner());
                for (i, r) in block.enumerate() {
                    attn[r * qd + col..][..w].copy_from_slice(&res[i * w..(i + 1) * w]);
                }
            });
        })?;
        Ok(())
    }

    /// Attention of the rows `block` (one input) for the query heads `heads` (numbered
    /// within the group) of KV head `g`; returns `rows × heads × head_dim` outputs. Per
    /// head the operations are those of decoding the row alone: scores over the committed
    /// prefix, then over the node's own path, scaled; softmax; values accumulated in the
    /// same key order.
    #[allow(clippy::too_many_arguments)]
    fn attend_block<'s>(
        &self,
        ops: &VecOps,
        (seq, nodes): (&KvCache, usize),
        layer: usize,
        (g, heads): (usize, Range<usize>),
        block: std::ops::Range<usize>,
        paths: &[Vec<usize>],
        qkv: &[f32],
        scratch: &'s mut Scratch,
    ) -> &'s [f32] {
        let cfg = &self.config;
        let (hd, kvd, qd) = (cfg.head_dim, cfg.kv_dim(), cfg.q_dim());
        let group = heads.len();
        let q_col = (g * (cfg.n_heads / cfg.n_kv_heads) + heads.start) * hd;
        let gw = group * hd;
        let scale = self
            .spec
            .attention_scale
            .unwrap_or(1.0 / (hd as f32).sqrt());
        let base = seq.len();
        let bs = seq.key_block_stride();
        let tail = seq.tail_run(layer, g);
        let n = block.len();
        let m = n * group;
        let path_of = |i: usize| &paths[block.start + i];
        // A local layer's row at position p sees positions q with p - q < window: from
        // `lo_of(i)` on (a row's position is base + its path's length - 1).
        let window = self.spec.layers[layer].sliding_window;
        let lo_of = |i: usize| window.map_or(0, |w| (base + path_of(i).len()).saturating_sub(w));
        let block_lo = (0..n).map(lo_of).min().unwrap_or(0);
        let Scratch {
            scores,
            qs,
            acc,
            inv,
        } = scratch;
        qs.clear();
        for r in block.clone() {
            qs.extend_from_slice(&qkv[r * (qd + 2 * kvd) + q_col..][..gw]);
        }
        // One score row per (row, head) over the prefix and every node of this forward
        // (all contiguous positions, so one vectorized pass per cache segment: each score
        // is computed alone, so the segments give the bits of one pass); each row then
        // keeps the scores of its own path, compacted after the prefix.
        let stride = base + nodes;
        scores.resize(m * stride, 0.0);
        let runs = seq.runs(layer, g).take_while(|r| r.start < stride);
        for run in runs.filter(|r| r.end.min(stride) > block_lo) {
            let keys = run.end.min(stride) - run.start;
            ops.dot_t(qs, m, hd, run.k, bs, keys, &mut scores[run.start..], stride);
        }
        inv.clear();
        for i in 0..n {
            let path = path_of(i);
            for j in 0..group {
                let row = &mut scores[(i * group + j) * stride..][..stride];
                // Path nodes come in increasing order, at or after their compacted slot.
                for (pi, &p) in path.iter().enumerate() {
                    row[base + pi] = row[base + p];
                }
                // The compacted row holds positions 0..=p in order; the softmax runs over
                // the visible ones, so its sums see what decoding the row alone sees.
                let lo = lo_of(i);
                let visible = &mut row[lo..base + path.len()];
                let max = ops.scale_max(visible, scale);
                inv.push(1.0 / ops.exp_sum(visible, max));
                // Prefix positions before the window that the block's value pass reads
                // weigh 0: adding 0·v leaves a sum's bits unchanged (sums start at +0.0,
                // so never hold -0.0), as if the row's pass had started at its window.
                row[block_lo.min(base)..lo.min(base)].fill(0.0);
            }
        }
        acc.clear();
        acc.resize(m * hd, 0.0);
        // The prefix's values segment by segment: the sums run over keys in order, each
        // segment continuing the accumulators the last one left, as one pass would.
        for run in seq.runs(layer, g).take_while(|r| r.start < base) {
            let start = run.start.max(block_lo);
            let end = run.end.min(base);
            if start >= end {
                continue;
            }
            let v = &run.v[(start - run.start) * hd..];
            ops.weighted_sum(&scores[start..], stride, m, v, hd, end - start, acc, hd);
        }
        // Each row's own path, in maximal runs of consecutive nodes: a run's value rows lie
        // together in the tail, so they are read in place (a chain's whole path is one
        // run), and the sums continue from run to run in path order, as over one
        // gathered list.
        for i in 0..n {
            // Never empty: a path ends at its node.
            // Its first `skip` path nodes lie before its window (a path longer than it).
            let skip = lo_of(i).saturating_sub(base);
            let path = &path_of(i)[skip..];
            let r0 = i * group;
            let weights = r0 * stride + base + skip;
            let out = &mut acc[r0 * hd..(r0 + group) * hd];
            let mut j = 0;
            while j < path.len() {
                let run = 1 + path[j + 1..]
                    .iter()
                    .zip(&path[j..])
                    .take_while(|&(&next, &p)| next == p + 1)
                    .count();
                let v = &tail.v[(base + path[j] - tail.start) * hd..];
                ops.weighted_sum(&scores[weights + j..], stride, group, v, hd, run, out, hd);
                j += run;
            }
        }
        for (o, &f) in acc.chunks_exact_mut(hd).zip(inv.iter()) {
            o.iter_mut().for_each(|x| *x *= f);
        }
        acc
    }
}
