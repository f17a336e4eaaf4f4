//! Turning logits into a token: greedy, or sampling with temperature, top-k, top-p, min-p
//! and a repetition penalty.
//!
//! `sample` is a pure function of (logits, recent tokens, params, one uniform number), so a
//! speculative verifier that draws the same number for the same emitted position reproduces
//! plain sampling exactly.

/// Sampling parameters of one request.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// 0 means greedy.
    pub temperature: f32,
    /// 0 disables.
    pub top_k: usize,
    /// 1 disables.
    pub top_p: f32,
    /// 0 disables.
    pub min_p: f32,
    /// 1 disables; applied over the last `repeat_last_n` tokens of prompt + output.
    pub repetition_penalty: f32,
    /// How many of the latest tokens the repetition penalty looks at.
    pub repeat_last_n: usize,
    /// Seeds the sampler's random stream (see [`crate::Rng`]): the same seed and request
    /// give the same text.
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            repeat_last_n: 64,
            seed: 0,
        }
    }
}

impl SamplingParams {
    /// Whether these parameters always choose the (penalised) argmax: temperature 0, or
    /// top-k 1.
    pub fn is_greedy(&self) -> bool {
        self.temperature <= 0.0 || self.top_k == 1
    }

    /// Checks ranges; the message says what to fix.
    pub fn validate(&self) -> Result<(), String> {
        let t = self.temperature;
        if !(t.is_finite() && (0.0..=100.0).contains(&t)) {
            return Err(format!("temperature must be in [0, 100], got {t}"));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(format!("top_p must be in (0, 1], got {}", self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return Err(format!("min_p must be in [0, 1], got {}", self.min_p));
        }
        let rp = self.repetition_penalty;
        if !(rp.is_finite() && rp > 0.0) {
            return Err(format!("repetition_penalty must be > 0, got {rp}"));
        }
        Ok(())
    }
}

/// Index of the largest logit, the lowest index on ties.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as u32
}

/// The penalised logits (a copy only when a penalty applies).
pub(crate) fn penalised<'a>(
    logits: &'a [f32],
    recent: &[u32],
    p: &SamplingParams,
) -> std::borrow::Cow<'a, [f32]> {
    if p.repetition_penalty == 1.0 || recent.is_empty() {
        return std::borrow::Cow::Borrowed(logits);
    }
    let mut l = logits.to_vec();
    let start = recent.len().saturating_sub(p.repeat_last_n);
    let mut seen = std::collections::HashSet::new();
    for &t in &recent[start..] {
        if let Some(v) = l.get_mut(t as usize) {
            if seen.insert(t) {
                *v = if *v > 0.0 {
                    *v / p.repetition_penalty
                } else {
                    *v * p.repetition_penalty
                };
            }
        }
    }
    std::borrow::Cow::Owned(l)
}

/// The candidate tokens with their probabilities after every filter, in a canonical order
/// (probability descending, then token id), summing to 1.
pub fn distribution(logits: &[f32], recent: &[u32], p: &SamplingParams) -> Vec<(u32, f32)> {
    let logits = penalised(logits, recent, p);
    if p.is_greedy() {
        return vec![(argmax(&logits), 1.0)];
    }
    let order = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    let mut cand: Vec<(u32, f32)> = logits
        .iter()
        .enumerate()
        .map(|(i, &l)| (i as u32, l))
        .collect();
    if p.top_k > 0 && p.top_k < cand.len() {
        cand.select_nth_unstable_by(p.top_k - 1, order);
        cand.truncate(p.top_k);
    }
    let inv_t = 1.0 / p.temperature;
    let max = cand.iter().fold(f32::NEG_INFINITY, |m, c| m.max(c.1));
    let mut sum = 0f64;
    for c in cand.iter_mut() {
        c.1 = ((c.1 - max) * inv_t).exp();
        sum += c.1 as f64;
    }
    if p.min_p > 0.0 {
        // The most likely token has weight 1 after subtracting the max.
        let floor = p.min_p;
        cand.retain(|c| c.1 >= floor);
        sum = cand.iter().map(|c| c.1 as f64).sum();
    }
    if p.top_p < 1.0 {
        cand = nucleus(cand, sum, p.top_p as f64, order);
        sum = cand.iter().map(|c| c.1 as f64).sum();
    }
    for c in cand.iter_mut() {
        c.1 = (c.1 as f64 / sum) as f32;
    }
    cand
}

/// Weight floors tried in turn by [`nucleus`] before it sorts every candidate.
const NUCLEUS_FLOORS: [f32; 2] = [1e-3, 1e-6];

/// The shortest prefix of `cand` sorted by `order` whose weights (relative to `sum`)
/// reach `top_p`, or all of them. Sorting the whole vocabulary for every token cost about
/// a millisecond; the nucleus is nearly always among the few candidates within a factor
/// 1000 of the most likely one (whose weight is 1), so only those are sorted, and the
/// floor is lowered until they hold the nucleus. The prefix of the full sort is the sorted
/// set of its members, so the result is the same as sorting everything.
fn nucleus(
    mut cand: Vec<(u32, f32)>,
    sum: f64,
    top_p: f64,
    order: impl Fn(&(u32, f32), &(u32, f32)) -> std::cmp::Ordering + Copy,
) -> Vec<(u32, f32)> {
    let cut = |sorted: &[(u32, f32)]| {
        let mut acc = 0f64;
        sorted
            .iter()
            .position(|c| {
                acc += c.1 as f64 / sum;
                acc >= top_p
            })
            .map(|i| i + 1)
    };
    for floor in NUCLEUS_FLOORS {
        let mut head: Vec<(u32, f32)> = cand.iter().copied().filter(|c| c.1 >= floor).collect();
        head.sort_unstable_by(order);
        if let Some(n) = cut(&head) {
            head.truncate(n);
            return head;
        }
    }
    cand.sort_unstable_by(order);
    // The mass can fall short of top_p only by rounding: then every candidate is kept.
    let n = cut(&cand).unwrap_or(cand.len());
    cand.truncate(n);
    cand
}

/// Draws from `dist` (as returned by [`distribution`]) with the uniform number `u`.
pub fn draw(dist: &[(u32, f32)], u: f64) -> u32 {
    let mut acc = 0f64;
    for &(t, pr) in dist {
        acc += pr as f64;
        if u < acc {
            return t;
        }
    }
    dist.last().map_or(0, |d| d.0)
}

/// One token from `logits` given the recent context and a uniform number.
pub fn sample(logits: &[f32], recent: &[u32], p: &SamplingParams, u: f64) -> u32 {
    if p.is_greedy() {
        return argmax(&penalised(logits, recent, p));
    }
    draw(&distribution(logits, recent, p), u)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(t: f32) -> SamplingParams {
        SamplingParams {
            temperature: t,
            ..Default::default()
        }
    }

    #[test]
    fn greedy_takes_the_first_maximum() {
        assert_eq!(sample(&[1.0, 3.0, 3.0, 2.0], &[], &params(0.0), 0.9), 1);
    }

    #[test]
    fn distribution_sums_to_one_and_honours_filters() {
        let logits: Vec<f32> = (0..50).map(|i| (i as f32 * 0.7).sin() * 3.0).collect();
        let mut p = params(0.8);
        p.top_k = 10;
        p.top_p = 0.9;
        p.min_p = 0.05;
        let d = distribution(&logits, &[], &p);
        assert!(d.len() <= 10 && !d.is_empty());
        let s: f32 = d.iter().map(|x| x.1).sum();
        assert!((s - 1.0).abs() < 1e-5);
        let top = argmax(&logits);
        assert_eq!(d[0].0, top);
    }

    #[test]
    fn repetition_penalty_discourages_recent_tokens() {
        let logits = [2.0, 1.9, 0.0];
        let mut p = params(0.0);
        p.repetition_penalty = 1.5;
        assert_eq!(sample(&logits, &[0], &p, 0.0), 1);
    }

    #[test]
    fn sampling_frequencies_follow_softmax() {
        let logits = [0.0f32, 1.0, 2.0];
        let p = params(1.0);
        let mut rng = crate::Rng::new(7);
        let mut counts = [0usize; 3];
        let n = 30000;
        for _ in 0..n {
            counts[sample(&logits, &[], &p, rng.next_f64()) as usize] += 1;
        }
        let z: f64 = logits.iter().map(|&l| (l as f64).exp()).sum();
        for (i, &c) in counts.iter().enumerate() {
            let expect = (logits[i] as f64).exp() / z;
            assert!((c as f64 / n as f64 - expect).abs() < 0.01, "{i}: {c}");
        }
    }

    /// The nucleus found by sorting only the likeliest candidates is the one the full
    /// sort gives, token for token, including when the floor must be lowered.
    #[test]
    fn nucleus_equals_sorting_everything() {
        let order = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        let mut rng = crate::Rng::new(11);
        for case in 0..200 {
            let n = 1 + case * 37 % 5000;
            // Flat and peaked shapes, ties included (weights rounded to a grid).
            let spread = [0.5, 3.0, 12.0][case % 3];
            let cand: Vec<(u32, f32)> = (0..n)
                .map(|i| {
                    let l = (rng.next_f64() * spread) as f32;
                    (i as u32, ((l * 4.0).round() / 4.0 - spread as f32).exp())
                })
                .collect();
            let sum: f64 = cand.iter().map(|c| c.1 as f64).sum();
            for top_p in [0.05, 0.5, 0.9, 0.999, 0.999_999_9] {
                let mut full = cand.clone();
                full.sort_unstable_by(order);
                let mut acc = 0f64;
                let cut = full
                    .iter()
                    .position(|c| {
                        acc += c.1 as f64 / sum;
                        acc >= top_p
                    })
                    .map_or(full.len(), |i| i + 1);
                full.truncate(cut);
                assert_eq!(
                    nucleus(cand.clone(), sum, top_p, order),
                    full,
                    "{case} {top_p}"
                );
            }
        }
    }

    #[test]
    fn invalid_params_are_rejected_with_a_reason() {
        let mut p = params(-1.0);
        assert!(p.validate().unwrap_err().contains("temperature"));
        p.temperature = 1.0;
        p.top_p = 0.0;
        assert!(p.validate().unwrap_err().contains("top_p"));
    }
}
