//! specdec's model runtime: GGUF Llama-family models on batch-invariant CPU kernels.
//!
//! A forward evaluates a *token tree* per sequence: each node attends to the sequence's
//! committed prefix and to its own ancestors, at position `prefix_len + depth`. Because
//! every kernel computes a row with the same operations whatever else is in the batch, a
//! node's logits are bit-identical to decoding its branch one token at a time, which is
//! what makes speculative decoding on top of this runtime exact.

mod arch;
mod batch;
mod config;
mod fake;
mod kv;
mod metadata;
mod model;
mod ops;
mod target;
mod tree;
mod weights;

pub use arch::{Activation, ArchSpec, LayerSpec, OutputHead, RopeSpec};
pub use config::{Arch, ModelConfig, RopeStyle};
pub use fake::FakeTarget;
pub use kv::Sequence;
pub use model::{ForwardProfile, ForwardWork, Logits, Model, Phase, SeqInput, Want};
pub use specdec_kernels::{Ceilings, Executor, Isa, WeightFormat};
pub use specdec_tree::{Node, TokenTree};
pub use target::Target;
pub use weights::native as native_format;

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error(transparent)]
    Gguf(#[from] specdec_gguf::GgufError),
    #[error(transparent)]
    Kernel(#[from] specdec_kernels::KernelError),
    #[error("unsupported model: {0}")]
    Unsupported(String),
    #[error("model tensor `{0}` is missing")]
    MissingTensor(String),
    #[error("bad model tensor shape: {0}")]
    Shape(String),
    #[error("token id {0} is outside the vocabulary")]
    BadToken(u32),
    #[error("invalid token tree: {0}")]
    BadTree(String),
    #[error("invalid commit: {0}")]
    BadCommit(String),
    #[error("context overflow: {needed} tokens needed, the model's context is {limit}")]
    ContextOverflow { needed: usize, limit: usize },
}
