//! Building a drafter's [`TokenTree`] from scored candidates: every drafter (and the mix)
//! proposes token sequences or nodes, identical prefixes are merged, and the tree is
//! trimmed to the budget best-first while staying connected, then emitted below its root in
//! DFS order.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use specdec_tree::{Meta, Source, TokenTree};

const NONE: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
struct Candidate {
    token: u32,
    parent: u32,
    first_child: u32,
    next_sibling: u32,
    source: Source,
    /// The longest match behind any contribution (0: none was a copy after a match).
    match_len: u32,
    /// Whether any contribution was an unambiguous copy (see `Meta::unambiguous`).
    unambiguous: bool,
    /// Combined (noisy-or) score of all contributions.
    score: f32,
    /// The largest single contribution: its source names the node.
    best: f32,
    /// A draft model's log-probability of the token, if a draft model proposed it.
    logprob: Option<f32>,
}

/// Heap entry: best score first, then the earliest node (deterministic ties).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Entry(f32, u32);

impl Eq for Entry {}

impl Ord for Entry {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0).then(other.1.cmp(&self.1))
    }
}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Accumulates candidate nodes as a prefix tree, then emits the best `budget` of them.
///
/// Scores are clamped to `[0, 1]` and read as acceptance probabilities: two contributions
/// `a` and `b` to one node combine as `1 - (1 - a)(1 - b)` (noisy-or), so agreement between
/// occurrences or drafters raises a node without ever exceeding 1.
#[derive(Default, Debug)]
pub struct TreeBuilder {
    nodes: Vec<Candidate>,
    first_root: u32,
    pins: Vec<u32>,
    // Scratch reused across builds so drafting does not allocate per call.
    keep: Vec<bool>,
    heap: BinaryHeap<Entry>,
    kids: Vec<u32>,
    stack: Vec<(u32, u32)>,
}

impl TreeBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        TreeBuilder {
            first_root: NONE,
            ..Default::default()
        }
    }

    /// Forgets all nodes and pins (keeps allocations).
    pub fn clear(&mut self) {
        self.nodes.clear();
        self.pins.clear();
        self.first_root = NONE;
    }

    /// The token of node `id`.
    pub fn token(&self, id: usize) -> u32 {
        self.nodes[id].token
    }

    /// The combined score of node `id`.
    pub fn score(&self, id: usize) -> f32 {
        self.nodes[id].score
    }

    /// Distinct nodes added so far.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether no node has been added.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The child of `parent` (`None`: a node directly below the tree's root) with this
    /// token, if it exists.
    pub fn find(&self, parent: Option<usize>, token: u32) -> Option<usize> {
        let mut c = match parent {
            None => self.first_root,
            Some(p) => self.nodes[p].first_child,
        };
        while c != NONE {
            let n = &self.nodes[c as usize];
            if n.token == token {
                return Some(c as usize);
            }
            c = n.next_sibling;
        }
        None
    }

    /// Adds evidence for `token` under `parent`, creating the node if needed; returns it.
    pub fn add(&mut self, parent: Option<usize>, token: u32, source: Source, score: f32) -> usize {
        self.add_copied(parent, token, source, score, 0)
    }

    /// [`TreeBuilder::add`] for a copy after a match of `match_len` tokens.
    pub fn add_copied(
        &mut self,
        parent: Option<usize>,
        token: u32,
        source: Source,
        score: f32,
        match_len: u32,
    ) -> usize {
        let s = if score.is_nan() {
            0.0
        } else {
            score.clamp(0.0, 1.0)
        };
        if let Some(id) = self.find(parent, token) {
            let n = &mut self.nodes[id];
            n.score = 1.0 - (1.0 - n.score) * (1.0 - s);
            if s > n.best {
                n.best = s;
                n.source = source;
            }
            n.match_len = n.match_len.max(match_len);
            return id;
        }
        let id = self.nodes.len() as u32;
        let (parent_raw, next) = match parent {
            None => (NONE, std::mem::replace(&mut self.first_root, id)),
            Some(p) => (
                p as u32,
                std::mem::replace(&mut self.nodes[p].first_child, id),
            ),
        };
        self.nodes.push(Candidate {
            token,
            parent: parent_raw,
            first_child: NONE,
            next_sibling: next,
            source,
            match_len,
            unambiguous: false,
            score: s,
            best: s,
            logprob: None,
        });
        id as usize
    }

    /// Adds a chain continuing the context, copied after a match of `match_len` tokens (0:
    /// not a copy after a match); `score(depth)` scores its `depth`-th token (0-based).
    /// Returns the first node (the branch's, where evidence is keyed), or `None` for an
    /// empty chain.
    pub fn add_path(
        &mut self,
        tokens: &[u32],
        source: Source,
        match_len: u32,
        mut score: impl FnMut(usize) -> f32,
    ) -> Option<usize> {
        let mut first = None;
        let mut parent = None;
        for (d, &t) in tokens.iter().enumerate() {
            let id = self.add_copied(parent, t, source, score(d), match_len);
            first.get_or_insert(id);
            parent = Some(id);
        }
        first
    }

    /// Merges a whole rooted tree (another drafter's) below this one's root, its scores
    /// scaled by `weight`; returns each of its nodes' id here (`None` for its root). A
    /// malformed tree (a parent index not before its child, or a second root) is cut at
    /// that node.
    pub fn add_tree(&mut self, tree: &TokenTree, weight: f32) -> Vec<Option<usize>> {
        let mut map: Vec<Option<usize>> = Vec::with_capacity(tree.len());
        for (i, (n, m)) in tree.nodes().iter().zip(tree.meta()).enumerate() {
            let id = match n.parent {
                None if i == 0 => None,
                Some(p) if (p as usize) < i => {
                    let id = self.add_copied(
                        map[p as usize],
                        n.token,
                        m.source,
                        m.score * weight,
                        m.match_len,
                    );
                    let c = &mut self.nodes[id];
                    c.unambiguous |= m.unambiguous;
                    // A draft model's probability travels with its node (relaxed and
                    // beam verification, and draft sizing, read it).
                    if let Some(lp) = m.logprob {
                        c.logprob = Some(c.logprob.map_or(lp, |x| x.max(lp)));
                    }
                    Some(id)
                }
                _ => break,
            };
            map.push(id);
        }
        map
    }

    /// Marks node `id` as an unambiguous copy (see `Meta::unambiguous`): every occurrence
    /// of the context it was copied after continues with its token.
    pub fn mark_unambiguous(&mut self, id: usize) {
        self.nodes[id].unambiguous = true;
    }

    /// Asks `build` to keep `id` and its ancestors before anything chosen by score (pins
    /// are honoured in the order given, as long as the budget allows).
    pub fn pin(&mut self, id: usize) {
        self.pins.push(id as u32);
    }

    /// The tree rooted at `root` (the context's last token) holding the best `budget` nodes
    /// below it (pinned first, then best-first by score among nodes whose parent is kept),
    /// in DFS order with the higher-scored sibling first.
    pub fn build(&mut self, root: u32, budget: usize) -> TokenTree {
        let n = self.nodes.len();
        let mut out = TokenTree::with_capacity(1 + n.min(budget));
        out.push(root, None, Meta::root());
        if budget == 0 || n == 0 {
            return out;
        }
        self.keep.clear();
        self.keep.resize(n, false);
        if n <= budget {
            self.keep.fill(true);
        } else {
            let mut kept = 0;
            for i in 0..self.pins.len() {
                let mut chain = 0;
                let mut c = self.pins[i];
                while c != NONE && !self.keep[c as usize] {
                    chain += 1;
                    c = self.nodes[c as usize].parent;
                }
                if kept + chain > budget {
                    continue;
                }
                let mut c = self.pins[i];
                while c != NONE && !self.keep[c as usize] {
                    self.keep[c as usize] = true;
                    c = self.nodes[c as usize].parent;
                }
                kept += chain;
            }
            // Frontier: nodes not kept whose parent is kept (or roots).
            self.heap.clear();
            for (i, nd) in self.nodes.iter().enumerate() {
                let open = nd.parent == NONE || self.keep[nd.parent as usize];
                if !self.keep[i] && open {
                    self.heap.push(Entry(nd.score, i as u32));
                }
            }
            while kept < budget {
                let Some(Entry(_, i)) = self.heap.pop() else {
                    break;
                };
                self.keep[i as usize] = true;
                kept += 1;
                let mut c = self.nodes[i as usize].first_child;
                while c != NONE {
                    self.heap.push(Entry(self.nodes[c as usize].score, c));
                    c = self.nodes[c as usize].next_sibling;
                }
            }
        }
        self.emit(&mut out);
        out
    }

    /// Appends the kept nodes below `out`'s root in DFS order.
    fn emit(&mut self, out: &mut TokenTree) {
        self.stack.clear();
        self.push_children(NONE, 0);
        while let Some((i, parent)) = self.stack.pop() {
            let nd = self.nodes[i as usize];
            let meta = Meta {
                logprob: nd.logprob,
                unambiguous: nd.unambiguous,
                ..Meta::copied(nd.source, nd.score, nd.match_len)
            };
            let me = out.push(nd.token, Some(parent), meta);
            self.push_children(i, me);
        }
    }

    /// Pushes the kept children of `node` (`NONE`: the nodes below the root), to hang below
    /// `out_parent` in the output, so that the best is popped first.
    fn push_children(&mut self, node: u32, out_parent: u32) {
        self.kids.clear();
        let mut c = if node == NONE {
            self.first_root
        } else {
            self.nodes[node as usize].first_child
        };
        while c != NONE {
            if self.keep[c as usize] {
                self.kids.push(c);
            }
            c = self.nodes[c as usize].next_sibling;
        }
        let nodes = &self.nodes;
        self.kids.sort_by(|&a, &b| {
            Entry(nodes[a as usize].score, a).cmp(&Entry(nodes[b as usize].score, b))
        });
        // Ascending order: the best comes last in `kids`, so push worst first.
        for &k in &self.kids {
            self.stack.push((k, out_parent));
        }
    }
}

/// What a drafter returns when it proposes nothing: the root alone (no tree at all for an
/// empty context).
pub(crate) fn undrafted(context: &[u32]) -> TokenTree {
    context
        .last()
        .map_or_else(TokenTree::new, |&t| TokenTree::rooted(t))
}
