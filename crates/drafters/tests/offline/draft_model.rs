//! The draft-model drafter on fake models: its trees are well formed and carry the
//! draft's probabilities; its cache follows the context through accepted, rejected and
//! skipped steps, so it drafts exactly what a fresh drafter would.

use std::sync::Arc;

use specdec_drafters::{Drafter, ModelDrafter, ModelDrafterConfig, Source};
use specdec_runtime::{FakeTarget, Target};

const VOCAB: usize = 64;

fn draft_model() -> Arc<dyn Target> {
    Arc::new(FakeTarget::new(VOCAB, 4096).with_noise_salt(3))
}

/// Always as deep as allowed, no alternatives: the tree is the draft's greedy chain,
/// whatever it learned, so two drafters can be compared node for node.
fn chain_only(depth: usize) -> ModelDrafterConfig {
    ModelDrafterConfig {
        max_depth: depth,
        max_siblings: 0,
        cost_ratio: 0.0,
        row_cost: 0.0,
        measure: false,
        undrafted_steps: 0,
        ..ModelDrafterConfig::default()
    }
}

/// The draft's greedy continuation of `context`, `n` tokens.
fn greedy(model: &FakeTarget, context: &[u32], n: usize) -> Vec<u32> {
    let mut path = context.to_vec();
    for _ in 0..n {
        let l = model.logits(&path);
        let best = (0..l.len()).fold(0, |b, i| if l[i] > l[b] { i } else { b });
        path.push(best as u32);
    }
    path.split_off(context.len())
}

#[test]
fn the_chain_is_the_drafts_greedy_continuation_with_its_probabilities() {
    let fake = FakeTarget::new(VOCAB, 4096).with_noise_salt(3);
    let mut d = ModelDrafter::new(Arc::new(fake.clone()), chain_only(5));
    let prompt: Vec<u32> = (0..40).map(|i| (i * 7 % 60) as u32).collect();
    d.begin(&prompt, &[]);
    let tree = d.draft(&prompt, 16);
    tree.check_dfs().unwrap();
    assert!(tree.is_rooted_at(*prompt.last().unwrap()));
    let chain: Vec<u32> = (1..tree.len()).map(|i| tree.token(i)).collect();
    assert_eq!(chain, greedy(&fake, &prompt, 5));
    for (i, m) in tree.meta().iter().enumerate().skip(1) {
        assert_eq!(m.source, Source::Model);
        let lp = m
            .logprob
            .expect("a draft model's node has its log-probability");
        assert!(lp <= 0.0 && lp.is_finite());
        // Scores are reach estimates: never above the parent's.
        let p = tree.parent(i).unwrap();
        assert!(p == 0 || m.score <= tree.meta()[p].score);
    }
}

#[test]
fn alternatives_hang_beside_the_chain_in_dfs_order_within_budget() {
    let config = ModelDrafterConfig {
        max_siblings: 3,
        min_sibling: 0.0,
        vocab_limit: VOCAB,
        ..chain_only(6)
    };
    let mut d = ModelDrafter::new(draft_model(), config);
    let prompt: Vec<u32> = (0..30).map(|i| (i * 5 % 60) as u32).collect();
    d.begin(&prompt, &[]);
    for budget in [1, 2, 5, 9, 40] {
        let tree = d.draft(&prompt, budget);
        tree.check_dfs().unwrap();
        assert!(tree.drafted() <= budget, "{budget}: {}", tree.drafted());
        if budget >= 24 {
            assert_eq!(tree.drafted(), 6 + 6 * 3);
        }
    }
}

#[test]
fn tokens_at_or_above_the_vocabulary_limit_are_never_drafted() {
    let config = ModelDrafterConfig {
        vocab_limit: 10,
        max_siblings: 4,
        min_sibling: 0.0,
        cost_ratio: 0.0,
        ..chain_only(6)
    };
    let mut d = ModelDrafter::new(draft_model(), config);
    let prompt: Vec<u32> = (0..20).map(|i| (i * 3 % 60) as u32).collect();
    d.begin(&prompt, &[]);
    let tree = d.draft(&prompt, 32);
    assert!(tree.drafted() > 0);
    assert!((1..tree.len()).all(|i| tree.token(i) < 10));
}

/// Whatever the target did with the last draft (took all of it, part, none, or the step
/// was not drafted at all), the next draft is the one a fresh drafter makes for the same
/// context: the cache was rolled back and caught up, not left with rejected tokens.
#[test]
fn the_cache_follows_the_context_through_accepts_rejects_and_gaps() {
    let fake = FakeTarget::new(VOCAB, 4096).with_noise_salt(3);
    let mut d = ModelDrafter::new(Arc::new(fake.clone()), chain_only(4));
    let mut context: Vec<u32> = (0..25).map(|i| (i * 11 % 60) as u32).collect();
    d.begin(&context, &[]);
    let mut rng = 0x9e37_79b9_u64;
    for step in 0..40 {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let skip = step % 7 == 3;
        let mut emitted = Vec::new();
        if !skip {
            let tree = d.draft(&context, 8);
            let mut fresh = ModelDrafter::new(Arc::new(fake.clone()), chain_only(4));
            fresh.begin(&context, &[]);
            // Tokens and shape (scores differ: the first has calibrated its probabilities).
            assert_eq!(
                tree.nodes(),
                fresh.draft(&context, 8).nodes(),
                "step {step}"
            );
            // Accept a random prefix of the chain, then a bonus token.
            let take = (rng >> 33) as usize % (tree.drafted() + 1);
            emitted.extend((1..=take).map(|i| tree.token(i)));
        }
        emitted.push((rng >> 40) as u32 % VOCAB as u32);
        context.extend(&emitted);
        d.observe(&emitted);
    }
}

#[test]
fn the_first_steps_of_a_request_are_not_drafted() {
    let config = ModelDrafterConfig {
        undrafted_steps: 1,
        ..chain_only(4)
    };
    let mut d = ModelDrafter::new(draft_model(), config);
    let mut context: Vec<u32> = (0..20).map(|i| (i * 3 % 60) as u32).collect();
    d.begin(&context, &[]);
    assert_eq!(d.draft(&context, 8).drafted(), 0);
    context.push(9);
    d.observe(&[9]);
    assert_eq!(d.draft(&context, 8).drafted(), 4);
}

#[test]
fn an_empty_context_or_budget_gives_an_undrafted_tree() {
    let mut d = ModelDrafter::new(draft_model(), chain_only(4));
    d.begin(&[], &[]);
    assert!(d.draft(&[], 8).is_empty());
    let tree = d.draft(&[5, 6], 0);
    assert_eq!(tree.len(), 1);
}

#[test]
fn a_chain_ends_at_a_stop_token() {
    let fake = FakeTarget::new(VOCAB, 4096).with_noise_salt(3);
    let prompt: Vec<u32> = (0..30).map(|i| (i * 7 % 60) as u32).collect();
    let continuation = greedy(&fake, &prompt, 6);
    let stop = continuation[2];
    let config = ModelDrafterConfig {
        stop_tokens: vec![stop],
        ..chain_only(6)
    };
    let mut d = ModelDrafter::new(Arc::new(fake), config);
    d.begin(&prompt, &[]);
    let tree = d.draft(&prompt, 16);
    let chain: Vec<u32> = (1..tree.len()).map(|i| tree.token(i)).collect();
    let end = continuation.iter().position(|&t| t == stop).unwrap();
    assert_eq!(chain, continuation[..=end]);
}
