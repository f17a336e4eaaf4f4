//! What a benchmark can fail with.

use specdec_engine::EngineError;
use specdec_runtime::RuntimeError;
use specdec_tokenizer::TokenizerError;

/// An error of the benchmark library.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A forward of the measured model failed.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The engine refused or failed a request.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// Text could not be tokenized.
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    /// Knowledge records could not be read.
    #[error(transparent)]
    Rec(#[from] specdec_rec::RecError),
    /// A measurement that cannot be made as asked (sizes past the context, say).
    #[error("{0}")]
    Setup(String),
    /// A report could not be drawn or written.
    #[error("writing the report: {0}")]
    Report(String),
    /// A recorded token outside the model's vocabulary: not this model's output.
    #[error("record {id}: token {token} is outside the model's vocabulary of {vocab}; was the run recorded with this model?")]
    ReplayToken {
        /// The record.
        id: String,
        /// The token.
        token: u32,
        /// The model's vocabulary size.
        vocab: usize,
    },
    /// A replay whose output is not the recorded one: the recording does not belong to
    /// these prompts or this model.
    #[error("record {id}: the replay wrote {got} tokens where the recording has {want}, first differing at token {at}; was the run recorded with this model and workload?")]
    ReplayDiverged {
        /// The record.
        id: String,
        /// Tokens the replay wrote.
        got: usize,
        /// Tokens the recording has.
        want: usize,
        /// The first position that differs.
        at: usize,
    },
}
