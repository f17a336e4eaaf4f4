//! The copy oracle: how far copying could go on a workload, whatever the drafter.
//!
//! At each position it knows the longest stretch of the true continuation that occurs in
//! the prompt, a reference or the output so far (at most `budget` tokens): what a copying
//! drafter (reference, prompt, suffix; the trie copies from past outputs too) could have
//! drafted there had it picked the right occurrence. Two figures come of it:
//! - its reach ([`Copyable::reach_steps`]): copying all of that stretch every step, then the target's
//!   bonus token; its mean accepted length separates how much the model copies from how
//!   well a drafter finds it;
//! - its ceiling on a cost curve ([`Copyable::cheapest`]): the cheapest sequence of steps that
//!   copies only what is copyable, each step as deep as pays on this machine (a 30-token
//!   copy is not worth a 31-node forward where 32 nodes cost six rows). No copying drafter
//!   can write the output in fewer modeled milliseconds.

use crate::cost::CostCurve;

/// What the oracle may copy at each position of an output: computed once per output, it
/// gives both figures (the scan over every source is the costly part).
#[derive(Clone, Debug)]
pub struct Copyable {
    /// `at[i]`: the longest prefix of `output[i..]` (at most `budget` tokens) that occurs
    /// in the prompt, a reference or `output[..i]`.
    at: Vec<usize>,
    budget: usize,
}

impl Copyable {
    /// Scans `output` (every token the target emits after the prompt, the stop token
    /// included where the figure should count its step) against its sources.
    pub fn new<R: AsRef<[u32]>>(
        prompt: &[u32],
        references: &[R],
        output: &[u32],
        budget: usize,
    ) -> Self {
        let at = (0..output.len())
            .map(|i| {
                let want = &output[i..output.len().min(i + budget)];
                std::iter::once(prompt)
                    .chain(references.iter().map(AsRef::as_ref))
                    .chain(std::iter::once(&output[..i]))
                    .map(|s| longest_prefix_in(want, s))
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        Copyable { at, budget }
    }

    /// Decode steps the oracle needs for the output's first `len` tokens, copying all it
    /// can every step (its reach). A stretch found in a source is found cut short too, so
    /// the first `len` positions, clamped to `len`, are that prefix's own figures.
    pub fn reach_steps(&self, len: usize) -> usize {
        let mut steps = 0;
        let mut i = 0;
        while i < len.min(self.at.len()) {
            steps += 1;
            i += self.at[i].min(len - i) + 1;
        }
        steps
    }

    /// The cheapest way to write the whole output when each step may draft any copyable
    /// stretch of the true continuation: a shortest path over output positions, each step
    /// priced `curve.ms(1 + drafted)`.
    pub fn cheapest(&self, curve: &CostCurve) -> CopyPlan {
        let n = self.at.len();
        let price: Vec<f64> = (0..=self.budget).map(|k| curve.ms(1 + k)).collect();
        // best[i]: (cost of writing output[i..], drafted tokens of the step at i).
        let mut best = vec![(0.0f64, 0usize); n + 1];
        for i in (0..n).rev() {
            // A step at i drafts k tokens and writes k + 1 (the bonus one), so never past
            // the end.
            let most = self.at[i].min(n - i - 1);
            best[i] = (0..=most)
                .map(|k| (price[k] + best[i + k + 1].0, k))
                .fold((f64::INFINITY, 0), |a, b| if b.0 < a.0 { b } else { a });
        }
        let mut steps_by_size = vec![0; self.budget + 1];
        let mut i = 0;
        while i < n {
            let k = best[i].1;
            steps_by_size[k] += 1;
            i += k + 1;
        }
        while steps_by_size.len() > 1 && steps_by_size.last() == Some(&0) {
            steps_by_size.pop();
        }
        CopyPlan {
            steps_by_size,
            ms: best[0].0,
        }
    }
}

/// The copy oracle's cheapest plan for an output on a cost curve ([`Copyable::cheapest`]).
#[derive(Clone, Debug, PartialEq)]
pub struct CopyPlan {
    /// `steps_by_size[k]`: steps that verify k drafted (copied) nodes, as a run reports.
    pub steps_by_size: Vec<usize>,
    /// What the plan's forwards cost on the curve.
    pub ms: f64,
}

impl CopyPlan {
    /// Decode steps of the plan.
    pub fn steps(&self) -> usize {
        self.steps_by_size.iter().sum()
    }
}

/// Length of the longest prefix of `want` that occurs in `hay`.
fn longest_prefix_in(want: &[u32], hay: &[u32]) -> usize {
    let mut best = 0;
    for start in 0..hay.len() {
        let n = hay[start..]
            .iter()
            .zip(want)
            .take_while(|(a, b)| a == b)
            .count();
        best = best.max(n);
        if best == want.len() {
            break;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_the_longest_stretch_then_takes_a_bonus_token() {
        // 1 2 3 is in the prompt, 9 is new, then 1 2 is copied from the output so far.
        let reach = |p: &[u32], r: &[Vec<u32>], o: &[u32], b| {
            Copyable::new(p, r, o, b).reach_steps(o.len())
        };
        assert_eq!(reach(&[1, 2, 3], &[], &[1, 2, 3, 9, 1, 2], 8), 2);
        assert_eq!(reach(&[], &[], &[5, 6, 7], 8), 3);
        assert_eq!(reach(&[1, 2, 3, 4], &[], &[1, 2, 3, 4], 2), 2);
        assert_eq!(reach(&[], &[vec![4, 4]], &[4, 4, 4], 8), 1);
    }

    #[test]
    fn the_priced_oracle_copies_only_as_deep_as_pays() {
        // Flat to 4 nodes, then each node costs a whole row: deeper copies never pay.
        let curve =
            CostCurve::from_points(vec![(1, 10.0), (4, 10.0), (8, 50.0), (16, 130.0)]).unwrap();
        let doc: Vec<u32> = (1..=12).collect();
        // The whole output is copyable: steps of 3 drafted tokens (4 nodes at one row's
        // cost) write 4 tokens each.
        let plan = Copyable::new(&[], std::slice::from_ref(&doc), &doc, 32).cheapest(&curve);
        assert_eq!(plan.steps_by_size, vec![0, 0, 0, 3]);
        assert!((plan.ms - 30.0).abs() < 1e-9);
        // Nothing copyable: plain steps.
        let plan = Copyable::new::<Vec<u32>>(&[], &[], &[7, 8, 9], 32).cheapest(&curve);
        assert_eq!(plan.steps_by_size, vec![3]);
        // Never drafts past the output's end: a 2-token output is one step of 1 draft.
        let plan = Copyable::new(&[], &[doc], &[1, 2], 32).cheapest(&curve);
        assert_eq!(plan.steps_by_size, vec![0, 1]);
    }
}
