//! A target that has a model's shape and does none of its work, for offline replays.
//!
//! A replay forces a recorded output (see `specdec_verify::Forced`): which drafted tokens
//! are accepted is decided by the recorded tokens, not by logits. What is left to run is
//! the drafting and the trimming of every step, over the same trees the real run verified,
//! and that takes milliseconds where the model's forwards took seconds. [`ReplayTarget`]
//! checks its inputs and keeps its sequences as [`Model::forward`](crate::Model::forward)
//! does (the same token range, tree shape and context errors, commit, prefix and fork
//! behaviour) and returns flat logits.

use crate::batch::{keep_columns, split_logits, Batch};
use crate::{Logits, ModelConfig, RuntimeError, SeqInput, Sequence, Target};

/// A [`Target`] with a model's vocabulary and context length that computes nothing: every
/// logit it returns is zero. Only meaningful under a forced output.
#[derive(Clone, Debug)]
pub struct ReplayTarget {
    config: ModelConfig,
}

impl ReplayTarget {
    /// A replay of the model configured by `config` (its vocabulary and context length).
    pub fn new(config: &ModelConfig) -> Self {
        ReplayTarget {
            config: ModelConfig::without_layers(
                format!("replay of {}", config.name),
                config.vocab,
                config.context_length,
            ),
        }
    }
}

impl Target for ReplayTarget {
    fn config(&self) -> &ModelConfig {
        &self.config
    }

    fn new_sequence(&self) -> Sequence {
        Sequence::without_cache(self.config.context_length)
    }

    fn forward(&self, inputs: &mut [SeqInput<'_>]) -> Result<Vec<Logits>, RuntimeError> {
        let vocab = self.config.vocab;
        // Planned for its checks: a replay refuses what the model would refuse.
        Batch::plan(inputs, vocab)?;
        let wanted = Batch::wanted(inputs);
        let rows: usize = wanted.iter().map(|w| w.len()).sum();
        let mut all = vec![0f32; rows * vocab];
        let mut row = 0;
        for (input, nodes) in inputs.iter().zip(&wanted) {
            if let Some(cols) = input.want.columns() {
                for _ in nodes.clone() {
                    keep_columns(&mut all[row * vocab..(row + 1) * vocab], cols);
                    row += 1;
                }
            } else {
                row += nodes.len();
            }
        }
        Batch::finish(inputs);
        Ok(split_logits(wanted, all, vocab))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FakeTarget, Node, Want};

    #[test]
    fn a_replay_keeps_sequences_and_refuses_inputs_as_a_model_does() {
        let shape = FakeTarget::new(50, 64);
        let t = ReplayTarget::new(shape.config());
        let mut seq = t.new_sequence();
        let nodes = Node::chain(&[1, 2, 3]);
        let logits = t
            .forward(&mut [SeqInput {
                seq: &mut seq,
                nodes: &nodes,
                want: Want::All,
            }])
            .unwrap();
        assert_eq!(logits[0].nodes.len(), 3);
        seq.commit_all().unwrap();
        assert_eq!(seq.tokens(), &[1, 2, 3]);
        // A token outside the vocabulary is refused, as the model refuses it.
        let bad = Node::chain(&[50]);
        assert!(t
            .forward(&mut [SeqInput {
                seq: &mut seq,
                nodes: &bad,
                want: Want::All,
            }])
            .is_err());
    }
}
