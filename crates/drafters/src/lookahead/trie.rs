//! A trie of token windows with occurrence counts (Lookahead's n-gram pool).
//!
//! Each node counts the inserted windows that pass through it, so counts never grow from a
//! parent to a child. Children are kept sorted by count (descending, updated in O(log n)
//! per increment), so best-first drafting reads the best children without scanning a
//! node's whole fan-out, and decay can cut the low-count tail.

use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};

use crate::hash::FastMap;

/// Index of a trie node; [`Trie::ROOT`] is the empty path.
pub type NodeId = u32;

/// Limits of a [`Trie`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrieConfig {
    /// Past this many nodes (root excluded) the trie decays: nodes with count <= 1 are
    /// dropped and the others' counts halved.
    pub max_nodes: usize,
}

impl Default for TrieConfig {
    fn default() -> Self {
        // ~60 bytes a node: about 30 MB at the limit.
        TrieConfig { max_nodes: 500_000 }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct TrieNode {
    pub token: u32,
    pub count: u32,
    pub parent: u32,
    /// Index of this node in its parent's `children`.
    pub slot: u32,
    /// Sorted by count, highest first.
    pub children: Vec<u32>,
}

/// Token-window trie with counts. Shared by requests as `Arc<Mutex<Trie>>` for output
/// counts; a drafter also keeps a private one for its prompt.
#[derive(Debug)]
pub struct Trie {
    pub(crate) nodes: Vec<TrieNode>,
    edges: FastMap<u64, u32>,
    config: TrieConfig,
    /// Unique per trie instance and renewed whenever node ids change (decay), so holders
    /// of ids notice even when the whole trie behind a shared lock is replaced.
    epoch: u64,
}

fn fresh_epoch() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, AtomicOrdering::Relaxed)
}

impl Clone for Trie {
    fn clone(&self) -> Self {
        Trie {
            nodes: self.nodes.clone(),
            edges: self.edges.clone(),
            config: self.config.clone(),
            epoch: fresh_epoch(),
        }
    }
}

#[inline]
fn edge(parent: u32, token: u32) -> u64 {
    ((parent as u64) << 32) | token as u64
}

impl Default for Trie {
    fn default() -> Self {
        Trie::new(TrieConfig::default())
    }
}

impl Trie {
    /// The root node (the empty window).
    pub const ROOT: NodeId = 0;

    /// An empty trie bounded by `config`.
    pub fn new(config: TrieConfig) -> Self {
        Trie {
            nodes: vec![TrieNode {
                token: 0,
                count: 0,
                parent: u32::MAX,
                slot: 0,
                children: Vec::new(),
            }],
            edges: FastMap::default(),
            config,
            epoch: fresh_epoch(),
        }
    }

    /// Nodes, the root excluded.
    pub fn len(&self) -> usize {
        self.nodes.len() - 1
    }

    /// Whether the trie has no node besides the root.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Changes whenever existing node ids are invalidated.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The child of `node` reached by `token`, if any.
    pub fn child(&self, node: NodeId, token: u32) -> Option<NodeId> {
        self.edges.get(&edge(node, token)).copied()
    }

    /// The node at the end of `path` from the root.
    pub fn find(&self, path: &[u32]) -> Option<NodeId> {
        path.iter().try_fold(Self::ROOT, |n, &t| self.child(n, t))
    }

    /// Windows inserted through the node at `path` (0 if there is none).
    pub fn count(&self, path: &[u32]) -> u32 {
        self.find(path).map_or(0, |n| self.node_count(n))
    }

    /// Windows inserted through `node`.
    pub fn node_count(&self, node: NodeId) -> u32 {
        self.nodes[node as usize].count
    }

    /// The token on the edge into `node` (0 for the root).
    pub fn node_token(&self, node: NodeId) -> u32 {
        self.nodes[node as usize].token
    }

    /// Children of `node`, highest count first.
    pub fn children(&self, node: NodeId) -> &[NodeId] {
        &self.nodes[node as usize].children
    }

    /// Adds one to the count of `token` under `parent` (creating it); returns the child.
    pub fn increment(&mut self, parent: NodeId, token: u32) -> NodeId {
        let id = match self.child(parent, token) {
            Some(c) => c,
            None => {
                let c = self.nodes.len() as u32;
                let slot = self.nodes[parent as usize].children.len() as u32;
                self.nodes.push(TrieNode {
                    token,
                    count: 0,
                    parent,
                    slot,
                    children: Vec::new(),
                });
                self.nodes[parent as usize].children.push(c);
                self.edges.insert(edge(parent, token), c);
                c
            }
        };
        let old = self.nodes[id as usize].count;
        self.nodes[id as usize].count = old.saturating_add(1);
        // Keep siblings sorted: swap with the first sibling that has the old count.
        let mut kids = std::mem::take(&mut self.nodes[parent as usize].children);
        let i = self.nodes[id as usize].slot as usize;
        let j = kids[..i].partition_point(|&k| self.nodes[k as usize].count > old);
        if j < i {
            kids.swap(i, j);
            self.nodes[kids[i] as usize].slot = i as u32;
            self.nodes[kids[j] as usize].slot = j as u32;
        }
        self.nodes[parent as usize].children = kids;
        id
    }

    /// Inserts one window: every prefix of `path` gains one.
    pub fn insert(&mut self, path: &[u32]) {
        let mut n = Self::ROOT;
        for &t in path {
            n = self.increment(n, t);
        }
    }

    /// Inserts every window `tokens[s..s + window]` (shorter at the end) whose first token
    /// may start one.
    pub fn insert_windows(
        &mut self,
        tokens: &[u32],
        window: usize,
        can_start: &dyn Fn(u32) -> bool,
    ) {
        self.insert_windows_up_to(tokens, window, can_start, usize::MAX);
    }

    /// [`Trie::insert_windows`] while the trie holds fewer than `max_nodes` nodes; returns
    /// whether every window went in.
    pub fn insert_windows_up_to(
        &mut self,
        tokens: &[u32],
        window: usize,
        can_start: &dyn Fn(u32) -> bool,
        max_nodes: usize,
    ) -> bool {
        for s in 0..tokens.len() {
            if self.len() >= max_nodes {
                return false;
            }
            if can_start(tokens[s]) {
                self.insert(&tokens[s..(s + window).min(tokens.len())]);
            }
        }
        true
    }

    /// Decays while the trie is past its node limit (each round halves every count, so
    /// this ends); returns whether it decayed.
    pub fn maybe_decay(&mut self) -> bool {
        let over = self.len() > self.config.max_nodes;
        while self.len() > self.config.max_nodes {
            self.decay();
        }
        over
    }

    /// Drops every node with count <= 1 and halves the others' counts (Lookahead's
    /// squeeze). Node ids change (the epoch moves on).
    pub fn decay(&mut self) {
        let old = std::mem::take(&mut self.nodes);
        let mut fresh = Trie::new(self.config.clone());
        fresh.nodes.reserve(old.len() / 2);
        // Breadth-first over kept nodes: (old id, new id). Children are sorted by count,
        // so the kept ones (count >= 2) are a prefix and halving keeps them sorted.
        let mut queue = std::collections::VecDeque::new();
        queue.push_back((0u32, 0u32));
        while let Some((o, n)) = queue.pop_front() {
            for &c in &old[o as usize].children {
                let oc = &old[c as usize];
                if oc.count <= 1 {
                    break;
                }
                let id = fresh.nodes.len() as u32;
                let slot = fresh.nodes[n as usize].children.len() as u32;
                fresh.nodes.push(TrieNode {
                    token: oc.token,
                    count: oc.count / 2,
                    parent: n,
                    slot,
                    children: Vec::new(),
                });
                fresh.nodes[n as usize].children.push(id);
                fresh.edges.insert(edge(n, oc.token), id);
                queue.push_back((c, id));
            }
        }
        self.nodes = fresh.nodes;
        self.edges = fresh.edges;
        self.epoch = fresh_epoch();
    }

    /// Takes in every path of `other`: a path both hold keeps the larger count, a path only
    /// `other` holds is added. Used when a trie file changed on disk since this trie was read
    /// from it (another process saved): the maximum keeps both sides' paths without counting
    /// twice what both learned from the same file, so merging again changes nothing. Counts
    /// never exceed their parent's (max is monotone); decays if past the node limit.
    /// Existing node ids stay valid unless it decays (the epoch then moves on).
    pub fn merge_max(&mut self, other: &Trie) {
        let mut stack = vec![(Self::ROOT, Self::ROOT)];
        while let Some((o, n)) = stack.pop() {
            for &oc in &other.nodes[o as usize].children {
                let token = other.nodes[oc as usize].token;
                let count = other.nodes[oc as usize].count;
                let id = match self.child(n, token) {
                    Some(c) => c,
                    None => {
                        let c = self.nodes.len() as u32;
                        self.nodes.push(TrieNode {
                            token,
                            count: 0,
                            parent: n,
                            slot: 0,
                            children: Vec::new(),
                        });
                        self.nodes[n as usize].children.push(c);
                        self.edges.insert(edge(n, token), c);
                        c
                    }
                };
                let node = &mut self.nodes[id as usize];
                node.count = node.count.max(count);
                stack.push((oc, id));
            }
        }
        self.resort_children();
        self.maybe_decay();
    }

    /// Restores the sorted-siblings invariant and the slots everywhere.
    fn resort_children(&mut self) {
        for n in 0..self.nodes.len() {
            let mut kids = std::mem::take(&mut self.nodes[n].children);
            kids.sort_by(|&a, &b| {
                self.nodes[b as usize]
                    .count
                    .cmp(&self.nodes[a as usize].count)
            });
            for (s, &k) in kids.iter().enumerate() {
                self.nodes[k as usize].slot = s as u32;
            }
            self.nodes[n].children = kids;
        }
    }

    /// The largest token id on any node, `None` when empty.
    pub fn max_token(&self) -> Option<u32> {
        self.nodes[1..].iter().map(|n| n.token).max()
    }

    /// Every node as (path from the root, count), sorted by path: for inspection and tests.
    pub fn entries(&self) -> Vec<(Vec<u32>, u32)> {
        let mut out = Vec::with_capacity(self.len());
        let mut stack: Vec<(u32, Vec<u32>)> = vec![(Self::ROOT, Vec::new())];
        while let Some((n, path)) = stack.pop() {
            for &c in &self.nodes[n as usize].children {
                let mut p = path.clone();
                p.push(self.nodes[c as usize].token);
                out.push((p.clone(), self.nodes[c as usize].count));
                stack.push((c, p));
            }
        }
        out.sort();
        out
    }

    /// Rebuilds a trie from (parent, token, count) triples in an order where parents come
    /// first (ids 1..; parent 0 is the root). Used by loading; checks are the caller's.
    pub(crate) fn from_parts(
        config: TrieConfig,
        parts: &[(u32, u32, u32)],
    ) -> Result<Trie, String> {
        let mut t = Trie::new(config);
        t.nodes.reserve(parts.len());
        for (i, &(parent, token, count)) in parts.iter().enumerate() {
            let id = (i + 1) as u32;
            if parent >= id {
                return Err(format!(
                    "node {id}: parent {parent} does not come before it"
                ));
            }
            if count == 0 {
                return Err(format!("node {id}: zero count"));
            }
            if parent != Self::ROOT && count > t.nodes[parent as usize].count {
                return Err(format!("node {id}: count {count} exceeds its parent's"));
            }
            if t.edges.insert(edge(parent, token), id).is_some() {
                return Err(format!(
                    "node {id}: duplicate token {token} under node {parent}"
                ));
            }
            let slot = t.nodes[parent as usize].children.len() as u32;
            t.nodes.push(TrieNode {
                token,
                count,
                parent,
                slot,
                children: Vec::new(),
            });
            t.nodes[parent as usize].children.push(id);
        }
        // The file's sibling order is not trusted: restore the sorted invariant.
        t.resort_children();
        Ok(t)
    }
}

/// Equal when the same paths carry the same counts (node ids and limits aside).
impl PartialEq for Trie {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.entries() == other.entries()
    }
}
