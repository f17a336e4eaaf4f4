//! Acceptance rules: how a verifier decides which drafted tokens to keep, chosen per
//! request.

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
}
