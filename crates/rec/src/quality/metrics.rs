//! Ranking and calibration metrics of predicted click probabilities.

use crate::RecError;

/// Area under the ROC curve: the probability that a random positive scores above a random
/// negative, ties counting one half (the Mann-Whitney U statistic over average ranks).
/// Errors unless both classes occur.
pub fn auc(scores: &[f64], labels: &[bool]) -> Result<f64, RecError> {
    assert_eq!(scores.len(), labels.len(), "one label per score");
    let positives = labels.iter().filter(|&&l| l).count();
    let negatives = labels.len() - positives;
    if positives == 0 || negatives == 0 {
        return Err(RecError::Inconsistent(format!(
            "AUC needs both classes ({positives} positives, {negatives} negatives)"
        )));
    }
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]));
    // Sum of the positives' ranks (1-based), a tied run sharing its mean rank.
    let mut positive_rank_sum = 0.0;
    let mut start = 0;
    while start < order.len() {
        let mut end = start + 1;
        while end < order.len() && scores[order[end]] == scores[order[start]] {
            end += 1;
        }
        let mean_rank = (start + 1 + end) as f64 / 2.0;
        let tied_positives = order[start..end].iter().filter(|&&i| labels[i]).count();
        positive_rank_sum += mean_rank * tied_positives as f64;
        start = end;
    }
    let (p, n) = (positives as f64, negatives as f64);
    Ok((positive_rank_sum - p * (p + 1.0) / 2.0) / (p * n))
}

/// Mean negative log-likelihood of the labels, probabilities clipped to [1e-15, 1 - 1e-15]
/// so that one confident mistake is large but finite.
pub fn log_loss(probabilities: &[f64], labels: &[bool]) -> f64 {
    assert_eq!(
        probabilities.len(),
        labels.len(),
        "one label per probability"
    );
    if labels.is_empty() {
        return 0.0;
    }
    let total: f64 = probabilities
        .iter()
        .zip(labels)
        .map(|(&p, &y)| {
            let p = p.clamp(1e-15, 1.0 - 1e-15);
            -if y { p.ln() } else { (1.0 - p).ln() }
        })
        .sum();
    total / labels.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auc_is_one_for_a_perfect_ranking_and_zero_for_a_reversed_one() {
        let labels = [false, false, true, true];
        assert_eq!(auc(&[0.1, 0.2, 0.8, 0.9], &labels).unwrap(), 1.0);
        assert_eq!(auc(&[0.9, 0.8, 0.2, 0.1], &labels).unwrap(), 0.0);
    }

    #[test]
    fn auc_counts_a_positive_negative_tie_as_one_half() {
        // Pairs (pos, neg): (0.5 vs 0.5) = 1/2, (0.5 vs 0.1) = 1, (0.9 vs 0.5) = 1,
        // (0.9 vs 0.1) = 1: 3.5 / 4.
        let auc = auc(&[0.5, 0.9, 0.5, 0.1], &[true, true, false, false]).unwrap();
        assert_eq!(auc, 0.875);
        assert_eq!(
            super::auc(&[0.3; 4], &[true, false, true, false]).unwrap(),
            0.5
        );
    }

    #[test]
    fn auc_by_hand_on_an_interleaved_ranking() {
        // Scores ascending: n p n p p: positives beat 1, 2, 2 negatives of 2 each: 5/6.
        let auc = auc(
            &[0.1, 0.2, 0.3, 0.4, 0.5],
            &[false, true, false, true, true],
        )
        .unwrap();
        assert!((auc - 5.0 / 6.0).abs() < 1e-12);
    }

    #[test]
    fn auc_needs_both_classes() {
        assert!(auc(&[0.1, 0.2], &[true, true]).is_err());
    }

    #[test]
    fn log_loss_matches_the_formula_and_stays_finite_on_certain_mistakes() {
        let l = log_loss(&[0.8, 0.4], &[true, false]);
        assert!((l - (-(0.8f64.ln()) - 0.6f64.ln()) / 2.0).abs() < 1e-12);
        assert!((log_loss(&[0.5], &[true]) - std::f64::consts::LN_2).abs() < 1e-12);
        let wrong = log_loss(&[0.0], &[true]);
        assert!(wrong.is_finite() && wrong > 30.0);
    }
}
