//! Acceptance rules: how a verifier decides which drafted tokens to keep, chosen per
//! request. Each rule is a [`Step`](crate::Step) chooser for [`walk_with`](crate::walk_with);
//! a relaxed rule may accept a
//! child other than the target's own choice and say so in the verdict. Only rules a
//! request may ask for are here: the benchmark's forced output is [`Forced`](crate::Forced),
//! which no request can name.

use specdec_tree::TokenTree;

use crate::relaxed::{verify_relaxed, Relaxed};
use crate::rng::Rng;
use crate::sampling::SamplingParams;
use crate::walk::{verify_strict, Verdict};

/// The rule a request's drafts are verified by.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Acceptance {
    /// Keep a drafted token only where the target itself would emit it: the output is
    /// plain decoding's, token for token, greedy or seeded sampling alike.
    #[default]
    Strict,
    /// LASER's relaxed rule (opt-in): a drafted token is kept where it is among the
    /// target's top-k and its probability exceeds tau (the argmax always is); the branch
    /// that emits the most tokens wins. Greedy only.
    Relaxed(Relaxed),
}

impl Acceptance {
    /// The names a request gives the rules by, as [`Acceptance::name`] gives them.
    pub const NAMES: [&'static str; 2] = ["strict", "relaxed"];

    /// The rule's name: `strict` or `relaxed`.
    pub fn name(&self) -> &'static str {
        match self {
            Acceptance::Strict => Self::NAMES[0],
            Acceptance::Relaxed(_) => Self::NAMES[1],
        }
    }

    /// Whether the rule may emit tokens plain decoding would not (every output under such a
    /// rule says so).
    pub fn is_relaxed(&self) -> bool {
        match self {
            Acceptance::Strict => false,
            Acceptance::Relaxed(_) => true,
        }
    }

    /// Whether this rule can verify a request sampled with `sampling`: the relaxed rule is
    /// defined for greedy decoding only (a sampled request has no single target choice to
    /// relax around); the message says what to fix.
    pub fn check_sampling(&self, sampling: &SamplingParams) -> Result<(), String> {
        match self {
            Acceptance::Relaxed(_) if !sampling.is_greedy() => Err(format!(
                "relaxed verification is greedy only: set `temperature` to 0, got {}",
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
            Acceptance::Relaxed(rule) => verify_relaxed(tree, logits, context, params, *rule),
        }
    }
}
