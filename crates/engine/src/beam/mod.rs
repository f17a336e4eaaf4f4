//! Catalogue-constrained beam search for generative recommendation: plain, with
//! jump-forward over forced tokens, and speculative with a draft model (strict top-K or
//! relaxed sampling verification).
//!
//! One loop serves every mode. Each round puts, per live beam, a tree in one target
//! forward: the beam's pending tokens, the draft's beams below it and the tokens the
//! catalogue forces after them. Verification then takes plain beam steps on the target's
//! logits for as long as every beam a step keeps has its logits in that forward. Plain
//! search is the case with nothing drafted or forced: one step per forward.

mod catalogue;
mod draft;
mod options;
mod round;
mod run;
mod scoring;
mod search;
mod side;
mod tree;

pub use crate::budget::PlanReport;
pub use catalogue::{Catalogue, TrieNode};
pub use options::{BeamOptions, BeamOutput, BeamStats, BeamVerify, DraftPlan, Ranked};
pub use run::{BeamRunner, BeamTask, Prefilled};
pub use scoring::{DraftScoring, DRAFT_SCORING_KEY};
pub use specdec_verify::beam::log_normaliser;
