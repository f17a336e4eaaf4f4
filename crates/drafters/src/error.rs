//! Errors of the drafters crate (only persistence can fail; drafting never does).
//! Tries and history indexes share the file conventions, so they share the errors; the
//! caller names the file.

use std::path::PathBuf;

/// Why a trie or history file could not be saved or loaded. Loading never panics on bad
/// input.
#[derive(Debug, thiserror::Error)]
pub enum DraftError {
    /// The file system refused (missing file, permissions, disk full, ...).
    #[error("i/o error on {}: {source}", path.display())]
    Io {
        /// The file (or its lock or temporary sibling).
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The bytes do not start with the expected magic: some other kind of file.
    #[error("not a specdec file of this kind (bad magic header)")]
    BadMagic,
    /// A file written by a different, incompatible format version.
    #[error("unsupported file format version {found} (this build reads version {expected})")]
    UnsupportedVersion {
        /// The version in the file.
        found: u32,
        /// The version this build writes and reads.
        expected: u32,
    },
    /// The file is shorter or longer than its header says.
    #[error("file has {found} bytes, its header implies {expected}: truncated or padded")]
    Truncated {
        /// Bytes the header implies.
        expected: u64,
        /// Bytes the file has.
        found: u64,
    },
    /// The content does not match the stored checksum (bit rot, partial write, tampering).
    #[error("checksum mismatch: stored {stored:#018x}, computed {computed:#018x}")]
    Checksum {
        /// The checksum in the file.
        stored: u64,
        /// The checksum of the content read.
        computed: u64,
    },
    /// The checksum matches but the content breaks an invariant of its structure.
    #[error("malformed file: {0}")]
    Malformed(String),
    /// A token id of the file is not in the model's vocabulary: the file was learned on
    /// another model.
    #[error("file holds token id {token}, outside the model's vocabulary of {vocab}: it was built for another model")]
    TokenOutOfVocabulary {
        /// The offending token id.
        token: u32,
        /// The model's vocabulary size.
        vocab: usize,
    },
    /// The path names a directory, FIFO, socket or device, not a regular file (reading a
    /// FIFO would block forever).
    #[error("{} is a {what}, not a regular file", path.display())]
    NotAFile {
        /// The path given.
        path: PathBuf,
        /// What it is instead (`directory`, `FIFO`, ...).
        what: &'static str,
    },
}
