//! What the engine needs of a model: the seam between decoding logic and a forward pass.

use crate::{Logits, Model, ModelConfig, RuntimeError, SeqInput, Sequence};

/// A model the engine can decode with: the real runtime model, a draft model, or a small
/// deterministic fake in tests. A forward must be batch-invariant (a node's logits do not
/// depend on what else is in the batch) for speculation to stay exact.
pub trait Target: Send + Sync {
    /// The model's hyper-parameters (vocabulary and context length are what decoding reads).
    fn config(&self) -> &ModelConfig;

    /// A new empty sequence.
    fn new_sequence(&self) -> Sequence;

    /// Evaluates every input's nodes after its committed prefix and returns the requested
    /// logits; node keys and values stay in each sequence's scratch rows until `commit`.
    fn forward(&self, inputs: &mut [SeqInput<'_>]) -> Result<Vec<Logits>, RuntimeError>;
}

impl Target for Model {
    fn config(&self) -> &ModelConfig {
        Model::config(self)
    }

    fn new_sequence(&self) -> Sequence {
        Model::new_sequence(self)
    }

    fn forward(&self, inputs: &mut [SeqInput<'_>]) -> Result<Vec<Logits>, RuntimeError> {
        Model::forward(self, inputs)
    }
}
