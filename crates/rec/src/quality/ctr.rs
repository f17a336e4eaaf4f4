//! The downstream check of docs/recsys.md: a click-through-rate style logistic regression
//! predicting `rating >= 4` for held-out (user, item) pairs, trained on the training
//! interactions, with and without knowledge-text features; AUC and log loss.

use linfa::traits::Fit;
use linfa_logistic::LogisticRegression;
use ndarray::{Array1, Array2, ArrayView1, ShapeBuilder};
use serde::Serialize;

use super::encoding::{label, IdFeatures, TargetEncoder};
use super::features::Features;
use super::knowledge::Knowledge;
use super::metrics::{auc, log_loss};
use crate::movielens::{Item, Rating, User};
use crate::RecError;

/// The model's knobs; the defaults are what the report uses.
#[derive(Clone, Debug, PartialEq)]
pub struct CtrConfig {
    /// Hashed TF-IDF buckets per text namespace (user, item).
    pub text_buckets: usize,
    /// Folds of the out-of-fold id encodings.
    pub folds: u32,
    /// Pseudo-count that shrinks an id's rate towards the global one.
    pub smoothing: f64,
    /// L2 penalty on the summed (not averaged) log loss.
    pub alpha: f64,
    /// L-BFGS iterations at most.
    pub max_iterations: u64,
}

impl Default for CtrConfig {
    fn default() -> Self {
        // 256 buckets: ~570 columns, ~450 MB of f64 for MovieLens-100k's ~98k training
        // rows; 100 L-BFGS iterations (linfa's default) take a minute or two on one core.
        CtrConfig {
            text_buckets: 256,
            folds: 5,
            smoothing: 20.0,
            alpha: 1.0,
            max_iterations: 100,
        }
    }
}

/// One run of the check.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CtrMetrics {
    /// Area under the ROC curve on the held-out pairs.
    pub auc: f64,
    /// Mean log loss on the held-out pairs.
    pub log_loss: f64,
    /// Training interactions fitted on.
    pub train_rows: usize,
    /// Held-out pairs scored.
    pub heldout_rows: usize,
    /// Share of held-out pairs rated 4 or more.
    pub heldout_positive_rate: f64,
    /// Feature columns of the model.
    pub features: usize,
    /// Ids with a knowledge text (0 without knowledge).
    pub users_with_text: usize,
    /// Item ids with a knowledge text (0 without knowledge).
    pub items_with_text: usize,
}

/// Trains on `train` and scores `heldout`. Deterministic: features depend on the inputs
/// only (stable hashes, sorted vocabularies), the solver starts from zeros and runs single
/// threaded. Errors when a rating names an unknown user or item, or when either set lacks
/// one of the two labels.
pub fn evaluate_with(
    config: &CtrConfig,
    train: &[Rating],
    heldout: &[Rating],
    users: &[User],
    items: &[Item],
    knowledge: Option<&Knowledge>,
) -> Result<CtrMetrics, RecError> {
    if config.text_buckets == 0 || config.folds < 2 {
        return Err(RecError::Invalid(format!(
            "the CTR model needs at least one text bucket and two folds, not {} and {}",
            config.text_buckets, config.folds
        )));
    }
    let encoder = TargetEncoder::fit(train, config.folds, config.smoothing);
    let features = Features::new(users, items, knowledge, config.text_buckets);
    let x_train = matrix(&features, train, |r| encoder.train_row(r))?;
    let x_heldout = matrix(&features, heldout, |r| encoder.heldout_row(r))?;
    let y_train: Array1<bool> = train.iter().map(label).collect();
    let y_heldout: Vec<bool> = heldout.iter().map(label).collect();

    let model = LogisticRegression::default()
        .alpha(config.alpha)
        .max_iterations(config.max_iterations)
        .fit(&linfa::Dataset::new(x_train, y_train))?;
    // linfa's probability is that of the label more frequent in training, whichever it is.
    let mut p = model.predict_probabilities(&x_heldout).to_vec();
    if !model.labels().pos.class {
        p.iter_mut().for_each(|p| *p = 1.0 - *p);
    }

    Ok(CtrMetrics {
        auc: auc(&p, &y_heldout)?,
        log_loss: log_loss(&p, &y_heldout),
        train_rows: train.len(),
        heldout_rows: heldout.len(),
        heldout_positive_rate: y_heldout.iter().filter(|&&y| y).count() as f64
            / heldout.len().max(1) as f64,
        features: features.dim(),
        users_with_text: knowledge.map_or(0, |k| k.users.len()),
        items_with_text: knowledge.map_or(0, |k| k.items.len()),
    })
}

/// The feature matrix in column-major order: linfa's gradient is `xᵀ · residuals`, which
/// without BLAS ndarray computes row by row of `xᵀ`; over a row-major `x` every such row is
/// a strided walk through the whole matrix (minutes at MovieLens scale), over a column-major
/// one it is contiguous (and `x · w` goes through the packed matrix product either way).
fn matrix(
    features: &Features,
    ratings: &[Rating],
    ids: impl Fn(&Rating) -> IdFeatures,
) -> Result<Array2<f64>, RecError> {
    let mut x = Array2::zeros((ratings.len(), features.dim()).f());
    let mut row = vec![0.0; features.dim()];
    for (r, mut out) in ratings.iter().zip(x.rows_mut()) {
        row.fill(0.0);
        features.write_row(r.user, r.item, ids(r), &mut row)?;
        out.assign(&ArrayView1::from(&row));
    }
    Ok(x)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::hash::fnv1a64;

    /// 60 users who each like horror or comedy (said only in their knowledge), 40 movies
    /// that are horror or comedy (said only in theirs, every item listed as "Drama"), every
    /// user rating every movie: 5 for their genre, 2 otherwise, with one rating in ten
    /// flipped. Ids and profiles carry no signal, the texts all of it. Held out: one pair
    /// in ten, rotated by user so that every movie is also in training.
    pub(crate) fn synthetic() -> (Vec<Rating>, Vec<Rating>, Vec<User>, Vec<Item>, Knowledge) {
        let users: Vec<User> = (1..=60)
            .map(|id| User {
                id,
                age: 20 + id % 40,
                gender: if id % 2 == 0 { "F" } else { "M" }.into(),
                occupation: ["writer", "doctor", "student"][id as usize % 3].into(),
                zip_code: "00000".into(),
            })
            .collect();
        let items: Vec<Item> = (1..=40)
            .map(|id| Item {
                id,
                title: format!("Movie {id}"),
                year: Some(1990),
                genres: vec!["Drama".into()],
            })
            .collect();
        let horror_fan = |u: u32| (u * 7 + 3) % 5 < 2;
        let horror = |i: u32| (i * 3 + 1) % 4 < 2;
        let mut k = Knowledge::default();
        for u in &users {
            let genre = if horror_fan(u.id) { "horror" } else { "comedy" };
            k.users
                .insert(u.id, format!("This viewer is a big fan of {genre} movies."));
        }
        for i in &items {
            let genre = if horror(i.id) { "horror" } else { "comedy" };
            k.items
                .insert(i.id, format!("A {genre} film from the nineties."));
        }
        let (mut train, mut heldout) = (Vec::new(), Vec::new());
        for u in &users {
            for i in &items {
                let flip = fnv1a64(format!("{} {}", u.id, i.id).as_bytes()).is_multiple_of(10);
                let likes = (horror_fan(u.id) == horror(i.id)) != flip;
                let r = Rating {
                    user: u.id,
                    item: i.id,
                    rating: if likes { 5 } else { 2 },
                    timestamp: 0,
                };
                if (i.id + u.id) % 10 < 1 {
                    heldout.push(r)
                } else {
                    train.push(r)
                }
            }
        }
        (train, heldout, users, items, k)
    }

    fn small() -> CtrConfig {
        CtrConfig {
            text_buckets: 16,
            ..CtrConfig::default()
        }
    }

    #[test]
    fn knowledge_that_carries_the_label_raises_auc() {
        let (train, heldout, users, items, k) = synthetic();
        let none = evaluate_with(&small(), &train, &heldout, &users, &items, None).unwrap();
        let with = evaluate_with(&small(), &train, &heldout, &users, &items, Some(&k)).unwrap();
        assert!(none.auc < 0.65, "no knowledge: {none:?}");
        assert!(with.auc > 0.8, "with knowledge: {with:?}");
        assert!(with.log_loss < none.log_loss);
        assert_eq!((with.users_with_text, with.items_with_text), (60, 40));
        assert_eq!(with.features, none.features + 2 * 16 + 1);
    }

    #[test]
    fn the_check_is_deterministic() {
        let (train, heldout, users, items, k) = synthetic();
        let run = || evaluate_with(&small(), &train, &heldout, &users, &items, Some(&k)).unwrap();
        assert_eq!(run(), run());
    }

    #[test]
    fn missing_texts_give_empty_features_not_errors() {
        let (train, heldout, users, items, mut k) = synthetic();
        k.users.retain(|&id, _| id % 2 == 0);
        let m = evaluate_with(&small(), &train, &heldout, &users, &items, Some(&k)).unwrap();
        assert_eq!(m.users_with_text, 30);
        assert!(m.auc > 0.6, "{m:?}");
    }

    #[test]
    fn probabilities_are_of_a_high_rating_whichever_label_is_more_frequent() {
        let (_, _, users, mut items, _) = synthetic();
        // Liked exactly when the movie is a comedy, with comedies the majority or not.
        for comedies in [10, 30] {
            items.iter_mut().for_each(|i| {
                i.genres = vec![if i.id <= comedies { "Comedy" } else { "Horror" }.into()]
            });
            let ratings: Vec<Rating> = users
                .iter()
                .flat_map(|u| items.iter().map(move |i| (u.id, i.id)))
                .map(|(user, item)| {
                    let rating = if item <= comedies { 5 } else { 1 };
                    Rating {
                        user,
                        item,
                        rating,
                        timestamp: 0,
                    }
                })
                .collect();
            let (train, heldout): (Vec<Rating>, Vec<Rating>) = ratings
                .into_iter()
                .partition(|r| (r.user + r.item) % 10 != 0);
            let m = evaluate_with(&small(), &train, &heldout, &users, &items, None).unwrap();
            assert!(
                m.auc > 0.99 && m.log_loss < 0.1,
                "{comedies} comedies: {m:?}"
            );
        }
    }

    #[test]
    fn a_configuration_without_buckets_or_folds_is_refused() {
        let (train, heldout, users, items, _) = synthetic();
        for config in [
            CtrConfig {
                text_buckets: 0,
                ..CtrConfig::default()
            },
            CtrConfig {
                folds: 1,
                ..CtrConfig::default()
            },
        ] {
            let err = evaluate_with(&config, &train, &heldout, &users, &items, None);
            assert!(matches!(err, Err(RecError::Invalid(_))), "{config:?}");
        }
    }

    #[test]
    fn a_rating_of_an_unknown_item_is_an_error() {
        let (mut train, heldout, users, items, _) = synthetic();
        train[0].item = 999;
        let err = evaluate_with(&small(), &train, &heldout, &users, &items, None).unwrap_err();
        assert!(err.to_string().contains("item 999"), "{err}");
    }
}
