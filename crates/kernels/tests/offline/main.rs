//! specdec-kernels' tests, one binary: no model file, no network.

mod accuracy;
mod common;
mod errors;
mod invariance;
mod roundtrip;
