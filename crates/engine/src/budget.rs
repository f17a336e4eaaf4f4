//! Adaptive draft size.
//!
//! The drafter proposes a tree up to the request's node cap (drafted nodes below the
//! pending token, the tree's root); the engine keeps the subtree that maximizes expected
//! tokens per unit of verify cost, `(1 + E[accepted]) / cost(1 + k)`.
//! E[accepted] sums each kept node's probability of being accepted: the product, along its
//! path, of acceptance rates learned online per (source, confidence of the branch, depth,
//! first-or-later sibling).
//! The cost curve is learned from the verify forwards actually timed. When no draft is
//! expected to pay, nothing is drafted and the step is plain decoding, with an occasional
//! small probe so a change in the text (a copied passage starting) is noticed.

use specdec_drafters::{Source, TokenTree};

/// Largest forward (rows, all sequences of a batch) the cost curve tracks.
const MAX_NODES: usize = 512;
const DEPTHS: usize = 16;
const SOURCES: usize = 7;
/// Buckets of the drafter's score of a branch's first node.
const CONFIDENCES: usize = 4;
/// Steps without drafting between probes.
const PROBE_EVERY: usize = 8;
const PROBE_NODES: usize = 3;
/// Observations' worth of the prior behind every acceptance rate.
const PRIOR_WEIGHT: f64 = 2.0;
/// At most this many observations' worth of earlier requests' evidence starts a request,
/// so it begins informed yet adapts to its own text within a few steps.
const INHERITED_WEIGHT: f64 = 6.0;

/// Context lengths separating the cost curves: attention makes every extra row cost
/// more the longer the context it attends to.
const CTX_EDGES: [usize; 4] = [256, 512, 1024, 2048];
const CTX_BUCKETS: usize = CTX_EDGES.len() + 1;

fn ctx_bucket(ctx: usize) -> usize {
    CTX_EDGES.iter().take_while(|&&e| ctx >= e).count()
}

/// Forward cost by row count and context length, learned from timed forwards.
#[derive(Clone, Debug)]
pub struct CostModel {
    /// EMA of milliseconds per forward over n rows (index n) per context bucket, `None`
    /// until observed.
    ms: Vec<[Option<f64>; CTX_BUCKETS]>,
    /// Per context bucket, how far the observed ratios depart from the prior on average
    /// (1.0 until observed). Kept up to date by `observe`, because `relative` is asked
    /// for every candidate draft size of every step.
    scale: [f64; CTX_BUCKETS],
}

impl Default for CostModel {
    fn default() -> Self {
        CostModel {
            ms: vec![[None; CTX_BUCKETS]; MAX_NODES + 1],
            scale: [1.0; CTX_BUCKETS],
        }
    }
}

/// The shape measured for this runtime until observed: each extra row costs about 13% of
/// a one-row forward at short context and more at long context (21% at 1000 tokens).
fn prior(n: usize, bucket: usize) -> f64 {
    let ctx = [128.0, 384.0, 768.0, 1536.0, 3072.0][bucket];
    1.0 + (0.12 + 0.0001 * ctx) * (n as f64 - 1.0)
}

impl CostModel {
    /// Records one forward over `rows` rows attending to `ctx` tokens on average that
    /// took `ms`.
    pub fn observe(&mut self, rows: usize, ctx: usize, ms: f64) {
        let b = ctx_bucket(ctx);
        if let Some(e) = self.ms.get_mut(rows) {
            let e = &mut e[b];
            *e = Some(e.map_or(ms, |old| 0.8 * old + 0.2 * ms));
        }
        self.scale[b] = self.base(b).map_or(1.0, |base| {
            let (mut sum, mut count) = (0.0, 0.0);
            for (n, m) in self.ms.iter().enumerate().skip(2) {
                if let Some(m) = m[b] {
                    sum += (m / base) / prior(n, b);
                    count += 1.0;
                }
            }
            if count > 0.0 {
                sum / count
            } else {
                1.0
            }
        });
    }

    /// The one-row forward's cost in context bucket `b`, once observed.
    fn base(&self, b: usize) -> Option<f64> {
        self.ms[1][b].filter(|&m| m > 0.0)
    }

    /// Relative cost of a forward over `rows` rows at context `ctx` (1.0 at one row): the
    /// observed ratio where known, else the prior scaled by how far this context's
    /// observations depart from it.
    pub fn relative(&self, rows: usize, ctx: usize) -> f64 {
        let rows = rows.clamp(1, MAX_NODES);
        let b = ctx_bucket(ctx);
        let Some(base) = self.base(b) else {
            return prior(rows, b);
        };
        if let Some(m) = self.ms[rows][b] {
            return (m / base).max(1.0);
        }
        (prior(rows, b) * self.scale[b]).max(1.0)
    }
}

/// What the members of a batch planned so far put in the next forward.
#[derive(Clone, Copy, Debug, Default)]
pub struct BatchLoad {
    /// Rows of the forward.
    pub rows: usize,
    /// Context lengths the rows attend to, summed.
    pub ctx_sum: usize,
    /// Tokens those rows are expected to emit.
    pub expected: f64,
}

impl BatchLoad {
    /// One decode step at context `ctx`: its pending token plus `nodes` draft nodes.
    pub fn add(&mut self, nodes: usize, ctx: usize, expected: f64) {
        self.rows += 1 + nodes;
        self.ctx_sum += (1 + nodes) * ctx;
        self.expected += 1.0 + expected;
    }

    /// Mean context per row.
    pub fn mean_ctx(&self) -> usize {
        self.ctx_sum / self.rows.max(1)
    }
}

fn source_index(s: Source) -> usize {
    match s {
        Source::Reference => 0,
        Source::Prompt => 1,
        Source::Output => 2,
        Source::Trie => 3,
        Source::Suffix => 4,
        Source::Model => 5,
        // Never drafted (the root is not keyed); a slot of its own all the same.
        Source::Root => 6,
    }
}

fn confidence_bucket(score: f32) -> usize {
    match score {
        s if s < 0.4 => 0,
        s if s < 0.6 => 1,
        s if s < 0.8 => 2,
        _ => 3,
    }
}

/// Every drafted node's rate key, indexed by node (the root's entry is unused), in one
/// pass over the DFS-ordered rooted tree: (source, confidence of its branch (the score of
/// its depth-1 ancestor), depth) row, and whether it is its parent's first child (the
/// lowest index among its siblings).
fn keys(tree: &TokenTree) -> Vec<(usize, usize)> {
    let n = tree.len();
    let depth = tree.depths();
    let meta = tree.meta();
    let mut branch_score = vec![0f32; n];
    let mut has_first = vec![false; n];
    let mut keys = vec![(0, 0); n];
    for i in 1..n {
        let p = tree.parent(i).unwrap_or(0);
        let r = if p == 0 {
            meta[i].score
        } else {
            branch_score[p]
        };
        branch_score[i] = r;
        let first = !std::mem::replace(&mut has_first[p], true);
        let row = source_index(meta[i].source) * CONFIDENCES + confidence_bucket(r);
        let d = depth[i].max(1);
        keys[i] = (row * DEPTHS + (d - 1).min(DEPTHS - 1), usize::from(!first));
    }
    keys
}

/// Acceptance evidence carried across requests (engine-wide): each finished request's
/// final rates are blended in, and new requests start from them.
#[derive(Clone, Debug)]
pub struct AcceptanceMemory {
    rates: Vec<[(f64, f64); 2]>,
}

impl Default for AcceptanceMemory {
    fn default() -> Self {
        AcceptanceMemory {
            rates: vec![[(0.0, 0.0); 2]; SOURCES * CONFIDENCES * DEPTHS],
        }
    }
}

impl AcceptanceMemory {
    /// Blends a finished request's rates in (equal weight to all before it, so the
    /// memory follows the workload as it changes).
    pub fn learn(&mut self, finished: &BudgetPolicy) {
        for (mem, req) in self.rates.iter_mut().zip(&finished.rates) {
            for (m, &(a, o)) in mem.iter_mut().zip(req) {
                *m = (0.5 * (m.0 + a), 0.5 * (m.1 + o));
            }
        }
    }
}

/// One [`AcceptanceMemory`] per drafter (by name): the same source's drafts are accepted
/// at different rates under different drafters (a prompt copy alone, or merged with other
/// sources in `auto`'s tree), so requests inherit only from requests drafted the same way.
#[derive(Debug, Default)]
pub struct AcceptanceMemories {
    by_drafter: Vec<(&'static str, AcceptanceMemory)>,
}

impl AcceptanceMemories {
    /// A policy for a new request drafted by `drafter`, from what earlier requests with
    /// that drafter learned.
    pub fn policy(&self, drafter: &str, max_nodes: usize) -> BudgetPolicy {
        match self.by_drafter.iter().find(|(n, _)| *n == drafter) {
            Some((_, m)) => BudgetPolicy::inheriting(max_nodes, m),
            None => BudgetPolicy::new(max_nodes),
        }
    }

    /// Blends a finished request's rates into its drafter's memory.
    pub fn learn(&mut self, drafter: &'static str, finished: &BudgetPolicy) {
        let i = match self.by_drafter.iter().position(|(n, _)| *n == drafter) {
            Some(i) => i,
            None => {
                self.by_drafter.push((drafter, AcceptanceMemory::default()));
                self.by_drafter.len() - 1
            }
        };
        self.by_drafter[i].1.learn(finished);
    }
}

/// Acceptance rates and the trimming decision of one request.
#[derive(Clone, Debug)]
pub struct BudgetPolicy {
    /// [source][confidence][depth][first sibling?]: (accepted, offered), decayed.
    rates: Vec<[(f64, f64); 2]>,
    idle_steps: usize,
    max_nodes: usize,
}

impl BudgetPolicy {
    pub fn new(max_nodes: usize) -> Self {
        BudgetPolicy {
            rates: vec![[(0.0, 0.0); 2]; SOURCES * CONFIDENCES * DEPTHS],
            idle_steps: 0,
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
    /// (or, at the first level, a prior that grows with the branch's confidence) with the
    /// weight of two observations, so a depth never reached yet inherits the acceptance
    /// seen just above it.
    fn rate(&self, k: (usize, usize)) -> f64 {
        let (a, o) = self.rates[k.0][k.1];
        let prior = if k.0.is_multiple_of(DEPTHS) {
            // Before evidence, trust stronger matches more.
            [0.3, 0.45, 0.6, 0.75][(k.0 / DEPTHS) % CONFIDENCES]
        } else {
            self.rate((k.0 - 1, k.1))
        };
        (a + PRIOR_WEIGHT * prior) / (o + PRIOR_WEIGHT)
    }

    /// Keeps the part of `tree` worth verifying (possibly nothing) and adds the step to
    /// `load`. Alone, that maximizes this request's tokens per cost; in a batch, the
    /// batch's: `(load.expected + 1 + E) / cost(load.rows + 1 + k)`, so a draft that pays
    /// alone can be dropped when other rows already fill the forward.
    ///
    /// `tree` is rooted (node 0 the pending token); the root is always kept, and the kept
    /// drafted nodes stay in their order, renumbered.
    pub fn trim(
        &mut self,
        mut tree: TokenTree,
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
        for i in 1..tree.len() {
            let parent = tree.parent(i).map_or(1.0, |p| reach[p]);
            reach[i] = parent * self.rate(keys[i]);
        }
        // Drafted nodes best first; a parent's reach is never below its child's, and ties
        // keep DFS order, so every prefix of this order is a connected subtree.
        let mut order: Vec<usize> = (1..tree.len()).collect();
        order.sort_by(|&a, &b| reach[b].total_cmp(&reach[a]).then(a.cmp(&b)));
        let base = load.expected + 1.0;
        let batch_ctx = (load.ctx_sum + ctx) / (load.rows + 1);
        let (mut best_k, mut best_rate) = (0, base / cost.relative(load.rows + 1, batch_ctx));
        let mut expected = 0.0;
        for (k, &i) in order.iter().enumerate().take(self.max_nodes) {
            expected += reach[i];
            let rate = (base + expected) / cost.relative(load.rows + k + 2, batch_ctx);
            if rate > best_rate * 1.01 {
                (best_k, best_rate) = (k + 1, rate);
            }
        }
        if best_k == 0 {
            self.idle_steps += 1;
            if !self.idle_steps.is_multiple_of(PROBE_EVERY) {
                load.add(0, ctx, 0.0);
                tree.truncate(1);
                return tree;
            }
            best_k = PROBE_NODES.min(tree.drafted());
        } else {
            self.idle_steps = 0;
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

#[cfg(test)]
mod tests {
    use super::*;
    use specdec_drafters::Meta;

    /// The pending token with a chain of `n` drafted nodes below it.
    fn chain(n: usize) -> TokenTree {
        let mut t = TokenTree::rooted(u32::MAX);
        for i in 0..n {
            t.push(
                i as u32,
                Some(i as u32),
                Meta::drafted(Source::Reference, 0.5),
            );
        }
        t
    }

    /// The drafted nodes of `chain(n)` on the accepted path, in the tree's numbering.
    fn first(n: usize) -> Vec<usize> {
        (1..=n).collect()
    }

    #[test]
    fn poor_acceptance_turns_drafting_off_and_good_acceptance_on() {
        let cost = CostModel::default();
        let mut p = BudgetPolicy::new(32);
        for _ in 0..60 {
            p.observe(&chain(8), &[]);
        }
        let kept: Vec<usize> = (0..PROBE_EVERY)
            .map(|_| {
                p.trim(chain(8), 100, &cost, &mut BatchLoad::default())
                    .drafted()
            })
            .collect();
        assert!(
            kept.iter().filter(|&&k| k == 0).count() >= PROBE_EVERY - 1,
            "{kept:?}"
        );
        for _ in 0..60 {
            p.observe(&chain(16), &first(16));
        }
        assert!(
            p.trim(chain(16), 100, &cost, &mut BatchLoad::default())
                .drafted()
                >= 8
        );
    }

    #[test]
    fn trimming_keeps_a_connected_prefix_in_dfs_order() {
        let mut p = BudgetPolicy::new(32);
        for _ in 0..30 {
            p.observe(&chain(4), &first(2));
        }
        let t = p.trim(
            chain(12),
            100,
            &CostModel::default(),
            &mut BatchLoad::default(),
        );
        assert!(t.drafted() > 0 && t.drafted() < 12);
        for (i, n) in t.nodes().iter().enumerate() {
            assert_eq!(n.parent, i.checked_sub(1).map(|p| p as u32));
        }
    }

    #[test]
    fn a_new_request_inherits_earlier_acceptance_with_bounded_weight() {
        let mut done = BudgetPolicy::new(32);
        for _ in 0..60 {
            done.observe(&chain(16), &first(16));
        }
        let mut memory = AcceptanceMemory::default();
        memory.learn(&done);
        let cost = CostModel::default();
        let fresh = BudgetPolicy::new(32).trim(chain(16), 100, &cost, &mut BatchLoad::default());
        let mut informed = BudgetPolicy::inheriting(32, &memory);
        let kept = informed.trim(chain(16), 100, &cost, &mut BatchLoad::default());
        assert!(
            kept.drafted() > fresh.drafted(),
            "{} vs {}",
            kept.drafted(),
            fresh.drafted()
        );
        // Bounded: the request's own rejections soon turn drafting off.
        for _ in 0..40 {
            informed.observe(&chain(8), &[]);
        }
        let after = informed.trim(chain(16), 100, &cost, &mut BatchLoad::default());
        assert!(after.drafted() <= PROBE_NODES, "{} nodes", after.drafted());
    }

    #[test]
    fn requests_inherit_only_from_their_own_drafter() {
        let mut rejected = BudgetPolicy::new(32);
        for _ in 0..60 {
            rejected.observe(&chain(8), &[]);
        }
        let mut memories = AcceptanceMemories::default();
        memories.learn("prompt", &rejected);
        let cost = CostModel::default();
        let kept = |mut p: BudgetPolicy| {
            p.trim(chain(16), 100, &cost, &mut BatchLoad::default())
                .drafted()
        };
        let fresh = kept(BudgetPolicy::new(32));
        assert_eq!(kept(memories.policy("auto", 32)), fresh);
        assert!(kept(memories.policy("prompt", 32)) < fresh);
    }

    #[test]
    fn learned_costs_shape_the_curve() {
        let mut c = CostModel::default();
        c.observe(1, 100, 5.0);
        c.observe(16, 100, 50.0);
        assert!((c.relative(16, 100) - 10.0).abs() < 1e-9);
        assert!(c.relative(12, 100) > c.relative(8, 100));
        // Another context length has its own curve.
        assert!(c.relative(16, 1500) < 10.0);
        assert!(CostModel::default().relative(16, 1500) > CostModel::default().relative(16, 100));
    }
}
