//! Speculation statistics of one request.

use std::collections::BTreeMap;

use specdec_drafters::TokenTree;

/// What speculation did for one request: steps, drafted and accepted tokens, by depth,
/// draft size and source.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SpecStats {
    /// Decode steps (target forwards after prefill).
    pub steps: usize,
    /// Steps that verified a non-empty draft.
    pub draft_steps: usize,
    /// Draft nodes verified, over all steps.
    pub drafted_tokens: usize,
    /// Drafted tokens accepted (bonus tokens not counted).
    pub accepted_tokens: usize,
    /// Accepted tokens a relaxed rule kept although the target chose another token there
    /// (0 under strict verification).
    pub relaxed_tokens: usize,
    /// `accepted_by_position[d]`: steps whose accepted path reached depth d + 1.
    pub accepted_by_position: Vec<usize>,
    /// `steps_by_size[k]`: decode steps that verified k drafted nodes (0: a plain step). With
    /// a forward cost curve this gives what the request's forwards cost, free of timing
    /// noise.
    pub steps_by_size: Vec<usize>,
    /// Drafted nodes by draft source ([`specdec_drafters::Source::name`]).
    pub drafted_by_source: BTreeMap<&'static str, usize>,
    /// Accepted tokens by the source that drafted them.
    pub accepted_by_source: BTreeMap<&'static str, usize>,
    /// Time spent drafting and sizing drafts (on the critical path, between forwards).
    pub draft_time: std::time::Duration,
}

impl SpecStats {
    /// Counts one decode step: its rooted tree (the drafted nodes below the root count) and
    /// the accepted drafted nodes (the verdict's node indices).
    pub fn record(&mut self, tree: &TokenTree, accepted: &[usize]) {
        self.steps += 1;
        add_at(&mut self.steps_by_size, tree.drafted(), 1);
        if tree.drafted() == 0 {
            return;
        }
        self.draft_steps += 1;
        self.drafted_tokens += tree.drafted();
        self.accepted_tokens += accepted.len();
        for m in &tree.meta()[1..] {
            *self.drafted_by_source.entry(m.source.name()).or_default() += 1;
        }
        for (d, &i) in accepted.iter().enumerate() {
            add_at(&mut self.accepted_by_position, d, 1);
            *self
                .accepted_by_source
                .entry(tree.meta()[i].source.name())
                .or_default() += 1;
        }
    }

    /// Adds another request's statistics to these (for totals over requests).
    pub fn merge(&mut self, other: &SpecStats) {
        self.steps += other.steps;
        self.draft_steps += other.draft_steps;
        self.drafted_tokens += other.drafted_tokens;
        self.accepted_tokens += other.accepted_tokens;
        self.relaxed_tokens += other.relaxed_tokens;
        for (d, &n) in other.accepted_by_position.iter().enumerate() {
            add_at(&mut self.accepted_by_position, d, n);
        }
        for (k, &n) in other.steps_by_size.iter().enumerate() {
            add_at(&mut self.steps_by_size, k, n);
        }
        for (s, n) in &other.drafted_by_source {
            *self.drafted_by_source.entry(s).or_default() += n;
        }
        for (s, n) in &other.accepted_by_source {
            *self.accepted_by_source.entry(s).or_default() += n;
        }
        self.draft_time += other.draft_time;
    }

    /// Tokens emitted per decode forward, bonus included.
    pub fn mean_accepted_length(&self, completion_tokens: usize) -> f64 {
        if self.steps == 0 {
            0.0
        } else {
            completion_tokens as f64 / self.steps as f64
        }
    }
}

/// Adds `n` to `v[i]`, growing `v` with zeros as needed.
fn add_at(v: &mut Vec<usize>, i: usize, n: usize) {
    if v.len() <= i {
        v.resize(i + 1, 0);
    }
    v[i] += n;
}
