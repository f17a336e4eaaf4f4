//! specdec-gguf's real-model tests, one binary, built only with `--features real-models`:
//! the cached SmolLM2 file (skipped, saying so, when absent).

mod real_model;
