//! Reading prompts into the target's and the draft's caches, in chunks: a search's
//! prompt shares the scheduler's forwards with chats a chunk at a time, so a long history
//! never holds their next tokens back for a whole prefill. Run alone, a prefill is one
//! chunk per prompt.

use super::*;

/// Prompts prefilled on the target (and the draft): each search forks them.
pub struct Prefilled {
    pub(super) prompts: Vec<Vec<u32>>,
    pub(super) target: Vec<Side>,
    pub(super) target_ms: f64,
    pub(super) draft: Option<(Vec<Side>, f64)>,
}

impl Prefilled {
    /// Milliseconds the prefill took on the target, and on the draft when it ran there.
    pub fn ms(&self) -> (f64, Option<f64>) {
        (self.target_ms, self.draft.as_ref().map(|d| d.1))
    }
}

/// Prompts being read into one model's caches, a chunk per forward.
pub(crate) struct Chunked {
    seqs: Vec<Sequence>,
    /// Per prompt, tokens in its cache.
    done: Vec<usize>,
    /// Per prompt, the tokens it reads: all of it, or all but its last with `hold_last`.
    ends: Vec<usize>,
    hold_last: bool,
    /// Per prompt, this forward's chunk (empty: nothing this forward).
    chunks: Vec<Vec<Node>>,
    /// Per prompt, its side once read.
    sides: Vec<Option<Side>>,
}

impl Chunked {
    /// Each prompt's side on `model`: its cache holds the prompt and its next token's
    /// logits are known, or with `hold_last` the cache holds all but the last token, left
    /// pending (a catalogue-scored draft's next row needs the catalogue, which a prefill
    /// does not know).
    pub fn new(model: &dyn Target, prompts: &[Vec<u32>], hold_last: bool) -> Self {
        let held = usize::from(hold_last);
        let n = prompts.len();
        let mut c = Chunked {
            seqs: (0..n).map(|_| model.new_sequence()).collect(),
            done: vec![0; n],
            ends: prompts.iter().map(|p| p.len() - held).collect(),
            hold_last,
            chunks: vec![Vec::new(); n],
            sides: vec![None; n],
        };
        for (i, p) in prompts.iter().enumerate() {
            // A held one-token prompt has nothing to read.
            if c.ends[i] == 0 {
                c.sides[i] = Some(Side::new(c.seqs[i].fork(), vec![p[0]]));
            }
        }
        c
    }

    /// Whether every prompt is read.
    pub fn is_done(&self) -> bool {
        self.sides.iter().all(Option::is_some)
    }

    /// Plans the next forward: up to `max` tokens of each prompt not yet read.
    pub fn plan(&mut self, prompts: &[Vec<u32>], max: usize) {
        for (i, p) in prompts.iter().enumerate() {
            self.chunks[i].clear();
            if self.sides[i].is_some() {
                continue;
            }
            let end = self.ends[i].min(self.done[i].saturating_add(max));
            self.chunks[i] = Node::chain(&p[self.done[i]..end]);
        }
    }

    /// Rows and summed context of the planned forward.
    pub fn load(&self) -> (usize, usize) {
        self.chunks
            .iter()
            .zip(&self.done)
            .filter(|(c, _)| !c.is_empty())
            .fold((0, 0), |(r, x), (c, &d)| {
                (r + c.len(), x + c.len() * (d + c.len() / 2))
            })
    }

    /// The planned forward's inputs, in prompt order.
    pub fn inputs(&mut self) -> Vec<SeqInput<'_>> {
        let mut inputs = Vec::new();
        for (i, (seq, nodes)) in self.seqs.iter_mut().zip(&self.chunks).enumerate() {
            if nodes.is_empty() {
                continue;
            }
            let last = self.done[i] + nodes.len() == self.ends[i];
            let want = if last && !self.hold_last {
                Want::Last
            } else {
                Want::None
            };
            inputs.push(SeqInput { seq, nodes, want });
        }
        inputs
    }

    /// Commits the planned forward, whose `logits` are in the order of [`Chunked::inputs`].
    pub fn absorb(&mut self, prompts: &[Vec<u32>], logits: &[Logits]) -> Result<(), EngineError> {
        let mut logits = logits.iter();
        for (i, p) in prompts.iter().enumerate() {
            let n = self.chunks[i].len();
            if n == 0 {
                continue;
            }
            let l = logits.next().expect("a logits per input");
            self.seqs[i].commit_all()?;
            self.done[i] += n;
            self.chunks[i].clear();
            if self.done[i] < self.ends[i] {
                continue;
            }
            let seq = self.seqs[i].fork();
            self.sides[i] = Some(if self.hold_last {
                Side::new(seq, vec![p[p.len() - 1]])
            } else {
                let mut side = Side::new(seq, Vec::new());
                side.ahead.push_back(Row::new(l, n - 1));
                side
            });
        }
        Ok(())
    }

    /// Every prompt's side; call once [`Chunked::is_done`].
    pub fn into_sides(self) -> Vec<Side> {
        self.sides
            .into_iter()
            .map(|s| s.expect("every prompt was read"))
            .collect()
    }

    /// Reads every prompt on `model` alone, one forward per `max` tokens.
    pub fn run(
        mut self,
        model: &dyn Target,
        prompts: &[Vec<u32>],
        max: usize,
    ) -> Result<Vec<Side>, EngineError> {
        while !self.is_done() {
            self.plan(prompts, max);
            let logits = model.forward(&mut self.inputs())?;
            self.absorb(prompts, &logits)?;
        }
        Ok(self.into_sides())
    }
}

impl BeamRunner<'_> {
    /// Every prompt through the target, and through the draft too with `draft`, in one
    /// forward each: what [`run_prefilled`](Self::run_prefilled) searches from, as often
    /// as asked (an evaluation compares modes from one prefill).
    pub fn prefill(&mut self, prompts: &[Vec<u32>], draft: bool) -> Result<Prefilled, EngineError> {
        if prompts.iter().any(|p| p.is_empty()) {
            return Err(EngineError::InvalidRequest(
                "a prompt needs at least one token".into(),
            ));
        }
        let started = Instant::now();
        let target =
            Chunked::new(self.target, prompts, false).run(self.target, prompts, usize::MAX)?;
        let target_ms = started.elapsed().as_secs_f64() * 1e3;
        let drafted = match (draft, self.draft) {
            (true, Some(d)) => Some(self.prefill_draft_sides(d, prompts)?),
            (true, None) => {
                return Err(EngineError::InvalidRequest(
                    "speculative beam search needs a draft model".into(),
                ))
            }
            (false, _) => None,
        };
        Ok(Prefilled {
            prompts: prompts.to_vec(),
            target,
            target_ms,
            draft: drafted,
        })
    }

    /// `pre`'s target caches with this runner's draft prefilled beside them, so one
    /// target prefill serves runners that speculate with different drafts.
    pub fn prefill_draft(&mut self, pre: &Prefilled) -> Result<Prefilled, EngineError> {
        let d = self.draft.ok_or_else(|| {
            EngineError::InvalidRequest("speculative beam search needs a draft model".into())
        })?;
        Ok(Prefilled {
            prompts: pre.prompts.clone(),
            target: pre.target.clone(),
            target_ms: pre.target_ms,
            draft: Some(self.prefill_draft_sides(d, &pre.prompts)?),
        })
    }

    /// The prompts prefilled on the draft, and the milliseconds it took.
    fn prefill_draft_sides(
        &self,
        draft: &dyn Target,
        prompts: &[Vec<u32>],
    ) -> Result<(Vec<Side>, f64), EngineError> {
        let started = Instant::now();
        let sides = self
            .draft_prefill(draft, prompts)
            .run(draft, prompts, usize::MAX)?;
        Ok((sides, started.elapsed().as_secs_f64() * 1e3))
    }

    /// The prompts' prefill on the draft, as its scoring reads it.
    pub(super) fn draft_prefill(&self, draft: &dyn Target, prompts: &[Vec<u32>]) -> Chunked {
        let hold = self.draft_scoring == DraftScoring::Catalogue;
        Chunked::new(draft, prompts, hold)
    }
}
