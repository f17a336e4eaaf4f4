//! Which plan a search runs: chosen per search from what the plans measured, priced
//! before each drafted round's forward, cut when it proves dear (see `budget::beam_plans`).

use super::*;

impl BeamRunner<'_> {
    /// A search's plan, kept for all its rounds: none without a draft, the bounds when
    /// the plan is fixed, else what its chooser measured best over whole searches.
    pub(super) fn plan(&mut self, opts: &BeamOptions) -> Plan {
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
    pub(super) fn chooser_key(search: &Search) -> Option<(usize, usize, usize)> {
        let d = search.opts.draft.as_ref().filter(|d| d.adaptive)?;
        Some(key(d, &search.opts))
    }

    /// What a drafting search's round over `trees` (`rows` rows) would cost per beam step
    /// at best, when that is more than the best other plan measured: the forward as the
    /// cost curve prices it, over the most steps the round could take. A step needs
    /// logits for each beam it keeps, so the round goes no deeper than the tree holds K
    /// nodes at every depth (the live beams, when fewer remain). A fixed plan is never
    /// priced.
    pub(super) fn priced_out(
        &self,
        cost: &CostModel,
        search: &Search,
        trees: &[BeamTree],
        rows: usize,
    ) -> Option<f64> {
        if search.plan.steps == 0 {
            return None;
        }
        let best = Self::chooser_key(search)
            .and_then(|k| self.choosers.get(&k))
            .and_then(|c| c.best_other(search.chosen))?;
        let ctx = search
            .live
            .iter()
            .map(|b| b.target.seq.len())
            .sum::<usize>()
            / search.live.len().max(1);
        let forward = if self.modeled {
            cost.relative(rows.max(1), ctx)
        } else {
            cost.ms(rows, ctx)?
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
    pub(super) fn cut_dear_drafts(&self, active: &mut [&mut Search]) {
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
    pub(super) fn observe(&mut self, search: &Search) {
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

/// Rounds a drafting search runs before its cost may stop its drafting.
const MIN_ROUNDS_BEFORE_CUT: usize = 2;

/// Which chooser serves a search: the bounds its plans are made of.
fn key(d: &crate::beam::DraftPlan, opts: &BeamOptions) -> (usize, usize, usize) {
    (d.max_beams, d.max_steps, opts.max_forced_after_draft)
}
