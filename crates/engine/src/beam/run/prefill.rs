//! Prefilling prompts on the target and the draft: what every search forks.

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
        let target = prefill_on(self.target, prompts, false)?;
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
    pub(super) fn prefill_draft_sides(
        &self,
        draft: &dyn Target,
        prompts: &[Vec<u32>],
    ) -> Result<(Vec<Side>, f64), EngineError> {
        let started = Instant::now();
        // A catalogue-scored draft's next row needs the catalogue, which a prefill does
        // not know: its prompts' last tokens wait for the first draft step.
        let hold = self.draft_scoring == DraftScoring::Catalogue;
        let sides = prefill_on(draft, prompts, hold)?;
        Ok((sides, started.elapsed().as_secs_f64() * 1e3))
    }
}

/// Prefills each prompt as one chain on `model`; each side's cache holds its prompt and
/// the next token's logits are known, or with `hold_last` the cache holds all but the
/// last token, left pending (no logits computed). (Not timed: a prefill's cost says
/// nothing about a round's.)
pub(super) fn prefill_on(
    model: &dyn Target,
    prompts: &[Vec<u32>],
    hold_last: bool,
) -> Result<Vec<Side>, EngineError> {
    let mut seqs: Vec<_> = prompts.iter().map(|_| model.new_sequence()).collect();
    let held = usize::from(hold_last);
    let chains: Vec<Vec<Node>> = prompts
        .iter()
        .map(|p| Node::chain(&p[..p.len() - held]))
        .collect();
    let want = if hold_last { Want::None } else { Want::Last };
    let logits = {
        // (Only a held one-token prompt has no chain: nothing to run for it.)
        let mut inputs: Vec<SeqInput<'_>> = seqs
            .iter_mut()
            .zip(&chains)
            .filter(|(_, nodes)| !nodes.is_empty())
            .map(|(seq, nodes)| SeqInput {
                seq,
                nodes,
                want: want.clone(),
            })
            .collect();
        if inputs.is_empty() {
            Vec::new()
        } else {
            model.forward(&mut inputs)?
        }
    };
    if hold_last {
        return seqs
            .into_iter()
            .zip(prompts)
            .map(|(mut seq, p)| {
                if p.len() > 1 {
                    seq.commit_all()?;
                }
                Ok(Side::new(seq, vec![p[p.len() - 1]]))
            })
            .collect();
    }
    seqs.into_iter()
        .zip(logits)
        .zip(prompts)
        .map(|((mut seq, l), p)| {
            seq.commit_all()?;
            let mut side = Side::new(seq, Vec::new());
            side.ahead.push_back(Row::new(&l, p.len() - 1));
            Ok(side)
        })
        .collect()
}
