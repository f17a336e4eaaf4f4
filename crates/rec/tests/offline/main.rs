//! specdec-rec's offline integration tests, one binary: no model file, no network.

mod quality;
