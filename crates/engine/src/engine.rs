//! The engine: one loop, plain decoding being a zero-size draft, one request being a batch
//! of one. It owns what outlives a request: the measured verify cost, the acceptance each
//! drafter earned, the prefix cache and the drafting pools.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use specdec_drafters::Drafter;
use specdec_runtime::{Logits, SeqInput, Target, Want};
use specdec_tokenizer::Tokenizer;
use specdec_verify::Forced;

use crate::budget::{AcceptanceMemories, BatchLoad, BudgetPolicy, CostModel};
use crate::draft_model::DraftModel;
use crate::fair_share::{self, Member, Price};
use crate::generation::{Generation, Sink, StepInput};
use crate::method::DraftMethod;
use crate::pools::{Folded, Learned, Pools, SaveResult};
use crate::prefix_cache::PrefixCache;
use crate::request::{GenerateOutput, GenerateRequest};
use crate::scope::{CacheScope, Tenant};
use crate::EngineError;

/// Runs requests on one target model.
pub struct Engine<'m> {
    target: &'m dyn Target,
    tokenizer: &'m Tokenizer,
    cost: CostModel,
    prefix_cache: Option<PrefixCache>,
    /// What requests of the shared scope learned of acceptance by depth.
    acceptance: AcceptanceMemories,
    /// The same per tenant: draft sizes follow the acceptance that earlier requests saw, so
    /// sharing it would tell a tenant how predictable another's texts were.
    tenant_acceptance: HashMap<Tenant, AcceptanceMemories>,
    pools: Pools,
    /// The draft model of the `model` method (and a part of `auto`'s), if loaded.
    draft_model: Option<DraftModel>,
    /// What finished requests taught their pools, for [`Engine::take_learned`]; `None`
    /// unless [`Engine::sharing_learning`] (nobody else would read it).
    learned: Option<VecDeque<Learned>>,
    /// What a request whose text follows its drafts (relaxed) sizes them by: the prior
    /// shape for a full batch of the scheduler's capacity (see
    /// `CostModel::frozen_in_batch`), alone without a scheduler; shared by those requests.
    relaxed_cost: Arc<CostModel>,
}

/// What one forward of [`Engine::step_sharing`] gave: the extra inputs' logits, and what
/// it cost (nothing when no input had rows to run).
#[derive(Default)]
pub(crate) struct Forwarded {
    pub logits: Vec<Logits>,
    pub ms: f64,
    /// Rows (tree nodes and prompt tokens) of every input together.
    pub rows: usize,
}

/// Lessons kept for [`Engine::take_learned`] at most; a caller that stopped taking them
/// loses the oldest rather than growing memory.
const MAX_UNTAKEN_LESSONS: usize = 4096;

/// Tenants whose acceptance memories are kept; beyond it one is forgotten (it starts
/// again from the prior, as a new tenant does).
const MAX_TENANT_MEMORIES: usize = 4096;

impl<'m> Engine<'m> {
    /// An engine with an empty in-memory global trie and no prefix cache.
    pub fn new(target: &'m dyn Target, tokenizer: &'m Tokenizer) -> Self {
        let mut pools = Pools::in_memory();
        pools.set_vocab(target.config().vocab);
        Engine {
            target,
            tokenizer,
            cost: CostModel::default(),
            prefix_cache: None,
            acceptance: AcceptanceMemories::default(),
            tenant_acceptance: HashMap::new(),
            pools,
            draft_model: None,
            learned: None,
            relaxed_cost: Arc::new(CostModel::frozen()),
        }
    }

    /// Sizes relaxed requests' drafts for a full batch of `batch`: a setting, which a
    /// relaxed text depends on, never on the batch's actual members or timings. A
    /// scheduler sets its capacity; a caller may pin another value after (a knowledge job
    /// resumed at another concurrency keeps its texts).
    pub fn set_relaxed_batch(&mut self, batch: usize) {
        self.relaxed_cost = Arc::new(CostModel::frozen_in_batch(batch));
    }

    /// Keeps what each finished request taught its pool for [`Engine::take_learned`], so
    /// other engines (replicas of this model) can fold it in with [`Engine::fold_learned`].
    pub fn sharing_learning(mut self) -> Self {
        self.learned = Some(VecDeque::new());
        self
    }

    /// What finished requests taught their pools since the last call (empty unless
    /// [`Engine::sharing_learning`]). Private requests and benchmarks' forced runs teach
    /// nothing to share.
    pub fn take_learned(&mut self) -> Vec<Learned> {
        self.learned
            .as_mut()
            .map(|l| l.drain(..).collect())
            .unwrap_or_default()
    }

    /// Folds what another engine's request taught into this engine's pool of the same
    /// owner and name (see [`Pools::fold`]).
    pub fn fold_learned(&mut self, learned: &Learned) -> Folded {
        self.pools.fold(learned)
    }

    /// Lets requests draft with `draft` (the `model` method, and a part of `auto`).
    pub fn with_draft_model(mut self, draft: DraftModel) -> Self {
        self.draft_model = Some(draft);
        self
    }

    /// The draft model requests may draft with, if any.
    pub fn draft_model(&self) -> Option<&DraftModel> {
        self.draft_model.as_ref()
    }

    /// Keeps finished requests' caches (up to `max_bytes`) for later requests that share
    /// a prefix with them; see [`PrefixCache`].
    pub fn with_prefix_cache(mut self, max_bytes: usize) -> Self {
        self.prefix_cache = Some(PrefixCache::new(max_bytes));
        self
    }

    /// Sizes drafts with this cost model instead of one learned from this engine's timings
    /// (see [`CostModel::frozen`]).
    pub fn with_cost_model(mut self, cost: CostModel) -> Self {
        self.cost = cost;
        self
    }

    /// Drafts from (and feeds) these pools; pools loaded later are checked against the
    /// target's vocabulary.
    pub fn with_pools(mut self, mut pools: Pools) -> Self {
        pools.set_vocab(self.target.config().vocab);
        self.pools = pools;
        self
    }

    /// The drafting pools requests draft from and feed.
    pub fn pools(&self) -> &Pools {
        &self.pools
    }

    /// The drafting pools, mutable (to load, save or limit them).
    pub fn pools_mut(&mut self) -> &mut Pools {
        &mut self.pools
    }

    /// The target's tokenizer.
    pub fn tokenizer(&self) -> &'m Tokenizer {
        self.tokenizer
    }

    /// The model being decoded.
    pub fn target(&self) -> &'m dyn Target {
        self.target
    }

    /// What requests of the shared scope learned of acceptance, which sizes the next
    /// requests' drafts. A benchmark puts a copy back between repetitions of a record, so
    /// that no repetition drafts from what another repetition of it learned.
    pub fn shared_acceptance(&self) -> &AcceptanceMemories {
        &self.acceptance
    }

    /// Replaces what requests of the shared scope learned of acceptance (see
    /// [`Engine::shared_acceptance`]).
    pub fn set_shared_acceptance(&mut self, learned: AcceptanceMemories) {
        self.acceptance = learned;
    }

    /// Saves the drafting state that learned since its last save and logs each outcome.
    pub fn save_drafting_state(&mut self) -> Vec<SaveResult> {
        let saved = self.pools.save_dirty();
        for (path, r) in &saved {
            match r {
                Ok(()) => tracing::info!("saved drafting state to {}", path.display()),
                Err(e) => {
                    tracing::error!("could not save drafting state to {}: {e}", path.display())
                }
            }
        }
        saved
    }

    /// Whether `req` can start without reading pool files on this thread; if not, they
    /// are being read in the background (see [`Pools::prepare`]): hold the request back
    /// and ask again.
    pub fn prepare(&mut self, req: &GenerateRequest) -> bool {
        let spec = &req.speculation;
        if !spec.method.uses_pool() {
            return true;
        }
        self.pools.prepare(&req.cache_scope, spec.pool.as_ref())
    }

    /// Hands the drafting state that learned since its last save to a background thread
    /// (which logs each outcome), so the loop never waits for files.
    pub fn save_drafting_state_in_background(&mut self) {
        self.pools.save_in_background();
    }

    /// (requests that reused a cached prefix, tokens reused), when the cache is on.
    pub fn prefix_cache_stats(&self) -> Option<(u64, u64)> {
        self.prefix_cache.as_ref().map(PrefixCache::stats)
    }

    /// Ends a generation and returns what it produced; its cache goes to the prefix
    /// cache, and the pool it fed is marked for saving.
    pub fn finish(&mut self, g: Generation<'_>) -> GenerateOutput {
        let spec = g.speculation();
        // A drafter of the pool's state feeds it at the end of every request it served.
        if spec.method.uses_pool() {
            self.pools
                .mark_dirty_in(g.cache_scope(), spec.pool.as_ref());
        }
        let scope = g.cache_scope().clone();
        // What it taught its pool, for other replicas (a private request shares nothing).
        let shares =
            self.learned.is_some() && spec.method.uses_pool() && scope != CacheScope::Private;
        let lesson = shares.then(|| Learned {
            scope: scope.clone(),
            pool: spec.pool.clone(),
            prompt: tail(g.prompt(), self.pools.lesson_prompt_tokens()).to_vec(),
            output: Vec::new(),
        });
        let (out, seq, learned) = g.into_parts(self.tokenizer);
        if let (Some(mut lesson), Some(outbox)) = (lesson, self.learned.as_mut()) {
            // The drafter learned the output only when the request got past its prefill,
            // and a forced output is not the model's.
            if !out.token_ids.is_empty() && !out.forced {
                lesson.output = out.written();
                if outbox.len() >= MAX_UNTAKEN_LESSONS {
                    outbox.pop_front();
                }
                outbox.push_back(lesson);
            }
        }
        if let Some((name, policy)) = learned {
            match &scope {
                CacheScope::Shared => self.acceptance.learn(name, &policy),
                CacheScope::Tenant(t) => {
                    if !self.tenant_acceptance.contains_key(t)
                        && self.tenant_acceptance.len() >= MAX_TENANT_MEMORIES
                    {
                        let forgotten = self.tenant_acceptance.keys().next().cloned();
                        forgotten.map(|f| self.tenant_acceptance.remove(&f));
                    }
                    let m = self.tenant_acceptance.entry(t.clone()).or_default();
                    m.learn(name, &policy);
                }
                CacheScope::Private => {}
            }
        }
        if let Some(c) = &mut self.prefix_cache {
            c.insert(&scope, seq);
        }
        out
    }

    /// Checks a request against the model before any work is done.
    pub fn check(&self, req: &GenerateRequest) -> Result<(), EngineError> {
        if req.prompt.is_empty() {
            return Err(EngineError::InvalidRequest("the prompt is empty".into()));
        }
        req.sampling
            .validate()
            .map_err(EngineError::InvalidRequest)?;
        req.speculation
            .acceptance
            .check_sampling(&req.sampling)
            .map_err(EngineError::InvalidRequest)?;
        if req.speculation.method == DraftMethod::Model && self.draft_model.is_none() {
            return Err(EngineError::InvalidRequest(
                "the `model` draft method needs a draft model, and none is loaded: start with --draft-model NAME|FILE (a model of the target's vocabulary)".into(),
            ));
        }
        let limit = self.target.config().context_length;
        // Drafts never push past this: each step caps its tree by the room left.
        // Checked: a max_tokens near 2^64 must not wrap to a small sum that passes.
        let needed = req.prompt.len().checked_add(req.max_tokens);
        if needed.is_none_or(|n| n > limit) {
            return Err(EngineError::ContextOverflow {
                prompt: req.prompt.len(),
                max_tokens: req.max_tokens,
                limit,
            });
        }
        Ok(())
    }

    /// Starts a request with the drafter its speculation names (from the engine's pools);
    /// advance it with [`Engine::step`] until it is finished.
    pub fn start(
        &mut self,
        req: GenerateRequest,
        sink: Sink<'static>,
    ) -> Result<Generation<'static>, EngineError> {
        self.check(&req)?;
        let drafter = self.drafter_for(&req)?;
        Ok(self.open(req, None, drafter, sink))
    }

    /// Benchmarks only: [`Engine::start`], with drafts accepted against `forced`'s tokens
    /// rather than by the request's rule, so the output is the forced text (its
    /// `max_tokens` capped to the text's end; the output says `forced` and `relaxed`). No
    /// request can ask for this: only a caller that measures drafting gives it.
    pub fn start_forced(
        &mut self,
        req: GenerateRequest,
        forced: Forced,
        sink: Sink<'static>,
    ) -> Result<Generation<'static>, EngineError> {
        self.check(&req)?;
        forced
            .check(&req.prompt)
            .map_err(EngineError::InvalidRequest)?;
        let drafter = self.drafter_for(&req)?;
        Ok(self.open(req, Some(forced), drafter, sink))
    }

    /// Starts a request with a drafter of the caller's (or none: plain decoding).
    pub fn start_with<'a>(
        &mut self,
        req: GenerateRequest,
        drafter: Option<Box<dyn Drafter + 'a>>,
        sink: Sink<'a>,
    ) -> Result<Generation<'a>, EngineError> {
        self.check(&req)?;
        Ok(self.open(req, None, drafter, sink))
    }

    /// A generation for a request already checked.
    fn open<'a>(
        &mut self,
        req: GenerateRequest,
        forced: Option<Forced>,
        drafter: Option<Box<dyn Drafter + 'a>>,
        sink: Sink<'a>,
    ) -> Generation<'a> {
        // The last prompt token is evaluated by the first decode step, never cached.
        let head = &req.prompt[..req.prompt.len() - 1];
        let seq = self
            .prefix_cache
            .as_mut()
            .and_then(|c| c.lookup(&req.cache_scope, head))
            .unwrap_or_else(|| self.target.new_sequence());
        let name = drafter.as_ref().map_or("", |d| d.name());
        // A relaxed (or forced) request starts from the prior rather than from what earlier
        // requests learned: its draft sizes, and so its text, must not depend on what ran
        // before. A replay is sized as the strict request it replays.
        let memories = match &req.cache_scope {
            CacheScope::Shared => Some(&self.acceptance),
            CacheScope::Tenant(t) => self.tenant_acceptance.get(t),
            CacheScope::Private => None,
        };
        let max = req.speculation.max_draft;
        let policy = match memories {
            Some(m)
                if forced.as_ref().is_none_or(Forced::is_replay)
                    && !req.speculation.acceptance.is_relaxed() =>
            {
                m.policy(name, max)
            }
            _ => BudgetPolicy::new(max),
        };
        let policy = if req.speculation.references.is_empty() {
            policy
        } else {
            policy.predicted()
        };
        // Only copying drafters read documents; a plain request re-tokenizes nothing.
        let reflowed = if drafter.is_some() {
            crate::reflow::reflowed_documents(
                self.tokenizer,
                &req.prompt,
                &req.speculation.references,
            )
        } else {
            Vec::new()
        };
        Generation::new(req, forced, seq, drafter, sink, policy, reflowed)
            .sized_on(&self.relaxed_cost)
    }

    /// Runs one forward for every unfinished generation of `batch` together: a prefill
    /// chunk for those still reading their prompt, a verify step for the others.
    /// Batching never changes a generation's tokens (the runtime is batch-invariant).
    pub fn step(&mut self, batch: &mut [&mut Generation<'_>]) -> Result<(), EngineError> {
        self.step_sharing(batch, Vec::new(), (0, 0)).map(|_| ())
    }

    /// [`Engine::step`] with `extra` inputs in the same forward (the scheduler's beam
    /// searches; `extra_load` is their rows and summed context, which the batch's drafts
    /// are sized around). Returns the extra inputs' logits, in their order, with the
    /// forward's milliseconds and rows.
    pub(crate) fn step_sharing(
        &mut self,
        batch: &mut [&mut Generation<'_>],
        extra: Vec<SeqInput<'_>>,
        extra_load: (usize, usize),
    ) -> Result<Forwarded, EngineError> {
        let mut load = BatchLoad {
            rows: extra_load.0,
            ctx_sum: extra_load.1,
        };
        // Each member plans the drafts it would verify alone; `fair_share` then decides
        // how much of them the batch's forward takes. Sized one after another against the
        // batch's rows, the first member drafted as if alone (on the 1.5B at concurrency 6
        // every speculative configuration ran 8-11% below plain batching), and each member
        // had to pay alone for a forward that all members' drafts fill.
        // A generation alone in the forward may draft with a model; in a batch none does.
        let alone = extra.is_empty() && batch.iter().filter(|g| !g.is_finished()).count() == 1;
        let mut steps: Vec<Option<StepInput>> = batch
            .iter_mut()
            .map(|g| g.plan(&self.cost, &mut load, alone))
            .collect();
        let price = self.fair_share(batch, &mut steps, &mut load);
        // Only all-decode forwards are timed: the cost curve is of verifying trees (a
        // beam search's rounds are trees too).
        let timed = steps
            .iter()
            .flatten()
            .all(|s| matches!(s.want(), Want::All | Want::Argmax))
            && extra.iter().all(|i| matches!(i.want, Want::All));
        let t0 = Instant::now();
        let mut inputs: Vec<SeqInput<'_>> = batch
            .iter_mut()
            .zip(&steps)
            .filter_map(|(g, s)| {
                s.as_ref().map(|s| SeqInput {
                    seq: g.seq_mut(),
                    nodes: s.nodes(),
                    want: s.want(),
                })
            })
            .collect();
        let own = inputs.len();
        inputs.extend(extra);
        if inputs.is_empty() {
            return Ok(Forwarded::default());
        }
        let rows = inputs.iter().map(|i| i.nodes.len()).sum();
        let mut logits = self.target.forward(&mut inputs)?;
        drop(inputs);
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        tracing::trace!(
            rows = load.rows,
            ctx = load.mean_ctx(),
            ms,
            priced = self.cost.ms(load.rows, load.mean_ctx()),
            timed,
            "forward"
        );
        if timed {
            self.cost.observe(load.rows, load.mean_ctx(), ms);
            let ctx = load.mean_ctx();
            if let (Some(d), Some(one)) = (&self.draft_model, self.cost.one_row_ms(ctx)) {
                // A typical draft's rows: what each adds, relative to one row.
                let row = (self.cost.relative(9, ctx) - 1.0) / 8.0;
                d.clock().set(one / 1e3, row);
            }
        }
        let rest = logits.split_off(own);
        let members = batch
            .iter_mut()
            .zip(steps)
            .filter_map(|(g, s)| s.map(|s| (g, s)));
        for ((g, s), l) in members.zip(&logits) {
            // Only a judged (batched) decode step settles.
            let expected = match (&s, price) {
                (StepInput::Decode(_, _, reach), Some(_)) => Some(reach.iter().sum::<f64>()),
                _ => None,
            };
            let accepted = g.apply(self.tokenizer, s, l)?;
            if let (Some(expected), Some(price)) = (expected, price) {
                tracing::trace!(expected, accepted, c0 = price.c0, c1 = price.c1, "settled");
                g.settle(price.credit(accepted), expected, accepted);
            }
        }
        Ok(Forwarded {
            logits: rest,
            ms,
            rows,
        })
    }

    /// Applies `fair_share`'s rule to a batch's planned steps: cuts the drafts that would
    /// make some member slower than plain batching beyond its allowance. Returns the
    /// step's price for the members' balances (`None`: fewer than two decode).
    fn fair_share(
        &self,
        batch: &mut [&mut Generation<'_>],
        steps: &mut [Option<StepInput>],
        load: &mut BatchLoad,
    ) -> Option<Price> {
        let members: Vec<Member> = batch
            .iter()
            .zip(steps.iter())
            .filter_map(|(g, s)| g.member(s.as_ref()?))
            .collect();
        let (most, price) = fair_share::judge(&members, load, &self.cost)?;
        if let Some(most) = most {
            for (g, s) in batch.iter().zip(steps.iter_mut()) {
                if let Some(s) = s.as_mut() {
                    g.cap_drafts(s, most, load);
                }
            }
        }
        Some(price)
    }

    /// The cost curve the engine learned from its forwards.
    pub(crate) fn cost(&self) -> &CostModel {
        &self.cost
    }

    /// Generates with the drafter the request's speculation names; `sink` receives text
    /// as it becomes final and returns `false` to cancel.
    pub fn generate(
        &mut self,
        req: &GenerateRequest,
        sink: &mut dyn FnMut(&str) -> bool,
    ) -> Result<GenerateOutput, EngineError> {
        self.generate_inner(req, None, sink)
    }

    /// Benchmarks only: [`Engine::generate`] with the output forced (see
    /// [`Engine::start_forced`]).
    pub fn generate_forced(
        &mut self,
        req: &GenerateRequest,
        forced: Forced,
        sink: &mut dyn FnMut(&str) -> bool,
    ) -> Result<GenerateOutput, EngineError> {
        self.generate_inner(req, Some(forced), sink)
    }

    fn generate_inner(
        &mut self,
        req: &GenerateRequest,
        forced: Option<Forced>,
        sink: &mut dyn FnMut(&str) -> bool,
    ) -> Result<GenerateOutput, EngineError> {
        self.check(req)?;
        if let Some(f) = &forced {
            f.check(&req.prompt).map_err(EngineError::InvalidRequest)?;
        }
        let mut drafter = self.drafter_for(req)?;
        let drafter = drafter
            .as_deref_mut()
            .map(|d| Box::new(d) as Box<dyn Drafter + '_>);
        self.run(req, forced, drafter, sink)
    }

    /// The drafter `req` names, over the pool its scope and pool name give it (see
    /// [`Pools::pool_in`]).
    fn drafter_for(
        &mut self,
        req: &GenerateRequest,
    ) -> Result<Option<Box<dyn Drafter>>, EngineError> {
        let spec = &req.speculation;
        let model = match &self.draft_model {
            // A relaxed request's drafts must depend on its text alone, not on timings.
            Some(d) if spec.method.uses_model() => Some(d.drafter(
                self.target.config().vocab,
                self.tokenizer.stop_ids(),
                !spec.acceptance.is_relaxed(),
            )),
            _ => None,
        };
        if !spec.method.uses_pool() {
            // Its drafter reads no pool: none is loaded for it.
            return Ok(spec.method.drafter(self.pools.global(), model));
        }
        let pool = self.pools.pool_in(&req.cache_scope, spec.pool.as_ref())?;
        Ok(spec.method.drafter(&pool, model))
    }

    /// Generates with a drafter of the caller's (or none). With or without a drafter the
    /// tokens are the same.
    pub fn generate_with(
        &mut self,
        req: &GenerateRequest,
        drafter: Option<&mut (dyn Drafter + 'static)>,
        sink: &mut dyn FnMut(&str) -> bool,
    ) -> Result<GenerateOutput, EngineError> {
        self.check(req)?;
        let drafter = drafter.map(|d| Box::new(d) as Box<dyn Drafter + '_>);
        self.run(req, None, drafter, sink)
    }

    /// Runs a checked request to its end, one batch of one at a time.
    fn run(
        &mut self,
        req: &GenerateRequest,
        forced: Option<Forced>,
        drafter: Option<Box<dyn Drafter + '_>>,
        sink: &mut dyn FnMut(&str) -> bool,
    ) -> Result<GenerateOutput, EngineError> {
        let mut g = self.open(req.clone(), forced, drafter, Box::new(sink));
        while !g.is_finished() {
            self.step(&mut [&mut g])?;
        }
        Ok(self.finish(g))
    }
}

/// The last `n` tokens of `tokens`.
fn tail(tokens: &[u32], n: usize) -> &[u32] {
    &tokens[tokens.len().saturating_sub(n)..]
}
