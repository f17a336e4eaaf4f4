//! The knowledge job's input and output lines (JSONL), shared by `rec prepare`, the job,
//! the quality checks and the benchmark.

use serde::{Deserialize, Serialize};

/// Whose knowledge a record asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    User,
    Item,
}

/// A record's place in its group: warm-up members are generated first and fill the
/// group's pool; target members are the ones timed and compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Warmup,
    Target,
}

/// The verification rule a record asks for (the job's `--verify` is the default).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum VerifyMode {
    #[default]
    Strict,
    Relaxed,
}

/// One input line of the knowledge job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KnowledgeRecord {
    /// Unique within a file: `user-17`, `item-42`.
    pub id: String,
    pub kind: Kind,
    /// The drafting pool this record reads and feeds (a valid pool name).
    pub group: String,
    pub role: Role,
    /// The user message; the job wraps it in the model's chat template.
    pub prompt: String,
    /// MovieLens user id (user records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<u32>,
    /// MovieLens item id (item records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item_id: Option<u32>,
    /// Overrides the job's `--max-tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<usize>,
    /// Overrides the job's `--verify` (with `top_k` and `tau` for relaxed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<VerifyMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tau: Option<f32>,
}

/// One output line of the knowledge job: the record's knowledge and how it was made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KnowledgeOutput {
    pub id: String,
    pub kind: Kind,
    pub group: String,
    pub role: Role,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item_id: Option<u32>,
    pub text: String,
    pub token_ids: Vec<u32>,
    /// `stop` or `length`.
    pub finish_reason: String,
    /// The rule that verified the drafts: `strict` (the output is plain decoding's) or
    /// `relaxed`.
    pub verify: VerifyMode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tau: Option<f32>,
    /// Tokens kept only because of the relaxation (0 under strict).
    pub relaxed_tokens: usize,
    pub completion_tokens: usize,
    /// Target forwards, prefill included.
    pub forward_passes: usize,
    pub mean_accepted_length: f64,
    pub elapsed_ms: f64,
}
