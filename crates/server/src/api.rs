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
    /// One string.
    One(String),
    /// Several strings.
    Many(Vec<String>),
}

/// `prompt` of a completion: text, a one-element text list, or token ids.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum PromptInput {
    /// One text.
    Text(String),
    /// A list of texts (only one is served).
    Texts(Vec<String>),
    /// Token ids.
    Tokens(Vec<u32>),
    /// A list of token-id lists (only one is served).
    TokenLists(Vec<Vec<u32>>),
}

/// Message content: text or a list of typed parts.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Content {
    /// Plain text.
    Text(String),
    /// Typed parts; only `text` parts are served, concatenated.
    Parts(Vec<ContentPart>),
}

/// One typed part of a message's content.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContentPart {
    /// The part's `type`; only `text` is served.
    #[serde(rename = "type")]
    pub kind: String,
    /// The text of a `text` part.
    pub text: Option<String>,
    /// An image part's image: refused (the model reads text only).
    pub image_url: Option<Value>,
    /// An audio part's audio: refused (the model reads text only).
    pub input_audio: Option<Value>,
}

/// One chat message.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Message {
    /// `system`, `developer` (read as system), `user` or `assistant`.
    pub role: String,
    /// The message's text (required).
    pub content: Option<Content>,
    /// The participant's name: accepted and not used.
    pub name: Option<String>,
    /// Refused: tool calling is not supported.
    pub tool_calls: Option<Value>,
    /// Refused: tool calling is not supported.
    pub tool_call_id: Option<String>,
    /// Refused: send a refusal's text as `content`.
    pub refusal: Option<String>,
}

/// Options of a streamed response.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamOptions {
    /// Send a last chunk with the usage.
    pub include_usage: Option<bool>,
    /// Refused when true: obfuscation padding is not supported.
    pub include_obfuscation: Option<bool>,
}

/// OpenAI Predicted Outputs.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prediction {
    /// Must be `content`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The predicted output, drafted from as a reference.
    pub content: Content,
}

/// specdec's extension: per-request speculation control.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Speculation {
    /// The draft method by name (the server's default when absent).
    pub method: Option<String>,
    /// Most draft nodes per step (0: plain decoding).
    pub max_draft_tokens: Option<i64>,
    /// Reference documents the reference drafter copies from.
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
    /// The model asked for: must be the one served.
    pub model: Option<String>,
    /// The conversation (chat endpoint only).
    pub messages: Option<Vec<Message>>,
    /// The prompt (completions endpoint only).
    pub prompt: Option<PromptInput>,
    /// The most tokens to generate.
    pub max_tokens: Option<i64>,
    /// The most tokens to generate (chat endpoint's newer name).
    pub max_completion_tokens: Option<i64>,
    /// Sampling temperature; 0 is greedy.
    pub temperature: Option<f64>,
    /// Nucleus sampling: the smallest set of tokens whose probability reaches this.
    pub top_p: Option<f64>,
    /// Sample among the k likeliest tokens only (0: all).
    pub top_k: Option<i64>,
    /// Drop tokens less likely than this times the likeliest one.
    pub min_p: Option<f64>,
    /// Penalty on tokens of the recent context (1: none).
    pub repetition_penalty: Option<f64>,
    /// Refused unless 0: use `repetition_penalty`.
    pub presence_penalty: Option<f64>,
    /// Refused unless 0: use `repetition_penalty`.
    pub frequency_penalty: Option<f64>,
    /// Seeds sampling: the same seed and request give the same text.
    pub seed: Option<i64>,
    /// Refused unless 1.
    pub n: Option<i64>,
    /// Refused unless 1.
    pub best_of: Option<i64>,
    /// Stop strings.
    pub stop: Option<OneOrMany>,
    /// Stream the response as server-sent events.
    pub stream: Option<bool>,
    /// Options of a streamed response.
    pub stream_options: Option<StreamOptions>,
    /// Refused unless false: log probabilities are not returned.
    pub logprobs: Option<Value>,
    /// Refused unless 0: log probabilities are not returned.
    pub top_logprobs: Option<Value>,
    /// Refused unless empty: a bias would change what verification accepts.
    pub logit_bias: Option<Value>,
    /// Refused when true: the prompt is not echoed.
    pub echo: Option<bool>,
    /// Refused unless empty: insertion is not supported.
    pub suffix: Option<String>,
    /// An end-user identity; with the tenant header it scopes prompt-cache reuse.
    pub user: Option<String>,
    /// OpenAI Predicted Outputs: the expected output, drafted from as a reference.
    pub prediction: Option<Prediction>,
    /// specdec's extension: how this request speculates.
    pub speculation: Option<Speculation>,
    /// Refused unless empty: tool calling is not supported.
    pub tools: Option<Value>,
    /// Refused unless `none`: tool calling is not supported.
    pub tool_choice: Option<Value>,
    /// Refused: tool calling is not supported.
    pub parallel_tool_calls: Option<Value>,
    /// Refused: function calling is not supported.
    pub functions: Option<Value>,
    /// Refused unless `none`: function calling is not supported.
    pub function_call: Option<Value>,
    /// Refused unless `{"type": "text"}`.
    pub response_format: Option<Value>,
    /// Refused unless false: completions are not stored.
    pub store: Option<Value>,
    /// Refused unless empty: completions are not stored.
    pub metadata: Option<Value>,
    /// Refused: the model has no reasoning setting.
    pub reasoning_effort: Option<Value>,
    /// Refused unless text only.
    pub modalities: Option<Value>,
    /// Refused: the model writes text only.
    pub audio: Option<Value>,
    /// Refused unless `auto` or `default`.
    pub service_tier: Option<Value>,
    /// Refused: web search is not supported.
    pub web_search_options: Option<Value>,
    /// Accepted and not used.
    pub safety_identifier: Option<Value>,
    /// Accepted and not used (prompt-cache reuse is scoped by tenant and `user`).
    pub prompt_cache_key: Option<Value>,
    /// Refused: the model has no verbosity setting.
    pub verbosity: Option<Value>,
}

/// Breakdown of the completion tokens.
#[derive(Debug, Clone, Serialize)]
pub struct CompletionTokensDetails {
    /// Tokens of the prediction that appeared in the output.
    pub accepted_prediction_tokens: usize,
    /// Tokens of the prediction that did not.
    pub rejected_prediction_tokens: usize,
    /// Always 0: the model does not reason apart.
    pub reasoning_tokens: usize,
}

/// Breakdown of the prompt tokens.
#[derive(Debug, Clone, Serialize)]
pub struct PromptTokensDetails {
    /// Prompt tokens whose KV cache was reused from an earlier request.
    pub cached_tokens: usize,
}

/// Token counts of a request.
#[derive(Debug, Clone, Serialize)]
pub struct Usage {
    /// Tokens of the prompt.
    pub prompt_tokens: usize,
    /// Of which cached.
    pub prompt_tokens_details: PromptTokensDetails,
    /// Tokens generated.
    pub completion_tokens: usize,
    /// Prompt and completion tokens.
    pub total_tokens: usize,
    /// Prediction accounting.
    pub completion_tokens_details: CompletionTokensDetails,
}

/// The request's speculation outcome (specdec extension on every response).
#[derive(Debug, Clone, Serialize)]
pub struct SpeculationReport {
    /// The draft method used.
    pub method: &'static str,
    /// Whether a relaxed acceptance rule verified the drafts; `false` means strict
    /// verification, so the output is what plain decoding gives.
    pub relaxed: bool,
    /// The rule that verified the drafts: `strict` or `relaxed`.
    pub verify: &'static str,
    /// Accepted tokens that were not the target's own choice (0 under strict).
    pub relaxed_tokens: usize,
    /// Draft nodes verified.
    pub drafted_tokens: usize,
    /// Drafted tokens accepted.
    pub accepted_tokens: usize,
    /// Tokens emitted per decode forward, bonus included.
    pub mean_accepted_length: f64,
    /// Steps whose accepted path reached each depth (index d: depth d + 1).
    pub accepted_by_position: Vec<usize>,
}

/// One served model (`GET /v1/models`).
#[derive(Debug, Serialize)]
pub struct ModelCard {
    /// The model's id, what requests name in `model`.
    pub id: String,
    /// Always `model`.
    pub object: &'static str,
    /// When the server started, in Unix seconds.
    pub created: u64,
    /// Always `specdec`.
    pub owned_by: &'static str,
    /// The model's context length.
    pub max_model_len: usize,
}

/// The body of `GET /v1/models`.
#[derive(Debug, Serialize)]
pub struct ModelList {
    /// Always `list`.
    pub object: &'static str,
    /// The served model (one).
    pub data: Vec<ModelCard>,
}
