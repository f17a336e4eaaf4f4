//! Adaptive draft size.
//!
//! Each step the engine picks the draft budget B that maximizes expected tokens per
//! millisecond, (1 + E[accepted | B]) / cost(1 + B). The cost curve is learned online from
//! the verify forwards actually timed (seeded with a prior shaped like the measured curve);
//! acceptance is tracked per depth. When drafting is not expected to pay, B = 0 and the
//! step is plain decoding, with an occasional cheap probe so a change in the text (a
//! copied passage starting) is noticed.

const CANDIDATES: [usize; 11] = [0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32];
const MAX_DEPTH: usize = 32;
const MAX_NODES: usize = 128;
/// Steps without drafting between probes.
const PROBE_EVERY: usize = 8;
const PROBE_BUDGET: usize = 3;

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

/// The shape measured for this runtime (about 2x at 16 nodes), used until observed.
fn prior(n: usize) -> f64 {
    1.0 + 0.065 * (n as f64 - 1.0)
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

/// Per-request acceptance by depth and the budget decision.
#[derive(Clone, Debug)]
pub struct BudgetPolicy {
    /// reached[d]: drafts that offered depth d+1 when depth d was accepted.
    offered: [f64; MAX_DEPTH],
    accepted: [f64; MAX_DEPTH],
    idle_steps: usize,
    max_budget: usize,
}

impl BudgetPolicy {
    pub fn new(max_budget: usize) -> Self {
        // An optimistic prior (60% per depth, worth 2 observations) lets drafting start.
        BudgetPolicy {
            offered: [2.0; MAX_DEPTH],
            accepted: [1.2; MAX_DEPTH],
            idle_steps: 0,
            max_budget,
        }
    }

    fn p(&self, d: usize) -> f64 {
        self.accepted[d] / self.offered[d]
    }

    /// Expected accepted tokens of a chain-like draft of `budget` nodes.
    fn expected(&self, budget: usize) -> f64 {
        let (mut e, mut reach) = (0.0, 1.0);
        for d in 0..budget.min(MAX_DEPTH) {
            reach *= self.p(d);
            e += reach;
        }
        e
    }

    /// The budget for the next step, never above `remaining - 1` (tokens still wanted
    /// beyond the bonus).
    pub fn choose(&mut self, cost: &CostModel, remaining: usize) -> usize {
        let cap = self.max_budget.min(remaining.saturating_sub(1));
        let mut best = (1.0 / cost.relative(1), 0);
        for &b in CANDIDATES.iter().filter(|&&b| b > 0 && b <= cap) {
            let rate = (1.0 + self.expected(b)) / cost.relative(1 + b);
            if rate > best.0 * 1.02 {
                best = (rate, b);
            }
        }
        if best.1 == 0 {
            self.idle_steps += 1;
            if self.idle_steps.is_multiple_of(PROBE_EVERY) {
                return PROBE_BUDGET.min(cap);
            }
        } else {
            self.idle_steps = 0;
        }
        best.1
    }

    /// Records a verified draft: `max_depth` the deepest drafted node, `accepted` how many
    /// were accepted (a path, so depths 1..=accepted).
    pub fn observe(&mut self, max_depth: usize, accepted: usize) {
        for d in 0..max_depth.min(MAX_DEPTH) {
            if d > accepted {
                break;
            }
            // Decay old evidence so the policy follows the text.
            self.offered[d] = 0.9 * self.offered[d] + 1.0;
            self.accepted[d] = 0.9 * self.accepted[d] + if d < accepted { 1.0 } else { 0.0 };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poor_acceptance_turns_drafting_off_and_good_acceptance_on() {
        let cost = CostModel::default();
        let mut p = BudgetPolicy::new(32);
        for _ in 0..50 {
            p.observe(8, 0);
        }
        assert_eq!(p.choose(&cost, 100), 0);
        for _ in 0..50 {
            p.observe(16, 16);
        }
        assert!(p.choose(&cost, 100) >= 8);
        assert!(p.choose(&cost, 3) <= 2, "never drafts past what is wanted");
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
