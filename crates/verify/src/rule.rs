//! Acceptance rules: how a verifier decides which drafted tokens to keep, chosen per
//! request. Each rule is a [`Step`](crate::Step) chooser for [`walk_with`](crate::walk_with);
//! a relaxed rule may accept a
//! child other than the target's own choice and say so in the verdict.

use specdec_tree::TokenTree;

use crate::{verify_strict, Rng, SamplingParams, Verdict};

/// The rule a request's drafts are verified by.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Acceptance {
    /// Keep a drafted token only where the target itself would emit it: the output is
    /// plain decoding's, token for token, greedy or seeded sampling alike.
    #[default]
    Strict,
}

impl Acceptance {
    pub fn name(self) -> &'static str {
        match self {
            Acceptance::Strict => "strict",
        }
    }

    /// Whether the rule may emit tokens plain decoding would not (every output under such a
    /// rule says so).
    pub fn is_relaxed(self) -> bool {
        match self {
            Acceptance::Strict => false,
        }
    }

    /// Verifies `tree` under this rule (see [`verify_strict`] for the arguments).
    pub fn verify<'l>(
        self,
        tree: &TokenTree,
        logits: impl Fn(usize) -> &'l [f32],
        context: &[u32],
        params: &SamplingParams,
        rng: &mut Rng,
    ) -> Verdict {
        match self {
            Acceptance::Strict => verify_strict(tree, logits, context, params, rng),
        }
    }
}
