//! The suffix automaton and drafter against brute force.

use proptest::collection::vec;
use proptest::prelude::*;
use specdec_drafters::*;

use crate::common::{check_tree, leaf_paths};

/// End positions (inclusive) of `pat` in `doc`.
fn ends_in(doc: &[u32], pat: &[u32]) -> Vec<usize> {
    if pat.is_empty() || pat.len() > doc.len() {
        return Vec::new();
    }
    (pat.len() - 1..doc.len())
        .filter(|&e| doc[e + 1 - pat.len()..=e] == *pat)
        .collect()
}

/// Longest suffix of `ctx` occurring in a reference or in `ctx` ending before its last
/// token.
fn brute_match(refs: &[Vec<u32>], ctx: &[u32]) -> usize {
    let n = ctx.len();
    (1..=n)
        .rev()
        .find(|&l| {
            let s = &ctx[n - l..];
            refs.iter().any(|r| !ends_in(r, s).is_empty())
                || ends_in(&ctx[..n - 1], s).iter().any(|&e| e + 1 < n)
        })
        .unwrap_or(0)
}

/// What follows each occurrence of `ctx`'s suffix of length `l` (references plainly; the
/// context itself with periodic extension past its end), `max` tokens.
fn continuations(refs: &[Vec<u32>], ctx: &[u32], l: usize, max: usize) -> Vec<Vec<u32>> {
    let n = ctx.len();
    let s = &ctx[n - l..];
    let mut out = Vec::new();
    for r in refs {
        for e in ends_in(r, s) {
            out.push(r[e + 1..(e + 1 + max).min(r.len())].to_vec());
        }
    }
    for e in ends_in(&ctx[..n - 1], s) {
        let mut v = ctx.to_vec();
        let period = n - (e + 1);
        while v.len() < e + 1 + max {
            v.push(v[v.len() - period]);
        }
        out.push(v[e + 1..e + 1 + max].to_vec());
    }
    out
}

fn token() -> impl Strategy<Value = u32> {
    0u32..4
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn longest_match_equals_brute_force_and_drafts_follow_an_occurrence(
        refs in vec(vec(token(), 0..30), 0..3),
        prompt in vec(token(), 1..20),
        output in vec(token(), 0..60),
        chunk in 1usize..4,
    ) {
        // Unbounded recent-end upkeep makes "most recent" exact, so the check below is too.
        let chain = SuffixConfig {
            extra_branches: 0,
            recent_depth: usize::MAX,
            ..SuffixConfig::default()
        };
        let mut one = SuffixDrafter::new(chain.clone());
        let mut many = SuffixDrafter::default();
        one.begin(&prompt, &refs);
        many.begin(&prompt, &refs);
        let mut ctx = prompt.clone();
        let mut rest = &output[..];
        loop {
            let l = brute_match(&refs, &ctx);
            prop_assert_eq!(one.match_len(), l);
            prop_assert_eq!(many.match_len(), l);
            // A single chain: exactly the continuation after an occurrence of the match.
            let tree = one.draft(&ctx, 32);
            check_tree(&tree, &ctx, 32);
            let path = leaf_paths(&tree);
            prop_assert!(path.len() <= 1);
            if l == 0 {
                prop_assert_eq!(tree.drafted(), 0);
            } else if let Some(p) = path.first() {
                // Usually the whole match (k = l); a shorter suffix when every occurrence
                // the automaton remembers ends a reference.
                let ok = (1..=l).rev().any(|k| {
                    let max = ((chain.alpha * k as f32).ceil() as usize)
                        .clamp(chain.min_draft, chain.max_draft);
                    continuations(&refs, &ctx, k, max).iter().any(|c| c == p)
                });
                prop_assert!(ok, "{:?} follows no occurrence", p);
                // The newest occurrence of the whole match is followed whenever one lies
                // in the context (those always have a continuation).
                let n = ctx.len();
                if !ends_in(&ctx[..n - 1], &ctx[n - l..]).is_empty() {
                    let max = ((chain.alpha * l as f32).ceil() as usize)
                        .clamp(chain.min_draft, chain.max_draft);
                    let conts = continuations(&refs, &ctx, l, max);
                    prop_assert!(conts.contains(p), "{:?} does not follow the whole match", p);
                }
            }
            // With branches: every branch follows an occurrence of some suffix.
            let tree = many.draft(&ctx, 24);
            check_tree(&tree, &ctx, 24);
            for p in leaf_paths(&tree) {
                let ok = (1..=l).any(|k| {
                    continuations(&refs, &ctx, k, 64).iter().any(|c| c.starts_with(&p))
                });
                prop_assert!(ok, "branch {:?} follows no occurrence", p);
            }
            if rest.is_empty() {
                break;
            }
            let k = chunk.min(rest.len());
            one.observe(&rest[..k]);
            many.observe(&rest[..k]);
            ctx.extend(&rest[..k]);
            rest = &rest[k..];
        }
    }

    #[test]
    fn automaton_recognizes_exactly_the_substrings_of_each_document(
        docs in vec(vec(token(), 0..25), 1..4),
        probes in vec(vec(token(), 1..6), 1..40),
    ) {
        let mut sam = SuffixAutomaton::new(4);
        let mut starts = Vec::new();
        for d in &docs {
            sam.start_document();
            starts.push(sam.text().len());
            for &t in d {
                sam.push(t);
            }
        }
        // Probe random strings and every window crossing a document boundary.
        let all: Vec<u32> = docs.concat();
        let mut pats = probes.clone();
        for w in 1..6 {
            pats.extend(all.windows(w).map(|x| x.to_vec()));
        }
        for pat in pats {
            let state = pat.iter().try_fold(0, |s, &t| sam.next(s, t));
            let mut ends: Vec<usize> = Vec::new();
            for (d, &s) in docs.iter().zip(&starts) {
                ends.extend(ends_in(d, &pat).into_iter().map(|e| e + s));
            }
            prop_assert_eq!(state.is_some(), !ends.is_empty(), "{:?}", pat);
            if let Some(st) = state {
                prop_assert_eq!(sam.first_end(st), ends.first().copied());
                let r = sam.recent_end(st).unwrap();
                prop_assert!(ends.contains(&r));
                let (a, b) = sam.document_of(r);
                prop_assert!(a <= r && r < b);
            }
        }
        prop_assert!(sam.num_states() <= 2 * all.len().max(1) + docs.len());
    }
}

#[test]
fn recent_end_prefers_the_newest_occurrence() {
    // "7 8" occurs three times; the draft should copy what followed the last one.
    let prompt = [7, 8, 1, 0, 7, 8, 2, 0, 7, 8, 3, 0, 5, 7];
    let mut d = SuffixDrafter::new(SuffixConfig {
        extra_branches: 0,
        ..SuffixConfig::default()
    });
    d.begin(&prompt, &[]);
    let mut ctx = prompt.to_vec();
    ctx.push(8);
    d.observe(&[8]);
    let tree = d.draft(&ctx, 8);
    assert_eq!(tree.token(1), 3);
    assert_eq!(tree.meta()[1].source, Source::Suffix);
}

#[test]
fn draft_length_grows_with_the_match() {
    let reference: Vec<u32> = (100..200).collect();
    let mut d = SuffixDrafter::new(SuffixConfig {
        extra_branches: 0,
        ..SuffixConfig::default()
    });
    d.begin(&[1, 100], std::slice::from_ref(&reference));
    let mut ctx = vec![1, 100];
    let mut lens = Vec::new();
    for t in 101..110 {
        lens.push(d.draft(&ctx, 64).drafted());
        d.observe(&[t]);
        ctx.push(t);
    }
    assert!(lens.windows(2).all(|w| w[0] <= w[1]), "{lens:?}");
    assert_eq!(lens[0], 2);
    assert_eq!(*lens.last().unwrap(), 18);
}

/// A state's transitions were one sorted list, and adding one moved every later one: a
/// state of out-degree `k` took time quadratic in `k` to fill, and the root's out-degree
/// is the vocabulary (a 1M-token history of a 151k-token vocabulary took 2.7 s to load).
/// Here the root and the state of token 0 each get 400,000 transitions; every one must be
/// found, in a time far below the quadratic one (tens of seconds).
#[test]
fn states_of_large_out_degree_fill_in_linear_time_and_find_every_transition() {
    const N: u32 = 400_000;
    let t0 = std::time::Instant::now();
    let mut sam = SuffixAutomaton::new(0);
    // Token 0 followed by every other token, in a scattered order (7919 is prime and
    // does not divide N, so this is a permutation).
    for i in 0..N {
        let t = 1 + (u64::from(i) * 7919 % u64::from(N)) as u32;
        sam.start_document();
        sam.push(0);
        sam.push(t);
    }
    let built = t0.elapsed();
    let after_zero = sam.next(0, 0).expect("token 0 is there");
    for t in 1..=N {
        // "t" only ever follows 0, so "t" and "0 t" end at the same place: one state.
        let s = sam.next(0, t).expect("every token from the root");
        assert_eq!(sam.next(after_zero, t), Some(s), "every token after 0");
        assert_eq!(sam.next(s, 0), None);
    }
    assert_eq!(sam.next(0, N + 1), None);
    assert_eq!(sam.next(after_zero, 0), None);
    assert_eq!(sam.transitions(0).len(), N as usize + 1);
    let bound = std::time::Duration::from_secs(if cfg!(debug_assertions) { 60 } else { 5 });
    assert!(built < bound, "{} pushes took {built:?}", 2 * N);
}
