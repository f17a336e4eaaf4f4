//! specdec-tokenizer
