//! specdec-verify's integration tests, one binary: no model file, no network.

mod relaxed;
