//! Errors returned by the kernel API (nothing here panics on bad shapes).

use crate::isa::Isa;

/// Everything that can go wrong when packing weights or running a matmul.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum KernelError {
    /// The inner dimension must be a positive multiple of the format's block size (32, or
    /// 256 for the K formats).
    #[error("k = {k} is not a positive multiple of {format}'s block of {block} values")]
    BadK {
        /// The inner dimension given.
        k: usize,
        /// The format's block size in values.
        block: usize,
        /// The format's name.
        format: &'static str,
    },
    /// Stacked parts of different formats must meet at a 32-column tile boundary.
    #[error("stacked parts change format after {columns} columns, not a multiple of 32")]
    RaggedStack {
        /// Columns before the format changes.
        columns: usize,
    },
    /// A matrix needs at least one output row.
    #[error("n = 0: a matrix needs at least one output row")]
    EmptyMatrix,
    /// The byte buffer does not hold exactly n × k/32 blocks.
    #[error("weight data has {actual} bytes, expected {expected} (n × k/32 blocks)")]
    WeightBytes {
        /// Bytes n × k needs in the format.
        expected: usize,
        /// Bytes given.
        actual: usize,
    },
    /// The f32 weight slice does not hold exactly n × k values.
    #[error("f32 weights have {actual} values, expected {expected} (n × k)")]
    WeightValues {
        /// n × k.
        expected: usize,
        /// Values given.
        actual: usize,
    },
    /// n × k is too large to address.
    #[error("shape {n} x {k} overflows usize")]
    ShapeOverflow {
        /// Output rows of the matrix.
        n: usize,
        /// Inner dimension.
        k: usize,
    },
    /// The activations were quantized with a different k than the matrix has.
    #[error("activations have k = {activations}, matrix has k = {weights}")]
    KMismatch {
        /// The matrix's k.
        weights: usize,
        /// The activations' k.
        activations: usize,
    },
    /// The output slice length is not rows × n.
    #[error("output has {actual} values, expected {expected} (rows × n)")]
    OutputLength {
        /// rows × n.
        expected: usize,
        /// The output slice's length.
        actual: usize,
    },
    /// The last `QuantizedRows::quantize` call got inconsistent arguments.
    #[error("activations invalid: {len} values given for {rows} rows of k = {k}")]
    BadActivations {
        /// Values given.
        len: usize,
        /// Rows asked for.
        rows: usize,
        /// Inner dimension asked for.
        k: usize,
    },
    /// A selected output column is not below n.
    #[error("column {col} is outside the matrix's {n} columns")]
    ColumnOutOfRange {
        /// The column asked for.
        col: u32,
        /// The matrix's column count.
        n: usize,
    },
    /// The requested instruction set is not supported by this CPU (or build).
    #[error("instruction set {} is not available on this CPU", .0.name())]
    IsaUnavailable(Isa),
    /// A pool thread panicked while computing its share (a kernel bug).
    #[error("a kernel worker thread panicked")]
    WorkerPanicked,
}
