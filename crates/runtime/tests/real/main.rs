//! specdec-runtime's real-model tests, one binary, built only with `--features
//! real-models`: the default model (fetched if missing), and Gemma 3 and the Qwen2.5-Coder
//! pair when cached (skipped, saying so, when not).

mod argmax;
mod bit_exact;
mod columns;
mod common;
mod corrupt_metadata;
mod footprint;
mod fork;
mod gemma3;
mod pinned;
mod profile;
mod qwen;
mod reference_nll;
