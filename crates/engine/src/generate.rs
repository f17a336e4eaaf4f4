//! Requests, outputs and the engine: one loop, plain decoding being a zero-size draft,
//! one request being a batch of one.

use std::sync::PoisonError;
use std::time::{Duration, Instant};

use specdec_drafters::Drafter;
use specdec_runtime::{Model, SeqInput, Want};
use specdec_tokenizer::Tokenizer;
use specdec_verify::SamplingParams;

use crate::budget::{AcceptanceMemories, BatchLoad, CostModel};
use crate::generation::{Generation, Sink};
use crate::prefix_cache::PrefixCache;
use crate::stats::SpecStats;
use crate::EngineError;

/// A validated generation request in token space.
#[derive(Clone, Debug)]
pub struct GenerateRequest {
    pub prompt: Vec<u32>,
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    pub stop: Vec<String>,
    /// Reference documents for reference drafting (retrieved passages, the text to edit).
    pub references: Vec<Vec<u32>>,
    /// Most draft nodes per step (0: plain decoding).
    pub max_draft: usize,
}

impl GenerateRequest {
    pub fn new(prompt: Vec<u32>, max_tokens: usize) -> Self {
        GenerateRequest {
            prompt,
            max_tokens,
            sampling: SamplingParams::default(),
            stop: Vec::new(),
            references: Vec::new(),
            max_draft: 32,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-generation token or a stop string.
    Stop,
    /// `max_tokens` reached.
    Length,
    /// The caller's sink asked to stop (client gone).
    Cancelled,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Cancelled => "cancelled",
        }
    }
}

#[derive(Clone, Debug)]
pub struct GenerateOutput {
    pub token_ids: Vec<u32>,
    pub text: String,
    pub prompt_tokens: usize,
    /// Prompt tokens whose KV cache was reused from an earlier request (not prefilled).
    pub cached_prompt_tokens: usize,
    pub completion_tokens: usize,
    /// Target-model forwards, prefill included.
    pub forward_passes: usize,
    pub prefill_time: Duration,
    pub elapsed: Duration,
    pub finish_reason: FinishReason,
    pub spec: SpecStats,
}

/// Runs requests on one model.
pub struct Engine<'m> {
    model: &'m Model,
    tokenizer: &'m Tokenizer,
    cost: std::sync::Mutex<CostModel>,
    prefix_cache: Option<std::sync::Mutex<PrefixCache>>,
    acceptance: std::sync::Mutex<AcceptanceMemories>,
}

impl<'m> Engine<'m> {
    pub fn new(model: &'m Model, tokenizer: &'m Tokenizer) -> Self {
        Engine {
            model,
            tokenizer,
            cost: std::sync::Mutex::new(CostModel::default()),
            prefix_cache: None,
            acceptance: std::sync::Mutex::new(AcceptanceMemories::default()),
        }
    }

    /// Keeps finished requests' caches (up to `max_bytes`) for later requests that share
    /// a prefix with them; see [`PrefixCache`].
    pub fn with_prefix_cache(mut self, max_bytes: usize) -> Self {
        self.prefix_cache = Some(std::sync::Mutex::new(PrefixCache::new(max_bytes)));
        self
    }

    /// (requests that reused a cached prefix, tokens reused), when the cache is on.
    pub fn prefix_cache_stats(&self) -> Option<(u64, u64)> {
        let c = self.prefix_cache.as_ref()?;
        Some(c.lock().unwrap_or_else(PoisonError::into_inner).stats())
    }

    /// Ends a generation and returns what it produced; its cache goes to the prefix
    /// cache.
    pub fn finish(&self, g: Generation<'_>) -> GenerateOutput {
        let (out, seq, learned) = g.into_parts(self.tokenizer);
        if let Some((name, policy)) = learned {
            self.acceptance
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .learn(name, &policy);
        }
        if let Some(c) = &self.prefix_cache {
            c.lock().unwrap_or_else(PoisonError::into_inner).insert(seq);
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
        let limit = self.model.config().context_length;
        // Drafts never push past this: each step caps its tree by the room left.
        let needed = req.prompt.len() + req.max_tokens;
        if needed > limit {
            return Err(EngineError::ContextOverflow {
                prompt: req.prompt.len(),
                max_tokens: req.max_tokens,
                limit,
            });
        }
        Ok(())
    }

    /// Starts a request; advance it with [`Engine::step`] until it is finished.
    pub fn start<'a>(
        &self,
        req: GenerateRequest,
        drafter: Option<Box<dyn Drafter + 'a>>,
        sink: Sink<'a>,
    ) -> Result<Generation<'a>, EngineError> {
        self.check(&req)?;
        // The last prompt token is evaluated by the first decode step, never cached.
        let head = &req.prompt[..req.prompt.len() - 1];
        let seq = self
            .prefix_cache
            .as_ref()
            .and_then(|c| {
                c.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .lookup(head)
            })
            .unwrap_or_else(|| self.model.new_sequence());
        let policy = self
            .acceptance
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .policy(drafter.as_ref().map_or("", |d| d.name()), req.max_draft);
        Ok(Generation::new(req, seq, drafter, sink, policy))
    }

    /// Runs one forward for every unfinished generation of `batch` together: a prefill
    /// chunk for those still reading their prompt, a verify step for the others.
    /// Batching never changes a generation's tokens (the runtime is batch-invariant).
    pub fn step(&self, batch: &mut [&mut Generation<'_>]) -> Result<(), EngineError> {
        let mut load = BatchLoad::default();
        let mut nodes = Vec::with_capacity(batch.len());
        {
            let cost = self.cost.lock().unwrap_or_else(PoisonError::into_inner);
            for g in batch.iter_mut() {
                nodes.push(g.plan(&cost, &mut load));
            }
        }
        let timed = batch
            .iter()
            .zip(&nodes)
            .all(|(g, n)| n.is_none() || matches!(g.want(), Want::All));
        let t0 = Instant::now();
        let mut inputs = Vec::with_capacity(batch.len());
        for (g, n) in batch.iter_mut().zip(&nodes) {
            if let Some(n) = n {
                let want = g.want();
                inputs.push(SeqInput {
                    seq: g.seq_mut(),
                    nodes: n,
                    want,
                });
            }
        }
        if inputs.is_empty() {
            return Ok(());
        }
        let logits = self.model.forward(&mut inputs)?;
        drop(inputs);
        if timed {
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            self.cost
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .observe(load.rows, load.mean_ctx(), ms);
        }
        let members = batch.iter_mut().zip(&nodes).filter(|(_, n)| n.is_some());
        for ((g, _), l) in members.zip(&logits) {
            g.apply(self.tokenizer, l)?;
        }
        Ok(())
    }

    /// Generates with an optional drafter; `sink` receives text as it becomes final and
    /// returns `false` to cancel. With or without a drafter the tokens are the same.
    pub fn generate(
        &self,
        req: &GenerateRequest,
        drafter: Option<&mut (dyn Drafter + 'static)>,
        sink: &mut dyn FnMut(&str) -> bool,
    ) -> Result<GenerateOutput, EngineError> {
        let drafter = drafter.map(|d| Box::new(d) as Box<dyn Drafter + '_>);
        let mut g = self.start(req.clone(), drafter, Box::new(sink))?;
        while !g.is_finished() {
            self.step(&mut [&mut g])?;
        }
        Ok(self.finish(g))
    }
}
