//! The per-record promise in a batch: one member's drafts must not make another member
//! slower than plain batching would have been by more than noise.
//!
//! Each member's drafts are sized for its own tokens per cost (`BudgetPolicy::trim`); a
//! batch shares one forward, and where the forward is compute-bound, rows cost time, so
//! a draft that pays for its own request makes the forward dearer for every other member. On the 1.5B with AMX tiles a ninth row in a
//! batch of eight costs 20% more (a new row group); eight requests of open chat ran 9%
//! below plain batching per record, 11-14 of 20 below 0.95x, while the batch's tokens per
//! second were nearly even.
//!
//! So every decoding member keeps a balance, in forward costs relative to one row: what
//! it gained or lost against the plain batch's step in each batched step, plus an
//! allowance of `NOISE` of each step. A step keeps drafts only where every member
//! expects to stay in credit: `balance + (1 + expected) · c0 − c1 ≥ 0`, with c0 the
//! forward without drafts and c1 with them. Each member keeps only its first m drafted
//! nodes (the start of its tree in depth-first order, so a connected subtree), with m the
//! cap that every member can afford and that gives the batch the most tokens per cost:
//! members with nothing to draft afford only their allowance (one row more in a
//! compute-bound batch spends several steps of it), members that all gain afford drafts
//! about as deep as they gain. A request alone, or the only one decoding, is its own
//! judge (the trim). Relaxed and forced requests
//! keep their drafts: their text follows their drafts, which must not depend on the
//! batch.

use crate::budget::{BatchLoad, CostModel};

/// The share of plain batching's time a member may lose to other members' drafts, as an
/// allowance accrued every batched step (the benchmarks call a record below 0.95x slow;
/// this stays well inside that).
pub(crate) const NOISE: f64 = 0.02;

/// Expected draft tokens' worth of prior behind [`trust`]: a member starts trusting its
/// expectations and follows what its own batched steps show within a few steps.
const TRUST_PRIOR: f64 = 2.0;

/// What a batched step's evidence for [`trust`] still weighs one step later. Evidence
/// fades, so a member whose drafts were cut (and so gives no new evidence) comes to trust
/// them again within some twenty steps and tries: drafts that missed early (a copy after
/// a one-token match) may pay later in the same text.
pub(crate) const TRUST_MEMORY: f64 = 0.95;

/// The share of its expected draft tokens a member may count on, from `(expected,
/// accepted)` over its recent batched steps (see [`TRUST_MEMORY`]): their ratio behind a
/// prior of full trust, at most 1. Expectations are the learned acceptance rates of the
/// drafts' kinds, and a tree keeps the best of its candidates by those rates, so they run
/// high for what it keeps: LASER's pool copies at 8 in flight were accepted at 55% of
/// what members expected, every member's gain looked worth the rows, and strict
/// speculation cost the batch 6-9% (its forwards' modeled cost). Alone a request's own
/// trim pays for a miss; in a batch every member does.
pub(crate) fn trust((expected, accepted): (f64, f64)) -> f64 {
    ((accepted + TRUST_PRIOR) / (expected + TRUST_PRIOR)).min(1.0)
}

/// One decoding member of a batched step, as the rule sees it.
pub(crate) struct Member<'a> {
    /// Its balance so far (see the module).
    pub balance: f64,
    /// Its drafted nodes' chances of acceptance, in its tree's order (each prefix a
    /// connected subtree).
    pub reach: &'a [f64],
    /// How far its expectations held in its earlier batched steps (see [`trust`]): its
    /// expected tokens are discounted by it.
    pub trust: f64,
    /// Whether its drafts may be cut (not relaxed, not forced).
    pub droppable: bool,
}

impl Member<'_> {
    /// Its drafted nodes and the tokens they are expected to add, with at most `most`
    /// kept when droppable.
    fn kept(&self, most: usize) -> (usize, f64) {
        let n = if self.droppable {
            most.min(self.reach.len())
        } else {
            self.reach.len()
        };
        (n, self.trust * self.reach[..n].iter().sum::<f64>())
    }
}

/// The step's forward cost without drafts (`c0`) and with the drafts it keeps (`c1`),
/// relative to one row.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Price {
    pub c0: f64,
    pub c1: f64,
}

impl Price {
    /// What a member that emitted `1 + accepted` tokens this step gained against the plain
    /// batch's step, with this step's allowance.
    pub(crate) fn credit(&self, accepted: usize) -> f64 {
        NOISE * self.c0 + (1.0 + accepted as f64) * self.c0 - self.c1
    }
}

/// Decides a batched step: `None` when fewer than two members decode (nothing to share);
/// else the most drafted nodes each droppable member may keep (`None`: all it planned),
/// the cap with the most tokens per cost of those every member affords, and the step's
/// price with it. `load` is the whole forward's as planned (prefill rows
/// and other inputs included).
pub(crate) fn judge(
    members: &[Member],
    load: &BatchLoad,
    cost: &CostModel,
) -> Option<(Option<usize>, Price)> {
    if members.len() < 2 {
        return None;
    }
    let ctx = load.mean_ctx();
    let drafted: usize = members.iter().map(|m| m.reach.len()).sum();
    let rows0 = load.rows - drafted;
    let c0 = cost.relative(rows0, ctx);
    // The price and the tokens expected with at most `most` nodes each, if every member
    // affords it.
    let afford = |most: usize| {
        let kept: Vec<(usize, f64)> = members.iter().map(|m| m.kept(most)).collect();
        let price = Price {
            c0,
            c1: cost.relative(rows0 + kept.iter().map(|k| k.0).sum::<usize>(), ctx),
        };
        let fair = members
            .iter()
            .zip(&kept)
            .all(|(m, k)| m.balance + (1.0 + k.1) * price.c0 - price.c1 >= 0.0);
        let tokens: f64 = kept.iter().map(|k| 1.0 + k.1).sum();
        fair.then_some((price, tokens))
    };
    // Of the caps every member affords, the one with the most tokens per cost.
    let deepest = members.iter().map(|m| m.reach.len()).max().unwrap_or(0);
    let best = (0..=deepest)
        .rev()
        .filter_map(|most| afford(most).map(|(price, tokens)| (most, price, tokens / price.c1)))
        .fold(None, |best: Option<(usize, Price, f64)>, c| match best {
            Some(b) if b.2 >= c.2 => Some(b),
            _ => Some(c),
        });
    Some(match best {
        Some((most, price, _)) => ((most < deepest).then_some(most), price),
        // Not even without droppable drafts (relaxed ones are kept whatever they cost).
        None => {
            let kept: usize = members.iter().map(|m| m.kept(0).0).sum();
            let c1 = cost.relative(rows0 + kept, ctx);
            (Some(0), Price { c0, c1 })
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A staircase like the 1.5B's with AMX tiles: 8 rows 2.2, 9..=12 rows 2.5.
    fn stairs() -> CostModel {
        CostModel::measured(&[(1, 1.0), (8, 2.2), (9, 2.5), (12, 2.6), (16, 3.0)]).unwrap()
    }

    fn load(rows: usize) -> BatchLoad {
        BatchLoad {
            rows,
            ctx_sum: rows * 100,
        }
    }

    /// A member with `drafted` nodes expected to add `expected` tokens in all.
    fn member(balance: f64, expected: f64, drafted: usize) -> Member<'static> {
        let reach = vec![expected / drafted.max(1) as f64; drafted];
        Member {
            balance,
            reach: Box::leak(reach.into_boxed_slice()),
            trust: 1.0,
            droppable: true,
        }
    }

    #[test]
    fn one_members_draft_in_a_batch_of_idle_members_is_dropped() {
        let mut m: Vec<Member> = (0..7).map(|_| member(0.0, 0.0, 0)).collect();
        m.push(member(0.0, 0.9, 1));
        let (most, price) = judge(&m, &load(9), &stairs()).unwrap();
        assert_eq!(most, Some(0));
        assert_eq!(price, Price { c0: 2.2, c1: 2.2 });
    }

    #[test]
    fn an_allowance_saved_up_pays_for_a_draft_now_and_then() {
        let cost = stairs();
        let m: Vec<Member> = (0..7)
            .map(|_| member(0.0, 0.0, 0))
            .chain([member(0.0, 3.0, 4)])
            .collect();
        // Four nodes likely to add 3 tokens pay for the batch (11 tokens for 2.6 against 8
        // for 2.2), not yet for the others.
        assert_eq!(judge(&m, &load(12), &cost).unwrap().0, Some(0));
        // Their allowance after enough plain steps covers the 0.4 that four rows cost.
        let steps = (0.4 / (NOISE * 2.2)).ceil() as usize;
        let mut m = m;
        for x in m.iter_mut().take(7) {
            x.balance = steps as f64 * NOISE * 2.2;
        }
        let (most, price) = judge(&m, &load(12), &cost).unwrap();
        assert_eq!(most, None);
        assert!((price.c1 - 2.6).abs() < 1e-9);
        // What an idle member is charged for it: the rows' cost less one step's allowance.
        assert!((price.credit(0) - (NOISE * 2.2 - 0.4)).abs() < 1e-9);
    }

    #[test]
    fn members_that_all_gain_keep_their_drafts() {
        let m: Vec<Member> = (0..8).map(|_| member(0.0, 0.5, 1)).collect();
        let (most, _) = judge(&m, &load(16), &stairs()).unwrap();
        assert_eq!(
            most, None,
            "each member's 1.5 tokens pay for 3.0 / 2.2 of the forward"
        );
        // Eight nodes each, the last ones unlikely: 72 rows cost 8.6 / 2.2 = 3.9 forwards
        // of eight for 3.3 tokens each; six each (56 rows) cost 3.2 for 3.2.
        let reach = vec![0.9, 0.7, 0.4, 0.1, 0.05, 0.05, 0.05, 0.05];
        let m: Vec<Member> = (0..8)
            .map(|_| Member {
                balance: 0.0,
                reach: &reach,
                trust: 1.0,
                droppable: true,
            })
            .collect();
        let (most, price) = judge(&m, &load(72), &stairs()).unwrap();
        let most = most.expect("cut");
        assert!((2..8).contains(&most), "{most}");
        assert!(price.c1 < 9.0);
    }

    #[test]
    fn members_whose_drafts_disappointed_in_the_batch_draft_less() {
        // Each member's one node pays at the rate it expects (1.5 tokens for 3.0 / 2.2 of
        // the forward) but not at half of it (1.25 tokens).
        let trusting: Vec<Member> = (0..8).map(|_| member(0.0, 0.5, 1)).collect();
        assert_eq!(judge(&trusting, &load(16), &stairs()).unwrap().0, None);
        // Earlier batched steps: 10 tokens expected, 4 accepted.
        let t = trust((10.0, 4.0));
        assert!((t - 0.5).abs() < 1e-9, "{t}");
        let wary: Vec<Member> = (0..8)
            .map(|_| Member {
                trust: t,
                ..member(0.0, 0.5, 1)
            })
            .collect();
        assert_eq!(judge(&wary, &load(16), &stairs()).unwrap().0, Some(0));
        // Trust starts full, and expectations that held (or did better) keep it so.
        assert_eq!(trust((0.0, 0.0)), 1.0);
        assert_eq!(trust((3.0, 5.0)), 1.0);
    }

    #[test]
    fn a_relaxed_members_drafts_stay_and_a_lone_member_is_its_own_judge() {
        let mut m: Vec<Member> = (0..7).map(|_| member(0.0, 0.0, 0)).collect();
        m.push(Member {
            droppable: false,
            ..member(0.0, 0.2, 4)
        });
        let (most, price) = judge(&m, &load(12), &stairs()).unwrap();
        assert_eq!(most, Some(0), "nothing droppable, and what is not stays");
        assert!((price.c1 - 2.6).abs() < 1e-9);
        assert!(judge(&[member(-5.0, 0.0, 3)], &load(4), &stairs()).is_none());
    }
}
