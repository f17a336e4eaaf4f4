//! specdec's model runtime: GGUF Llama-family models on batch-invariant CPU kernels.
//!
//! A forward evaluates a *token tree* per sequence: each node attends to the sequence's
//! committed prefix and to its own ancestors, at position `prefix_len + depth`. Because
//! every kernel computes a row with the same operations whatever else is in the batch, a
//! node's logits are bit-identical to decoding its branch one token at a time, which is
//! what makes speculative decoding on top of this runtime exact.
//!
//! Modules: `model` (the [`Model`] and its forward over token trees: loading, attention,
//! the logits head, per-phase profiling), `arch` (what each architecture's layers have:
//! Llama, Qwen2, Gemma 3), `config`/`metadata` (the [`ModelConfig`] read from GGUF
//! metadata), `weights` (tensors repacked for the kernels), `sequence` (the [`Sequence`]
//! handle every target's sequences share, over a backend's own state), `kv` (the CPU
//! runtime's per-sequence cache with draft scratch, commit and copy-on-write forks), `ops` (row-wise float steps),
//! `batch`/`tree` (validation shared by every forward), `target` (the [`Target`] seam the
//! engine decodes through) and `fake` ([`FakeTarget`], a deterministic stand-in for tests).

mod arch;
mod batch;
mod config;
mod fake;
mod kv;
mod metadata;
mod model;
mod ops;
mod replay;
mod sequence;
mod target;
mod tree;
mod weights;

pub use arch::{Activation, ArchSpec, LayerSpec, OutputHead, RopeSpec};
pub use config::{Arch, ModelConfig, RopeStyle};
pub use fake::FakeTarget;
pub use model::{ForwardProfile, ForwardWork, Logits, Model, Phase, SeqInput, Want};
pub use replay::ReplayTarget;
pub use sequence::{Sequence, SequenceState, TokenLog};
pub use specdec_kernels::{Ceilings, Executor, Isa, WeightFormat};
pub use specdec_tree::{Node, TokenTree};
pub use target::Target;
pub use weights::native as native_format;

/// Everything that can go wrong loading a model or running a forward.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The model file could not be read or lacks metadata.
    #[error(transparent)]
    Gguf(#[from] specdec_gguf::GgufError),
    /// A kernel refused the weights or a matmul's shapes.
    #[error(transparent)]
    Kernel(#[from] specdec_kernels::KernelError),
    /// An architecture, tensor type or hyper-parameter this runtime does not implement.
    #[error("unsupported model: {0}")]
    Unsupported(String),
    /// A tensor the architecture needs is absent from the file.
    #[error("model tensor `{0}` is missing")]
    MissingTensor(String),
    /// A tensor's shape does not match the hyper-parameters.
    #[error("bad model tensor shape: {0}")]
    Shape(String),
    /// A token id (or a requested logits column) at or above the vocabulary size.
    #[error("token id {0} is outside the vocabulary")]
    BadToken(u32),
    /// A forward's nodes are not a well-formed tree.
    #[error("invalid token tree: {0}")]
    BadTree(String),
    /// A commit's path is not a root-to-node chain of the last forward's nodes.
    #[error("invalid commit: {0}")]
    BadCommit(String),
    /// A forward was handed a sequence another target made (its cache is not this one's).
    #[error(
        "the sequence was made by another target ({0}): each target runs only its own sequences"
    )]
    ForeignSequence(&'static str),
    /// A forward would take a sequence past its context length.
    #[error("context overflow: {needed} tokens needed, the model's context is {limit}")]
    ContextOverflow {
        /// Positions the sequence would need.
        needed: usize,
        /// Positions it may hold.
        limit: usize,
    },
}
