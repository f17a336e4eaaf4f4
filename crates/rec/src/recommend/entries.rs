//! What a catalogue is made of before tokenization, shared by the catalogue and its cache
//! file (which is keyed by it).

use std::collections::HashMap;

use crate::movielens::Dataset;

/// What a catalogue is made of before tokenization: distinct titles, each with its ids.
pub(super) struct Entries {
    pub(super) titles: Vec<String>,
    pub(super) item_ids: Vec<Vec<u32>>,
}

impl Entries {
    pub(super) fn of_dataset(data: &Dataset) -> Self {
        Self::merge(data.items.iter().map(|i| (i.title_with_year(), Some(i.id))))
    }

    pub(super) fn of_titles(titles: Vec<String>) -> Self {
        let titles = titles.into_iter().filter_map(|t| {
            let t = t.trim();
            (!t.is_empty()).then(|| (t.to_string(), None))
        });
        Self::merge(titles)
    }

    /// Entries in order of first appearance; a title seen again adds its id to the first.
    fn merge(pairs: impl Iterator<Item = (String, Option<u32>)>) -> Self {
        let mut index: HashMap<String, usize> = HashMap::new();
        let mut out = Entries {
            titles: Vec::new(),
            item_ids: Vec::new(),
        };
        for (title, id) in pairs {
            let e = *index.entry(title.clone()).or_insert_with(|| {
                out.titles.push(title);
                out.item_ids.push(Vec::new());
                out.titles.len() - 1
            });
            out.item_ids[e].extend(id);
        }
        for ids in &mut out.item_ids {
            ids.sort_unstable();
            ids.dedup();
        }
        out
    }
}
