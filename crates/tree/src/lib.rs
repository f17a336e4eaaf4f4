//! The token tree specdec's parts share, with one numbering everywhere.
//!
//! Node 0 of a decode step's tree is its *root*: the pending token (emitted, not yet in the
//! cache). Drafted nodes hang below it. Drafters build this tree, the budget trims it, the
//! runtime evaluates it as it is and verifiers walk it, so no part renumbers another's nodes.
//! A tree may also be a forest of chains whose roots all continue the committed prefix (a
//! prefill chunk is one chain with no draft).
//!
//! Nodes are kept in an order where every parent precedes its children; drafters emit
//! depth-first order (each subtree contiguous), which [`TokenTree::check_dfs`] checks.

mod meta;
mod walk;

pub use meta::{Meta, Source};
pub use walk::{ancestor_chains, chain_break};

/// One token to evaluate. `parent` indexes an earlier node of the same tree; `None` means
/// the node directly continues the sequence's committed tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Node {
    /// The token id.
    pub token: u32,
    /// Index of the parent node in the same tree, or `None` for a node that continues the
    /// committed tokens directly (a root).
    pub parent: Option<u32>,
}

impl Node {
    /// `tokens` as one chain after the committed prefix.
    pub fn chain(tokens: &[u32]) -> Vec<Node> {
        tokens
            .iter()
            .enumerate()
            .map(|(i, &token)| Node {
                token,
                parent: i.checked_sub(1).map(|p| p as u32),
            })
            .collect()
    }
}

/// Why a node list is not a well-formed tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TreeError {
    /// The node's parent does not precede it.
    ParentAfter {
        /// The offending node.
        node: usize,
        /// Its parent, at or after `node`.
        parent: u32,
    },
    /// The node's parent is not on the current root-to-node chain (DFS order broken).
    NotContiguous {
        /// The offending node.
        node: usize,
        /// Its parent, whose subtree an earlier node already left.
        parent: u32,
    },
    /// A sibling already carries the node's token.
    DuplicateSibling {
        /// The offending node.
        node: usize,
        /// The token it shares with an earlier sibling.
        token: u32,
    },
}

impl std::fmt::Display for TreeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            TreeError::ParentAfter { node, parent } => {
                write!(
                    f,
                    "node {node} has parent {parent}, which does not precede it"
                )
            }
            TreeError::NotContiguous { node, parent } => {
                write!(
                    f,
                    "node {node}: parent {parent}'s subtree is not contiguous"
                )
            }
            TreeError::DuplicateSibling { node, token } => {
                write!(f, "node {node}: a sibling already has token {token}")
            }
        }
    }
}

impl std::error::Error for TreeError {}

/// Nodes with their per-node metadata, parents before children.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TokenTree {
    nodes: Vec<Node>,
    meta: Vec<Meta>,
}

impl TokenTree {
    /// An empty tree.
    pub fn new() -> Self {
        TokenTree::default()
    }

    /// An empty tree with room for `nodes` nodes.
    pub fn with_capacity(nodes: usize) -> Self {
        TokenTree {
            nodes: Vec::with_capacity(nodes),
            meta: Vec::with_capacity(nodes),
        }
    }

    /// A tree holding only its root, the pending token.
    pub fn rooted(pending: u32) -> Self {
        let mut t = TokenTree::new();
        t.push(pending, None, Meta::root());
        t
    }

    /// `tokens` as one chain continuing the committed prefix (a prefill chunk).
    pub fn chain(tokens: &[u32]) -> Self {
        TokenTree {
            nodes: Node::chain(tokens),
            meta: vec![Meta::root(); tokens.len()],
        }
    }

    /// Appends a node and returns its index. `parent` must be an earlier node.
    pub fn push(&mut self, token: u32, parent: Option<u32>, meta: Meta) -> u32 {
        debug_assert!(parent.is_none_or(|p| (p as usize) < self.nodes.len()));
        self.nodes.push(Node { token, parent });
        self.meta.push(meta);
        (self.nodes.len() - 1) as u32
    }

    /// Number of nodes, the root included.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the tree has no node at all (not even a root).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Nodes other than the root of a rooted tree: what a drafter proposed.
    pub fn drafted(&self) -> usize {
        self.nodes.len().saturating_sub(1)
    }

    /// Whether this is a decode step's tree for `pending`: node 0 is `pending` with no
    /// parent and every other node hangs below some earlier node, so below the root.
    pub fn is_rooted_at(&self, pending: u32) -> bool {
        self.nodes.first()
            == Some(&Node {
                token: pending,
                parent: None,
            })
            && self.nodes[1..].iter().all(|n| n.parent.is_some())
    }

    /// The nodes, parents before children.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Per-node metadata, indexed like [`TokenTree::nodes`].
    pub fn meta(&self) -> &[Meta] {
        &self.meta
    }

    /// Per-node metadata, mutable (e.g. to rescore nodes after drafting).
    pub fn meta_mut(&mut self) -> &mut [Meta] {
        &mut self.meta
    }

    /// The token of node `i`.
    pub fn token(&self, i: usize) -> u32 {
        self.nodes[i].token
    }

    /// The parent of node `i`, `None` for a root.
    pub fn parent(&self, i: usize) -> Option<usize> {
        self.nodes[i].parent.map(|p| p as usize)
    }

    /// Keeps the first `n` nodes; in DFS (or any parents-first) order every kept node
    /// keeps its parent.
    pub fn truncate(&mut self, n: usize) {
        self.nodes.truncate(n);
        self.meta.truncate(n);
    }

    /// The nodes flagged in `keep`, in their order and renumbered; a kept node's parent
    /// must be kept too.
    pub fn select(&self, keep: &[bool]) -> TokenTree {
        let mut map = vec![u32::MAX; self.nodes.len()];
        let mut out = TokenTree::new();
        for (i, n) in self.nodes.iter().enumerate() {
            if !keep[i] {
                continue;
            }
            let parent = n.parent.map(|p| {
                let q = map[p as usize];
                assert!(q != u32::MAX, "node {i} is kept without its parent {p}");
                q
            });
            map[i] = out.push(n.token, parent, self.meta[i]);
        }
        out
    }

    /// The child of `node` carrying `token`, if any (`None` for `node`: the roots).
    pub fn child_with(&self, node: Option<usize>, token: u32) -> Option<usize> {
        let start = node.map_or(0, |n| n + 1);
        let parent = node.map(|n| n as u32);
        (start..self.nodes.len())
            .find(|&c| self.nodes[c].parent == parent && self.nodes[c].token == token)
    }

    /// The children of `node`, in order.
    pub fn children(&self, node: usize) -> impl Iterator<Item = usize> + '_ {
        (node + 1..self.nodes.len()).filter(move |&c| self.nodes[c].parent == Some(node as u32))
    }

    /// Checks that parents precede children.
    pub fn check_parents(&self) -> Result<(), TreeError> {
        walk::check_parents(&self.nodes)
    }

    /// Checks the shape every drafter returns: parents before children, each subtree
    /// contiguous (DFS order), siblings with distinct tokens. The error names the first
    /// offending node.
    pub fn check_dfs(&self) -> Result<(), TreeError> {
        walk::check_dfs(&self.nodes)
    }

    /// Every node's depth (0 for a root).
    pub fn depths(&self) -> Vec<usize> {
        walk::depths(&self.nodes)
    }

    /// The nodes from the root down to `node`, inclusive.
    pub fn path_to(&self, node: usize) -> Vec<usize> {
        walk::path_to(&self.nodes, node)
    }

    /// The tokens below the root down to `node` (empty for a root): what the target has
    /// read after the pending token when it computes `node`'s logits.
    pub fn tokens_below_root(&self, node: usize) -> Vec<u32> {
        let path = self.path_to(node);
        path[1..].iter().map(|&i| self.nodes[i].token).collect()
    }

    /// Whether `path` is a chain of this tree starting at a root.
    pub fn is_chain_from_root(&self, path: &[usize]) -> bool {
        walk::chain_break(&self.nodes, path).is_none()
    }
}

#[cfg(test)]
mod tests;
