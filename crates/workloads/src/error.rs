//! One error type for fetching, parsing and writing workloads. Every variant names the file,
//! command or line involved, because these errors surface in benchmark scripts far from here.

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    #[error("neither SPECDEC_HOME nor HOME is set: cannot choose a data cache directory")]
    NoHome,
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("could not run `{command}`: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("download failed: `{command}` exited with {status}: {stderr}")]
    DownloadFailed {
        command: String,
        status: String,
        stderr: String,
    },
    #[error("`{command}` produced no {what} in {dir}")]
    NothingDownloaded {
        command: String,
        what: &'static str,
        dir: PathBuf,
    },
    #[error("checksum mismatch for {path}: expected sha256 {expected}, got {actual}; the download is not used")]
    Checksum {
        path: PathBuf,
        expected: String,
        actual: String,
    },
    #[error("archive {path} is unreadable or lacks {member}: {reason}")]
    Archive {
        path: PathBuf,
        member: String,
        reason: String,
    },
    /// A dataset file does not have the shape we expect; `at` is "line N" or "record N".
    #[error("cannot parse {file} at {at}: {message}")]
    Parse {
        file: String,
        at: String,
        message: String,
    },
    #[error("{path}: line {line}: {message}")]
    Jsonl {
        path: PathBuf,
        line: usize,
        message: String,
    },
}

pub(crate) fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> WorkloadError {
    let path = path.to_path_buf();
    move |source| WorkloadError::Io { what, path, source }
}
