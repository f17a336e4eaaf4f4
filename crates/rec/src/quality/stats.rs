//! Mean, median and extremes of a list of per-record scores.

use serde::Serialize;

/// Aggregates of one score over records; `count == 0` gives all zeros (nothing to compare
/// is reported by the count, not by NaNs that would break JSON).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Summary {
    /// Records aggregated.
    pub count: usize,
    /// Arithmetic mean.
    pub mean: f64,
    /// Mean of the two middle values for an even count.
    pub median: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
}

impl Summary {
    /// The aggregates of `values` (all zeros when empty).
    pub fn of(values: &[f64]) -> Summary {
        if values.is_empty() {
            return Summary::default();
        }
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        };
        Summary {
            count: n,
            mean: sorted.iter().sum::<f64>() / n as f64,
            median,
            min: sorted[0],
            max: sorted[n - 1],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_of_nothing_is_zero_with_count_zero() {
        assert_eq!(Summary::of(&[]), Summary::default());
    }

    #[test]
    fn median_of_an_even_count_averages_the_middle_pair() {
        let s = Summary::of(&[4.0, 1.0, 3.0, 2.0]);
        assert_eq!(
            (s.count, s.mean, s.median, s.min, s.max),
            (4, 2.5, 2.5, 1.0, 4.0)
        );
    }

    #[test]
    fn median_of_an_odd_count_is_the_middle_value() {
        assert_eq!(Summary::of(&[5.0, 0.0, 1.0]).median, 1.0);
    }
}
