//! The beam search loop: prefill, then rounds of (draft, one target forward over every
//! search's trees, verification) until every search is done. Several requests' searches
//! share each forward.

use std::collections::HashMap;
use std::time::Instant;

use specdec_runtime::{Node, SeqInput, Target, Want};

use super::cost::RowCost;
use super::draft::{draft_round, DraftTree};
use super::policy::{Plan, PlanChooser, PlanReport};
use super::round::{verify_round, RoundInput};
use super::search::{Beam, Search};
use super::side::{Row, Side};
use super::tree::BeamTree;
use super::{BeamOptions, BeamOutput, Catalogue, DraftScoring};
use crate::EngineError;

mod choice;
mod prefill;

pub use prefill::Prefilled;

/// A draft forward's cost relative to a target forward's of as many rows, for the
/// modeled costs of a runner that ignores timings.
const DRAFT_SHARE: f64 = 0.3;

/// Runs constrained beam searches on a target (and a draft, to speculate), learning the
/// forward costs and the draft's acceptance across the searches it runs.
pub struct BeamRunner<'a> {
    target: &'a dyn Target,
    draft: Option<&'a dyn Target>,
    target_cost: RowCost,
    draft_cost: RowCost,
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
            target_cost: RowCost::default(),
            draft_cost: RowCost::default(),
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
        self.target_cost = RowCost::frozen();
        self.draft_cost = RowCost::frozen();
        self.modeled = true;
        self
    }

    /// The target's forward cost as learned so far.
    pub fn target_cost(&self) -> &RowCost {
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
    pub fn draft_cost(&self) -> Option<&RowCost> {
        self.draft.map(|_| &self.draft_cost)
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

    /// The searches of checked options from prefilled prompts.
    fn search(
        &mut self,
        cat: &Catalogue,
        pre: &Prefilled,
        opts: &BeamOptions,
    ) -> Result<Vec<BeamOutput>, EngineError> {
        let draft_ms = pre.draft.as_ref().map_or(0.0, |d| d.1);
        if opts.draft.is_some() && pre.draft.is_none() {
            return Err(EngineError::InvalidRequest(
                "these prompts were prefilled without the draft".into(),
            ));
        }
        let plan = self.plan(opts);
        let mut searches: Vec<Search> = pre
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
            .collect();
        while searches.iter().any(|s| !s.is_done()) {
            let mut active: Vec<&mut Search> =
                searches.iter_mut().filter(|s| !s.is_done()).collect();
            self.round(cat, &mut active)?;
            self.cut_dear_drafts(&mut active);
        }
        for s in &searches {
            self.observe(s);
        }
        Ok(searches.into_iter().map(Search::into_output).collect())
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

    /// Every prompt through the target (and the draft when speculating) in one forward.
    fn round(&mut self, cat: &Catalogue, active: &mut [&mut Search]) -> Result<(), EngineError> {
        let round_started = Instant::now();
        let mut plans: Vec<Plan> = active.iter().map(|s| s.plan).collect();
        let sizes: Vec<(usize, usize)> = plans.iter().map(|p| (p.beams, p.steps)).collect();
        let mut draft_rows = vec![0; active.len()];
        let mut drafted: Vec<Option<DraftTree>> = if plans.iter().any(|p| p.steps > 0) {
            let d = self.draft.expect("drafting searches were checked");
            let started = Instant::now();
            let (trees, work) = draft_round(d, self.draft_scoring, cat, active, &sizes)?;
            if work.forwards > 0 {
                let per = started.elapsed().as_secs_f64() * 1e3 / work.forwards as f64;
                for &rows in &work.sizes {
                    self.draft_cost.observe(rows, per);
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
            .map(|(s, search)| beam_trees(search, drafted[s].as_ref(), cat, plans[s]))
            .collect();
        let mut target_rows: Vec<usize> = trees.iter().map(|ts| rows_of(ts)).collect();
        for (s, search) in active.iter_mut().enumerate() {
            let price = match drafted[s] {
                Some(_) => self.priced_out(search, &trees[s], target_rows[s]),
                None => None,
            };
            if let Some(price) = price {
                search.priced = Some(price);
                search.plan = Plan::NONE;
                search.stats.draft_priced_out = true;
                plans[s] = Plan::NONE;
                drafted[s] = None;
                trees[s] = beam_trees(search, None, cat, Plan::NONE);
                target_rows[s] = rows_of(&trees[s]);
            }
        }
        self.forward_trees(active, &mut trees)?;
        for (s, search) in active.iter_mut().enumerate() {
            let started = Instant::now();
            let input = RoundInput {
                trees: &trees[s],
                drafted: drafted[s].as_ref(),
                cat,
            };
            let steps = verify_round(search, &input)?;
            search.stats.verify_ms += started.elapsed().as_secs_f64() * 1e3;
            search.stats.rounds += 1;
            search.stats.steps += steps;
            let plan = plans[s];
            if plan.steps > 0 {
                search.stats.drafted_rounds += 1;
                search.stats.accepted_steps += (steps - 1).min(plan.steps);
            }
            let cost = if self.modeled {
                let t = self.target_cost.estimate(target_rows[s].max(1), 1.0);
                // (A round priced out before its forward still paid for its draft.)
                let drafted_steps = sizes[s].1;
                let d = if draft_rows[s] > 0 {
                    DRAFT_SHARE * self.draft_cost.estimate(draft_rows[s], 1.0)
                        + DRAFT_SHARE * drafted_steps.saturating_sub(1) as f64
                } else {
                    0.0
                };
                t + d
            } else {
                round_started.elapsed().as_secs_f64() * 1e3
            };
            search.cost += cost;
        }
        Ok(())
    }

    /// One target forward of every non-empty tree, each node's logits kept.
    fn forward_trees(
        &mut self,
        active: &mut [&mut Search],
        trees: &mut [Vec<BeamTree>],
    ) -> Result<(), EngineError> {
        let mut inputs: Vec<SeqInput<'_>> = Vec::new();
        let mut owners = Vec::new();
        for (s, (search, ts)) in active.iter_mut().zip(trees.iter()).enumerate() {
            let mut rows = 0;
            for (b, (beam, tree)) in search.live.iter_mut().zip(ts).enumerate() {
                if tree.nodes.is_empty() {
                    continue;
                }
                rows += tree.nodes.len();
                owners.push((s, b));
                inputs.push(SeqInput {
                    seq: &mut beam.target.seq,
                    nodes: &tree.nodes,
                    want: Want::All,
                });
            }
            if rows > 0 {
                search.stats.target_forwards += 1;
                search.stats.target_rows += rows;
            }
        }
        if inputs.is_empty() {
            return Ok(());
        }
        let rows: usize = inputs.iter().map(|i| i.nodes.len()).sum();
        let started = Instant::now();
        let logits = self.target.forward(&mut inputs)?;
        let ms = started.elapsed().as_secs_f64() * 1e3;
        self.target_cost.observe(rows, ms);
        drop(inputs);
        let mut timed = vec![false; active.len()];
        for &(s, _) in &owners {
            if !std::mem::replace(&mut timed[s], true) {
                active[s].stats.forward_ms += ms;
            }
        }
        for ((s, b), l) in owners.into_iter().zip(logits) {
            trees[s][b].logits = Some(l);
        }
        Ok(())
    }
}

/// Every live beam's share of a search's forward: its pending tokens, what `drafted`
/// hangs below it and the forced tokens jump-forward and `plan` add.
fn beam_trees(
    search: &Search,
    drafted: Option<&DraftTree>,
    cat: &Catalogue,
    plan: Plan,
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
        .map(|(b, beam)| BeamTree::build(beam, b, drafted, cat, forced, plan.forced_after_draft))
        .collect()
}

fn rows_of(trees: &[BeamTree]) -> usize {
    trees.iter().map(|t| t.nodes.len()).sum()
}
