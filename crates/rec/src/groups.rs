//! Groups (docs/recsys.md): users clustered by behaviour, items by their first listed genre; each
//! group's members split deterministically into warm-up and target members.
//!
//! **Users.** The rating matrix of the *training* interactions (users x items, the rating where
//! there is one, 0 elsewhere) has each row scaled to unit length, so that clusters reflect what
//! users rate and how, not how much they rate; its PCA scores on the first
//! [`USER_COMPONENTS`] components are the users' collaborative embeddings, and linfa's k-means
//! (k-means++, seeded, 10 runs) clusters them. Clusters are numbered by their smallest user id.
//!
//! **Same groups on every machine.** k-means on floating-point data can move a borderline
//! user when the inputs differ in their last bits, and they do when a kernel picks its SIMD
//! path at run time (matrixmultiply, behind `ndarray::dot`, does). So: everything is f64;
//! the Gram matrix `X Xᵀ` is summed here in a fixed order rather than by `ndarray::dot`; the
//! PCA comes from linfa-linalg's symmetric eigensolver (Householder tridiagonalisation and QR
//! iterations to machine precision, not a randomised or tolerance-stopped method such as
//! LOBPCG, whose iteration count could change with the last bits); the number of components
//! sits at a clear gap in the spectrum, so the kept subspace does not rotate; each
//! component's sign is fixed (its largest entry positive); and the scores are rounded to
//! multiples of [`SCORE_QUANTUM`] before k-means, which then sees bit-identical inputs and
//! runs the same arithmetic (no run-time dispatch on its path). What remains: the
//! eigensolver's rank-one updates do go through matrixmultiply, so its results may differ
//! by ~1e-13 between CPUs; a score that close to a rounding boundary (about one chance in a
//! thousand over all 943 x 7 scores) moves by one quantum, which changes a cluster only if
//! that user also sits within ~1e-6 of a cluster boundary. The real-data test pins the
//! cluster sizes so that such a change would show.
//!
//! **Items.** The first listed genre (recbole lists an item's genres alphabetically) picks one
//! of the groups of [`ITEM_GROUPS`]; the mapping merges related genres so that no group is tiny.

use linfa::traits::{Fit, Predict};
use linfa::DatasetBase;
use linfa_clustering::KMeans;
use linfa_linalg::eigh::{EigSort, EighInto};
use ndarray::{Array1, Array2, Axis};
use rand_xoshiro::rand_core::SeedableRng;
use rand_xoshiro::Xoshiro256Plus;
use serde::Serialize;
use specdec_engine::PoolName;

use crate::movielens::Dataset;
use crate::split::Split;
use crate::{Kind, RecError, Role};

/// User groups (k-means clusters) when not told otherwise.
pub const DEFAULT_USER_CLUSTERS: usize = 3;
/// Share of each group's members that are warm-up members when not told otherwise.
pub const DEFAULT_WARMUP_FRACTION: f64 = 0.5;
/// The k-means seed (docs/recsys.md: seeded).
pub const USER_CLUSTER_SEED: u64 = 42;
/// Low rank of the user embeddings: on MovieLens-100k the spectrum has a clear gap after the
/// 7th component (eigenvalues 10.9 then 8.8, a ratio of 1.24, where the 8th and 9th differ
/// by 1%), so the kept subspace is well defined.
pub const USER_COMPONENTS: usize = 7;
/// PCA scores are rounded to multiples of this before k-means (see the module docs).
pub const SCORE_QUANTUM: f64 = 1e-6;

/// Item groups by first listed genre; genres not listed (and items without one) go to
/// `items-other`.
pub const ITEM_GROUPS: &[(&str, &[&str])] = &[
    ("items-drama", &["Drama", "Romance", "War"]),
    ("items-comedy", &["Comedy"]),
    (
        "items-action",
        &["Action", "Adventure", "Sci-Fi", "Fantasy", "Western"],
    ),
    (
        "items-suspense",
        &["Crime", "Horror", "Thriller", "Mystery", "Film-Noir"],
    ),
    ("items-family", &["Children's", "Animation", "Musical"]),
    ("items-other", &["Documentary", "unknown"]),
];

/// The share of each group's members that are warm-up members: a number from 0 to 1.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd, Serialize)]
pub struct WarmupFraction(f64);

impl WarmupFraction {
    /// `fraction` if it is between 0 and 1 (inclusive), else an invalid-option error.
    pub fn new(fraction: f64) -> Result<Self, RecError> {
        if (0.0..=1.0).contains(&fraction) {
            Ok(WarmupFraction(fraction))
        } else {
            Err(RecError::Invalid(format!(
                "warm-up fraction {fraction} is not between 0 and 1"
            )))
        }
    }

    /// The fraction.
    pub fn get(self) -> f64 {
        self.0
    }

    /// Warm-up members of a group of `n`, rounded to the nearest whole member.
    fn of(self, n: usize) -> usize {
        ((n as f64 * self.0).round() as usize).min(n)
    }
}

impl std::fmt::Display for WarmupFraction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl Default for WarmupFraction {
    fn default() -> Self {
        WarmupFraction(DEFAULT_WARMUP_FRACTION)
    }
}

/// One group: a drafting pool's name and its members.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    /// The group's name, also the drafting pool its members read and feed.
    pub name: PoolName,
    /// Whether the members are users or items.
    pub kind: Kind,
    /// User or item ids in the group's deterministic order (a stable hash of the id): the
    /// first `warmup` are warm-up members, the rest target members.
    pub members: Vec<u32>,
    /// How many of `members` are warm-up members.
    pub warmup: usize,
}

impl Group {
    fn new(name: &str, kind: Kind, mut members: Vec<u32>, warmup: WarmupFraction) -> Self {
        members.sort_by_key(|&id| (stable_hash(id), id));
        Group {
            name: PoolName::parse(name).expect("group names are valid pool names"),
            kind,
            warmup: warmup.of(members.len()),
            members,
        }
    }

    /// The warm-up members: generated first, filling the pool.
    pub fn warmup_members(&self) -> &[u32] {
        &self.members[..self.warmup]
    }

    /// The target members: generated after the warm-up, timed and compared.
    pub fn target_members(&self) -> &[u32] {
        &self.members[self.warmup..]
    }

    /// Members with their roles, in the group's order.
    pub fn roles(&self) -> impl Iterator<Item = (u32, Role)> + '_ {
        let role = |i| {
            if i < self.warmup {
                Role::Warmup
            } else {
                Role::Target
            }
        };
        self.members
            .iter()
            .enumerate()
            .map(move |(i, &id)| (id, role(i)))
    }
}

/// SplitMix64's finaliser: a fixed, well-mixed order of ids that does not follow the id
/// order (low ids are the oldest MovieLens users and the most popular movies).
fn stable_hash(id: u32) -> u64 {
    let mut z = u64::from(id).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// How the user clusters were made, for `groups.json`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct UserClustering {
    /// A description of the method (embedding and clustering).
    pub method: &'static str,
    /// Clusters (user groups) made.
    pub clusters: usize,
    /// PCA components kept ([`USER_COMPONENTS`]).
    pub components: usize,
    /// The k-means seed ([`USER_CLUSTER_SEED`]).
    pub seed: u64,
    /// What PCA scores were rounded to ([`SCORE_QUANTUM`]).
    pub score_quantum: f64,
    /// Share of the total variance the kept components explain.
    pub explained_variance: f64,
    /// The last kept eigenvalue over the first dropped one: near 1 would make the embedding
    /// fragile (see the module docs).
    pub eigen_gap: f64,
    /// k-means' sum of squared distances to the centroids.
    pub inertia: f64,
}

/// User groups `users-0` .. from the training interactions.
pub fn user_groups(
    data: &Dataset,
    split: &Split,
    clusters: usize,
    warmup: WarmupFraction,
) -> Result<(Vec<Group>, UserClustering), RecError> {
    let n = data.users.len();
    if clusters == 0 || clusters > n {
        return Err(RecError::Invalid(format!(
            "{clusters} user clusters for {n} users"
        )));
    }
    let components = USER_COMPONENTS.min(n.saturating_sub(1)).max(1);
    let (scores, explained_variance, eigen_gap) = user_embeddings(data, split, components)?;
    let dataset = DatasetBase::from(scores.clone());
    let model = KMeans::params_with_rng(clusters, Xoshiro256Plus::seed_from_u64(USER_CLUSTER_SEED))
        .n_runs(10)
        .max_n_iterations(300)
        .tolerance(1e-9)
        .fit(&dataset)
        .map_err(|e| RecError::Clustering(e.to_string()))?;
    let labels: Array1<usize> = model.predict(&scores);

    // Number clusters by their smallest member: users are in id order, so by first sight.
    let mut number = vec![None; clusters];
    let mut members: Vec<Vec<u32>> = Vec::new();
    for (user, &label) in data.users.iter().zip(labels.iter()) {
        let k = *number[label].get_or_insert_with(|| {
            members.push(Vec::new());
            members.len() - 1
        });
        members[k].push(user.id);
    }
    let groups = members
        .into_iter()
        .enumerate()
        .map(|(k, ids)| Group::new(&format!("users-{k}"), Kind::User, ids, warmup))
        .collect();
    let summary = UserClustering {
        method: "k-means++ (linfa) on PCA scores of the row-normalised training rating matrix",
        clusters,
        components,
        seed: USER_CLUSTER_SEED,
        score_quantum: SCORE_QUANTUM,
        explained_variance,
        eigen_gap,
        inertia: model.inertia(),
    };
    Ok((groups, summary))
}

/// PCA scores (users x `components`), rounded; with the explained variance and eigen-gap.
fn user_embeddings(
    data: &Dataset,
    split: &Split,
    components: usize,
) -> Result<(Array2<f64>, f64, f64), RecError> {
    let (n, m) = (data.users.len(), data.items.len());
    let mut x = Array2::<f64>::zeros((n, m));
    for r in &split.train {
        let (Some(u), Some(i)) = (user_index(data, r.user), item_index(data, r.item)) else {
            continue; // `Dataset` guarantees both exist
        };
        x[[u, i]] = f64::from(r.rating);
    }
    for mut row in x.rows_mut() {
        let norm = row.iter().map(|v| v * v).sum::<f64>().sqrt();
        if norm > 0.0 {
            row /= norm;
        }
    }
    for mut column in x.columns_mut() {
        let mean = column.iter().sum::<f64>() / n as f64;
        column -= mean;
    }
    let gram = gram(&x);
    let total: f64 = gram.diag().iter().sum();
    let (values, vectors) = gram
        .eigh_into()
        .map_err(|e| RecError::Clustering(e.to_string()))?
        .sort_eig_desc();
    let kept: f64 = values.iter().take(components).sum();
    let next = values.get(components).copied().unwrap_or(0.0);
    let eigen_gap = values[components - 1] / next.max(f64::MIN_POSITIVE);

    let mut scores = Array2::<f64>::zeros((n, components));
    for (j, mut out) in scores.axis_iter_mut(Axis(1)).enumerate() {
        let v = vectors.column(j);
        let largest = v
            .iter()
            .copied()
            .fold(0.0f64, |a, b| if b.abs() > a.abs() { b } else { a });
        let scale = values[j].max(0.0).sqrt() * largest.signum();
        for (o, &e) in out.iter_mut().zip(v.iter()) {
            *o = (e * scale / SCORE_QUANTUM).round() * SCORE_QUANTUM;
        }
    }
    Ok((scores, kept / total.max(f64::MIN_POSITIVE), eigen_gap))
}

/// `x xᵀ`, each entry a plain left-to-right sum so that it is the same on every CPU.
fn gram(x: &Array2<f64>) -> Array2<f64> {
    let n = x.nrows();
    let mut g = Array2::<f64>::zeros((n, n));
    for i in 0..n {
        let a = x.row(i);
        for j in 0..=i {
            let b = x.row(j);
            let dot: f64 = a.iter().zip(b.iter()).map(|(p, q)| p * q).sum();
            g[[i, j]] = dot;
            g[[j, i]] = dot;
        }
    }
    g
}

fn user_index(data: &Dataset, id: u32) -> Option<usize> {
    data.users.binary_search_by_key(&id, |u| u.id).ok()
}

fn item_index(data: &Dataset, id: u32) -> Option<usize> {
    data.items.binary_search_by_key(&id, |i| i.id).ok()
}

/// The item group of a first listed genre.
pub fn genre_group(first_genre: Option<&str>) -> &'static str {
    ITEM_GROUPS
        .iter()
        .find(|(_, genres)| first_genre.is_some_and(|g| genres.contains(&g)))
        .map_or("items-other", |(name, _)| name)
}

/// Item groups in [`ITEM_GROUPS`] order; empty groups are left out.
pub fn item_groups(data: &Dataset, warmup: WarmupFraction) -> Vec<Group> {
    ITEM_GROUPS
        .iter()
        .filter_map(|(name, _)| {
            let ids: Vec<u32> = data
                .items
                .iter()
                .filter(|it| genre_group(it.genres.first().map(String::as_str)) == *name)
                .map(|it| it.id)
                .collect();
            (!ids.is_empty()).then(|| Group::new(name, Kind::Item, ids, warmup))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::movielens::{Item, Rating, User};

    #[test]
    fn genres_map_onto_the_documented_groups() {
        assert_eq!(genre_group(Some("Romance")), "items-drama");
        assert_eq!(genre_group(Some("Film-Noir")), "items-suspense");
        assert_eq!(genre_group(Some("Animation")), "items-family");
        assert_eq!(genre_group(Some("Kung-Fu")), "items-other");
        assert_eq!(genre_group(None), "items-other");
        for (name, _) in ITEM_GROUPS {
            PoolName::parse(name).unwrap();
        }
    }

    #[test]
    fn warmup_members_come_first_in_a_fixed_order() {
        let g = Group::new("g", Kind::User, (1..=9).collect(), WarmupFraction(0.5));
        assert_eq!(g.warmup, 5); // 4.5 rounds up
        let again = Group::new(
            "g",
            Kind::User,
            (1..=9).rev().collect(),
            WarmupFraction(0.5),
        );
        assert_eq!(g, again);
        assert_ne!(g.members, (1..=9).collect::<Vec<_>>(), "not id order");
        let roles: Vec<Role> = g.roles().map(|(_, r)| r).collect();
        assert_eq!(roles.iter().filter(|r| **r == Role::Warmup).count(), 5);
        assert!(roles[..5].iter().all(|r| *r == Role::Warmup));
        assert_eq!(g.target_members().len(), 4);
        assert!(WarmupFraction::new(1.5).is_err() && WarmupFraction::new(f64::NAN).is_err());
    }

    /// Two obvious tastes: users 1-3 rate items 1-3 high, users 4-6 rate items 4-6 high.
    fn two_tastes() -> Dataset {
        let users = (1..=6)
            .map(|id| User {
                id,
                age: 30,
                gender: "F".into(),
                occupation: "other".into(),
                zip_code: "0".into(),
            })
            .collect();
        let items = (1..=6)
            .map(|id| Item {
                id,
                title: format!("Movie {id}"),
                year: Some(1990),
                genres: vec!["Drama".into()],
            })
            .collect();
        let mut ratings = Vec::new();
        for user in 1..=6u32 {
            let liked = if user <= 3 { 1..=3 } else { 4..=6 };
            for (t, item) in liked.enumerate() {
                let rating = 5;
                ratings.push(Rating {
                    user,
                    item,
                    rating,
                    timestamp: t as u64,
                });
            }
            // Two more for the validation and test targets.
            for t in 10..12 {
                ratings.push(Rating {
                    user,
                    item: 1,
                    rating: 1,
                    timestamp: t,
                });
            }
        }
        Dataset::from_parts(users, items, ratings).unwrap()
    }

    #[test]
    fn users_with_the_same_taste_share_a_cluster_numbered_by_smallest_id() {
        let data = two_tastes();
        let split = Split::leave_last_out(&data);
        let (groups, summary) = user_groups(&data, &split, 2, WarmupFraction(0.5)).unwrap();
        let mut sets: Vec<Vec<u32>> = groups.iter().map(|g| g.members.clone()).collect();
        for s in &mut sets {
            s.sort();
        }
        assert_eq!(sets, [vec![1, 2, 3], vec![4, 5, 6]]);
        assert_eq!(groups[0].name.as_str(), "users-0");
        assert_eq!(summary.clusters, 2);
        assert!(user_groups(&data, &split, 0, WarmupFraction(0.5)).is_err());
    }
}
