//! One error type for the recommendation half; every variant names the file, line or
//! record involved.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum RecError {
    #[error(transparent)]
    Workload(#[from] specdec_workloads::WorkloadError),
    #[error(transparent)]
    Tokenizer(#[from] specdec_tokenizer::TokenizerError),
    #[error(transparent)]
    Engine(#[from] specdec_engine::EngineError),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// A dataset file does not have the shape RECSYS.md describes.
    #[error("cannot parse {file} at line {line}: {message}")]
    Parse {
        file: String,
        line: usize,
        message: String,
    },
    /// A JSONL input line that is not a valid record.
    #[error("{path}: line {line}: {message}")]
    Record {
        path: PathBuf,
        line: usize,
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
    #[error("invalid option: {0}")]
    Invalid(String),
}

/// `map_err` helper for I/O errors that names the path.
pub fn io(what: &'static str, path: &std::path::Path) -> impl FnOnce(std::io::Error) -> RecError {
    let path = path.to_path_buf();
    move |source| RecError::Io { what, path, source }
}
