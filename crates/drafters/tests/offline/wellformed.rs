//! Every drafter, driven like the engine (and misused), returns well-formed trees.

use std::sync::{Arc, Mutex};

use proptest::collection::vec;
use proptest::prelude::*;
use specdec_drafters::*;

use crate::common::{check_tree, first_choice};

fn token() -> impl Strategy<Value = u32> {
    // A small alphabet makes repeats (and so drafts) common; u32::MAX probes edge values.
    prop_oneof![20 => 0u32..10, 1 => Just(u32::MAX)]
}

fn drafters(trie: &Arc<Mutex<Trie>>, history: &Arc<Mutex<HistoryIndex>>) -> Vec<Box<dyn Drafter>> {
    let tiny_history = Arc::new(Mutex::new(HistoryIndex::new(HistoryConfig {
        max_tokens: 30,
        prompt_tail: 5,
    })));
    tiny_history.lock().unwrap().insert(&[2, 3, 1, 9]);
    let small = TrieConfig { max_nodes: 40 };
    let tiny_trie = Arc::new(Mutex::new(Trie::new(small)));
    let odd_only: CanStart = Arc::new(|t| t % 2 == 1);
    vec![
        Box::new(ReferenceDrafter::default()),
        Box::new(ReferenceDrafter::prompt_only()),
        Box::new(ReferenceDrafter::new(ReferenceConfig {
            n_min: 2,
            n_max: 3,
            max_copy: 5,
            max_candidates: 2,
            ..ReferenceConfig::default()
        })),
        Box::new(SuffixDrafter::default()),
        Box::new(SuffixDrafter::new(SuffixConfig {
            extra_branches: 0,
            recent_depth: 0,
            min_match: 2,
            ..SuffixConfig::default()
        })),
        Box::new(TrieDrafter::new(trie.clone(), TrieDrafterConfig::default())),
        Box::new(TrieDrafter::new(
            tiny_trie,
            TrieDrafterConfig {
                branch_length: 3,
                can_start: Some(odd_only),
                stream_output: false,
            },
        )),
        Box::new(HistoryDrafter::new(
            history.clone(),
            HistoryDrafterConfig::default(),
        )),
        Box::new(HistoryDrafter::new(
            tiny_history,
            HistoryDrafterConfig {
                min_match: 1,
                max_depth: 3,
                branching: 1,
                min_share: 0.0,
                window: 4,
                ..HistoryDrafterConfig::default()
            },
        )),
        Box::new(MixDrafter::auto(Some(trie.clone()), Some(history.clone()))),
        Box::new(MixDrafter::auto(None, None)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_drafter_returns_well_formed_trees(
        prompt in vec(token(), 0..50),
        refs in vec(vec(token(), 0..40), 0..3),
        steps in vec((0usize..40, 1usize..5, any::<bool>(), vec(token(), 4)), 1..25),
        misuse in vec(token(), 0..30),
    ) {
        let trie = Arc::new(Mutex::new(Trie::default()));
        let history = Arc::new(Mutex::new(HistoryIndex::default()));
        for mut d in drafters(&trie, &history) {
            // Two requests in a row: state must reset between them.
            for round in 0..2 {
                d.begin(&prompt, &refs);
                let mut ctx = prompt.clone();
                let mut out = Vec::new();
                for (budget, n, accept, random) in &steps {
                    let tree = d.draft(&ctx, *budget);
                    check_tree(&tree, &ctx, *budget);
                    // Accepted draft tokens (or arbitrary ones), then the bonus token.
                    let mut commit: Vec<u32> = if *accept {
                        first_choice(&tree).into_iter().take(*n - 1).collect()
                    } else {
                        random[..*n - 1].to_vec()
                    };
                    commit.push(random[*n - 1]);
                    d.observe(&commit);
                    ctx.extend(&commit);
                    out.extend(&commit);
                }
                if round == 1 {
                    // Misuse: a context that does not extend what was observed.
                    let tree = d.draft(&misuse, 16);
                    check_tree(&tree, &misuse, 16);
                    let tree = d.draft(&[], 16);
                    check_tree(&tree, &[], 16);
                }
                d.end(&out);
                prop_assert_eq!(d.draft(&ctx, 0).drafted(), 0);
            }
        }
    }
}

#[test]
fn budget_zero_is_empty_and_names_are_stable() {
    let trie = Arc::new(Mutex::new(Trie::default()));
    // What an earlier request left, so that every drafter has something to draft from.
    let history = Arc::new(Mutex::new(HistoryIndex::default()));
    history
        .lock()
        .unwrap()
        .insert(&[1, 2, 3, 1, 2, 3, 1, 2, 3, 4, 5]);
    let names: Vec<&str> = drafters(&trie, &history).iter().map(|d| d.name()).collect();
    assert_eq!(
        names,
        [
            "reference",
            "prompt",
            "reference",
            "suffix",
            "suffix",
            "trie",
            "trie",
            "history",
            "history",
            "auto",
            "auto"
        ]
    );
    for mut d in drafters(&trie, &history) {
        let p = [1, 2, 3, 1, 2, 3, 1, 2];
        d.begin(&p, &[]);
        d.observe(&[3]);
        let mut ctx = p.to_vec();
        ctx.push(3);
        assert_eq!(d.draft(&ctx, 0).drafted(), 0);
        assert!(
            d.draft(&ctx, 8).drafted() > 0,
            "{} drafted nothing",
            d.name()
        );
    }
}
