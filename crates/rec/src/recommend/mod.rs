//! Generative recommendation (docs/recsys.md, "Generative recommendation"): the item catalogue
//! and its trie, the prompt that ends where a title starts, the evaluation users, and
//! Recall@K / NDCG@K over the ranked lists a constrained beam search returns.

mod cache;
pub mod catalogue;
mod entries;
pub mod history;
pub mod metrics;
pub mod prompt;
pub mod service;
mod source;
pub mod users;

pub use catalogue::ItemCatalogue;
pub use history::Target;
pub use metrics::RankingMetrics;
pub use prompt::{prompt_for_titles, prompt_for_user};
pub use service::{answer_json, mode_name, named, recommend, Recommendation, Recommended};
pub use source::CatalogueSource;
pub use users::{eval_cases, EvalCase};
