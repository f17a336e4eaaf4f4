//! The shared trie, its persistence, and the trie drafter.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use proptest::collection::vec;
use proptest::prelude::*;
use specdec_drafters::*;

use crate::common::{check_tree, drafted_meta, first_choice, reseal};

/// Brute-force counts: for every window (start allowed by `can_start`), every prefix.
fn brute(
    seqs: &[Vec<u32>],
    window: usize,
    can_start: impl Fn(u32) -> bool,
) -> Vec<(Vec<u32>, u32)> {
    let mut m: BTreeMap<Vec<u32>, u32> = BTreeMap::new();
    for s in seqs {
        for start in 0..s.len() {
            if !can_start(s[start]) {
                continue;
            }
            let w = &s[start..(start + window).min(s.len())];
            for k in 1..=w.len() {
                *m.entry(w[..k].to_vec()).or_default() += 1;
            }
        }
    }
    m.into_iter().collect()
}

/// `name` inside the scratch directory of test `test` (created if missing).
fn temp_path(test: &str, name: &str) -> PathBuf {
    let dir = scratch(test);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn scratch(test: &str) -> PathBuf {
    std::env::temp_dir().join(format!("specdec-drafters-{}-{test}", std::process::id()))
}

fn sample_trie(seqs: &[Vec<u32>]) -> Trie {
    let mut t = Trie::default();
    for s in seqs {
        t.insert_windows(s, 4, &|_| true);
    }
    t
}

fn seqs() -> impl Strategy<Value = Vec<Vec<u32>>> {
    vec(vec(0u32..6, 0..30), 0..5)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn counts_are_windows_through_each_node(s in seqs(), window in 1usize..6) {
        let mut t = Trie::default();
        for x in &s {
            t.insert_windows(x, window, &|tok| tok != 0);
        }
        prop_assert_eq!(t.entries(), brute(&s, window, |tok| tok != 0));
        // Children come sorted by count.
        for (path, _) in t.entries() {
            let n = t.find(&path).unwrap();
            let c: Vec<u32> = t.children(n).iter().map(|&k| t.node_count(k)).collect();
            prop_assert!(c.windows(2).all(|w| w[0] >= w[1]));
        }
    }

    #[test]
    fn streaming_equals_batch_and_prompts_stay_private(
        before in seqs(),
        prompt in vec(0u32..6, 0..30),
        output in vec(0u32..6, 0..40),
        chunk in 1usize..5,
    ) {
        let shared = Arc::new(Mutex::new(sample_trie(&before)));
        let s0 = shared.lock().unwrap().clone();
        let cfg = TrieDrafterConfig { branch_length: 4, ..TrieDrafterConfig::default() };
        let mut d = TrieDrafter::new(shared.clone(), cfg);
        d.begin(&prompt, &[]);
        // The prompt's counts are the request's own; the pool is untouched by them.
        prop_assert_eq!(d.prompt_trie().entries(), brute(std::slice::from_ref(&prompt), 5, |_| true));
        prop_assert!(*shared.lock().unwrap() == s0);
        for c in output.chunks(chunk) {
            d.observe(c);
        }
        d.end(&output);
        prop_assert!(d.prompt_trie().is_empty());
        // The pool gained exactly the windows of (prompt tail + output), nothing else.
        let mut expect = s0.clone();
        if !output.is_empty() {
            let mut tail = prompt[prompt.len().saturating_sub(2)..].to_vec();
            tail.extend(&output);
            expect.insert_windows(&tail, 5, &|_| true);
        }
        prop_assert!(*shared.lock().unwrap() == expect);
    }

    #[test]
    fn decay_drops_count_one_and_halves_the_rest(s in seqs()) {
        let mut t = sample_trie(&s);
        let before = t.entries();
        let epoch = t.epoch();
        t.decay();
        let expect: Vec<(Vec<u32>, u32)> = before
            .into_iter()
            .filter(|&(_, c)| c > 1)
            .map(|(p, c)| (p, c / 2))
            .collect();
        prop_assert_eq!(t.entries(), expect);
        prop_assert_ne!(t.epoch(), epoch);
    }

    #[test]
    fn save_load_round_trip(s in seqs()) {
        let t = sample_trie(&s);
        prop_assert!(Trie::from_bytes(&t.to_bytes()).unwrap() == t);
        let path = temp_path("round-trip", "pool.trie");
        t.save(&path).unwrap();
        let back = Trie::load(&path).unwrap();
        std::fs::remove_dir_all(scratch("round-trip")).unwrap();
        prop_assert!(back == t);
    }

    #[test]
    fn corrupt_or_truncated_files_are_errors(
        s in seqs(),
        at in any::<prop::sample::Index>(),
        flip in 1u8..=255,
        cut in any::<prop::sample::Index>(),
        junk in vec(any::<u8>(), 0..200),
    ) {
        let bytes = sample_trie(&s).to_bytes();
        let mut bad = bytes.clone();
        bad[at.index(bytes.len())] ^= flip;
        prop_assert!(Trie::from_bytes(&bad).is_err());
        prop_assert!(Trie::from_bytes(&bytes[..cut.index(bytes.len())]).is_err());
        let mut long = bytes.clone();
        long.push(0);
        prop_assert!(Trie::from_bytes(&long).is_err());
        let foreign = matches!(
            Trie::from_bytes(&junk),
            Err(DraftError::BadMagic) | Err(DraftError::Truncated { .. })
        );
        prop_assert!(foreign);
    }
}

#[test]
fn errors_name_the_problem() {
    let t = sample_trie(&[vec![1, 2, 3, 1, 2, 4]]);
    let good = t.to_bytes();
    let mut v = good.clone();
    v[8] = 9;
    reseal(&mut v);
    assert!(matches!(
        Trie::from_bytes(&v),
        Err(DraftError::UnsupportedVersion {
            found: 9,
            expected: 1
        })
    ));
    let mut v = good.clone();
    v[30] ^= 1;
    assert!(matches!(
        Trie::from_bytes(&v),
        Err(DraftError::Checksum { .. })
    ));
    // A parent that does not precede its child.
    let mut v = good.clone();
    v[24..28].copy_from_slice(&5u32.to_le_bytes());
    reseal(&mut v);
    assert!(matches!(
        Trie::from_bytes(&v),
        Err(DraftError::Malformed(_))
    ));
    // A child counted more often than its parent.
    let mut v = good.clone();
    let last = v.len() - 8 - 4;
    v[last..last + 4].copy_from_slice(&1000u32.to_le_bytes());
    reseal(&mut v);
    assert!(matches!(
        Trie::from_bytes(&v),
        Err(DraftError::Malformed(_))
    ));
    // A foreign file (a GGUF header) and a missing file.
    let gguf = temp_path("errors", "model.gguf");
    std::fs::write(&gguf, b"GGUF\x03\x00\x00\x00 and then tensors").unwrap();
    assert!(matches!(Trie::load(&gguf), Err(DraftError::BadMagic)));
    let missing = temp_path("errors", "missing.trie");
    let err = Trie::load(&missing).unwrap_err();
    assert!(matches!(err, DraftError::Io { .. }));
    assert!(err.to_string().contains("missing.trie"), "{err}");
    std::fs::remove_dir_all(scratch("errors")).unwrap();
}

#[test]
fn save_is_atomic_and_leaves_no_temporaries() {
    let path = temp_path("atomic", "pool.trie");
    let a = sample_trie(&[vec![1, 2, 3]]);
    let b = sample_trie(&[vec![4, 5, 6, 7]]);
    a.save(&path).unwrap();
    b.save(&path).unwrap();
    assert!(Trie::load(&path).unwrap() == b);
    let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let mut names = names;
    names.sort();
    // The lock file stays (removing it would race); no temporaries do.
    assert_eq!(names, ["pool.trie", "pool.trie.lock"]);
    // Saving into a missing directory fails cleanly.
    let bad = scratch("atomic").join("no/such/dir/pool.trie");
    assert!(matches!(a.save(&bad), Err(DraftError::Io { .. })));
    std::fs::remove_dir_all(scratch("atomic")).unwrap();
}

#[test]
fn drafts_the_most_frequent_continuations_with_half_for_outputs() {
    let shared = Arc::new(Mutex::new(Trie::default()));
    // Past outputs: after "1 2" comes "3 4 5" three times, "6" once.
    let mut past = TrieDrafter::new(shared.clone(), TrieDrafterConfig::default());
    for out in [
        [1, 2, 3, 4, 5],
        [1, 2, 3, 4, 5],
        [1, 2, 3, 4, 5],
        [1, 2, 6, 0, 0],
    ] {
        past.begin(&[9], &[]);
        past.observe(&out);
        past.end(&out);
    }
    let mut d = TrieDrafter::new(shared.clone(), TrieDrafterConfig::default());
    // The prompt says "1 2" is followed by "7 7 7 7".
    d.begin(&[1, 2, 7, 7, 7, 7, 8, 1, 2], &[]);
    let tree = d.draft(&[1, 2, 7, 7, 7, 7, 8, 1, 2], 4);
    check_tree(&tree, &[1, 2, 7, 7, 7, 7, 8, 1, 2], 4);
    assert_eq!(first_choice(&tree)[..2], [3, 4]);
    let outputs = tree.nodes()[1..]
        .iter()
        .filter(|n| [3, 4, 5, 6].contains(&n.token))
        .count();
    assert_eq!(outputs, 2, "{tree:?}");
    assert!(tree.nodes()[1..].iter().any(|n| n.token == 7));
    assert!(drafted_meta(&tree).iter().all(|n| n.source == Source::Trie));
    // Another request cannot see this request's prompt.
    let mut other = TrieDrafter::new(shared.clone(), TrieDrafterConfig::default());
    other.begin(&[0], &[]);
    let tree = other.draft(&[2, 7], 8);
    assert_eq!(tree.drafted(), 0, "{tree:?}");
    // Fallback to the last token when the 2-token query is unknown.
    let tree = other.draft(&[42, 2], 8);
    assert_eq!(first_choice(&tree)[..3], [3, 4, 5]);
}

#[test]
fn can_start_and_the_node_limit_are_honoured() {
    let shared = Arc::new(Mutex::new(Trie::new(TrieConfig { max_nodes: 50 })));
    let cfg = TrieDrafterConfig {
        branch_length: 3,
        can_start: Some(Arc::new(|t| t != 0)),
        ..TrieDrafterConfig::default()
    };
    let mut d = TrieDrafter::new(shared.clone(), cfg);
    let mut x = 1u64;
    for _ in 0..20 {
        d.begin(&[5], &[]);
        let out: Vec<u32> = (0..30)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                (x >> 60) as u32
            })
            .collect();
        d.observe(&out);
        d.end(&out);
        let t = shared.lock().unwrap();
        assert!(t.len() <= 50, "{} nodes", t.len());
        assert!(t.children(Trie::ROOT).iter().all(|&c| t.node_token(c) != 0));
    }
}

#[test]
fn replacing_the_shared_trie_mid_request_is_safe() {
    let shared = Arc::new(Mutex::new(Trie::default()));
    let mut d = TrieDrafter::new(shared.clone(), TrieDrafterConfig::default());
    d.begin(&[1, 2, 3], &[]);
    d.observe(&[4, 5, 6, 7, 8, 9]);
    // Someone swaps in another pool (a reload): open windows refer to the old one.
    *shared.lock().unwrap() = Trie::default();
    d.observe(&[10, 11]);
    let ctx = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11];
    check_tree(&d.draft(&ctx, 8), &ctx, 8);
    d.end(&[4, 5, 6, 7, 8, 9, 10, 11]);
    let t = shared.lock().unwrap();
    assert_eq!(t.count(&[10, 11]), 1);
    assert_eq!(t.count(&[9, 10]), 0);
}

/// Distinct-looking tokens: every window is new, the worst case for the trie.
fn noise(n: usize, seed: u64) -> Vec<u32> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 40) as u32 % 150_000
        })
        .collect()
}

#[test]
fn a_huge_reference_does_not_grow_the_private_trie_without_bound() {
    // Before: every window of a 28 MB reference went into the request's trie (0.5 GB a MB).
    let shared = Arc::new(Mutex::new(Trie::default()));
    let mut d = TrieDrafter::new(shared, TrieDrafterConfig::default());
    let prompt = noise(1000, 1);
    let reference = noise(400_000, 2);
    d.begin(&prompt, &[reference]);
    let n = d.prompt_trie().len();
    assert!(n <= PRIVATE_TRIE_MAX_NODES + 13, "{n} nodes");
    // The prompt went in first and whole: its windows still draft.
    let ctx = &prompt[..500];
    let tree = d.draft(ctx, 4);
    check_tree(&tree, ctx, 4);
    assert!(tree.len() > 1, "the prompt's continuation is drafted");
}

#[test]
fn drafters_index_at_most_max_reference_tokens() {
    let refs = vec![
        noise(MAX_REFERENCE_TOKENS - 10, 3),
        noise(100, 4),
        noise(5, 5),
    ];
    let cut = bounded_references(&refs);
    assert_eq!(cut.len(), 2);
    assert_eq!(
        cut.iter().map(|r| r.len()).sum::<usize>(),
        MAX_REFERENCE_TOKENS
    );
    let mut s = SuffixDrafter::new(SuffixConfig::default());
    s.begin(&[1, 2, 3], &refs);
    assert!(s.automaton().text().len() <= MAX_REFERENCE_TOKENS + 3 + 4);
}
