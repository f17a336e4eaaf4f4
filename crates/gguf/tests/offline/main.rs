//! specdec-gguf's offline tests, one binary: no model file, no network. `cargo test`
//! runs them by default.

mod common;
mod dequant;
mod reader;
mod robustness;
