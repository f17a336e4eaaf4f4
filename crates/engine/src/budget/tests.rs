use specdec_drafters::{Meta, Source, TokenTree};

use super::policy::{PROBE_EVERY, PROBE_MAX_EVERY, PROBE_NODES, YOUNG_STEPS};
use super::*;

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
        .map(|_| p.trim(chain(8), 32, 100, &cost).drafted())
        .collect();
    assert!(
        kept.iter().filter(|&&k| k == 0).count() >= PROBE_EVERY - 1,
        "{kept:?}"
    );
    for _ in 0..60 {
        p.observe(&chain(16), &first(16));
    }
    assert!(p.trim(chain(16), 32, 100, &cost).drafted() >= 8);
}

#[test]
fn trimming_keeps_a_connected_prefix_in_dfs_order() {
    let mut p = BudgetPolicy::new(32);
    for _ in 0..30 {
        p.observe(&chain(4), &first(2));
    }
    let t = p.trim(chain(12), 32, 100, &CostModel::default());
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
    let fresh = BudgetPolicy::new(32).trim(chain(16), 32, 100, &cost);
    let mut informed = BudgetPolicy::inheriting(32, &memory);
    let kept = informed.trim(chain(16), 32, 100, &cost);
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
    let after = informed.trim(chain(16), 32, 100, &cost);
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
    let kept = |mut p: BudgetPolicy| p.trim(chain(16), 32, 100, &cost).drafted();
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

#[test]
fn failed_probes_back_off_and_an_accepted_probe_resets_them() {
    let cost = CostModel::default();
    let mut p = BudgetPolicy::new(32);
    for _ in 0..60 {
        p.observe(&chain(8), &[]);
    }
    // Steps between probes while every probe is rejected.
    let mut gaps = Vec::new();
    let mut since = 0;
    for _ in 0..400 {
        let t = p.trim(chain(8), 32, 100, &cost);
        since += 1;
        if t.drafted() > 0 {
            gaps.push(since);
            since = 0;
            p.observe(&t, &[]);
        }
    }
    assert_eq!(gaps[0], PROBE_EVERY, "{gaps:?}");
    assert!(gaps.windows(2).all(|w| w[1] >= w[0]), "{gaps:?}");
    assert_eq!(*gaps.last().unwrap(), PROBE_MAX_EVERY, "{gaps:?}");
    // A probe that is accepted brings the short wait back.
    let mut n = 0;
    let probe = loop {
        n += 1;
        let t = p.trim(chain(8), 32, 100, &cost);
        if t.drafted() > 0 {
            break t;
        }
    };
    assert!(n <= PROBE_MAX_EVERY);
    p.observe(&probe, &[1]);
    let next = (1..=PROBE_MAX_EVERY)
        .find(|_| p.trim(chain(8), 32, 100, &cost).drafted() > 0)
        .unwrap();
    assert!(next <= PROBE_EVERY, "{next}");
}

/// `chain(n)` with every node of `source` and the given score and match length.
fn chain_of(n: usize, source: Source, score: f32, match_len: u32) -> TokenTree {
    let mut t = TokenTree::rooted(u32::MAX);
    for i in 0..n {
        t.push(
            i as u32,
            Some(i as u32),
            Meta::copied(source, score, match_len),
        );
    }
    t
}

/// `p` after its request's first steps (see `YOUNG_STEPS`), which verify no weak guess.
fn grown(mut p: BudgetPolicy) -> BudgetPolicy {
    for _ in 0..YOUNG_STEPS {
        p.trim(TokenTree::rooted(u32::MAX), 32, 100, &CostModel::default());
    }
    p
}

#[test]
fn a_young_request_verifies_only_strong_or_learned_evidence() {
    let cost = CostModel::default();
    let kept = |p: &mut BudgetPolicy, t: TokenTree| p.trim(t, 32, 100, &cost).drafted();
    for (source, score, match_len) in [
        (Source::Prompt, 0.9, 2),
        (Source::Suffix, 0.9, 8),
        (Source::Trie, 0.7, 0),
    ] {
        let mut p = BudgetPolicy::new(32);
        for step in 0..YOUNG_STEPS {
            let k = kept(&mut p, chain_of(8, source, score, match_len));
            assert_eq!(k, 0, "{source:?} at step {step}");
        }
        assert!(
            kept(&mut p, chain_of(8, source, score, match_len)) > 0,
            "{source:?}"
        );
    }
    let mut p = BudgetPolicy::new(32);
    assert!(
        kept(&mut p, chain(8)) > 0,
        "a reference copy from the first step"
    );
    assert!(
        kept(&mut p, chain_of(8, Source::Prompt, 0.99, 300)) > 0,
        "a long prompt match from the first steps"
    );
    let mut p = BudgetPolicy::new(32);
    assert!(
        kept(&mut p, chain_of(8, Source::Trie, 0.9, 0)) > 0,
        "a confident trie path from the first step"
    );
    // Weak evidence learned to be accepted nearly always is verified from the first step.
    let mut p = BudgetPolicy::new(32);
    for _ in 0..40 {
        p.observe(&chain_of(8, Source::Prompt, 0.9, 2), &first(8));
    }
    assert!(kept(&mut p, chain_of(8, Source::Prompt, 0.9, 2)) > 0);
    // A request with references (a code edit's original) expects a long answer: its
    // weak guesses (the opening fence copied from the prompt) are tried from the start.
    let mut p = BudgetPolicy::new(32).predicted();
    assert!(kept(&mut p, chain_of(8, Source::Prompt, 0.9, 2)) > 0);
}

#[test]
fn failing_weak_guesses_make_a_sources_other_weak_guesses_pessimistic_not_its_long_matches() {
    let cost = CostModel::default();
    let kept = |p: &mut BudgetPolicy, t: TokenTree| p.trim(t, 32, 100, &cost).drafted();
    let mut p = grown(BudgetPolicy::new(32));
    // Short history matches (4-15 tokens) keep failing.
    for _ in 0..40 {
        p.observe(&chain_of(4, Source::History, 0.5, 6), &[]);
    }
    let fresh = kept(
        &mut grown(BudgetPolicy::new(32)),
        chain_of(8, Source::History, 0.5, 2),
    );
    // Another weak bucket of the same source (matches of 1-3 tokens) is not tried afresh.
    assert!(kept(&mut p, chain_of(8, Source::History, 0.5, 2)) < fresh.max(1));
    // Other sources keep their own priors.
    assert_eq!(
        kept(&mut p, chain_of(8, Source::Trie, 0.9, 0)),
        kept(
            &mut grown(BudgetPolicy::new(32)),
            chain_of(8, Source::Trie, 0.9, 0)
        )
    );
    // A long match (an exact repeat) is still trusted.
    assert!(kept(&mut p, chain_of(16, Source::History, 0.99, 300)) >= 4);
}

#[test]
fn a_measured_curve_prices_every_size_and_ignores_timings() {
    let points = [(1, 30.0), (2, 33.0), (4, 39.0), (16, 102.0)];
    let mut c = CostModel::measured(&points).unwrap();
    assert_eq!(c.one_row_ms(100), Some(30.0));
    assert!((c.relative(3, 100) - 36.0 / 30.0).abs() < 1e-9);
    assert!((c.relative(16, 5000) - 102.0 / 30.0).abs() < 1e-9);
    // Past the last point, along the last segment.
    assert!((c.ms(28, 100).unwrap() - (102.0 + 12.0 * 63.0 / 12.0)).abs() < 1e-9);
    c.observe(1, 100, 1e-3);
    assert_eq!(
        c.one_row_ms(100),
        Some(30.0),
        "a replay's timings are not learned"
    );
    assert!(CostModel::measured(&[(1, 30.0)]).is_none());
    assert!(CostModel::measured(&[(2, 30.0), (4, 40.0)]).is_none());
    assert!(CostModel::measured(&[(1, 0.0), (4, 40.0)]).is_none());
}

#[test]
fn unambiguous_copies_learn_their_own_acceptance() {
    // A short prompt match (score 0.33, no match length reported) whose every occurrence
    // continues alike is accepted deep; one among disagreeing occurrences never is. Kept
    // apart, each is trimmed by its own record.
    let copy = |unambiguous: bool| {
        let mut t = TokenTree::rooted(u32::MAX);
        for i in 0..8 {
            let meta = Meta {
                unambiguous,
                ..Meta::copied(Source::Prompt, 0.33, 0)
            };
            t.push(i as u32, Some(i as u32), meta);
        }
        t
    };
    let cost = CostModel::default();
    let mut p = grown(BudgetPolicy::new(32));
    for _ in 0..40 {
        p.observe(&copy(false), &[]);
        p.observe(&copy(true), &first(8));
    }
    assert!(p.trim(copy(true), 32, 100, &cost).drafted() >= 6);
    assert!(p.trim(copy(false), 32, 100, &cost).drafted() <= PROBE_NODES);
    // Strong evidence (a confident score, a long match) keeps its own buckets.
    use super::acceptance::{evidence_bucket, UNAMBIGUOUS};
    assert_eq!(evidence_bucket(0.33, 0, true), UNAMBIGUOUS);
    assert_eq!(evidence_bucket(0.9, 3, true), UNAMBIGUOUS);
    assert_eq!(
        evidence_bucket(0.9, 0, true),
        evidence_bucket(0.9, 0, false)
    );
    assert_eq!(
        evidence_bucket(0.9, 300, true),
        evidence_bucket(0.9, 300, false)
    );
}

#[test]
fn the_frozen_shape_in_a_batch_prices_a_node_at_the_batchs_share_of_a_token() {
    let alone = CostModel::frozen();
    let in_one = CostModel::frozen_in_batch(1);
    let in_eight = CostModel::frozen_in_batch(8);
    for ctx in [100, 1000] {
        for n in 1..40 {
            assert_eq!(in_one.relative(n, ctx), alone.relative(n, ctx));
            assert!(in_eight.relative(n + 1, ctx) > in_eight.relative(n, ctx));
        }
        assert_eq!(in_eight.relative(1, ctx), 1.0);
        // Among eight single rows a drafted node costs several times what it costs alone.
        let added = |m: &CostModel| m.relative(2, ctx) - 1.0;
        assert!(added(&in_eight) > 3.0 * added(&alone), "ctx {ctx}");
        assert!(
            added(&in_eight) < 1.0,
            "a node is still cheaper than a token"
        );
    }
    // A draft accepted half of the time pays alone, and not as one of eight members.
    let mut p = BudgetPolicy::new(32);
    for i in 0..60 {
        p.observe(&chain(4), &first(i % 2));
    }
    let kept = |cost: &CostModel| p.clone().trim(chain(4), 32, 100, cost).drafted();
    assert!(kept(&alone) > 0);
    assert!(
        kept(&in_eight) < kept(&alone),
        "{} {}",
        kept(&in_eight),
        kept(&alone)
    );
}
