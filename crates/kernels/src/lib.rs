//! Batch-invariant quantized matmul kernels for CPU speculative decoding.
//!
//! `y = x · Wᵀ` with GGML-quantized weights (Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q5_K, Q6_K) repacked
//! at load into 32-column tiles (`format.rs` has the layout), and activations quantized per row to int8 blocks of 32. Every output
//! element follows one fixed arithmetic sequence (exact integer block sums, then a fixed
//! chain of f32 multiply/fma in block order), so results are bit-identical whatever the
//! number of rows in the batch, the thread count, or the instruction set chosen.
//! The measured design (why int8 blocks of 32, 32-column tiles, one fixed sum order) is in
//! `pack.rs`, `quant.rs` and the `simd` module's docs.
//!
//! ```
//! use specdec_kernels::{Executor, PackedMatrix, QuantizedRows};
//!
//! let (n, k, rows) = (40, 64, 3);
//! let w: Vec<f32> = (0..n * k).map(|i| (i % 7) as f32 - 3.0).collect();
//! let w = PackedMatrix::from_f32(&w, n, k)?; // or from_ggml(format, bytes, n, k)
//! let mut x = QuantizedRows::new(); // reusable
//! x.quantize(&vec![0.25; rows * k], rows, k);
//! let exec = Executor::new(2); // keep one for the process: it owns the thread pool
//! let mut y = vec![0.0; rows * n];
//! exec.matmul(&w, &x, &mut y)?; // y[r * n + c]
//! # Ok::<(), specdec_kernels::KernelError>(())
//! ```

// The workspace denies `unsafe_code`; this crate is where specdec keeps it. The SIMD
// kernels call `std::arch` intrinsics (unsafe to call, and chosen by run-time CPU
// feature detection) on raw pointers into the packed tiles; the aligned buffers manage
// their own allocations; the thread pool publishes each job to its workers through a
// raw pointer, and the workers' shares write disjoint output columns through raw
// pointers. Every unsafe block says why it is sound in a `// SAFETY:` comment.
#![allow(unsafe_code)]

mod align;
mod block_quant;
mod error;
mod exec;
mod format;
mod isa;
mod pack;
mod pool;
mod quant;
mod roofline;
mod simd;

pub use align::AlignedF32;
pub use error::KernelError;
pub use exec::Executor;
pub use format::WeightFormat;
pub use isa::Isa;
pub use pack::PackedMatrix;
pub use pool::SyncStats;
pub use quant::QuantizedRows;
pub use roofline::Ceilings;
pub use simd::vecops::{kt_index, VecOps};
