//! Knowledge texts as TF-IDF vectors over hashed words, and their fold into a few hundred
//! signed buckets (the hashing trick) for a dense model.

use std::collections::HashMap;

use crate::hash::fnv1a64;

/// Lowercased runs of letters and digits.
pub fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
}

/// A text's TF-IDF vector: (word hash, weight) sorted by hash, L2-normalised (empty for
/// an empty or missing text).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SparseVec(pub Vec<(u64, f64)>);

impl SparseVec {
    /// Dot product (the cosine similarity, both being normalised).
    pub fn dot(&self, other: &SparseVec) -> f64 {
        let (mut i, mut j, mut sum) = (0, 0, 0.0);
        let (a, b) = (&self.0, &other.0);
        while i < a.len() && j < b.len() {
            match a[i].0.cmp(&b[j].0) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    sum += a[i].1 * b[j].1;
                    i += 1;
                    j += 1;
                }
            }
        }
        sum
    }

    /// Adds the vector into `out`'s buckets: bucket `hash % len`, sign from the hash's top
    /// bit, so that colliding words cancel on average instead of piling up.
    pub fn fold_into(&self, out: &mut [f64]) {
        let n = out.len() as u64;
        for &(h, w) in &self.0 {
            let sign = if h >> 63 == 1 { -1.0 } else { 1.0 };
            out[(h % n) as usize] += sign * w;
        }
    }
}

/// Inverse document frequencies fitted on one namespace's texts (all users' or all items'
/// knowledge: unsupervised, so fitting on every text leaks no label).
#[derive(Clone, Debug, Default)]
pub struct TfIdf {
    idf: HashMap<u64, f64>,
    /// The IDF of a word seen in no fitted text.
    unseen_idf: f64,
}

impl TfIdf {
    /// Smoothed IDF, `ln((1 + N) / (1 + df)) + 1`, as scikit-learn's default.
    pub fn fit<'a>(texts: impl IntoIterator<Item = &'a str>) -> TfIdf {
        let mut df: HashMap<u64, usize> = HashMap::new();
        let mut n = 0usize;
        for text in texts {
            n += 1;
            let mut seen: Vec<u64> = words(text).map(|w| fnv1a64(w.as_bytes())).collect();
            seen.sort_unstable();
            seen.dedup();
            for h in seen {
                *df.entry(h).or_default() += 1;
            }
        }
        let idf = |df: usize| ((1 + n) as f64 / (1 + df) as f64).ln() + 1.0;
        TfIdf {
            idf: df.into_iter().map(|(h, d)| (h, idf(d))).collect(),
            unseen_idf: idf(0),
        }
    }

    /// Sublinear term frequency (`1 + ln tf`: a word said ten times is not ten times the
    /// evidence) times IDF, L2-normalised.
    pub fn transform(&self, text: &str) -> SparseVec {
        let mut hashes: Vec<u64> = words(text).map(|w| fnv1a64(w.as_bytes())).collect();
        hashes.sort_unstable();
        let mut v: Vec<(u64, f64)> = Vec::new();
        for chunk in hashes.chunk_by(|a, b| a == b) {
            let h = chunk[0];
            let tf = 1.0 + (chunk.len() as f64).ln();
            v.push((h, tf * self.idf.get(&h).copied().unwrap_or(self.unseen_idf)));
        }
        let norm = v.iter().map(|(_, w)| w * w).sum::<f64>().sqrt();
        if norm > 0.0 {
            v.iter_mut().for_each(|(_, w)| *w /= norm);
        }
        SparseVec(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_lowercased_alphanumeric_runs() {
        let w: Vec<String> = words("Film-Noir, 1940s; (SLOW) burn!").collect();
        assert_eq!(w, ["film", "noir", "1940s", "slow", "burn"]);
    }

    #[test]
    fn hashed_features_are_deterministic_and_normalised() {
        let texts = ["a dark noir thriller", "a bright comedy", "a noir comedy"];
        let fit = || TfIdf::fit(texts);
        let (a, b) = (fit().transform(texts[2]), fit().transform(texts[2]));
        assert_eq!(a, b);
        assert!((a.dot(&a) - 1.0).abs() < 1e-12);
        let mut buckets = [0.0; 8];
        a.fold_into(&mut buckets);
        let mut again = [0.0; 8];
        b.fold_into(&mut again);
        assert_eq!(buckets, again);
        assert!(buckets.iter().any(|&x| x != 0.0));
    }

    #[test]
    fn a_rarer_word_weighs_more_and_shared_words_make_texts_similar() {
        let texts = ["a noir", "a comedy", "a drama", "a noir"];
        let tfidf = TfIdf::fit(texts);
        let v = tfidf.transform("a noir");
        let weight = |word: &str| {
            v.0.iter()
                .find(|(h, _)| *h == fnv1a64(word.as_bytes()))
                .unwrap()
                .1
        };
        assert!(weight("noir") > weight("a"));
        let noir = tfidf.transform("noir");
        assert!(noir.dot(&v) > tfidf.transform("comedy").dot(&v));
        assert_eq!(tfidf.transform("").0, vec![]);
    }
}
