//! A deterministic stand-in for a model, so engine tests run in milliseconds without the
//! model file.
//!
//! [`FakeTarget`]'s logits are a pure function of the token path (a sequence's committed
//! tokens, then the node's ancestors from its root down to the node), so they are
//! batch-invariant by construction. It tends to repeat the token a few positions back, so
//! copying drafters get drafts accepted (and rejected), and it can be told to favour a
//! stop token once paths are long enough. Its sequences keep only their tokens
//! ([`Sequence::without_cache`]), and its forward checks and records inputs through
//! the same code as [`Model::forward`](crate::Model::forward): the same token range, tree
//! shape and context errors, and the same commit, prefix and fork behaviour.

use crate::batch::{keep_columns, split_logits, Batch};
use crate::{Logits, ModelConfig, RuntimeError, SeqInput, Sequence, Target};

/// Tokens of the path's end that choose a position's favourite and noise.
const WINDOW: usize = 6;
/// Once allowed, the stop token is the favourite at about one position in this many.
const EOS_EVERY: u64 = 8;
/// The favourite's margin over the noise (which lies in `0..NOISE`).
const FAVOURITE: f32 = 4.0;
const NOISE: f32 = 2.0;
/// How far the stop token is held down before it is allowed.
const EOS_HELD: f32 = 16.0;

#[derive(Clone, Copy, Debug)]
struct Eos {
    token: u32,
    after: usize,
}

/// A deterministic [`Target`] for tests: a small vocabulary, a context length, logits
/// computed from the token path alone. See the module documentation.
#[derive(Clone, Debug)]
pub struct FakeTarget {
    config: ModelConfig,
    eos: Option<Eos>,
    /// Mixed into the noise (`noise_salt`) or into everything (`salt`): another model over
    /// the same vocabulary, for drafts that agree in part or not at all.
    noise_salt: u64,
    salt: u64,
    /// Wall time each forward takes (see `with_forward_time`).
    forward_time: std::time::Duration,
}

impl FakeTarget {
    /// A fake with tokens `0..vocab` and a context of `context_length` positions.
    pub fn new(vocab: usize, context_length: usize) -> Self {
        assert!(vocab >= 2, "a fake target needs at least two tokens");
        FakeTarget {
            config: ModelConfig::without_layers("fake", vocab, context_length),
            eos: None,
            noise_salt: 0,
            salt: 0,
            forward_time: std::time::Duration::ZERO,
        }
    }

    /// Makes `token` a stop token: held far below every other token while the path is
    /// shorter than `after` tokens, then the favourite at about one position in eight
    /// (so greedy decoding stops some tokens after `after`, never before).
    pub fn with_eos(mut self, token: u32, after: usize) -> Self {
        assert!(
            (token as usize) < self.config.vocab,
            "eos outside the vocabulary"
        );
        self.eos = Some(Eos { token, after });
        self
    }

    /// The same favourites with other noise: a draft that often agrees on the best token
    /// and rarely on the rest of the order.
    pub fn with_noise_salt(mut self, salt: u64) -> Self {
        self.noise_salt = salt;
        self
    }

    /// Makes every forward take at least `d` of wall time (its logits unchanged): tests of
    /// deadlines, queues and cancellation need generations that are still running when
    /// they look, which a fake answering in microseconds never is.
    pub fn with_forward_time(mut self, d: std::time::Duration) -> Self {
        self.forward_time = d;
        self
    }

    /// Another model altogether over the same vocabulary (a bad draft).
    pub fn with_salt(mut self, salt: u64) -> Self {
        self.salt = salt;
        self
    }

    /// The stop token, if one was set.
    pub fn eos(&self) -> Option<u32> {
        self.eos.map(|e| e.token)
    }

    /// The logits a forward returns for a node whose path (committed tokens, then its
    /// ancestors from the root, then the node) is `path`.
    pub fn logits(&self, path: &[u32]) -> Vec<f32> {
        let mut out = Vec::with_capacity(self.config.vocab);
        self.logits_into(path, &mut out);
        out
    }

    /// Appends `path`'s logits to `out`.
    fn logits_into(&self, path: &[u32], out: &mut Vec<f32>) {
        let vocab = self.config.vocab as u64;
        let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ self.salt;
        for &t in path.iter().rev().take(WINDOW) {
            h = (h ^ u64::from(t)).wrapping_mul(0x0100_0000_01b3);
        }
        let lag = 2 + (h % 5) as usize;
        // Three positions in four repeat the token `lag` back, when there is one.
        let mut favourite = if path.len() >= lag && !h.is_multiple_of(4) {
            path[path.len() - lag]
        } else {
            ((h >> 8) % vocab) as u32
        };
        let mut held = None;
        if let Some(eos) = self.eos {
            if path.len() < eos.after {
                held = Some(eos.token);
            } else if (h ^ path.len() as u64)
                .wrapping_mul(0x94D0_49BB_1331_11EB)
                .wrapping_shr(32)
                .is_multiple_of(EOS_EVERY)
            {
                // The length takes part so that a repeating cycle still reaches the stop.
                favourite = eos.token;
            }
        }
        out.extend((0..vocab).map(|i| {
            let x = (h ^ self.noise_salt ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
                .wrapping_mul(0xBF58_476D_1CE4_E5B9);
            let mut v = (x >> 40) as f32 / (1u64 << 24) as f32 * NOISE;
            if i as u32 == favourite {
                v += FAVOURITE;
            }
            if Some(i as u32) == held {
                v -= EOS_HELD;
            }
            v
        }));
    }
}

impl Target for FakeTarget {
    fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn new_sequence(&self) -> Sequence {
        Sequence::without_cache(self.config.context_length)
    }

    fn forward(&self, inputs: &mut [SeqInput<'_>]) -> Result<Vec<Logits>, RuntimeError> {
        let vocab = self.config.vocab;
        let batch = Batch::plan(inputs, vocab)?;
        if !self.forward_time.is_zero() {
            std::thread::sleep(self.forward_time);
        }
        let wanted = Batch::wanted(inputs);
        let mut all = Vec::with_capacity(wanted.iter().map(|w| w.len()).sum::<usize>() * vocab);
        let mut path = Vec::new();
        for ((input, rows), nodes) in inputs.iter().zip(&batch.input_rows).zip(&wanted) {
            for node in nodes.clone() {
                path.clear();
                path.extend_from_slice(input.seq.tokens());
                let chain = &batch.paths[rows.start + node];
                path.extend(chain.iter().map(|&j| input.nodes[j].token));
                let start = all.len();
                self.logits_into(&path, &mut all);
                if let Some(cols) = input.want.columns() {
                    keep_columns(&mut all[start..], cols);
                }
            }
        }
        Batch::finish(inputs);
        Ok(split_logits(wanted, all, vocab))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Node, Want};

    fn argmax(v: &[f32]) -> u32 {
        let mut b = 0;
        for (i, &x) in v.iter().enumerate() {
            if x > v[b] {
                b = i;
            }
        }
        b as u32
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    fn prefill(t: &FakeTarget, tokens: &[u32]) -> Sequence {
        let mut seq = t.new_sequence();
        let nodes = Node::chain(tokens);
        t.forward(&mut [SeqInput {
            seq: &mut seq,
            nodes: &nodes,
            want: Want::None,
        }])
        .unwrap();
        seq.commit_all().unwrap();
        seq
    }

    /// Greedy decoding, one token per forward: the tokens and each step's logits.
    fn greedy(t: &FakeTarget, seq: &mut Sequence, n: usize) -> Vec<u32> {
        let mut next = *seq.tokens().last().unwrap();
        let mut out = Vec::new();
        // The last committed token is re-fed as the pending root, like the engine does.
        seq.truncate(seq.len() - 1);
        for _ in 0..n {
            let nodes = [Node {
                token: next,
                parent: None,
            }];
            let l = t
                .forward(&mut [SeqInput {
                    seq: &mut *seq,
                    nodes: &nodes,
                    want: Want::Last,
                }])
                .unwrap();
            seq.commit_all().unwrap();
            next = argmax(l[0].row(0));
            out.push(next);
        }
        out
    }

    fn tree() -> Vec<Node> {
        let p = |token, parent: Option<u32>| Node { token, parent };
        vec![
            p(3, None),
            p(5, Some(0)),
            p(7, Some(1)),
            p(2, Some(0)),
            p(9, Some(3)),
            p(1, None),
        ]
    }

    #[test]
    fn tree_logits_are_the_paths_logits_whatever_the_batch() {
        let t = FakeTarget::new(16, 64);
        let committed = [4, 8, 15, 1, 6];
        let tree = tree();
        let mut a = prefill(&t, &committed);
        let mut b = prefill(&t, &[1, 2]);
        let both = t
            .forward(&mut [
                SeqInput {
                    seq: &mut b,
                    nodes: &tree[..2],
                    want: Want::All,
                },
                SeqInput {
                    seq: &mut a,
                    nodes: &tree,
                    want: Want::All,
                },
            ])
            .unwrap();
        let chains = specdec_tree::ancestor_chains(&tree).unwrap();
        for (i, chain) in chains.iter().enumerate() {
            let mut path = committed.to_vec();
            path.extend(chain.iter().map(|&j| tree[j].token));
            assert_eq!(bits(both[1].get(i).unwrap()), bits(&t.logits(&path)));
            // Alone, one node at a time along its chain.
            let mut s = prefill(&t, &committed);
            let mut last = Vec::new();
            for &j in chain {
                let node = [Node {
                    token: tree[j].token,
                    parent: None,
                }];
                let l = t
                    .forward(&mut [SeqInput {
                        seq: &mut s,
                        nodes: &node,
                        want: Want::Last,
                    }])
                    .unwrap();
                s.commit_all().unwrap();
                last = bits(l[0].row(0));
            }
            assert_eq!(bits(both[1].get(i).unwrap()), last, "node {i}");
        }
        assert_eq!(
            bits(both[0].get(1).unwrap()),
            bits(&t.logits(&[1, 2, 3, 5]))
        );
    }

    #[test]
    fn want_selects_rows_and_commit_extends_the_path() {
        let t = FakeTarget::new(16, 64);
        let tree = tree();
        let mut seq = prefill(&t, &[4, 4]);
        for (want, rows) in [(Want::All, 0..6), (Want::Last, 5..6), (Want::None, 6..6)] {
            let l = t
                .forward(&mut [SeqInput {
                    seq: &mut seq,
                    nodes: &tree,
                    want,
                }])
                .unwrap();
            assert_eq!(l[0].nodes, rows);
        }
        seq.commit(&[0, 3, 4]).unwrap();
        assert_eq!(seq.tokens(), &[4, 4, 3, 2, 9]);
        assert!(seq.commit(&[0]).is_err(), "nothing pending after a commit");
        let l = t
            .forward(&mut [SeqInput {
                seq: &mut seq,
                nodes: &tree[..1],
                want: Want::All,
            }])
            .unwrap();
        assert_eq!(bits(l[0].row(0)), bits(&t.logits(&[4, 4, 3, 2, 9, 3])));
    }

    #[test]
    fn bad_inputs_are_the_models_errors() {
        let t = FakeTarget::new(16, 8);
        let mut seq = t.new_sequence();
        let run = |seq: &mut Sequence, nodes: &[Node]| {
            t.forward(&mut [SeqInput {
                seq,
                nodes,
                want: Want::All,
            }])
        };
        let oov = [Node {
            token: 16,
            parent: None,
        }];
        assert!(matches!(
            run(&mut seq, &oov),
            Err(RuntimeError::BadToken(16))
        ));
        let orphan = [Node {
            token: 1,
            parent: Some(0),
        }];
        assert!(matches!(
            run(&mut seq, &orphan),
            Err(RuntimeError::BadTree(_))
        ));
        let nine = Node::chain(&[1; 9]);
        assert!(matches!(
            run(&mut seq, &nine),
            Err(RuntimeError::ContextOverflow {
                needed: 9,
                limit: 8
            })
        ));
        run(&mut seq, &nine[..8]).unwrap();
        seq.commit_all().unwrap();
        assert!(matches!(
            run(&mut seq, &nine[..1]),
            Err(RuntimeError::ContextOverflow { .. })
        ));
        assert_eq!(seq.memory_bytes(), 0, "no layers, no cache");
    }

    #[test]
    fn greedy_decoding_copies_often_and_is_reproducible() {
        let t = FakeTarget::new(32, 512);
        let prompt: Vec<u32> = (0..20).map(|i| (i * 7 % 32) as u32).collect();
        let a = greedy(&t, &mut prefill(&t, &prompt), 200);
        let b = greedy(&t, &mut prefill(&t, &prompt), 200);
        assert_eq!(a, b);
        let ctx: Vec<u32> = prompt.iter().chain(&a).copied().collect();
        let repeats = (prompt.len()..ctx.len())
            .filter(|&i| (2..=6).any(|lag| ctx[i] == ctx[i - lag]))
            .count();
        assert!(repeats * 2 > a.len(), "{repeats} of {} repeat", a.len());
    }

    #[test]
    fn the_stop_token_comes_after_its_length_and_not_before() {
        let (eos, after) = (0, 40);
        let t = FakeTarget::new(32, 4096).with_eos(eos, after);
        assert_eq!(t.eos(), Some(eos));
        let mut stops = Vec::new();
        for seed in 0..20u32 {
            // Prompts holding the stop token: copying it is held down too.
            let prompt: Vec<u32> = (0..10).map(|i| (i * (seed + 3)) % 32).collect();
            let out = greedy(&t, &mut prefill(&t, &prompt), 300);
            let first = out.iter().position(|&x| x == eos).expect("stops");
            // out[k] follows a path of prompt.len() + k tokens.
            assert!(
                prompt.len() + first >= after,
                "seed {seed}: stop at {first}"
            );
            stops.push(prompt.len() + first);
        }
        assert!(stops.iter().any(|&s| s > after), "{stops:?}");
    }

    #[test]
    fn prefix_fork_and_branch_behave_as_on_the_model() {
        let t = FakeTarget::new(16, 64);
        let seq = prefill(&t, &[1, 2, 3, 4, 5, 6]);
        let mut cut = seq.prefix(3);
        assert_eq!(cut.tokens(), &[1, 2, 3]);
        let l = t
            .forward(&mut [SeqInput {
                seq: &mut cut,
                nodes: &Node::chain(&[9]),
                want: Want::All,
            }])
            .unwrap();
        assert_eq!(bits(l[0].row(0)), bits(&t.logits(&[1, 2, 3, 9])));
        let mut seq = seq.fork();
        let tree = tree();
        t.forward(&mut [SeqInput {
            seq: &mut seq,
            nodes: &tree,
            want: Want::None,
        }])
        .unwrap();
        let b = seq.branch(&[0, 3, 4]).unwrap();
        assert!(seq.branch(&[0, 4]).is_err());
        seq.commit(&[5]).unwrap();
        assert_eq!(b.tokens(), &[1, 2, 3, 4, 5, 6, 3, 2, 9]);
        assert_eq!(seq.tokens(), &[1, 2, 3, 4, 5, 6, 1]);
    }

    #[test]
    fn last_columns_keep_the_paths_logits_there_and_minus_infinity_elsewhere() {
        let t = FakeTarget::new(16, 64);
        let tree = tree();
        let cols: std::sync::Arc<[u32]> = vec![9, 2, 2, 15].into();
        let (mut a, mut b) = (prefill(&t, &[4, 8]), prefill(&t, &[1, 2]));
        let out = t
            .forward(&mut [
                SeqInput {
                    seq: &mut a,
                    nodes: &tree[..3],
                    want: Want::LastColumns(cols.clone()),
                },
                SeqInput {
                    seq: &mut b,
                    nodes: &tree[..2],
                    want: Want::All,
                },
            ])
            .unwrap();
        let full = t.logits(&[4, 8, 3, 5, 7]);
        assert!(out[0].get(1).is_none());
        for (i, &v) in out[0].get(2).unwrap().iter().enumerate() {
            let want = if cols.contains(&(i as u32)) {
                full[i]
            } else {
                f32::NEG_INFINITY
            };
            assert_eq!(v.to_bits(), want.to_bits(), "column {i}");
        }
        assert_eq!(bits(out[1].get(1).unwrap()), bits(&t.logits(&[1, 2, 3, 5])));
        let mut c = prefill(&t, &[1]);
        let bad = t.forward(&mut [SeqInput {
            seq: &mut c,
            nodes: &tree[..1],
            want: Want::LastColumns(vec![16].into()),
        }]);
        assert!(matches!(bad, Err(RuntimeError::BadToken(16))));
    }
}
