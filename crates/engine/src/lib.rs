//! specdec's engine: the generation loop (plain or speculative), the scheduler that
//! batches requests, adaptive draft size, drafting pools, stop handling and statistics.
//!
//! Layering: the engine reaches the model only through [`Target`], drafters through the
//! `Drafter` trait and verification through its pure functions; it alone commits to a
//! sequence's cache.
//!
//! Where each method lives:
//!
//! - `engine` and `generation` — the decode loop: plain decoding, and speculative decoding
//!   with any drafter (LLMA, Lookahead, SuffixDecoding, suffix-automaton copying, the mix),
//!   verified strictly or by a relaxed rule; [`scheduler`] batches requests into shared
//!   forwards.
//! - [`pools`] — drafting pools: the global and named tries and history indexes that
//!   outlive requests; LASER's per-group pools are named pools.
//! - [`beam`] — catalogue-constrained beam search for recommendation, plain or speculative
//!   with a draft model (AtSpeed: strict top-K or relaxed sampling verification).
//! - [`budget`] — adaptive draft size (which drafted nodes pay for their verify cost).
//! - [`spec`] and `method` — how a request speculates ([`SpeculationSpec`],
//!   [`DraftMethod`]), parsed once at every edge.
//! - [`prefix_cache`], [`stop`], [`stats`], `load` — cached prompt prefixes, stop
//!   strings, speculation statistics, and opening model files.

pub mod beam;
pub mod budget;
mod draft_model;
mod engine;
mod fair_share;
mod generation;
mod load;
mod method;
pub mod pools;
pub mod prefix_cache;
mod reflow;
mod request;
pub mod scheduler;
mod scope;
pub mod spec;
pub mod stats;
pub mod stop;

pub use draft_model::DraftModel;
pub use engine::Engine;
pub use generation::{Generation, Sink};
pub use load::{load_draft, Loaded, ModelMeta};
pub use method::DraftMethod;
pub use pools::{
    history_file, load_trie, new_trie, Folded, Learned, Pool, PoolLimits, PoolName, PoolSize, Pools,
};
pub use request::{FinishReason, GenerateOutput, GenerateRequest, Speculation};
pub use scheduler::{Finished, Job, Outcome, Scheduler};
pub use scope::{CacheScope, Tenant};
pub use spec::{RawSpec, SpecError, SpeculationSpec};
pub use specdec_drafters::{HistoryConfig, MAX_REFERENCE_TOKENS};
pub use specdec_runtime::{Model, ModelConfig, Target};
pub use specdec_tokenizer::{ChatMessage, ChatTemplate, Tokenizer};
pub use specdec_verify::{sampling, Acceptance, Forced, Relaxed, Rng, SamplingParams};
pub use stats::SpecStats;

use std::path::PathBuf;

/// Everything that can go wrong loading models and drafting state or generating.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A forward or a commit failed in the runtime.
    #[error(transparent)]
    Runtime(#[from] specdec_runtime::RuntimeError),
    /// Encoding a prompt or rendering the chat template failed.
    #[error(transparent)]
    Tokenizer(#[from] specdec_tokenizer::TokenizerError),
    /// A request's parameters are unusable (a beam search's catalogue, prompts or
    /// options, ...).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// Prompt and generation budget together exceed the model's context.
    #[error("the prompt has {prompt} tokens and max_tokens is {max_tokens}: together they exceed the model's context of {limit} tokens; shorten the prompt or lower max_tokens")]
    ContextOverflow {
        /// Prompt tokens.
        prompt: usize,
        /// Tokens the request may generate.
        max_tokens: usize,
        /// The model's context length.
        limit: usize,
    },
    /// A model file (target or draft) could not be loaded.
    #[error("could not load the model file {path}: {source}")]
    ModelFile {
        /// The model file.
        path: PathBuf,
        /// Why it could not be loaded.
        source: specdec_runtime::RuntimeError,
    },
    /// A model file's tokenizer metadata could not be built into a tokenizer.
    #[error("could not read the tokenizer of {path}: {source}")]
    ModelTokenizer {
        /// The model file.
        path: PathBuf,
        /// Why its tokenizer could not be built.
        source: specdec_tokenizer::TokenizerError,
    },
    /// A draft model's vocabulary differs from the target's.
    #[error("the draft model {path} has a different vocabulary from the target's ({difference}); a draft must use the target's tokenizer")]
    DraftVocabulary {
        /// The draft model file.
        path: PathBuf,
        /// The first difference found.
        difference: String,
    },
    /// A draft model's `specdec.draft.scoring` metadata names no known scoring.
    #[error("the draft model {path} declares an unknown scoring: {message}")]
    DraftScoring {
        /// The draft model file.
        path: PathBuf,
        /// What is wrong with the value.
        message: String,
    },
    /// The global pool's trie file, or its history file beside it.
    #[error("the drafting state file {path} (trie or history) could not be loaded: {source}")]
    Trie {
        /// The file.
        path: PathBuf,
        /// Why it could not be loaded.
        source: specdec_drafters::DraftError,
    },
    /// A named pool's saved trie or history could not be loaded.
    #[error("drafting pool `{pool}` could not be loaded: {source}")]
    Pool {
        /// The pool's name.
        pool: String,
        /// Why its state could not be loaded.
        source: specdec_drafters::DraftError,
    },
    /// A client asked for a new named pool beyond its limit.
    #[error(
        "this client already has {limit} named drafting pools, the most allowed; reuse one of them"
    )]
    PoolLimit {
        /// Named pools one client may have.
        limit: usize,
    },
    /// A folder drafting state would be saved in, refused at start-up.
    #[error("drafting state cannot be saved in {path}: {source}")]
    StateFolder {
        /// The folder.
        path: PathBuf,
        /// Why it is refused.
        source: std::io::Error,
    },
    /// An engine step, or a thread reading a pool's state, panicked; the message says
    /// what panicked.
    #[error("the engine panicked: {0}")]
    Panicked(String),
}
