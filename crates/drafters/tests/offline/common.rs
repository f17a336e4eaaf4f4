//! Helpers shared by the tests.

use specdec_drafters::{Meta, TokenTree};

/// Asserts the tree is what a drafter must return for `context`: rooted at its last token
/// (empty for an empty context), well-formed and within budget.
pub fn check_tree(tree: &TokenTree, context: &[u32], budget: usize) {
    assert!(
        tree.drafted() <= budget,
        "{} nodes > budget {budget}",
        tree.drafted()
    );
    if let Err(e) = tree.check_dfs() {
        panic!("malformed tree: {e}\n{tree:?}");
    }
    match context.last() {
        Some(&pending) => {
            assert!(
                tree.is_rooted_at(pending),
                "not rooted at {pending}: {tree:?}"
            );
            assert_eq!(tree.meta()[0], Meta::root());
        }
        None => assert!(tree.is_empty(), "{tree:?}"),
    }
}

/// Metadata of the drafted nodes (all but the root).
pub fn drafted_meta(tree: &TokenTree) -> &[Meta] {
    tree.meta().get(1..).unwrap_or_default()
}

/// Token sequences of every path from below the root to a leaf.
pub fn leaf_paths(tree: &TokenTree) -> Vec<Vec<u32>> {
    (1..tree.len())
        .filter(|&i| tree.children(i).next().is_none())
        .map(|i| tree.tokens_below_root(i))
        .collect()
}

/// Whether `tokens` is a path from below the root.
pub fn contains_path(tree: &TokenTree, tokens: &[u32]) -> bool {
    let mut at = 0;
    for &t in tokens {
        match tree.child_with(Some(at), t) {
            Some(i) => at = i,
            None => return false,
        }
    }
    true
}

/// The path below the root that takes the best-scored child at every level (ties: earliest
/// node).
pub fn first_choice(tree: &TokenTree) -> Vec<u32> {
    let mut out = Vec::new();
    let mut at = 0;
    loop {
        let mut best: Option<usize> = None;
        for c in tree.children(at) {
            if best.is_none_or(|b| tree.meta()[c].score > tree.meta()[b].score) {
                best = Some(c);
            }
        }
        match best {
            Some(b) => {
                out.push(tree.token(b));
                at = b;
            }
            None => return out,
        }
    }
}

/// A small deterministic generator (tests must not depend on an RNG crate's versions).
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    pub fn below(&mut self, n: u64) -> u32 {
        (self.next() % n) as u32
    }
}

/// Rewrites the checksum so that only the semantic checks can object.
pub fn reseal(b: &mut [u8]) {
    let n = b.len() - 8;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &x in &b[..n] {
        h ^= x as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    b[n..].copy_from_slice(&h.to_le_bytes());
}
