//! Every real drafter through strict verification on a small deterministic fake target:
//! speculative output equals plain output, greedy and sampled, whatever the prompt and
//! references. The fake target copies often (it tends to repeat an earlier token at a
//! fixed lag), so drafts are accepted as well as rejected.

use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use specdec_drafters::{
    Drafter, MixDrafter, ReferenceDrafter, SuffixDrafter, Trie, TrieConfig, TrieDrafter,
    TrieDrafterConfig,
};
use specdec_verify::{sample, verify_strict, Rng, SamplingParams};

use crate::common::check_tree;

const VOCAB: usize = 24;

/// Logits depend only on the token path: a favourite (the token `lag` back, or a hash)
/// plus hashed noise.
fn fake_logits(path: &[u32]) -> Vec<f32> {
    let mut h: u64 = 1469598103934665603;
    for &t in path.iter().rev().take(6) {
        h = (h ^ u64::from(t)).wrapping_mul(1099511628211);
    }
    let lag = 3 + (h % 5) as usize;
    let favourite = if path.len() > lag && !h.is_multiple_of(4) {
        path[path.len() - lag]
    } else {
        (h % VOCAB as u64) as u32
    };
    (0..VOCAB)
        .map(|i| {
            let x =
                (h ^ (i as u64).wrapping_mul(0x9E3779B97F4A7C15)).wrapping_mul(0xBF58476D1CE4E5B9);
            let noise = (x >> 40) as f32 / (1u64 << 24) as f32;
            noise * 2.0 + if i as u32 == favourite { 4.0 } else { 0.0 }
        })
        .collect()
}

fn plain(prompt: &[u32], n: usize, p: &SamplingParams) -> Vec<u32> {
    let mut rng = Rng::new(p.seed);
    let mut ctx = prompt.to_vec();
    for _ in 0..n {
        let t = sample(&fake_logits(&ctx), &ctx, p, rng.next_f64());
        ctx.push(t);
    }
    ctx.split_off(prompt.len())
}

/// The engine's step, on the fake target: `[last] + tree`, verified strictly.
fn speculative(
    d: &mut dyn Drafter,
    prompt: &[u32],
    refs: &[Vec<u32>],
    n: usize,
    p: &SamplingParams,
    budget: usize,
) -> (Vec<u32>, usize) {
    let mut rng = Rng::new(p.seed);
    let mut ctx = prompt.to_vec();
    let mut accepted = 0;
    d.begin(prompt, refs);
    while ctx.len() < prompt.len() + n {
        let tree = d.draft(&ctx, budget);
        check_tree(&tree, &ctx, budget);
        let logits: Vec<Vec<f32>> = (0..tree.len())
            .map(|i| fake_logits(&[ctx.clone(), tree.tokens_below_root(i)].concat()))
            .collect();
        let v = verify_strict(&tree, |i| &logits[i], &ctx, p, &mut rng);
        accepted += v.accepted.len();
        let emitted = v.emitted(&tree);
        d.observe(&emitted);
        ctx.extend(emitted);
    }
    let out = ctx[prompt.len()..prompt.len() + n].to_vec();
    d.end(&out);
    (out, accepted)
}

fn drafters(trie: &Arc<Mutex<Trie>>) -> Vec<Box<dyn Drafter>> {
    vec![
        Box::new(ReferenceDrafter::default()),
        Box::new(ReferenceDrafter::prompt_only()),
        Box::new(TrieDrafter::new(trie.clone(), TrieDrafterConfig::default())),
        Box::new(SuffixDrafter::default()),
        Box::new(MixDrafter::auto(Some(trie.clone()))),
    ]
}

fn tokens(max: usize) -> impl Strategy<Value = Vec<u32>> {
    prop::collection::vec(0..VOCAB as u32, 1..max)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn every_drafter_equals_plain_on_the_fake_target(
        prompt in tokens(40),
        refs in prop::collection::vec(tokens(60), 0..3),
        budget in 1usize..24,
        temperature in prop_oneof![Just(0.0f32), 0.3f32..1.5],
        top_p in prop_oneof![Just(1.0f32), 0.5f32..1.0],
        seed in any::<u64>(),
    ) {
        let p = SamplingParams { temperature, top_p, seed, ..SamplingParams::default() };
        let want = plain(&prompt, 40, &p);
        let trie = Arc::new(Mutex::new(Trie::new(TrieConfig::default())));
        // Twice, so the second pass drafts from a trie that saw the first's output.
        for _ in 0..2 {
            for mut d in drafters(&trie) {
                let (got, _) = speculative(d.as_mut(), &prompt, &refs, 40, &p, budget);
                prop_assert_eq!(&got, &want, "{}", d.name());
            }
        }
    }
}

#[test]
fn drafts_are_accepted_on_the_fake_target() {
    let prompt: Vec<u32> = (0..30).map(|i| (i * 7 % VOCAB) as u32).collect();
    let p = SamplingParams::default();
    let trie = Arc::new(Mutex::new(Trie::new(TrieConfig::default())));
    for mut d in drafters(&trie) {
        let (_, accepted) = speculative(d.as_mut(), &prompt, &[], 60, &p, 16);
        assert!(accepted > 0, "{} never had a draft accepted", d.name());
    }
}
