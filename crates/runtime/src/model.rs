//! The forward pass over token trees of one or more sequences.

use std::path::Path;

use specdec_gguf::GgufFile;
use specdec_kernels::{Executor, PackedMatrix, QuantizedRows, VecOps};

use crate::config::ModelConfig;
use crate::kv::Sequence;
use crate::ops::{self, Rope};
use crate::tree;
use crate::weights::{self, Weights};
use crate::RuntimeError;

/// One token to evaluate; `parent` indexes an earlier node of the same input, `None`
/// meaning the node directly follows the sequence's committed tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Node {
    pub token: u32,
    pub parent: Option<u32>,
}

impl Node {
    /// `tokens` as one chain after the committed prefix.
    pub fn chain(tokens: &[u32]) -> Vec<Node> {
        tokens
            .iter()
            .enumerate()
            .map(|(i, &token)| Node {
                token,
                parent: i.checked_sub(1).map(|p| p as u32),
            })
            .collect()
    }
}

/// Which nodes of an input need logits.
#[derive(Clone, Debug)]
pub enum Want {
    All,
    Last,
    Nodes(Vec<usize>),
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
    vocab: usize,
    nodes: Vec<usize>,
    data: Vec<f32>,
}

impl Logits {
    /// The logits of node `i`, if they were requested.
    pub fn get(&self, i: usize) -> Option<&[f32]> {
        let r = self.nodes.iter().position(|&n| n == i)?;
        Some(&self.data[r * self.vocab..(r + 1) * self.vocab])
    }

    /// The requested node indices, in row order.
    pub fn nodes(&self) -> &[usize] {
        &self.nodes
    }

    pub fn row(&self, r: usize) -> &[f32] {
        &self.data[r * self.vocab..(r + 1) * self.vocab]
    }
}

/// A loaded model ready to run.
pub struct Model {
    config: ModelConfig,
    weights: Weights,
    rope: Rope,
    exec: Executor,
}

thread_local! {
    /// Attention score scratch, one per kernel thread.
    static SCORES: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Per-row bookkeeping of one forward.
struct RowInfo {
    item: usize,
    node: usize,
    pos: usize,
}

impl Model {
    /// Loads a GGUF file with a `threads`-thread kernel pool.
    pub fn load(path: impl AsRef<Path>, threads: usize) -> Result<Self, RuntimeError> {
        Self::load_with(path, Executor::new(threads.max(1)))
    }

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
            self.config.kv_dim(),
            self.config.context_length,
        )
    }

    /// Evaluates every input's nodes after its committed prefix and returns the requested
    /// logits. Node keys and values go to each sequence's scratch rows until `commit`.
    /// A node's logits are bit-identical however the nodes are batched.
    pub fn forward(&self, inputs: &mut [SeqInput<'_>]) -> Result<Vec<Logits>, RuntimeError> {
        let cfg = &self.config;
        let (h, qd, kvd) = (cfg.hidden, cfg.q_dim(), cfg.kv_dim());
        let mut rows = Vec::new();
        let mut paths = Vec::new();
        for (item, input) in inputs.iter_mut().enumerate() {
            let depths = tree::depths(input.nodes, cfg.vocab)?;
            input.seq.reserve(input.nodes.len())?;
            let base = input.seq.len();
            for (node, d) in depths.into_iter().enumerate() {
                let mut p = Vec::new();
                tree::path_to(input.nodes, node, &mut p);
                paths.push(p);
                rows.push(RowInfo {
                    item,
                    node,
                    pos: base + d,
                });
            }
        }
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
        for (li, layer) in self.weights.layers.iter().enumerate() {
            self.norm_rows(&x, &layer.attn_norm, &mut xn);
            self.matmul(&layer.qkv, &xn, n, &mut qrows, &mut qkv)?;
            for (r, info) in rows.iter().enumerate() {
                let row = &mut qkv[r * (qd + 2 * kvd)..(r + 1) * (qd + 2 * kvd)];
                if let Some(b) = &layer.qkv_bias {
                    row.iter_mut().zip(b).for_each(|(v, b)| *v += b);
                }
                self.rope.apply(&mut row[..qd + kvd], info.pos);
                let seq = &mut *inputs[info.item].seq;
                let slot = (seq.len() + info.node) * kvd;
                seq.k[li][slot..slot + kvd].copy_from_slice(&row[qd..qd + kvd]);
                seq.v[li][slot..slot + kvd].copy_from_slice(&row[qd + kvd..]);
            }
            self.attention(inputs, &rows, &paths, li, &qkv, &mut attn)?;
            self.matmul(&layer.o, &attn, n, &mut qrows, &mut proj)?;
            x.iter_mut().zip(&proj).for_each(|(x, p)| *x += p);
            self.norm_rows(&x, &layer.ffn_norm, &mut xn);
            self.matmul(&layer.gate_up, &xn, n, &mut qrows, &mut gate_up)?;
            self.swiglu_rows(&gate_up, &mut act)?;
            self.matmul(&layer.down, &act, n, &mut qrows, &mut proj)?;
            x.iter_mut().zip(&proj).for_each(|(x, p)| *x += p);
        }
        for input in inputs.iter_mut() {
            input.seq.set_pending(input.nodes);
        }
        self.head(inputs, &rows, &x, &mut qrows)
    }

    fn head(
        &self,
        inputs: &[SeqInput<'_>],
        rows: &[RowInfo],
        x: &[f32],
        qrows: &mut QuantizedRows,
    ) -> Result<Vec<Logits>, RuntimeError> {
        let (h, vocab) = (self.config.hidden, self.config.vocab);
        let mut out: Vec<Logits> = inputs
            .iter()
            .map(|input| Logits {
                vocab,
                nodes: match &input.want {
                    Want::All => (0..input.nodes.len()).collect(),
                    Want::Last => input.nodes.len().checked_sub(1).into_iter().collect(),
                    Want::Nodes(v) => v.clone(),
                    Want::None => Vec::new(),
                },
                data: Vec::new(),
            })
            .collect();
        let mut picked = Vec::new();
        let mut normed = Vec::new();
        for (item, logits) in out.iter().enumerate() {
            for &node in &logits.nodes {
                let r = rows
                    .iter()
                    .position(|ri| ri.item == item && ri.node == node)
                    .ok_or_else(|| {
                        RuntimeError::BadTree(format!("logits asked for missing node {node}"))
                    })?;
                picked.push(r);
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
        if picked.is_empty() {
            return Ok(out);
        }
        let mut all = vec![0f32; picked.len() * vocab];
        self.matmul(&self.weights.head, &normed, picked.len(), qrows, &mut all)?;
        if out.len() == 1 {
            out[0].data = all;
            return Ok(out);
        }
        let mut off = 0;
        for logits in out.iter_mut() {
            let len = logits.nodes.len() * vocab;
            logits.data = all[off..off + len].to_vec();
            off += len;
        }
        Ok(out)
    }

    /// SwiGLU of every row, rows spread over the kernel threads.
    fn swiglu_rows(&self, gate_up: &[f32], act: &mut [f32]) -> Result<(), RuntimeError> {
        let f = self.config.ffn;
        let ops = self.exec.vec_ops();
        let outs: Vec<std::sync::Mutex<&mut [f32]>> =
            act.chunks_exact_mut(f).map(std::sync::Mutex::new).collect();
        if outs.len() < 4 {
            for (r, out) in outs.into_iter().enumerate() {
                let gu = &gate_up[r * 2 * f..(r + 1) * 2 * f];
                let mut out = out.into_inner().unwrap_or_else(|e| e.into_inner());
                ops.swiglu(&gu[..f], &gu[f..], &mut out);
            }
            return Ok(());
        }
        self.exec.for_each(outs.len(), &|r| {
            let gu = &gate_up[r * 2 * f..(r + 1) * 2 * f];
            let mut out = outs[r].lock().unwrap_or_else(|e| e.into_inner());
            ops.swiglu(&gu[..f], &gu[f..], &mut out);
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

    /// Attention of every row, one (row, KV head) item per task on the kernel threads.
    fn attention(
        &self,
        inputs: &[SeqInput<'_>],
        rows: &[RowInfo],
        paths: &[Vec<usize>],
        layer: usize,
        qkv: &[f32],
        attn: &mut [f32],
    ) -> Result<(), RuntimeError> {
        let cfg = &self.config;
        let (qd, kvd) = (cfg.q_dim(), cfg.kv_dim());
        let group_width = qd / cfg.n_kv_heads;
        let seqs: Vec<&Sequence> = inputs.iter().map(|i| &*i.seq).collect();
        let outs: Vec<std::sync::Mutex<&mut [f32]>> = attn
            .chunks_exact_mut(group_width)
            .map(std::sync::Mutex::new)
            .collect();
        let ops = self.exec.vec_ops();
        self.exec.for_each(outs.len(), &|item| {
            let (r, g) = (item / cfg.n_kv_heads, item % cfg.n_kv_heads);
            let q = &qkv[r * (qd + 2 * kvd)..][..qd];
            let mut out = outs[item].lock().unwrap_or_else(|e| e.into_inner());
            SCORES.with(|s| {
                let seq = seqs[rows[r].item];
                let mut s = s.borrow_mut();
                self.attend(&ops, seq, layer, g, q, &paths[r], &mut s, &mut out);
            });
        })?;
        Ok(())
    }

    /// Attention of one query row's heads sharing KV head `g`, over the committed prefix
    /// and the node's own path. Keys are visited in position order, so each head's
    /// reductions match one-token-at-a-time decoding exactly.
    #[allow(clippy::too_many_arguments)]
    fn attend(
        &self,
        ops: &VecOps,
        seq: &Sequence,
        layer: usize,
        g: usize,
        q: &[f32],
        path: &[usize],
        scores: &mut Vec<f32>,
        out: &mut [f32],
    ) {
        let cfg = &self.config;
        let (hd, kvd) = (cfg.head_dim, cfg.kv_dim());
        let group = cfg.n_heads / cfg.n_kv_heads;
        let scale = 1.0 / (hd as f32).sqrt();
        let base = seq.len();
        let (k, v) = (&seq.k[layer], &seq.v[layer]);
        let n_keys = base + path.len();
        scores.resize(group * n_keys, 0.0);
        let (kg, vg) = (&k[g * hd..], &v[g * hd..]);
        for (j, h) in (g * group..(g + 1) * group).enumerate() {
            let qh = &q[h * hd..(h + 1) * hd];
            let row = &mut scores[j * n_keys..(j + 1) * n_keys];
            // The committed prefix is contiguous; the node's own path is not.
            ops.dot_rows(qh, kg, kvd, &mut row[..base]);
            for (o, &p) in row[base..].iter_mut().zip(path) {
                *o = ops.dot(qh, &kg[(base + p) * kvd..][..hd]);
            }
            row.iter_mut().for_each(|x| *x *= scale);
        }
        out.fill(0.0);
        for (j, row) in scores.chunks_exact_mut(n_keys).enumerate() {
            let max = row.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            let sum = ops.exp_sum(row, max);
            let oh = &mut out[j * hd..(j + 1) * hd];
            ops.axpy_rows(&row[..base], vg, kvd, oh);
            for (&w, &p) in row[base..].iter().zip(path) {
                ops.axpy(w, &vg[(base + p) * kvd..][..hd], oh);
            }
            let inv = 1.0 / sum;
            oh.iter_mut().for_each(|x| *x *= inv);
        }
    }
}
