//! The generation loop.
//!
//! The last emitted token is *pending*: it is not in the cache yet, and the next forward
//! evaluates it to get the following distribution. A step therefore always forwards
//! `[pending]` (plus, with speculation, the draft tree hanging from it).

use std::time::{Duration, Instant};

use specdec_runtime::{Model, Node, SeqInput, Sequence, Want};
use specdec_tokenizer::{StreamDecoder, Tokenizer};

use crate::rng::Rng;
use crate::sampling::{sample, SamplingParams};
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
}

/// Runs requests on one model.
pub struct Engine<'m> {
    model: &'m Model,
    tokenizer: &'m Tokenizer,
}

impl<'m> Engine<'m> {
    pub fn new(model: &'m Model, tokenizer: &'m Tokenizer) -> Self {
        Engine { model, tokenizer }
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

    /// Generates; `sink` receives text as it becomes final and returns `false` to cancel.
    pub fn generate(
        &self,
        req: &GenerateRequest,
        sink: &mut dyn FnMut(&str) -> bool,
    ) -> Result<GenerateOutput, EngineError> {
        self.check(req)?;
        let start = Instant::now();
        let mut seq = self.model.new_sequence();
        let mut forwards = 0;
        let mut logits = self.prefill(&mut seq, &req.prompt, &mut forwards)?;
        let prefill_time = start.elapsed();
        let mut rng = Rng::new(req.sampling.seed);
        let mut context = req.prompt.clone();
        let mut out = Vec::new();
        let mut text = String::new();
        let mut decoder = StreamDecoder::new(true);
        let mut stops = StopMatcher::new(req.stop.clone());
        let stop_ids = self.tokenizer.stop_ids();
        let mut stopped_by_string = false;
        let finish = loop {
            if out.len() >= req.max_tokens {
                break FinishReason::Length;
            }
            let u = rng.next_f64();
            let token = sample(&logits, &context, &req.sampling, u);
            if stop_ids.contains(&token) {
                break FinishReason::Stop;
            }
            out.push(token);
            context.push(token);
            let piece = decoder.push(self.tokenizer, token);
            match stops.push(&piece) {
                StopEvent::Text(t) => {
                    text.push_str(&t);
                    if !t.is_empty() && !sink(&t) {
                        break FinishReason::Cancelled;
                    }
                }
                StopEvent::Stopped(t) => {
                    text.push_str(&t);
                    if !t.is_empty() {
                        sink(&t);
                    }
                    stopped_by_string = true;
                    break FinishReason::Stop;
                }
            }
            if out.len() >= req.max_tokens {
                break FinishReason::Length;
            }
            logits = self.step(&mut seq, token)?;
            forwards += 1;
        };
        if !stopped_by_string {
            // Bytes of an unfinished character and text held back for a possible stop
            // string are final now.
            let tail = decoder.finish(self.tokenizer);
            let tail = match stops.push(&tail) {
                StopEvent::Text(t) => t + &stops.finish(),
                StopEvent::Stopped(t) => t,
            };
            if !tail.is_empty() && finish != FinishReason::Cancelled {
                sink(&tail);
            }
            text.push_str(&tail);
        }
        Ok(GenerateOutput {
            completion_tokens: out.len(),
            token_ids: out,
            text,
            prompt_tokens: req.prompt.len(),
            forward_passes: forwards,
            prefill_time,
            elapsed: start.elapsed(),
            finish_reason: finish,
        })
    }

    /// Evaluates the prompt and returns the logits after its last token.
    pub fn prefill(
        &self,
        seq: &mut Sequence,
        prompt: &[u32],
        forwards: &mut usize,
    ) -> Result<Vec<f32>, EngineError> {
        let chunks: Vec<&[u32]> = prompt.chunks(PREFILL_CHUNK).collect();
        let mut last = Vec::new();
        for (i, chunk) in chunks.iter().enumerate() {
            let nodes = Node::chain(chunk);
            let want = if i + 1 == chunks.len() {
                Want::Last
            } else {
                Want::None
            };
            let mut input = [SeqInput {
                seq: &mut *seq,
                nodes: &nodes,
                want,
            }];
            let mut logits = self.model.forward(&mut input)?;
            *forwards += 1;
            seq.commit_all()?;
            if i + 1 == chunks.len() {
                last = logits.remove(0).row(0).to_vec();
            }
        }
        Ok(last)
    }

    /// Evaluates one token after the committed prefix, commits it, returns its logits.
    pub fn step(&self, seq: &mut Sequence, token: u32) -> Result<Vec<f32>, EngineError> {
        let nodes = [Node {
            token,
            parent: None,
        }];
        let mut input = [SeqInput {
            seq: &mut *seq,
            nodes: &nodes,
            want: Want::Last,
        }];
        let logits = self.model.forward(&mut input)?;
        seq.commit_all()?;
        Ok(logits[0].row(0).to_vec())
    }
}
