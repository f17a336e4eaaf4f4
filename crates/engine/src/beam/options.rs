//! What a beam search is asked to do and what it reports.

/// How drafted beam steps are verified.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BeamVerify {
    /// A step is kept only when all K of the target's best (beam, token) pairs were
    /// drafted: the list equals plain beam search's, items and scores, bit for bit.
    Strict,
    /// AtSpeed's relaxed sampling verification, seeded: each drafted pair is kept with
    /// probability min(1, p/q), missing ones resampled from the residual. The list
    /// approximates sampling K items from the target and is reported as relaxed.
    Relaxed {
        /// Seeds the acceptance draws and resamples, so a search is reproducible.
        seed: u64,
    },
}

impl BeamVerify {
    /// Whether this is [`BeamVerify::Relaxed`].
    pub fn is_relaxed(&self) -> bool {
        matches!(self, BeamVerify::Relaxed { .. })
    }

    /// `strict` or `relaxed`, as reported.
    pub fn name(&self) -> &'static str {
        match self {
            BeamVerify::Strict => "strict",
            BeamVerify::Relaxed { .. } => "relaxed",
        }
    }
}

/// Speculation with a draft model.
#[derive(Clone, Debug, PartialEq)]
pub struct DraftPlan {
    /// How drafted steps are verified.
    pub verify: BeamVerify,
    /// The most draft beams (N) per drafted step.
    pub max_beams: usize,
    /// The most drafted steps (gamma) per round.
    pub max_steps: usize,
    /// Choose each search's plan (gamma from 0 to the most, forced tokens after the
    /// draft's leaves or not) from what each plan cost per search so far (else always the
    /// maxima: the fewest forwards).
    pub adaptive: bool,
}

impl DraftPlan {
    /// Verification by `verify`, at most 20 draft beams and 3 drafted steps per round,
    /// the plan chosen adaptively.
    pub fn new(verify: BeamVerify) -> Self {
        DraftPlan {
            verify,
            max_beams: 20,
            max_steps: 3,
            adaptive: true,
        }
    }
}

/// A constrained beam search's parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct BeamOptions {
    /// Beams kept and items returned.
    pub k: usize,
    /// Append the tokens the catalogue forces after a beam in the same forward instead of
    /// one step each (exact: the same list and scores).
    pub jump_forward: bool,
    /// The most forced tokens appended after one beam in one forward.
    pub max_forced: usize,
    /// The most forced tokens appended after each leaf of a draft tree.
    pub max_forced_after_draft: usize,
    /// Speculate with the draft model given to the search.
    pub draft: Option<DraftPlan>,
}

impl BeamOptions {
    /// Plain constrained beam search of width `k`: the baseline.
    pub fn plain(k: usize) -> Self {
        BeamOptions {
            k,
            jump_forward: false,
            max_forced: 32,
            max_forced_after_draft: 32,
            draft: None,
        }
    }

    /// Plain beam search of width `k` with forced tokens appended in one forward: the
    /// same list and scores as [`BeamOptions::plain`] in fewer forwards.
    pub fn jump_forward(k: usize) -> Self {
        BeamOptions {
            jump_forward: true,
            ..BeamOptions::plain(k)
        }
    }

    /// AtSpeed's speculative beam search of width `k` with the draft model, verified by
    /// `verify` (and jump-forward on).
    pub fn speculative(k: usize, verify: BeamVerify) -> Self {
        BeamOptions {
            jump_forward: true,
            draft: Some(DraftPlan::new(verify)),
            ..BeamOptions::plain(k)
        }
    }

    /// Whether drafted steps are verified relaxed (the list is then not plain beam
    /// search's).
    pub fn is_relaxed(&self) -> bool {
        self.draft.as_ref().is_some_and(|d| d.verify.is_relaxed())
    }
}

/// One returned item: a catalogue entry and its cumulative log-probability.
#[derive(Clone, Debug, PartialEq)]
pub struct Ranked {
    /// The entry's index among the catalogue's distinct entries (see [`super::Catalogue::entry`]).
    pub entry: usize,
    /// The entry's tokens, its end token last.
    pub tokens: Vec<u32>,
    /// The entry's cumulative log-probability under the target.
    pub score: f64,
}

/// What a search did, counted in forwards, rows and steps.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BeamStats {
    /// Target forwards this search took part in (its prompt's prefill included).
    pub target_forwards: usize,
    /// Target rows this search put in those forwards (the prompt's included).
    pub target_rows: usize,
    /// Tokens of the prompt.
    pub prompt_tokens: usize,
    /// Draft model forwards this search took part in.
    pub draft_forwards: usize,
    /// Draft model rows this search put in those forwards.
    pub draft_rows: usize,
    /// Beam steps taken (one per token position of the longest beam).
    pub steps: usize,
    /// Verification rounds (target forwards after the prefill, and free rounds).
    pub rounds: usize,
    /// Rounds with drafted steps, and the drafted steps they accepted.
    pub drafted_rounds: usize,
    /// Drafted steps accepted over those rounds.
    pub accepted_steps: usize,
    /// Whether relaxed verification produced the list (it is then not plain beam
    /// search's).
    pub relaxed: bool,
    /// The search stopped drafting part way: its plan cost more per step than the best
    /// other plan's by the chooser's margin.
    pub draft_cut: bool,
    /// The search stopped drafting before a round's target forward: that round's tree
    /// would have cost more per beam step than the best other plan measured, even had
    /// every drafted step been accepted (its draft forwards were the only waste).
    pub draft_priced_out: bool,
    /// Wall time of the prompt's prefill (target and draft), of target forwards after it,
    /// of drafting, and of verification (the forwards are shared by a batch's searches:
    /// each counts the whole forward it was in).
    pub prefill_ms: f64,
    /// Wall time of target forwards after the prefill.
    pub forward_ms: f64,
    /// Wall time of drafting.
    pub draft_ms: f64,
    /// Wall time of verification.
    pub verify_ms: f64,
}

impl BeamStats {
    /// Accepted drafted steps per drafted round.
    pub fn accepted_per_round(&self) -> f64 {
        self.accepted_steps as f64 / self.drafted_rounds.max(1) as f64
    }

    /// Target forwards after the prompt's.
    pub fn decode_forwards(&self) -> usize {
        self.target_forwards.saturating_sub(1)
    }
}

/// A finished search: the K best items, best first, and its statistics.
#[derive(Clone, Debug, PartialEq)]
pub struct BeamOutput {
    /// The K best items, best first.
    pub items: Vec<Ranked>,
    /// What the search did.
    pub stats: BeamStats,
}
