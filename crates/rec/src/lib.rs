//! specdec's recommendation half (see docs/recsys.md): the MovieLens data
//! protocol (split, prompts, groups), the knowledge-generation job (LASER) that runs many
//! records through the engine's scheduler with per-group drafting pools, and the checks of
//! what relaxed verification does to the knowledge and to a downstream recommender.
//!
//! Where each method lives:
//!
//! - LASER (knowledge generation with per-group pools and relaxed verification): [`job`]
//!   runs the records (sharded, resumable); [`prepare`] writes them from [`movielens`],
//!   [`split`], [`groups`] (the groups, hence the pools) and [`prompts`]; [`records`] is
//!   their JSONL format.
//! - AtSpeed (speculative catalogue-constrained beam search for recommendation):
//!   [`recommend`] builds the catalogue, prompts and metrics and answers a request through
//!   the engine's `beam` search; the draft model is trained by `specdec-train`.
//! - [`quality`] — what relaxed knowledge changes: text drift and the downstream CTR check.

pub mod error;
pub mod groups;
pub mod hash;
pub mod job;
pub mod movielens;
pub mod prepare;
pub mod prompts;
pub mod quality;
pub mod recommend;
pub mod records;
pub mod split;

pub use error::RecError;
pub use records::{Kind, KnowledgeOutput, KnowledgeRecord, Role, VerifyMode};
/// The one progress bar, from the model store (the lowest crate that draws one).
pub use specdec_model_store::progress;
