//! Helpers shared by the tests.

use specdec_drafters::DraftTree;

/// Asserts the tree is well-formed and within budget.
pub fn check_tree(tree: &DraftTree, budget: usize) {
    assert!(
        tree.len() <= budget,
        "{} nodes > budget {budget}",
        tree.len()
    );
    if let Err(e) = tree.validate() {
        panic!("malformed tree: {e}\n{tree:?}");
    }
}

/// Token sequences of every root-to-leaf path.
pub fn leaf_paths(tree: &DraftTree) -> Vec<Vec<u32>> {
    let mut has_child = vec![false; tree.len()];
    for n in &tree.nodes {
        if let Some(p) = n.parent {
            has_child[p as usize] = true;
        }
    }
    (0..tree.len())
        .filter(|&i| !has_child[i])
        .map(|i| path_to(tree, i))
        .collect()
}

/// Tokens from the root down to node `i`.
pub fn path_to(tree: &DraftTree, i: usize) -> Vec<u32> {
    let mut p = vec![tree.nodes[i].token];
    let mut at = tree.nodes[i].parent;
    while let Some(a) = at {
        p.push(tree.nodes[a as usize].token);
        at = tree.nodes[a as usize].parent;
    }
    p.reverse();
    p
}

/// Whether `tokens` is a path from the roots.
pub fn contains_path(tree: &DraftTree, tokens: &[u32]) -> bool {
    let mut parent = None;
    for &t in tokens {
        match tree
            .nodes
            .iter()
            .position(|n| n.parent == parent && n.token == t)
        {
            Some(i) => parent = Some(i as u32),
            None => return false,
        }
    }
    true
}

/// The path that takes the best-scored child at every level (ties: earliest node).
pub fn first_choice(tree: &DraftTree) -> Vec<u32> {
    let mut out = Vec::new();
    let mut parent = None;
    loop {
        let mut best: Option<usize> = None;
        for (i, n) in tree.nodes.iter().enumerate() {
            if n.parent == parent && best.is_none_or(|b| n.score > tree.nodes[b].score) {
                best = Some(i);
            }
        }
        match best {
            Some(b) => {
                out.push(tree.nodes[b].token);
                parent = Some(b as u32);
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
