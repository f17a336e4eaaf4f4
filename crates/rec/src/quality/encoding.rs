//! Ids as smoothed target encodings: a user's (an item's) training rate of `rating >= 4`,
//! shrunk towards the global rate, on the logit scale.
//!
//! Why not one-hot ids: 943 + 1,682 columns over ~100k dense rows is ~2 GB for what is, to a
//! linear model, the same per-id bias. Why out-of-fold: a training row's encoding must not
//! include its own label, or the model learns to trust the encoding more than it deserves on
//! held-out pairs; each training row is encoded from the other folds only, held-out rows
//! from all of training.

use std::collections::HashMap;

use crate::hash::fnv1a64;
use crate::movielens::Rating;

/// Positives and count per id.
type Counts = HashMap<u32, (u32, u32)>;

pub(crate) fn label(r: &Rating) -> bool {
    r.rating >= 4
}

/// Fitted on the training ratings.
pub(crate) struct TargetEncoder {
    prior: f64,
    /// Pseudo-count of the prior: an id seen `smoothing` times is half its own rate.
    smoothing: f64,
    folds: u32,
    users: Counts,
    items: Counts,
    /// Per fold: the counts of the training rows in that fold.
    fold_users: Vec<Counts>,
    fold_items: Vec<Counts>,
}

/// The two ids' encodings and log-counts of one (user, item) pair.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct IdFeatures {
    pub user_rate: f64,
    pub item_rate: f64,
    pub user_log_count: f64,
    pub item_log_count: f64,
}

impl TargetEncoder {
    pub fn fit(train: &[Rating], folds: u32, smoothing: f64) -> TargetEncoder {
        let positives = train.iter().filter(|r| label(r)).count();
        let mut enc = TargetEncoder {
            prior: (positives as f64 + 1.0) / (train.len() as f64 + 2.0),
            smoothing,
            folds,
            users: Counts::new(),
            items: Counts::new(),
            fold_users: vec![Counts::new(); folds as usize],
            fold_items: vec![Counts::new(); folds as usize],
        };
        for r in train {
            let y = u32::from(label(r));
            let f = enc.fold(r);
            for (map, id) in [
                (&mut enc.users, r.user),
                (&mut enc.items, r.item),
                (&mut enc.fold_users[f], r.user),
                (&mut enc.fold_items[f], r.item),
            ] {
                let c = map.entry(id).or_default();
                c.0 += y;
                c.1 += 1;
            }
        }
        enc
    }

    /// A training row's fold, from its pair alone (stable across runs and machines).
    fn fold(&self, r: &Rating) -> usize {
        let mut key = [0u8; 8];
        key[..4].copy_from_slice(&r.user.to_le_bytes());
        key[4..].copy_from_slice(&r.item.to_le_bytes());
        (fnv1a64(&key) % u64::from(self.folds)) as usize
    }

    fn rate(&self, (pos, n): (u32, u32)) -> f64 {
        let p = (f64::from(pos) + self.smoothing * self.prior) / (f64::from(n) + self.smoothing);
        (p / (1.0 - p)).ln()
    }

    /// Encodes a training row out of fold.
    pub fn train_row(&self, r: &Rating) -> IdFeatures {
        let f = self.fold(r);
        let minus = |all: &Counts, fold: &Counts, id: u32| {
            let (p, n) = all.get(&id).copied().unwrap_or_default();
            let (fp, fnn) = fold.get(&id).copied().unwrap_or_default();
            (p - fp, n - fnn)
        };
        self.features(
            minus(&self.users, &self.fold_users[f], r.user),
            minus(&self.items, &self.fold_items[f], r.item),
            r,
        )
    }

    /// Encodes a held-out pair from all of training.
    pub fn heldout_row(&self, r: &Rating) -> IdFeatures {
        let get = |m: &Counts, id| m.get(&id).copied().unwrap_or_default();
        self.features(get(&self.users, r.user), get(&self.items, r.item), r)
    }

    fn features(&self, user: (u32, u32), item: (u32, u32), r: &Rating) -> IdFeatures {
        // Counts carry no label, so they come from all of training for either kind of row.
        let count = |m: &Counts, id| f64::from(m.get(&id).map_or(0, |c| c.1));
        IdFeatures {
            user_rate: self.rate(user),
            item_rate: self.rate(item),
            user_log_count: count(&self.users, r.user).ln_1p(),
            item_log_count: count(&self.items, r.item).ln_1p(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(user: u32, item: u32, rating: u8) -> Rating {
        Rating {
            user,
            item,
            rating,
            timestamp: 0,
        }
    }

    #[test]
    fn an_unseen_id_encodes_as_the_prior_and_a_liked_one_above_it() {
        let train: Vec<Rating> = (0..20)
            .map(|i| r(1, i, if i < 18 { 5 } else { 1 }))
            .collect();
        let enc = TargetEncoder::fit(&train, 5, 10.0);
        let unseen = enc.heldout_row(&r(99, 99, 3));
        let prior_logit = (enc.prior / (1.0 - enc.prior)).ln();
        assert!((unseen.user_rate - prior_logit).abs() < 1e-12);
        assert_eq!(unseen.user_log_count, 0.0);
        let seen = enc.heldout_row(&r(1, 99, 3));
        // 18 of 20 liked against a prior of 19/22.
        assert!(seen.user_rate > prior_logit);
        assert_eq!(seen.user_log_count, 21f64.ln());
    }

    #[test]
    fn a_training_row_is_encoded_without_its_own_fold() {
        // One user with a single rating: out of fold, nothing is left but the prior.
        let train = vec![r(1, 1, 5), r(2, 2, 1), r(2, 3, 1)];
        let enc = TargetEncoder::fit(&train, 5, 1.0);
        let prior_logit = (enc.prior / (1.0 - enc.prior)).ln();
        assert!((enc.train_row(&train[0]).user_rate - prior_logit).abs() < 1e-12);
        assert!(enc.heldout_row(&train[0]).user_rate > prior_logit);
    }
}
