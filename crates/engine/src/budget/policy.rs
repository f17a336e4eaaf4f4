//! One request's draft-size decision: trimming the drafted tree to what pays.

use specdec_drafters::{Meta, TokenTree};

use super::acceptance::{
    keys, AcceptanceMemories, AcceptanceMemory, Rates, DEPTHS, EVIDENCE, EVIDENCE_PRIOR,
    INHERITED_WEIGHT, PRIOR_WEIGHT, SOURCES,
};
use super::cost::{BatchLoad, CostModel};

/// Steps without drafting before the first probe; each probe that has nothing accepted
/// doubles the wait, up to `PROBE_MAX_EVERY`, so text that never copies (open-ended
/// answers) pays for a probe ever more rarely, while a copy starting is still noticed.
pub(super) const PROBE_EVERY: usize = 8;
pub(super) const PROBE_MAX_EVERY: usize = 64;
pub(super) const PROBE_NODES: usize = 3;

/// Evidence buckets below this one (drafter scores, matches under 16 tokens) are weak
/// evidence; see `BudgetPolicy::weak_evidence_factor`.
const TRUSTED_BUCKETS: usize = 6;

/// Acceptance rates and the trimming decision of one request.
#[derive(Clone, Debug)]
pub struct BudgetPolicy {
    /// [source][evidence][depth][first sibling?]: (accepted, offered), decayed.
    pub(super) rates: Vec<[(f64, f64); 2]>,
    idle_steps: usize,
    /// Idle steps between probes now (see `PROBE_EVERY`).
    probe_every: usize,
    /// The step being verified is a probe.
    probing: bool,
    max_nodes: usize,
}

impl BudgetPolicy {
    /// A policy with no acceptance learned yet (the priors), drafting at most `max_nodes`
    /// nodes per step.
    pub fn new(max_nodes: usize) -> Self {
        BudgetPolicy {
            rates: vec![[(0.0, 0.0); 2]; SOURCES * EVIDENCE * DEPTHS],
            idle_steps: 0,
            probe_every: PROBE_EVERY,
            probing: false,
            max_nodes,
        }
    }

    /// A policy for a new request that starts from the acceptance `learned` over earlier
    /// requests (see [`AcceptanceMemory::learn`]), capped in weight.
    pub fn inheriting(max_nodes: usize, learned: &AcceptanceMemory) -> Self {
        let mut p = Self::new(max_nodes);
        for (mine, prev) in p.rates.iter_mut().zip(&learned.rates) {
            for (m, &(a, o)) in mine.iter_mut().zip(prev) {
                let f = if o > INHERITED_WEIGHT {
                    INHERITED_WEIGHT / o
                } else {
                    1.0
                };
                *m = (a * f, o * f);
            }
        }
        p
    }

    /// The most nodes worth asking the drafter for.
    pub fn cap(&self, remaining: usize) -> usize {
        self.max_nodes.min(remaining.saturating_sub(1))
    }

    /// Acceptance rate of a key: its own evidence, shrunk towards the rate one level up
    /// (or, at the first level, a prior that grows with the branch's score or match
    /// length) with the weight of two observations, so a depth never reached yet inherits
    /// the acceptance seen just above it.
    /// `weak` holds each source's [`BudgetPolicy::weak_evidence_factor`].
    fn rate(&self, k: (usize, usize), weak: &[f64; SOURCES]) -> f64 {
        let (a, o) = self.rates[k.0][k.1];
        let prior = if k.0.is_multiple_of(DEPTHS) {
            let bucket = (k.0 / DEPTHS) % EVIDENCE;
            let source = k.0 / DEPTHS / EVIDENCE;
            if bucket < TRUSTED_BUCKETS {
                EVIDENCE_PRIOR[bucket] * weak[source]
            } else {
                EVIDENCE_PRIOR[bucket]
            }
        } else {
            self.rate((k.0 - 1, k.1), weak)
        };
        (a + PRIOR_WEIGHT * prior) / (o + PRIOR_WEIGHT)
    }

    /// How a source's weak evidence (scores, matches under 16 tokens) has fared at the
    /// first depth, pooled over those buckets, relative to an even prior (at most 1): a
    /// source whose short guesses keep failing in this request starts its other short
    /// guesses pessimistic too, instead of paying for each bucket's optimism anew. Long
    /// matches keep their own prior: their failures are not predicted by these.
    fn weak_evidence_factor(&self, source: usize) -> f64 {
        let (mut a, mut o) = (0.0, 0.0);
        for bucket in 0..TRUSTED_BUCKETS {
            for &(ka, ko) in &self.rates[(source * EVIDENCE + bucket) * DEPTHS] {
                a += ka;
                o += ko;
            }
        }
        // Worth a few observations more than one key's prior: a handful of misses says
        // little about the source's other guesses, a request's worth of them does.
        let weight = 2.0 * PRIOR_WEIGHT;
        let pooled = (a + weight * 0.5) / (o + weight);
        (pooled / 0.5).min(1.0)
    }

    /// Keeps the part of `tree` worth verifying (possibly nothing) and adds the step to
    /// `load`. Alone, that maximizes this request's tokens per cost; in a batch, the
    /// batch's: `(load.expected + 1 + E) / cost(load.rows + 1 + k)`, so a draft that pays
    /// alone can be dropped when other rows already fill the forward.
    ///
    /// At most `limit` drafted nodes are kept (and never more than the request's cap).
    /// `tree` is rooted (node 0 the pending token); the root is always kept, and the kept
    /// drafted nodes stay in their order, renumbered.
    pub fn trim(
        &mut self,
        mut tree: TokenTree,
        limit: usize,
        ctx: usize,
        cost: &CostModel,
        load: &mut BatchLoad,
    ) -> TokenTree {
        if tree.drafted() == 0 {
            load.add(0, ctx, 0.0);
            return tree;
        }
        // The root is reached for sure.
        let mut reach = vec![1f64; tree.len()];
        let keys = keys(&tree);
        // Once per step, not once per node.
        let weak: [f64; SOURCES] = std::array::from_fn(|s| self.weak_evidence_factor(s));
        let meta = tree.meta();
        for i in 1..tree.len() {
            let p = tree.parent(i);
            let parent = p.map_or(1.0, |p| reach[p]);
            reach[i] = parent * model_rate(meta, i, p).unwrap_or_else(|| self.rate(keys[i], &weak));
        }
        // Drafted nodes best first; a parent's reach is never below its child's, and ties
        // keep DFS order, so every prefix of this order is a connected subtree.
        let mut order: Vec<usize> = (1..tree.len()).collect();
        order.sort_by(|&a, &b| reach[b].total_cmp(&reach[a]).then(a.cmp(&b)));
        let base = load.expected + 1.0;
        let batch_ctx = (load.ctx_sum + ctx) / (load.rows + 1);
        let (mut best_k, mut best_rate) = (0, base / cost.relative(load.rows + 1, batch_ctx));
        let mut expected = 0.0;
        let limit = limit.min(self.max_nodes);
        for (k, &i) in order.iter().enumerate().take(limit) {
            expected += reach[i];
            let rate = (base + expected) / cost.relative(load.rows + k + 2, batch_ctx);
            if rate > best_rate * 1.01 {
                (best_k, best_rate) = (k + 1, rate);
            }
        }
        self.probing = false;
        if best_k == 0 {
            self.idle_steps += 1;
            if self.idle_steps < self.probe_every {
                load.add(0, ctx, 0.0);
                tree.truncate(1);
                return tree;
            }
            self.idle_steps = 0;
            self.probing = true;
            best_k = PROBE_NODES.min(tree.drafted()).min(limit);
        } else {
            self.idle_steps = 0;
            self.probe_every = PROBE_EVERY;
        }
        load.add(best_k, ctx, order[..best_k].iter().map(|&i| reach[i]).sum());
        if best_k == tree.drafted() {
            return tree;
        }
        let mut keep = vec![false; tree.len()];
        keep[0] = true;
        order[..best_k].iter().for_each(|&i| keep[i] = true);
        tree.select(&keep)
    }

    /// Learns from a verified rooted tree: every drafted node whose parent was accepted
    /// (or is the root) was offered; those on `accepted` (the verdict's node indices) were
    /// accepted.
    pub fn observe(&mut self, tree: &TokenTree, accepted: &[usize]) {
        if tree.drafted() == 0 {
            return;
        }
        if std::mem::take(&mut self.probing) {
            self.probe_every = if accepted.is_empty() {
                (self.probe_every * 2).min(PROBE_MAX_EVERY)
            } else {
                PROBE_EVERY
            };
        }
        let mut on_path = vec![false; tree.len()];
        on_path[0] = true;
        accepted.iter().for_each(|&i| on_path[i] = true);
        let keys = keys(tree);
        for (i, &k) in keys.iter().enumerate().skip(1) {
            let offered = tree.parent(i).is_none_or(|p| on_path[p]);
            if offered {
                let (a, o) = &mut self.rates[k.0][k.1];
                // Decay old evidence so the policy follows the text.
                *a = 0.95 * *a + f64::from(u8::from(on_path[i]));
                *o = 0.95 * *o + 1.0;
            }
        }
    }
}

/// A draft model's node carries its own estimate: its score is the draft's calibrated
/// probability of reaching it (see `ModelDrafter`), per node, which predicts acceptance
/// better than a rate per depth. The conditional rate given its parent, if the draft model
/// proposed it (in a mix, a node other sources proposed too keeps the draft's
/// log-probability, and its score is at least the draft's).
fn model_rate(meta: &[Meta], i: usize, parent: Option<usize>) -> Option<f64> {
    let m = &meta[i];
    m.logprob?;
    let above = match parent {
        Some(p) if p > 0 && meta[p].logprob.is_some() => f64::from(meta[p].score),
        _ => 1.0,
    };
    Some((f64::from(m.score) / above.max(1e-6)).clamp(0.0, 1.0))
}

impl AsRef<Rates> for BudgetPolicy {
    fn as_ref(&self) -> &Rates {
        &self.rates
    }
}

impl AcceptanceMemories {
    /// A policy for a new request drafted by `drafter`, from what earlier requests with
    /// that drafter learned.
    pub fn policy(&self, drafter: &str, max_nodes: usize) -> BudgetPolicy {
        match self.memory(drafter) {
            Some(m) => BudgetPolicy::inheriting(max_nodes, m),
            None => BudgetPolicy::new(max_nodes),
        }
    }
}
