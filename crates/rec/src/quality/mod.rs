//! Quality of relaxed knowledge (issue 12, item 5): how far relaxed texts drift from strict
//! ones ([`text`]), and whether the drift matters to a downstream recommender ([`ctr`],
//! docs/recsys.md's downstream check, run three ways by [`report`]).

pub mod ctr;
mod encoding;
mod features;
pub mod knowledge;
pub mod metrics;
pub mod report;
pub mod stats;
pub mod text;
pub mod tfidf;

pub use ctr::{evaluate_with, CtrConfig, CtrMetrics};
pub use knowledge::{parse_knowledge, read_knowledge, Knowledge};
pub use report::{downstream_with, DownstreamReport};
pub use text::{compare, TextComparison, TextSummary};
