//! The nodes one beam puts in a target forward: its pending tokens, the draft's beams
//! below it and the tokens the catalogue forces after them. They form the engine's one
//! [`TokenTree`] (a pending token is a root node, a drafted one comes from the model
//! with its log-probability, a forced one from the catalogue); what only beam search
//! needs is a side table keyed by node.

use std::collections::HashMap;

use specdec_drafters::{Meta, Source, TokenTree};
use specdec_runtime::{Logits, Node};

use super::draft::DraftTree;
use super::search::Beam;
use super::{Catalogue, TrieNode};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A token of the beam the cache has not seen yet.
    Pending,
    /// The draft's node with this index.
    Drafted(usize),
    /// The catalogue's only continuation (jump-forward).
    Forced,
}

/// One beam's share of a target forward.
///
/// Positions: `None` is the beam itself when it has no pending tokens (its logits are
/// known ahead); with pending tokens the beam is at its last pending node.
pub(crate) struct BeamTree {
    tree: TokenTree,
    /// Per node, the draft node it is (drafted nodes only).
    drafted: Vec<Option<usize>>,
    /// The trie node each node's token leads to.
    pub trie: Vec<TrieNode>,
    kids: HashMap<(Option<usize>, u32), usize>,
    /// Per node, its last drafted or forced child and how many it has (the beam's own
    /// position's in `root_kids`): leaves and forced chains without rescanning the tree.
    last_kid: Vec<Option<usize>>,
    kid_count: Vec<u32>,
    root_kids: u32,
    pub logits: Option<Logits>,
}

impl BeamTree {
    /// The beam's pending tokens, the draft nodes hanging below it (end tokens left out:
    /// they need no logits), and with `forced` > 0 the catalogue's forced tokens after the
    /// beam when nothing was drafted below it (at most `forced`) and after every draft leaf
    /// (at most `forced_after_draft`: each costs a row per leaf, most of which the round
    /// will not keep).
    pub fn build(
        beam: &Beam,
        beam_index: usize,
        draft: Option<&DraftTree>,
        cat: &Catalogue,
        forced: usize,
        forced_after_draft: usize,
        max_nodes: usize,
    ) -> BeamTree {
        let mut t = BeamTree {
            tree: TokenTree::new(),
            drafted: Vec::new(),
            trie: Vec::new(),
            kids: HashMap::new(),
            last_kid: Vec::new(),
            kid_count: Vec::new(),
            root_kids: 0,
            logits: None,
        };
        // Drafted and forced nodes only where the context has room for them, and up to
        // `max_nodes` in all (fewer forced or drafted nodes only mean more rounds; the pending
        // tokens always fit: the search checked its prompt against the context).
        let seq = &beam.target.seq;
        let room = seq.max_len().saturating_sub(seq.len()).min(max_nodes);
        let pending = &beam.target.pending;
        for (i, &tok) in pending.iter().enumerate() {
            // Only the last pending node is a position of the beam; its trie node is the
            // beam's.
            t.push(tok, i.checked_sub(1), None, Meta::root(), beam.trie);
        }
        let anchor = pending.len().checked_sub(1);
        let anchor_trie = if anchor.is_some() {
            beam.trie
        } else {
            beam.trie_after_extra(cat)
        };
        if let Some(d) = draft {
            let mut at: Vec<Option<usize>> = vec![None; d.nodes.len()];
            for (i, n) in d.nodes.iter().enumerate() {
                if n.beam != beam_index || n.side.is_none() {
                    continue;
                }
                let parent = match d.parent(i) {
                    None => anchor,
                    Some(p) => match at[p] {
                        Some(idx) => Some(idx),
                        None => continue,
                    },
                };
                if t.len() >= room {
                    break;
                }
                let meta = d.tree.meta()[i];
                at[i] = Some(t.push(d.token(i), parent, Some(i), meta, n.trie));
            }
        }
        if forced > 0 {
            let mut leaves: Vec<(Option<usize>, TrieNode, usize)> = Vec::new();
            if !t.has_kids(anchor) {
                leaves.push((anchor, anchor_trie, forced));
            }
            if forced_after_draft > 0 {
                for i in 0..t.len() {
                    if t.kind(i) != Kind::Pending && !t.has_kids(Some(i)) {
                        leaves.push((Some(i), t.trie[i], forced_after_draft.min(forced)));
                    }
                }
            }
            for (mut at, trie, cap) in leaves {
                let mut node = trie;
                for tok in cat.forced(trie).into_iter().take(cap) {
                    if t.len() >= room {
                        break;
                    }
                    node = cat.child(node, tok).expect("forced tokens follow the trie");
                    let meta = Meta::drafted(Source::Catalogue, 1.0);
                    at = Some(t.push(tok, at, None, meta, node));
                }
            }
        }
        t
    }

    /// Adds to `counts[j]` how many of this beam's positions `j` steps into the round
    /// have logits in it: the `ahead` forced steps already computed, then the tree's
    /// drafted and forced nodes by depth (pending nodes are the beam itself, depth 0).
    pub fn depth_counts(&self, ahead: usize, counts: &mut Vec<usize>) {
        let mut depth = vec![0usize; self.len()];
        let bump = |counts: &mut Vec<usize>, j: usize| {
            if counts.len() <= j {
                counts.resize(j + 1, 0);
            }
            counts[j] += 1;
        };
        for j in 1..=ahead {
            bump(counts, j);
        }
        for i in 0..self.len() {
            if self.kind(i) == Kind::Pending {
                continue;
            }
            depth[i] = 1 + self.tree.parent(i).map_or(0, |p| depth[p]);
            bump(counts, ahead + depth[i]);
        }
    }

    fn push(
        &mut self,
        token: u32,
        parent: Option<usize>,
        drafted: Option<usize>,
        meta: Meta,
        trie: TrieNode,
    ) -> usize {
        let i = self.tree.push(token, parent.map(|p| p as u32), meta) as usize;
        self.drafted.push(drafted);
        self.trie.push(trie);
        self.last_kid.push(None);
        self.kid_count.push(0);
        if meta.source != Source::Root {
            self.kids.insert((parent, token), i);
            match parent {
                Some(p) => {
                    self.kid_count[p] += 1;
                    self.last_kid[p] = Some(i);
                }
                None => self.root_kids += 1,
            }
        }
        i
    }

    /// What node `i` is.
    pub fn kind(&self, i: usize) -> Kind {
        match (self.tree.meta()[i].source, self.drafted[i]) {
            (Source::Root, _) => Kind::Pending,
            (_, Some(d)) => Kind::Drafted(d),
            _ => Kind::Forced,
        }
    }

    /// The nodes, parents before children: what the forward runs.
    pub fn nodes(&self) -> &[Node] {
        self.tree.nodes()
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.tree.len()
    }

    /// Whether the beam puts nothing in the forward.
    pub fn is_empty(&self) -> bool {
        self.tree.is_empty()
    }

    /// The token of node `i`.
    pub fn token(&self, i: usize) -> u32 {
        self.tree.token(i)
    }

    fn has_kids(&self, at: Option<usize>) -> bool {
        match at {
            Some(i) => self.kid_count[i] > 0,
            None => self.root_kids > 0,
        }
    }

    /// The node `token` leads to from position `at`, if it is in the tree.
    pub fn child(&self, at: Option<usize>, token: u32) -> Option<usize> {
        self.kids.get(&(at, token)).copied()
    }

    /// The only node below `i` when it is a forced one.
    pub fn forced_kid(&self, i: usize) -> Option<usize> {
        match self.last_kid[i] {
            Some(j) if self.kid_count[i] == 1 && self.kind(j) == Kind::Forced => Some(j),
            _ => None,
        }
    }

    /// Node indices from a root down to `i`.
    pub fn chain(&self, i: usize) -> Vec<usize> {
        self.tree.path_to(i)
    }

    pub fn row(&self, i: usize) -> &[f32] {
        self.logits
            .as_ref()
            .and_then(|l| l.get(i))
            .expect("the tree was forwarded with every node's logits")
    }
}
