//! The mix drafter.

use std::sync::{Arc, Mutex};

use proptest::collection::vec;
use proptest::prelude::*;
use specdec_drafters::*;

use crate::common::{check_tree, contains_path, first_choice};

/// A drafter that always proposes the same tree (below whatever root `context` gives).
struct Fixed(TokenTree);

impl Drafter for Fixed {
    fn name(&self) -> &'static str {
        "fixed"
    }
    fn begin(&mut self, _: &[u32], _: &[Vec<u32>]) {}
    fn observe(&mut self, _: &[u32]) {}
    fn draft(&mut self, context: &[u32], budget: usize) -> TokenTree {
        // The first `budget` drafted nodes (parents keep their indices) below this root.
        let mut t = TokenTree::rooted(*context.last().unwrap());
        for (n, m) in self
            .0
            .nodes()
            .iter()
            .zip(self.0.meta())
            .skip(1)
            .take(budget)
        {
            t.push(n.token, n.parent, *m);
        }
        t
    }
    fn end(&mut self, _: &[u32]) {}
}

/// A tree from scored sequences, as a drafter would build it (below a root `0`).
fn tree_of(seqs: &[(Vec<u32>, f32)]) -> TokenTree {
    let mut b = TreeBuilder::new();
    for (s, score) in seqs {
        b.add_path(s, Source::Prompt, 0, |d| score * 0.9f32.powi(d as i32));
    }
    b.build(0, usize::MAX)
}

fn part() -> impl Strategy<Value = Vec<(Vec<u32>, f32)>> {
    vec((vec(0u32..5, 1..6), 0.0f32..1.0), 0..4)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn merged_tree_holds_each_first_choice_when_the_budget_allows(
        parts in vec((part(), 0.1f32..3.0), 1..4),
        extra in 0usize..6,
    ) {
        let trees: Vec<TokenTree> = parts.iter().map(|(p, _)| tree_of(p)).collect();
        let firsts: Vec<Vec<u32>> = trees.iter().map(first_choice).collect();
        let budget = firsts.iter().map(Vec::len).sum::<usize>() + extra;
        let mut mix = MixDrafter::new(
            trees
                .iter()
                .zip(&parts)
                .map(|(t, (_, w))| (Box::new(Fixed(t.clone())) as Box<dyn Drafter>, *w))
                .collect(),
        );
        let tree = mix.draft(&[1, 2, 3], budget);
        check_tree(&tree, &[1, 2, 3], budget);
        for f in &firsts {
            prop_assert!(contains_path(&tree, f), "{:?} missing from {:?}", f, tree);
        }
        // Merging never duplicates: the union of the parts when it fits.
        let mut all = TreeBuilder::new();
        for t in &trees {
            all.add_tree(t, 1.0);
        }
        prop_assert_eq!(tree.drafted(), all.len().min(budget));
        prop_assert_eq!(mix.draft(&[1], 0).drafted(), 0);
    }
}

#[test]
fn identical_prefixes_merge_and_scores_combine() {
    let a = tree_of(&[(vec![1, 2, 3], 0.5)]);
    let b = tree_of(&[(vec![1, 2, 4], 0.5)]);
    let mut mix = MixDrafter::new(vec![(Box::new(Fixed(a)), 1.0), (Box::new(Fixed(b)), 1.0)]);
    let tree = mix.draft(&[0], 8);
    check_tree(&tree, &[0], 8);
    assert_eq!(tree.drafted(), 4);
    // Both proposed token 1 with 0.5: noisy-or gives 0.75.
    assert!((tree.meta()[1].score - 0.75).abs() < 1e-6);
}

#[test]
fn auto_mixes_reference_suffix_trie_and_history() {
    let trie = Arc::new(Mutex::new(Trie::default()));
    let history = Arc::new(Mutex::new(HistoryIndex::default()));
    let mut auto = MixDrafter::auto(Some(trie), Some(history));
    assert_eq!(auto.name(), "auto");
    assert_eq!(
        auto.part_names(),
        ["reference", "suffix", "trie", "history"]
    );
    assert_eq!(
        MixDrafter::auto(None, None).part_names(),
        ["reference", "suffix"]
    );
    let reference: Vec<u32> = (100..140).collect();
    auto.begin(&[1, 2, 100, 101], std::slice::from_ref(&reference));
    let tree = auto.draft(&[1, 2, 100, 101], 12);
    check_tree(&tree, &[1, 2, 100, 101], 12);
    assert_eq!(first_choice(&tree)[..4], [102, 103, 104, 105]);
}

/// A costly part (a draft model) that counts how often it is asked.
struct Costly(Arc<Mutex<usize>>);

impl Drafter for Costly {
    fn name(&self) -> &'static str {
        "costly"
    }
    fn begin(&mut self, _: &[u32], _: &[Vec<u32>]) {}
    fn observe(&mut self, _: &[u32]) {}
    fn draft(&mut self, context: &[u32], _: usize) -> TokenTree {
        *self.0.lock().unwrap() += 1;
        let mut t = TokenTree::rooted(*context.last().unwrap());
        t.push(7, Some(0), Meta::drafted(Source::Model, 0.5));
        t
    }
    fn end(&mut self, _: &[u32]) {}
    fn is_costly(&self) -> bool {
        true
    }
}

/// A chain of `n` tokens scored `score` each.
fn chain(n: u32, score: f32) -> TokenTree {
    let mut t = TokenTree::rooted(0);
    for i in 0..n {
        t.push(20 + i, Some(i), Meta::drafted(Source::Reference, score));
    }
    t
}

#[test]
fn a_costly_part_rests_while_a_cheap_parts_first_choice_is_being_copied() {
    let calls = Arc::new(Mutex::new(0));
    // The costly part comes first: the mix still asks the cheap part first.
    let mut mix = MixDrafter::new(vec![
        (Box::new(Costly(calls.clone())), 1.0),
        (Box::new(Fixed(chain(8, 0.9))), 1.0),
    ]);
    let context = [1, 2, 3];
    mix.begin(&context, &[]);
    let tree = mix.draft(&context, 16);
    check_tree(&tree, &context, 16);
    assert_eq!(*calls.lock().unwrap(), 1, "nothing was copied yet");
    assert!(tree.child_with(Some(0), 7).is_some());
    // The target took five tokens of the cheap part's chain: the text is copying.
    mix.observe(&[20, 21, 22, 23, 24, 99]);
    mix.draft(&context, 16);
    assert_eq!(
        *calls.lock().unwrap(),
        1,
        "the costly part rests while copying"
    );
    // Two tokens only: copying stopped, the costly part drafts again.
    mix.observe(&[20, 21, 99]);
    mix.draft(&context, 16);
    assert_eq!(*calls.lock().unwrap(), 2);
}
