//! Adaptive draft size.
//!
//! The drafter proposes a tree up to the request's node cap; the engine keeps the subtree
//! that maximizes expected tokens per unit of verify cost, `(1 + E[accepted]) / cost(1 + k)`.
//! E[accepted] sums each kept node's probability of being accepted: the product, along its
//! path, of acceptance rates learned online per (source, depth, first-or-later sibling).
//! The cost curve is learned from the verify forwards actually timed. When no draft is
//! expected to pay, nothing is drafted and the step is plain decoding, with an occasional
//! small probe so a change in the text (a copied passage starting) is noticed.

use specdec_drafters::{DraftTree, Source};

/// Largest forward (rows, all sequences of a batch) the cost curve tracks.
const MAX_NODES: usize = 512;
const DEPTHS: usize = 16;
const SOURCES: usize = 5;
/// Steps without drafting between probes.
const PROBE_EVERY: usize = 8;
const PROBE_NODES: usize = 3;
/// Observations' worth of the prior behind every acceptance rate.
const PRIOR_WEIGHT: f64 = 2.0;

/// Forward cost by node count, learned from timed forwards.
#[derive(Clone, Debug)]
pub struct CostModel {
    /// EMA of milliseconds per forward over n nodes (index n), `None` until observed.
    ms: Vec<Option<f64>>,
}

impl Default for CostModel {
    fn default() -> Self {
        CostModel {
            ms: vec![None; MAX_NODES + 1],
        }
    }
}

/// The shape measured for this runtime (about 3x at 16 nodes), used until observed.
fn prior(n: usize) -> f64 {
    1.0 + 0.13 * (n as f64 - 1.0)
}

impl CostModel {
    /// Records one forward over `nodes` nodes that took `ms`.
    pub fn observe(&mut self, nodes: usize, ms: f64) {
        if let Some(e) = self.ms.get_mut(nodes) {
            *e = Some(e.map_or(ms, |old| 0.8 * old + 0.2 * ms));
        }
    }

    /// Relative cost of a forward over `nodes` nodes (1.0 at one node): the observed
    /// ratio where known, else the prior scaled by how far observations depart from it.
    pub fn relative(&self, nodes: usize) -> f64 {
        let nodes = nodes.clamp(1, MAX_NODES);
        let Some(base) = self.ms[1].filter(|&b| b > 0.0) else {
            return prior(nodes);
        };
        if let Some(m) = self.ms[nodes] {
            return (m / base).max(1.0);
        }
        let (mut sum, mut count) = (0.0, 0.0);
        for (n, m) in self.ms.iter().enumerate().skip(2) {
            if let Some(m) = m {
                sum += (m / base) / prior(n);
                count += 1.0;
            }
        }
        let scale = if count > 0.0 { sum / count } else { 1.0 };
        (prior(nodes) * scale).max(1.0)
    }
}

/// What the members of a batch planned so far put in the next forward.
#[derive(Clone, Copy, Debug, Default)]
pub struct BatchLoad {
    /// Rows of the forward.
    pub rows: usize,
    /// Tokens those rows are expected to emit.
    pub expected: f64,
}

impl BatchLoad {
    /// One decode step: its pending token plus `nodes` draft nodes.
    pub fn add(&mut self, nodes: usize, expected: f64) {
        self.rows += 1 + nodes;
        self.expected += 1.0 + expected;
    }
}

fn source_index(s: Source) -> usize {
    match s {
        Source::Reference => 0,
        Source::Prompt => 1,
        Source::Output => 2,
        Source::Trie => 3,
        Source::Suffix => 4,
    }
}

/// Acceptance rates and the trimming decision of one request.
#[derive(Clone, Debug)]
pub struct BudgetPolicy {
    /// [source][depth][first sibling?]: (accepted, offered), decayed.
    rates: Vec<[(f64, f64); 2]>,
    idle_steps: usize,
    max_nodes: usize,
}

impl BudgetPolicy {
    pub fn new(max_nodes: usize) -> Self {
        BudgetPolicy {
            rates: vec![[(0.0, 0.0); 2]; SOURCES * DEPTHS],
            idle_steps: 0,
            max_nodes,
        }
    }

    /// The most nodes worth asking the drafter for.
    pub fn cap(&self, remaining: usize) -> usize {
        self.max_nodes.min(remaining.saturating_sub(1))
    }

    fn key(tree: &DraftTree, i: usize, depth: usize) -> (usize, usize) {
        let n = &tree.nodes[i];
        let first = tree.children(n.parent).next() == Some(i);
        (
            source_index(n.source) * DEPTHS + (depth - 1).min(DEPTHS - 1),
            usize::from(!first),
        )
    }

    /// Acceptance rate of a key: its own evidence, shrunk towards the rate one level up
    /// (or 50% at the first level) with the weight of two observations, so a depth never
    /// reached yet inherits the acceptance seen just above it.
    fn rate(&self, k: (usize, usize)) -> f64 {
        let (a, o) = self.rates[k.0][k.1];
        let prior = if k.0.is_multiple_of(DEPTHS) {
            0.5
        } else {
            self.rate((k.0 - 1, k.1))
        };
        (a + PRIOR_WEIGHT * prior) / (o + PRIOR_WEIGHT)
    }

    /// Keeps the part of `tree` worth verifying (possibly nothing) and adds the step to
    /// `load`. Alone, that maximizes this request's tokens per cost; in a batch, the
    /// batch's: `(load.expected + 1 + E) / cost(load.rows + 1 + k)`, so a draft that pays
    /// alone can be dropped when other rows already fill the forward.
    pub fn trim(&mut self, tree: DraftTree, cost: &CostModel, load: &mut BatchLoad) -> DraftTree {
        if tree.is_empty() {
            load.add(0, 0.0);
            return tree;
        }
        let depths = tree.depths();
        let mut reach = vec![0f64; tree.len()];
        for i in 0..tree.len() {
            let parent = tree.nodes[i].parent.map_or(1.0, |p| reach[p as usize]);
            reach[i] = parent * self.rate(Self::key(&tree, i, depths[i]));
        }
        // Best first; a parent's reach is never below its child's, and ties keep DFS
        // order, so every prefix of this order is a connected subtree.
        let mut order: Vec<usize> = (0..tree.len()).collect();
        order.sort_by(|&a, &b| reach[b].total_cmp(&reach[a]).then(a.cmp(&b)));
        let base = load.expected + 1.0;
        let (mut best_k, mut best_rate) = (0, base / cost.relative(load.rows + 1));
        let mut expected = 0.0;
        for (k, &i) in order.iter().enumerate().take(self.max_nodes) {
            expected += reach[i];
            let rate = (base + expected) / cost.relative(load.rows + k + 2);
            if rate > best_rate * 1.01 {
                (best_k, best_rate) = (k + 1, rate);
            }
        }
        if best_k == 0 {
            self.idle_steps += 1;
            if !self.idle_steps.is_multiple_of(PROBE_EVERY) {
                load.add(0, 0.0);
                return DraftTree::default();
            }
            best_k = PROBE_NODES.min(tree.len());
        } else {
            self.idle_steps = 0;
        }
        load.add(best_k, order[..best_k].iter().map(|&i| reach[i]).sum());
        let mut keep = vec![false; tree.len()];
        order[..best_k].iter().for_each(|&i| keep[i] = true);
        let mut new_index = vec![u32::MAX; tree.len()];
        let mut nodes = Vec::with_capacity(best_k);
        for (i, n) in tree.nodes.iter().enumerate() {
            if keep[i] {
                new_index[i] = nodes.len() as u32;
                let mut n = *n;
                n.parent = n.parent.map(|p| new_index[p as usize]);
                nodes.push(n);
            }
        }
        DraftTree { nodes }
    }

    /// Learns from a verified tree: every node whose parent was accepted (or that hung
    /// from the context) was offered; those on `accepted` (draft indices) were accepted.
    pub fn observe(&mut self, tree: &DraftTree, accepted: &[usize]) {
        let depths = tree.depths();
        let mut on_path = vec![false; tree.len()];
        accepted.iter().for_each(|&i| on_path[i] = true);
        for i in 0..tree.len() {
            let offered = tree.nodes[i].parent.is_none_or(|p| on_path[p as usize]);
            if offered {
                let k = Self::key(tree, i, depths[i]);
                let (a, o) = &mut self.rates[k.0][k.1];
                // Decay old evidence so the policy follows the text.
                *a = 0.95 * *a + f64::from(u8::from(on_path[i]));
                *o = 0.95 * *o + 1.0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use specdec_drafters::DraftNode;

    fn chain(n: usize) -> DraftTree {
        DraftTree {
            nodes: (0..n)
                .map(|i| DraftNode {
                    token: i as u32,
                    parent: i.checked_sub(1).map(|p| p as u32),
                    source: Source::Reference,
                    score: 0.5,
                })
                .collect(),
        }
    }

    #[test]
    fn poor_acceptance_turns_drafting_off_and_good_acceptance_on() {
        let cost = CostModel::default();
        let mut p = BudgetPolicy::new(32);
        for _ in 0..60 {
            p.observe(&chain(8), &[]);
        }
        let kept: Vec<usize> = (0..PROBE_EVERY)
            .map(|_| p.trim(chain(8), &cost, &mut BatchLoad::default()).len())
            .collect();
        assert!(
            kept.iter().filter(|&&k| k == 0).count() >= PROBE_EVERY - 1,
            "{kept:?}"
        );
        for _ in 0..60 {
            p.observe(&chain(16), &(0..16).collect::<Vec<_>>());
        }
        assert!(p.trim(chain(16), &cost, &mut BatchLoad::default()).len() >= 8);
    }

    #[test]
    fn trimming_keeps_a_connected_prefix_in_dfs_order() {
        let mut p = BudgetPolicy::new(32);
        for _ in 0..30 {
            p.observe(&chain(4), &[0, 1]);
        }
        let t = p.trim(chain(12), &CostModel::default(), &mut BatchLoad::default());
        assert!(!t.is_empty() && t.len() < 12);
        for (i, n) in t.nodes.iter().enumerate() {
            assert_eq!(n.parent, i.checked_sub(1).map(|p| p as u32));
        }
    }

    #[test]
    fn learned_costs_shape_the_curve() {
        let mut c = CostModel::default();
        c.observe(1, 5.0);
        c.observe(16, 50.0);
        assert!((c.relative(16) - 10.0).abs() < 1e-9);
        assert!(c.relative(12) > c.relative(8));
    }
}
