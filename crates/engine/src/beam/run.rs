//! The beam search loop: prefill, then rounds of (draft, one target forward over every
//! search's trees, verification) until every search is done. A [`BeamTask`] is that
//! loop cut at its target forwards, so that the scheduler puts a recommendation's rows in
//! the same forwards as chats'; [`BeamRunner::run`] drives one alone. Either way the
//! runner learns the draft's cost and each plan's value across the searches it serves.

use std::collections::HashMap;
use std::time::Instant;

use specdec_runtime::{Logits, Node, SeqInput, Sequence, Target, Want};

use super::draft::{draft_round, DraftTree};
use super::round::{verify_round, RoundInput};
use super::search::{Beam, Search};
use super::side::{Row, Side};
use super::tree::BeamTree;
use super::{BeamOptions, BeamOutput, Catalogue, DraftScoring};
use crate::budget::CostModel;
use crate::budget::{Plan, PlanChooser, PlanReport};
use crate::EngineError;

mod choice;
mod prefill;
mod task;

pub use prefill::Prefilled;
pub use task::BeamTask;

/// A draft forward's cost relative to a target forward's of as many rows, for the
/// modeled costs of a runner that ignores timings.
const DRAFT_SHARE: f64 = 0.3;

/// Runs constrained beam searches on a target (and a draft, to speculate), learning the
/// forward costs and the draft's acceptance across the searches it runs.
pub struct BeamRunner<'a> {
    target: &'a dyn Target,
    draft: Option<&'a dyn Target>,
    /// The target's cost curve when the runner runs its own forwards ([`BeamRunner::run`]);
    /// inside a scheduler the engine's, which every forward of the batch teaches, prices
    /// rounds instead.
    target_cost: CostModel,
    draft_cost: CostModel,
    /// Per draft plan's bounds (N, gamma, forced tokens), what each round plan measured.
    choosers: HashMap<(usize, usize, usize), PlanChooser>,
    /// Ignore timings: price rounds by the prior cost of their rows.
    modeled: bool,
    draft_scoring: DraftScoring,
}

impl<'a> BeamRunner<'a> {
    /// A runner; a draft must share the target's vocabulary.
    pub fn new(target: &'a dyn Target, draft: Option<&'a dyn Target>) -> Result<Self, EngineError> {
        if let Some(d) = draft {
            let (dv, tv) = (d.config().vocab, target.config().vocab);
            if dv != tv {
                return Err(EngineError::InvalidRequest(format!(
                    "the draft model has {dv} tokens and the target {tv}: a draft must share the target's vocabulary"
                )));
            }
        }
        Ok(BeamRunner {
            target,
            draft,
            target_cost: CostModel::default(),
            draft_cost: CostModel::default(),
            choosers: HashMap::new(),
            modeled: false,
            draft_scoring: DraftScoring::Vocabulary,
        })
    }

    /// Reads the draft's logits as `scoring` says it was trained (what
    /// [`Loaded::draft_scoring`](crate::Loaded) read from its file); vocabulary by default.
    pub fn with_draft_scoring(mut self, scoring: DraftScoring) -> Self {
        self.draft_scoring = scoring;
        self
    }

    /// Ignores timings (gamma follows acceptance alone), so runs are reproducible.
    pub fn frozen(mut self) -> Self {
        self.target_cost = CostModel::frozen();
        self.draft_cost = CostModel::frozen();
        self.modeled = true;
        self
    }

    /// The target's forward cost as learned by this runner's own forwards.
    pub fn target_cost(&self) -> &CostModel {
        &self.target_cost
    }

    /// What each draft plan measured, per set of plan bounds this runner saw.
    pub fn plan_report(&self) -> Vec<PlanReport> {
        self.choosers
            .values()
            .flat_map(PlanChooser::report)
            .collect()
    }

    /// The draft's forward cost as learned so far, when there is a draft.
    pub fn draft_cost(&self) -> Option<&CostModel> {
        self.draft.map(|_| &self.draft_cost)
    }

    /// The model searched.
    pub fn target(&self) -> &'a dyn Target {
        self.target
    }

    /// The K best catalogue entries after each prompt, best first.
    pub fn run(
        &mut self,
        cat: &Catalogue,
        prompts: &[Vec<u32>],
        opts: &BeamOptions,
    ) -> Result<Vec<BeamOutput>, EngineError> {
        self.check(cat, prompts, opts)?;
        let pre = self.prefill(prompts, opts.draft.is_some())?;
        self.search(cat, &pre, opts)
    }

    /// Searches from prefilled prompts (their caches are forked, so `pre` can serve again).
    pub fn run_prefilled(
        &mut self,
        cat: &Catalogue,
        pre: &Prefilled,
        opts: &BeamOptions,
    ) -> Result<Vec<BeamOutput>, EngineError> {
        self.check(cat, &pre.prompts, opts)?;
        self.search(cat, pre, opts)
    }

    /// The searches of checked options from prefilled prompts, each round's target
    /// forward run here.
    fn search(
        &mut self,
        cat: &Catalogue,
        pre: &Prefilled,
        opts: &BeamOptions,
    ) -> Result<Vec<BeamOutput>, EngineError> {
        let mut searches = self.searches(pre, opts)?;
        let mut cost = std::mem::take(&mut self.target_cost);
        let result = self.rounds_alone(cat, &mut searches, &mut cost);
        self.target_cost = cost;
        result?;
        for s in &searches {
            self.observe(s);
        }
        Ok(searches.into_iter().map(Search::into_output).collect())
    }

    fn rounds_alone(
        &mut self,
        cat: &Catalogue,
        searches: &mut [Search],
        cost: &mut CostModel,
    ) -> Result<(), EngineError> {
        while searches.iter().any(|s| !s.is_done()) {
            let mut active: Vec<&mut Search> =
                searches.iter_mut().filter(|s| !s.is_done()).collect();
            let mut round = self.prepare_round(cost, cat, &mut active, usize::MAX)?;
            let (logits, ms) = {
                let (mut inputs, load) =
                    round_inputs(active.iter_mut().map(|s| &mut **s), &mut round, usize::MAX);
                let started = Instant::now();
                let logits = if inputs.is_empty() {
                    Vec::new()
                } else {
                    self.target.forward(&mut inputs)?
                };
                let ms = started.elapsed().as_secs_f64() * 1e3;
                if load.0 > 0 {
                    cost.observe(load.0, load.1 / load.0, ms);
                }
                (logits, ms)
            };
            take_logits(&mut active, &mut round, logits, ms);
            self.finish_round(cost, cat, &mut active, round)?;
        }
        Ok(())
    }

    /// One search per prompt of `pre`, each with the plan chosen for it.
    fn searches(
        &mut self,
        pre: &Prefilled,
        opts: &BeamOptions,
    ) -> Result<Vec<Search>, EngineError> {
        let draft_ms = pre.draft.as_ref().map_or(0.0, |d| d.1);
        if opts.draft.is_some() && pre.draft.is_none() {
            return Err(EngineError::InvalidRequest(
                "these prompts were prefilled without the draft".into(),
            ));
        }
        let plan = self.plan(opts);
        Ok(pre
            .prompts
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let draft = opts
                    .draft
                    .as_ref()
                    .and(pre.draft.as_ref())
                    .map(|d| d.0[i].clone());
                let root = Beam {
                    tokens: Vec::new(),
                    trie: Catalogue::ROOT,
                    score: 0.0,
                    target: pre.target[i].clone(),
                    draft,
                };
                let mut s = Search::new(opts.clone(), root, p.len());
                s.chosen = plan;
                s.plan = plan;
                s.stats.target_forwards = 1;
                s.stats.target_rows = p.len();
                s.stats.prefill_ms = pre.target_ms;
                if opts.draft.is_some() {
                    s.stats.draft_forwards = 1;
                    s.stats.draft_rows = p.len();
                    s.stats.prefill_ms += draft_ms;
                }
                s
            })
            .collect())
    }

    fn check(
        &self,
        cat: &Catalogue,
        prompts: &[Vec<u32>],
        opts: &BeamOptions,
    ) -> Result<(), EngineError> {
        let bad = |m: String| Err(EngineError::InvalidRequest(m));
        if opts.k == 0 {
            return bad("k must be at least 1".into());
        }
        if cat.is_empty() {
            return bad("the catalogue is empty".into());
        }
        if opts.draft.is_some() && self.draft.is_none() {
            return bad("speculative beam search needs a draft model".into());
        }
        if let Some(d) = &opts.draft {
            if d.max_beams == 0 {
                return bad("the draft needs at least one beam".into());
            }
        }
        let vocab = self.target.config().vocab as u32;
        let longest = (0..cat.len())
            .map(|e| cat.entry(e).len())
            .max()
            .unwrap_or(0);
        if let Some(t) = (0..cat.len())
            .flat_map(|e| cat.entry(e))
            .find(|&&t| t >= vocab)
        {
            return bad(format!(
                "catalogue token {t} is outside the model's vocabulary of {vocab}"
            ));
        }
        // The draft's context bounds a speculative search too.
        let limit = match (opts.draft.is_some(), self.draft) {
            (true, Some(d)) => self
                .target
                .config()
                .context_length
                .min(d.config().context_length),
            _ => self.target.config().context_length,
        };
        for p in prompts {
            if p.is_empty() {
                return bad("a prompt needs at least one token".into());
            }
            if let Some(&t) = p.iter().find(|&&t| t >= vocab) {
                return bad(format!(
                    "prompt token {t} is outside the model's vocabulary of {vocab}"
                ));
            }
            // Room for the longest entry, forced tokens and a draft tree past it.
            if p.len() + longest + 2 * opts.max_forced.max(8) > limit {
                return Err(EngineError::ContextOverflow {
                    prompt: p.len(),
                    max_tokens: longest,
                    limit,
                });
            }
        }
        Ok(())
    }

    /// A round up to its target forward: the draft's beams, every live beam's tree (of
    /// at most `max_nodes` nodes beyond its pending tokens), and drafting dropped where
    /// the cost curve prices the round out.
    fn prepare_round(
        &mut self,
        cost: &CostModel,
        cat: &Catalogue,
        active: &mut [&mut Search],
        max_nodes: usize,
    ) -> Result<Round, EngineError> {
        let started = Instant::now();
        let mut plans: Vec<Plan> = active.iter().map(|s| s.plan).collect();
        let sizes: Vec<(usize, usize)> = plans.iter().map(|p| (p.beams, p.steps)).collect();
        let mut draft_rows = vec![0; active.len()];
        let mut drafted: Vec<Option<DraftTree>> = if plans.iter().any(|p| p.steps > 0) {
            let d = self.draft.expect("drafting searches were checked");
            let started = Instant::now();
            let (trees, work) = draft_round(d, self.draft_scoring, cat, active, &sizes)?;
            if work.forwards > 0 {
                let per = started.elapsed().as_secs_f64() * 1e3 / work.forwards as f64;
                let ctx = mean_ctx(active);
                for &rows in &work.sizes {
                    self.draft_cost.observe(rows, ctx, per);
                }
            }
            let ms = started.elapsed().as_secs_f64() * 1e3;
            for (s, search) in active.iter_mut().enumerate() {
                if plans[s].steps > 0 {
                    search.stats.draft_ms += ms;
                    search.stats.draft_forwards += plans[s].steps;
                    search.stats.draft_rows += work.rows[s];
                    draft_rows[s] = work.rows[s];
                }
            }
            trees
        } else {
            active.iter().map(|_| None).collect()
        };
        let mut trees: Vec<Vec<BeamTree>> = active
            .iter()
            .enumerate()
            .map(|(s, search)| beam_trees(search, drafted[s].as_ref(), cat, plans[s], max_nodes))
            .collect();
        let mut target_rows: Vec<usize> = trees.iter().map(|ts| rows_of(ts)).collect();
        for (s, search) in active.iter_mut().enumerate() {
            let price = match drafted[s] {
                Some(_) => self.priced_out(cost, search, &trees[s], target_rows[s]),
                None => None,
            };
            if let Some(price) = price {
                search.priced = Some(price);
                search.plan = Plan::NONE;
                search.stats.draft_priced_out = true;
                plans[s] = Plan::NONE;
                drafted[s] = None;
                trees[s] = beam_trees(search, None, cat, Plan::NONE, max_nodes);
                target_rows[s] = rows_of(&trees[s]);
            }
        }
        let unsent = (0..trees.len())
            .flat_map(|s| (0..trees[s].len()).map(move |b| (s, b)))
            .filter(|&(s, b)| !trees[s][b].is_empty())
            .rev()
            .collect();
        Ok(Round {
            plans,
            sizes,
            draft_rows,
            drafted,
            trees,
            target_rows,
            unsent,
            in_flight: Vec::new(),
            own_ms: started.elapsed().as_secs_f64() * 1e3,
        })
    }

    /// The rest of a round once every tree's logits are in ([`Round::is_forwarded`]):
    /// verification, statistics, and drafting cut where it proved dear.
    fn finish_round(
        &mut self,
        cost: &CostModel,
        cat: &Catalogue,
        active: &mut [&mut Search],
        round: Round,
    ) -> Result<(), EngineError> {
        debug_assert!(round.is_forwarded());
        let started = Instant::now();
        let ctx = mean_ctx(active);
        for (s, search) in active.iter_mut().enumerate() {
            let verify_started = Instant::now();
            let input = RoundInput {
                trees: &round.trees[s],
                drafted: round.drafted[s].as_ref(),
                cat,
            };
            let steps = verify_round(search, &input)?;
            search.stats.verify_ms += verify_started.elapsed().as_secs_f64() * 1e3;
            search.stats.rounds += 1;
            search.stats.steps += steps;
            let plan = round.plans[s];
            if plan.steps > 0 {
                search.stats.drafted_rounds += 1;
                search.stats.accepted_steps += (steps - 1).min(plan.steps);
            }
            search.cost += if self.modeled {
                let t = cost.relative(round.target_rows[s].max(1), ctx);
                // (A round priced out before its forward still paid for its draft.)
                let drafted_steps = round.sizes[s].1;
                let d = if round.draft_rows[s] > 0 {
                    DRAFT_SHARE * self.draft_cost.relative(round.draft_rows[s], ctx)
                        + DRAFT_SHARE * drafted_steps.saturating_sub(1) as f64
                } else {
                    0.0
                };
                t + d
            } else {
                round.own_ms + started.elapsed().as_secs_f64() * 1e3
            };
        }
        self.cut_dear_drafts(active);
        Ok(())
    }
}

/// A round between its drafting and its target forward.
pub(crate) struct Round {
    plans: Vec<Plan>,
    sizes: Vec<(usize, usize)>,
    draft_rows: Vec<usize>,
    drafted: Vec<Option<DraftTree>>,
    trees: Vec<Vec<BeamTree>>,
    target_rows: Vec<usize>,
    /// (search, beam) of the non-empty trees not yet in a forward, the next one last.
    unsent: Vec<(usize, usize)>,
    /// Those in the forward under way, in input order.
    in_flight: Vec<(usize, usize)>,
    /// Milliseconds spent on the round by itself: drafting, building trees and (once in)
    /// the target forward; a shared forward's other rows are not the search's cost.
    own_ms: f64,
}

impl Round {
    /// Whether every tree of the round has its logits.
    pub(crate) fn is_forwarded(&self) -> bool {
        self.unsent.is_empty() && self.in_flight.is_empty()
    }
}

/// The next trees of the round for a forward, up to `budget` rows (with any budget at
/// all, one tree however large, so a round advances): every node's logits wanted. Returns the inputs,
/// and their rows with their summed context.
fn round_inputs<'s>(
    active: impl Iterator<Item = &'s mut Search>,
    round: &'s mut Round,
    budget: usize,
) -> (Vec<SeqInput<'s>>, (usize, usize)) {
    let mut rows = 0;
    while let Some(&(s, b)) = round.unsent.last() {
        let n = round.trees[s][b].len();
        if rows + n > budget && !(rows == 0 && budget > 0 && round.in_flight.is_empty()) {
            break;
        }
        rows += n;
        round.in_flight.push((s, b));
        round.unsent.pop();
    }
    let mut sent = vec![Vec::new(); round.trees.len()];
    for &(s, b) in &round.in_flight {
        sent[s].push(b);
    }
    let mut inputs = Vec::with_capacity(round.in_flight.len());
    let mut ctx = 0;
    let trees = &round.trees;
    for (s, search) in active.enumerate() {
        let mut beams: Vec<Option<&mut Beam>> = search.live.iter_mut().map(Some).collect();
        for &b in &sent[s] {
            let beam = beams[b].take().expect("a tree is sent once");
            let tree = &trees[s][b];
            ctx += tree.len() * beam.target.seq.len();
            inputs.push(SeqInput {
                seq: &mut beam.target.seq,
                nodes: tree.nodes(),
                want: Want::All,
            });
        }
    }
    (inputs, (rows, ctx))
}

/// Hands the forward's `logits` (in the order of [`round_inputs`]) to the trees in
/// flight; `ms` is the forward's wall time (shared with whatever else it ran).
fn take_logits(active: &mut [&mut Search], round: &mut Round, logits: Vec<Logits>, ms: f64) {
    let mut counted = vec![false; active.len()];
    for ((s, b), l) in round.in_flight.drain(..).zip(logits) {
        let rows = round.trees[s][b].len();
        let stats = &mut active[s].stats;
        if !std::mem::replace(&mut counted[s], true) {
            stats.target_forwards += 1;
            stats.forward_ms += ms;
        }
        stats.target_rows += rows;
        round.trees[s][b].logits = Some(l);
    }
    round.own_ms += ms;
}

/// The mean context a round's live beams attend to.
fn mean_ctx(active: &[&mut Search]) -> usize {
    let (n, sum) = active
        .iter()
        .flat_map(|s| &s.live)
        .fold((0, 0), |(n, sum), b| (n + 1, sum + b.target.seq.len()));
    sum / n.max(1)
}

/// Every live beam's share of a search's forward: its pending tokens, what `drafted`
/// hangs below it and the forced tokens jump-forward and `plan` add.
fn beam_trees(
    search: &Search,
    drafted: Option<&DraftTree>,
    cat: &Catalogue,
    plan: Plan,
    max_nodes: usize,
) -> Vec<BeamTree> {
    let forced = if search.opts.jump_forward {
        search.opts.max_forced
    } else {
        0
    };
    search
        .live
        .iter()
        .enumerate()
        .map(|(b, beam)| {
            BeamTree::build(
                beam,
                b,
                drafted,
                cat,
                forced,
                plan.forced_after_draft,
                max_nodes,
            )
        })
        .collect()
}

fn rows_of(trees: &[BeamTree]) -> usize {
    trees.iter().map(BeamTree::len).sum()
}
