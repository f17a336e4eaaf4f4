//! One request in flight: its cache, drafter, sampler state and output, advanced one
//! forward at a time by [`Engine::step`](crate::Engine::step).
//!
//! The last emitted token is *pending*: it is not in the cache yet. Each decode step
//! forwards `[pending] + draft tree`, verifies the tree against the target's choices,
//! commits the pending token and the accepted path, and the bonus token becomes the new
//! pending one. Plain decoding is the same step with an empty tree.

use std::sync::Arc;
use std::time::{Duration, Instant};

use specdec_drafters::{Drafter, TokenTree};
use specdec_runtime::{Logits, Node, Sequence, Want};
use specdec_tokenizer::{StreamDecoder, Tokenizer};
use specdec_verify::{Forced, Rng};

use crate::budget::{BatchLoad, BudgetPolicy, CostModel};
use crate::fair_share::{self, Member, TRUST_MEMORY};
use crate::request::{FinishReason, GenerateOutput, GenerateRequest, Speculation};
use crate::scope::CacheScope;
use crate::stats::SpecStats;
use crate::stop::{StopEvent, StopMatcher};
use crate::EngineError;

/// Prompt tokens evaluated per forward during prefill; any size gives the same bits. 48
/// rows cost 5-8% less per row than 128 on the 1.5B (AMX: three equal 16-row groups share
/// each block's unpacked weights, and 128 rows stream the weights twice); RAG prompts of
/// 7,336 tokens prefilled in 36.7-37.5 s against 39.2-39.6 s. A new prompt's chunk also
/// holds up every request decoding beside it for a third of the time (311 ms against 877
/// at prefix 100), as vLLM's and SGLang's chunked prefill bound it.
pub(crate) const PREFILL_CHUNK: usize = 48;

/// Drafters propose this many times the nodes a step may verify, and the budget keeps the
/// best by *learned* acceptance: drafters' own scores are not comparable across sources
/// (an exact repeat's long copy and a short guess both score high), the rates are.
const DRAFT_WIDTH: usize = 2;

/// Receives text as it becomes final; returns `false` to cancel the request.
pub type Sink<'a> = Box<dyn FnMut(&str) -> bool + 'a>;

/// Text-side state of one request: decoding, stop strings and the sink.
struct Output<'a> {
    text: String,
    decoder: StreamDecoder,
    stops: StopMatcher,
    stopped_by_string: bool,
    sink: Sink<'a>,
}

impl Output<'_> {
    /// Emits the output's `count`-th token; `Some` when generation must end.
    fn push(
        &mut self,
        tok: &Tokenizer,
        token: u32,
        count: usize,
        max: usize,
    ) -> Option<FinishReason> {
        let piece = self.decoder.push(tok, token);
        match self.stops.push(&piece) {
            StopEvent::Text(t) => {
                self.text.push_str(&t);
                if !t.is_empty() && !(self.sink)(&t) {
                    return Some(FinishReason::Cancelled);
                }
            }
            StopEvent::Stopped(t) => {
                self.text.push_str(&t);
                if !t.is_empty() {
                    (self.sink)(&t);
                }
                self.stopped_by_string = true;
                return Some(FinishReason::Stop);
            }
        }
        (count >= max).then_some(FinishReason::Length)
    }

    /// Releases held text once generation ended for a reason other than a stop string.
    fn finish(&mut self, tok: &Tokenizer, reason: FinishReason) {
        if self.stopped_by_string {
            return;
        }
        let decoder = std::mem::replace(&mut self.decoder, StreamDecoder::new(true));
        let tail = decoder.finish(tok);
        let tail = match self.stops.push(&tail) {
            StopEvent::Text(t) => t + &self.stops.finish(),
            StopEvent::Stopped(t) => t,
        };
        if !tail.is_empty() && reason != FinishReason::Cancelled {
            (self.sink)(&tail);
        }
        self.text.push_str(&tail);
    }
}

/// A generation's share of the next forward: made by `plan`, consumed by `apply`.
pub(crate) enum StepInput {
    /// The next chunk of the prompt (all but its last token) goes into the cache.
    Prefill(Vec<Node>),
    /// The step's rooted tree, forwarded and verified as it is: node 0 is the pending
    /// token, the drafted nodes hang below it. With the logits its verification needs:
    /// every node's, or their argmaxes only (strict greedy, no penalty).
    Decode(TokenTree, Want, Vec<f64>),
}

impl StepInput {
    pub(crate) fn nodes(&self) -> &[Node] {
        match self {
            StepInput::Prefill(nodes) => nodes,
            StepInput::Decode(tree, ..) => tree.nodes(),
        }
    }

    /// Which logits the step needs: every node's (or their argmaxes) to verify a tree,
    /// none for prefill.
    pub(crate) fn want(&self) -> Want {
        match self {
            StepInput::Prefill(_) => Want::None,
            StepInput::Decode(_, want, _) => want.clone(),
        }
    }
}

/// One request being generated. Created by [`Engine::start`](crate::Engine::start).
pub struct Generation<'a> {
    req: GenerateRequest,
    /// The benchmark's forced output, verified in place of the request's rule (see
    /// [`Engine::start_forced`](crate::Engine::start_forced)).
    forced: Option<Forced>,
    seq: Sequence,
    /// Prompt tokens whose cache came from an earlier request.
    cached: usize,
    drafter: Option<Box<dyn Drafter + 'a>>,
    out: Output<'a>,
    rng: Rng,
    policy: BudgetPolicy,
    stats: SpecStats,
    /// The prompt followed by the output; its last token is the pending one.
    context: Vec<u32>,
    forwards: usize,
    start: Instant,
    prefill_time: Option<Duration>,
    finish: Option<FinishReason>,
    /// The stop token that ended the generation, if one did (it is not in the output).
    stop_token: Option<u32>,
    /// Its balance against plain batching (see `fair_share`).
    balance: f64,
    /// Draft tokens it expected (its kept nodes' reach) and accepted in batched steps:
    /// how far its expectations held there (see `fair_share::trust`).
    batched_drafts: (f64, f64),
    /// Its wrapped prose unwrapped (see `reflow`), handed to the drafter with the
    /// references when prefill ends.
    reflowed: Vec<Vec<u32>>,
    /// What a request whose text follows its drafts (relaxed, forced) sizes them by: the
    /// engine's prior cost shape in a full batch of the scheduler's capacity, never
    /// learning, so that neither timings nor the batch's other members change its text;
    /// `None` for the others, which are sized by the engine's measured costs.
    frozen_cost: Option<Arc<CostModel>>,
}

impl<'a> Generation<'a> {
    pub(crate) fn new(
        mut req: GenerateRequest,
        forced: Option<Forced>,
        seq: Sequence,
        drafter: Option<Box<dyn Drafter + 'a>>,
        sink: Sink<'a>,
        policy: BudgetPolicy,
        reflowed: Vec<Vec<u32>>,
    ) -> Self {
        let cached = seq.len();
        // A forced output ends with its text (finish reason: length). A replay's ends as
        // the recorded run's did (its stop token, or the token budget its caller gives), so
        // drafts near the end are capped as that run's were.
        if let Some(f) = forced.as_ref().filter(|f| !f.is_replay()) {
            req.max_tokens = req.max_tokens.min(f.remaining(req.prompt.len()));
        }
        Generation {
            frozen_cost: None,
            rng: Rng::new(req.sampling.seed),
            policy,
            out: Output {
                text: String::new(),
                decoder: StreamDecoder::new(true),
                stops: StopMatcher::new(req.stop.clone()),
                stopped_by_string: false,
                sink,
            },
            context: req.prompt.clone(),
            finish: (req.max_tokens == 0).then_some(FinishReason::Length),
            stop_token: None,
            req,
            forced,
            seq,
            cached,
            drafter,
            stats: SpecStats::default(),
            forwards: 0,
            start: Instant::now(),
            prefill_time: None,
            balance: 0.0,
            batched_drafts: (0.0, 0.0),
            reflowed,
        }
    }

    /// Sizes the drafts of a request whose text follows them on `frozen` (the engine's
    /// prior shape for a full batch of its scheduler's capacity; see
    /// `CostModel::frozen_in_batch`), shared, since it never learns.
    pub(crate) fn sized_on(mut self, frozen: &Arc<CostModel>) -> Self {
        if self.follows_drafts() {
            self.frozen_cost = Some(Arc::clone(frozen));
        }
        self
    }

    /// Whether the generation has ended (a stop, the token budget, or an error).
    pub fn is_finished(&self) -> bool {
        self.finish.is_some()
    }

    /// Tokens emitted so far.
    pub fn tokens(&self) -> &[u32] {
        &self.context[self.req.prompt.len()..]
    }

    /// How the request speculates.
    pub fn speculation(&self) -> &Speculation {
        &self.req.speculation
    }

    /// Whether the output may differ from plain decoding's: a relaxed rule, or forced.
    /// A replay's forced output is the target's own: its drafts are sized as a strict
    /// request's, which is what it replays.
    fn follows_drafts(&self) -> bool {
        self.forced.as_ref().is_some_and(|f| !f.is_replay())
            || self.req.speculation.acceptance.is_relaxed()
    }

    /// Whose cached prefixes the request may reuse (and who may reuse its cache).
    pub fn cache_scope(&self) -> &CacheScope {
        &self.req.cache_scope
    }

    /// The request's prompt tokens.
    pub fn prompt(&self) -> &[u32] {
        &self.req.prompt
    }

    /// Ends the generation before its next step (client gone, timeout).
    pub fn cancel(&mut self) {
        self.finish.get_or_insert(FinishReason::Cancelled);
    }

    /// Ends the generation: what it produced, its cache (for prefix reuse), and its
    /// drafter's name with the acceptance it learned (`None` if no draft was verified).
    pub(crate) fn into_parts(
        mut self,
        tok: &Tokenizer,
    ) -> (
        GenerateOutput,
        Sequence,
        Option<(&'static str, BudgetPolicy)>,
    ) {
        let finish = self.finish.unwrap_or(FinishReason::Cancelled);
        let relaxed = self.follows_drafts();
        self.out.finish(tok, finish);
        let learned = match &self.drafter {
            Some(d) if self.stats.draft_steps > 0 => Some((d.name(), self.policy)),
            _ => None,
        };
        let out = GenerateOutput {
            completion_tokens: self.context.len() - self.req.prompt.len(),
            token_ids: self.context.split_off(self.req.prompt.len()),
            text: self.out.text,
            prompt_tokens: self.req.prompt.len(),
            cached_prompt_tokens: self.cached,
            forward_passes: self.forwards,
            prefill_time: self.prefill_time.unwrap_or_else(|| self.start.elapsed()),
            elapsed: self.start.elapsed(),
            finish_reason: finish,
            stop_token: self.stop_token,
            spec: self.stats,
            relaxed,
            forced: self.forced.is_some(),
        };
        if let (Some(d), true) = (self.drafter.as_mut(), self.prefill_time.is_some()) {
            // Begun at the end of prefill. The stop token goes with the output: a drafter
            // that learns outputs then learns where they end, and a repeat's draft ends
            // with it instead of running on into whatever another source copies after.
            d.end(&out.written());
        }
        (out, self.seq, learned)
    }

    fn head(&self) -> &[u32] {
        &self.req.prompt[..self.req.prompt.len() - 1]
    }

    /// Marks the prompt as in the cache and starts the drafter. Starting it is part of
    /// prefill: a drafter indexes the prompt; a draft model reads it here when the
    /// request is `alone`, else when it first drafts (in a batch its forwards would hold
    /// up every member).
    fn prefill_done(&mut self, alone: bool) {
        if let Some(d) = self.drafter.as_mut() {
            let refs = &self.req.speculation.references;
            if self.reflowed.is_empty() {
                d.begin(&self.req.prompt, refs);
            } else {
                let mut docs = refs.clone();
                docs.append(&mut self.reflowed);
                d.begin(&self.req.prompt, &docs);
            }
            if alone {
                d.read_ahead(&self.req.prompt);
            }
        }
        self.prefill_time = Some(self.start.elapsed());
    }

    /// Whether this generation's next step decodes: not finished, its whole prompt in the
    /// cache.
    fn decodes(&self) -> bool {
        self.finish.is_none()
            && (self.prefill_time.is_some() || self.seq.len() == self.head().len())
    }

    /// Decides this generation's share of the next forward and adds it to `load`. A
    /// decode step's drafts are sized as if alone (with each kept node's reach): the
    /// engine decides how much of every member's drafts a batch's forward takes
    /// (`fair_share`). Unless the generation is `alone` in the forward, nothing is drafted
    /// by a model (`Drafter::draft_cheaply`): a draft model's forwards run member after
    /// member on the cores the whole batch waits for, so they cost every member more than
    /// they save any (on the 1.5B with the 0.5B, `auto` ran at 0.74-0.81x of plain
    /// batching at 2 to 8 requests in flight, every record slower).
    pub(crate) fn plan(
        &mut self,
        cost: &CostModel,
        load: &mut BatchLoad,
        alone: bool,
    ) -> Option<StepInput> {
        if !self.decodes() {
            if self.finish.is_some() {
                return None;
            }
            // Prompt tokens in the cache: reused ones, then each committed prefill chunk.
            let prefilled = self.seq.len();
            let end = (prefilled + PREFILL_CHUNK).min(self.head().len());
            let nodes = Node::chain(&self.head()[prefilled..end]);
            load.rows += nodes.len();
            load.ctx_sum += nodes.len() * (prefilled + nodes.len() / 2);
            return Some(StepInput::Prefill(nodes));
        };
        if self.prefill_time.is_none() {
            // The whole prompt is in the cache.
            self.prefill_done(alone);
        }
        let remaining = self.req.max_tokens - self.tokens().len();
        let room = self.seq.max_len() - self.seq.len();
        let cap = self.policy.cap(remaining).min(room.saturating_sub(1));
        let t0 = Instant::now();
        let pending = *self.context.last().expect("the prompt is not empty");
        let wide = cap.saturating_mul(DRAFT_WIDTH);
        let tree = match self.drafter.as_mut() {
            Some(d) if cap > 0 => {
                let mut tree = if alone {
                    d.draft(&self.context, wide)
                } else {
                    d.draft_cheaply(&self.context, wide)
                };
                if !tree.is_rooted_at(pending) {
                    // Not a tree for this step: its nodes would not continue the pending
                    // token, so none of it is verified.
                    tree = TokenTree::rooted(pending);
                }
                // DFS order keeps every kept node's parent.
                tree.truncate(1 + wide);
                tree
            }
            _ => TokenTree::rooted(pending),
        };
        // Relaxed acceptance follows the drafts, so their sizes must follow neither the
        // machine's timing nor the batch's other members: sized on the prior cost shape in
        // a full batch of the scheduler's capacity, a relaxed request writes the same text
        // on every run with that capacity.
        let cost = self.frozen_cost.as_deref().unwrap_or(cost);
        let (tree, reach) = self.policy.trim_scored(tree, cap, self.seq.len(), cost);
        load.add(tree.drafted(), self.seq.len());
        self.stats.draft_time += t0.elapsed();
        let want = if self.forced.is_none()
            && self
                .req
                .speculation
                .acceptance
                .argmax_suffices(&self.req.sampling)
        {
            Want::Argmax
        } else {
            Want::All
        };
        Some(StepInput::Decode(tree, want, reach))
    }

    /// This generation as `fair_share` sees a planned decode step of it; `None` for a
    /// prefill step.
    pub(crate) fn member<'s>(&self, step: &'s StepInput) -> Option<Member<'s>> {
        match step {
            StepInput::Prefill(_) => None,
            StepInput::Decode(_, _, reach) => Some(Member {
                balance: self.balance,
                reach,
                trust: fair_share::trust(self.batched_drafts),
                droppable: !self.follows_drafts(),
            }),
        }
    }

    /// Keeps a planned decode step's first `most` drafted nodes (`fair_share` found more
    /// unfair to the batch) and takes the others out of `load`; a relaxed or forced
    /// step keeps them all (its text follows its drafts, which must not depend on the
    /// batch).
    pub(crate) fn cap_drafts(&self, step: &mut StepInput, most: usize, load: &mut BatchLoad) {
        if let StepInput::Decode(tree, _, reach) = step {
            if tree.drafted() <= most || self.follows_drafts() {
                return;
            }
            let dropped = tree.drafted() - most;
            // DFS order: a prefix keeps every kept node's parent.
            tree.truncate(1 + most);
            load.rows -= dropped;
            load.ctx_sum = load.ctx_sum.saturating_sub(dropped * self.seq.len());
            reach.truncate(most);
        }
    }

    /// Adds what a batched step gained or lost against plain batching (see
    /// `fair_share`), and how many draft tokens it `expected` and `accepted` there (a
    /// window of recent batched steps: see `fair_share::trust`).
    pub(crate) fn settle(&mut self, credit: f64, expected: f64, accepted: usize) {
        self.balance += credit;
        let (e, a) = self.batched_drafts;
        self.batched_drafts = (
            TRUST_MEMORY * e + expected,
            TRUST_MEMORY * a + accepted as f64,
        );
    }

    /// Tokens the next step attends to: the prompt and what was generated.
    pub(crate) fn context_len(&self) -> usize {
        self.context.len()
    }

    pub(crate) fn seq_mut(&mut self) -> &mut Sequence {
        &mut self.seq
    }

    /// Takes the planned step back with its logits: verifies under the request's rule,
    /// commits and emits. Returns the drafted tokens accepted.
    pub(crate) fn apply(
        &mut self,
        tok: &Tokenizer,
        step: StepInput,
        logits: &Logits,
    ) -> Result<usize, EngineError> {
        self.forwards += 1;
        let (tree, want) = match step {
            StepInput::Prefill(_) => {
                self.seq.commit_all()?;
                return Ok(0);
            }
            StepInput::Decode(tree, want, _) => (tree, want),
        };
        let verdict = if matches!(want, Want::Argmax) {
            specdec_verify::verify_greedy_argmax(&tree, |i| {
                logits.argmax(i).expect("every node's argmax was asked for")
            })
        } else if let Some(forced) = &self.forced {
            forced.verify(
                &tree,
                |i| logits.row(i),
                &self.context,
                &self.req.sampling,
                &mut self.rng,
            )
        } else {
            self.req.speculation.acceptance.verify(
                &tree,
                |i| logits.row(i),
                &self.context,
                &self.req.sampling,
                &mut self.rng,
            )
        };
        let mut path = vec![0];
        path.extend(&verdict.accepted);
        self.seq.commit(&path)?;
        self.stats.record(&tree, &verdict.accepted);
        self.stats.relaxed_tokens += verdict.relaxed;
        self.policy.observe(&tree, &verdict.accepted);
        let emitted = verdict.emitted(&tree);
        let before = self.context.len();
        for &t in &emitted {
            if tok.stop_ids().contains(&t) {
                // A stop token ends generation and is not part of the output.
                self.finish = Some(FinishReason::Stop);
                self.stop_token = Some(t);
                break;
            }
            self.context.push(t);
            let count = self.context.len() - self.req.prompt.len();
            if let Some(reason) = self.out.push(tok, t, count, self.req.max_tokens) {
                self.finish = Some(reason);
                break;
            }
        }
        if let Some(d) = self.drafter.as_mut() {
            d.observe(&self.context[before..]);
        }
        Ok(verdict.accepted.len())
    }
}
