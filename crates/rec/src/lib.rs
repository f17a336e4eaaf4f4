//! specdec's recommendation half (see RECSYS.md in the shared docs): the MovieLens data
//! protocol (split, prompts, groups), the knowledge-generation job (LASER) that runs many
//! records through the engine's scheduler with per-group drafting pools, and the checks of
//! what relaxed verification does to the knowledge and to a downstream recommender.

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
