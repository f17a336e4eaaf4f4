//! Several drafters at once: every part drafts, the trees are merged (identical prefixes
//! become one node, scores combine by noisy-or), and the result is trimmed to the budget.
//!
//! Scores of different drafters are only roughly comparable, so each part is guaranteed a
//! share of the budget for its first-choice path (the best child at every level): the
//! merged tree holds each part's first choice whenever the budget allows, then the rest of
//! the first-choice paths, the most confident first, then the rest of the budget goes
//! best-first by combined score.

use std::sync::{Arc, Mutex};

use specdec_tree::TokenTree;

use crate::automaton_copy::SuffixDrafter;
use crate::build::{undrafted, TreeBuilder};
use crate::llma::ReferenceDrafter;
use crate::lookahead::drafter::{TrieDrafter, TrieDrafterConfig};
use crate::lookahead::trie::Trie;
use crate::suffix_decoding::drafter::{HistoryDrafter, HistoryDrafterConfig};
use crate::suffix_decoding::index::HistoryIndex;
use crate::Drafter;

/// A costly part is skipped while a cheap part's first choice keeps being accepted this
/// many tokens deep: the text is copying, and a draft model would propose the same.
const COPY_RUN: usize = 4;

struct Part {
    drafter: Box<dyn Drafter>,
    weight: f32,
}

/// A drafter made of drafters (the `auto` method).
pub struct MixDrafter {
    name: &'static str,
    parts: Vec<Part>,
    builder: TreeBuilder,
    /// Builder ids of each part's first-choice path.
    paths: Vec<Vec<usize>>,
    /// Whether the last step accepted a cheap part's first choice `COPY_RUN` deep.
    copying: bool,
}

/// The first-choice path of a rooted tree: the root's best child, then the best child at
/// every level (ties: the earliest). One pass over the nodes, not a children scan per level.
fn first_choice(tree: &TokenTree) -> Vec<usize> {
    let meta = tree.meta();
    let mut best: Vec<Option<usize>> = vec![None; tree.len()];
    for (i, node) in tree.nodes().iter().enumerate() {
        let p = match node.parent {
            Some(p) if (p as usize) < i => p as usize,
            _ => continue,
        };
        if best[p].is_none_or(|b| meta[i].score > meta[b].score) {
            best[p] = Some(i);
        }
    }
    let mut path = Vec::new();
    let mut at = 0;
    while let Some(c) = best.get(at).copied().flatten() {
        path.push(c);
        at = c;
    }
    path
}

impl MixDrafter {
    /// Parts with their weights (scores are scaled by the weight; budget shares for the
    /// first-choice paths are proportional to it).
    pub fn new(parts: Vec<(Box<dyn Drafter>, f32)>) -> Self {
        MixDrafter {
            name: "mix",
            parts: parts
                .into_iter()
                .map(|(drafter, weight)| Part {
                    drafter,
                    weight: if weight.is_finite() {
                        weight.max(0.0)
                    } else {
                        0.0
                    },
                })
                .collect(),
            builder: TreeBuilder::new(),
            paths: Vec::new(),
            copying: false,
        }
    }

    /// References/prompt/output copying + suffix automaton (+ the shared trie and history
    /// index if given), equally weighted.
    pub fn auto(trie: Option<Arc<Mutex<Trie>>>, history: Option<Arc<Mutex<HistoryIndex>>>) -> Self {
        let mut parts: Vec<(Box<dyn Drafter>, f32)> = vec![
            (Box::new(ReferenceDrafter::default()), 1.0),
            (Box::new(SuffixDrafter::default()), 1.0),
        ];
        if let Some(t) = trie {
            parts.push((
                Box::new(TrieDrafter::new(t, TrieDrafterConfig::default())),
                1.0,
            ));
        }
        if let Some(h) = history {
            parts.push((
                Box::new(HistoryDrafter::new(h, HistoryDrafterConfig::default())),
                1.0,
            ));
        }
        let mut m = Self::new(parts);
        m.name = "auto";
        m
    }

    /// The mix with one more part (weighted as in [`MixDrafter::new`]).
    pub fn with_part(mut self, drafter: Box<dyn Drafter>, weight: f32) -> Self {
        let name = self.name;
        let mut parts: Vec<(Box<dyn Drafter>, f32)> = std::mem::take(&mut self.parts)
            .into_iter()
            .map(|p| (p.drafter, p.weight))
            .collect();
        parts.push((drafter, weight));
        let mut m = Self::new(parts);
        m.name = name;
        m
    }

    /// Names of the parts, in order.
    pub fn part_names(&self) -> Vec<&'static str> {
        self.parts.iter().map(|p| p.drafter.name()).collect()
    }
}

impl Drafter for MixDrafter {
    fn name(&self) -> &'static str {
        self.name
    }

    fn begin(&mut self, prompt: &[u32], references: &[Vec<u32>]) {
        for p in &mut self.parts {
            p.drafter.begin(prompt, references);
        }
    }

    fn observe(&mut self, committed: &[u32]) {
        for p in &mut self.parts {
            p.drafter.observe(committed);
        }
        // The last step's first-choice paths, and the builder that numbers them, are
        // kept until the next draft: what the cheap parts proposed, read in place.
        let builder = &self.builder;
        self.copying = self.parts.iter().zip(&self.paths).any(|(p, path)| {
            let run = path
                .iter()
                .zip(committed)
                .take_while(|(&id, &t)| builder.token(id) == t)
                .count();
            !p.drafter.is_costly() && run >= COPY_RUN
        });
        // Learned from once: a step that is not drafted must not match them again.
        self.paths.clear();
    }

    fn draft(&mut self, context: &[u32], budget: usize) -> TokenTree {
        self.draft_parts(context, budget, true)
    }

    fn draft_cheaply(&mut self, context: &[u32], budget: usize) -> TokenTree {
        self.draft_parts(context, budget, false)
    }

    fn read_ahead(&mut self, prompt: &[u32]) {
        for p in &mut self.parts {
            p.drafter.read_ahead(prompt);
        }
    }

    fn end(&mut self, output: &[u32]) {
        for p in &mut self.parts {
            p.drafter.end(output);
        }
    }
}

impl MixDrafter {
    /// The merged tree of the parts' drafts; costly parts (a draft model) take part only
    /// with `costly`.
    fn draft_parts(&mut self, context: &[u32], budget: usize, costly: bool) -> TokenTree {
        if budget == 0 || self.parts.is_empty() {
            return undrafted(context);
        }
        self.builder.clear();
        self.paths.clear();
        let total: f32 = self.parts.iter().map(|p| p.weight).sum();
        let count = self.parts.len();
        let mut shares = Vec::with_capacity(count);
        self.paths.resize(count, Vec::new());
        // Cheap parts first; a costly part (a draft model) drafts only while they are not
        // being copied from, since its forwards would then mostly repeat their drafts.
        let order: Vec<usize> = (0..count)
            .filter(|&i| !self.parts[i].drafter.is_costly())
            .chain((0..count).filter(|&i| self.parts[i].drafter.is_costly()))
            .collect();
        for i in order {
            let p = &mut self.parts[i];
            if p.drafter.is_costly() && (self.copying || !costly) {
                continue;
            }
            // Each part may propose up to the whole budget: merging and trimming by score
            // decides what survives beyond the guaranteed shares.
            let tree = p.drafter.draft(context, budget);
            let map = self.builder.add_tree(&tree, p.weight);
            let first = first_choice(&tree);
            self.paths[i] = first
                .into_iter()
                .map_while(|n| map.get(n).copied().flatten())
                .collect();
        }
        for p in &self.parts {
            let share = if total > 0.0 {
                (budget as f32 * p.weight / total).floor() as usize
            } else {
                budget / count
            };
            shares.push(share.max(1));
        }
        // Round 1: each part's first choice up to its share; round 2: the rest of each.
        for (path, &share) in self.paths.iter().zip(&shares) {
            for &id in path.iter().take(share) {
                self.builder.pin(id);
            }
        }
        // The rest of each path, the most confident first: an exact repeat's long copy
        // outranks the short guesses of parts that found little.
        let mut rest: Vec<usize> = (0..count).collect();
        let next_score = |i: usize| {
            self.paths[i]
                .get(shares[i])
                .map_or(-1.0, |&id| self.builder.score(id))
        };
        rest.sort_by(|&a, &b| next_score(b).total_cmp(&next_score(a)).then(a.cmp(&b)));
        for i in rest {
            for &id in self.paths[i].iter().skip(shares[i]) {
                self.builder.pin(id);
            }
        }
        match context.last() {
            Some(&root) => self.builder.build(root, budget),
            None => TokenTree::new(),
        }
    }
}
