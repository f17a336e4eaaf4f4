//! Drafting from the history index (SuffixDecoding): the longest match of the context's
//! tail among past requests, and the tree of what followed it, each branch scored by how
//! often it followed, as deep as the match is long.

use std::collections::BinaryHeap;
use std::sync::{Arc, Mutex, PoisonError};

use specdec_tree::{Source, TokenTree};

use crate::build::{undrafted, TreeBuilder};
use crate::context::{match_confidence, sync, IndexSync};
use crate::sam::StateId;
use crate::suffix_decoding::index::{HistoryIndex, Matchers};
use crate::Drafter;

/// Settings of [`HistoryDrafter`].
#[derive(Clone, Debug, PartialEq)]
pub struct HistoryDrafterConfig {
    /// Shorter matches draft nothing (a token or two of agreement says little about which
    /// of many past texts this is).
    pub min_match: usize,
    /// Draft depth per matched token (SuffixDecoding's rule): a long match predicts a long
    /// copy; an exact repeat is drafted as deep as the budget allows.
    pub alpha: f32,
    /// Depth floor: a match long enough to draft is drafted at least this deep.
    pub min_depth: usize,
    /// Depth cap, whatever the match length.
    pub max_depth: usize,
    /// Continuations considered per node (the most frequent ones).
    pub branching: usize,
    /// Continuations rarer than this share of their parent's occurrences are not drafted.
    pub min_share: f32,
    /// Context tokens matched again when the index changed under a request.
    pub window: usize,
}

impl Default for HistoryDrafterConfig {
    fn default() -> Self {
        HistoryDrafterConfig {
            min_match: 3,
            alpha: 1.0,
            min_depth: 2,
            max_depth: 64,
            branching: 3,
            min_share: 0.1,
            window: 1024,
        }
    }
}

/// Heap entry of the best-first expansion: score, then the earlier entry on ties.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Open {
    score: f32,
    seq: u32,
    state: StateId,
    token: u32,
    parent: Option<usize>,
    depth: usize,
}

impl Eq for Open {}

impl Ord for Open {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.score
            .total_cmp(&other.score)
            .then(other.seq.cmp(&self.seq))
    }
}

impl PartialOrd for Open {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Drafts from a shared [`HistoryIndex`] and adds each finished request to it; nodes have
/// source `History`.
pub struct HistoryDrafter {
    index: Arc<Mutex<HistoryIndex>>,
    cfg: HistoryDrafterConfig,
    /// The request's prompt tail, added to the index with its output at the end.
    prompt: Vec<u32>,
    /// The context the matcher has read, and the index epoch it read it under.
    ctx: Vec<u32>,
    epoch: Option<u64>,
    matchers: Matchers,
    builder: TreeBuilder,
    heap: BinaryHeap<Open>,
    /// Entries pushed this draft (ties go to the earlier).
    pushed: u32,
    kids: Vec<(u32, StateId, u32)>,
}

impl HistoryDrafter {
    /// A drafter for one request over the pool's shared `index`.
    pub fn new(index: Arc<Mutex<HistoryIndex>>, cfg: HistoryDrafterConfig) -> Self {
        HistoryDrafter {
            index,
            cfg,
            prompt: Vec::new(),
            ctx: Vec::new(),
            epoch: None,
            matchers: Default::default(),
            builder: TreeBuilder::new(),
            heap: BinaryHeap::new(),
            pushed: 0,
            kids: Vec::new(),
        }
    }

    /// Length of the longest suffix of the last drafted context found in the index.
    pub fn match_len(&self) -> usize {
        self.matchers.iter().map(|m| m.len).max().unwrap_or(0)
    }

    fn depth_for(&self, match_len: usize) -> usize {
        let d = (self.cfg.alpha * match_len as f32).ceil() as usize;
        d.clamp(self.cfg.min_depth, self.cfg.max_depth)
    }

    /// Pushes the drafted continuations of `state` of generation `g` (below builder node
    /// `parent`).
    fn open_children(
        &mut self,
        index: &HistoryIndex,
        g: usize,
        state: StateId,
        parent: Option<usize>,
        score: f32,
        depth: usize,
    ) {
        index.continuations(g, state, &mut self.kids);
        let total: u32 = self.kids.iter().map(|k| k.2).sum();
        let total = total.max(index.automaton(g).count(state)).max(1) as f32;
        for &(token, next, count) in self.kids.iter().take(self.cfg.branching) {
            let share = count as f32 / total;
            if share < self.cfg.min_share {
                break;
            }
            self.pushed += 1;
            self.heap.push(Open {
                score: score * share,
                seq: self.pushed,
                state: next,
                token,
                parent,
                depth,
            });
        }
    }
}

impl Drafter for HistoryDrafter {
    fn name(&self) -> &'static str {
        "history"
    }

    fn begin(&mut self, prompt: &[u32], _references: &[Vec<u32>]) {
        // Only the tail of the prompt goes into the index at the end.
        let keep = self
            .index
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .config()
            .prompt_tail;
        self.prompt = prompt[prompt.len().saturating_sub(keep)..].to_vec();
        self.ctx.clear();
        self.epoch = None;
    }

    fn observe(&mut self, _committed: &[u32]) {}

    fn draft(&mut self, context: &[u32], budget: usize) -> TokenTree {
        let index = Arc::clone(&self.index);
        let index = index.lock().unwrap_or_else(PoisonError::into_inner);
        // Follow the context incrementally while the index stays as it was; start over
        // (over a bounded window) when it changed or the context is not an extension.
        match (self.epoch == Some(index.epoch()), sync(&self.ctx, context)) {
            (true, IndexSync::Extend(from)) => {
                for &t in &context[from..] {
                    index.advance(&mut self.matchers, t);
                }
                self.ctx.extend_from_slice(&context[from..]);
            }
            _ => {
                self.matchers = index.matchers_at(context, self.cfg.window);
                self.epoch = Some(index.epoch());
                self.ctx.clear();
                self.ctx.extend_from_slice(context);
            }
        }
        let Some(&root) = context.last() else {
            return TokenTree::new();
        };
        if budget == 0 || self.match_len() < self.cfg.min_match {
            return undrafted(context);
        }
        self.builder.clear();
        // Each generation that matches proposes its tree, the longer match first; the
        // builder merges what they agree on.
        let mut gens: [usize; 2] = [0, 1];
        gens.sort_by_key(|&g| std::cmp::Reverse(self.matchers[g].len));
        for g in gens {
            let m = self.matchers[g];
            if m.len < self.cfg.min_match {
                continue;
            }
            let max_depth = self.depth_for(m.len);
            self.heap.clear();
            self.pushed = 0;
            let added_before = self.builder.len();
            let conf = match_confidence(m.len, 4.0);
            self.open_children(&index, g, m.state, None, conf, 1);
            while self.builder.len() - added_before < budget {
                let Some(o) = self.heap.pop() else { break };
                let id = self.builder.add_copied(
                    o.parent,
                    o.token,
                    Source::History,
                    o.score,
                    m.len as u32,
                );
                if o.depth < max_depth {
                    self.open_children(&index, g, o.state, Some(id), o.score, o.depth + 1);
                }
            }
        }
        self.builder.build(root, budget)
    }

    fn end(&mut self, output: &[u32]) {
        let prompt = std::mem::take(&mut self.prompt);
        self.index
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .add_request(&prompt, output);
        self.ctx = Vec::new();
        self.epoch = None;
    }
}
