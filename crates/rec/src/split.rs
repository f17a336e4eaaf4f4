//! Leave-last-out (docs/recsys.md): per user, interactions sorted by (timestamp, item_id); the
//! last is the test target, the second-to-last the validation target, the rest training.
//! Sorting on the item id as well makes ties on the timestamp (common in MovieLens, where
//! users rated many movies in one sitting) independent of file order.

use crate::movielens::{Dataset, Rating};

/// The default number of history items in a prompt.
pub const DEFAULT_HISTORY: usize = 10;

/// The ratings split leave-last-out: training, validation and test interactions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Split {
    /// Sorted by (user, timestamp, item).
    pub train: Vec<Rating>,
    /// One per user with at least two ratings, sorted by user.
    pub valid: Vec<Rating>,
    /// One per user with at least one rating, sorted by user.
    pub test: Vec<Rating>,
}

impl Split {
    /// Splits `data`'s ratings: per user, the last (by timestamp, then item id) is the test
    /// target, the one before it the validation target, the rest training.
    pub fn leave_last_out(data: &Dataset) -> Self {
        let mut sorted = data.ratings.clone();
        // The rating only orders exact duplicates, so that even they do not depend on file order.
        sorted.sort_by_key(|r| (r.user, r.timestamp, r.item, r.rating));
        let mut split = Split {
            train: Vec::with_capacity(sorted.len()),
            valid: Vec::new(),
            test: Vec::new(),
        };
        for user in sorted.chunk_by(|a, b| a.user == b.user) {
            let (rest, test) = user.split_at(user.len() - 1);
            split.test.push(test[0]);
            if let Some((valid, train)) = rest.split_last() {
                split.valid.push(*valid);
                split.train.extend_from_slice(train);
            }
        }
        split
    }

    /// A user's training interactions, oldest first.
    pub fn train_of(&self, user: u32) -> &[Rating] {
        let lo = self.train.partition_point(|r| r.user < user);
        let hi = self.train.partition_point(|r| r.user <= user);
        &self.train[lo..hi]
    }

    /// The prompt history: the user's `h` most recent training interactions (all of them
    /// come before both targets), oldest first.
    pub fn history(&self, user: u32, h: usize) -> &[Rating] {
        let train = self.train_of(user);
        &train[train.len().saturating_sub(h)..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn r(user: u32, item: u32, timestamp: u64) -> Rating {
        Rating {
            user,
            item,
            rating: 3,
            timestamp,
        }
    }

    fn dataset(ratings: Vec<Rating>) -> Dataset {
        Dataset {
            ratings,
            ..Dataset::default()
        }
    }

    #[test]
    fn the_last_two_interactions_are_test_and_validation() {
        let data = dataset(vec![
            r(1, 10, 300),
            r(2, 5, 1),
            r(1, 11, 100),
            r(1, 12, 200),
            r(1, 13, 400),
            r(2, 6, 2),
        ]);
        let split = Split::leave_last_out(&data);
        assert_eq!(split.test, [r(1, 13, 400), r(2, 6, 2)]);
        assert_eq!(split.valid, [r(1, 10, 300), r(2, 5, 1)]);
        assert_eq!(split.train, [r(1, 11, 100), r(1, 12, 200)]);
        assert!(split.train_of(2).is_empty());
    }

    #[test]
    fn ties_on_timestamp_are_broken_by_item_id() {
        let data = dataset(vec![r(1, 9, 5), r(1, 3, 5), r(1, 7, 5), r(1, 1, 4)]);
        let split = Split::leave_last_out(&data);
        assert_eq!(split.test, [r(1, 9, 5)]);
        assert_eq!(split.valid, [r(1, 7, 5)]);
        assert_eq!(split.train, [r(1, 1, 4), r(1, 3, 5)]);
    }

    #[test]
    fn a_user_with_one_rating_has_only_a_test_target() {
        let split = Split::leave_last_out(&dataset(vec![r(4, 1, 1)]));
        assert_eq!(split.test, [r(4, 1, 1)]);
        assert!(split.valid.is_empty() && split.train.is_empty());
    }

    #[test]
    fn history_is_the_most_recent_training_items_oldest_first() {
        let ratings = (0..15).map(|i| r(1, 100 - i, i as u64)).collect();
        let split = Split::leave_last_out(&dataset(ratings));
        let history = split.history(1, 10);
        let items: Vec<u32> = history.iter().map(|r| r.item).collect();
        // 15 ratings: items 100..=86 in time order; 86 is test, 87 validation.
        assert_eq!(items, (88..=97).rev().collect::<Vec<_>>());
        assert_eq!(split.history(1, 100).len(), 13);
        assert!(split.history(2, 10).is_empty());
    }

    proptest! {
        #[test]
        fn every_rating_lands_in_exactly_one_part_and_order_does_not_matter(
            raw in proptest::collection::vec((1u32..6, 1u32..30, 0u64..20), 1..80),
            seed in any::<u64>(),
        ) {
            let mut ratings: Vec<Rating> = raw.iter().map(|&(u, i, t)| r(u, i, t)).collect();
            let split = Split::leave_last_out(&dataset(ratings.clone()));
            prop_assert_eq!(
                split.train.len() + split.valid.len() + split.test.len(),
                ratings.len()
            );
            for t in &split.test {
                let history = split.history(t.user, usize::MAX);
                let before = |h: &Rating| (h.timestamp, h.item) <= (t.timestamp, t.item);
                prop_assert!(history.iter().all(before));
            }
            // Shuffle deterministically; the split is the same.
            let n = ratings.len();
            for k in 0..n {
                ratings.swap(k, (seed as usize).wrapping_add(k * 7919) % n);
            }
            prop_assert_eq!(Split::leave_last_out(&dataset(ratings)), split);
        }
    }
}
