//! GGUF reader and writer for specdec.
//!
//! We parse the header ourselves rather than through candle because model files are untrusted
//! input: every length and count is bounded by the bytes actually present, so a truncated or
//! hostile file yields an error instead of a huge allocation or a panic.

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
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("not a GGUF file (magic bytes {0:02x?}, expected \"GGUF\")")]
    BadMagic([u8; 4]),
    #[error("GGUF version {0} is not supported (only versions 2 and 3)")]
    UnsupportedVersion(u32),
    #[error("GGUF file is truncated or corrupt: {0}")]
    Corrupt(String),
    #[error("tensor `{tensor}` has unsupported type id {type_id}")]
    UnknownType { tensor: String, type_id: u32 },
    #[error("metadata key `{0}` is missing")]
    MissingKey(String),
    #[error("metadata key `{key}` has type {found}, expected {expected}")]
    WrongType {
        key: String,
        expected: &'static str,
        found: &'static str,
    },
    #[error("cannot convert tensor type {0:?} to f32")]
    NoDequantization(GgmlType),
    #[error("cannot keep {layers} of the model's {blocks} blocks: a truncated model keeps 1 to {}", .blocks.saturating_sub(1))]
    BlockCount { layers: usize, blocks: u64 },
    #[error("dequantization of {ty:?}: {len} bytes is not a whole number of blocks or does not fit the output")]
    DequantShape { ty: GgmlType, len: usize },
}

pub type Result<T> = std::result::Result<T, GgufError>;
