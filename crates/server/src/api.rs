//! The OpenAI wire format: request bodies as clients send them, and response bodies.
//!
//! Request types reject unknown fields, so a misspelled parameter is an error that names it
//! rather than a silently ignored setting. Fields OpenAI defines that specdec does not
//! implement are accepted by the parser and refused by validation with a message.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A string or a list of strings (`stop`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

/// `prompt` of a completion: text, a one-element text list, or token ids.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum PromptInput {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<u32>),
    TokenLists(Vec<Vec<u32>>),
}

/// Message content: text or a list of typed parts.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: Option<String>,
    pub image_url: Option<Value>,
    pub input_audio: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Message {
    pub role: String,
    pub content: Option<Content>,
    pub name: Option<String>,
    pub tool_calls: Option<Value>,
    pub tool_call_id: Option<String>,
    pub refusal: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamOptions {
    pub include_usage: Option<bool>,
    pub include_obfuscation: Option<bool>,
}

/// OpenAI Predicted Outputs.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prediction {
    #[serde(rename = "type")]
    pub kind: String,
    pub content: Content,
}

/// specdec's extension: per-request speculation control.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Speculation {
    pub method: Option<String>,
    pub max_draft_tokens: Option<i64>,
    pub references: Option<Vec<String>>,
    /// A named drafting pool (one per user group, tenant or task).
    pub pool: Option<String>,
    /// The verification rule: `strict` (the default) or `relaxed` (LASER's, greedy only).
    pub verify: Option<String>,
    /// With `verify: "relaxed"`: how many of the target's likeliest tokens a draft may be.
    pub top_k: Option<i64>,
    /// With `verify: "relaxed"`: the probability a draft other than the argmax must exceed.
    pub tau: Option<f64>,
}

/// A request body of either endpoint. One type for both, because serde cannot combine
/// `flatten` with `deny_unknown_fields`; validation refuses fields of the other endpoint.
/// (A missing `Option` field is `None` without `#[serde(default)]`.)
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestBody {
    pub model: Option<String>,
    pub messages: Option<Vec<Message>>,
    pub prompt: Option<PromptInput>,
    pub max_tokens: Option<i64>,
    pub max_completion_tokens: Option<i64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub min_p: Option<f64>,
    pub repetition_penalty: Option<f64>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub seed: Option<i64>,
    pub n: Option<i64>,
    pub best_of: Option<i64>,
    pub stop: Option<OneOrMany>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    pub logprobs: Option<Value>,
    pub top_logprobs: Option<Value>,
    pub logit_bias: Option<Value>,
    pub echo: Option<bool>,
    pub suffix: Option<String>,
    pub user: Option<String>,
    pub prediction: Option<Prediction>,
    pub speculation: Option<Speculation>,
    pub tools: Option<Value>,
    pub tool_choice: Option<Value>,
    pub parallel_tool_calls: Option<Value>,
    pub functions: Option<Value>,
    pub function_call: Option<Value>,
    pub response_format: Option<Value>,
    pub store: Option<Value>,
    pub metadata: Option<Value>,
    pub reasoning_effort: Option<Value>,
    pub modalities: Option<Value>,
    pub audio: Option<Value>,
    pub service_tier: Option<Value>,
    pub web_search_options: Option<Value>,
    pub safety_identifier: Option<Value>,
    pub prompt_cache_key: Option<Value>,
    pub verbosity: Option<Value>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CompletionTokensDetails {
    pub accepted_prediction_tokens: usize,
    pub rejected_prediction_tokens: usize,
    pub reasoning_tokens: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct PromptTokensDetails {
    /// Prompt tokens whose KV cache was reused from an earlier request.
    pub cached_tokens: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub prompt_tokens_details: PromptTokensDetails,
    pub completion_tokens: usize,
    pub total_tokens: usize,
    pub completion_tokens_details: CompletionTokensDetails,
}

/// The request's speculation outcome (specdec extension on every response).
#[derive(Debug, Clone, Serialize)]
pub struct SpeculationReport {
    pub method: &'static str,
    /// Whether a relaxed acceptance rule verified the drafts; `false` means strict
    /// verification, so the output is what plain decoding gives.
    pub relaxed: bool,
    /// The rule that verified the drafts: `strict` or `relaxed`.
    pub verify: &'static str,
    /// Accepted tokens that were not the target's own choice (0 under strict).
    pub relaxed_tokens: usize,
    pub drafted_tokens: usize,
    pub accepted_tokens: usize,
    pub mean_accepted_length: f64,
    pub accepted_by_position: Vec<usize>,
}

#[derive(Debug, Serialize)]
pub struct ModelCard {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub owned_by: &'static str,
    pub max_model_len: usize,
}

#[derive(Debug, Serialize)]
pub struct ModelList {
    pub object: &'static str,
    pub data: Vec<ModelCard>,
}
