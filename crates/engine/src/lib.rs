//! specdec's engine: the generation loop (plain or speculative), the scheduler that
//! batches requests, adaptive draft size, drafting pools, stop handling and statistics.
//!
//! Layering: the engine reaches the model only through [`Target`], drafters through the
//! `Drafter` trait and verification through its pure functions; it alone commits to a
//! sequence's cache.

pub mod beam;
pub mod budget;
mod engine;
mod generation;
mod load;
mod method;
pub mod pools;
pub mod prefix_cache;
mod request;
pub mod scheduler;
pub mod stats;
pub mod stop;

pub use engine::Engine;
pub use generation::{Generation, Sink};
pub use load::{load_draft, Loaded, ModelMeta};
pub use method::DraftMethod;
pub use pools::{history_file, load_trie, new_trie, Pool, PoolLimits, PoolName, Pools};
pub use request::{CacheScope, FinishReason, GenerateOutput, GenerateRequest, Speculation, Tenant};
pub use scheduler::{Finished, Job, Outcome, Scheduler};
pub use specdec_drafters::{write_atomic, HistoryConfig, MAX_REFERENCE_TOKENS};
pub use specdec_runtime::{Model, ModelConfig, Target};
pub use specdec_tokenizer::{ChatMessage, ChatTemplate, Tokenizer};
pub use specdec_verify::{sampling, Acceptance, Relaxed, Rng, SamplingParams};
pub use stats::SpecStats;

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Runtime(#[from] specdec_runtime::RuntimeError),
    #[error(transparent)]
    Tokenizer(#[from] specdec_tokenizer::TokenizerError),
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error("the prompt has {prompt} tokens and max_tokens is {max_tokens}: together they exceed the model's context of {limit} tokens; shorten the prompt or lower max_tokens")]
    ContextOverflow {
        prompt: usize,
        max_tokens: usize,
        limit: usize,
    },
    #[error("could not load the model file {path}: {source}")]
    ModelFile {
        path: PathBuf,
        source: specdec_runtime::RuntimeError,
    },
    #[error("could not read the tokenizer of {path}: {source}")]
    ModelTokenizer {
        path: PathBuf,
        source: specdec_tokenizer::TokenizerError,
    },
    #[error("the draft model {path} has a different vocabulary from the target's ({difference}); a draft must use the target's tokenizer")]
    DraftVocabulary { path: PathBuf, difference: String },
    #[error("the draft model {path} declares an unknown scoring: {message}")]
    DraftScoring { path: PathBuf, message: String },
    /// The global pool's trie file, or its history file beside it.
    #[error("the drafting state file {path} (trie or history) could not be loaded: {source}")]
    Trie {
        path: PathBuf,
        source: specdec_drafters::DraftError,
    },
    #[error("drafting pool `{pool}` could not be loaded: {source}")]
    Pool {
        pool: String,
        source: specdec_drafters::DraftError,
    },
    #[error(
        "this client already has {limit} named drafting pools, the most allowed; reuse one of them"
    )]
    PoolLimit { limit: usize },
    /// A folder drafting state would be saved in, refused at start-up.
    #[error("drafting state cannot be saved in {path}: {source}")]
    StateFolder {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the engine panicked: {0}")]
    Panicked(String),
}
