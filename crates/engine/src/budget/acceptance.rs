//! Acceptance rates: keyed per (source, evidence of the branch, depth, first-or-later
//! sibling), learned online per request and carried across requests per drafter. The
//! evidence is the match length behind a copy where the drafter gives one (a copy after a
//! 300-token match is accepted far more often than one after 3), else the drafter's score;
//! a copy on weak evidence that is not ambiguous (see `UNAMBIGUOUS`) has a bucket of its
//! own.

use specdec_drafters::{Source, TokenTree};

pub(super) const DEPTHS: usize = 16;
pub(super) const SOURCES: usize = 8;
/// Buckets of a branch's evidence: 4 of the drafter's score of its first node, then 4 of
/// the match length behind it, then `UNAMBIGUOUS`.
pub(super) const EVIDENCE: usize = 9;
/// The bucket of an unambiguous copy (see `Meta::unambiguous`: every indexed occurrence of
/// the matched context continues the same way) on otherwise weak evidence, a score under
/// 0.6 or a match under 16 tokens (strong evidence keeps its own buckets). After a 1-token
/// match such a copy is a quote being followed: on a RAG replay it was accepted at all 41%
/// of the time and 4 deep 35%, where an ambiguous one (a common token, continued
/// differently in different places) was accepted 9% and 2%. Sharing the score buckets,
/// the ambiguous majority set both rates and unambiguous copies were trimmed to a token or
/// two; apart, each learns its own (the prior is a short match's: what differs is what is
/// observed).
pub(super) const UNAMBIGUOUS: usize = 8;
/// Before any observation, the acceptance rate of each evidence bucket's first depth:
/// stronger scores and longer matches are trusted more.
pub(super) const EVIDENCE_PRIOR: [f64; EVIDENCE] =
    [0.3, 0.45, 0.6, 0.75, 0.45, 0.6, 0.8, 0.9, 0.45];
/// Observations' worth of the prior behind every acceptance rate.
pub(super) const PRIOR_WEIGHT: f64 = 2.0;
/// At most this many observations' worth of earlier requests' evidence starts a request,
/// so it begins informed yet adapts to its own text within a few steps.
pub(super) const INHERITED_WEIGHT: f64 = 6.0;

pub(super) fn source_index(s: Source) -> usize {
    match s {
        Source::Reference => 0,
        Source::Prompt => 1,
        Source::Output => 2,
        Source::Trie => 3,
        Source::Suffix => 4,
        Source::Model => 5,
        Source::History => 6,
        // Never drafted for text (the root is not keyed; forced tokens are beam search's):
        // a slot of their own all the same.
        Source::Root | Source::Catalogue => 7,
    }
}

/// The evidence bucket of a branch whose first node has `score` and was copied after a
/// match of `match_len` tokens (0: not a copy after a match), `unambiguous` or not (see
/// `UNAMBIGUOUS`).
pub(super) fn evidence_bucket(score: f32, match_len: u32, unambiguous: bool) -> usize {
    match (match_len, score) {
        (0, s) if unambiguous && s < 0.6 => UNAMBIGUOUS,
        (1..=15, _) if unambiguous => UNAMBIGUOUS,
        (0, s) if s < 0.4 => 0,
        (0, s) if s < 0.6 => 1,
        (0, s) if s < 0.8 => 2,
        (0, _) => 3,
        (1..=3, _) => 4,
        (4..=15, _) => 5,
        (16..=63, _) => 6,
        _ => 7,
    }
}

/// Every drafted node's rate key, indexed by node (the root's entry is unused), in one
/// pass over the DFS-ordered rooted tree: (source, evidence of its branch (that of its
/// depth-1 ancestor), depth) row, and whether it is its parent's first child (the lowest
/// index among its siblings).
pub(super) fn keys(tree: &TokenTree) -> Vec<(usize, usize)> {
    let n = tree.len();
    let depth = tree.depths();
    let meta = tree.meta();
    let mut branch = vec![0usize; n];
    let mut has_first = vec![false; n];
    let mut keys = vec![(0, 0); n];
    for i in 1..n {
        let p = tree.parent(i).unwrap_or(0);
        let r = if p == 0 {
            evidence_bucket(meta[i].score, meta[i].match_len, meta[i].unambiguous)
        } else {
            branch[p]
        };
        branch[i] = r;
        let first = !std::mem::replace(&mut has_first[p], true);
        let row = source_index(meta[i].source) * EVIDENCE + r;
        let d = depth[i].max(1);
        keys[i] = (row * DEPTHS + (d - 1).min(DEPTHS - 1), usize::from(!first));
    }
    keys
}

/// One (accepted, offered) pair per rate key and sibling kind: what a request's policy
/// learns and a memory keeps. A policy lends its table through `AsRef`.
pub type Rates = [[(f64, f64); 2]];

/// Acceptance evidence carried across requests (engine-wide): each finished request's
/// final rates are blended in, and new requests start from them.
#[derive(Clone, Debug)]
pub struct AcceptanceMemory {
    pub(super) rates: Vec<[(f64, f64); 2]>,
}

impl Default for AcceptanceMemory {
    fn default() -> Self {
        AcceptanceMemory {
            rates: vec![[(0.0, 0.0); 2]; SOURCES * EVIDENCE * DEPTHS],
        }
    }
}

impl AcceptanceMemory {
    /// Blends a finished request's rates in (equal weight to all before it, so the
    /// memory follows the workload as it changes).
    pub fn learn(&mut self, finished: &impl AsRef<Rates>) {
        for (mem, req) in self.rates.iter_mut().zip(finished.as_ref()) {
            for (m, &(a, o)) in mem.iter_mut().zip(req) {
                *m = (0.5 * (m.0 + a), 0.5 * (m.1 + o));
            }
        }
    }
}

/// One [`AcceptanceMemory`] per drafter (by name): the same source's drafts are accepted
/// at different rates under different drafters (a prompt copy alone, or merged with other
/// sources in `auto`'s tree), so requests inherit only from requests drafted the same way.
#[derive(Clone, Debug, Default)]
pub struct AcceptanceMemories {
    by_drafter: Vec<(&'static str, AcceptanceMemory)>,
}

impl AcceptanceMemories {
    /// What earlier requests drafted by `drafter` learned, if any finished.
    pub fn memory(&self, drafter: &str) -> Option<&AcceptanceMemory> {
        self.by_drafter
            .iter()
            .find(|(n, _)| *n == drafter)
            .map(|(_, m)| m)
    }

    /// Blends a finished request's rates into its drafter's memory.
    pub fn learn(&mut self, drafter: &'static str, finished: &impl AsRef<Rates>) {
        let i = match self.by_drafter.iter().position(|(n, _)| *n == drafter) {
            Some(i) => i,
            None => {
                self.by_drafter.push((drafter, AcceptanceMemory::default()));
                self.by_drafter.len() - 1
            }
        };
        self.by_drafter[i].1.learn(finished);
    }
}
