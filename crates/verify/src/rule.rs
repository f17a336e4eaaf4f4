//! Acceptance rules: how a verifier decides which drafted tokens to keep, chosen per
//! request. Each rule is a [`Step`](crate::Step) chooser for [`walk_with`](crate::walk_with);
//! a relaxed rule may accept a
//! child other than the target's own choice and say so in the verdict.

use std::sync::Arc;

use specdec_tree::TokenTree;

use crate::{strict_choice, verify_strict, walk, Rng, SamplingParams, Verdict};

/// The rule a request's drafts are verified by.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Acceptance {
    /// Keep a drafted token only where the target itself would emit it: the output is
    /// plain decoding's, token for token, greedy or seeded sampling alike.
    #[default]
    Strict,
    /// Benchmarks only (LLMA's forced-output measurement): the output is a given text, not
    /// the target's. Holds the whole expected context, prompt then forced output; a drafted
    /// token is kept iff it equals the expected token at its position and the bonus is the
    /// next expected token, whatever the logits say. Past the end of the expected tokens
    /// the rule is strict (the caller caps `max_tokens` so that never shows).
    Forced(Arc<[u32]>),
    /// LASER's relaxed rule (opt-in): a drafted token is kept where it is among the
    /// target's top-k and its probability exceeds tau (the argmax always is); the branch
    /// that emits the most tokens wins. Greedy only.
    Relaxed(Relaxed),
}

/// The parameters of [`Acceptance::Relaxed`], checked on construction.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Relaxed {
    top_k: usize,
    tau: f32,
}

impl Relaxed {
    /// The paper's defaults: top-2, tau = 0.1.
    pub const DEFAULT: Relaxed = Relaxed { top_k: 2, tau: 0.1 };
    /// More candidates per position than any sensible relaxation needs.
    pub const MAX_TOP_K: usize = 64;

    /// `top_k` in 1..=64, `tau` in [0, 1); the message says what to fix.
    pub fn new(top_k: usize, tau: f32) -> Result<Self, String> {
        if !(1..=Self::MAX_TOP_K).contains(&top_k) {
            return Err(format!(
                "relaxed top_k must be in 1..={}, got {top_k}",
                Self::MAX_TOP_K
            ));
        }
        if !(tau.is_finite() && (0.0..1.0).contains(&tau)) {
            return Err(format!("relaxed tau must be in [0, 1), got {tau}"));
        }
        Ok(Relaxed { top_k, tau })
    }

    pub fn top_k(&self) -> usize {
        self.top_k
    }

    pub fn tau(&self) -> f32 {
        self.tau
    }
}

impl Default for Relaxed {
    fn default() -> Self {
        Relaxed::DEFAULT
    }
}

impl Acceptance {
    pub fn name(&self) -> &'static str {
        match self {
            Acceptance::Strict => "strict",
            Acceptance::Forced(_) => "forced",
            Acceptance::Relaxed(_) => "relaxed",
        }
    }

    /// Whether the rule may emit tokens plain decoding would not (every output under such a
    /// rule says so). A forced output is the given text, not plain decoding's.
    pub fn is_relaxed(&self) -> bool {
        match self {
            Acceptance::Strict => false,
            Acceptance::Forced(_) | Acceptance::Relaxed(_) => true,
        }
    }

    /// Whether the output is forced (see [`Acceptance::Forced`]).
    pub fn is_forced(&self) -> bool {
        matches!(self, Acceptance::Forced(_))
    }

    /// How many tokens a forced rule can emit after `prompt_len` prompt tokens (`None`
    /// when the rule is not forced).
    pub fn forced_remaining(&self, prompt_len: usize) -> Option<usize> {
        match self {
            Acceptance::Strict | Acceptance::Relaxed(_) => None,
            Acceptance::Forced(expected) => Some(expected.len().saturating_sub(prompt_len)),
        }
    }

    /// Whether this rule can verify a request sampled with `sampling`: the relaxed rule is
    /// defined for greedy decoding only (a sampled request has no single target choice to
    /// relax around); the message says what to fix.
    pub fn check_sampling(&self, sampling: &SamplingParams) -> Result<(), String> {
        match self {
            Acceptance::Relaxed(_) if !sampling.is_greedy() => Err(format!(
                "relaxed verification is greedy only: use temperature 0 (got {})",
                sampling.temperature
            )),
            _ => Ok(()),
        }
    }

    /// Whether verifying under this rule with `params` needs only each node's argmax, not
    /// its logits: strict greedy decoding with no repetition penalty (the target's choice
    /// is then the argmax of its raw logits). What lets a forward skip whole rows.
    pub fn argmax_suffices(&self, params: &SamplingParams) -> bool {
        matches!(self, Acceptance::Strict) && params.is_greedy() && params.repetition_penalty == 1.0
    }

    /// Verifies `tree` under this rule (see [`verify_strict`] for the arguments).
    pub fn verify<'l>(
        &self,
        tree: &TokenTree,
        logits: impl Fn(usize) -> &'l [f32],
        context: &[u32],
        params: &SamplingParams,
        rng: &mut Rng,
    ) -> Verdict {
        match self {
            Acceptance::Strict => verify_strict(tree, logits, context, params, rng),
            // Greedy only (see `check_sampling`): no number is drawn.
            Acceptance::Relaxed(rule) => {
                crate::relaxed::verify_relaxed(tree, logits, context, params, *rule)
            }
            Acceptance::Forced(expected) => {
                verify_forced(tree, expected, logits, context, params, rng)
            }
        }
    }
}

/// Forced verification: node 0's successor sits at `context.len()` in `expected`, so a
/// node at depth d below the root is checked against `expected[context.len() + d]`.
fn verify_forced<'l>(
    tree: &TokenTree,
    expected: &[u32],
    logits: impl Fn(usize) -> &'l [f32],
    context: &[u32],
    params: &SamplingParams,
    rng: &mut Rng,
) -> Verdict {
    let start = context.len();
    let mut strict = strict_choice(logits, context, params, rng);
    walk(tree, |node, path| match expected.get(start + path.len()) {
        Some(&t) => t,
        // Past the forced text: the target's own choice, as strict.
        None => strict(node, path),
    })
}
