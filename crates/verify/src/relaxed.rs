//! LASER's relaxed acceptance rule (greedy only).
//!
//! At each node the target's distribution is the softmax (temperature 1) of its logits
//! after the request's repetition penalty, with the same penalty context as strict
//! verification: the context, then the draft path down to the node. A child is
//! *acceptable* when its token is the argmax (always), or when it is among the top-k
//! (ranked by logit, ties to the lower token id, as [`argmax`](crate::argmax)) and its
//! probability exceeds tau. Of every root-to-node path of acceptable edges the rule takes
//! the one that emits the most tokens; ties go to the path with fewer relaxed tokens, then
//! to the lowest end node index (the earliest in DFS order). The bonus is the argmax at
//! that path's end, so the step still ends on the target's own choice.
//!
//! Among siblings carrying the same token only the first counts, as in strict
//! verification's [`TokenTree::child_with`]; with k = 1 and tau = 0 only argmax children
//! are acceptable, and since a path of argmax children is unique the rule is exactly strict
//! greedy verification. Logits are assumed free of NaN (the runtime never produces one).

use specdec_tree::TokenTree;

use crate::sampling::{penalised, SamplingParams};
use crate::walk::Verdict;

/// The parameters of [`Acceptance::Relaxed`](crate::Acceptance::Relaxed), checked on
/// construction.
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
            return Err(Self::bad_top_k(top_k));
        }
        if !(tau.is_finite() && (0.0..1.0).contains(&tau)) {
            return Err(format!("relaxed tau must be in [0, 1), got {tau}"));
        }
        Ok(Relaxed { top_k, tau })
    }

    /// [`Relaxed::new`] from the wider numbers a request carries (any integer, a double:
    /// tau is rounded to f32 first), with the same messages.
    pub fn from_wide(top_k: i64, tau: f64) -> Result<Self, String> {
        let top_k = usize::try_from(top_k).map_err(|_| Self::bad_top_k(top_k))?;
        Self::new(top_k, tau as f32)
    }

    fn bad_top_k(top_k: impl std::fmt::Display) -> String {
        format!(
            "relaxed top_k must be in 1..={}, got {top_k}",
            Self::MAX_TOP_K
        )
    }

    /// How many of the target's likeliest tokens a kept draft may be.
    pub fn top_k(&self) -> usize {
        self.top_k
    }

    /// The probability a kept draft other than the argmax must exceed.
    pub fn tau(&self) -> f32 {
        self.tau
    }
}

impl Default for Relaxed {
    fn default() -> Self {
        Relaxed::DEFAULT
    }
}

/// How a node was reached: its depth below the root and the relaxed tokens on its path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Reach {
    depth: usize,
    relaxed: usize,
}

/// Relaxed verification of `tree` (see the module documentation; the arguments are
/// [`verify_strict`](crate::verify_strict)'s, and `params` only gives the penalty). Only
/// nodes whose ancestors are all acceptable are looked at.
pub(crate) fn verify_relaxed<'l>(
    tree: &TokenTree,
    logits: impl Fn(usize) -> &'l [f32],
    context: &[u32],
    params: &SamplingParams,
    rule: Relaxed,
) -> Verdict {
    let n = tree.len();
    let mut reach: Vec<Option<Reach>> = vec![None; n];
    // The target's argmax at each node looked at: the bonus if the path ends there.
    let mut bonus = vec![0u32; n];
    reach[0] = Some(Reach {
        depth: 0,
        relaxed: 0,
    });
    let window = &context[context.len().saturating_sub(params.repeat_last_n)..];
    let penalty = params.repetition_penalty != 1.0;
    // Parents precede children, so a node's reach is known when its turn comes.
    for node in 0..n {
        let Some(here) = reach[node] else { continue };
        let recent = if penalty {
            [window, &tree.tokens_below_root(node)].concat()
        } else {
            Vec::new()
        };
        let scores = penalised(logits(node), &recent, params);
        let top = top_k(&scores, rule.top_k());
        let best = top[0].0;
        bonus[node] = best;
        let mut lse = None;
        let mut seen: Vec<u32> = Vec::new();
        for child in tree.children(node) {
            let token = tree.token(child);
            if seen.contains(&token) {
                continue; // a duplicate sibling: the first one stands for the token
            }
            seen.push(token);
            let relaxed = if token == best {
                false
            } else if let Some(&(_, score)) = top[1..].iter().find(|&&(t, _)| t == token) {
                // Only here is the normaliser needed, and only once per node.
                let lse = *lse.get_or_insert_with(|| log_sum_exp(&scores, top[0].1));
                if f64::from(score) - lse <= f64::from(rule.tau()).ln() {
                    continue;
                }
                true
            } else {
                continue;
            };
            reach[child] = Some(Reach {
                depth: here.depth + 1,
                relaxed: here.relaxed + usize::from(relaxed),
            });
        }
    }
    // The deepest end, then the fewest relaxed tokens, then the lowest index.
    let (end, r) = reach
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r.map(|r| (i, r)))
        .min_by_key(|&(i, r)| (std::cmp::Reverse(r.depth), r.relaxed, i))
        .expect("the root is always reached");
    let path = tree.path_to(end);
    Verdict {
        accepted: path[1..].to_vec(),
        bonus: bonus[end],
        relaxed: r.relaxed,
    }
}

/// The `k` highest scores with their token ids, best first, ties to the lower id (so the
/// first is [`argmax`](crate::argmax)'s): one pass, keeping a sorted list of at most k.
fn top_k(scores: &[f32], k: usize) -> Vec<(u32, f32)> {
    let mut top: Vec<(u32, f32)> = Vec::with_capacity(k + 1);
    for (i, &s) in scores.iter().enumerate() {
        // Nearly every score fails this one comparison (a NaN too).
        if top.len() == k && s.partial_cmp(&top[k - 1].1) != Some(std::cmp::Ordering::Greater) {
            continue;
        }
        // After every kept score >= s: an equal score seen earlier has the lower id.
        let at = top.partition_point(|&(_, t)| t >= s);
        top.insert(at, (i as u32, s));
        top.truncate(k);
    }
    top
}

/// ln(sum exp(scores)), shifted by the largest score `max` so nothing overflows; summed in
/// f64 over the whole vocabulary.
fn log_sum_exp(scores: &[f32], max: f32) -> f64 {
    let sum: f64 = scores.iter().map(|&s| f64::from((s - max).exp())).sum();
    f64::from(max) + sum.ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_ranks_by_score_then_lower_id() {
        let s = [1.0, 3.0, 2.0, 3.0, 0.5];
        assert_eq!(top_k(&s, 1), vec![(1, 3.0)]);
        assert_eq!(top_k(&s, 3), vec![(1, 3.0), (3, 3.0), (2, 2.0)]);
        assert_eq!(top_k(&s, 9).len(), 5);
        assert_eq!(top_k(&s, 1)[0].0, crate::argmax(&s));
    }

    #[test]
    fn log_sum_exp_normalises_the_softmax() {
        let s = [0.0f32, 1.0, 2.0];
        let lse = log_sum_exp(&s, 2.0);
        let total: f64 = s.iter().map(|&x| (f64::from(x) - lse).exp()).sum();
        assert!((total - 1.0).abs() < 1e-6);
    }
}
