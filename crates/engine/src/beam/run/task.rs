//! A beam search as a scheduler task: the search loop cut at its target forwards. Each
//! scheduler step the runner prepares the task (a prompt chunk, or a round's drafting and
//! trees), the task's rows join the step's one forward beside the chats', and the runner
//! finishes the round on their logits. The same rounds as [`BeamRunner::run`], so the
//! lists are the same, bit for bit.

use std::sync::Arc;

use super::prefill::Chunked;
use super::*;
use crate::generation::PREFILL_CHUNK;

/// One request's beam searches (one per prompt), advanced a forward at a time.
pub struct BeamTask {
    cat: Arc<Catalogue>,
    opts: BeamOptions,
    prompts: Vec<Vec<u32>>,
    stage: Stage,
}

enum Stage {
    /// The prompts being read, a chunk per step (the draft's beside the target's).
    Prefill {
        target: Chunked,
        draft: Option<Chunked>,
        target_ms: f64,
        draft_ms: f64,
    },
    /// Rounds; `round` is the one prepared for this step's forward.
    Search {
        searches: Vec<Search>,
        round: Option<Round>,
    },
    Done(Vec<BeamOutput>),
    Taken,
}

impl BeamTask {
    /// Whether every search of the task is done (its output waits in
    /// [`BeamTask::take_output`]).
    pub fn is_done(&self) -> bool {
        matches!(self.stage, Stage::Done(_) | Stage::Taken)
    }

    /// The K best entries after each prompt, best first, once done.
    pub fn take_output(&mut self) -> Option<Vec<BeamOutput>> {
        match std::mem::replace(&mut self.stage, Stage::Taken) {
            Stage::Done(out) => Some(out),
            other => {
                self.stage = other;
                None
            }
        }
    }

    /// The options searched with.
    pub fn options(&self) -> &BeamOptions {
        &self.opts
    }

    /// This step's target inputs, up to `budget` rows (with any budget, at least one tree
    /// or prompt token, so the task advances): a prompt chunk, or the prepared round's
    /// next trees. With their rows and summed context.
    pub(crate) fn inputs(&mut self, budget: usize) -> (Vec<SeqInput<'_>>, (usize, usize)) {
        match &mut self.stage {
            Stage::Prefill { target, .. } => {
                target.plan(&self.prompts, budget.min(PREFILL_CHUNK));
                let load = target.load();
                (target.inputs(), load)
            }
            Stage::Search {
                searches,
                round: Some(round),
            } => round_inputs(searches.iter_mut().filter(|s| !s.is_done()), round, budget),
            _ => (Vec::new(), (0, 0)),
        }
    }
}

impl BeamRunner<'_> {
    /// A task searching the K best entries of `cat` after each prompt; the request is
    /// checked here, before any work.
    pub fn begin(
        &self,
        cat: Arc<Catalogue>,
        prompts: Vec<Vec<u32>>,
        opts: BeamOptions,
    ) -> Result<BeamTask, EngineError> {
        self.check(&cat, &prompts, &opts)?;
        let target = Chunked::new(self.target, &prompts, false);
        let draft = match (&opts.draft, self.draft) {
            (Some(_), Some(d)) => Some(self.draft_prefill(d, &prompts)),
            _ => None,
        };
        Ok(BeamTask {
            cat,
            opts,
            prompts,
            stage: Stage::Prefill {
                target,
                draft,
                target_ms: 0.0,
                draft_ms: 0.0,
            },
        })
    }

    /// Prepares the task's share of the next forward: the draft's next prompt chunk (run
    /// here, on the draft), or, once the last round is verified, the next round's
    /// drafting and trees of at most `max_nodes` nodes each beyond the beams' pending
    /// tokens, priced on `cost`. (A round whose trees did not all fit the last forward
    /// keeps sending them.)
    pub(crate) fn prepare(
        &mut self,
        cost: &CostModel,
        task: &mut BeamTask,
        max_nodes: usize,
    ) -> Result<(), EngineError> {
        match &mut task.stage {
            Stage::Prefill {
                draft, draft_ms, ..
            } => {
                if let (Some(chunks), Some(model)) = (draft.as_mut(), self.draft) {
                    if !chunks.is_done() {
                        let started = Instant::now();
                        chunks.plan(&task.prompts, PREFILL_CHUNK);
                        let logits = model.forward(&mut chunks.inputs())?;
                        chunks.absorb(&task.prompts, &logits)?;
                        *draft_ms += started.elapsed().as_secs_f64() * 1e3;
                    }
                }
                Ok(())
            }
            Stage::Search { searches, round } => {
                if round.is_none() {
                    let mut active: Vec<&mut Search> =
                        searches.iter_mut().filter(|s| !s.is_done()).collect();
                    *round = Some(self.prepare_round(cost, &task.cat, &mut active, max_nodes)?);
                }
                Ok(())
            }
            Stage::Done(_) | Stage::Taken => Ok(()),
        }
    }

    /// Takes in the forward's `logits` for the task's inputs (in their order) and `ms`,
    /// the forward's wall time.
    pub(crate) fn absorb(
        &mut self,
        cost: &CostModel,
        task: &mut BeamTask,
        logits: Vec<Logits>,
        ms: f64,
    ) -> Result<(), EngineError> {
        match &mut task.stage {
            Stage::Prefill {
                target, target_ms, ..
            } => {
                target.absorb(&task.prompts, &logits)?;
                *target_ms += ms;
                self.maybe_start(task)
            }
            Stage::Search { searches, round } => {
                let mut active: Vec<&mut Search> =
                    searches.iter_mut().filter(|s| !s.is_done()).collect();
                let Some(r) = round.as_mut() else {
                    return Ok(());
                };
                take_logits(&mut active, r, logits, ms);
                if !r.is_forwarded() {
                    return Ok(());
                }
                let r = round.take().expect("checked above");
                self.finish_round(cost, &task.cat, &mut active, r)?;
                if searches.iter().all(Search::is_done) {
                    let searches = std::mem::take(searches);
                    for s in &searches {
                        self.observe(s);
                    }
                    task.stage =
                        Stage::Done(searches.into_iter().map(Search::into_output).collect());
                }
                Ok(())
            }
            Stage::Done(_) | Stage::Taken => Ok(()),
        }
    }

    /// Once both models read the prompts, the searches start from them.
    fn maybe_start(&mut self, task: &mut BeamTask) -> Result<(), EngineError> {
        let Stage::Prefill { target, draft, .. } = &task.stage else {
            return Ok(());
        };
        if !target.is_done() || draft.as_ref().is_some_and(|d| !d.is_done()) {
            return Ok(());
        }
        let Stage::Prefill {
            target,
            draft,
            target_ms,
            draft_ms,
        } = std::mem::replace(&mut task.stage, Stage::Taken)
        else {
            unreachable!("matched above")
        };
        let pre = Prefilled {
            prompts: std::mem::take(&mut task.prompts),
            target: target.into_sides(),
            target_ms,
            draft: draft.map(|d| (d.into_sides(), draft_ms)),
        };
        let searches = self.searches(&pre, &task.opts)?;
        task.prompts = pre.prompts;
        task.stage = Stage::Search {
            searches,
            round: None,
        };
        Ok(())
    }
}
