//! The walk every rule shares: from the root down the tree, one [`Step`] per node, to a
//! [`Verdict`]; strict verification is the walk along the target's own choices.

use specdec_tree::TokenTree;

use crate::rng::Rng;
use crate::sampling::{sample, SamplingParams};

/// The outcome of verifying one tree (node indices are the tree's: node 0 is the pending
/// token, already emitted and not yet evaluated; drafted nodes hang below it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Accepted drafted nodes, from below the root down to a leaf (never node 0).
    pub accepted: Vec<usize>,
    /// The target's own token after the last accepted node.
    pub bonus: u32,
    /// How many of `accepted` a relaxed rule kept although they are not the token the
    /// target itself chose there (0 under strict verification).
    pub relaxed: usize,
}

impl Verdict {
    /// The tokens this step emits: the accepted drafts, then the bonus.
    pub fn emitted(&self, tree: &TokenTree) -> Vec<u32> {
        let mut out: Vec<u32> = self.accepted.iter().map(|&i| tree.token(i)).collect();
        out.push(self.bonus);
        out
    }
}

/// What a rule decides at one node of the walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Accept child `child` and go on from it; `relaxed` when the target's own choice
    /// at this node was another token.
    Descend {
        /// The accepted child's node index.
        child: usize,
        /// Whether the target itself chose another token here.
        relaxed: bool,
    },
    /// Stop here and emit `bonus`, the target's token at this node.
    Stop {
        /// The target's token at this node.
        bonus: u32,
    },
}

impl Step {
    /// Strict rule: descend into the child carrying `token` (the target's choice at
    /// `node`), or stop with it.
    pub fn strict(tree: &TokenTree, node: usize, token: u32) -> Step {
        match tree.child_with(Some(node), token) {
            Some(child) => Step::Descend {
                child,
                relaxed: false,
            },
            None => Step::Stop { bonus: token },
        }
    }
}

/// Walks `tree` from its root, node 0: at each node `rule(node, path_tokens)` chooses
/// which child to accept, if any (a rule may choose among a node's children), or the
/// bonus. `path_tokens` are the tokens emitted so far in this step.
pub fn walk_with(tree: &TokenTree, mut rule: impl FnMut(usize, &[u32]) -> Step) -> Verdict {
    let mut node = 0usize;
    let mut accepted = Vec::new();
    let mut emitted = Vec::new();
    let mut relaxed = 0;
    loop {
        match rule(node, &emitted) {
            Step::Descend { child, relaxed: r } => {
                debug_assert_eq!(tree.parent(child), Some(node), "a rule descends to a child");
                accepted.push(child);
                emitted.push(tree.token(child));
                relaxed += usize::from(r);
                node = child;
            }
            Step::Stop { bonus } => {
                return Verdict {
                    accepted,
                    bonus,
                    relaxed,
                }
            }
        }
    }
}

/// Walks `tree` from its root, node 0: at each node `choose(node, path_tokens)` gives the
/// target's token there; the walk descends into the child carrying that token, or stops and
/// makes it the bonus. `path_tokens` are the tokens emitted so far in this step.
pub fn walk(tree: &TokenTree, mut choose: impl FnMut(usize, &[u32]) -> u32) -> Verdict {
    walk_with(tree, |node, path| {
        Step::strict(tree, node, choose(node, path))
    })
}

/// Strict verification with the request's sampling parameters: greedy when the temperature
/// is 0, else exact sampling. `logits(i)` are the target's logits at node `i`. `context` is
/// every token before node 0's successors (prompt + output, node 0 last), for the
/// repetition penalty. Draws one number per emitted token.
pub fn verify_strict<'l>(
    tree: &TokenTree,
    logits: impl Fn(usize) -> &'l [f32],
    context: &[u32],
    params: &SamplingParams,
    rng: &mut Rng,
) -> Verdict {
    walk(tree, strict_choice(logits, context, params, rng))
}

/// Strict greedy verification from each node's argmax alone (`argmax(i)`: the target's
/// largest logit at node `i`, the lowest index on ties): the verdict [`verify_strict`]
/// gives whenever [`Acceptance::argmax_suffices`](crate::Acceptance::argmax_suffices).
pub fn verify_greedy_argmax(tree: &TokenTree, argmax: impl Fn(usize) -> u32) -> Verdict {
    walk(tree, |node, _| argmax(node))
}

/// The target's own choice at a node, as strict verification makes it: a chooser for
/// [`walk`] (other rules fall back on it). Draws one number per call.
pub(crate) fn strict_choice<'a, 'l: 'a>(
    logits: impl Fn(usize) -> &'l [f32] + 'a,
    context: &[u32],
    params: &'a SamplingParams,
    rng: &'a mut Rng,
) -> impl FnMut(usize, &[u32]) -> u32 + 'a {
    // Only the repetition-penalty window of the context can affect a choice.
    let mut recent = context[context.len().saturating_sub(params.repeat_last_n)..].to_vec();
    let base = recent.len();
    // The walk only descends, so `path` only grows: append what is new.
    move |node, path| {
        recent.extend_from_slice(&path[recent.len() - base..]);
        sample(logits(node), &recent, params, rng.next_f64())
    }
}
