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

/// A draft forward's cost relative to a target forward's of as many rows, for the
/// modeled costs of a runner that ignores timings.
const DRAFT_SHARE: f64 = 0.3;

/// Prompts prefilled on the target (and the draft): each search forks them.
pub struct Prefilled {
    prompts: Vec<Vec<u32>>,
    target: Vec<Side>,
    target_ms: f64,
    draft: Option<(Vec<Side>, f64)>,
}

impl Prefilled {
    /// Milliseconds the prefill took on the target, and on the draft when it ran there.
    pub fn ms(&self) -> (f64, Option<f64>) {
        (self.target_ms, self.draft.as_ref().map(|d| d.1))
    }
}

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

    /// Every prompt through the target, and through the draft too with `draft`, in one
    /// forward each: what [`run_prefilled`](Self::run_prefilled) searches from, as often
    /// as asked (an evaluation compares modes from one prefill).
    pub fn prefill(&mut self, prompts: &[Vec<u32>], draft: bool) -> Result<Prefilled, EngineError> {
        if prompts.iter().any(|p| p.is_empty()) {
            return Err(EngineError::InvalidRequest(
                "a prompt needs at least one token".into(),
            ));
        }
        let started = Instant::now();
        let target = prefill_on(self.target, prompts, false)?;
        let target_ms = started.elapsed().as_secs_f64() * 1e3;
        let drafted = match (draft, self.draft) {
            (true, Some(d)) => Some(self.prefill_draft_sides(d, prompts)?),
            (true, None) => {
                return Err(EngineError::InvalidRequest(
                    "speculative beam search needs a draft model".into(),
                ))
            }
            (false, _) => None,
        };
        Ok(Prefilled {
            prompts: prompts.to_vec(),
            target,
            target_ms,
            draft: drafted,
        })
    }

    /// `pre`'s target caches with this runner's draft prefilled beside them, so one
    /// target prefill serves runners that speculate with different drafts.
    pub fn prefill_draft(&mut self, pre: &Prefilled) -> Result<Prefilled, EngineError> {
        let d = self.draft.ok_or_else(|| {
            EngineError::InvalidRequest("speculative beam search needs a draft model".into())
        })?;
        Ok(Prefilled {
            prompts: pre.prompts.clone(),
            target: pre.target.clone(),
            target_ms: pre.target_ms,
            draft: Some(self.prefill_draft_sides(d, &pre.prompts)?),
        })
    }

    /// The prompts prefilled on the draft, and the milliseconds it took.
    fn prefill_draft_sides(
        &self,
        draft: &dyn Target,
        prompts: &[Vec<u32>],
    ) -> Result<(Vec<Side>, f64), EngineError> {
        let started = Instant::now();
        // A catalogue-scored draft's next row needs the catalogue, which a prefill does
        // not know: its prompts' last tokens wait for the first draft step.
        let hold = self.draft_scoring == DraftScoring::Catalogue;
        let sides = prefill_on(draft, prompts, hold)?;
        Ok((sides, started.elapsed().as_secs_f64() * 1e3))
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

    /// A search's plan, kept for all its rounds: none without a draft, the bounds when
    /// the plan is fixed, else what its chooser measured best over whole searches.
    fn plan(&mut self, opts: &BeamOptions) -> Plan {
        let Some(d) = opts.draft.as_ref() else {
            return Plan::NONE;
        };
        if !d.adaptive {
            return Plan {
                beams: d.max_beams,
                steps: d.max_steps,
                forced_after_draft: opts.max_forced_after_draft,
            };
        }
        let forced = if opts.jump_forward {
            opts.max_forced_after_draft
        } else {
            0
        };
        self.choosers
            .entry(key(d, opts))
            .or_insert_with(|| PlanChooser::new(d.max_beams, d.max_steps, forced))
            .choose()
    }

    /// Which chooser serves `search`, when its plan is chosen.
    fn chooser_key(search: &Search) -> Option<(usize, usize, usize)> {
        let d = search.opts.draft.as_ref().filter(|d| d.adaptive)?;
        Some(key(d, &search.opts))
    }

    /// What a drafting search's round over `trees` (`rows` rows) would cost per beam step
    /// at best, when that is more than the best other plan measured: the forward as the
    /// cost curve prices it, over the most steps the round could take. A step needs
    /// logits for each beam it keeps, so the round goes no deeper than the tree holds K
    /// nodes at every depth (the live beams, when fewer remain). A fixed plan is never
    /// priced.
    fn priced_out(&self, search: &Search, trees: &[BeamTree], rows: usize) -> Option<f64> {
        if search.plan.steps == 0 {
            return None;
        }
        let best = Self::chooser_key(search)
            .and_then(|k| self.choosers.get(&k))
            .and_then(|c| c.best_other(search.chosen))?;
        let forward = if self.modeled {
            self.target_cost.estimate(rows.max(1), 1.0)
        } else {
            self.target_cost.ms(rows)?
        };
        let need = if search.stats.rounds == 0 {
            search.opts.k
        } else {
            search.opts.k.min(search.live.len())
        };
        let mut counts = Vec::new();
        for (beam, tree) in search.live.iter().zip(trees) {
            let ahead = if beam.target.pending.is_empty() {
                beam.target.extra.len()
            } else {
                0
            };
            tree.depth_counts(ahead, &mut counts);
        }
        let deep = (1..counts.len())
            .take_while(|&j| counts[j] >= need.max(1))
            .count();
        let price = forward / (deep + 1) as f64;
        (price > best).then_some(price)
    }

    /// Searches whose drafting has cost too much so far go on without drafting (the
    /// result is the same: every round is exact whatever its plan).
    fn cut_dear_drafts(&self, active: &mut [&mut Search]) {
        for s in active.iter_mut() {
            // A plan is judged after two rounds at least: forced tokens computed ahead in
            // the first make the next one cheap.
            if s.plan.steps == 0 || s.is_done() || s.stats.rounds < MIN_ROUNDS_BEFORE_CUT {
                continue;
            }
            let dear = Self::chooser_key(s)
                .and_then(|k| self.choosers.get(&k))
                .is_some_and(|c| c.over_budget(s.chosen, s.cost, s.stats.steps));
            if dear {
                s.plan = Plan::NONE;
                s.stats.draft_cut = true;
            }
        }
    }

    /// What a finished search's chosen plan cost it per beam step (all its rounds, those
    /// after a cut included).
    fn observe(&mut self, search: &Search) {
        if let Some(c) = Self::chooser_key(search).and_then(|k| self.choosers.get_mut(&k)) {
            if let Some(price) = search.priced {
                return c.observe_priced(search.chosen, price);
            }
            c.observe(
                search.chosen,
                search.cost / search.stats.steps.max(1) as f64,
            );
        }
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

/// Rounds a drafting search runs before its cost may stop its drafting.
const MIN_ROUNDS_BEFORE_CUT: usize = 2;

/// Which chooser serves a search: the bounds its plans are made of.
fn key(d: &super::DraftPlan, opts: &BeamOptions) -> (usize, usize, usize) {
    (d.max_beams, d.max_steps, opts.max_forced_after_draft)
}

/// Prefills each prompt as one chain on `model`; each side's cache holds its prompt and
/// the next token's logits are known, or with `hold_last` the cache holds all but the
/// last token, left pending (no logits computed). (Not timed: a prefill's cost says
/// nothing about a round's.)
fn prefill_on(
    model: &dyn Target,
    prompts: &[Vec<u32>],
    hold_last: bool,
) -> Result<Vec<Side>, EngineError> {
    let mut seqs: Vec<_> = prompts.iter().map(|_| model.new_sequence()).collect();
    let held = usize::from(hold_last);
    let chains: Vec<Vec<Node>> = prompts
        .iter()
        .map(|p| Node::chain(&p[..p.len() - held]))
        .collect();
    let want = if hold_last { Want::None } else { Want::Last };
    let logits = {
        // (Only a held one-token prompt has no chain: nothing to run for it.)
        let mut inputs: Vec<SeqInput<'_>> = seqs
            .iter_mut()
            .zip(&chains)
            .filter(|(_, nodes)| !nodes.is_empty())
            .map(|(seq, nodes)| SeqInput {
                seq,
                nodes,
                want: want.clone(),
            })
            .collect();
        if inputs.is_empty() {
            Vec::new()
        } else {
            model.forward(&mut inputs)?
        }
    };
    if hold_last {
        return seqs
            .into_iter()
            .zip(prompts)
            .map(|(mut seq, p)| {
                if p.len() > 1 {
                    seq.commit_all()?;
                }
                Ok(Side::new(seq, vec![p[p.len() - 1]]))
            })
            .collect();
    }
    seqs.into_iter()
        .zip(logits)
        .zip(prompts)
        .map(|((mut seq, l), p)| {
            seq.commit_all()?;
            let mut side = Side::new(seq, Vec::new());
            side.ahead.push_back(Row::new(&l, p.len() - 1));
            Ok(side)
        })
        .collect()
}
