//! specdec-runtime
