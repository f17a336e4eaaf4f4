//! specdec-runtime's offline integration tests, one binary: no model file, no network.

mod corrupt_metadata;
