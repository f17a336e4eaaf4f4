use super::*;
use proptest::prelude::{prop_assert_eq, prop_oneof, proptest, Just, ProptestConfig};
use specdec_tree::{Meta, Source};

/// A deterministic fake target: logits depend only on the token path, like a real model.
fn fake_logits(path: &[u32], vocab: usize) -> Vec<f32> {
    let mut h: u64 = 1469598103934665603;
    for &t in path {
        h = (h ^ t as u64).wrapping_mul(1099511628211);
    }
    (0..vocab)
        .map(|i| {
            let x =
                (h ^ (i as u64).wrapping_mul(0x9E3779B97F4A7C15)).wrapping_mul(0xBF58476D1CE4E5B9);
            ((x >> 40) as f32 / (1u64 << 24) as f32) * 6.0
        })
        .collect()
}

/// Plain decoding with the fake target: n tokens after `context`.
fn plain(context: &[u32], n: usize, p: &SamplingParams, vocab: usize) -> Vec<u32> {
    let mut rng = Rng::new(p.seed);
    let mut ctx = context.to_vec();
    for _ in 0..n {
        let t = sample(&fake_logits(&ctx, vocab), &ctx, p, rng.next_f64());
        ctx.push(t);
    }
    ctx[context.len()..].to_vec()
}

/// Speculative decoding with random trees; returns n tokens.
fn speculative(
    context: &[u32],
    n: usize,
    p: &SamplingParams,
    vocab: usize,
    trees: &mut impl FnMut(&[u32]) -> TokenTree,
) -> Vec<u32> {
    let mut rng = Rng::new(p.seed);
    let mut ctx = context.to_vec();
    while ctx.len() < context.len() + n {
        let tree = trees(&ctx);
        // Logits of node i: the model's view of context + the node's draft path.
        let node_logits: Vec<Vec<f32>> = (0..tree.len())
            .map(|i| fake_logits(&[ctx.clone(), tree.tokens_below_root(i)].concat(), vocab))
            .collect();
        let v = verify_strict(&tree, |i| &node_logits[i], &ctx, p, &mut rng);
        ctx.extend(v.emitted(&tree));
    }
    ctx[context.len()..context.len() + n].to_vec()
}

/// A tree rooted at `pending` with `n` drafted nodes.
fn random_draft(pending: u32, seed: u64, vocab: u32, n: usize, good: &[u32]) -> TokenTree {
    // A chain following the true continuation (when known) plus random side branches.
    let meta = Meta::drafted(Source::Trie, 0.5);
    let mut out = TokenTree::rooted(pending);
    let mut r = Rng::new(seed);
    for (i, &g) in good.iter().take(n / 2).enumerate() {
        out.push(g, Some(i as u32), meta);
    }
    while out.drafted() < n {
        let parent = if out.drafted() == 0 || r.next_u64().is_multiple_of(3) {
            0
        } else {
            1 + (r.next_u64() % out.drafted() as u64) as usize
        };
        let tok = (r.next_u64() % vocab as u64) as u32;
        if out.child_with(Some(parent), tok).is_none() {
            out.push(tok, Some(parent as u32), meta);
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn speculative_equals_plain_greedy_and_sampled(
        seed in 0u64..1000,
        temperature in prop_oneof![Just(0.0f32), 0.3f32..1.5],
        top_p in 0.5f32..=1.0,
        top_k in 0usize..20,
        draft_len in 0usize..12,
    ) {
        let vocab = 24;
        let p = SamplingParams { temperature, top_p, top_k, seed, repetition_penalty: 1.1, ..Default::default() };
        let context = [3u32, 1, 4, 1, 5];
        let want = plain(&context, 30, &p, vocab);
        let mut step = 0u64;
        let got = speculative(&context, 30, &p, vocab, &mut |ctx: &[u32]| {
            step += 1;
            // Half the steps know part of the true continuation, so paths get accepted.
            let done = ctx.len() - context.len();
            let good: Vec<u32> = if step.is_multiple_of(2) { want[done..].to_vec() } else { vec![] };
            random_draft(*ctx.last().unwrap(), seed * 31 + step, vocab as u32, draft_len, &good)
        });
        prop_assert_eq!(got, want);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Where the rule says argmaxes suffice, verifying from them gives strict's verdict.
    #[test]
    fn greedy_from_argmaxes_equals_strict_from_rows(
        seed in 0u64..1000,
        top_k in prop_oneof![Just(0usize), Just(1)],
        draft_len in 0usize..16,
    ) {
        let vocab = 24;
        let p = SamplingParams { top_k, seed, ..Default::default() };
        assert!(Acceptance::Strict.argmax_suffices(&p));
        let ctx = [3u32, 1, 4, 1, 5];
        let good = plain(&ctx, 8, &p, vocab);
        let tree = random_draft(5, seed, vocab as u32, draft_len, &good);
        let rows: Vec<Vec<f32>> = (0..tree.len())
            .map(|i| fake_logits(&[ctx.to_vec(), tree.tokens_below_root(i)].concat(), vocab))
            .collect();
        let strict = verify_strict(&tree, |i| &rows[i], &ctx, &p, &mut Rng::new(seed));
        let from_ids = verify_greedy_argmax(&tree, |i| argmax(&rows[i]));
        prop_assert_eq!(strict.emitted(&tree), from_ids.emitted(&tree));
        prop_assert_eq!(strict.accepted, from_ids.accepted);
    }
}

#[test]
fn argmaxes_suffice_only_for_strict_greedy_without_penalty() {
    let greedy = SamplingParams::default();
    assert!(Acceptance::Strict.argmax_suffices(&greedy));
    let penalised = SamplingParams {
        repetition_penalty: 1.1,
        ..greedy.clone()
    };
    assert!(!Acceptance::Strict.argmax_suffices(&penalised));
    let sampled = SamplingParams {
        temperature: 0.7,
        ..greedy.clone()
    };
    assert!(!Acceptance::Strict.argmax_suffices(&sampled));
    let relaxed = Acceptance::Relaxed(Relaxed::new(2, 0.1).unwrap());
    assert!(!relaxed.argmax_suffices(&greedy));
}

#[test]
fn greedy_walk_accepts_the_matching_branch() {
    // root -> a(1) -> b(2); root -> c(3)
    let meta = Meta::drafted(Source::Trie, 0.5);
    let mut tree = TokenTree::rooted(0);
    tree.push(10, Some(0), meta);
    tree.push(11, Some(1), meta);
    tree.push(12, Some(0), meta);
    let v = walk(&tree, |node, _| match node {
        0 => 10,
        1 => 11,
        _ => 99,
    });
    assert_eq!(v.accepted, vec![1, 2]);
    assert_eq!(v.bonus, 99);
    assert_eq!(v.emitted(&tree), vec![10, 11, 99]);
    let v = walk(&tree, |_, _| 12);
    assert_eq!(
        v,
        Verdict {
            accepted: vec![3],
            bonus: 12,
            relaxed: 0,
        }
    );
}

/// With a draft that is never right, the sampling verifier still samples the target's
/// distribution: frequencies of the first emitted token follow the softmax.
#[test]
fn sampling_verifier_reproduces_the_target_distribution() {
    let logits = [0.0f32, 1.0, 2.0, 0.5];
    let p = SamplingParams {
        temperature: 0.8,
        top_p: 0.95,
        seed: 0,
        ..Default::default()
    };
    let dist = distribution(&logits, &[], &p);
    let meta = Meta::drafted(Source::Trie, 0.5);
    let mut tree = TokenTree::rooted(0);
    tree.push(1, Some(0), meta);
    tree.push(2, Some(0), meta);
    let mut rng = Rng::new(99);
    let n = 40_000;
    let mut counts = [0f64; 4];
    for _ in 0..n {
        let v = verify_strict(&tree, |_| &logits, &[], &p, &mut rng);
        counts[v.emitted(&tree)[0] as usize] += 1.0;
    }
    let mut chi2 = 0.0;
    for &(t, pr) in &dist {
        let e = pr as f64 * n as f64;
        chi2 += (counts[t as usize] - e).powi(2) / e;
    }
    // 3 degrees of freedom at most; 16.3 is the 0.1% critical value.
    assert!(chi2 < 16.3, "chi2 {chi2}, counts {counts:?}, dist {dist:?}");
}

/// A rule may accept a child other than the target's choice; the verdict counts those.
#[test]
fn a_rule_chooses_among_children_and_the_verdict_counts_relaxed_tokens() {
    let meta = specdec_tree::Meta::drafted(specdec_tree::Source::Trie, 0.5);
    let mut tree = TokenTree::rooted(1);
    let a = tree.push(10, Some(0), meta);
    tree.push(20, Some(0), meta);
    tree.push(11, Some(a), meta);
    // At the root the target wanted 20 but the rule takes 10 (relaxed); then strict.
    let v = crate::walk_with(&tree, |node, _| match node {
        0 => crate::Step::Descend {
            child: 1,
            relaxed: true,
        },
        n => crate::Step::strict(&tree, n, if n == 1 { 11 } else { 7 }),
    });
    assert_eq!(v.accepted, vec![1, 3]);
    assert_eq!(v.relaxed, 1);
    assert_eq!(v.emitted(&tree), vec![10, 11, 7]);
    assert!(!crate::Acceptance::Strict.is_relaxed());
}
