//! The draft's side of a round: constrained beam search with N beams for gamma steps from
//! the target's live beams, batched over every search that drafts this round.

use specdec_drafters::{Meta, Source, TokenTree};
use specdec_runtime::{Node, SeqInput, Target, Want};
use specdec_verify::beam::{
    log_normaliser, log_sum_exp, sample_without_replacement, top_k, Candidate,
};

use super::search::Search;
use super::side::Side;
use super::{Catalogue, DraftScoring, TrieNode};
use crate::EngineError;

/// What beam search keeps of a drafted (beam, token) pair beside its node in the tree.
pub(crate) struct DNode {
    /// The live beam it descends from.
    pub beam: usize,
    pub trie: TrieNode,
    /// The draft's cumulative log-probability (from the beam's target score).
    pub score: f64,
    pub step: usize,
    /// The draft's state after this token (`None` for an end token: nothing follows).
    pub side: Option<Side>,
}

/// What one search drafted this round: the engine's [`TokenTree`] of drafted tokens (a
/// root per first-step pair, below the beam it extends; each node from the model with
/// its log-probability) and a side table keyed by node.
pub(crate) struct DraftTree {
    /// Per live beam, the draft's state after the beam and its forced extra tokens.
    pub roots: Vec<Side>,
    pub tree: TokenTree,
    pub nodes: Vec<DNode>,
}

impl DraftTree {
    /// Node `i`'s parent draft node (`None`: the beam itself).
    pub fn parent(&self, i: usize) -> Option<usize> {
        self.tree.parent(i)
    }

    /// Node `i`'s token.
    pub fn token(&self, i: usize) -> u32 {
        self.tree.token(i)
    }
}

/// A side that drafts from at some step: a beam's root or a draft node.
#[derive(Clone, Copy)]
enum From {
    Root(usize),
    Node(usize),
}

/// Counts of the draft forwards, for the caller's statistics.
pub(crate) struct DraftWork {
    pub forwards: usize,
    /// Per search, the rows it put in them.
    pub rows: Vec<usize>,
    /// Per draft forward, its rows.
    pub sizes: Vec<usize>,
}

/// Drafts `plans[s] = (n, gamma)` for each search (gamma 0: none) and returns the trees.
pub(crate) fn draft_round(
    draft: &dyn Target,
    scoring: DraftScoring,
    cat: &Catalogue,
    searches: &mut [&mut Search],
    plans: &[(usize, usize)],
) -> Result<(Vec<Option<DraftTree>>, DraftWork), EngineError> {
    let mut trees: Vec<Option<DraftTree>> = searches
        .iter()
        .zip(plans)
        .map(|(s, &(_, gamma))| {
            (gamma > 0).then(|| DraftTree {
                roots: s
                    .live
                    .iter()
                    .map(|b| {
                        b.draft
                            .as_ref()
                            .expect("a drafting search keeps draft sides")
                            .advanced(&b.target.extra)
                    })
                    .collect(),
                tree: TokenTree::new(),
                nodes: Vec::new(),
            })
        })
        .collect();
    let mut work = DraftWork {
        forwards: 0,
        rows: vec![0; searches.len()],
        sizes: Vec::new(),
    };
    let max_gamma = plans.iter().map(|p| p.1).max().unwrap_or(0);
    for step in 0..max_gamma {
        // Who drafts from where this step.
        let frontiers: Vec<Vec<From>> = trees
            .iter()
            .zip(plans)
            .map(|(t, &(_, gamma))| match t {
                Some(t) if step < gamma => frontier(t, step),
                _ => Vec::new(),
            })
            .collect();
        let on = Frontiers {
            draft,
            scoring,
            cat,
            searches: &*searches,
            frontiers: &frontiers,
        };
        on.forward(&mut trees, step, &mut work)?;
        for (s, search) in searches.iter_mut().enumerate() {
            let Some(tree) = trees[s].as_mut() else {
                continue;
            };
            if frontiers[s].is_empty() {
                continue;
            }
            expand(tree, &frontiers[s], search, cat, scoring, plans[s].0, step);
        }
    }
    Ok((trees, work))
}

fn frontier(t: &DraftTree, step: usize) -> Vec<From> {
    if step == 0 {
        return (0..t.roots.len()).map(From::Root).collect();
    }
    (0..t.nodes.len())
        .filter(|&i| t.nodes[i].step == step - 1 && t.nodes[i].side.is_some())
        .map(From::Node)
        .collect()
}

fn side(t: &DraftTree, f: From) -> &Side {
    match f {
        From::Root(b) => &t.roots[b],
        From::Node(i) => t.nodes[i].side.as_ref().expect("frontier nodes have sides"),
    }
}

/// What one step's draft forward runs on.
struct Frontiers<'a> {
    draft: &'a dyn Target,
    scoring: DraftScoring,
    cat: &'a Catalogue,
    searches: &'a [&'a mut Search],
    /// Per search, who drafts from where this step.
    frontiers: &'a [Vec<From>],
}

impl Frontiers<'_> {
    /// One draft forward of every frontier side (of the searches drafting at `step`) whose
    /// next logits are unknown; a catalogue-scored draft computes just the side's trie
    /// children's.
    fn forward(
        &self,
        trees: &mut [Option<DraftTree>],
        step: usize,
        work: &mut DraftWork,
    ) -> Result<(), EngineError> {
        let mut sides: Vec<(&mut Side, TrieNode)> = Vec::new();
        for (s, t) in trees.iter_mut().enumerate() {
            let Some(t) = t.as_mut() else { continue };
            if self.frontiers[s].is_empty() {
                continue;
            }
            let before = sides.len();
            if step == 0 {
                let live = &self.searches[s].live;
                sides.extend(
                    t.roots
                        .iter_mut()
                        .zip(live)
                        .filter(|(x, _)| x.ahead.is_empty())
                        .map(|(x, b)| (x, b.trie_after_extra(self.cat))),
                );
            } else {
                sides.extend(
                    t.nodes
                        .iter_mut()
                        .filter(|n| n.step + 1 == step)
                        .filter_map(|n| n.side.as_mut().map(|x| (x, n.trie)))
                        .filter(|(x, _)| x.ahead.is_empty()),
                );
            }
            work.rows[s] += sides[before..]
                .iter()
                .map(|(x, _)| x.pending.len())
                .sum::<usize>();
        }
        if sides.is_empty() {
            return Ok(());
        }
        let chains: Vec<Vec<Node>> = sides.iter().map(|(x, _)| Node::chain(&x.pending)).collect();
        let logits = {
            let mut inputs: Vec<SeqInput<'_>> = sides
                .iter_mut()
                .zip(&chains)
                .map(|((x, trie), nodes)| SeqInput {
                    seq: &mut x.seq,
                    nodes,
                    want: self.want(*trie),
                })
                .collect();
            self.draft.forward(&mut inputs)?
        };
        work.forwards += 1;
        work.sizes.push(chains.iter().map(Vec::len).sum());
        for ((x, _), l) in sides.iter_mut().zip(&logits) {
            x.absorb(l)?;
        }
        Ok(())
    }

    /// The logits a side at `trie` needs: a full row, or its children's columns.
    fn want(&self, trie: TrieNode) -> Want {
        match self.scoring {
            DraftScoring::Vocabulary => Want::Last,
            DraftScoring::Catalogue => {
                Want::LastColumns(self.cat.children(trie).iter().map(|&(t, _)| t).collect())
            }
        }
    }
}

/// The step's N draft beams over the frontier: the best N by the draft's cumulative
/// log-probability (strict), or N sampled without replacement from the draft's
/// catalogue-constrained distribution (relaxed). A catalogue-scored draft's
/// log-probabilities are over the trie children in both.
fn expand(
    tree: &mut DraftTree,
    frontier: &[From],
    search: &mut Search,
    cat: &Catalogue,
    scoring: DraftScoring,
    n: usize,
    step: usize,
) {
    let over_children = search.rng.is_some() || scoring == DraftScoring::Catalogue;
    let mut cands = Vec::new();
    let mut parents: Vec<(From, usize, TrieNode)> = Vec::new();
    for (fi, &from) in frontier.iter().enumerate() {
        let (beam, score, trie) = match from {
            From::Root(b) => (
                b,
                search.live[b].score,
                search.live[b].trie_after_extra(cat),
            ),
            From::Node(i) => (tree.nodes[i].beam, tree.nodes[i].score, tree.nodes[i].trie),
        };
        parents.push((from, beam, trie));
        let row = side(tree, from).ahead[0].get();
        let kids = cat.children(trie);
        let norm = if over_children {
            log_sum_exp(kids.iter().map(|&(t, _)| row[t as usize] as f64))
        } else {
            log_normaliser(row)
        };
        for &(t, _) in kids {
            cands.push(Candidate {
                parent: fi,
                token: t,
                score: score + (row[t as usize] as f64 - norm),
            });
        }
    }
    let picks = match search.rng.as_mut() {
        Some(rng) => {
            let w: Vec<f64> = cands.iter().map(|c| c.score).collect();
            sample_without_replacement(&w, n, rng)
        }
        None => top_k(&cands, n, |_| &[]),
    };
    for i in picks {
        let c = cands[i];
        let (from, beam, trie) = parents[c.parent];
        let child = cat
            .child(trie, c.token)
            .expect("candidates follow the trie");
        let side = cat
            .ends_entry(child)
            .is_none()
            .then(|| side(tree, from).advanced(&[c.token]));
        let (parent, parent_score) = match from {
            From::Root(b) => (None, search.live[b].score),
            From::Node(p) => (Some(p as u32), tree.nodes[p].score),
        };
        let meta = Meta {
            logprob: Some((c.score - parent_score) as f32),
            ..Meta::drafted(Source::Model, 0.0)
        };
        tree.tree.push(c.token, parent, meta);
        tree.nodes.push(DNode {
            beam,
            trie: child,
            score: c.score,
            step,
            side,
        });
    }
}
