//! Forced output, for benchmarks only (LLMA's forced-output measurement): the output is a
//! given text, not the target's, so drafting is measured on realistic answers even where
//! the model is too small to write them. It is no [`Acceptance`](crate::Acceptance): no
//! request can name it, and the engine takes one only beside a request, from a caller
//! that measures (the CLI's `bench --forced`).

use std::sync::Arc;

use specdec_tree::TokenTree;

use crate::rng::Rng;
use crate::sampling::SamplingParams;
use crate::walk::{strict_choice, walk, Verdict};

/// The forced rule: holds the whole expected context, prompt then forced output; a drafted
/// token is kept iff it equals the expected token at its position and the bonus is the
/// next expected token, whatever the logits say. Past the end of the expected tokens the
/// rule is strict (the engine caps `max_tokens` at [`Forced::remaining`] so that never
/// shows).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Forced {
    expected: Arc<[u32]>,
    replay: bool,
}

impl Forced {
    /// The rule that makes the output `expected` past the prompt (`expected` holds the
    /// prompt first).
    pub fn new(expected: impl Into<Arc<[u32]>>) -> Self {
        Forced {
            expected: expected.into(),
            replay: false,
        }
    }

    /// The rule of an offline replay: `expected` (prompt first) is the target's own output
    /// from an earlier strict run, so the request is sized as that run's strict request
    /// was (acceptance inherited from earlier requests, the engine's cost curve) and its
    /// drafts see the trees the real run verified, without the target's forwards.
    pub fn replay(expected: impl Into<Arc<[u32]>>) -> Self {
        Forced {
            replay: true,
            ..Forced::new(expected)
        }
    }

    /// Whether the expected tokens are the target's own (see [`Forced::replay`]).
    pub fn is_replay(&self) -> bool {
        self.replay
    }

    /// Whether `prompt` is where the expected tokens start; the message says otherwise.
    pub fn check(&self, prompt: &[u32]) -> Result<(), String> {
        if self.expected.starts_with(prompt) {
            Ok(())
        } else {
            Err("forced tokens must start with the prompt".into())
        }
    }

    /// How many tokens the rule can emit after `prompt_len` prompt tokens.
    pub fn remaining(&self, prompt_len: usize) -> usize {
        self.expected.len().saturating_sub(prompt_len)
    }

    /// Forced verification (the arguments are [`verify_strict`](crate::verify_strict)'s):
    /// node 0's successor sits at `context.len()` in the expected tokens, so a node at
    /// depth d below the root is checked against the expected token `context.len() + d`.
    pub fn verify<'l>(
        &self,
        tree: &TokenTree,
        logits: impl Fn(usize) -> &'l [f32],
        context: &[u32],
        params: &SamplingParams,
        rng: &mut Rng,
    ) -> Verdict {
        let start = context.len();
        let mut strict = strict_choice(logits, context, params, rng);
        walk(tree, |node, path| {
            match self.expected.get(start + path.len()) {
                Some(&t) => t,
                // Past the forced text: the target's own choice, as strict.
                None => strict(node, path),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use specdec_tree::{Meta, Source};

    /// root(5) -> 10 -> 11 -> 12, root -> 20 -> 21: a two-branch tree for the forced rule.
    fn forked_tree() -> TokenTree {
        let meta = Meta::drafted(Source::Trie, 0.5);
        let mut tree = TokenTree::rooted(5);
        let a = tree.push(10, Some(0), meta);
        let b = tree.push(11, Some(a), meta);
        tree.push(12, Some(b), meta);
        let c = tree.push(20, Some(0), meta);
        tree.push(21, Some(c), meta);
        tree
    }

    fn forced(expected: &[u32], tree: &TokenTree, context: &[u32]) -> Verdict {
        // Logits that would pick token 0 everywhere: the forced rule must ignore them.
        let logits = vec![9.0f32, 0.0, 0.0];
        Forced::new(expected).verify(
            tree,
            |_| &logits,
            context,
            &SamplingParams::default(),
            &mut Rng::new(0),
        )
    }

    #[test]
    fn forced_rule_accepts_the_branch_matching_the_forced_tokens() {
        let tree = forked_tree();
        // Context [1, 5]: the forced output continues at position 2.
        let v = forced(&[1, 5, 20, 21, 30], &tree, &[1, 5]);
        assert_eq!(v.accepted, vec![4, 5]);
        assert_eq!(v.bonus, 30, "the bonus is the next forced token");
        let v = forced(&[1, 5, 10, 11, 12, 13], &tree, &[1, 5]);
        assert_eq!(v.emitted(&tree), vec![10, 11, 12, 13]);
    }

    #[test]
    fn forced_rule_stops_at_the_first_mismatch() {
        let tree = forked_tree();
        let v = forced(&[1, 5, 10, 99, 12], &tree, &[1, 5]);
        assert_eq!(v.accepted, vec![1]);
        assert_eq!(v.bonus, 99);
        let v = forced(&[1, 5, 7], &tree, &[1, 5]);
        assert_eq!((v.accepted.len(), v.bonus), (0, 7));
    }

    #[test]
    fn forced_rule_is_deterministic_among_siblings() {
        // Sibling order does not matter: the same path is taken with the branches swapped.
        let meta = Meta::drafted(Source::Trie, 0.5);
        let mut swapped = TokenTree::rooted(5);
        let c = swapped.push(20, Some(0), meta);
        swapped.push(21, Some(c), meta);
        let a = swapped.push(10, Some(0), meta);
        swapped.push(11, Some(a), meta);
        let expected = [1, 5, 10, 11, 40];
        let v1 = forced(&expected, &forked_tree(), &[1, 5]);
        let v2 = forced(&expected, &swapped, &[1, 5]);
        assert_eq!(v1.emitted(&forked_tree()), vec![10, 11, 40]);
        assert_eq!(v2.emitted(&swapped), v1.emitted(&forked_tree()));
        assert_eq!(forced(&expected, &forked_tree(), &[1, 5]), v1);
    }

    #[test]
    fn forced_rule_falls_back_to_the_target_past_the_forced_text() {
        let tree = forked_tree();
        // One forced token left: it is accepted, then the target's argmax (0) is the bonus.
        let v = forced(&[1, 5, 10], &tree, &[1, 5]);
        assert_eq!(v.emitted(&tree), vec![10, 0]);
        let rule = Forced::new([1u32, 2]);
        assert_eq!(rule.remaining(1), 1);
        assert!(rule.check(&[1]).is_ok() && rule.check(&[2]).is_err());
    }
}
