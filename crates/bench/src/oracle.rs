//! The copy oracle: how far copying could go on a workload, whatever the drafter.
//!
//! At each step it copies the longest stretch of the true continuation that occurs in
//! the prompt, a reference or the output so far (at most `budget` tokens), then the
//! target adds its bonus token. Its mean accepted length bounds what any copy-based
//! drafter (reference, prompt, suffix; the trie copies from past outputs too) can reach
//! on this model's outputs, separating drafting quality from how much the model copies.

/// Decode steps the oracle needs for `output`.
pub fn copy_steps(prompt: &[u32], references: &[Vec<u32>], output: &[u32], budget: usize) -> usize {
    let mut steps = 0;
    let mut i = 0;
    while i < output.len() {
        let want = &output[i..output.len().min(i + budget)];
        let sources = std::iter::once(prompt)
            .chain(references.iter().map(Vec::as_slice))
            .chain(std::iter::once(&output[..i]));
        let copied = sources
            .map(|s| longest_prefix_in(want, s))
            .max()
            .unwrap_or(0);
        steps += 1;
        i += copied + 1;
    }
    steps
}

/// Length of the longest prefix of `want` that occurs in `hay`.
fn longest_prefix_in(want: &[u32], hay: &[u32]) -> usize {
    let mut best = 0;
    for start in 0..hay.len() {
        let n = hay[start..]
            .iter()
            .zip(want)
            .take_while(|(a, b)| a == b)
            .count();
        best = best.max(n);
        if best == want.len() {
            break;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_the_longest_stretch_then_takes_a_bonus_token() {
        // 1 2 3 is in the prompt, 9 is new, then 1 2 is copied from the output so far.
        assert_eq!(copy_steps(&[1, 2, 3], &[], &[1, 2, 3, 9, 1, 2], 8), 2);
        assert_eq!(copy_steps(&[], &[], &[5, 6, 7], 8), 3);
        assert_eq!(copy_steps(&[1, 2, 3, 4], &[], &[1, 2, 3, 4], 2), 2);
        assert_eq!(copy_steps(&[], &[vec![4, 4]], &[4, 4, 4], 8), 1);
    }
}
