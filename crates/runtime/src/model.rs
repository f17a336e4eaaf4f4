//! The forward pass over token trees of one or more sequences.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use specdec_gguf::GgufFile;
use specdec_kernels::{Executor, PackedMatrix, QuantizedRows, VecOps};

use crate::batch::{split_logits, Batch, RowInfo};
use crate::config::ModelConfig;
use crate::kv::Sequence;
use crate::ops::{self, Rope};
use crate::weights::{self, Weights};
use crate::Node;
use crate::RuntimeError;

/// Which nodes of an input need logits.
#[derive(Clone, Debug)]
pub enum Want {
    All,
    Last,
    None,
}

/// One sequence's share of a forward.
pub struct SeqInput<'a> {
    pub seq: &'a mut Sequence,
    pub nodes: &'a [Node],
    pub want: Want,
}

/// Logits of the requested nodes of one input.
#[derive(Clone, Debug, Default)]
pub struct Logits {
    pub(crate) vocab: usize,
    /// The nodes with logits: `Want` asks for all, the last or none, always a range.
    pub(crate) nodes: Range<usize>,
    /// The whole forward's logits, shared by its inputs (a batch is not copied apart);
    /// this input's rows start at row `first`.
    pub(crate) data: Arc<Vec<f32>>,
    pub(crate) first: usize,
}

impl Logits {
    /// The logits of node `i`, if they were requested.
    pub fn get(&self, i: usize) -> Option<&[f32]> {
        self.nodes
            .contains(&i)
            .then(|| self.row(i - self.nodes.start))
    }

    /// The logits of the `r`-th requested node.
    pub fn row(&self, r: usize) -> &[f32] {
        &self.data[(self.first + r) * self.vocab..][..self.vocab]
    }
}

/// A loaded model ready to run.
pub struct Model {
    config: ModelConfig,
    weights: Weights,
    rope: Rope,
    exec: Executor,
}

/// Per-thread attention buffers, reused across calls.
#[derive(Default)]
struct Scratch {
    scores: Vec<f32>,
    qs: Vec<f32>,
    acc: Vec<f32>,
    inv: Vec<f32>,
    /// Value rows of one node's path.
    pv: Vec<f32>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}

impl Model {
    pub fn load_with(path: impl AsRef<Path>, exec: Executor) -> Result<Self, RuntimeError> {
        let file = GgufFile::open(path)?;
        Self::from_gguf(&file, exec)
    }

    pub fn from_gguf(file: &GgufFile, exec: Executor) -> Result<Self, RuntimeError> {
        let config = ModelConfig::from_gguf(file)?;
        let weights = weights::load(file, &config)?;
        let rope = Rope::new(
            config.rope_style,
            config.head_dim,
            config.rope_dims,
            config.rope_base,
            weights.rope_factors.as_deref(),
        );
        Ok(Model {
            config,
            weights,
            rope,
            exec,
        })
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    pub fn executor(&self) -> &Executor {
        &self.exec
    }

    /// A new empty sequence.
    pub fn new_sequence(&self) -> Sequence {
        Sequence::new(
            self.config.n_layers,
            self.config.n_kv_heads,
            self.config.head_dim,
            self.config.context_length,
        )
    }

    /// Evaluates every input's nodes after its committed prefix and returns the requested
    /// logits. Node keys and values go to each sequence's scratch rows until `commit`.
    /// A node's logits are bit-identical however the nodes are batched.
    pub fn forward(&self, inputs: &mut [SeqInput<'_>]) -> Result<Vec<Logits>, RuntimeError> {
        let cfg = &self.config;
        let (h, qd, kvd) = (cfg.hidden, cfg.q_dim(), cfg.kv_dim());
        let Batch {
            rows,
            paths,
            input_rows,
        } = Batch::plan(inputs, cfg.vocab)?;
        let n = rows.len();
        let mut x = vec![0f32; n * h];
        for (r, info) in rows.iter().enumerate() {
            let token = inputs[info.item].nodes[info.node].token;
            self.weights
                .embedding
                .row(token, &mut x[r * h..(r + 1) * h])?;
        }
        let mut xn = vec![0f32; n * h];
        let mut qrows = QuantizedRows::new();
        let mut qkv = vec![0f32; n * (qd + 2 * kvd)];
        let mut attn = vec![0f32; n * qd];
        let mut proj = vec![0f32; n * h];
        let mut gate_up = vec![0f32; n * 2 * cfg.ffn];
        let mut act = vec![0f32; n * cfg.ffn];
        let blocks = self.attention_blocks(&input_rows);
        let rope = self
            .rope
            .table(rows.iter().map(|r| r.pos + 1).max().unwrap_or(0));
        for (li, layer) in self.weights.layers.iter().enumerate() {
            self.norm_rows(&x, &layer.attn_norm, &mut xn);
            self.matmul(&layer.qkv, &xn, n, &mut qrows, &mut qkv)?;
            for (r, info) in rows.iter().enumerate() {
                let row = &mut qkv[r * (qd + 2 * kvd)..(r + 1) * (qd + 2 * kvd)];
                if let Some(b) = &layer.qkv_bias {
                    row.iter_mut().zip(b).for_each(|(v, b)| *v += b);
                }
                rope.apply(&mut row[..qd + kvd], info.pos);
                let seq = &mut *inputs[info.item].seq;
                let slot = seq.len() + info.node;
                seq.write(li, slot, &row[qd..qd + kvd], &row[qd + kvd..]);
            }
            self.attention(inputs, &rows, &blocks, &paths, li, &qkv, &mut attn)?;
            self.matmul(&layer.o, &attn, n, &mut qrows, &mut proj)?;
            x.iter_mut().zip(&proj).for_each(|(x, p)| *x += p);
            self.norm_rows(&x, &layer.ffn_norm, &mut xn);
            self.matmul(&layer.gate_up, &xn, n, &mut qrows, &mut gate_up)?;
            self.swiglu_rows(&gate_up, &mut act)?;
            self.matmul(&layer.down, &act, n, &mut qrows, &mut proj)?;
            x.iter_mut().zip(&proj).for_each(|(x, p)| *x += p);
        }
        Batch::finish(inputs);
        self.head(inputs, &input_rows, &x, &mut qrows)
    }

    fn head(
        &self,
        inputs: &[SeqInput<'_>],
        input_rows: &[Range<usize>],
        x: &[f32],
        qrows: &mut QuantizedRows,
    ) -> Result<Vec<Logits>, RuntimeError> {
        let (h, vocab) = (self.config.hidden, self.config.vocab);
        let wanted = Batch::wanted(inputs);
        let mut normed = Vec::new();
        for (rows, nodes) in input_rows.iter().zip(&wanted) {
            for node in nodes.clone() {
                // `Want` only names nodes of the input, so the row exists.
                let r = rows.start + node;
                normed.resize(normed.len() + h, 0.0);
                let len = normed.len();
                ops::rms_norm(
                    &x[r * h..(r + 1) * h],
                    &self.weights.out_norm,
                    self.config.rms_eps,
                    &mut normed[len - h..],
                );
            }
        }
        let picked = normed.len() / h;
        let mut all = vec![0f32; picked * vocab];
        if picked > 0 {
            self.matmul(&self.weights.head, &normed, picked, qrows, &mut all)?;
        }
        Ok(split_logits(wanted, all, vocab))
    }

    /// SwiGLU of every row, rows spread over the kernel threads (a few rows are not worth
    /// a dispatch).
    fn swiglu_rows(&self, gate_up: &[f32], act: &mut [f32]) -> Result<(), RuntimeError> {
        let f = self.config.ffn;
        let ops = self.exec.vec_ops();
        let row = |r: usize, out: &mut [f32]| {
            let gu = &gate_up[r * 2 * f..(r + 1) * 2 * f];
            ops.swiglu(&gu[..f], &gu[f..], out);
        };
        let n = act.len() / f;
        if n < 4 {
            act.chunks_exact_mut(f)
                .enumerate()
                .for_each(|(r, out)| row(r, out));
            return Ok(());
        }
        let outs: Vec<std::sync::Mutex<&mut [f32]>> =
            act.chunks_exact_mut(f).map(std::sync::Mutex::new).collect();
        self.exec.for_each(n, &|r| {
            let mut out = outs[r].lock().unwrap_or_else(|e| e.into_inner());
            row(r, &mut out);
        })?;
        Ok(())
    }

    fn norm_rows(&self, x: &[f32], w: &[f32], out: &mut [f32]) {
        let h = self.config.hidden;
        for (xr, or) in x.chunks_exact(h).zip(out.chunks_exact_mut(h)) {
            ops::rms_norm(xr, w, self.config.rms_eps, or);
        }
    }

    fn matmul(
        &self,
        w: &PackedMatrix,
        x: &[f32],
        rows: usize,
        q: &mut QuantizedRows,
        out: &mut [f32],
    ) -> Result<(), RuntimeError> {
        q.quantize_on(&self.exec, &x[..rows * w.k()], rows, w.k());
        self.exec.matmul(w, q, &mut out[..rows * w.n()])?;
        Ok(())
    }

    /// Blocks of rows for attention: a block's rows belong to one input and share its
    /// committed prefix, so each prefix key and value is loaded once per block. Enough
    /// blocks to keep every thread busy, few enough to share the loads. A small tree is
    /// one block: reading the cache once beats spreading a few rows over the threads
    /// (2 rows at a 1000-token context: 12% faster forward as one block than as two).
    fn attention_blocks(&self, input_rows: &[Range<usize>]) -> Vec<Range<usize>> {
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

    /// Attention of every row; work items are (block of rows, KV head).
    #[allow(clippy::too_many_arguments)]
    fn attention(
        &self,
        inputs: &[SeqInput<'_>],
        rows: &[RowInfo],
        blocks: &[Range<usize>],
        paths: &[Vec<usize>],
        layer: usize,
        qkv: &[f32],
        attn: &mut [f32],
    ) -> Result<(), RuntimeError> {
        let cfg = &self.config;
        let (qd, n_kv) = (cfg.q_dim(), cfg.n_kv_heads);
        let gw = qd / n_kv;
        let seqs: Vec<(&Sequence, usize)> =
            inputs.iter().map(|i| (&*i.seq, i.nodes.len())).collect();
        let out = std::sync::Mutex::new(attn);
        let ops = self.exec.vec_ops();
        self.exec.for_each(blocks.len() * n_kv, &|item| {
            let (block, g) = (blocks[item / n_kv].clone(), item % n_kv);
            let (seq, nodes) = seqs[rows[block.start].item];
            SCRATCH.with(|s| {
                let mut s = s.borrow_mut();
                let res = self.attend_block(
                    &ops,
                    (seq, nodes),
                    layer,
                    g,
                    block.clone(),
                    paths,
                    qkv,
                    &mut s,
                );
                let mut attn = out.lock().unwrap_or_else(|e| e.into_inner());
                for (i, r) in block.enumerate() {
                    attn[r * qd + g * gw..][..gw].copy_from_slice(&res[i * gw..(i + 1) * gw]);
                }
            });
        })?;
        Ok(())
    }

    /// Attention of the rows `block` (one input) for the query heads sharing KV head `g`;
    /// returns `rows × group × head_dim` outputs. Per head the operations are those of
    /// decoding the row alone: scores over the committed prefix, then over the node's own
    /// path, scaled; softmax; values accumulated in the same key order.
    #[allow(clippy::too_many_arguments)]
    fn attend_block<'s>(
        &self,
        ops: &VecOps,
        (seq, nodes): (&Sequence, usize),
        layer: usize,
        g: usize,
        block: std::ops::Range<usize>,
        paths: &[Vec<usize>],
        qkv: &[f32],
        scratch: &'s mut Scratch,
    ) -> &'s [f32] {
        let cfg = &self.config;
        let (hd, kvd, qd) = (cfg.head_dim, cfg.kv_dim(), cfg.q_dim());
        let group = cfg.n_heads / cfg.n_kv_heads;
        let gw = group * hd;
        let scale = 1.0 / (hd as f32).sqrt();
        let base = seq.len();
        let bs = seq.key_block_stride();
        let tail = seq.tail_run(layer, g);
        let n = block.len();
        let m = n * group;
        let path_of = |i: usize| &paths[block.start + i];
        let Scratch {
            scores,
            qs,
            acc,
            inv,
            pv,
        } = scratch;
        qs.clear();
        for r in block.clone() {
            qs.extend_from_slice(&qkv[r * (qd + 2 * kvd) + g * gw..][..gw]);
        }
        // One score row per (row, head) over the prefix and every node of this forward
        // (all contiguous positions, so one vectorized pass per cache segment: each score
        // is computed alone, so the segments give the bits of one pass); each row then
        // keeps the scores of its own path, compacted after the prefix.
        let stride = base + nodes;
        scores.resize(m * stride, 0.0);
        for run in seq.runs(layer, g).take_while(|r| r.start < stride) {
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
                let row = &mut row[..base + path.len()];
                row.iter_mut().for_each(|x| *x *= scale);
                let max = row.iter().fold(f32::NEG_INFINITY, |a, &x| a.max(x));
                inv.push(1.0 / ops.exp_sum(row, max));
            }
        }
        acc.clear();
        acc.resize(m * hd, 0.0);
        // The prefix's values segment by segment: the sums run over keys in order, each
        // segment continuing the accumulators the last one left, as one pass would.
        for run in seq.runs(layer, g).take_while(|r| r.start < base) {
            let keys = run.end.min(base) - run.start;
            ops.weighted_sum(&scores[run.start..], stride, m, run.v, hd, keys, acc, hd);
        }
        // Each row's own path: its value rows gathered, then the same in-order sums.
        for i in 0..n {
            // Never empty: a path ends at its node.
            let path = path_of(i);
            pv.clear();
            for &p in path {
                pv.extend_from_slice(&tail.v[(base + p - tail.start) * hd..][..hd]);
            }
            let r0 = i * group;
            ops.weighted_sum(
                &scores[r0 * stride + base..],
                stride,
                group,
                pv,
                hd,
                path.len(),
                &mut acc[r0 * hd..(r0 + group) * hd],
                hd,
            );
        }
        for (o, &f) in acc.chunks_exact_mut(hd).zip(inv.iter()) {
            o.iter_mut().for_each(|x| *x *= f);
        }
        acc
    }
}
