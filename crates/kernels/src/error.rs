//! Errors returned by the kernel API (nothing here panics on bad shapes).

use crate::isa::Isa;

/// Everything that can go wrong when packing weights or running a matmul.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum KernelError {
    /// The inner dimension must be a positive multiple of the format's block size (32, or
    /// 256 for the K formats).
    #[error("k = {k} is not a positive multiple of {format}'s block of {block} values")]
    BadK {
        k: usize,
        block: usize,
        format: &'static str,
    },
    /// Stacked parts of different formats must meet at a 32-column tile boundary.
    #[error("stacked parts change format after {columns} columns, not a multiple of 32")]
    RaggedStack { columns: usize },
    /// A matrix needs at least one output row.
    #[error("n = 0: a matrix needs at least one output row")]
    EmptyMatrix,
    /// The byte buffer does not hold exactly n × k/32 blocks.
    #[error("weight data has {actual} bytes, expected {expected} (n × k/32 blocks)")]
    WeightBytes { expected: usize, actual: usize },
    /// The f32 weight slice does not hold exactly n × k values.
    #[error("f32 weights have {actual} values, expected {expected} (n × k)")]
    WeightValues { expected: usize, actual: usize },
    /// n × k is too large to address.
    #[error("shape {n} x {k} overflows usize")]
    ShapeOverflow { n: usize, k: usize },
    /// The activations were quantized with a different k than the matrix has.
    #[error("activations have k = {activations}, matrix has k = {weights}")]
    KMismatch { weights: usize, activations: usize },
    /// The output slice length is not rows × n.
    #[error("output has {actual} values, expected {expected} (rows × n)")]
    OutputLength { expected: usize, actual: usize },
    /// The last `QuantizedRows::quantize` call got inconsistent arguments.
    #[error("activations invalid: {len} values given for {rows} rows of k = {k}")]
    BadActivations { len: usize, rows: usize, k: usize },
    /// A selected output column is not below n.
    #[error("column {col} is outside the matrix's {n} columns")]
    ColumnOutOfRange { col: u32, n: usize },
    /// The requested instruction set is not supported by this CPU (or build).
    #[error("instruction set {} is not available on this CPU", .0.name())]
    IsaUnavailable(Isa),
    /// A pool thread panicked while computing its share (a kernel bug).
    #[error("a kernel worker thread panicked")]
    WorkerPanicked,
}
