use proptest::prelude::*;

use crate::{ancestor_chains, chain_break, Meta, Source, TokenTree, TreeError};

fn d(score: f32) -> Meta {
    Meta::drafted(Source::Trie, score)
}

/// root 7 → {1 → {2, 3}, 4}
fn sample() -> TokenTree {
    let mut t = TokenTree::rooted(7);
    let a = t.push(1, Some(0), d(0.9));
    t.push(2, Some(a), d(0.5));
    t.push(3, Some(a), d(0.4));
    t.push(4, Some(0), d(0.3));
    t
}

#[test]
fn a_rooted_tree_walks_in_one_numbering() {
    let t = sample();
    assert_eq!(t.drafted(), 4);
    assert_eq!(t.depths(), vec![0, 1, 2, 2, 1]);
    assert_eq!(t.path_to(3), vec![0, 1, 3]);
    assert_eq!(t.tokens_below_root(3), vec![1, 3]);
    assert_eq!(t.tokens_below_root(0), Vec::<u32>::new());
    assert_eq!(t.child_with(Some(1), 3), Some(3));
    assert_eq!(t.child_with(Some(0), 2), None);
    assert_eq!(t.child_with(None, 7), Some(0));
    assert_eq!(t.children(0).collect::<Vec<_>>(), vec![1, 4]);
    assert!(t.is_chain_from_root(&[0, 1, 2]));
    assert!(!t.is_chain_from_root(&[0, 2]));
    assert!(!t.is_chain_from_root(&[1]));
    assert_eq!(chain_break(t.nodes(), &[0, 1, 4]), Some(2));
    assert_eq!(chain_break(t.nodes(), &[0, 9]), Some(1));
    assert_eq!(chain_break(t.nodes(), &[]), None);
    assert_eq!(t.check_dfs(), Ok(()));
    assert!(t.is_rooted_at(7));
    assert!(!t.is_rooted_at(1));
    assert!(!TokenTree::new().is_rooted_at(7));
    let mut forest = TokenTree::chain(&[7, 8]);
    forest.push(9, None, d(0.5));
    assert!(!forest.is_rooted_at(7));
}

#[test]
fn select_renumbers_and_keeps_metadata() {
    let t = sample();
    let s = t.select(&[true, true, false, true, false]);
    assert_eq!(s.len(), 3);
    assert_eq!(s.nodes()[2].parent, Some(1));
    assert_eq!(s.token(2), 3);
    assert_eq!(s.meta()[2].score, 0.4);
}

#[test]
fn malformed_trees_name_the_first_bad_node() {
    let mut t = TokenTree::rooted(0);
    t.push(1, Some(0), d(1.0));
    t.push(1, Some(0), d(1.0));
    assert_eq!(
        t.check_dfs(),
        Err(TreeError::DuplicateSibling { node: 2, token: 1 })
    );
    let mut t = TokenTree::rooted(0);
    let a = t.push(1, Some(0), d(1.0));
    t.push(2, Some(0), d(1.0));
    t.push(3, Some(a), d(1.0));
    assert_eq!(
        t.check_dfs(),
        Err(TreeError::NotContiguous { node: 3, parent: 1 })
    );
}

#[test]
fn a_chain_is_a_forest_of_one_root() {
    let t = TokenTree::chain(&[5, 6, 7]);
    assert_eq!(t.depths(), vec![0, 1, 2]);
    assert!(t.is_chain_from_root(&[0, 1, 2]));
}

proptest! {
    /// Chains, depths and paths agree with each other on random parents-first trees.
    #[test]
    fn chains_depths_and_paths_agree(parents in prop::collection::vec(any::<u32>(), 1..64)) {
        let mut t = TokenTree::new();
        for (i, p) in parents.iter().enumerate() {
            let parent = if i == 0 || p % 5 == 0 { None } else { Some(p % i as u32) };
            t.push(i as u32, parent, d(0.5));
        }
        let chains = ancestor_chains(t.nodes()).unwrap();
        let depths = t.depths();
        for i in 0..t.len() {
            prop_assert_eq!(&chains[i], &t.path_to(i));
            prop_assert_eq!(chains[i].len() - 1, depths[i]);
            prop_assert!(t.is_chain_from_root(&chains[i]));
        }
    }
}
