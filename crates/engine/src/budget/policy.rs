//! One request's draft-size decision: trimming the drafted tree to what pays.

use specdec_drafters::{Meta, Source, TokenTree};

use super::acceptance::{
    keys, AcceptanceMemories, AcceptanceMemory, Rates, DEPTHS, EVIDENCE, EVIDENCE_PRIOR,
    INHERITED_WEIGHT, PRIOR_WEIGHT, SOURCES, UNAMBIGUOUS,
};
use super::cost::CostModel;

/// Steps without drafting before the first probe; each probe that has nothing accepted
/// doubles the wait, up to `PROBE_MAX_EVERY`, so text that never copies (open-ended
/// answers) pays for a probe ever more rarely, while a copy starting is still noticed.
pub(super) const PROBE_EVERY: usize = 8;
pub(super) const PROBE_MAX_EVERY: usize = 64;
pub(super) const PROBE_NODES: usize = 3;

/// Evidence buckets below this one (drafter scores, matches under 16 tokens) are weak
/// evidence; see `BudgetPolicy::weak_evidence_factor`. `UNAMBIGUOUS` is neither: its
/// prior is its own (the ambiguous guesses failing says little of it), yet a young request
/// does not verify it unlearned (see `weak_branch`).
const TRUSTED_BUCKETS: usize = 6;
/// The evidence bucket of drafter scores of 0.8 and more (see `evidence_bucket`).
const CONFIDENT_SCORE_BUCKET: usize = 3;

/// A request's first decode steps verify only strong evidence: references (the caller's
/// prediction of the output), copies after a match of 16 tokens or more, a drafter's
/// confident guesses (a score of 0.8 or more: a trie path most earlier texts took), and
/// weaker guesses whose first token is learned to be accepted at `YOUNG_MIN_RATE` or
/// more (a code edit's opening copy from the prompt, once earlier edits showed it is). A short answer
/// has only these steps to gain from, so one failed guess on weak evidence (a prompt copy
/// after a 2-token match, say) loses it more than a few accepted tokens can win back, and
/// that loss is per record (a one-token ShareGPT answer ran at 0.92x of plain under `auto`
/// when its second step verified three weak guesses). A draft model's own first steps are
/// undrafted for the same reason (`ModelDrafterConfig::undrafted_steps`). A request with
/// references is never young (see `BudgetPolicy::predicted`).
pub(super) const YOUNG_STEPS: usize = 2;
/// See `YOUNG_STEPS`: the acceptance rate a weak branch's first token needs in a young
/// request. A guess this sure risks a short record little; the priors of weak evidence
/// are all below it, so only what was learned (this request's or inherited) reaches it.
pub(super) const YOUNG_MIN_RATE: f64 = 0.8;

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
    /// Decode steps still young (see `YOUNG_STEPS`).
    young_steps: usize,
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
            young_steps: YOUNG_STEPS,
        }
    }

    /// For a request whose caller predicted its output (references, such as the code a
    /// code edit rewrites): its answer is about as long as the prediction, not a few
    /// tokens, so its first steps are not young (see `YOUNG_STEPS`) and copy what they
    /// can from the start.
    pub fn predicted(mut self) -> Self {
        self.young_steps = 0;
        self
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

    /// Keeps the part of `tree` worth verifying (possibly nothing): what maximizes this
    /// request's tokens per cost alone, `(1 + E) / cost(1 + k)`. In a batch, the engine
    /// decides how much of every member's drafts the forward takes (`fair_share`).
    ///
    /// At most `limit` drafted nodes are kept (and never more than the request's cap).
    /// `tree` is rooted (node 0 the pending token); the root is always kept, and the kept
    /// drafted nodes stay in their order, renumbered.
    pub fn trim(
        &mut self,
        tree: TokenTree,
        limit: usize,
        ctx: usize,
        cost: &CostModel,
    ) -> TokenTree {
        self.trim_scored(tree, limit, ctx, cost).0
    }

    /// [`BudgetPolicy::trim`], with each kept drafted node's probability of being
    /// accepted (its reach), in the kept tree's order.
    pub fn trim_scored(
        &mut self,
        mut tree: TokenTree,
        limit: usize,
        ctx: usize,
        cost: &CostModel,
    ) -> (TokenTree, Vec<f64>) {
        let young = self.young_steps > 0;
        self.young_steps = self.young_steps.saturating_sub(1);
        if tree.drafted() == 0 {
            return (tree, Vec::new());
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
            let rate = model_rate(meta, i, p).unwrap_or_else(|| self.rate(keys[i], &weak));
            // A young request's weak branch is verified only once it is learned to be
            // accepted nearly always (see `YOUNG_STEPS`); its nodes below follow it.
            let vetoed =
                young && p == Some(0) && rate < YOUNG_MIN_RATE && weak_branch(meta, i, keys[i]);
            reach[i] = if vetoed { 0.0 } else { parent * rate };
        }
        // Drafted nodes best first; a parent's reach is never below its child's, and ties
        // keep DFS order, so every prefix of this order is a connected subtree.
        let mut order: Vec<usize> = (1..tree.len()).collect();
        order.sort_by(|&a, &b| reach[b].total_cmp(&reach[a]).then(a.cmp(&b)));
        let (mut best_k, mut best_rate) = (0, 1.0 / cost.relative(1, ctx));
        let mut expected = 0.0;
        let limit = limit.min(self.max_nodes);
        for (k, &i) in order.iter().enumerate().take(limit) {
            expected += reach[i];
            let rate = (1.0 + expected) / cost.relative(k + 2, ctx);
            if rate > best_rate * 1.01 {
                (best_k, best_rate) = (k + 1, rate);
            }
        }
        self.probing = false;
        if best_k == 0 {
            self.idle_steps += 1;
            // A young request does not probe either: nothing weak is verified this early
            // (its idle steps count towards the first probe all the same).
            if young || self.idle_steps < self.probe_every {
                tree.truncate(1);
                return (tree, Vec::new());
            }
            self.idle_steps = 0;
            self.probing = true;
            best_k = PROBE_NODES.min(tree.drafted()).min(limit);
        } else {
            self.idle_steps = 0;
            self.probe_every = PROBE_EVERY;
        }
        let mut keep = vec![false; tree.len()];
        keep[0] = true;
        order[..best_k].iter().for_each(|&i| keep[i] = true);
        // `select` keeps the kept nodes in their order.
        let kept_reach = (1..tree.len())
            .filter(|&i| keep[i])
            .map(|i| reach[i])
            .collect();
        if best_k == tree.drafted() {
            return (tree, kept_reach);
        }
        (tree.select(&keep), kept_reach)
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

/// Whether node `i` (rate key `key`) hangs off weak evidence for a young request (see
/// `YOUNG_STEPS`). A draft model's nodes are not judged here: its drafter keeps its own
/// first steps undrafted.
fn weak_branch(meta: &[Meta], i: usize, key: (usize, usize)) -> bool {
    let bucket = (key.0 / DEPTHS) % EVIDENCE;
    let strong =
        bucket == CONFIDENT_SCORE_BUCKET || (TRUSTED_BUCKETS..UNAMBIGUOUS).contains(&bucket);
    meta[i].logprob.is_none() && meta[i].source != Source::Reference && !strong
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
