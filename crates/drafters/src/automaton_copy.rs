//! Drafting from a suffix automaton over references, prompt and output (in the spirit of
//! SuffixDecoding): the longest suffix of the context that occurred before is tracked
//! incrementally, and the draft copies what followed it, longer when the match is longer.
//!
//! The automaton holds everything but the context's last token, so the match found is
//! always an *earlier* occurrence, one with a continuation to copy.

use specdec_tree::{Source, TokenTree};

use crate::build::TreeBuilder;
use crate::context::{copy_continuation, match_confidence, sync, IndexSync};
use crate::sam::{Matcher, SuffixAutomaton};
use crate::Drafter;

/// Settings of [`SuffixDrafter`].
#[derive(Clone, Debug, PartialEq)]
pub struct SuffixConfig {
    /// Draft length per matched token: a long match predicts a long copy.
    pub alpha: f32,
    /// Draft length floor (when the match is at least `min_match`).
    pub min_draft: usize,
    /// Draft length cap per branch.
    pub max_draft: usize,
    /// Shorter matches draft nothing.
    pub min_match: usize,
    /// Branches from other end positions (first occurrence, shorter matches) beyond the
    /// primary one, used when the budget has room.
    pub extra_branches: usize,
    /// Suffix links updated per token to keep "most recent end" exact near the end.
    pub recent_depth: usize,
    /// Include the request's references as separate documents.
    pub use_references: bool,
    /// Score factor per drafted token.
    pub depth_decay: f32,
}

impl Default for SuffixConfig {
    fn default() -> Self {
        SuffixConfig {
            alpha: 2.0,
            min_draft: 2,
            max_draft: 24,
            min_match: 1,
            extra_branches: 3,
            recent_depth: 16,
            use_references: true,
            depth_decay: 0.92,
        }
    }
}

/// Suffix-automaton drafter; nodes have source `Suffix`.
pub struct SuffixDrafter {
    cfg: SuffixConfig,
    sam: SuffixAutomaton,
    refs: Vec<Vec<u32>>,
    /// Prompt + output; all but its last token are in `sam` (from `ctx_start`).
    ctx: Vec<u32>,
    ctx_start: usize,
    matcher: Matcher,
    /// The occurrence the last draft followed (its end position and how many context
    /// tokens it matches), advanced while the text keeps agreeing: once a copy is
    /// accepted, the next draft continues the same span.
    sticky: Option<(usize, usize)>,
    builder: TreeBuilder,
    ends: Vec<(usize, usize)>,
    buf: Vec<u32>,
}

impl SuffixDrafter {
    /// A drafter with no references or context yet.
    pub fn new(cfg: SuffixConfig) -> Self {
        SuffixDrafter {
            sam: SuffixAutomaton::new(cfg.recent_depth),
            cfg,
            refs: Vec::new(),
            ctx: Vec::new(),
            ctx_start: 0,
            matcher: Matcher::new(),
            sticky: None,
            builder: TreeBuilder::new(),
            ends: Vec::new(),
            buf: Vec::new(),
        }
    }

    /// Length of the longest suffix of the context that occurs earlier (in a reference,
    /// or in the context ending before its last token).
    pub fn match_len(&self) -> usize {
        self.matcher.len
    }

    /// The automaton over references, prompt and output.
    pub fn automaton(&self) -> &SuffixAutomaton {
        &self.sam
    }

    fn rebuild(&mut self, context: &[u32]) {
        self.sam = SuffixAutomaton::new(self.cfg.recent_depth);
        for r in &self.refs {
            self.sam.start_document();
            for &t in r {
                self.sam.push(t);
            }
        }
        self.sam.start_document();
        self.ctx_start = self.sam.text().len();
        self.ctx.clear();
        self.matcher = Matcher::new();
        self.sticky = None;
        for &t in context {
            self.push(t);
        }
    }

    fn push(&mut self, t: u32) {
        if let Some(&pending) = self.ctx.last() {
            let split = self.sam.push(pending);
            self.matcher.follow(split);
        }
        let text = self.sam.text();
        self.sticky = self.sticky.and_then(|(e, len)| {
            let n = e + 1;
            let same_doc = n < text.len() && self.sam.document_of(n).0 <= e;
            (same_doc && text[n] == t).then_some((n, len + 1))
        });
        self.matcher.advance(&self.sam, t);
        if self.matcher.len == 0 {
            self.sticky = None;
        }
        self.ctx.push(t);
    }

    /// Copies the continuation after end position `e` (global) into `self.buf`.
    fn continuation(&mut self, e: usize, max: usize) {
        if e >= self.ctx_start {
            copy_continuation(&self.ctx, e + 1 - self.ctx_start, max, true, &mut self.buf);
        } else {
            let (start, end) = self.sam.document_of(e);
            let doc = &self.sam.text()[start..end];
            copy_continuation(doc, e + 1 - start, max, false, &mut self.buf);
        }
    }

    /// Candidate end positions with their match lengths, best first, deduplicated.
    fn collect_ends(&mut self) {
        self.ends.clear();
        let want = 1 + self.cfg.extra_branches;
        let (sam, ctx_start) = (&self.sam, self.ctx_start);
        let push = |ends: &mut Vec<(usize, usize)>, e: Option<usize>, len: usize| {
            // A reference's last token has nothing after it (context ones always do).
            let useful = |e: usize| e >= ctx_start || e + 1 < sam.document_of(e).1;
            if let Some(e) = e.filter(|&e| useful(e)) {
                if ends.len() < want && !ends.iter().any(|&(x, _)| x == e) {
                    ends.push((e, len));
                }
            }
        };
        let m = self.matcher;
        // The sticky occurrence matches only as much context as it has agreed with, which
        // may be less than the longest match: its copy is sized by that.
        if let Some((e, len)) = self.sticky {
            push(&mut self.ends, Some(e), len.min(m.len));
        }
        let mut s = m.state;
        let mut len = m.len;
        while len >= self.cfg.min_match.max(1) && self.ends.len() < want {
            push(&mut self.ends, self.sam.recent_end(s), len);
            push(&mut self.ends, self.sam.first_end(s), len);
            match self.sam.link(s) {
                Some(l) => {
                    s = l;
                    len = self.sam.len(l);
                }
                None => break,
            }
        }
    }

    fn draft_len(&self, match_len: usize) -> usize {
        let l = (self.cfg.alpha * match_len as f32).ceil() as usize;
        l.max(self.cfg.min_draft).min(self.cfg.max_draft)
    }
}

impl Default for SuffixDrafter {
    fn default() -> Self {
        Self::new(SuffixConfig::default())
    }
}

impl Drafter for SuffixDrafter {
    fn name(&self) -> &'static str {
        "suffix"
    }

    fn begin(&mut self, prompt: &[u32], references: &[Vec<u32>]) {
        self.refs.clear();
        if self.cfg.use_references {
            let refs = crate::bounded_references(references);
            self.refs.extend(refs.into_iter().map(<[u32]>::to_vec));
        }
        self.rebuild(prompt);
    }

    fn observe(&mut self, committed: &[u32]) {
        for &t in committed {
            self.push(t);
        }
    }

    fn draft(&mut self, context: &[u32], budget: usize) -> TokenTree {
        match sync(&self.ctx, context) {
            IndexSync::Extend(from) => self.observe(&context[from..]),
            IndexSync::Reset => self.rebuild(context),
        }
        let Some(&root) = context.last() else {
            return TokenTree::new();
        };
        if budget == 0 || self.matcher.len < self.cfg.min_match.max(1) {
            return TokenTree::rooted(root);
        }
        self.collect_ends();
        self.builder.clear();
        let decay = self.cfg.depth_decay;
        for rank in 0..self.ends.len() {
            let (e, len) = self.ends[rank];
            let max = self.draft_len(len).min(budget);
            self.continuation(e, max);
            let mut s = match_confidence(len, 2.0) / (1.0 + rank as f32);
            self.builder
                .add_path(&self.buf, Source::Suffix, len as u32, |_| {
                    let v = s;
                    s *= decay;
                    v
                });
        }
        // Follow the primary occurrence from now on (see `sticky`).
        self.sticky = self.ends.first().copied();
        self.builder.build(root, budget)
    }

    fn end(&mut self, _output: &[u32]) {
        self.refs = Vec::new();
        self.ctx = Vec::new();
        self.sam = SuffixAutomaton::new(self.cfg.recent_depth);
        self.matcher = Matcher::new();
        self.sticky = None;
    }
}
