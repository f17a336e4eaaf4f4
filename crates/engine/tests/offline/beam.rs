//! Constrained beam search on a deterministic fake target: plain search equals a direct
//! implementation of the definition (and exhaustive scoring when K covers the catalogue);
//! jump-forward and strict speculative search equal plain with good, partial and bad
//! drafts; relaxed search samples as the target does.

use std::sync::Mutex;

use specdec_engine::beam::{
    BeamOptions, BeamOutput, BeamRunner, BeamVerify, Catalogue, DraftScoring, Ranked,
};
use specdec_runtime::{
    FakeTarget, Logits, ModelConfig, RuntimeError, SeqInput, Sequence, Target, Want,
};

const VOCAB: usize = 40;
const END: u32 = 0;

fn fake() -> FakeTarget {
    FakeTarget::new(VOCAB, 512)
}

/// A catalogue of `n` random entries over tokens 1..VOCAB, 1 to `max_len` tokens, many
/// sharing prefixes (the first tokens come from a small set), each ending in `END`.
fn catalogue(seed: u64, n: usize, max_len: usize) -> (Catalogue, Vec<Vec<u32>>) {
    let mut rng = specdec_engine::Rng::new(seed);
    let mut seqs = Vec::new();
    for _ in 0..n {
        let len = 1 + (rng.next_u64() % max_len as u64) as usize;
        let mut s: Vec<u32> = (0..len)
            .map(|i| {
                let spread = if i < 2 { 4 } else { VOCAB as u64 - 1 };
                1 + (rng.next_u64() % spread) as u32
            })
            .collect();
        s.push(END);
        seqs.push(s);
    }
    (Catalogue::new(seqs.clone()).unwrap(), seqs)
}

/// The log-softmax normaliser the search uses (its own bits: a vectorized f32 `exp`).
fn lse(row: &[f32]) -> f64 {
    specdec_engine::beam::log_normaliser(row)
}

fn log_prob(t: &FakeTarget, prompt: &[u32], prefix: &[u32], token: u32) -> f64 {
    let mut path = prompt.to_vec();
    path.extend_from_slice(prefix);
    let row = t.logits(&path);
    row[token as usize] as f64 - lse(&row)
}

/// The plain constrained beam search of docs/recsys.md, written out directly on token paths.
fn reference(t: &FakeTarget, cat: &Catalogue, prompt: &[u32], k: usize) -> Vec<Ranked> {
    let mut live: Vec<(Vec<u32>, u32, f64)> = vec![(Vec::new(), Catalogue::ROOT, 0.0)];
    let mut finished: Vec<Ranked> = Vec::new();
    loop {
        let mut fs: Vec<f64> = finished.iter().map(|r| r.score).collect();
        fs.sort_by(|a, b| b.total_cmp(a));
        let done = live.is_empty() || (fs.len() >= k && live.iter().all(|b| b.2 <= fs[k - 1]));
        if done {
            break;
        }
        let mut cands: Vec<(Vec<u32>, u32, f64)> = Vec::new();
        for (tokens, node, score) in &live {
            for &(tok, child) in cat.children(*node) {
                let mut s = tokens.clone();
                s.push(tok);
                cands.push((s, child, score + log_prob(t, prompt, tokens, tok)));
            }
        }
        cands.sort_by(|a, b| b.2.total_cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
        cands.truncate(k);
        live.clear();
        for (tokens, node, score) in cands {
            match cat.ends_entry(node) {
                Some(entry) => finished.push(Ranked {
                    entry,
                    tokens,
                    score,
                }),
                None => live.push((tokens, node, score)),
            }
        }
    }
    finished.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| a.tokens.cmp(&b.tokens))
    });
    finished.truncate(k);
    finished
}

fn run(
    target: &dyn Target,
    draft: Option<&dyn Target>,
    cat: &Catalogue,
    prompts: &[Vec<u32>],
    opts: &BeamOptions,
) -> Vec<BeamOutput> {
    BeamRunner::new(target, draft)
        .unwrap()
        .frozen()
        .run(cat, prompts, opts)
        .unwrap()
}

fn prompts() -> Vec<Vec<u32>> {
    vec![vec![3, 7, 9], vec![5], vec![11, 12, 13, 14, 15, 16, 17]]
}

#[test]
fn plain_search_follows_the_definition() {
    let t = fake();
    for seed in 0..12 {
        let (cat, _) = catalogue(seed, 60, 6);
        for k in [1, 3, 5, 10] {
            let out = run(&t, None, &cat, &prompts(), &BeamOptions::plain(k));
            for (p, o) in prompts().iter().zip(&out) {
                assert_eq!(o.items, reference(&t, &cat, p, k), "seed {seed}, k {k}");
                assert!(o.items.len() == k.min(cat.len()));
            }
        }
    }
}

#[test]
fn k_covering_the_catalogue_is_exhaustive_scoring() {
    let t = fake();
    let (cat, _) = catalogue(99, 25, 5);
    let prompt = vec![4, 2];
    let mut want: Vec<(f64, Vec<u32>)> = (0..cat.len())
        .map(|e| {
            let toks = cat.entry(e);
            let score = (0..toks.len())
                .map(|i| log_prob(&t, &prompt, &toks[..i], toks[i]))
                .sum();
            (score, toks.to_vec())
        })
        .collect();
    want.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    // K larger than the catalogue: every entry comes back, once.
    let out = run(
        &t,
        None,
        &cat,
        &[prompt],
        &BeamOptions::plain(cat.len() + 7),
    );
    let got: Vec<(f64, Vec<u32>)> = out[0]
        .items
        .iter()
        .map(|r| (r.score, r.tokens.clone()))
        .collect();
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        // Summed in another order: equal to rounding.
        assert_eq!(g.1, w.1);
        assert!((g.0 - w.0).abs() < 1e-9, "{} vs {}", g.0, w.0);
    }
}

#[test]
fn jump_forward_and_strict_speculation_equal_plain_with_any_draft() {
    let t = fake();
    let partial = fake().with_noise_salt(0x5eed);
    let bad = fake().with_salt(0xbad);
    for seed in 0..8 {
        let (cat, _) = catalogue(100 + seed, 80, 8);
        for k in [1, 4, 10] {
            let plain = run(&t, None, &cat, &prompts(), &BeamOptions::plain(k));
            let jf = run(&t, None, &cat, &prompts(), &BeamOptions::jump_forward(k));
            for (p, j) in plain.iter().zip(&jf) {
                assert_eq!(p.items, j.items, "jump-forward, seed {seed}, k {k}");
                assert!(j.stats.target_forwards <= p.stats.target_forwards);
            }
            for (name, draft) in [("self", &t), ("partial", &partial), ("bad", &bad)] {
                for adaptive in [false, true] {
                    let mut opts = BeamOptions::speculative(k, BeamVerify::Strict);
                    let plan = opts.draft.as_mut().unwrap();
                    plan.adaptive = adaptive;
                    plan.max_beams = 2 * k;
                    let spec = run(&t, Some(draft), &cat, &prompts(), &opts);
                    for (p, s) in plain.iter().zip(&spec) {
                        assert_eq!(p.items, s.items, "{name} draft, seed {seed}, k {k}");
                        assert!(!s.stats.relaxed);
                    }
                    if name == "self" && !adaptive {
                        let (pf, sf): (usize, usize) = (
                            plain.iter().map(|o| o.stats.target_forwards).sum(),
                            spec.iter().map(|o| o.stats.target_forwards).sum(),
                        );
                        assert!(sf < pf, "a perfect draft saves forwards: {sf} vs {pf}");
                    }
                }
            }
        }
    }
}

#[test]
fn searches_batched_together_equal_searches_alone() {
    let t = fake();
    let d = fake().with_noise_salt(3);
    let (cat, _) = catalogue(7, 50, 6);
    let opts = BeamOptions::speculative(5, BeamVerify::Strict);
    let together = run(&t, Some(&d), &cat, &prompts(), &opts);
    for (p, o) in prompts().iter().zip(&together) {
        let alone = run(&t, Some(&d), &cat, std::slice::from_ref(p), &opts);
        assert_eq!(alone[0].items, o.items);
    }
}

#[test]
fn bad_requests_are_errors() {
    let t = fake();
    let (cat, _) = catalogue(1, 10, 3);
    let mut r = BeamRunner::new(&t, None).unwrap();
    assert!(r.run(&cat, &[vec![]], &BeamOptions::plain(3)).is_err());
    assert!(r.run(&cat, &[vec![1]], &BeamOptions::plain(0)).is_err());
    assert!(r
        .run(&cat, &[vec![VOCAB as u32]], &BeamOptions::plain(2))
        .is_err());
    let spec = BeamOptions::speculative(2, BeamVerify::Strict);
    assert!(r.run(&cat, &[vec![1]], &spec).is_err(), "no draft model");
    let other = FakeTarget::new(VOCAB + 1, 512);
    assert!(
        BeamRunner::new(&t, Some(&other)).is_err(),
        "another vocabulary"
    );
    // A draft whose context is too short for the prompt and an entry is refused up front.
    let short = FakeTarget::new(VOCAB, 16);
    let mut r2 = BeamRunner::new(&t, Some(&short)).unwrap();
    assert!(r2.run(&cat, &[vec![1; 12]], &spec).is_err());
    assert!(r2.run(&cat, &[vec![1; 12]], &BeamOptions::plain(2)).is_ok());
    let big = Catalogue::new(vec![vec![VOCAB as u32 + 5, END]]).unwrap();
    assert!(r.run(&big, &[vec![1]], &BeamOptions::plain(1)).is_err());
}

/// With K = 1 and one sampled draft beam, each relaxed step is speculative sampling:
/// the item is distributed as sampling the target constrained to the catalogue.
#[test]
fn relaxed_k1_samples_the_constrained_target() {
    let t = fake();
    let d = fake().with_noise_salt(77);
    let cat = Catalogue::new(vec![
        vec![1, 2, END],
        vec![1, 3, END],
        vec![1, 3, 4, END],
        vec![5, END],
        vec![5, 6, END],
        vec![7, 8, 9, END],
    ])
    .unwrap();
    let prompt = vec![10, 11];
    // Expected: the product of the target's catalogue-constrained conditionals.
    let mut expected = vec![0.0; cat.len()];
    for (e, p) in expected.iter_mut().enumerate() {
        let toks = cat.entry(e);
        let mut node = Catalogue::ROOT;
        let mut prob = 1.0;
        for i in 0..toks.len() {
            let allowed: Vec<u32> = cat.children(node).iter().map(|c| c.0).collect();
            let lps: Vec<f64> = allowed
                .iter()
                .map(|&a| log_prob(&t, &prompt, &toks[..i], a))
                .collect();
            let z: f64 = lps.iter().map(|l| l.exp()).sum();
            prob *= log_prob(&t, &prompt, &toks[..i], toks[i]).exp() / z;
            node = cat.child(node, toks[i]).unwrap();
        }
        *p = prob;
    }
    let draws = 3000;
    let mut counts = vec![0usize; cat.len()];
    let mut relaxed_seen = false;
    for seed in 0..draws {
        let mut opts = BeamOptions::speculative(1, BeamVerify::Relaxed { seed });
        let plan = opts.draft.as_mut().unwrap();
        plan.max_beams = 1;
        plan.adaptive = false;
        let out = run(&t, Some(&d), &cat, std::slice::from_ref(&prompt), &opts);
        relaxed_seen |= out[0].stats.relaxed;
        counts[out[0].items[0].entry] += 1;
    }
    assert!(relaxed_seen, "relaxed output says so");
    let chi2: f64 = counts
        .iter()
        .zip(&expected)
        .map(|(&c, &p)| {
            let e = p * draws as f64;
            (c as f64 - e).powi(2) / e
        })
        .sum();
    // 5 degrees of freedom: 20.5 is the 0.1% tail.
    assert!(
        chi2 < 20.5,
        "chi-square {chi2}: counts {counts:?}, expected {expected:?}"
    );
}

#[test]
fn one_prefill_serves_every_mode() {
    let t = fake();
    let d = fake().with_noise_salt(11);
    let (cat, _) = catalogue(21, 40, 6);
    let mut r = BeamRunner::new(&t, Some(&d)).unwrap().frozen();
    let pre = r.prefill(&prompts(), true).unwrap();
    for opts in [
        BeamOptions::plain(4),
        BeamOptions::jump_forward(4),
        BeamOptions::speculative(4, BeamVerify::Strict),
    ] {
        let fresh = run(&t, Some(&d), &cat, &prompts(), &opts);
        let again = r.run_prefilled(&cat, &pre, &opts).unwrap();
        for (a, b) in fresh.iter().zip(&again) {
            assert_eq!(a.items, b.items);
        }
    }
    let plain_only = r.prefill(&prompts(), false).unwrap();
    assert!(r
        .run_prefilled(
            &cat,
            &plain_only,
            &BeamOptions::speculative(4, BeamVerify::Strict)
        )
        .is_err());
}

#[test]
fn a_dear_draft_stops_drafting_part_way_and_the_list_stays_plain() {
    let t = fake();
    let bad = fake().with_salt(0xbad);
    let (cat, _) = catalogue(21, 80, 8);
    let mut opts = BeamOptions::speculative(4, BeamVerify::Strict);
    // Trees small enough to be worth a try at some acceptance (wider ones are priced out
    // before their forward).
    opts.draft.as_mut().unwrap().max_beams = 4;
    let mut runner = BeamRunner::new(&t, Some(&bad as &dyn Target))
        .unwrap()
        .frozen();
    let mut cut = 0;
    for i in 0..40u32 {
        let prompt = vec![vec![3 + i % 7, 7, 9 + i % 20]];
        let plain = run(&t, None, &cat, &prompt, &BeamOptions::plain(4));
        let spec = runner.run(&cat, &prompt, &opts).unwrap();
        assert_eq!(plain[0].items, spec[0].items, "search {i}");
        cut += spec[0].stats.draft_cut as usize;
    }
    assert!(cut > 0, "a draft that never helps is cut in some trial");
}

/// With the runtime's cost shape, a 20-beam tree costs more per step than jump-forward
/// even if all of it were accepted: the searches drop such trees before the target's
/// forward (a perfect draft included), and the lists stay plain's.
#[test]
fn a_tree_that_cannot_pay_is_priced_out_before_its_forward() {
    let t = fake();
    let (cat, _) = catalogue(23, 80, 8);
    let opts = BeamOptions::speculative(4, BeamVerify::Strict);
    let mut runner = BeamRunner::new(&t, Some(&t as &dyn Target))
        .unwrap()
        .frozen();
    let mut priced = 0;
    for i in 0..30u32 {
        let prompt = vec![vec![3 + i % 7, 7, 9 + i % 20]];
        let plain = run(&t, None, &cat, &prompt, &BeamOptions::plain(4));
        let spec = runner.run(&cat, &prompt, &opts).unwrap();
        assert_eq!(plain[0].items, spec[0].items, "search {i}");
        let s = &spec[0].stats;
        if s.draft_priced_out {
            priced += 1;
            assert!(s.draft_forwards > 1, "search {i} drafted before pricing");
        }
    }
    assert!(priced > 0, "no 20-beam tree was priced out");
    // A fixed plan is what it says: never priced.
    let mut fixed = opts.clone();
    fixed.draft.as_mut().unwrap().adaptive = false;
    let out = runner.run(&cat, &[vec![3, 7, 9]], &fixed).unwrap();
    assert!(!out[0].stats.draft_priced_out);
}

/// A draft that records what each of its forwards asked for.
struct Recording {
    inner: FakeTarget,
    wants: Mutex<Vec<Want>>,
}

impl Target for Recording {
    fn config(&self) -> &ModelConfig {
        self.inner.config()
    }

    fn new_sequence(&self) -> Sequence {
        self.inner.new_sequence()
    }

    fn forward(&self, inputs: &mut [SeqInput<'_>]) -> Result<Vec<Logits>, RuntimeError> {
        let mut wants = self.wants.lock().unwrap();
        wants.extend(inputs.iter().map(|i| i.want.clone()));
        drop(wants);
        self.inner.forward(inputs)
    }
}

/// A catalogue-scored draft asks only for trie children's logits (prefill none) and
/// changes nothing strict search returns; relaxed search runs on it and says so.
#[test]
fn catalogue_scored_drafts_keep_strict_search_exact() {
    let t = fake();
    for (salt, seed) in [(0, 0), (0x5eed, 1), (0xbad, 2)] {
        let d = Recording {
            inner: fake().with_noise_salt(salt),
            wants: Mutex::new(Vec::new()),
        };
        let (cat, _) = catalogue(300 + seed, 80, 8);
        for k in [1, 4, 10] {
            let plain = run(&t, None, &cat, &prompts(), &BeamOptions::plain(k));
            for adaptive in [false, true] {
                let mut opts = BeamOptions::speculative(k, BeamVerify::Strict);
                let plan = opts.draft.as_mut().unwrap();
                plan.adaptive = adaptive;
                plan.max_beams = 2 * k;
                let mut r = BeamRunner::new(&t, Some(&d as &dyn Target))
                    .unwrap()
                    .with_draft_scoring(DraftScoring::Catalogue)
                    .frozen();
                let spec = r.run(&cat, &prompts(), &opts).unwrap();
                for (p, s) in plain.iter().zip(&spec) {
                    assert_eq!(p.items, s.items, "salt {salt:x}, k {k}");
                    assert!(!s.stats.relaxed);
                }
                // The same prefill serves a second search.
                let pre = r.prefill(&prompts(), true).unwrap();
                let again = r.run_prefilled(&cat, &pre, &opts).unwrap();
                for (p, a) in plain.iter().zip(&again) {
                    assert_eq!(p.items, a.items);
                }
                let relaxed = BeamOptions::speculative(k, BeamVerify::Relaxed { seed });
                for o in r.run(&cat, &prompts(), &relaxed).unwrap() {
                    assert!(o.stats.relaxed);
                    assert_eq!(o.items.len(), k.min(cat.len()));
                }
            }
        }
        let wants = d.wants.lock().unwrap();
        assert!(wants.iter().any(|w| w.columns().is_some()), "it drafted");
        assert!(
            wants
                .iter()
                .all(|w| matches!(w, Want::None | Want::LastColumns(_))),
            "a catalogue-scored draft never computes a full row"
        );
        let widest = wants
            .iter()
            .filter_map(Want::columns)
            .map(<[u32]>::len)
            .max();
        assert!(widest.unwrap() < VOCAB);
    }
}
