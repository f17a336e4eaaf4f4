//! specdec-model-store
