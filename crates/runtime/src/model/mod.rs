//! The forward pass over token trees of one or more sequences: the public types and the
//! layer loop. Loading, attention, the logits head and the row-wise steps are submodules;
//! what each layer does comes from the model's architecture description (`crate::arch`).

mod attention;
mod footprint;
mod load;
mod logits;
mod profile;
mod rows;

use std::ops::Range;
use std::sync::Arc;

use specdec_kernels::{Executor, QuantizedRows};

use crate::arch::ArchSpec;
use crate::batch::Batch;
use crate::config::ModelConfig;
use crate::kv::KvCache;
use crate::ops::{Rope, RopeTable};
use crate::weights::Weights;
use crate::Node;
use crate::Sequence;

use crate::RuntimeError;
pub use footprint::ForwardWork;
use profile::Profiler;
pub use profile::{ForwardProfile, Phase};

/// Which nodes of an input need logits.
#[derive(Clone, Debug)]
pub enum Want {
    /// Every node's logits (verification of a draft tree).
    All,
    /// The last node's logits only (the end of a prefill, or plain decoding).
    Last,
    /// No logits: the forward only fills the cache (e.g. a prefill chunk before the last).
    None,
    /// The last node's logits of these token columns only (any order, repeats allowed,
    /// each below the vocabulary): the head computes just them, with the same bits as a
    /// full row, and every other column of the row reads `f32::NEG_INFINITY`. For a
    /// caller that scores a known few tokens (a catalogue-trained draft's trie children).
    LastColumns(Arc<[u32]>),
    /// Every node's argmax (the lowest index on ties, read by [`Logits::argmax`]), what
    /// greedy verification needs. When the forward's rows would be large (64 nodes of a
    /// 262k vocabulary: 67 MB) and every input asks only this, the head runs in blocks of
    /// columns, each reduced before the next, and no row is held; otherwise the rows are
    /// computed whole and kept, and each argmax is taken from its row when read.
    Argmax,
}

impl Want {
    /// The columns a [`Want::LastColumns`] keeps; `None` for a full row.
    pub fn columns(&self) -> Option<&[u32]> {
        match self {
            Want::LastColumns(cols) => Some(cols),
            _ => None,
        }
    }
}

/// One sequence's share of a forward.
pub struct SeqInput<'a> {
    /// The sequence whose committed prefix the nodes continue; their keys and values go to
    /// its scratch rows.
    pub seq: &'a mut Sequence,
    /// The nodes to evaluate, parents before children.
    pub nodes: &'a [Node],
    /// Which nodes need logits.
    pub want: Want,
}

/// Logits of the requested nodes of one input.
#[derive(Clone, Debug, Default)]
pub struct Logits {
    pub(crate) vocab: usize,
    /// The nodes with logits: `Want` asks for all, the last or none, always a range.
    /// (A `LastColumns` row is vocabulary-wide too, its other columns `-inf`.)
    pub(crate) nodes: Range<usize>,
    /// The whole forward's logits, shared by its inputs (a batch is not copied apart);
    /// this input's rows start at row `first`.
    pub(crate) data: Arc<Vec<f32>>,
    pub(crate) first: usize,
    /// For [`Want::Argmax`]: the nodes' argmaxes, from row `first` (`data` is empty).
    pub(crate) argmax: Option<Arc<Vec<u32>>>,
}

impl Logits {
    /// The logits of node `i`, if they were requested (a streamed [`Want::Argmax`]
    /// forward holds none).
    pub fn get(&self, i: usize) -> Option<&[f32]> {
        (self.argmax.is_none() && self.nodes.contains(&i)).then(|| self.row(i - self.nodes.start))
    }

    /// The logits of the `r`-th requested node (panics for a streamed [`Want::Argmax`]
    /// forward: no rows).
    pub fn row(&self, r: usize) -> &[f32] {
        assert!(self.argmax.is_none(), "Want::Argmax logits hold no rows");
        &self.data[(self.first + r) * self.vocab..][..self.vocab]
    }

    /// Node `i`'s argmax (the lowest index on ties), if its logits were requested: as
    /// computed for [`Want::Argmax`], else over its row.
    pub fn argmax(&self, i: usize) -> Option<u32> {
        if !self.nodes.contains(&i) {
            return None;
        }
        let r = i - self.nodes.start;
        Some(match &self.argmax {
            Some(ids) => ids[self.first + r],
            None => argmax(self.row(r)),
        })
    }
}

/// Index of the largest value, the lowest on ties (a NaN is never larger): the rule of
/// greedy decoding, applied the same way to whole rows and to blocks streamed in order.
pub(crate) fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best as u32
}

/// A loaded model ready to run.
pub struct Model {
    config: ModelConfig,
    spec: ArchSpec,
    /// Shared by [`Model::on_executor`]'s copies: read-only after load.
    weights: Arc<Weights>,
    /// One per table of `spec.ropes` (their tables grow behind a lock, shared likewise).
    ropes: Arc<[Rope]>,
    exec: Executor,
    profiler: Profiler,
}

impl Model {
    /// The model's hyper-parameters.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// What each layer of this model has and does.
    pub fn arch_spec(&self) -> &ArchSpec {
        &self.spec
    }

    /// The kernels' executor (thread pool and instruction set) the model runs on.
    pub fn executor(&self) -> &Executor {
        &self.exec
    }

    /// This model on another executor (a thread count or instruction set), sharing its
    /// weights: no second copy and no reload, since packing does not depend on the
    /// executor. Outputs are the same bits on every executor (the runtime is batch- and
    /// instruction-set-invariant), so sequences of one are valid in the other.
    pub fn on_executor(&self, exec: Executor) -> Model {
        Model {
            config: self.config.clone(),
            spec: self.spec.clone(),
            weights: Arc::clone(&self.weights),
            ropes: Arc::clone(&self.ropes),
            exec,
            profiler: Default::default(),
        }
    }

    /// Starts (or stops) timing the phases of every forward (see [`Model::take_profile`]);
    /// off, it costs a relaxed load per phase.
    pub fn set_profiling(&self, on: bool) {
        self.profiler.set(on);
        self.exec.set_profiling(on);
    }

    /// The phases' times and the thread pool's dispatches and barrier waits since the
    /// last take (zeroed by it).
    pub fn take_profile(&self) -> ForwardProfile {
        self.profiler.take(self.exec.take_sync_stats())
    }

    /// A new empty sequence.
    pub fn new_sequence(&self) -> Sequence {
        Sequence::new(KvCache::new(
            self.config.n_layers,
            self.config.n_kv_heads,
            self.config.head_dim,
            self.config.context_length,
        ))
    }

    /// Evaluates every input's nodes after its committed prefix and returns the requested
    /// logits. Node keys and values go to each sequence's scratch rows until `commit`.
    /// A node's logits are bit-identical however the nodes are batched.
    pub fn forward(&self, inputs: &mut [SeqInput<'_>]) -> Result<Vec<Logits>, RuntimeError> {
        let t = self.profiler.start();
        let out = self.forward_layers(inputs);
        self.profiler.add_forward(t);
        out
    }

    fn forward_layers(&self, inputs: &mut [SeqInput<'_>]) -> Result<Vec<Logits>, RuntimeError> {
        let prof = &self.profiler;
        let t = prof.start();
        let cfg = &self.config;
        let (h, qd, kvd) = (cfg.hidden, cfg.q_dim(), cfg.kv_dim());
        let Batch {
            rows,
            paths,
            input_rows,
        } = Batch::plan(inputs, cfg.vocab)?;
        let nodes: Vec<&[Node]> = inputs.iter().map(|i| i.nodes).collect();
        // Each input's cache, with room for its nodes' scratch rows; a sequence of another
        // target is refused before anything is written.
        let mut caches: Vec<&mut KvCache> = inputs
            .iter_mut()
            .map(|i| i.seq.state_mut::<KvCache>())
            .collect::<Option<_>>()
            .ok_or(RuntimeError::ForeignSequence("not the CPU runtime's"))?;
        for (cache, nodes) in caches.iter_mut().zip(&nodes) {
            cache.reserve(nodes.len());
        }
        let n = rows.len();
        let mut x = vec![0f32; n * h];
        for (r, info) in rows.iter().enumerate() {
            let token = nodes[info.item][info.node].token;
            let xr = &mut x[r * h..(r + 1) * h];
            self.weights.embedding.row(token, xr)?;
            if let Some(s) = self.spec.embedding_scale {
                xr.iter_mut().for_each(|v| *v *= s);
            }
        }
        let mut xn = vec![0f32; n * h];
        let mut qrows = QuantizedRows::new();
        let mut qkv = vec![0f32; n * (qd + 2 * kvd)];
        let mut attn = vec![0f32; n * qd];
        let mut proj = vec![0f32; n * h];
        let mut gate_up = vec![0f32; n * 2 * cfg.ffn];
        let mut act = vec![0f32; n * cfg.ffn];
        let mut head_tmp = Vec::new();
        let blocks = self.attention_blocks(&input_rows);
        let positions = rows.iter().map(|r| r.pos + 1).max().unwrap_or(0);
        let ropes: Vec<RopeTable<'_>> = self.ropes.iter().map(|r| r.table(positions)).collect();
        prof.add(Phase::Setup, t);
        // Each matrix is warmed while the one before it and the steps between run (see
        // `Executor::warm_next`); the first layer's after the head, for the next forward.
        let warm = |m| self.exec.warm_next(m);
        let layers = self.weights.layers.iter().zip(&self.spec.layers);
        for (li, (layer, spec)) in layers.enumerate() {
            let t = prof.start();
            self.norm_rows(&x, &layer.attn_norm, &mut xn);
            prof.add(Phase::Norms, t);
            self.matmul(Phase::Qkv, &layer.qkv, &xn, n, &mut qrows, &mut qkv)?;
            warm(&layer.o);
            let t = prof.start();
            for (r, info) in rows.iter().enumerate() {
                let row = &mut qkv[r * (qd + 2 * kvd)..(r + 1) * (qd + 2 * kvd)];
                if let Some(b) = &layer.qkv_bias {
                    row.iter_mut().zip(b).for_each(|(v, b)| *v += b);
                }
                if let Some((qn, kn)) = &layer.qk_norm {
                    rows::norm_heads(&mut row[..qd], qn, cfg.rms_eps, &mut head_tmp);
                    rows::norm_heads(&mut row[qd..qd + kvd], kn, cfg.rms_eps, &mut head_tmp);
                }
                ropes[spec.rope].apply(&mut row[..qd + kvd], info.pos);
                let cache = &mut *caches[info.item];
                let slot = cache.len() + info.node;
                cache.write(li, slot, &row[qd..qd + kvd], &row[qd + kvd..]);
            }
            prof.add(Phase::RopeKv, t);
            let t = prof.start();
            self.attention(&caches, &nodes, &rows, &blocks, &paths, li, &qkv, &mut attn)?;
            prof.add(Phase::Attention, t);
            self.matmul(Phase::AttnOut, &layer.o, &attn, n, &mut qrows, &mut proj)?;
            warm(&layer.gate_up);
            let t = prof.start();
            self.add_residual(&mut x, &proj, layer.post_attn_norm.as_deref(), &mut xn);
            self.norm_rows(&x, &layer.ffn_norm, &mut xn);
            prof.add(Phase::Norms, t);
            self.matmul(
                Phase::GateUp,
                &layer.gate_up,
                &xn,
                n,
                &mut qrows,
                &mut gate_up,
            )?;
            warm(&layer.down);
            let t = prof.start();
            self.gated_rows(spec.activation, &gate_up, &mut act)?;
            prof.add(Phase::Activation, t);
            self.matmul(Phase::Down, &layer.down, &act, n, &mut qrows, &mut proj)?;
            let next = self.weights.layers.get(li + 1).map(|l| &l.qkv);
            warm(next.unwrap_or(&self.weights.head));
            let t = prof.start();
            self.add_residual(&mut x, &proj, layer.post_ffn_norm.as_deref(), &mut xn);
            prof.add(Phase::Norms, t);
        }
        drop((ropes, caches));
        Batch::finish(inputs);
        let out = self.logits_rows(inputs, &input_rows, &x, &mut qrows);
        if let Some(l0) = self.weights.layers.first() {
            warm(&l0.qkv);
        }
        out
    }
}
