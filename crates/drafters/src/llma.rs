//! LLMA-style copying from the request's references, its prompt and its own output.
//!
//! Each step looks up the longest suffix of the context (n_max down to n_min tokens) in an
//! n-gram index of the documents and copies what followed. Unlike LLMA, which copies after
//! the first occurrence only, several occurrences become branches of one tree: identical
//! continuations merge (agreement raises their score), longer matches and more recent
//! occurrences score higher, so trimming to the budget keeps the most likely copies.

use specdec_tree::{Source, TokenTree};

use crate::build::TreeBuilder;
use crate::context::{copy_continuation, match_confidence, sync, IndexSync};
use crate::ngram::{NgramIndex, Occ};
use crate::Drafter;

/// The live context (prompt + output) is indexed as this document id.
const CTX: u32 = u32::MAX;

/// A best match at least this long re-anchors the copy position.
const ANCHOR_MIN_MATCH: usize = 3;
/// Tokens the output may stray from the anchored document before the anchor is dropped.
const MAX_DRIFT: usize = 24;
/// How far past the anchor the last token is looked for when re-synchronizing.
const RESYNC_WINDOW: usize = 24;
/// Weight of the re-synchronization branches (about a two-token match).
const RESYNC_WEIGHT: f32 = 0.5;
/// Tokens at the end of a prompt that may stand between the user's last words and the
/// answer (a chat template's end of turn and assistant header: 5 tokens in ChatML, Llama
/// 3's and Gemma's templates).
const QUESTION_SKIP: usize = 8;
/// The shortest match of the user's last words in a document that anchors the answer's
/// start there: a phrase, not a common word or two.
const QUESTION_MIN_MATCH: usize = 6;

/// Where the output is copying from: `doc[pos]` is the token expected next; `drift`
/// tokens were emitted since the output last agreed with the document. Edits (a type hint
/// inserted, a word replaced) break suffix matches for a few tokens; the anchor lets the
/// drafter guess where the copy resumes, which a global n-gram lookup cannot.
#[derive(Clone, Copy, Debug)]
struct Anchor {
    doc: u32,
    pos: usize,
    drift: usize,
}

/// Matches are extended backwards up to this many tokens to score them: an n_max-gram
/// that is part of a 30-token shared span is a much better bet than a bare 5-gram.
const MATCH_CAP: usize = 32;

/// Settings of [`ReferenceDrafter`].
#[derive(Clone, Debug, PartialEq)]
pub struct ReferenceConfig {
    /// Longest suffix looked up (LLMA: 5).
    pub n_max: usize,
    /// Shortest suffix looked up (LLMA: 1).
    pub n_min: usize,
    /// Tokens copied after an occurrence (LLMA's best settings: 14-18).
    pub max_copy: usize,
    /// Distinct occurrences drafted as branches of one tree.
    pub max_candidates: usize,
    /// Occurrences examined per suffix length, most recent first (bounds the step cost
    /// for frequent n-grams).
    pub max_scan: usize,
    /// Index the request's reference documents (false: prompt lookup only).
    pub use_references: bool,
    /// Score factor per copied token: later tokens of a copy are less likely accepted.
    pub depth_decay: f32,
}

impl Default for ReferenceConfig {
    fn default() -> Self {
        ReferenceConfig {
            n_max: 5,
            n_min: 1,
            max_copy: 32,
            max_candidates: 6,
            max_scan: 32,
            use_references: true,
            depth_decay: 0.92,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Candidate {
    occ: Occ,
    /// Matched tokens (backward-extended, capped at MATCH_CAP).
    len: usize,
    /// Discovery order: most recent occurrences of the longest n-gram come first.
    order: usize,
    /// Every occurrence of the suffix it was found by continues the same way (see
    /// `Meta::unambiguous`).
    unambiguous: bool,
}

/// Copies spans from references, prompt and output (LLMA, prompt lookup). See the module
/// docs; sources are `Reference`, `Prompt` or `Output` by where the copied span lies.
pub struct ReferenceDrafter {
    cfg: ReferenceConfig,
    name: &'static str,
    refs: Vec<Vec<u32>>,
    /// Prompt followed by the output so far, indexed as document `CTX`.
    ctx: Vec<u32>,
    prompt_len: usize,
    index: NgramIndex,
    builder: TreeBuilder,
    keys: Vec<u64>,
    cands: Vec<Candidate>,
    buf: Vec<u32>,
    /// Scratch: re-synchronization starts of one draft.
    starts: Vec<usize>,
    anchor: Option<Anchor>,
}

impl ReferenceDrafter {
    /// A drafter with no references or context yet; with `cfg.use_references` off it only
    /// looks up the prompt and output (see [`ReferenceDrafter::prompt_only`]).
    pub fn new(cfg: ReferenceConfig) -> Self {
        let name = if cfg.use_references {
            "reference"
        } else {
            "prompt"
        };
        ReferenceDrafter {
            index: NgramIndex::new(cfg.n_min, cfg.n_max),
            cfg,
            name,
            refs: Vec::new(),
            ctx: Vec::new(),
            prompt_len: 0,
            builder: TreeBuilder::new(),
            keys: Vec::new(),
            cands: Vec::new(),
            buf: Vec::new(),
            starts: Vec::new(),
            anchor: None,
        }
    }

    /// Prompt lookup decoding: the prompt and the output only, no references.
    pub fn prompt_only() -> Self {
        Self::new(ReferenceConfig {
            use_references: false,
            ..ReferenceConfig::default()
        })
    }

    /// The settings it was made with.
    pub fn config(&self) -> &ReferenceConfig {
        &self.cfg
    }

    fn push_context(&mut self, t: u32) {
        if let Some(mut a) = self.anchor {
            if doc_of(&self.ctx, &self.refs, a.doc).get(a.pos) == Some(&t) {
                a.pos += 1;
                a.drift = 0;
            } else {
                a.drift += 1;
            }
            self.anchor = Some(a).filter(|a| a.drift <= MAX_DRIFT);
        }
        self.ctx.push(t);
        self.index.add_position(CTX, &self.ctx, self.ctx.len() - 1);
    }

    /// Starts over from `context` (a request's prompt, or a context that does not extend
    /// what was indexed).
    fn rebuild(&mut self, context: &[u32], prompt_len: usize) {
        self.ctx.clear();
        self.ctx.extend_from_slice(context);
        self.prompt_len = prompt_len;
        self.anchor = None;
        self.index.clear();
        for (i, r) in self.refs.iter().enumerate() {
            self.index.add_doc(i as u32, r);
        }
        self.index.add_doc(CTX, &self.ctx);
        if self.ctx.len() == prompt_len {
            self.anchor = self.question_anchor();
        }
    }

    /// Where an answer may start copying before it has written anything: just after the
    /// longest occurrence elsewhere of the prompt's last words (the user's question, past
    /// the chat template's few tokens after it) in a reference or earlier in the prompt.
    /// A RAG answer often goes on from the passage its question was asked about (an FAQ
    /// quotes the answer after the question; a question about a function, its docstring),
    /// and no suffix of the prompt matches there: the template's assistant header ends it.
    /// The anchor starts out strayed (`drift` 1), so the first drafts try the tokens just
    /// after the occurrence and the next one or two (a paragraph break may sit between), as
    /// re-synchronization branches the policy prices like any other guess.
    fn question_anchor(&mut self) -> Option<Anchor> {
        let p = self.prompt_len;
        let mut best: Option<(usize, Anchor)> = None;
        for skip in 0..=QUESTION_SKIP.min(p.saturating_sub(QUESTION_MIN_MATCH)) {
            let end_q = p - skip;
            let words = &self.ctx[..end_q];
            self.index.suffix_keys(words, &mut self.keys);
            let n = self.keys.len();
            if n < self.index.n_min() {
                continue;
            }
            for occ in self
                .index
                .occurrences(self.keys[n - 1])
                .take(self.cfg.max_scan)
            {
                let doc = doc_of(&self.ctx, &self.refs, occ.doc);
                let end = occ.end as usize;
                // Not the question itself (nor anything after it in the prompt), nor an
                // occurrence with next to nothing after it (the question's own paragraph
                // indexed again, unwrapped).
                let after = doc.len().saturating_sub(end);
                if end < n || after < QUESTION_MIN_MATCH || (occ.doc == CTX && end + skip >= p) {
                    continue;
                }
                let len = matched_back(doc, end, words, 0, MATCH_CAP * 2);
                if len >= QUESTION_MIN_MATCH && best.is_none_or(|(l, _)| len > l) {
                    let anchor = Anchor {
                        doc: occ.doc,
                        pos: end,
                        drift: 1,
                    };
                    best = Some((len, anchor));
                }
            }
        }
        best.map(|(_, a)| a)
    }

    /// Adds the copy of document `doc` from `start` as a path scored `weight`, decaying
    /// with depth; an `unambiguous` copy marks its first node so.
    fn add_copy(&mut self, doc: u32, start: usize, weight: f32, unambiguous: bool) {
        let (periodic, source) = match doc {
            CTX if start < self.prompt_len => (true, Source::Prompt),
            CTX => (true, Source::Output),
            _ => (false, Source::Reference),
        };
        let text = doc_of(&self.ctx, &self.refs, doc);
        copy_continuation(text, start, self.cfg.max_copy, periodic, &mut self.buf);
        let (mut s, decay) = (weight, self.cfg.depth_decay);
        let first = self.builder.add_path(&self.buf, source, 0, |_| {
            let v = s;
            s *= decay;
            v
        });
        if let (true, Some(id)) = (unambiguous, first) {
            self.builder.mark_unambiguous(id);
        }
    }

    /// Continuation starts near the anchor while the output strays from it: the next
    /// anchored token (an insertion ended), the one after (a token was replaced), and
    /// just after the nearest places ahead holding the context's last token (the output
    /// skipped some of the document).
    fn resync_starts(&self, out: &mut Vec<usize>) {
        out.clear();
        let Some(a) = self.anchor.filter(|a| a.drift > 0) else {
            return;
        };
        let doc = doc_of(&self.ctx, &self.refs, a.doc);
        let last = *self.ctx.last().expect("non-empty");
        out.push(a.pos);
        out.push(a.pos + 1);
        let window = a.pos.saturating_sub(1)..doc.len().min(a.pos + RESYNC_WINDOW);
        out.extend(window.filter(|&q| doc[q] == last).take(2).map(|q| q + 1));
        let limit = if a.doc == CTX {
            self.ctx.len() - 1
        } else {
            doc.len()
        };
        out.retain(|&s| s < limit);
        out.dedup();
    }

    /// Fills `self.cands` with the best occurrences of the context's suffixes: longest
    /// suffix first, most recent occurrence first, shorter suffixes only while fewer than
    /// `max_candidates` distinct occurrences were found.
    fn find_candidates(&mut self) {
        let (ctx, refs, index, cands) = (&self.ctx, &self.refs, &self.index, &mut self.cands);
        cands.clear();
        let n_ctx = ctx.len();
        index.suffix_keys(ctx, &mut self.keys);
        let mut order = 0;
        for n in (index.n_min()..=self.keys.len()).rev() {
            let suffix = &ctx[n_ctx - n..];
            let level = cands.len();
            // The continuation every occurrence of `suffix` examined agrees on so far
            // (`None` once two disagree), over all of them, those found by a longer
            // suffix too. Only disagreement counts, not how many agree: the same passage
            // indexed twice (a reference and its unwrapped copy, the prompt quoting it) is
            // one witness, and a passage quoted once is as unambiguous as one quoted
            // thrice.
            let mut agreed: Option<Option<&[u32]>> = None;
            for occ in index.occurrences(self.keys[n - 1]).take(self.cfg.max_scan) {
                let doc = doc_of(ctx, refs, occ.doc);
                let end = occ.end as usize;
                // The context's own suffix has no continuation yet; neither has a
                // reference's last n-gram. (`end < n`: only a hash collision.)
                if end < n || end >= doc.len() || (occ.doc == CTX && end >= n_ctx) {
                    continue;
                }
                if &doc[end - n..end] != suffix {
                    continue;
                }
                let next = &doc[end..doc.len().min(end + AGREE)];
                agreed = match agreed {
                    None => Some(Some(next)),
                    Some(Some(a)) if agrees(a, next) => Some(Some(a)),
                    Some(_) => Some(None),
                };
                if cands.iter().any(|c| c.occ == occ) {
                    continue;
                }
                let len = matched_back(doc, end, ctx, n, MATCH_CAP);
                cands.push(Candidate {
                    occ,
                    len,
                    order,
                    unambiguous: false,
                });
                order += 1;
            }
            if let Some(Some(_)) = agreed {
                cands[level..].iter_mut().for_each(|c| c.unambiguous = true);
            }
            if cands.len() >= self.cfg.max_candidates {
                break;
            }
        }
        cands.sort_by(|a, b| b.len.cmp(&a.len).then(a.order.cmp(&b.order)));
        cands.truncate(self.cfg.max_candidates);
    }
}

/// How many tokens before `doc[end]` equal the end of `text`, counting on from `known`
/// (tokens already known to match) up to `cap`.
fn matched_back(doc: &[u32], end: usize, text: &[u32], known: usize, cap: usize) -> usize {
    let mut len = known;
    while len < cap
        && len < end
        && len < text.len()
        && doc[end - 1 - len] == text[text.len() - 1 - len]
    {
        len += 1;
    }
    len
}

/// Tokens of continuation on which all occurrences of a matched suffix must agree for its
/// copy to be unambiguous (see `Meta::unambiguous`).
const AGREE: usize = 2;

/// Whether two occurrences' continuations agree (over the shorter, when one runs into the
/// end of its document).
fn agrees(a: &[u32], b: &[u32]) -> bool {
    let n = a.len().min(b.len());
    a[..n] == b[..n]
}

/// Document `id`: the live context, or a reference.
fn doc_of<'a>(ctx: &'a [u32], refs: &'a [Vec<u32>], id: u32) -> &'a [u32] {
    if id == CTX {
        ctx
    } else {
        &refs[id as usize]
    }
}

impl Default for ReferenceDrafter {
    fn default() -> Self {
        Self::new(ReferenceConfig::default())
    }
}

impl Drafter for ReferenceDrafter {
    fn name(&self) -> &'static str {
        self.name
    }

    fn begin(&mut self, prompt: &[u32], references: &[Vec<u32>]) {
        self.refs.clear();
        if self.cfg.use_references {
            let refs = crate::bounded_references(references);
            self.refs.extend(refs.into_iter().map(<[u32]>::to_vec));
        }
        self.rebuild(prompt, prompt.len());
    }

    fn observe(&mut self, committed: &[u32]) {
        for &t in committed {
            self.push_context(t);
        }
    }

    fn draft(&mut self, context: &[u32], budget: usize) -> TokenTree {
        match sync(&self.ctx, context) {
            IndexSync::Extend(from) => self.observe(&context[from..]),
            IndexSync::Reset => self.rebuild(context, self.prompt_len.min(context.len())),
        }
        let Some(&root) = context.last() else {
            return TokenTree::new();
        };
        if budget == 0 || self.ctx.is_empty() || self.cfg.max_copy == 0 {
            return TokenTree::rooted(root);
        }
        self.find_candidates();
        if let Some(best) = self.cands.first().filter(|c| c.len >= ANCHOR_MIN_MATCH) {
            self.anchor = Some(Anchor {
                doc: best.occ.doc,
                pos: best.occ.end as usize,
                drift: 0,
            });
        }
        self.builder.clear();
        let mut starts = std::mem::take(&mut self.starts);
        self.resync_starts(&mut starts);
        if let Some(a) = self.anchor {
            for (i, &start) in starts.iter().enumerate() {
                self.add_copy(a.doc, start, RESYNC_WEIGHT * 0.8f32.powi(i as i32), false);
            }
        }
        self.starts = starts;
        for rank in 0..self.cands.len() {
            let c = self.cands[rank];
            // A mild rank penalty: with equal evidence the best occurrence grows a few
            // tokens deep before a second branch opens (depth pays more than width), yet
            // two agreeing older occurrences still outweigh one recent one.
            let w = match_confidence(c.len, 2.0) * 0.75f32.powi(rank as i32);
            self.add_copy(c.occ.doc, c.occ.end as usize, w, c.unambiguous);
        }
        self.builder.build(root, budget)
    }

    fn end(&mut self, _output: &[u32]) {
        // Nothing learned across requests; free the request's memory.
        self.refs = Vec::new();
        self.ctx = Vec::new();
        self.prompt_len = 0;
        self.anchor = None;
        self.index.clear();
    }
}
