//! Beam-search steps as pure functions: the target's top-K step (plain and strict
//! speculative beam search share it, so their lists are the same bits) and the relaxed
//! sampling step of speculative beam search.
//!
//! A step's candidates are (parent beam, token) pairs scored by cumulative log-probability;
//! the caller builds them from the logits and the catalogue, and commits what is picked.

use std::cmp::Ordering;

use crate::rng::Rng;

/// One (parent beam, token) pair and its cumulative log-probability.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Candidate {
    /// Index of the beam it extends.
    pub parent: usize,
    /// The token appended.
    pub token: u32,
    /// The extended beam's cumulative log-probability.
    pub score: f64,
}

/// `ln(sum(exp(logits)))`, the log-softmax normaliser: a token's log-probability is
/// `logits[t] as f64 - log_normaliser(logits)`.
///
/// Every beam step takes one per beam over the whole vocabulary, so it is written to
/// vectorize: `exp` is a polynomial of plain f32 operations summed in 16 lanes folded in a
/// fixed order (libm's f64 `exp` took 0.57 ms a row, half a forward's time for ten beams).
/// The same row always gives the same bits, on every machine.
pub fn log_normaliser(logits: &[f32]) -> f64 {
    const LANES: usize = 16;
    let mut lanes = [f32::NEG_INFINITY; LANES];
    for c in logits.chunks_exact(LANES) {
        for l in 0..LANES {
            lanes[l] = lanes[l].max(c[l]);
        }
    }
    let tail = logits.chunks_exact(LANES).remainder().iter().copied();
    let max = lanes
        .into_iter()
        .chain(tail)
        .fold(f32::NEG_INFINITY, f32::max);
    if !max.is_finite() {
        return max as f64;
    }
    let mut acc = [0f32; LANES];
    let chunks = logits.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for l in 0..LANES {
            acc[l] += exp_neg(c[l] - max);
        }
    }
    for (l, &x) in rest.iter().enumerate() {
        acc[l] += exp_neg(x - max);
    }
    let mut width = LANES / 2;
    while width > 0 {
        for l in 0..width {
            acc[l] += acc[l + width];
        }
        width /= 2;
    }
    max as f64 + (acc[0] as f64).ln()
}

/// `exp(x)` for `x <= 0` from f32 operations only (Cephes' expf polynomial): `x = n ln2 +
/// r`, `exp(r)` by a degree-6 polynomial, then `2^n` into the exponent bits.
#[inline(always)]
fn exp_neg(x: f32) -> f32 {
    let x = x.max(-87.0);
    // Round to nearest by adding 1.5 * 2^23: the sum's low mantissa bits are then n
    // itself, so 2^n comes from integer operations too (a float-to-int `as` saturates,
    // `floor` is a call without SSE4.1, and either stops the loop vectorizing).
    const MAGIC: f32 = 12_582_912.0;
    let k = x * std::f32::consts::LOG2_E + MAGIC;
    let n = k - MAGIC;
    let r = x - n * 0.693_359_4 - n * -2.121_944_4e-4;
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 5e-1;
    let e = p * r * r + r + 1.0;
    let two_n = k.to_bits().wrapping_sub(MAGIC.to_bits()).wrapping_add(127) << 23;
    f32::from_bits(two_n) * e
}

/// Orders two candidates best first: higher score, then lower token ids along the
/// sequence (the parents' tokens, then the token), as the plain beam search defines.
fn order<'a>(a: &Candidate, b: &Candidate, prefix: &impl Fn(usize) -> &'a [u32]) -> Ordering {
    b.score.total_cmp(&a.score).then_with(|| {
        prefix(a.parent)
            .cmp(prefix(b.parent))
            .then(a.token.cmp(&b.token))
    })
}

/// Indices of the `k` best candidates, best first (fewer when there are fewer). `prefix`
/// gives a parent's tokens for breaking exact ties; beams of one step are equally long.
pub fn top_k<'a>(
    candidates: &[Candidate],
    k: usize,
    prefix: impl Fn(usize) -> &'a [u32],
) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..candidates.len()).collect();
    let k = k.min(idx.len());
    if k == 0 {
        return Vec::new();
    }
    let cmp = |&a: &usize, &b: &usize| order(&candidates[a], &candidates[b], &prefix);
    if k < idx.len() {
        idx.select_nth_unstable_by(k - 1, cmp);
        idx.truncate(k);
    }
    idx.sort_by(cmp);
    idx
}

/// The outcome of one relaxed step.
#[derive(Clone, Debug, PartialEq)]
pub struct RelaxedStep {
    /// The candidates kept, accepted proposals first (in proposal order), then resampled.
    pub picks: Vec<usize>,
    /// Whether `k` proposals were accepted (the round may go on).
    pub passed: bool,
    /// How many picks are accepted proposals.
    pub accepted: usize,
}

/// Relaxed sampling verification of one step (AtSpeed): each proposal `(candidate, lq)`,
/// in order, is accepted with probability `min(1, p / q)`, where `p` is the target's
/// probability of the candidate among all `candidates` (their scores normalised) and `q =
/// exp(lq)` the draft's, normalised the same way by the caller. The step passes once `k`
/// are accepted; otherwise the missing ones are drawn, without replacement, from
/// `normalize(max(0, p - q))` over the candidates not yet picked (from `p` itself where
/// that residual is all zero). With one proposal sampled from `q` and `k = 1` the pick is
/// distributed exactly as `p`; with more it approximates sampling `k` from the target.
pub fn relaxed_step(
    candidates: &[Candidate],
    proposals: &[(usize, f64)],
    k: usize,
    rng: &mut Rng,
) -> RelaxedStep {
    let k = k.min(candidates.len());
    let lse = log_sum_exp(candidates.iter().map(|c| c.score));
    let p: Vec<f64> = candidates.iter().map(|c| (c.score - lse).exp()).collect();
    let mut q = vec![0.0; candidates.len()];
    let mut picked = vec![false; candidates.len()];
    let mut picks = Vec::with_capacity(k);
    for &(c, lq) in proposals {
        q[c] = lq.exp();
        if picks.len() < k && !picked[c] {
            let ratio = ((candidates[c].score - lse) - lq).exp();
            if rng.next_f64() < ratio.min(1.0) {
                picked[c] = true;
                picks.push(c);
            }
        }
    }
    let accepted = picks.len();
    let passed = accepted == k;
    let mut residual: Vec<f64> = (0..p.len()).map(|i| (p[i] - q[i]).max(0.0)).collect();
    while picks.len() < k {
        let weights = if residual
            .iter()
            .zip(&picked)
            .any(|(&r, &taken)| r > 0.0 && !taken)
        {
            &residual
        } else {
            &p
        };
        let c = draw_unpicked(weights, &picked, rng);
        picked[c] = true;
        residual[c] = 0.0;
        picks.push(c);
    }
    RelaxedStep {
        picks,
        passed,
        accepted,
    }
}

/// `ln(sum(exp(x)))` of the values, stable, in iteration order.
pub fn log_sum_exp(values: impl Iterator<Item = f64> + Clone) -> f64 {
    let max = values.clone().fold(f64::NEG_INFINITY, f64::max);
    if !max.is_finite() {
        return max;
    }
    max + values.map(|x| (x - max).exp()).sum::<f64>().ln()
}

/// One index drawn in proportion to `weights` among those not yet picked (the last
/// unpicked one when rounding leaves the draw past the end, or when all weigh zero).
fn draw_unpicked(weights: &[f64], picked: &[bool], rng: &mut Rng) -> usize {
    let total: f64 = weights
        .iter()
        .zip(picked)
        .filter(|(_, &taken)| !taken)
        .map(|(&w, _)| w)
        .sum();
    let mut u = rng.next_f64() * total;
    let mut last = None;
    for (i, (&w, &taken)) in weights.iter().zip(picked).enumerate() {
        if taken {
            continue;
        }
        last = Some(i);
        if w > 0.0 {
            if u < w {
                return i;
            }
            u -= w;
        }
    }
    last.expect("fewer candidates than picks")
}

/// Indices of `n` candidates sampled without replacement in proportion to
/// `exp(weights[i])` (log-weights), by the Gumbel-top-n trick, in sampling order.
pub fn sample_without_replacement(log_weights: &[f64], n: usize, rng: &mut Rng) -> Vec<usize> {
    let keys: Vec<f64> = log_weights
        .iter()
        .map(|&w| {
            // u in (0, 1): -ln(-ln(u)) is a standard Gumbel draw.
            let u = rng.next_f64().max(f64::MIN_POSITIVE);
            w - (-u.ln()).ln()
        })
        .collect();
    let mut idx: Vec<usize> = (0..keys.len()).filter(|&i| keys[i].is_finite()).collect();
    idx.sort_by(|&a, &b| keys[b].total_cmp(&keys[a]).then(a.cmp(&b)));
    idx.truncate(n);
    idx
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(parent: usize, token: u32, score: f64) -> Candidate {
        Candidate {
            parent,
            token,
            score,
        }
    }

    #[test]
    fn top_k_breaks_ties_by_lower_tokens_along_the_sequence() {
        let parents: [&[u32]; 2] = [&[5, 1], &[4, 9]];
        let cands = [c(0, 3, -1.0), c(1, 7, -1.0), c(1, 2, -0.5), c(0, 1, -1.0)];
        let picked = top_k(&cands, 3, |p| parents[p]);
        // -0.5 first; then the tie at -1.0: [4, 9, 7] < [5, 1, 1] < [5, 1, 3].
        assert_eq!(picked, vec![2, 1, 3]);
        assert_eq!(top_k(&cands, 10, |p| parents[p]).len(), 4);
        assert!(top_k(&cands, 0, |p| parents[p]).is_empty());
    }

    #[test]
    fn log_normaliser_matches_the_definition() {
        let row = [1.0f32, 2.0, 3.0];
        let want = (1f64.exp() + 2f64.exp() + 3f64.exp()).ln();
        assert!((log_normaliser(&row) - want).abs() < 1e-6);
        let wide: Vec<f32> = (0..1000).map(|i| (i % 37) as f32 * 0.7 - 20.0).collect();
        let m = wide.iter().copied().fold(f32::MIN, f32::max) as f64;
        let want = m + wide.iter().map(|&x| (x as f64 - m).exp()).sum::<f64>().ln();
        assert!((log_normaliser(&wide) - want).abs() < 1e-5);
        assert!(log_normaliser(&[f32::NEG_INFINITY, 0.0]).abs() < 1e-6);
    }

    #[test]
    fn relaxed_accepts_everything_when_draft_and_target_agree() {
        let cands = [
            c(0, 1, 0.5f64.ln()),
            c(0, 2, 0.3f64.ln()),
            c(0, 3, 0.2f64.ln()),
        ];
        let props = [(0, 0.5f64.ln()), (1, 0.3f64.ln())];
        let mut rng = Rng::new(7);
        let s = relaxed_step(&cands, &props, 2, &mut rng);
        assert_eq!(
            s,
            RelaxedStep {
                picks: vec![0, 1],
                passed: true,
                accepted: 2
            }
        );
    }

    #[test]
    fn relaxed_fills_missing_picks_from_the_residual() {
        let cands = [c(0, 1, 0.5f64.ln()), c(0, 2, 0.5f64.ln())];
        // The draft puts all its mass on candidate 0: the residual is candidate 1 only.
        let mut rng = Rng::new(1);
        let s = relaxed_step(&cands, &[], 1, &mut rng);
        assert!(!s.passed);
        let s = relaxed_step(&cands, &[(0, 0.0)], 2, &mut rng);
        assert_eq!(s.picks.len(), 2);
        assert!(s.picks.contains(&1));
    }

    #[test]
    fn gumbel_sampling_returns_distinct_indices() {
        let mut rng = Rng::new(3);
        let s = sample_without_replacement(&[0.0, -1.0, f64::NEG_INFINITY, -2.0], 5, &mut rng);
        assert_eq!(s.len(), 3);
        assert!(!s.contains(&2));
    }
}
