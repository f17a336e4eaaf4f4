//! The CTR model's feature row for a (user, item) pair: id encodings, profile fields and,
//! with knowledge, the two texts' hashed TF-IDF buckets (separate column blocks, so a word
//! in a user's text and the same word in an item's text are different features) and the
//! cosine similarity of the two texts, the one feature a linear model can use to match a
//! user's stated tastes with an item's description.

use std::collections::{BTreeSet, HashMap};

use super::encoding::IdFeatures;
use super::knowledge::Knowledge;
use super::tfidf::{SparseVec, TfIdf};
use crate::movielens::{Item, User};
use crate::RecError;

/// MovieLens-1M's age groups (under 18, 18-24, 25-34, 35-44, 45-49, 50-55, 56 and over),
/// the usual bucketing of MovieLens ages.
const AGE_EDGES: [u32; 6] = [18, 25, 35, 45, 50, 56];
const ID_COLUMNS: usize = 4;

fn age_bucket(age: u32) -> usize {
    AGE_EDGES.iter().filter(|&&edge| age >= edge).count()
}

/// One namespace's texts, vectorised once per id.
struct TextBlock {
    vectors: HashMap<u32, SparseVec>,
    buckets: HashMap<u32, Vec<f64>>,
}

impl TextBlock {
    fn new(texts: &HashMap<u32, String>, width: usize) -> TextBlock {
        // Ids in order, so that the IDF table is built the same way every run.
        let mut ids: Vec<u32> = texts.keys().copied().collect();
        ids.sort_unstable();
        let tfidf = TfIdf::fit(ids.iter().map(|id| texts[id].as_str()));
        let vectors: HashMap<u32, SparseVec> = ids
            .iter()
            .map(|&id| (id, tfidf.transform(&texts[&id])))
            .collect();
        let buckets = vectors
            .iter()
            .map(|(&id, v)| {
                let mut b = vec![0.0; width];
                v.fold_into(&mut b);
                (id, b)
            })
            .collect();
        TextBlock { vectors, buckets }
    }
}

/// Column layout and lookups, fixed from the side information and the knowledge.
pub(crate) struct Features<'a> {
    users: HashMap<u32, &'a User>,
    items: HashMap<u32, &'a Item>,
    occupations: Vec<&'a str>,
    genres: Vec<&'a str>,
    text: Option<(TextBlock, TextBlock)>,
    width: usize,
}

impl<'a> Features<'a> {
    pub fn new(
        users: &'a [User],
        items: &'a [Item],
        knowledge: Option<&Knowledge>,
        text_buckets: usize,
    ) -> Features<'a> {
        let occupations: BTreeSet<&str> = users.iter().map(|u| u.occupation.as_str()).collect();
        let genres: BTreeSet<&str> = items
            .iter()
            .flat_map(|i| i.genres.iter().map(String::as_str))
            .collect();
        Features {
            users: users.iter().map(|u| (u.id, u)).collect(),
            items: items.iter().map(|i| (i.id, i)).collect(),
            occupations: occupations.into_iter().collect(),
            genres: genres.into_iter().collect(),
            text: knowledge.map(|k| {
                (
                    TextBlock::new(&k.users, text_buckets),
                    TextBlock::new(&k.items, text_buckets),
                )
            }),
            width: text_buckets,
        }
    }

    pub fn dim(&self) -> usize {
        let profile = AGE_EDGES.len() + 1 + 1 + self.occupations.len() + self.genres.len();
        let text = if self.text.is_some() {
            2 * self.width + 1
        } else {
            0
        };
        ID_COLUMNS + profile + text
    }

    /// Writes the pair's features into `row` (of length [`Features::dim`], zeroed).
    pub fn write_row(
        &self,
        user_id: u32,
        item_id: u32,
        ids: IdFeatures,
        row: &mut [f64],
    ) -> Result<(), RecError> {
        let user = self.users.get(&user_id).ok_or_else(|| {
            RecError::Inconsistent(format!("a rating names user {user_id}, who has no profile"))
        })?;
        let item = self.items.get(&item_id).ok_or_else(|| {
            RecError::Inconsistent(format!("a rating names item {item_id}, which has no entry"))
        })?;
        row[..ID_COLUMNS].copy_from_slice(&[
            ids.user_rate,
            ids.item_rate,
            ids.user_log_count,
            ids.item_log_count,
        ]);
        let mut at = ID_COLUMNS;
        row[at + age_bucket(user.age)] = 1.0;
        at += AGE_EDGES.len() + 1;
        row[at] = f64::from(u8::from(user.gender == "F"));
        at += 1;
        if let Ok(k) = self.occupations.binary_search(&user.occupation.as_str()) {
            row[at + k] = 1.0;
        }
        at += self.occupations.len();
        for g in &item.genres {
            if let Ok(k) = self.genres.binary_search(&g.as_str()) {
                row[at + k] = 1.0;
            }
        }
        at += self.genres.len();
        if let Some((users, items)) = &self.text {
            // A missing text leaves its block at zero.
            for (block, id) in [(users, user_id), (items, item_id)] {
                if let Some(b) = block.buckets.get(&id) {
                    row[at..at + self.width].copy_from_slice(b);
                }
                at += self.width;
            }
            if let (Some(u), Some(i)) = (users.vectors.get(&user_id), items.vectors.get(&item_id)) {
                row[at] = u.dot(i);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_fall_into_the_movielens_buckets() {
        let buckets: Vec<usize> = [7, 17, 18, 24, 25, 44, 45, 50, 55, 56, 73]
            .into_iter()
            .map(age_bucket)
            .collect();
        assert_eq!(buckets, [0, 0, 1, 1, 2, 3, 4, 5, 5, 6, 6]);
    }
}
