//! The forward cost curve: what one forward over n tree nodes costs after a prefix of
//! committed tokens, measured on the loaded model. Shared by `bench verify-cost`, the
//! roofline, workload runs and `rec bench`.

use std::time::Instant;

use specdec_engine::budget::{curve_ms, is_curve};
use specdec_runtime::{Node, SeqInput, Sequence, Target, Want};
use specdec_tokenizer::Tokenizer;

use crate::BenchError;

/// The node counts a cost curve is measured at unless the caller names others.
pub const SIZES: [usize; 7] = [1, 2, 4, 8, 16, 32, 64];
/// Untimed forwards of the same size before each timed one. Decoding runs forwards of
/// similar sizes back to back; a forward timed right after a much larger one is slower
/// (about 10% at n = 1 after n = 64 here), which made the curve look flatter than what
/// decoding pays.
const SETTLE: usize = 2;

/// The median of `v` (the upper one of an even count).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The forward cost curve: milliseconds of one forward over n = 1, 2, 4, ..., 64 chained
/// nodes after `prefix` committed tokens (median of `repeats` interleaved timings).
pub fn cost_curve(
    model: &dyn Target,
    tokenizer: &Tokenizer,
    repeats: usize,
    prefix: usize,
) -> Result<CostCurve, BenchError> {
    cost_curve_at(model, tokenizer, repeats, prefix, &SIZES)
}

/// [`cost_curve`] at the node counts `sizes` (ascending, starting at 1, so that ratios
/// to one node can be read off it).
pub fn cost_curve_at(
    model: &dyn Target,
    tokenizer: &Tokenizer,
    repeats: usize,
    prefix: usize,
    sizes: &[usize],
) -> Result<CostCurve, BenchError> {
    if sizes.first() != Some(&1) || !sizes.windows(2).all(|w| w[0] < w[1]) {
        return Err(BenchError::Setup(format!(
            "node counts must ascend from 1, got {sizes:?}"
        )));
    }
    let max = *sizes.last().expect("sizes");
    let (mut seq, tokens) = prefilled(model, tokenizer, prefix, max)?;
    let mut times = vec![Vec::new(); sizes.len()];
    // One untimed round warms caches and the thread pool.
    for round in 0..repeats.max(1) + 1 {
        for (i, &n) in sizes.iter().enumerate() {
            let nodes = Node::chain(&tokens[prefix..prefix + n]);
            for settle in (0..=SETTLE).rev() {
                let t = Instant::now();
                model.forward(&mut [SeqInput {
                    seq: &mut seq,
                    nodes: &nodes,
                    want: Want::All,
                }])?;
                if round > 0 && settle == 0 {
                    times[i].push(t.elapsed().as_secs_f64() * 1e3);
                }
            }
        }
    }
    Ok(CostCurve(
        sizes
            .iter()
            .zip(times)
            .map(|(&n, t)| (n, median(t)))
            .collect(),
    ))
}

/// A sequence holding `prefix` committed tokens of a real passage, and the passage's
/// tokens (repeated as often as needed) for `prefix + extra` positions, the rest to feed
/// as nodes.
pub fn prefilled(
    model: &dyn Target,
    tokenizer: &Tokenizer,
    prefix: usize,
    extra: usize,
) -> Result<(Sequence, Vec<u32>), BenchError> {
    let limit = model.config().context_length;
    if prefix + extra > limit {
        return Err(BenchError::Setup(format!(
            "--prefix {prefix} plus {extra} nodes exceeds the model's context ({limit})"
        )));
    }
    // A real passage, repeated as often as the prefix needs (cost does not depend on
    // which tokens they are).
    let text = include_str!("../../../data/passage.txt");
    let one = tokenizer.encode(text, false)?;
    if one.is_empty() {
        return Err(BenchError::Setup("the passage has no tokens".into()));
    }
    let tokens: Vec<u32> = one.iter().copied().cycle().take(prefix + extra).collect();
    let mut seq = model.new_sequence();
    for chunk in tokens[..prefix].chunks(512) {
        model.forward(&mut [SeqInput {
            seq: &mut seq,
            nodes: &Node::chain(chunk),
            want: Want::None,
        }])?;
        seq.commit_all()?;
    }
    Ok((seq, tokens))
}

/// Counts each step's forward by its rows into `forwards_by_rows` (grown as needed; a
/// step of 0 rows ran no forward and is counted at 0, which no price reads).
pub fn tally_rows(forwards_by_rows: &mut Vec<usize>, step_rows: &[usize]) {
    for &n in step_rows {
        if forwards_by_rows.len() <= n {
            forwards_by_rows.resize(n + 1, 0);
        }
        forwards_by_rows[n] += 1;
    }
}

/// Measured forward cost by node count (see [`cost_curve`]).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct CostCurve(Vec<(usize, f64)>);

impl CostCurve {
    /// A curve of (nodes, milliseconds) points, in increasing nodes, the first at one node
    /// (a recorded run's `cost_curve`); `None` for anything else.
    pub fn from_points(points: Vec<(usize, f64)>) -> Option<Self> {
        is_curve(&points).then_some(CostCurve(points))
    }

    /// The measured (nodes, milliseconds) pairs.
    pub fn points(&self) -> &[(usize, f64)] {
        &self.0
    }

    /// Milliseconds of a forward over `n` nodes (the engine's [`curve_ms`]: the one
    /// pricing a replay's cost model uses).
    pub fn ms(&self, n: usize) -> f64 {
        curve_ms(&self.0, n)
    }

    /// The speedup over plain decoding of a perfect drafter on this curve, and the forward
    /// size it takes: one that always drafts the true continuation as a chain, so a step
    /// over n nodes writes n tokens where a plain step writes one, at `ms(n)` against
    /// `ms(1)`. It drafts at most `max_draft` tokens a step, as the real drafters do, and
    /// picks the size with the most tokens per millisecond: the ceiling any drafter can
    /// reach on this machine, whatever its acceptance (the end of an output, where a
    /// step cannot be filled, is ignored).
    pub fn perfect_drafter(&self, max_draft: usize) -> (f64, usize) {
        let one = self.ms(1);
        (1..=max_draft + 1)
            .map(|n| (n as f64 * one / self.ms(n).max(1e-9), n))
            .fold((1.0, 1), |best, c| if c.0 > best.0 { c } else { best })
    }

    /// What decode steps cost: `steps_by_size[k]` forwards over `1 + k` nodes each.
    pub fn steps_ms(&self, steps_by_size: &[usize]) -> f64 {
        steps_by_size
            .iter()
            .enumerate()
            .map(|(k, &n)| n as f64 * self.ms(1 + k))
            .sum()
    }

    /// What forwards cost: `forwards_by_rows[n]` forwards over `n` rows each (a batch's
    /// steps, every running request's rows together; see [`tally_rows`]). Priced so, a
    /// batched run's time is free of the machine's drift between the runs a benchmark
    /// compares, which take turns minutes apart: it tells whether drafts pay for the rows
    /// they add to a batch, or what batching gains, where wall time is too noisy to.
    pub fn forwards_ms(&self, forwards_by_rows: &[usize]) -> f64 {
        forwards_by_rows
            .iter()
            .enumerate()
            .skip(1)
            .map(|(n, &count)| count as f64 * self.ms(n))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_perfect_drafter_takes_the_size_with_the_most_tokens_per_millisecond() {
        // Rows are nearly free up to 4 nodes, then cost almost as much as forwards.
        let c = CostCurve::from_points(vec![(1, 10.0), (4, 12.0), (16, 40.0)]).unwrap();
        let (speedup, nodes) = c.perfect_drafter(15);
        assert_eq!(nodes, 16);
        assert!((speedup - 16.0 * 10.0 / 40.0).abs() < 1e-9);
        // A budget of 3 drafted tokens stops at 4 nodes: 4 tokens for 1.2 forwards.
        let (speedup, nodes) = c.perfect_drafter(3);
        assert_eq!(nodes, 4);
        assert!((speedup - 4.0 / 1.2).abs() < 1e-9);
        assert_eq!(c.perfect_drafter(0), (1.0, 1));
    }

    #[test]
    fn forwards_are_priced_by_their_rows_and_empty_steps_cost_nothing() {
        let c = CostCurve::from_points(vec![(1, 10.0), (4, 12.0), (16, 40.0)]).unwrap();
        let mut by_rows = Vec::new();
        tally_rows(&mut by_rows, &[1, 0, 4, 16, 4]);
        assert_eq!(by_rows.len(), 17);
        assert_eq!(
            (by_rows[0], by_rows[1], by_rows[4], by_rows[16]),
            (1, 1, 2, 1)
        );
        let ms = c.forwards_ms(&by_rows);
        assert!((ms - (10.0 + 2.0 * 12.0 + 40.0)).abs() < 1e-9);
        assert_eq!(c.forwards_ms(&[]), 0.0);
    }
}
