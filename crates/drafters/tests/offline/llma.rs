//! The reference (LLMA / prompt lookup) drafter.

use specdec_drafters::*;

use crate::common::{check_tree, drafted_meta, first_choice, leaf_paths, Lcg};

/// A reference of distinct tokens and an unrelated prompt.
fn setup(seed: u64) -> (Vec<u32>, Vec<u32>) {
    let mut rng = Lcg(seed);
    let mut reference: Vec<u32> = (1000..1400).collect();
    for i in (1..reference.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        reference.swap(i, j);
    }
    let prompt: Vec<u32> = (0..600).map(|_| rng.below(500)).collect();
    (reference, prompt)
}

#[test]
fn context_inside_a_copied_span_drafts_the_exact_continuation() {
    let (reference, prompt) = setup(7);
    for (start, copied) in [(40, 1), (40, 2), (40, 20), (0, 5), (350, 30)] {
        let mut d = ReferenceDrafter::default();
        d.begin(&prompt, std::slice::from_ref(&reference));
        let out = &reference[start..start + copied];
        d.observe(out);
        let mut ctx = prompt.clone();
        ctx.extend(out);
        for budget in [1, 4, 16, 32] {
            let tree = d.draft(&ctx, budget);
            check_tree(&tree, &ctx, budget);
            let at = start + copied;
            let copy = budget.min(d.config().max_copy);
            let want = &reference[at..(at + copy).min(reference.len())];
            assert_eq!(first_choice(&tree), want, "start {start} copied {copied}");
            assert!(drafted_meta(&tree)
                .iter()
                .all(|n| n.source == Source::Reference));
        }
    }
}

#[test]
fn occurrences_become_branches_ranked_by_match_and_agreement() {
    // After "5 6" the references continue with 7 7 (twice) and 9 (once, most recent).
    let refs = vec![
        vec![1, 5, 6, 7, 7, 2],
        vec![3, 5, 6, 7, 7, 4],
        vec![8, 5, 6, 9, 9, 9],
    ];
    let mut d = ReferenceDrafter::default();
    d.begin(&[0, 5], &refs);
    d.observe(&[6]);
    let tree = d.draft(&[0, 5, 6], 32);
    check_tree(&tree, &[0, 5, 6], 32);
    let paths = leaf_paths(&tree);
    assert!(paths.iter().any(|p| p.starts_with(&[7, 7])), "{paths:?}");
    assert!(paths.iter().any(|p| p.starts_with(&[9, 9])), "{paths:?}");
    // Agreement of two occurrences outweighs one: 7 is the first choice.
    assert_eq!(first_choice(&tree)[..2], [7, 7]);
    // A longer match wins over agreement: "3 5 6" only occurs before "7 7 4".
    let mut d = ReferenceDrafter::default();
    d.begin(&[3, 5], &refs);
    d.observe(&[6]);
    assert_eq!(first_choice(&d.draft(&[3, 5, 6], 32))[..3], [7, 7, 4]);
    // Trimming keeps the best: with 2 nodes, the agreed chain.
    let mut d = ReferenceDrafter::default();
    d.begin(&[0, 5], &refs);
    let tree = d.draft(&[0, 5, 6], 2);
    assert_eq!(leaf_paths(&tree), vec![vec![7, 7]]);
}

#[test]
fn sources_follow_where_the_span_was_copied_from() {
    let prompt = [10, 11, 12, 13, 14, 15];
    let mut d = ReferenceDrafter::default();
    d.begin(&prompt, &[]);
    d.observe(&[11, 12]);
    let ctx = [10, 11, 12, 13, 14, 15, 11, 12];
    let tree = d.draft(&ctx, 3);
    assert_eq!(first_choice(&tree), [13, 14, 15]);
    assert!(drafted_meta(&tree)
        .iter()
        .all(|n| n.source == Source::Prompt));
    // Output repeating itself: copies from the output (periodically past its end).
    d.observe(&[40, 41, 42, 40, 41]);
    let mut ctx = ctx.to_vec();
    ctx.extend([40, 41, 42, 40, 41]);
    let tree = d.draft(&ctx, 5);
    assert_eq!(first_choice(&tree), [42, 40, 41, 42, 40]);
    assert_eq!(tree.meta()[1].source, Source::Output);
}

#[test]
fn prompt_only_ignores_references() {
    let (reference, prompt) = setup(3);
    let mut d = ReferenceDrafter::prompt_only();
    assert_eq!(d.name(), "prompt");
    d.begin(&prompt, std::slice::from_ref(&reference));
    let span = &reference[10..14];
    d.observe(span);
    let mut ctx = prompt.clone();
    ctx.extend(span);
    let tree = d.draft(&ctx, 16);
    assert!(drafted_meta(&tree)
        .iter()
        .all(|n| n.source != Source::Reference));
    assert!(!first_choice(&tree).starts_with(&reference[14..16]));
}

#[test]
fn n_min_bounds_the_shortest_match() {
    let cfg = ReferenceConfig {
        n_min: 3,
        ..ReferenceConfig::default()
    };
    let mut d = ReferenceDrafter::new(cfg);
    d.begin(&[1, 2, 3, 4, 9, 2, 3], &[]);
    // Suffix "2 3" (2 tokens) matches, but n_min = 3 requires "9 2 3".
    assert_eq!(d.draft(&[1, 2, 3, 4, 9, 2, 3], 8).drafted(), 0);
    d.observe(&[4, 1, 2, 3]);
    let tree = d.draft(&[1, 2, 3, 4, 9, 2, 3, 4, 1, 2, 3], 8);
    assert_eq!(first_choice(&tree)[0], 4);
}

#[test]
fn after_an_edit_inside_a_copy_the_draft_offers_where_the_copy_resumes() {
    let (reference, prompt) = setup(11);
    let mut d = ReferenceDrafter::default();
    d.begin(&prompt, std::slice::from_ref(&reference));
    let mut ctx = prompt.clone();
    let copied = &reference[40..52];
    d.observe(copied);
    ctx.extend(copied);
    d.draft(&ctx, 16); // anchors the copy at reference[52]
                       // The output inserts a token the reference never has (a type hint, say) ...
    d.observe(&[7]);
    ctx.push(7);
    let tree = d.draft(&ctx, 32);
    check_tree(&tree, &ctx, 32);
    // ... and the draft still offers the copy resuming where it left off, or one later
    // (the inserted token replaced one).
    let paths = leaf_paths(&tree);
    for start in [52, 53] {
        assert!(
            paths
                .iter()
                .any(|p| p.starts_with(&reference[start..start + 4])),
            "no branch resumes at {start}: {paths:?}"
        );
    }
}

#[test]
fn a_copy_is_unambiguous_when_every_occurrence_of_its_match_continues_alike() {
    let first_nodes = |tree: &TokenTree| -> Vec<(u32, bool)> {
        let mut v: Vec<(u32, bool)> = tree
            .children(0)
            .map(|i| (tree.nodes()[i].token, tree.meta()[i].unambiguous))
            .collect();
        v.sort();
        v
    };
    // The same passage indexed twice (a reference and its unwrapped copy) is one witness.
    let twice = vec![vec![10, 11, 12, 13, 14], vec![20, 11, 12, 13, 14]];
    let mut d = ReferenceDrafter::default();
    d.begin(&[0, 11], &twice);
    assert_eq!(first_nodes(&d.draft(&[0, 11], 32)), vec![(12, true)]);
    // "11" continues as 12 13 in one place and 15 16 in another: ambiguous. After the
    // longer "10 11", found once, the copy of 12 is not, while the branch copied after
    // the ambiguous "11" alone stays so.
    let apart = vec![vec![10, 11, 12, 13], vec![20, 11, 15, 16]];
    let mut d = ReferenceDrafter::default();
    d.begin(&[0, 11], &apart);
    assert_eq!(
        first_nodes(&d.draft(&[0, 11], 32)),
        vec![(12, false), (15, false)]
    );
    let mut d = ReferenceDrafter::default();
    d.begin(&[0, 10, 11], &apart);
    assert_eq!(
        first_nodes(&d.draft(&[0, 10, 11], 32)),
        vec![(12, true), (15, false)]
    );
}

/// A RAG answer's first step: the prompt ends with the user's question and a chat
/// template's assistant header, which no document holds, so no suffix of the prompt
/// matches; the question's occurrence in a reference anchors the answer there, and the
/// first draft offers what follows it (past one separator token) before anything is
/// written. A question that occurs nowhere else anchors nothing.
#[test]
fn an_answer_starts_drafting_after_its_question_in_a_reference() {
    let question: Vec<u32> = (200..208).collect();
    let (sep, answer): (u32, Vec<u32>) = (300, (400..420).collect());
    let header = [900, 901, 902, 903, 904];
    let mut faq = vec![50, 51, 52];
    faq.extend(&question);
    faq.push(sep);
    faq.extend(&answer);
    let mut prompt = vec![1, 2, 3];
    prompt.extend(&question);
    prompt.extend(header);
    let mut d = ReferenceDrafter::default();
    d.begin(&prompt, std::slice::from_ref(&faq));
    let tree = d.draft(&prompt, 32);
    check_tree(&tree, &prompt, 32);
    let paths = leaf_paths(&tree);
    assert!(
        paths.iter().any(|p| p.starts_with(&answer[..8])),
        "{paths:?}"
    );
    // The model writes the answer's first token: the copy resumes right after it.
    d.observe(&answer[..1]);
    let mut ctx = prompt.clone();
    ctx.push(answer[0]);
    assert!(first_choice(&d.draft(&ctx, 32)).starts_with(&answer[1..8]));

    // The question asked nowhere in the documents: nothing is drafted at the start.
    let mut other = vec![1, 2, 3];
    other.extend(600..608);
    other.extend(header);
    let mut d = ReferenceDrafter::default();
    d.begin(&other, std::slice::from_ref(&faq));
    assert_eq!(d.draft(&other, 32).drafted(), 0);
}
