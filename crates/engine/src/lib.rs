//! specdec's engine: the generation loop (plain or speculative), adaptive draft size,
//! stop handling and statistics.

pub mod budget;
mod generate;
mod generation;
mod method;
pub mod prefix_cache;
pub mod stats;
pub mod stop;

pub use generate::{Engine, FinishReason, GenerateOutput, GenerateRequest};
pub use generation::{Generation, Sink};
pub use method::{load_trie, new_trie, save_trie, DraftMethod};
pub use specdec_verify::{sampling, Rng, SamplingParams};
pub use stats::SpecStats;

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
}
