//! Draft-model speculation: a smaller model of the same vocabulary proposes the tree.
//!
//! [`ModelDrafter`] keeps its own KV cache of the context, rolled back and caught up to
//! what the target accepted at the start of every step (one forward of the tokens it has
//! not seen, usually the accepted tail and the bonus token). It then drafts a chain of its
//! own most likely tokens, one draft forward per depth, and hangs the next likeliest
//! alternatives of each depth beside the chain as leaves: they cost target rows but no
//! draft forward. So the tree is deep where the draft is sure and wide where it is not
//! (the shape SpecInfer and Sequoia search for, built greedily).
//!
//! A draft forward is not free: on 2 vCPUs the 0.5B costs about half a 1.5B forward. The
//! drafter times its own forwards, reads the target's one-row forward time from the engine
//! ([`TargetClock`]), and goes one depth deeper only while the next token's estimated
//! acceptance exceeds what the depth costs in target forwards (a draft forward and a
//! verified row). Estimated acceptance is the draft's own probability, calibrated online
//! against what the target accepted. When
//! drafted steps stop paying on average (accepted tokens worth less than the draft
//! forwards spent), the drafter stops drafting and probes again after a growing number of
//! steps, so text the draft cannot predict costs little.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use specdec_runtime::{Logits, Node, RuntimeError, SeqInput, Sequence, Target, Want};
use specdec_tree::{Meta, Source, TokenTree};

use crate::build::undrafted;
use crate::Drafter;

/// Context tokens caught up per draft forward (a long prompt is read in chunks, as the
/// engine's prefill does, to bound scratch memory).
const CATCH_UP_CHUNK: usize = 256;
/// Weight, in observations, of the calibration's prior (draft probabilities taken as they
/// are).
const CALIBRATION_PRIOR: f64 = 8.0;
/// Decay of old calibration evidence per observation.
const CALIBRATION_DECAY: f64 = 0.98;
/// Steps without drafting before the first probe once drafting stopped paying; each probe
/// that does not pay doubles it, up to the maximum.
const PROBE_EVERY: usize = 4;
const PROBE_MAX_EVERY: usize = 64;
/// Weight of the newest time measurement in the running means.
const TIME_EMA: f64 = 0.2;
/// Weight of the newest step in the running mean of what drafting gains.
const GAIN_EMA: f64 = 0.25;

/// The target's forward costs as the engine measures them, read by the drafters of its
/// draft model: a draft forward pays when the target forwards it saves cost more.
#[derive(Debug, Default)]
pub struct TargetClock {
    /// Seconds of a one-row forward (f64 bits; 0: not measured yet).
    one_row: AtomicU64,
    /// What one more row adds to a forward, relative to a one-row forward (f64 bits).
    row_cost: AtomicU64,
}

impl TargetClock {
    /// Records the target's one-row forward time in seconds, and what one more row adds
    /// relative to it.
    pub fn set(&self, seconds: f64, row_cost: f64) {
        if seconds.is_finite() && seconds > 0.0 {
            self.one_row.store(seconds.to_bits(), Ordering::Relaxed);
        }
        if row_cost.is_finite() && row_cost > 0.0 {
            self.row_cost.store(row_cost.to_bits(), Ordering::Relaxed);
        }
    }

    /// The last recorded one-row time, if any.
    pub fn one_row(&self) -> Option<f64> {
        let bits = self.one_row.load(Ordering::Relaxed);
        (bits != 0).then(|| f64::from_bits(bits))
    }

    /// The last recorded cost of one more row, if any.
    pub fn row_cost(&self) -> Option<f64> {
        let bits = self.row_cost.load(Ordering::Relaxed);
        (bits != 0).then(|| f64::from_bits(bits))
    }
}

/// How a [`ModelDrafter`] shapes its trees.
#[derive(Clone, Debug)]
pub struct ModelDrafterConfig {
    /// The deepest chain drafted in one step.
    pub max_depth: usize,
    /// Alternatives kept beside the chain at each depth (as leaves).
    pub max_siblings: usize,
    /// An alternative is kept only if its estimated acceptance reaches this.
    pub min_sibling: f32,
    /// A draft forward's cost relative to a one-row target forward, until both are
    /// measured (for memory-bound decoding, the ratio of the two models' weight bytes).
    pub cost_ratio: f64,
    /// Where the engine publishes the target's measured one-row forward time.
    pub target_clock: Option<Arc<TargetClock>>,
    /// What one more drafted row adds to the target's forward, relative to a one-row
    /// forward (the verify cost a drafted token must also earn), until measured.
    pub row_cost: f64,
    /// Token ids at and above this are never drafted (the target's vocabulary size).
    pub vocab_limit: usize,
    /// Tokens that end generation (the target's stop tokens): a chain ends at one.
    pub stop_tokens: Vec<u32>,
    /// A request's first steps that are not drafted: an answer of one token (a step for
    /// it, a step for the stop token) cannot gain from drafting, and a draft forward on
    /// either step would make it slower than plain decoding (0.77x by decode speed on
    /// such a ShareGPT answer with the Qwen pair). The next step's catch-up reads the
    /// skipped tokens in the same forward.
    pub undrafted_steps: usize,
    /// Whether to size drafts by measured times. Without, `cost_ratio` alone is used and
    /// the trees depend only on the text (what a relaxed request needs to be
    /// reproducible).
    pub measure: bool,
}

impl Default for ModelDrafterConfig {
    fn default() -> Self {
        ModelDrafterConfig {
            max_depth: 16,
            max_siblings: 2,
            min_sibling: 0.05,
            cost_ratio: 0.5,
            target_clock: None,
            row_cost: 0.1,
            vocab_limit: usize::MAX,
            stop_tokens: Vec::new(),
            undrafted_steps: 2,
            measure: true,
        }
    }
}

/// A draft model as a drafter. See the module documentation.
pub struct ModelDrafter {
    model: Arc<dyn Target>,
    seq: Sequence,
    config: ModelDrafterConfig,
    /// Calibration of the draft's probabilities: (accepted, predicted), decayed.
    calibration: (f64, f64),
    /// Running mean of one draft forward, in seconds.
    draft_time: Option<f64>,
    /// The last step's chain: each token with the draft's conditional probability of it,
    /// to learn from what the target emitted.
    last_chain: Vec<(u32, f32)>,
    /// Steps to wait before drafting again, and the wait after the next failed probe.
    idle: usize,
    probe_every: usize,
    probing: bool,
    /// Running mean of a drafted step's gain in target steps (accepted tokens less the
    /// draft forwards' cost); below zero, drafting pauses.
    gain: f64,
}

impl ModelDrafter {
    /// A drafter over `model`, whose vocabulary must be the target's (token ids mean the
    /// same text).
    pub fn new(model: Arc<dyn Target>, config: ModelDrafterConfig) -> Self {
        let seq = model.new_sequence();
        ModelDrafter {
            model,
            seq,
            config,
            calibration: (0.0, 0.0),
            draft_time: None,
            last_chain: Vec::new(),
            idle: 0,
            probe_every: PROBE_EVERY,
            probing: false,
            gain: 1.0,
        }
    }

    /// The factor the draft's probabilities are scaled by to estimate acceptance.
    fn calibration(&self) -> f64 {
        let (a, p) = self.calibration;
        ((a + CALIBRATION_PRIOR) / (p + CALIBRATION_PRIOR)).clamp(0.1, 1.5)
    }

    /// A draft forward's cost in one-row target forwards (measured once both times are
    /// known).
    fn relative_cost(&self) -> f64 {
        let target = self.config.target_clock.as_ref().and_then(|c| c.one_row());
        match (self.draft_time, target) {
            (Some(d), Some(t)) if self.config.measure => (d / t).clamp(0.01, 10.0),
            _ => self.config.cost_ratio,
        }
    }

    /// What one more verified row costs, in one-row target forwards.
    fn row_cost(&self) -> f64 {
        let measured = self.config.target_clock.as_ref().and_then(|c| c.row_cost());
        match measured {
            Some(r) if self.config.measure => r.clamp(0.0, 2.0),
            _ => self.config.row_cost,
        }
    }

    /// Forwards `tokens` as a chain after the cache and commits them; the last one's
    /// logits if `want_last`. A forward of one or two tokens is a draft step and is timed
    /// (a longer one is reading the prompt).
    fn forward(&mut self, tokens: &[u32], want_last: bool) -> Result<Option<Logits>, RuntimeError> {
        let started = Instant::now();
        let nodes = Node::chain(tokens);
        let want = if want_last { Want::Last } else { Want::None };
        let logits = self.model.forward(&mut [SeqInput {
            seq: &mut self.seq,
            nodes: &nodes,
            want,
        }])?;
        self.seq.commit_all()?;
        if want_last && tokens.len() <= 2 {
            let t = started.elapsed().as_secs_f64();
            self.draft_time = Some(self.draft_time.map_or(t, |m| m + TIME_EMA * (t - m)));
        }
        Ok(want_last.then(|| logits.into_iter().next().expect("one input, one logits")))
    }

    /// Brings the draft's cache to exactly `tokens`: rolls back to the longest common
    /// prefix, then forwards the rest in chunks; the last token's logits if `want_last`.
    fn sync(&mut self, tokens: &[u32], want_last: bool) -> Result<Option<Logits>, RuntimeError> {
        let common = self
            .seq
            .tokens()
            .iter()
            .zip(tokens)
            .take_while(|(a, b)| a == b)
            .count();
        // Logits are asked of a forwarded node: keep at least the last token to forward.
        let common = if want_last {
            common.min(tokens.len().saturating_sub(1))
        } else {
            common
        };
        self.seq.truncate(common);
        let mut logits = None;
        for chunk in tokens[common..].chunks(CATCH_UP_CHUNK) {
            let last = chunk.as_ptr_range().end == tokens.as_ptr_range().end;
            logits = self.forward(chunk, want_last && last)?;
        }
        Ok(logits)
    }

    /// The `n` likeliest tokens below the vocabulary limit with their probabilities
    /// (softmax over the whole row), likeliest first.
    fn top(&self, logits: &[f32], n: usize) -> Vec<(u32, f32)> {
        let limit = logits.len().min(self.config.vocab_limit);
        let row = &logits[..limit];
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        if !max.is_finite() {
            return Vec::new();
        }
        let sum: f64 = row.iter().map(|&l| f64::from((l - max).exp())).sum();
        let mut best: Vec<(u32, f32)> = Vec::with_capacity(n + 1);
        for (i, &l) in row.iter().enumerate() {
            if best.len() == n && best.last().is_some_and(|b| l <= b.1) {
                continue;
            }
            let at = best.partition_point(|b| b.1 >= l);
            best.insert(at, (i as u32, l));
            best.truncate(n);
        }
        best.into_iter()
            .map(|(t, l)| (t, (f64::from((l - max).exp()) / sum) as f32))
            .collect()
    }

    /// Drafts the tree below `context`'s last token: see the module documentation.
    fn draft_tree(
        &mut self,
        context: &[u32],
        budget: usize,
    ) -> Result<TokenTree, specdec_runtime::RuntimeError> {
        let mut logits = self
            .sync(context, true)?
            .expect("a non-empty context forwards its last token");
        let calibration = self.calibration();
        let cost = self.relative_cost();
        let row_cost = self.row_cost();
        let max_depth = self.config.max_depth.min(budget);
        // Chain nodes: (token, q, estimated reach); per depth, the alternatives.
        let mut chain: Vec<(u32, f32, f32)> = Vec::new();
        let mut alternatives: Vec<Vec<(u32, f32)>> = Vec::new();
        let mut reach = 1.0f64;
        while chain.len() < max_depth {
            let top = self.top(logits.row(0), 1 + self.config.max_siblings);
            let Some(&(token, q)) = top.first() else {
                break;
            };
            let parent_reach = reach;
            reach *= (f64::from(q) * calibration).min(1.0);
            chain.push((token, q, reach as f32));
            alternatives.push(
                top[1..]
                    .iter()
                    .map(|&(t, qs)| (t, (parent_reach * f64::from(qs) * calibration) as f32))
                    .filter(|&(_, r)| r >= self.config.min_sibling)
                    .collect(),
            );
            // One more depth costs a draft forward and a verified row; it pays if the
            // next token, reached about as often as this one's confidence suggests
            // (`reach * q`), saves more than that.
            if chain.len() == max_depth || reach * f64::from(q) < cost + row_cost {
                break;
            }
            // Nothing follows a stop token: generation ends there.
            if self.config.stop_tokens.contains(&token) {
                break;
            }
            logits = self
                .forward(&[token], true)?
                .expect("logits were asked for");
        }
        let mut tree = TokenTree::with_capacity(1 + budget);
        tree.push(*context.last().expect("not empty"), None, Meta::root());
        let mut left = budget;
        for (depth, &(token, q, r)) in chain.iter().enumerate() {
            if left == 0 {
                break;
            }
            tree.push(token, Some(depth as u32), model_meta(r, q));
            left -= 1;
        }
        let kept_chain = tree.drafted();
        // Alternatives are leaves beside the chain, deepest first (DFS order: a chain
        // node's own subtree comes before its later siblings).
        for depth in (0..kept_chain).rev() {
            for &(token, r) in &alternatives[depth] {
                if left == 0 {
                    break;
                }
                tree.push(token, Some(depth as u32), model_meta(r, r));
                left -= 1;
            }
        }
        self.last_chain = chain[..kept_chain].iter().map(|c| (c.0, c.1)).collect();
        Ok(tree)
    }

    /// Learns from the tokens the target emitted after the last draft.
    fn learn(&mut self, committed: &[u32]) {
        let chain = std::mem::take(&mut self.last_chain);
        if chain.is_empty() {
            return;
        }
        let mut accepted = 0usize;
        let (a, p) = &mut self.calibration;
        for (i, &(token, q)) in chain.iter().enumerate() {
            // The draft was right at a position where the target emitted its token,
            // whether verified there or not (the engine may have trimmed it, and then the
            // target's own token at the end of the accepted path is the evidence); past
            // what the target emitted there is none. Counting trimmed tokens as misses
            // would shorten the chains the engine trims, step after step.
            let Some(&emitted) = committed.get(i) else {
                break;
            };
            let hit = emitted == token;
            *a = CALIBRATION_DECAY * *a + f64::from(u8::from(hit));
            *p = CALIBRATION_DECAY * *p + f64::from(q);
            if !hit {
                break;
            }
            // The last emitted token is the target's own, not an accepted draft.
            if i + 1 < committed.len() {
                accepted += 1;
            }
        }
        // What the step gained, in target forwards: each accepted token saved one, each
        // chain token cost a draft forward and a verified row.
        let per_token = self.relative_cost() + self.row_cost();
        let gain = accepted as f64 - chain.len() as f64 * per_token;
        if std::mem::take(&mut self.probing) {
            if gain > 0.0 {
                self.probe_every = PROBE_EVERY;
                self.gain = gain;
            } else {
                self.probe_every = (self.probe_every * 2).min(PROBE_MAX_EVERY);
                self.idle = self.probe_every;
            }
            return;
        }
        self.gain += GAIN_EMA * (gain - self.gain);
        if self.gain < 0.0 {
            // Drafting has stopped paying: wait, then probe.
            self.idle = self.probe_every;
        }
    }
}

fn model_meta(reach: f32, q: f32) -> Meta {
    Meta {
        logprob: Some(q.max(f32::MIN_POSITIVE).ln()),
        ..Meta::drafted(Source::Model, reach.clamp(0.0, 1.0))
    }
}

impl Drafter for ModelDrafter {
    fn name(&self) -> &'static str {
        "model"
    }

    fn begin(&mut self, _prompt: &[u32], _references: &[Vec<u32>]) {
        self.last_chain.clear();
        // The first steps are not drafted (see `ModelDrafterConfig::undrafted_steps`);
        // idle steps end with a probe.
        let skip = self.config.undrafted_steps;
        self.idle = if skip > 0 { skip + 1 } else { 0 };
        self.probing = false;
        // The prompt is read in `read_ahead` (a request alone) or by the first draft.
    }

    fn read_ahead(&mut self, prompt: &[u32]) {
        // All but the last token (the first draft forwards it for its logits). A cache
        // kept from an earlier request sharing a prefix only catches up the rest.
        let head = &prompt[..prompt.len().saturating_sub(1)];
        if let Err(e) = self.sync(head, false) {
            tracing::warn!("the draft model could not read the prompt: {e}");
            self.seq = self.model.new_sequence();
        }
    }

    fn observe(&mut self, committed: &[u32]) {
        self.learn(committed);
    }

    fn draft(&mut self, context: &[u32], budget: usize) -> TokenTree {
        if context.is_empty() || budget == 0 {
            return undrafted(context);
        }
        // Drafting stopped paying: wait out the idle steps, then probe.
        if self.idle > 0 {
            self.idle -= 1;
            if self.idle > 0 {
                return undrafted(context);
            }
            self.probing = true;
        }
        let tree = match self.draft_tree(context, budget) {
            Ok(tree) => tree,
            Err(e) => {
                tracing::warn!("the draft model's forward failed, step not drafted: {e}");
                self.seq = self.model.new_sequence();
                undrafted(context)
            }
        };
        tree
    }

    fn end(&mut self, _output: &[u32]) {
        self.last_chain.clear();
    }

    fn is_costly(&self) -> bool {
        true
    }
}

impl std::fmt::Debug for ModelDrafter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelDrafter")
            .field("cached", &self.seq.len())
            .field("calibration", &self.calibration())
            .field("draft_time", &self.draft_time.map(Duration::from_secs_f64))
            .finish()
    }
}
