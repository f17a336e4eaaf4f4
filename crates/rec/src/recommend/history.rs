//! Which held-out item a prompt asks for ([`Target`]) and the history before it (docs/recsys.md,
//! "Splits"), shared by the prompt ([`prompt`](super::prompt)) and the evaluation users
//! ([`users`](super::users)).
//!
//! "The most recent `h` items before the target": for the validation target that is the
//! end of the training history; for the test target the validation item comes just before
//! it and is the most recent of them (as in the leave-one-out literature: SASRec, BIGRec).
//! So a test prompt lists the last `h - 1` training items then the validation item.

use crate::movielens::Rating;
use crate::split::Split;

/// Which held-out item a prompt asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// The last interaction.
    Test,
    /// The second-to-last one.
    Valid,
}

/// The user's held-out rating for `target`, if they have one.
pub fn target_of(split: &Split, user: u32, target: Target) -> Option<&Rating> {
    let held = match target {
        Target::Test => &split.test,
        Target::Valid => &split.valid,
    };
    let i = held.binary_search_by_key(&user, |r| r.user).ok()?;
    Some(&held[i])
}

/// The item ids of the user's `h` most recent interactions before `target`, oldest first.
pub fn history_before(split: &Split, user: u32, target: Target, h: usize) -> Vec<u32> {
    let mut items: Vec<u32> = split.train_of(user).iter().map(|r| r.item).collect();
    if target == Target::Test {
        items.extend(target_of(split, user, Target::Valid).map(|r| r.item));
    }
    items.split_off(items.len().saturating_sub(h))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::movielens::{Dataset, Rating};

    fn r(user: u32, item: u32, timestamp: u64) -> Rating {
        Rating {
            user,
            item,
            rating: 4,
            timestamp,
        }
    }

    fn split() -> Split {
        // User 1: items 1..=14 in time order (14 test, 13 valid); user 2: 21, 22 (22 test,
        // 21 valid, no training); user 3: one rating (test only).
        let mut ratings: Vec<Rating> = (1..=14).map(|i| r(1, i, i as u64)).collect();
        ratings.extend([r(2, 22, 9), r(2, 21, 8), r(3, 30, 1)]);
        let data = Dataset {
            ratings,
            ..Dataset::default()
        };
        Split::leave_last_out(&data)
    }

    #[test]
    fn the_test_history_ends_with_the_validation_item() {
        let split = split();
        assert_eq!(
            history_before(&split, 1, Target::Test, 10),
            (4..=13).collect::<Vec<_>>()
        );
        assert_eq!(
            history_before(&split, 1, Target::Valid, 10),
            (3..=12).collect::<Vec<_>>()
        );
        assert_eq!(history_before(&split, 1, Target::Test, 2), [12, 13]);
        assert_eq!(history_before(&split, 2, Target::Test, 10), [21]);
        assert!(history_before(&split, 2, Target::Valid, 10).is_empty());
        assert!(history_before(&split, 3, Target::Test, 10).is_empty());
        assert_eq!(target_of(&split, 1, Target::Test).unwrap().item, 14);
        assert_eq!(target_of(&split, 2, Target::Valid).unwrap().item, 21);
        assert!(target_of(&split, 3, Target::Valid).is_none());
    }
}
