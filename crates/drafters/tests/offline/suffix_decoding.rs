//! The history index against brute force, and its drafter on repeats.

use std::sync::{Arc, Mutex};

use proptest::collection::vec;
use proptest::prelude::*;
use specdec_drafters::*;

use crate::common::{check_tree, first_choice};

/// Occurrences of `pat` inside the documents (never across two).
fn occurrences(docs: &[Vec<u32>], pat: &[u32]) -> usize {
    docs.iter()
        .map(|d| d.windows(pat.len()).filter(|w| *w == pat).count())
        .sum()
}

/// The longest suffix of `ctx` occurring in a document, by brute force.
fn brute_longest(docs: &[Vec<u32>], ctx: &[u32]) -> usize {
    (1..=ctx.len())
        .rev()
        .find(|&l| occurrences(docs, &ctx[ctx.len() - l..]) > 0)
        .unwrap_or(0)
}

fn index_of(docs: &[Vec<u32>]) -> HistoryIndex {
    let mut h = HistoryIndex::default();
    for d in docs {
        h.insert(d);
    }
    h
}

/// The index as it behaved when it kept a list of document hashes: two generations of
/// whole documents, exact duplicates of a held one skipped, the older dropped when the
/// newer is full. Documents are compared by content (the index compares hashes, which
/// differ for the distinct documents these tests make).
struct Reference {
    half_cap: usize,
    gens: [Vec<Vec<u32>>; 2],
}

impl Reference {
    fn new(max_tokens: usize) -> Self {
        Reference {
            half_cap: (max_tokens / 2).max(1),
            gens: [Vec::new(), Vec::new()],
        }
    }

    fn insert(&mut self, doc: &[u32]) -> bool {
        let doc = &doc[doc.len().saturating_sub(self.half_cap)..];
        if doc.is_empty() || self.gens.iter().flatten().any(|d| d == doc) {
            return false;
        }
        if self.gens[1].iter().map(Vec::len).sum::<usize>() + doc.len() > self.half_cap {
            self.gens[0] = std::mem::take(&mut self.gens[1]);
        }
        self.gens[1].push(doc.to_vec());
        true
    }

    fn held(&self) -> Vec<Vec<u32>> {
        self.gens.concat()
    }
}

fn held(h: &HistoryIndex) -> Vec<Vec<u32>> {
    h.documents_held().map(<[u32]>::to_vec).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn longest_match_equals_brute_force(
        docs in vec(vec(0u32..4, 1..30), 1..5),
        ctx in vec(0u32..4, 0..20),
    ) {
        let mut docs = docs;
        docs.dedup();
        let h = index_of(&docs);
        // Exact duplicates are held once; the brute force looks at distinct documents.
        let distinct: Vec<Vec<u32>> = docs.iter().enumerate()
            .filter(|(i, d)| !docs[..*i].contains(d))
            .map(|(_, d)| d.clone())
            .collect();
        prop_assert_eq!(h.longest_match(&ctx), brute_longest(&distinct, &ctx));
    }

    #[test]
    fn continuation_counts_equal_brute_force(
        docs in vec(vec(0u32..3, 1..25), 1..5),
        pat in vec(0u32..3, 1..4),
    ) {
        let mut distinct: Vec<Vec<u32>> = Vec::new();
        for d in docs {
            if !distinct.contains(&d) {
                distinct.push(d);
            }
        }
        let h = index_of(&distinct);
        // Small documents stay in one generation.
        let m = h.matchers_at(&pat, pat.len())[1];
        prop_assume!(m.len == pat.len());
        let mut c = Vec::new();
        h.continuations(1, m.state, &mut c);
        for &(t, _, count) in &c {
            let mut longer = pat.clone();
            longer.push(t);
            prop_assert_eq!(count as usize, occurrences(&distinct, &longer), "{:?}", longer);
        }
        let followed: usize = (0u32..3)
            .map(|t| { let mut l = pat.clone(); l.push(t); occurrences(&distinct, &l) })
            .sum();
        prop_assert_eq!(c.iter().map(|x| x.2 as usize).sum::<usize>(), followed);
    }

    #[test]
    fn eviction_keeps_the_cap_and_the_newest_documents(
        docs in vec(vec(0u32..50, 1..40), 1..40),
        cap in 10usize..200,
    ) {
        let mut h = HistoryIndex::new(HistoryConfig { max_tokens: cap, prompt_tail: 8 });
        let mut held: Vec<Vec<u32>> = Vec::new();
        for d in &docs {
            let d = d[d.len().saturating_sub(cap / 2)..].to_vec();
            if h.insert(&d) {
                held.push(d);
            }
            prop_assert!(h.tokens() <= cap);
        }
        // What is held is the newest documents, in order, and at least half the cap's worth
        // once the cap was reached.
        let text: Vec<u32> = h.documents_held().flatten().copied().collect();
        let newest: Vec<u32> = held[held.len() - h.documents()..].concat();
        prop_assert_eq!(text, newest);
        let all: usize = held.iter().map(Vec::len).sum();
        if all > cap {
            let recent: usize = held.iter().rev().map(Vec::len)
                .scan(0, |s, l| { *s += l; Some(*s) })
                .take_while(|&s| s <= cap / 2)
                .last()
                .unwrap_or(0);
            prop_assert!(h.tokens() >= recent, "{} held, {} recent", h.tokens(), recent);
        }
    }

    /// Inserting through hash sets instead of a scanned list changes nothing: what is
    /// added, skipped and evicted, what a file loads back to (under the same cap or a
    /// smaller one), and what matches. The alphabet is wide enough that the root, and
    /// some states below it, hold more transitions than a sorted list keeps.
    #[test]
    fn inserts_and_loads_agree_with_the_reference_model(
        docs in vec(vec(0u32..300, 1..12), 1..200),
        repeats in vec(any::<prop::sample::Index>(), 0..40),
        cap in 4usize..600,
        smaller in 2usize..600,
        probes in vec(vec(0u32..300, 1..6), 0..20),
    ) {
        let cfg = |max_tokens| HistoryConfig { max_tokens, prompt_tail: 8 };
        let mut docs = docs;
        // Exact repeats of earlier documents, some of them still held.
        for r in &repeats {
            let d = r.get(&docs).clone();
            docs.push(d);
        }
        let mut h = HistoryIndex::new(cfg(cap));
        let mut want = Reference::new(cap);
        for d in &docs {
            prop_assert_eq!(h.insert(d), want.insert(d), "{:?}", d);
            prop_assert_eq!(h.documents(), want.held().len());
            prop_assert_eq!(h.tokens(), want.held().iter().map(Vec::len).sum::<usize>());
        }
        prop_assert_eq!(held(&h), want.held());
        let b = h.to_bytes();
        let back = HistoryIndex::from_bytes(&b, cfg(cap)).unwrap();
        prop_assert_eq!(held(&back), want.held());
        prop_assert!(back == h);
        // A smaller cap keeps the newest, as inserting them one by one would.
        let mut want_small = Reference::new(smaller);
        for d in want.held() {
            want_small.insert(&d);
        }
        let small = HistoryIndex::from_bytes(&b, cfg(smaller)).unwrap();
        prop_assert_eq!(held(&small), want_small.held());
        // Matches and continuation counts over the held documents, generation by generation.
        let mut pats = probes;
        pats.extend(want.held().iter().map(|d| d[..d.len().min(3)].to_vec()));
        let mut c = Vec::new();
        for pat in &pats {
            prop_assert_eq!(h.longest_match(pat), brute_longest(&want.held(), pat), "{:?}", pat);
            for (g, m) in h.matchers_at(pat, pat.len()).iter().enumerate() {
                if m.len != pat.len() {
                    continue;
                }
                h.continuations(g, m.state, &mut c);
                for &(t, _, count) in &c {
                    let mut longer = pat.clone();
                    longer.push(t);
                    prop_assert_eq!(count as usize, occurrences(&want.gens[g], &longer));
                }
                for w in c.windows(2) {
                    prop_assert!(w[0].2 > w[1].2 || (w[0].2 == w[1].2 && w[0].0 < w[1].0));
                }
            }
        }
    }

    #[test]
    fn saved_indexes_load_back_equal(docs in vec(vec(0u32..1000, 1..40), 0..8)) {
        let h = index_of(&docs);
        let back = HistoryIndex::from_bytes(&h.to_bytes(), HistoryConfig::default()).unwrap();
        prop_assert_eq!(back, h);
    }

    #[test]
    fn corrupt_files_are_errors_never_panics(
        docs in vec(vec(0u32..1000, 1..20), 1..4),
        flip in any::<usize>(),
        cut in any::<usize>(),
    ) {
        let b = index_of(&docs).to_bytes();
        let mut bad = b.clone();
        let i = flip % bad.len();
        bad[i] ^= 0x41;
        prop_assert!(HistoryIndex::from_bytes(&bad, HistoryConfig::default()).is_err());
        let cut = cut % b.len();
        prop_assert!(HistoryIndex::from_bytes(&b[..cut], HistoryConfig::default()).is_err());
    }
}

#[test]
fn an_exact_repeat_is_drafted_whole_from_its_first_token() {
    let index = Arc::new(Mutex::new(HistoryIndex::default()));
    let prompt: Vec<u32> = (0..40).map(|i| i * 7 % 101).collect();
    let output: Vec<u32> = (0..50).map(|i| 200 + i * 3 % 17).collect();
    let mut first = HistoryDrafter::new(index.clone(), HistoryDrafterConfig::default());
    first.begin(&prompt, &[]);
    first.end(&output);
    let mut again = HistoryDrafter::new(index.clone(), HistoryDrafterConfig::default());
    again.begin(&prompt, &[]);
    let tree = again.draft(&prompt, 32);
    check_tree(&tree, &prompt, 32);
    assert_eq!(first_choice(&tree), output[..32]);
    let meta = &tree.meta()[1];
    assert_eq!(meta.source, Source::History);
    assert_eq!(meta.match_len, 40);
    // Midway through, it keeps copying from where the output is.
    let mut ctx = prompt.clone();
    ctx.extend(&output[..20]);
    let tree = again.draft(&ctx, 8);
    assert_eq!(first_choice(&tree), output[20..28]);
}

#[test]
fn diverging_continuations_form_a_tree_ranked_by_frequency() {
    let index = Arc::new(Mutex::new(HistoryIndex::default()));
    {
        let mut h = index.lock().unwrap();
        h.insert(&[1, 2, 3, 4, 10, 11]);
        h.insert(&[9, 1, 2, 3, 4, 20, 21]);
        h.insert(&[8, 1, 2, 3, 4, 20, 22]);
    }
    let mut d = HistoryDrafter::new(index, HistoryDrafterConfig::default());
    d.begin(&[5, 1, 2, 3, 4], &[]);
    let tree = d.draft(&[5, 1, 2, 3, 4], 6);
    check_tree(&tree, &[5, 1, 2, 3, 4], 6);
    let below_root: Vec<u32> = tree.children(0).map(|c| tree.nodes()[c].token).collect();
    assert_eq!(below_root, [20, 10], "the more frequent first");
    assert!(tree.meta()[1].score > tree.meta()[tree.len() - 1].score);
}

#[test]
fn matching_follows_an_index_that_changes_under_a_request() {
    let index = Arc::new(Mutex::new(HistoryIndex::default()));
    index.lock().unwrap().insert(&[1, 2, 3, 4, 5, 6, 7]);
    let mut d = HistoryDrafter::new(index.clone(), HistoryDrafterConfig::default());
    d.begin(&[0, 1, 2, 3], &[]);
    assert_eq!(first_choice(&d.draft(&[0, 1, 2, 3], 2)), [4, 5]);
    // Another request finished meanwhile: the index was rebuilt around new text.
    index.lock().unwrap().insert(&[3, 4, 5, 9, 9, 9]);
    let tree = d.draft(&[0, 1, 2, 3, 4, 5], 3);
    let fresh = HistoryDrafter::new(index.clone(), HistoryDrafterConfig::default())
        .draft(&[0, 1, 2, 3, 4, 5], 3);
    assert_eq!(tree, fresh);
    assert_eq!(d.match_len(), 5);
}

/// 300,000 distinct two-token documents, as requests can grow a pool's history: tokens
/// spread over a 49,152-id vocabulary (SmolLM2's), the pairs a fixed pseudo-random walk.
fn many_short_documents() -> Vec<[u32; 2]> {
    const VOCAB: u64 = 49_152;
    (0..300_000u64)
        .map(|i| {
            // i < VOCAB^2, so every pair is distinct; the multiplier scatters them.
            let k = i.wrapping_mul(0x9e37_79b9) % (VOCAB * VOCAB);
            [(k / VOCAB) as u32, (k % VOCAB) as u32]
        })
        .collect()
}

/// Each insert used to scan every held document's hash: 300,000 two-token documents took
/// 10.7 s to insert or load, a stall for every request of the pool. Linear now; the bound
/// is an order of magnitude above what it takes, and far below the quadratic time.
#[test]
fn many_short_documents_insert_and_load_in_linear_time() {
    let docs = many_short_documents();
    let t0 = std::time::Instant::now();
    let mut h = HistoryIndex::default();
    for d in &docs {
        assert!(h.insert(d));
    }
    let inserted = t0.elapsed();
    let b = h.to_bytes();
    let t0 = std::time::Instant::now();
    let back = HistoryIndex::from_bytes(&b, HistoryConfig::default()).unwrap();
    let loaded = t0.elapsed();
    assert!(back == h, "the loaded index holds the same documents");
    eprintln!("insert {inserted:?}, load {loaded:?}");
    let bound = std::time::Duration::from_secs(if cfg!(debug_assertions) { 60 } else { 5 });
    assert!(inserted < bound, "300,000 inserts took {inserted:?}");
    assert!(loaded < bound, "loading 300,000 documents took {loaded:?}");
}
