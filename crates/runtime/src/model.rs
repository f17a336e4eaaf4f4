//! The forward pass over token trees of one or more sequences.

use std::path::Path;

use specdec_gguf::GgufFile;
use specdec_kernels::{Executor, PackedMatrix, QuantizedRows};

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
        let mut scores = Vec::new();
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
            for (r, info) in rows.iter().enumerate() {
                let q = &qkv[r * (qd + 2 * kvd)..][..qd];
                let seq = &*inputs[info.item].seq;
                self.attend(
                    seq,
                    li,
                    q,
                    &paths[r],
                    &mut scores,
                    &mut attn[r * qd..(r + 1) * qd],
                );
            }
            self.matmul(&layer.o, &attn, n, &mut qrows, &mut proj)?;
            x.iter_mut().zip(&proj).for_each(|(x, p)| *x += p);
            self.norm_rows(&x, &layer.ffn_norm, &mut xn);
            self.matmul(&layer.gate_up, &xn, n, &mut qrows, &mut gate_up)?;
            let f = cfg.ffn;
            for r in 0..n {
                let gu = &gate_up[r * 2 * f..(r + 1) * 2 * f];
                ops::swiglu(&gu[..f], &gu[f..], &mut act[r * f..(r + 1) * f]);
            }
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
        let mut off = 0;
        for logits in out.iter_mut() {
            let len = logits.nodes.len() * vocab;
            logits.data = all[off..off + len].to_vec();
            off += len;
        }
        Ok(out)
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
        q.quantize(&x[..rows * w.k()], rows, w.k());
        self.exec.matmul(w, q, &mut out[..rows * w.n()])?;
        Ok(())
    }

    /// Attention of one query row over the committed prefix and the node's own path, keys
    /// visited in position order so the reduction matches one-token-at-a-time decoding.
    /// The query heads sharing a KV head are processed together so each key and value row
    /// is loaded once per group; every head still sees the same operation sequence.
    fn attend(
        &self,
        seq: &Sequence,
        layer: usize,
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
        let slots = || (0..base).chain(path.iter().map(|&j| base + j));
        let n_keys = base + path.len();
        scores.resize(group * n_keys, 0.0);
        for g in 0..cfg.n_kv_heads {
            let heads = g * group..(g + 1) * group;
            for (ki, s) in slots().enumerate() {
                let key = &k[s * kvd + g * hd..][..hd];
                for (j, h) in heads.clone().enumerate() {
                    scores[j * n_keys + ki] = ops::dot(&q[h * hd..(h + 1) * hd], key) * scale;
                }
            }
            let mut inv_sum = vec![0f32; group];
            for (j, row) in scores.chunks_exact_mut(n_keys).enumerate() {
                let max = row.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
                let mut sum = 0f32;
                for x in row.iter_mut() {
                    *x = (*x - max).exp();
                    sum += *x;
                }
                inv_sum[j] = 1.0 / sum;
            }
            let o = &mut out[g * group * hd..(g + 1) * group * hd];
            o.fill(0.0);
            for (ki, s) in slots().enumerate() {
                let val = &v[s * kvd + g * hd..][..hd];
                for (j, oh) in o.chunks_exact_mut(hd).enumerate() {
                    ops::axpy(scores[j * n_keys + ki], val, oh);
                }
            }
            for (j, oh) in o.chunks_exact_mut(hd).enumerate() {
                oh.iter_mut().for_each(|x| *x *= inv_sum[j]);
            }
        }
    }
}
