//! One error type for the recommendation half; every variant names the file, line or
//! record involved.

use std::path::PathBuf;

/// Everything that can go wrong preparing, running or checking the recommendation half.
#[derive(Debug, thiserror::Error)]
pub enum RecError {
    /// Fetching MovieLens or reading a workload file failed.
    #[error(transparent)]
    Workload(#[from] specdec_workloads::WorkloadError),
    /// Tokenizing a prompt or catalogue title, or rendering the chat template, failed.
    #[error(transparent)]
    Tokenizer(#[from] specdec_tokenizer::TokenizerError),
    /// The engine failed (loading, drafting pools, generation, beam search).
    #[error(transparent)]
    Engine(#[from] specdec_engine::EngineError),
    /// A filesystem operation failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// The operation, as a phrase (`cannot open`, ...).
        what: &'static str,
        /// The file or directory it was applied to.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A dataset file does not have the shape docs/recsys.md describes.
    #[error("cannot parse {file} at line {line}: {message}")]
    Parse {
        /// The dataset file.
        file: String,
        /// The line, from 1.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A JSONL input line that is not a valid record.
    #[error("{path}: line {line}: {message}")]
    Record {
        /// The JSONL file.
        path: PathBuf,
        /// The line, from 1.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The linear algebra or k-means behind the user clusters gave up.
    #[error("cannot cluster users: {0}")]
    Clustering(String),
    /// The downstream check's model could not be fitted.
    #[error("downstream model: {0}")]
    Model(#[from] linfa_logistic::error::Error),
    /// Inputs that parse but do not fit together (an id twice, a rating of an unknown item).
    #[error("inconsistent input: {0}")]
    Inconsistent(String),
    /// An option or argument out of its range (a fraction, a shard, a count).
    #[error("invalid option: {0}")]
    Invalid(String),
    /// `--shared-state` could not start (a Redis that is down is not an error).
    #[error(transparent)]
    SharedState(#[from] specdec_shared_state::SharedStateError),
}

/// `map_err` helper for I/O errors that names the path.
pub fn io(what: &'static str, path: &std::path::Path) -> impl FnOnce(std::io::Error) -> RecError {
    let path = path.to_path_buf();
    move |source| RecError::Io { what, path, source }
}
