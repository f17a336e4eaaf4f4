//! The generation loop, plain or speculative: one loop, plain being a zero-size draft.
//!
//! The last emitted token is *pending*: it is not in the cache yet. Each step forwards
//! `[pending] + draft tree`, verifies the tree against the target's choices, commits the
//! pending token and the accepted path, and the bonus token becomes the new pending one.

use std::time::{Duration, Instant};

use specdec_drafters::{DraftTree, Drafter};
use specdec_runtime::{Model, Node, SeqInput, Sequence, Want};
use specdec_tokenizer::{StreamDecoder, Tokenizer};
use specdec_verify::{verify_strict, Rng, SamplingParams, VerifyTree};

use crate::budget::{BudgetPolicy, CostModel};
use crate::stats::SpecStats;
use crate::stop::{StopEvent, StopMatcher};
use crate::EngineError;

/// Prompt tokens evaluated per forward during prefill; any size gives the same bits.
const PREFILL_CHUNK: usize = 128;

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
}

/// Text-side state of one request: decoding, stop strings and the sink.
struct Output<'s> {
    tokens: Vec<u32>,
    text: String,
    decoder: StreamDecoder,
    stops: StopMatcher,
    stopped_by_string: bool,
    sink: &'s mut dyn FnMut(&str) -> bool,
}

impl Output<'_> {
    /// Emits one token; `Some` when generation must end.
    fn push(&mut self, tok: &Tokenizer, token: u32, max: usize) -> Option<FinishReason> {
        if tok.stop_ids().contains(&token) {
            return Some(FinishReason::Stop);
        }
        self.tokens.push(token);
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
        (self.tokens.len() >= max).then_some(FinishReason::Length)
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

impl<'m> Engine<'m> {
    pub fn new(model: &'m Model, tokenizer: &'m Tokenizer) -> Self {
        Engine {
            model,
            tokenizer,
            cost: std::sync::Mutex::new(CostModel::default()),
        }
    }

    pub fn model(&self) -> &Model {
        self.model
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        self.tokenizer
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

    /// Generates with an optional drafter; `sink` receives text as it becomes final and
    /// returns `false` to cancel. With or without a drafter the tokens are the same.
    pub fn generate(
        &self,
        req: &GenerateRequest,
        mut drafter: Option<&mut (dyn Drafter + 'static)>,
        sink: &mut dyn FnMut(&str) -> bool,
    ) -> Result<GenerateOutput, EngineError> {
        self.check(req)?;
        let start = Instant::now();
        let mut seq = self.model.new_sequence();
        let mut forwards = 0;
        let (&last, head) = req.prompt.split_last().expect("checked non-empty");
        self.prefill(&mut seq, head, &mut forwards)?;
        let prefill_time = start.elapsed();
        if let Some(d) = drafter.as_deref_mut() {
            d.begin(&req.prompt, &req.references);
        }
        let mut rng = Rng::new(req.sampling.seed);
        let mut policy = BudgetPolicy::new(req.max_draft);
        let mut stats = SpecStats::default();
        let mut context = req.prompt.clone();
        let mut out = Output {
            tokens: Vec::new(),
            text: String::new(),
            decoder: StreamDecoder::new(true),
            stops: StopMatcher::new(req.stop.clone()),
            stopped_by_string: false,
            sink,
        };
        let mut pending = last;
        let finish = if req.max_tokens == 0 {
            FinishReason::Length
        } else {
            loop {
                let remaining = req.max_tokens - out.tokens.len();
                let room = self.model.config().context_length - seq.len();
                let cap = policy.cap(remaining).min(room.saturating_sub(1));
                let tree = match drafter.as_deref_mut() {
                    Some(d) if cap > 0 => {
                        let cost = self.cost.lock().unwrap_or_else(|e| e.into_inner());
                        policy.trim(trimmed(d.draft(&context, cap), cap), &cost)
                    }
                    _ => DraftTree::default(),
                };
                let (tokens, parents) = flatten(pending, &tree);
                let t0 = Instant::now();
                let logits = self.forward_tree(&mut seq, &tokens, &parents)?;
                let ms = t0.elapsed().as_secs_f64() * 1e3;
                forwards += 1;
                self.cost
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .observe(tokens.len(), ms);
                let vt = VerifyTree {
                    tokens: &tokens,
                    parents: &parents,
                };
                let verdict =
                    verify_strict(&vt, |i| logits.row(i), &context, &req.sampling, &mut rng);
                let mut path = vec![0];
                path.extend(&verdict.accepted);
                seq.commit(&path)?;
                let draft_accepted: Vec<usize> = verdict.accepted.iter().map(|&i| i - 1).collect();
                stats.record(&tree, &draft_accepted);
                policy.observe(&tree, &draft_accepted);
                let emitted = verdict.emitted(&vt);
                let mut done = None;
                let mut committed = 0;
                for &t in &emitted {
                    done = out.push(self.tokenizer, t, req.max_tokens);
                    if done == Some(FinishReason::Stop) && !out.stopped_by_string {
                        break; // a stop token is not part of the output
                    }
                    context.push(t);
                    committed += 1;
                    if done.is_some() {
                        break;
                    }
                }
                if let Some(d) = drafter.as_deref_mut() {
                    d.observe(&emitted[..committed]);
                }
                if let Some(reason) = done {
                    break reason;
                }
                pending = verdict.bonus;
            }
        };
        out.finish(self.tokenizer, finish);
        if let Some(d) = drafter {
            d.end(&out.tokens);
        }
        Ok(GenerateOutput {
            completion_tokens: out.tokens.len(),
            token_ids: out.tokens,
            text: out.text,
            prompt_tokens: req.prompt.len(),
            forward_passes: forwards,
            prefill_time,
            elapsed: start.elapsed(),
            finish_reason: finish,
            spec: stats,
        })
    }

    /// Commits `prompt` to the cache in chunks (no logits needed).
    fn prefill(
        &self,
        seq: &mut Sequence,
        prompt: &[u32],
        forwards: &mut usize,
    ) -> Result<(), EngineError> {
        for chunk in prompt.chunks(PREFILL_CHUNK) {
            let nodes = Node::chain(chunk);
            self.model.forward(&mut [SeqInput {
                seq: &mut *seq,
                nodes: &nodes,
                want: Want::None,
            }])?;
            *forwards += 1;
            seq.commit_all()?;
        }
        Ok(())
    }

    fn forward_tree(
        &self,
        seq: &mut Sequence,
        tokens: &[u32],
        parents: &[Option<u32>],
    ) -> Result<specdec_runtime::Logits, EngineError> {
        let nodes: Vec<Node> = tokens
            .iter()
            .zip(parents)
            .map(|(&token, &parent)| Node { token, parent })
            .collect();
        let mut logits = self.model.forward(&mut [SeqInput {
            seq,
            nodes: &nodes,
            want: Want::All,
        }])?;
        Ok(logits.remove(0))
    }
}

/// Node 0 is the pending token; draft node i becomes node i + 1.
fn flatten(pending: u32, tree: &DraftTree) -> (Vec<u32>, Vec<Option<u32>>) {
    let mut tokens = Vec::with_capacity(tree.len() + 1);
    let mut parents = Vec::with_capacity(tree.len() + 1);
    tokens.push(pending);
    parents.push(None);
    for n in &tree.nodes {
        tokens.push(n.token);
        parents.push(Some(n.parent.map_or(0, |p| p + 1)));
    }
    (tokens, parents)
}

/// A drafter's tree cut to `budget` nodes; DFS order keeps every kept node's parent.
fn trimmed(mut tree: DraftTree, budget: usize) -> DraftTree {
    tree.nodes.truncate(budget);
    tree
}
