//! specdec-engine
