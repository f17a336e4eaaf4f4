//! Recall@K and NDCG@K with one held-out target per user (docs/recsys.md): the target's
//! catalogue entry at 1-based rank `r <= K` of the recommended list scores recall 1 and
//! NDCG `1 / log2(r + 1)` (the ideal DCG of a single relevant item is 1); anywhere else, or
//! a target the catalogue does not know, scores 0 for both. Means are over users.

use super::ItemCatalogue;

/// The 1-based rank of `target_entry` in `ranked` (its first occurrence), if listed.
pub fn rank_of(ranked: &[usize], target_entry: usize) -> Option<usize> {
    ranked
        .iter()
        .position(|&e| e == target_entry)
        .map(|i| i + 1)
}

/// Recall@K of one user: 1 if the target is within the first `k`.
pub fn recall_at(rank: Option<usize>, k: usize) -> f64 {
    match rank {
        Some(r) if r <= k => 1.0,
        _ => 0.0,
    }
}

/// NDCG@K of one user: `1 / log2(rank + 1)` if the target is within the first `k`.
pub fn ndcg_at(rank: Option<usize>, k: usize) -> f64 {
    match rank {
        Some(r) if r <= k => 1.0 / ((r + 1) as f64).log2(),
        _ => 0.0,
    }
}

/// Sums of Recall@K and NDCG@K over users, for a fixed set of cut-offs.
#[derive(Clone, Debug, PartialEq)]
pub struct RankingMetrics {
    ks: Vec<usize>,
    recall: Vec<f64>,
    ndcg: Vec<f64>,
    users: usize,
}

impl RankingMetrics {
    /// Cut-offs `ks`, e.g. `&[5, 10]`.
    pub fn new(ks: &[usize]) -> Self {
        RankingMetrics {
            ks: ks.to_vec(),
            recall: vec![0.0; ks.len()],
            ndcg: vec![0.0; ks.len()],
            users: 0,
        }
    }

    /// Adds one user: `ranked` catalogue entries, best first, and the held-out item id.
    /// Returns the target's rank, if listed.
    pub fn add(
        &mut self,
        catalogue: &ItemCatalogue,
        ranked: &[usize],
        target_item: u32,
    ) -> Option<usize> {
        let rank = catalogue
            .entry_of_item(target_item)
            .and_then(|e| rank_of(ranked, e));
        self.add_rank(rank);
        rank
    }

    /// Adds one user whose target's rank is already known (`None`: not listed).
    pub fn add_rank(&mut self, rank: Option<usize>) {
        for (i, &k) in self.ks.iter().enumerate() {
            self.recall[i] += recall_at(rank, k);
            self.ndcg[i] += ndcg_at(rank, k);
        }
        self.users += 1;
    }

    /// Users added so far.
    pub fn users(&self) -> usize {
        self.users
    }

    /// The cut-offs k the metrics are kept at.
    pub fn ks(&self) -> &[usize] {
        &self.ks
    }

    /// Mean Recall@k over the users added (0 with none); `None` when `k` is not a cut-off.
    pub fn recall(&self, k: usize) -> Option<f64> {
        self.mean(&self.recall, k)
    }

    /// Mean NDCG@k over the users added (0 with none); `None` when `k` is not a cut-off.
    pub fn ndcg(&self, k: usize) -> Option<f64> {
        self.mean(&self.ndcg, k)
    }

    fn mean(&self, sums: &[f64], k: usize) -> Option<f64> {
        let i = self.ks.iter().position(|&c| c == k)?;
        Some(if self.users == 0 {
            0.0
        } else {
            sums[i] / self.users as f64
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recommend::catalogue::tests::{bytes_tokenizer, tiny_dataset};

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn single_user_values_by_hand() {
        assert_eq!(rank_of(&[4, 7, 2, 7], 7), Some(2));
        assert_eq!(rank_of(&[4, 7], 3), None);
        assert_eq!(recall_at(Some(1), 5), 1.0);
        assert_eq!(recall_at(Some(5), 5), 1.0);
        assert_eq!(recall_at(Some(6), 5), 0.0);
        assert_eq!(recall_at(None, 10), 0.0);
        assert_eq!(ndcg_at(Some(1), 5), 1.0);
        // 1 / log2(3) = 0.6309..., 1 / log2(4) = 0.5.
        assert!(close(ndcg_at(Some(2), 5), 0.630_929_753_571_457_4));
        assert_eq!(ndcg_at(Some(3), 5), 0.5);
        assert_eq!(ndcg_at(Some(7), 10), 1.0 / 3.0);
        assert_eq!(ndcg_at(Some(7), 5), 0.0);
    }

    #[test]
    fn the_accumulator_averages_over_users_and_maps_shared_ids() {
        let cat = ItemCatalogue::from_dataset(&tiny_dataset(), &bytes_tokenizer()).unwrap();
        let mut m = RankingMetrics::new(&[1, 3]);
        assert_eq!(m.recall(1), Some(0.0));
        // Entries: 0 Toy Story (items 1 and 5), 1 Ice Storm (2), 2 unkonwn (3), 3 Chasing Amy (4).
        assert_eq!(m.add(&cat, &[1, 0, 3], 5), Some(2)); // item 5 is entry 0, rank 2
        assert_eq!(m.add(&cat, &[3, 0], 4), Some(1));
        assert_eq!(m.add(&cat, &[0, 1, 2, 3], 4), Some(4)); // beyond both cut-offs
        assert_eq!(m.add(&cat, &[0], 99), None); // unknown item
        assert_eq!(m.users(), 4);
        assert_eq!(m.recall(1), Some(0.25));
        assert_eq!(m.recall(3), Some(0.5));
        assert_eq!(m.ndcg(1), Some(0.25));
        assert!(close(m.ndcg(3).unwrap(), (1.0 / 3f64.log2() + 1.0) / 4.0));
        assert_eq!(m.recall(5), None);
    }
}
