//! The knowledge job's input and output lines (JSONL), shared by `rec prepare`, the job,
//! the quality checks and the benchmark.

use serde::{Deserialize, Serialize};

/// Whose knowledge a record asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A user profile: what a user likes, from their ratings.
    User,
    /// An item description: what a movie offers, and to whom.
    Item,
}

/// A record's place in its group: warm-up members are generated first and fill the
/// group's pool; target members are the ones timed and compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Generated first, to fill the group's pool.
    Warmup,
    /// Generated after the warm-up, timed and compared.
    Target,
}

/// The verification rule a record asks for (the job's `--verify` is the default).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum VerifyMode {
    /// Strict verification: the output is plain decoding's.
    #[default]
    Strict,
    /// LASER's relaxed rule (top-k, tau): faster, the output may differ.
    Relaxed,
}

impl VerifyMode {
    /// The mode's name in records, as the engine's parser reads it.
    pub fn name(self) -> &'static str {
        match self {
            VerifyMode::Strict => specdec_engine::Acceptance::NAMES[0],
            VerifyMode::Relaxed => specdec_engine::Acceptance::NAMES[1],
        }
    }
}

/// One input line of the knowledge job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KnowledgeRecord {
    /// Unique within a file: `user-17`, `item-42`.
    pub id: String,
    /// User or item knowledge.
    pub kind: Kind,
    /// The drafting pool this record reads and feeds (a valid pool name).
    pub group: String,
    /// Warm-up or target member of its group.
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
    /// The relaxed rule's top-k (candidates ranked by logit that may be accepted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<usize>,
    /// The relaxed rule's probability threshold for a non-argmax candidate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tau: Option<f32>,
}

/// One output line of the knowledge job: the record's knowledge and how it was made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KnowledgeOutput {
    /// The input record's id.
    pub id: String,
    /// The input record's kind.
    pub kind: Kind,
    /// The input record's group.
    pub group: String,
    /// The input record's role.
    pub role: Role,
    /// The input record's MovieLens user id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<u32>,
    /// The input record's MovieLens item id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item_id: Option<u32>,
    /// The generated knowledge.
    pub text: String,
    /// Its tokens.
    pub token_ids: Vec<u32>,
    /// The token the model stopped on, when it did (not in `token_ids`): a replay of the
    /// job's drafting (`rec replay`) verifies it in the step that wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_token: Option<u32>,
    /// `stop` or `length`.
    pub finish_reason: String,
    /// The rule that verified the drafts: `strict` (the output is plain decoding's) or
    /// `relaxed`.
    pub verify: VerifyMode,
    /// The relaxed rule's top-k, when relaxed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<usize>,
    /// The relaxed rule's tau, when relaxed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tau: Option<f32>,
    /// Tokens kept only because of the relaxation (0 under strict).
    pub relaxed_tokens: usize,
    /// Tokens generated.
    pub completion_tokens: usize,
    /// Target forwards, prefill included.
    pub forward_passes: usize,
    /// Tokens emitted per decode forward, bonus included.
    pub mean_accepted_length: f64,
    /// Wall time of the record's generation, in milliseconds.
    pub elapsed_ms: f64,
}
