//! specdec's benchmark library: what the benchmarks measure with, apart from the command
//! line that runs them.
//!
//! - [`beams`]: AtSpeed's benchmark, plain, jump-forward and speculative beam search over
//!   held-out users, with ranking quality and every exact list checked against plain's;
//! - [`knowledge`]: LASER's benchmark, knowledge generation under plain, strict and
//!   relaxed speculation with no, one global or per-group pools, at concurrency 1 and N;
//! - [`cost`]: the forward cost curve (one forward over n tree nodes after a prefix),
//!   which prices every decode step free of run-to-run noise;
//! - [`oracle`]: the copy oracle, the ceiling of any copying drafter on an output;
//! - [`replay`]: the offline replay of drafters over recorded outputs, without the target;
//! - [`report`]: `--report DIR`, an `index.md` with the tables and SVG plots beside it;
//! - [`roofline`]: every forward size against the floors the machine's measured bandwidth
//!   and peak rates put under it, and where a forward's time goes, phase by phase;
//! - [`workload`]: the workload benchmark's harness (methods x records x repeats,
//!   interleaved, outputs checked against plain decoding's, steps priced on the curve).
//!
//! The `specdec` binary's `bench` and `rec` commands parse flags and print what these
//! return.

mod error;

pub mod beams;
pub mod cost;
pub mod knowledge;
pub mod oracle;
pub mod replay;
pub mod report;
pub mod roofline;
pub mod workload;

pub use error::BenchError;
