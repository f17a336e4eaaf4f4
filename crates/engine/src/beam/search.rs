//! One request's beam search state: its live beams, its finished items and when it stops.

use specdec_verify::Rng;

use super::side::Side;
use super::{BeamOptions, BeamOutput, BeamStats, Catalogue, Ranked, TrieNode};
use crate::budget::Plan;

/// A live beam: the catalogue tokens written so far, the trie node they reach, their
/// cumulative log-probability, and the beam's state on the target and the draft.
#[derive(Clone)]
pub(crate) struct Beam {
    pub tokens: Vec<u32>,
    pub trie: TrieNode,
    pub score: f64,
    pub target: Side,
    pub draft: Option<Side>,
}

impl Beam {
    /// The trie node after the forced tokens the target's cache already holds.
    pub fn trie_after_extra(&self, cat: &Catalogue) -> TrieNode {
        self.target.extra.iter().fold(self.trie, |n, &t| {
            cat.child(n, t).expect("extra tokens follow the trie")
        })
    }
}

/// One request's search.
pub(crate) struct Search {
    pub(crate) opts: BeamOptions,
    pub(crate) live: Vec<Beam>,
    pub(crate) finished: Vec<Ranked>,
    pub(crate) stats: BeamStats,
    pub(crate) rng: Option<Rng>,
    /// The plan the search was given, the plan of its rounds now (no draft once the given
    /// one proved too dear), and what the rounds cost (milliseconds, or modeled).
    pub(crate) chosen: Plan,
    pub(crate) plan: Plan,
    pub(crate) cost: f64,
    /// What the round that priced its drafting out would have cost per beam step at
    /// best (what its plan is then judged by).
    pub(crate) priced: Option<f64>,
}

impl Search {
    pub(crate) fn new(opts: BeamOptions, root: Beam, prompt_tokens: usize) -> Self {
        let rng = match opts.draft.as_ref().map(|d| d.verify) {
            Some(super::BeamVerify::Relaxed { seed }) => Some(Rng::new(seed)),
            _ => None,
        };
        let relaxed = opts.is_relaxed();
        Search {
            opts,
            live: vec![root],
            finished: Vec::new(),
            stats: BeamStats {
                prompt_tokens,
                relaxed,
                ..BeamStats::default()
            },
            rng,
            chosen: Plan::NONE,
            plan: Plan::NONE,
            cost: 0.0,
            priced: None,
        }
    }

    /// Done once no beam is live, or K finished items score at least as well as every
    /// live beam (scores only fall as beams grow, so none of them could still enter).
    pub(crate) fn is_done(&self) -> bool {
        self.live.is_empty() || self.beats_every(self.live.iter().map(|b| b.score))
    }

    /// Whether K finished items score at least as well as each of `live`.
    pub(crate) fn beats_every(&self, mut live: impl Iterator<Item = f64>) -> bool {
        let k = self.opts.k;
        if self.finished.len() < k {
            return false;
        }
        let mut scores: Vec<f64> = self.finished.iter().map(|r| r.score).collect();
        scores.sort_by(|a, b| b.total_cmp(a));
        let kth = scores[k - 1];
        live.all(|s| s <= kth)
    }

    /// The K best finished items, best first (ties by lower token ids), and the stats.
    pub(crate) fn into_output(mut self) -> BeamOutput {
        self.finished.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then_with(|| a.tokens.cmp(&b.tokens))
        });
        self.finished.truncate(self.opts.k);
        BeamOutput {
            items: self.finished,
            stats: self.stats,
        }
    }
}
