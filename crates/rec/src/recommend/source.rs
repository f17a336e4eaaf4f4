//! Where a recommender's catalogue comes from: MovieLens-100k (fetched and cached), a file
//! of titles, or titles in memory. `specdec rec recommend` and `specdec serve --catalogue`
//! load it the same way.

use std::path::{Path, PathBuf};

use specdec_tokenizer::Tokenizer;
use specdec_workloads::DataDirs;

use super::catalogue::CACHE_SUBDIR;
use super::ItemCatalogue;
use crate::movielens::Dataset;
use crate::RecError;

/// A catalogue to load.
#[derive(Clone, Debug, PartialEq)]
pub enum CatalogueSource {
    /// MovieLens-100k's items, fetched into the data folder, the trie cached.
    MovieLens,
    /// A file of titles, one per line.
    File(PathBuf),
    /// Titles given directly (free titles, no item ids).
    Titles(Vec<String>),
}

impl CatalogueSource {
    /// `movielens` names MovieLens-100k; anything else is a titles file.
    pub fn parse(arg: &str) -> CatalogueSource {
        if arg.eq_ignore_ascii_case("movielens") {
            CatalogueSource::MovieLens
        } else {
            CatalogueSource::File(PathBuf::from(arg))
        }
    }

    /// A titles file when one is given, else MovieLens.
    pub fn file_or_movielens(file: Option<&Path>) -> CatalogueSource {
        file.map_or(CatalogueSource::MovieLens, |f| {
            CatalogueSource::File(f.to_path_buf())
        })
    }

    /// Builds the catalogue tokenized with `tok`: MovieLens is fetched on first use and its
    /// tokenized catalogue cached; a titles file is read afresh.
    pub fn load(&self, tok: &Tokenizer) -> Result<ItemCatalogue, RecError> {
        match self {
            CatalogueSource::MovieLens => {
                let dirs = DataDirs::from_env()?;
                let data = Dataset::fetch(&dirs)?;
                ItemCatalogue::from_dataset_cached(&data, tok, &dirs.cache.join(CACHE_SUBDIR))
            }
            CatalogueSource::File(f) => ItemCatalogue::from_file(f, tok),
            CatalogueSource::Titles(t) => ItemCatalogue::from_titles(t.clone(), tok),
        }
    }

    /// How logs name it.
    pub fn describe(&self) -> String {
        match self {
            CatalogueSource::MovieLens => "MovieLens-100k".into(),
            CatalogueSource::File(f) => f.display().to_string(),
            CatalogueSource::Titles(t) => format!("{} titles", t.len()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn movielens_is_named_any_case_and_anything_else_is_a_file() {
        assert_eq!(
            CatalogueSource::parse("MovieLens"),
            CatalogueSource::MovieLens
        );
        assert_eq!(
            CatalogueSource::parse("titles.txt"),
            CatalogueSource::File("titles.txt".into())
        );
        assert_eq!(
            CatalogueSource::file_or_movielens(None),
            CatalogueSource::MovieLens
        );
    }
}
