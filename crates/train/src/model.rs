//! The draft model in candle: a small Llama (RMSNorm, interleaved RoPE, grouped-query
//! attention, SwiGLU, tied embeddings) whose forward is the one specdec's runtime runs for a
//! GGUF `llama` file, so an exported draft scores what it was trained to score.
//!
//! Parameters are named as in GGUF (`token_embd.weight`, `blk.N.attn_q.weight`, ...), so
//! checkpoints and exports use the same names. Matrices are stored `[out, in]`, which is
//! also GGUF's row-major layout for a tensor of dims `[in, out]`.

use candle_core::{DType, Device, Tensor, Var, D};
use candle_nn::VarMap;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use specdec_gguf::names;

use crate::TrainError;

/// The draft's hyper-parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DraftConfig {
    /// Transformer blocks.
    pub n_layers: usize,
    /// Width of the residual stream.
    pub hidden: usize,
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads (grouped-query attention).
    pub n_kv_heads: usize,
    /// Width of the feed-forward's hidden layer.
    pub ffn: usize,
    /// Vocabulary size: the target's, so draft and target share token ids.
    pub vocab: usize,
    /// Longest sequence: the RoPE tables' size in training, and the export's context length.
    pub context_length: usize,
    /// RoPE frequency base.
    pub rope_base: f32,
    /// Epsilon of the RMS norms.
    pub rms_eps: f32,
}

impl DraftConfig {
    /// The default draft: 2 layers, hidden 256, 4 heads (2 kv heads), ffn 768.
    pub fn small(vocab: usize) -> Self {
        DraftConfig {
            n_layers: 2,
            hidden: 256,
            n_heads: 4,
            n_kv_heads: 2,
            ffn: 768,
            vocab,
            context_length: 2048,
            rope_base: 10000.0,
            rms_eps: 1e-5,
        }
    }

    /// Width of one attention head (`hidden / n_heads`).
    pub fn head_dim(&self) -> usize {
        self.hidden / self.n_heads
    }

    /// Every parameter's GGUF name and shape `[out, in]` (vectors `[n]`), in file order.
    pub fn parameters(&self) -> Vec<(String, Vec<usize>)> {
        let (h, hd, f) = (self.hidden, self.head_dim(), self.ffn);
        let mut p = vec![(names::TOKEN_EMBD.to_string(), vec![self.vocab, h])];
        for i in 0..self.n_layers {
            let n = |s: &str| names::block(i, s);
            p.extend([
                (n(names::ATTN_NORM), vec![h]),
                (n(names::ATTN_Q), vec![self.n_heads * hd, h]),
                (n(names::ATTN_K), vec![self.n_kv_heads * hd, h]),
                (n(names::ATTN_V), vec![self.n_kv_heads * hd, h]),
                (n(names::ATTN_OUTPUT), vec![h, self.n_heads * hd]),
                (n(names::FFN_NORM), vec![h]),
                (n(names::FFN_GATE), vec![f, h]),
                (n(names::FFN_UP), vec![f, h]),
                (n(names::FFN_DOWN), vec![h, f]),
            ]);
        }
        p.push((names::OUTPUT_NORM.to_string(), vec![h]));
        p
    }

    fn check(&self) -> Result<(), TrainError> {
        let ok = self.n_heads > 0
            && self.n_kv_heads > 0
            && self.hidden.is_multiple_of(self.n_heads)
            && self.n_heads.is_multiple_of(self.n_kv_heads)
            && self.head_dim().is_multiple_of(2)
            && self.vocab > 0;
        if !ok {
            return Err(TrainError::Config(format!("{self:?}")));
        }
        Ok(())
    }
}

/// The draft: its configuration and its trainable parameters.
pub struct Draft {
    /// The hyper-parameters.
    pub config: DraftConfig,
    /// The trainable parameters, by GGUF tensor name.
    pub vars: VarMap,
    cos: Tensor,
    sin: Tensor,
}

/// Standard deviation of the random matrices (Llama's initialisation).
const INIT_STD: f64 = 0.02;

impl Draft {
    /// A draft with seeded random matrices, unit norms and, when given, the embedding
    /// initialised from the target's (`target_embd`: `vocab` rows of `width`), see
    /// [`project_embedding`].
    pub fn new(
        config: DraftConfig,
        seed: u64,
        target_embd: Option<(&[f32], usize)>,
    ) -> Result<Self, TrainError> {
        config.check()?;
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let vars = VarMap::new();
        {
            let mut data = vars.data().lock().expect("var map lock");
            for (name, shape) in config.parameters() {
                let n: usize = shape.iter().product();
                let values: Vec<f32> = if shape.len() == 1 {
                    vec![1.0; n]
                } else if name == names::TOKEN_EMBD && target_embd.is_some() {
                    let (e, width) = target_embd.expect("checked");
                    project_embedding(e, width, config.vocab, config.hidden, &mut rng)?
                } else {
                    uniform(n, INIT_STD, &mut rng)
                };
                let t = Tensor::from_vec(values, shape, &Device::Cpu)?;
                data.insert(name, Var::from_tensor(&t)?);
            }
        }
        Self::with_vars(config, vars)
    }

    /// A draft over existing parameters (a loaded checkpoint).
    pub fn with_vars(config: DraftConfig, vars: VarMap) -> Result<Self, TrainError> {
        config.check()?;
        let (cos, sin) = rope_tables(&config)?;
        Ok(Draft {
            config,
            vars,
            cos,
            sin,
        })
    }

    /// The parameter `name`.
    pub fn param(&self, name: &str) -> Result<Tensor, TrainError> {
        let data = self.vars.data().lock().expect("var map lock");
        data.get(name)
            .map(|v| v.as_tensor().clone())
            .ok_or_else(|| TrainError::Config(format!("no parameter `{name}`")))
    }

    /// The trainable variables in `parameters()` order, with their names.
    pub fn named_vars_in_order(&self) -> Vec<(String, Var)> {
        let data = self.vars.data().lock().expect("var map lock");
        self.config
            .parameters()
            .into_iter()
            .filter_map(|(n, _)| data.get(&n).cloned().map(|v| (n, v)))
            .collect()
    }

    /// The final-norm hidden states of every node, `[b * t, hidden]`, for `tokens`
    /// `[b, t]` laid out by `layout` (`None`: each row one causal chain from position 0).
    pub fn hidden_states(
        &self,
        tokens: &Tensor,
        layout: Option<&Layout>,
    ) -> Result<Tensor, TrainError> {
        let c = &self.config;
        let (b, t) = tokens.dims2()?;
        let chain;
        let layout = match layout {
            Some(l) => l,
            None => {
                chain = Layout::chains(b, t)?;
                &chain
            }
        };
        if layout.max_position >= c.context_length {
            return Err(TrainError::Config(format!(
                "position {} exceeds the context of {}",
                layout.max_position, c.context_length
            )));
        }
        let (h, hd) = (c.hidden, c.head_dim());
        let group = c.n_heads / c.n_kv_heads;
        let emb = self.param(names::TOKEN_EMBD)?;
        let mut x = emb
            .index_select(&tokens.flatten_all()?, 0)?
            .reshape((b, t, h))?;
        // Each node's rotation, `[b, 1, t, hd / 2, 1]` to broadcast over heads and pairs.
        let at = |table: &Tensor| -> Result<Tensor, TrainError> {
            Ok(table
                .index_select(&layout.positions.flatten_all()?, 0)?
                .reshape((b, 1, t, hd / 2, 1))?)
        };
        let (cos, sin) = (at(&self.cos)?, at(&self.sin)?);
        let scale = 1.0 / (hd as f64).sqrt();
        for i in 0..c.n_layers {
            let p = |s: &str| self.param(&names::block(i, s));
            let xn = rms_norm(&x, &p(names::ATTN_NORM)?, c.rms_eps)?;
            let heads = |w: &str, n: usize| -> Result<Tensor, TrainError> {
                let y = linear(&xn, &p(w)?)?;
                let y = y.reshape((b, t, n, hd))?.transpose(1, 2)?.contiguous()?;
                Ok(y)
            };
            let q = rope(&heads(names::ATTN_Q, c.n_heads)?, &cos, &sin)?;
            let k = rope(&heads(names::ATTN_K, c.n_kv_heads)?, &cos, &sin)?;
            let v = heads(names::ATTN_V, c.n_kv_heads)?;
            let (k, v) = (repeat_kv(&k, group)?, repeat_kv(&v, group)?);
            let scores = (q.matmul(&k.t()?)? * scale)?.broadcast_add(&layout.mask)?;
            let attn = candle_nn::ops::softmax(&scores, D::Minus1)?.matmul(&v)?;
            let attn = attn.transpose(1, 2)?.reshape((b, t, c.n_heads * hd))?;
            x = (x + linear(&attn, &p(names::ATTN_OUTPUT)?)?)?;
            let xn = rms_norm(&x, &p(names::FFN_NORM)?, c.rms_eps)?;
            let gate = linear(&xn, &p(names::FFN_GATE)?)?.silu()?;
            let up = linear(&xn, &p(names::FFN_UP)?)?;
            x = (x + linear(&(gate * up)?, &p(names::FFN_DOWN)?)?)?;
        }
        let x = rms_norm(&x, &self.param(names::OUTPUT_NORM)?, c.rms_eps)?;
        Ok(x.reshape((b * t, h))?)
    }

    /// The logits of flat rows `rows` (`sequence * t + position`) over the token columns
    /// `columns` only (`None`: the whole vocabulary), `[rows, columns]`: a loss that reads
    /// a few allowed tokens per row never pays for the full head.
    pub fn logits_at(
        &self,
        tokens: &Tensor,
        layout: Option<&Layout>,
        rows: &[u32],
        columns: Option<&Tensor>,
    ) -> Result<Tensor, TrainError> {
        let hs = self.hidden_states(tokens, layout)?;
        let idx = Tensor::new(rows, &Device::Cpu)?;
        let picked = hs.index_select(&idx, 0)?;
        let emb = self.param(names::TOKEN_EMBD)?;
        let head = match columns {
            Some(c) => emb.index_select(c, 0)?,
            None => emb,
        };
        Ok(picked.matmul(&head.t()?)?)
    }

    /// Every position's logits of one token sequence, `[len, vocab]`.
    pub fn logits(&self, tokens: &[u32]) -> Result<Tensor, TrainError> {
        let t = Tensor::new(tokens, &Device::Cpu)?.unsqueeze(0)?;
        let rows: Vec<u32> = (0..tokens.len() as u32).collect();
        self.logits_at(&t, None, &rows, None)
    }
}

/// Where each node of a batch row sits: its RoPE position and the nodes it attends to. A
/// row may hold a tree (a prompt and several continuations sharing it), each node seeing
/// its ancestors and itself, as the runtime's tree forward does.
pub struct Layout {
    /// `[b, t]` positions.
    pub positions: Tensor,
    /// `[b, 1, t, t]`: 0 where a node may attend, minus infinity elsewhere.
    pub mask: Tensor,
    max_position: usize,
}

impl Layout {
    /// Rows of trees given by each node's parent (`None`: a root at position 0), every row
    /// padded to `t` nodes; padding attends to itself only and is never read.
    pub fn trees(parents: &[Vec<Option<usize>>], t: usize) -> Result<Layout, TrainError> {
        let b = parents.len();
        let mut positions = vec![0u32; b * t];
        let mut mask = vec![f32::NEG_INFINITY; b * t * t];
        for (r, nodes) in parents.iter().enumerate() {
            if nodes.len() > t {
                return Err(TrainError::Config(format!("{} nodes in {t}", nodes.len())));
            }
            for i in 0..t {
                let m = &mut mask[(r * t + i) * t..][..t];
                m[i] = 0.0;
                let Some(&parent) = nodes.get(i) else {
                    continue;
                };
                if let Some(p) = parent {
                    if p >= i {
                        return Err(TrainError::Config(format!("node {i} has parent {p}")));
                    }
                    positions[r * t + i] = positions[r * t + p] + 1;
                }
                let mut a = parent;
                while let Some(p) = a {
                    m[p] = 0.0;
                    a = nodes[p];
                }
            }
        }
        let max_position = positions.iter().copied().max().unwrap_or(0) as usize;
        let dev = &Device::Cpu;
        Ok(Layout {
            positions: Tensor::from_vec(positions, (b, t), dev)?,
            mask: Tensor::from_vec(mask, (b, 1, t, t), dev)?,
            max_position,
        })
    }

    /// `b` causal chains of `t` tokens.
    pub fn chains(b: usize, t: usize) -> Result<Layout, TrainError> {
        let chain: Vec<Option<usize>> = (0..t).map(|i| i.checked_sub(1)).collect();
        Self::trees(&vec![chain; b], t)
    }
}

/// Interleaved RoPE (pairs `2i, 2i + 1`, the runtime's `llama` convention) of `x`
/// `[b, heads, t, d]` with per-node `cos`/`sin` `[b, 1, t, d / 2, 1]`.
fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor, TrainError> {
    let (b, n, t, d) = x.dims4()?;
    let x = x.reshape((b, n, t, d / 2, 2))?;
    let (x0, x1) = (x.narrow(4, 0, 1)?, x.narrow(4, 1, 1)?);
    let y0 = (x0.broadcast_mul(cos)? - x1.broadcast_mul(sin)?)?;
    let y1 = (x0.broadcast_mul(sin)? + x1.broadcast_mul(cos)?)?;
    Ok(Tensor::cat(&[y0, y1], 4)?.reshape((b, n, t, d))?)
}

fn linear(x: &Tensor, w: &Tensor) -> Result<Tensor, TrainError> {
    Ok(x.broadcast_matmul(&w.t()?)?)
}

fn rms_norm(x: &Tensor, w: &Tensor, eps: f32) -> Result<Tensor, TrainError> {
    // The slow variant is built from differentiable ops (the fused one has no backward).
    Ok(candle_nn::ops::rms_norm_slow(x, w, eps)?)
}

/// `[b, n_kv, t, d]` to `[b, n_kv * group, t, d]`, each kv head repeated `group` times in place.
fn repeat_kv(x: &Tensor, group: usize) -> Result<Tensor, TrainError> {
    if group == 1 {
        return Ok(x.clone());
    }
    let (b, n, t, d) = x.dims4()?;
    Ok(x.unsqueeze(2)?
        .expand((b, n, group, t, d))?
        .reshape((b, n * group, t, d))?)
}

/// cos and sin of every position and pair, `[context, head_dim / 2]`, computed as the
/// runtime computes them (f64 angles, rounded to f32).
fn rope_tables(c: &DraftConfig) -> Result<(Tensor, Tensor), TrainError> {
    let (hd, half) = (c.head_dim(), c.head_dim() / 2);
    let mut cos = Vec::with_capacity(c.context_length * half);
    let mut sin = Vec::with_capacity(c.context_length * half);
    for p in 0..c.context_length {
        for i in 0..half {
            let f = (c.rope_base as f64).powf(-((2 * i) as f64) / hd as f64);
            let a = p as f64 * f;
            cos.push(a.cos() as f32);
            sin.push(a.sin() as f32);
        }
    }
    let shape = (c.context_length, half);
    Ok((
        Tensor::from_vec(cos, shape, &Device::Cpu)?,
        Tensor::from_vec(sin, shape, &Device::Cpu)?,
    ))
}

/// `n` values uniform with mean 0 and standard deviation `std`.
fn uniform(n: usize, std: f64, rng: &mut impl Rng) -> Vec<f32> {
    let a = std * 3f64.sqrt();
    (0..n).map(|_| rng.gen_range(-a..a) as f32).collect()
}

/// The target's embedding (`vocab` rows of `width`) projected to `hidden` columns by a
/// seeded random matrix with entries of variance 1/hidden (Johnson-Lindenstrauss): dot
/// products between token embeddings, which tied logits are made of, are kept in
/// expectation, and so are row norms. Truncating to the first `hidden` columns would
/// keep only part of each row's norm.
pub fn project_embedding(
    e: &[f32],
    width: usize,
    vocab: usize,
    hidden: usize,
    rng: &mut impl Rng,
) -> Result<Vec<f32>, TrainError> {
    if e.len() != vocab * width {
        return Err(TrainError::Config(format!(
            "target embedding has {} values, expected {vocab} x {width}",
            e.len()
        )));
    }
    let r = Tensor::from_vec(
        uniform(width * hidden, 1.0 / (hidden as f64).sqrt(), rng),
        (width, hidden),
        &Device::Cpu,
    )?;
    let et = Tensor::from_slice(e, (vocab, width), &Device::Cpu)?;
    Ok(et
        .matmul(&r)?
        .to_dtype(DType::F32)?
        .flatten_all()?
        .to_vec1()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> DraftConfig {
        DraftConfig {
            n_layers: 1,
            hidden: 16,
            n_heads: 4,
            n_kv_heads: 2,
            ffn: 32,
            vocab: 50,
            context_length: 64,
            rope_base: 10000.0,
            rms_eps: 1e-5,
        }
    }

    #[test]
    fn logits_are_causal_and_seeded() {
        let d = Draft::new(tiny(), 3, None).unwrap();
        let a = d.logits(&[1, 2, 3, 4]).unwrap().to_vec2::<f32>().unwrap();
        let b = d.logits(&[1, 2, 3, 9]).unwrap().to_vec2::<f32>().unwrap();
        assert_eq!(a[..3], b[..3], "a later token changed an earlier row");
        assert_ne!(a[3], b[3]);
        let again = Draft::new(tiny(), 3, None).unwrap();
        assert_eq!(
            again
                .logits(&[1, 2, 3, 4])
                .unwrap()
                .to_vec2::<f32>()
                .unwrap(),
            a
        );
    }

    #[test]
    fn a_tree_row_scores_each_branch_as_its_own_chain() {
        let d = Draft::new(tiny(), 4, None).unwrap();
        // Prompt 1 2 3, then branches 4 5 and 6 off the prompt, and 7 off 4.
        let parents = vec![vec![
            None,
            Some(0),
            Some(1),
            Some(2),
            Some(3),
            Some(2),
            Some(3),
        ]];
        let layout = Layout::trees(&parents, 8).unwrap();
        let padded = Tensor::new(&[1u32, 2, 3, 4, 5, 6, 7, 0], &Device::Cpu)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let rows: Vec<u32> = (0..7).collect();
        let tree = d
            .logits_at(&padded, Some(&layout), &rows, None)
            .unwrap()
            .to_vec2::<f32>()
            .unwrap();
        for (node, chain) in [
            (4, vec![1, 2, 3, 4, 5]),
            (5, vec![1, 2, 3, 6]),
            (6, vec![1, 2, 3, 4, 7]),
        ] {
            let want = d.logits(&chain).unwrap().to_vec2::<f32>().unwrap();
            let last = want.last().unwrap();
            let diff = tree[node]
                .iter()
                .zip(last)
                .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            assert!(diff < 1e-5, "node {node}: {diff}");
        }
        // Only the chosen columns, in their order.
        let cols = Tensor::new(&[9u32, 2], &Device::Cpu).unwrap();
        let some = d
            .logits_at(&padded, Some(&layout), &[4], Some(&cols))
            .unwrap()
            .to_vec2::<f32>()
            .unwrap();
        assert!((some[0][0] - tree[4][9]).abs() < 1e-5 && (some[0][1] - tree[4][2]).abs() < 1e-5);
    }

    #[test]
    fn projection_keeps_norms_roughly() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let e = uniform(4 * 64, 1.0, &mut rng);
        let p = project_embedding(&e, 64, 4, 256, &mut rng).unwrap();
        for r in 0..4 {
            let n0: f32 = e[r * 64..][..64].iter().map(|v| v * v).sum();
            let n1: f32 = p[r * 256..][..256].iter().map(|v| v * v).sum();
            assert!((n1 / n0 - 1.0).abs() < 0.3, "{n0} {n1}");
        }
    }
}
