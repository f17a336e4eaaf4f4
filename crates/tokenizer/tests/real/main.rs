//! specdec-tokenizer's real-model tests, one binary, built only with `--features
//! real-models`: SmolLM2 (the default model, fetched if missing), and Gemma 3 and the
//! Qwen2.5-Coder pair when cached, against reference ids in `tests/fixtures/`.

mod gemma;
mod qwen;
mod smollm;
