//! What a caller asks of the engine, and what it gets back.

use std::time::Duration;

use specdec_verify::{Acceptance, SamplingParams};

use crate::method::DraftMethod;
use crate::pools::PoolName;
use crate::stats::SpecStats;

/// How a request speculates: where drafts come from and how they are accepted.
#[derive(Clone, Debug)]
pub struct Speculation {
    pub method: DraftMethod,
    /// Most draft nodes per step (0: plain decoding whatever the method).
    pub max_draft: usize,
    /// Reference documents for reference drafting (retrieved passages, the text to edit).
    pub references: Vec<Vec<u32>>,
    /// The named drafting pool whose trie this request reads and feeds instead of the
    /// global one (one pool per user group, tenant or task).
    pub pool: Option<PoolName>,
    /// The verification rule; only a relaxed rule can change the output.
    pub acceptance: Acceptance,
}

impl Default for Speculation {
    fn default() -> Self {
        Speculation {
            method: DraftMethod::None,
            max_draft: 32,
            references: Vec::new(),
            pool: None,
            acceptance: Acceptance::Strict,
        }
    }
}

/// Who may reuse a request's cached prompt prefix, and whose it may reuse. A hit reports
/// its length (`cached_prompt_tokens`) and is faster, so reuse across clients would let one
/// learn another's prompt token by token: only requests of one scope share.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum CacheScope {
    /// Every request of this scope shares with every other (one caller's own engine: the
    /// command line, a benchmark, a server without clients to tell apart).
    #[default]
    Shared,
    /// Only requests of the same tenant share.
    Tenant(Tenant),
    /// Reuses nothing and leaves nothing for others.
    Private,
}

/// A client identity for [`CacheScope::Tenant`] (an opaque string: a hash, a user id).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Tenant(String);

impl Tenant {
    pub fn new(id: impl Into<String>) -> Self {
        Tenant(id.into())
    }

    /// The identity (for keys derived from it, never for logs).
    pub(crate) fn id(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Tenant {
    /// Never the identity itself (requests are logged).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tenant(..)")
    }
}

/// A validated generation request in token space.
#[derive(Clone, Debug)]
pub struct GenerateRequest {
    pub prompt: Vec<u32>,
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    pub stop: Vec<String>,
    pub speculation: Speculation,
    /// Whose cached prefixes this request may reuse.
    pub cache_scope: CacheScope,
}

impl GenerateRequest {
    /// Plain decoding of `prompt` (see [`GenerateRequest::speculate`]).
    pub fn new(prompt: Vec<u32>, max_tokens: usize) -> Self {
        GenerateRequest {
            prompt,
            max_tokens,
            sampling: SamplingParams::default(),
            stop: Vec::new(),
            speculation: Speculation::default(),
            cache_scope: CacheScope::Shared,
        }
    }

    /// The same request drafting with `method`.
    pub fn speculate(mut self, method: DraftMethod) -> Self {
        self.speculation.method = method;
        self
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-generation token or a stop string.
    Stop,
    /// `max_tokens` reached.
    Length,
    /// The caller's sink asked to stop (client gone).
    Cancelled,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Cancelled => "cancelled",
        }
    }
}

#[derive(Clone, Debug)]
pub struct GenerateOutput {
    pub token_ids: Vec<u32>,
    pub text: String,
    pub prompt_tokens: usize,
    /// Prompt tokens whose KV cache was reused from an earlier request (not prefilled).
    pub cached_prompt_tokens: usize,
    pub completion_tokens: usize,
    /// Target-model forwards, prefill included.
    pub forward_passes: usize,
    pub prefill_time: Duration,
    pub elapsed: Duration,
    pub finish_reason: FinishReason,
    pub spec: SpecStats,
    /// Whether a relaxed acceptance rule verified the drafts (the output may then differ
    /// from plain decoding's).
    pub relaxed: bool,
    /// Whether the output was forced to a given text (benchmarks only; `relaxed` is set
    /// too): it measures drafting, not the model.
    pub forced: bool,
}
