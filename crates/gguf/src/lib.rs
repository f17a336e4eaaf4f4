//! specdec-gguf
