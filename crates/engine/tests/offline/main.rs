//! specdec-engine's offline integration tests, one binary: no model file, no network. A
//! deterministic fake target, and the tiny synthetic model of `specdec-testkit` (random
//! weights, byte-level tokenizer, ChatML) for the tests that hold on any model.

#[path = "../any_model/mod.rs"]
mod any_model;
mod beam;
#[path = "../common/mod.rs"]
mod common;
mod draft_model;
mod fair_share;
mod fake;
mod reflow;
mod scheduled_beams;

/// The models this tier runs the any-model tests on.
mod models {
    /// The tiny synthetic model's file (written once per process).
    pub fn path() -> std::path::PathBuf {
        specdec_testkit::tiny_model_path().to_path_buf()
    }

    /// No other model offline.
    pub fn others() -> Option<&'static crate::common::Fixture> {
        None
    }
}
