//! Draft size for beam searches: choosing a search's draft plan (draft beams N, drafted
//! steps gamma, forced tokens after the draft's leaves) from what the plans measured over
//! whole searches, learned across the searches a runner serves. Text drafts are sized per
//! step and per node (`policy`); a beam round's value depends on the rounds after it, so
//! beams are sized per search, on the same cost model.
//!
//! An analytic model (acceptance times a cost curve) got this machine wrong: on a CPU a
//! forward's rows cost compute, and whether forced tokens after the draft's leaves pay
//! depends on how many of those leaves the target keeps. Judging plans round by round got
//! it wrong too: a round that computes forced tokens ahead makes the next round cheap, so
//! rounds do not price plans independently. So a plan is chosen for a whole search, each
//! plan's cost per beam step over whole searches is measured (strict verification takes
//! plain's steps whatever the plan, so this divides out how long a user's items are), every
//! plan is tried, and the best is used, with a rare exploration so that a plan whose value
//! changes is seen again.
//!
//! A trial must not make its search much slower than the best plan would have: a search
//! whose drafting plan has cost more per step so far than [`CUT`] times the best other
//! plan's goes on without drafting ([`PlanChooser::over_budget`]), after two rounds at the
//! earliest. Its whole cost, the rounds after the cut included, counts against the
//! plan it was chosen with.
//!
//! Most trials on a CPU need not run at all: once the draft has built a round's tree, its
//! rows are known, and the cost curve prices the target forward over them. If that
//! forward, divided by the most beam steps the round could take (every drafted step and
//! every forced token after the leaves kept), costs more than the best other plan's
//! measured cost per step, the round cannot pay whatever the draft's acceptance: the search
//! drops the tree and goes on without drafting, having spent only the draft's forwards.

/// One way to run a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Draft beams per drafted step (N) and drafted steps (gamma; 0: no draft).
    pub beams: usize,
    pub steps: usize,
    /// Forced tokens appended after each draft leaf.
    pub forced_after_draft: usize,
}

impl Plan {
    /// No draft.
    pub const NONE: Plan = Plan {
        beams: 0,
        steps: 0,
        forced_after_draft: 0,
    };
}

/// What one plan measured, for reports.
#[derive(Clone, Debug, PartialEq)]
pub struct PlanReport {
    /// Draft beams (N) per drafted step; 0 for the plan without a draft.
    pub draft_beams: usize,
    /// Drafted steps (gamma) per round.
    pub draft_steps: usize,
    /// Forced tokens appended after each leaf of the draft tree.
    pub forced_after_draft: usize,
    /// Searches run with it.
    pub searches: usize,
    /// The cost: an EMA of milliseconds per beam step.
    pub cost: f64,
}

#[derive(Clone, Debug, Default)]
struct Seen {
    searches: usize,
    /// Mean cost per beam step (an EMA once past the first few).
    cost: f64,
}

/// Plans and what each measured.
#[derive(Clone, Debug)]
pub struct PlanChooser {
    plans: Vec<Plan>,
    seen: Vec<Seen>,
    /// Plans handed out so far.
    chosen: usize,
}

/// Searches between two explorations, once every plan was tried.
const EXPLORE_EVERY: usize = 50;
/// Searches each plan is tried on before its measurement is trusted.
const TRIALS: usize = 2;
/// Weight of a new round in a plan's averages.
const RATE: f64 = 0.1;
/// How much dearer per step than the best other plan a drafting search may run before it
/// stops drafting.
pub const CUT: f64 = 1.25;

impl PlanChooser {
    /// No draft, then for each gamma up to `max_steps`: without and with forced tokens
    /// after the draft's leaves.
    pub fn new(beams: usize, max_steps: usize, max_forced: usize) -> Self {
        let mut plans = vec![Plan {
            beams,
            steps: 0,
            forced_after_draft: 0,
        }];
        for steps in 1..=max_steps {
            plans.push(Plan {
                beams,
                steps,
                forced_after_draft: 0,
            });
            if max_forced > 0 {
                plans.push(Plan {
                    beams,
                    steps,
                    forced_after_draft: max_forced,
                });
            }
        }
        let seen = vec![Seen::default(); plans.len()];
        PlanChooser {
            plans,
            seen,
            chosen: 0,
        }
    }

    /// The plan for the next search: an untried one first, else the cheapest,
    /// else now and then the one tried least recently (an exploration).
    pub fn choose(&mut self) -> Plan {
        self.chosen += 1;
        if let Some(i) = (0..self.plans.len()).find(|&i| self.seen[i].searches < TRIALS) {
            return self.plans[i];
        }
        if self.chosen.is_multiple_of(EXPLORE_EVERY) {
            let i = (self.chosen / EXPLORE_EVERY) % self.plans.len();
            return self.plans[i];
        }
        let best = (0..self.plans.len())
            .min_by(|&a, &b| self.seen[a].cost.total_cmp(&self.seen[b].cost))
            .expect("at least one plan");
        self.plans[best]
    }

    /// Each plan with the searches it ran and its mean cost per search.
    pub fn report(&self) -> Vec<PlanReport> {
        self.plans
            .iter()
            .zip(&self.seen)
            .map(|(p, s)| PlanReport {
                draft_beams: p.beams,
                draft_steps: p.steps,
                forced_after_draft: p.forced_after_draft,
                searches: s.searches,
                cost: s.cost,
            })
            .collect()
    }

    /// Whether a search chosen with `plan` that has cost `cost` for `steps` beam steps so
    /// far should stop drafting: it is dearer per step than [`CUT`] times the cheapest other
    /// plan measured.
    pub fn over_budget(&self, plan: Plan, cost: f64, steps: usize) -> bool {
        if plan.steps == 0 || steps == 0 {
            return false;
        }
        self.best_other(plan)
            .is_some_and(|b| cost > CUT * b * steps as f64)
    }

    /// The lowest cost per beam step measured by a plan other than `plan`.
    pub fn best_other(&self, plan: Plan) -> Option<f64> {
        self.plans
            .iter()
            .zip(&self.seen)
            .filter(|(p, s)| **p != plan && s.searches > 0)
            .map(|(_, s)| s.cost)
            .min_by(f64::total_cmp)
    }

    /// A search chosen with `plan` priced its drafting out: at best it would have cost
    /// `price` per beam step, more than the best other plan. It counts as every trial the
    /// plan needed (another trial would only price it out again) and its cost moves to the
    /// price, not to what the search cost once it stopped drafting, which is the other
    /// plan's.
    pub fn observe_priced(&mut self, plan: Plan, price: f64) {
        let Some(i) = self.plans.iter().position(|p| *p == plan) else {
            return;
        };
        let s = &mut self.seen[i];
        s.cost = if s.searches == 0 {
            price
        } else {
            s.cost.max(price)
        };
        s.searches = (s.searches + 1).max(TRIALS);
    }

    /// What a search chosen with `plan` cost per beam step (milliseconds, or modeled units
    /// when timings are ignored).
    pub fn observe(&mut self, plan: Plan, cost: f64) {
        let Some(i) = self.plans.iter().position(|p| *p == plan) else {
            return;
        };
        let s = &mut self.seen[i];
        let rate = RATE.max(1.0 / (s.searches + 1) as f64);
        s.cost += rate * (cost - s.cost);
        s.searches += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tries_every_plan_then_keeps_the_best() {
        let mut c = PlanChooser::new(8, 2, 4);
        assert_eq!(c.plans.len(), 5);
        for _ in 0..5 * TRIALS {
            let p = c.choose();
            // Plan with 2 steps and no forced tokens after the leaves wins.
            let cost = if p.steps == 2 && p.forced_after_draft == 0 {
                10.0
            } else {
                30.0
            };
            c.observe(p, cost);
        }
        for _ in 0..20 {
            let p = c.choose();
            assert_eq!((p.steps, p.forced_after_draft), (2, 0));
            c.observe(p, 10.0);
        }
    }

    #[test]
    fn a_drafting_search_dearer_than_the_best_other_plan_stops_drafting() {
        let mut c = PlanChooser::new(8, 1, 0);
        let drafting = Plan {
            beams: 8,
            steps: 1,
            forced_after_draft: 0,
        };
        // Nothing measured yet: nothing to compare with.
        assert!(!c.over_budget(drafting, 1e9, 3));
        let none = c.plans[0];
        assert_eq!(none.steps, 0);
        c.observe(none, 10.0);
        assert!(!c.over_budget(drafting, 3.0 * 10.0 * CUT, 3));
        assert!(c.over_budget(drafting, 3.0 * 10.0 * CUT + 1.0, 3));
        // Not drafting, or no step yet: never cut.
        assert!(!c.over_budget(none, 1e9, 3));
        assert!(!c.over_budget(drafting, 1e9, 0));
        // Its own measurements are not the reference.
        let mut d = PlanChooser::new(8, 1, 0);
        d.observe(drafting, 1.0);
        assert!(!d.over_budget(drafting, 1e9, 1));
    }
}
