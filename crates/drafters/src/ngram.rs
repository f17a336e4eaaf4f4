//! An n-gram index over several documents: n-gram (hashed token ids) → occurrences,
//! most recent first, for n in `n_min..=n_max`. Documents can grow at the end (the live
//! context), so occurrences are kept as per-key linked lists in one arena: appending is
//! O(n_max) and allocates nothing per key.

use crate::hash::{extend_left, FastMap};

const NONE: u32 = u32::MAX;

/// Where an n-gram occurs: in document `doc`, ending just before position `end` (so the
/// token that followed it, if any, is `doc[end]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Occ {
    pub doc: u32,
    pub end: u32,
}

#[derive(Clone, Copy, Debug)]
struct Link {
    occ: Occ,
    next: u32,
}

#[derive(Debug, Default)]
pub(crate) struct NgramIndex {
    n_min: usize,
    n_max: usize,
    heads: FastMap<u64, u32>,
    links: Vec<Link>,
}

impl NgramIndex {
    pub fn new(n_min: usize, n_max: usize) -> Self {
        NgramIndex {
            n_min: n_min.max(1),
            n_max: n_max.max(n_min.max(1)),
            ..Default::default()
        }
    }

    pub fn clear(&mut self) {
        self.heads.clear();
        self.links.clear();
    }

    pub fn n_min(&self) -> usize {
        self.n_min
    }

    /// Indexes the n-grams that end at `doc[p]` (called for p = 0, 1, ... in order).
    pub fn add_position(&mut self, doc_id: u32, doc: &[u32], p: usize) {
        let mut key = 0u64;
        for n in 1..=self.n_max.min(p + 1) {
            key = extend_left(key, doc[p + 1 - n]);
            if n >= self.n_min {
                let id = self.links.len() as u32;
                let head = self.heads.entry(key).or_insert(NONE);
                self.links.push(Link {
                    occ: Occ {
                        doc: doc_id,
                        end: (p + 1) as u32,
                    },
                    next: *head,
                });
                *head = id;
            }
        }
    }

    pub fn add_doc(&mut self, doc_id: u32, doc: &[u32]) {
        for p in 0..doc.len() {
            self.add_position(doc_id, doc, p);
        }
    }

    /// Keys of the suffixes of `tokens` of length 1..=n_max (index n-1), as looked up.
    pub fn suffix_keys(&self, tokens: &[u32], keys: &mut Vec<u64>) {
        keys.clear();
        let mut key = 0u64;
        for &t in tokens.iter().rev().take(self.n_max) {
            key = extend_left(key, t);
            keys.push(key);
        }
    }

    /// Occurrences recorded under `key`, most recent first. Hash collisions are possible:
    /// callers compare the tokens.
    pub fn occurrences(&self, key: u64) -> impl Iterator<Item = Occ> + '_ {
        let mut i = self.heads.get(&key).copied().unwrap_or(NONE);
        std::iter::from_fn(move || {
            if i == NONE {
                return None;
            }
            let l = self.links[i as usize];
            i = l.next;
            Some(l.occ)
        })
    }
}
