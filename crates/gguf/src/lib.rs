//! GGUF reader and writer for specdec.
//!
//! We parse the header ourselves rather than through candle because model files are untrusted
//! input: every length and count is bounded by the bytes actually present, so a truncated or
//! hostile file yields an error instead of a huge allocation or a panic.
//!
//! Modules: `file` ([`GgufFile`]: parsing, memory-mapping, typed metadata access), `value`
//! and `types` (metadata [`Value`]s and tensor [`GgmlType`]s with their block geometry),
//! `dequant` ([`dequantize`] to f32), [`names`] (the llama-family tensor names),
//! [`write`](mod@write) (the GGUF writer) and `truncate` ([`truncate_blocks`]: a model cut
//! to its first blocks, for self-drafting).

mod dequant;
mod file;
pub mod names;
mod truncate;
mod types;
mod value;
pub mod write;

pub use dequant::dequantize;
pub use file::{GgufFile, TensorInfo};
pub use truncate::truncate_blocks;
pub use types::GgmlType;
pub use value::Value;

/// Everything that can go wrong reading a GGUF file or deriving one from it.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// The file could not be opened, mapped or read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file, as given.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The first four bytes are not `GGUF`.
    #[error("not a GGUF file (magic bytes {0:02x?}, expected \"GGUF\")")]
    BadMagic([u8; 4]),
    /// A GGUF version other than 2 or 3.
    #[error("GGUF version {0} is not supported (only versions 2 and 3)")]
    UnsupportedVersion(u32),
    /// A length, count or offset in the header points past the bytes present, or the
    /// header is otherwise malformed; the message says where.
    #[error("GGUF file is truncated or corrupt: {0}")]
    Corrupt(String),
    /// A tensor's GGML type id is not one this reader knows.
    #[error("tensor `{tensor}` has unsupported type id {type_id}")]
    UnknownType {
        /// The tensor's name.
        tensor: String,
        /// The type id found in the file.
        type_id: u32,
    },
    /// A required metadata key is absent.
    #[error("metadata key `{0}` is missing")]
    MissingKey(String),
    /// A metadata value has another type than the one asked for.
    #[error("metadata key `{key}` has type {found}, expected {expected}")]
    WrongType {
        /// The metadata key.
        key: String,
        /// The type asked for.
        expected: &'static str,
        /// The type stored in the file.
        found: &'static str,
    },
    /// [`dequantize`] does not implement this tensor type.
    #[error("cannot convert tensor type {0:?} to f32")]
    NoDequantization(GgmlType),
    /// [`truncate_blocks`] was asked to keep no block, or all of them, or more.
    #[error("cannot keep {layers} of the model's {blocks} blocks: a truncated model keeps 1 to {}", .blocks.saturating_sub(1))]
    BlockCount {
        /// Blocks asked to keep.
        layers: usize,
        /// Blocks the model has.
        blocks: u64,
    },
    /// The bytes given to [`dequantize`] are not exactly the encoding of as many values as
    /// the output holds (or that count is not a whole number of blocks).
    #[error("dequantization of {ty:?}: {len} bytes is not a whole number of blocks or does not fit the output")]
    DequantShape {
        /// The tensor type.
        ty: GgmlType,
        /// The byte length given.
        len: usize,
    },
}

/// A result whose error is a [`GgufError`].
pub type Result<T> = std::result::Result<T, GgufError>;
