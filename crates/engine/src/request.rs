//! What a caller asks of the engine, and what it gets back.

use std::time::Duration;

use specdec_verify::{Acceptance, SamplingParams};

use crate::method::DraftMethod;
use crate::pools::PoolName;
use crate::scope::CacheScope;
use crate::spec::SpeculationSpec;
use crate::stats::SpecStats;

/// How a request speculates: where drafts come from and how they are accepted.
#[derive(Clone, Debug)]
pub struct Speculation {
    /// Where drafts come from.
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
        SpeculationSpec::default().into()
    }
}

impl From<SpeculationSpec> for Speculation {
    /// The spec's method and rule, with the default draft size, no references, the global
    /// pool.
    fn from(spec: SpeculationSpec) -> Self {
        Speculation {
            method: spec.method,
            max_draft: 32,
            references: Vec::new(),
            pool: None,
            acceptance: spec.acceptance,
        }
    }
}

/// A validated generation request in token space.
#[derive(Clone, Debug)]
pub struct GenerateRequest {
    /// The prompt's tokens (chat template already applied, if any).
    pub prompt: Vec<u32>,
    /// The most tokens to generate.
    pub max_tokens: usize,
    /// Greedy or seeded sampling, and its parameters.
    pub sampling: SamplingParams,
    /// Stop strings: generation ends before the first one the text produces.
    pub stop: Vec<String>,
    /// How the request speculates.
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

/// Why a generation ended.
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
    /// `stop`, `length` or `cancelled`, as the API reports it.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Cancelled => "cancelled",
        }
    }
}

/// A finished generation: its tokens and text, and how it went.
#[derive(Clone, Debug)]
pub struct GenerateOutput {
    /// The generated tokens.
    pub token_ids: Vec<u32>,
    /// Their text, ending before a stop string that matched.
    pub text: String,
    /// Tokens of the prompt.
    pub prompt_tokens: usize,
    /// Prompt tokens whose KV cache was reused from an earlier request (not prefilled).
    pub cached_prompt_tokens: usize,
    /// Tokens generated.
    pub completion_tokens: usize,
    /// Target-model forwards, prefill included.
    pub forward_passes: usize,
    /// Time from the generation's start until its prompt was in the cache (prefilled).
    pub prefill_time: Duration,
    /// Time from the generation's start to its end.
    pub elapsed: Duration,
    /// Why it ended.
    pub finish_reason: FinishReason,
    /// The stop token that ended it, if one did: not part of `token_ids`, but the target
    /// chose it (an offline replay forces it too, or it would stop a step early).
    pub stop_token: Option<u32>,
    /// Drafted and accepted tokens, overall and by source.
    pub spec: SpecStats,
    /// Whether a relaxed acceptance rule verified the drafts (the output may then differ
    /// from plain decoding's).
    pub relaxed: bool,
    /// Whether the output was forced to a given text (benchmarks only, see
    /// [`Engine::start_forced`](crate::Engine::start_forced); `relaxed` is set too): it
    /// measures drafting, not the model.
    pub forced: bool,
}

impl GenerateOutput {
    /// Every token the target chose: `token_ids`, then the stop token where one ended it.
    /// What drafters learn from (`Drafter::end`, shared lessons) and what a replay forces.
    pub fn written(&self) -> Vec<u32> {
        self.token_ids
            .iter()
            .chain(&self.stop_token)
            .copied()
            .collect()
    }
}
