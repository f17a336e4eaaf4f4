//! Predicted Outputs accounting, as OpenAI defines it: prediction tokens that appear in
//! the completion are accepted, the rest rejected. "Appear" is the longest common
//! subsequence, so the count does not depend on which drafter copied what.

/// Cells of the LCS table beyond which the count falls back to `fallback`.
const MAX_CELLS: usize = 64 << 20;

/// (accepted, rejected) prediction tokens for `completion`.
pub fn accounting(prediction: &[u32], completion: &[u32], fallback: usize) -> (usize, usize) {
    let accepted = if prediction.len().saturating_mul(completion.len()) <= MAX_CELLS {
        lcs_len(prediction, completion)
    } else {
        fallback.min(prediction.len())
    };
    (accepted, prediction.len() - accepted)
}

/// Length of the longest common subsequence, in one row of memory.
fn lcs_len(a: &[u32], b: &[u32]) -> usize {
    let mut row = vec![0usize; b.len() + 1];
    for &x in a {
        let mut diag = 0;
        for (j, &y) in b.iter().enumerate() {
            let up = row[j + 1];
            row[j + 1] = if x == y { diag + 1 } else { up.max(row[j]) };
            diag = up;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lcs_counts_tokens_in_order() {
        assert_eq!(lcs_len(&[1, 2, 3, 4], &[1, 3, 4, 5]), 3);
        assert_eq!(lcs_len(&[], &[1]), 0);
        assert_eq!(accounting(&[7, 8, 9], &[7, 9, 9, 9], 0), (2, 1));
    }
}
