//! The item catalogue of generative recommendation (docs/recsys.md, "Generative recommendation"):
//! one entry per distinct identifier `movie_title (release_year)`, naming every item id
//! that carries it, tokenized once in the position the model writes it (after the prompt's
//! `M.`: a leading space, the identifier, then the newline as the end token).
//!
//! Identifiers are [`Item::title_with_year`](crate::movielens::Item::title_with_year):
//! titles as written (leading articles moved to the end are kept), and the bare title when
//! recbole has no year (item 267 `unkonwn`; item 1412, whose title already ends in
//! `(1995)`). The 18 strings shared by two ids make 1,664 entries out of 1,682 items.
//!
//! In-position tokenization: the entry is `encode(" " + identifier)` followed by the token
//! of `"\n"` rather than `encode(" " + identifier + "\n")`. The two agree for every
//! MovieLens title with SmolLM2 (its pre-tokenizer never joins a newline to the text
//! before it; checked in tests/real/catalogue_real.rs); the split form is used so that the end
//! token is the same for every entry whatever the tokenizer.

use std::collections::HashMap;
use std::path::Path;

use specdec_engine::beam::Catalogue;
use specdec_tokenizer::Tokenizer;

use crate::error::{io, RecError};
use crate::movielens::Dataset;

use super::cache::{cache_name, read_cache, write_cache};
use super::entries::Entries;

/// The folder under the data cache (`DataDirs::cache`) where catalogues are cached.
pub const CACHE_SUBDIR: &str = "catalogue";

/// The catalogue: titles, their item ids, and the trie over their token sequences.
#[derive(Clone, Debug)]
pub struct ItemCatalogue {
    trie: std::sync::Arc<Catalogue>,
    titles: Vec<String>,
    /// Per entry, its item ids ascending (empty for a catalogue read from titles alone).
    item_ids: Vec<Vec<u32>>,
    by_title: HashMap<String, usize>,
    by_item: HashMap<u32, usize>,
    end_token: u32,
}

impl ItemCatalogue {
    /// The MovieLens catalogue: every item of `data`, an entry per distinct identifier, in
    /// order of each identifier's lowest item id.
    pub fn from_dataset(data: &Dataset, tok: &Tokenizer) -> Result<Self, RecError> {
        Self::build(Entries::of_dataset(data), tok, None)
    }

    /// Like [`from_dataset`](Self::from_dataset), reusing (or writing) a cache file in
    /// `cache_dir` (usually `DataDirs::cache` joined with [`CACHE_SUBDIR`]).
    pub fn from_dataset_cached(
        data: &Dataset,
        tok: &Tokenizer,
        cache_dir: &Path,
    ) -> Result<Self, RecError> {
        Self::build(Entries::of_dataset(data), tok, Some(cache_dir))
    }

    /// A catalogue of free titles (no item ids): each is trimmed, blank ones are skipped,
    /// and a title given twice is one entry.
    pub fn from_titles(titles: Vec<String>, tok: &Tokenizer) -> Result<Self, RecError> {
        Self::build(Entries::of_titles(titles), tok, None)
    }

    /// [`from_titles`](Self::from_titles) with a cache in `cache_dir`.
    pub fn from_titles_cached(
        titles: Vec<String>,
        tok: &Tokenizer,
        cache_dir: &Path,
    ) -> Result<Self, RecError> {
        Self::build(Entries::of_titles(titles), tok, Some(cache_dir))
    }

    /// A file of titles, one per line (see [`from_titles`](Self::from_titles)).
    pub fn from_file(path: &Path, tok: &Tokenizer) -> Result<Self, RecError> {
        Self::from_titles(read_titles(path)?, tok)
    }

    fn build(entries: Entries, tok: &Tokenizer, cache: Option<&Path>) -> Result<Self, RecError> {
        if entries.titles.is_empty() {
            return Err(RecError::Invalid("the catalogue has no titles".into()));
        }
        let end_token = end_token(tok)?;
        let path = cache.map(|dir| dir.join(cache_name(&entries, tok)));
        let cached = path
            .as_deref()
            .and_then(|p| read_cache(p, &entries, end_token));
        let tokens = match cached {
            Some(tokens) => tokens,
            None => {
                let tokens = tokenize(&entries, tok, end_token)?;
                if let Some(p) = &path {
                    write_cache(p, &entries, &tokens);
                }
                tokens
            }
        };
        Self::assemble(entries, tokens, end_token)
    }

    fn assemble(entries: Entries, tokens: Vec<Vec<u32>>, end_token: u32) -> Result<Self, RecError> {
        let trie = Catalogue::new(tokens)?;
        if trie.len() != entries.titles.len() {
            return Err(RecError::Inconsistent(format!(
                "{} distinct titles tokenize to {} distinct sequences",
                entries.titles.len(),
                trie.len()
            )));
        }
        let by_title = (entries.titles.iter().enumerate())
            .map(|(e, t)| (t.clone(), e))
            .collect();
        let by_item = (entries.item_ids.iter().enumerate())
            .flat_map(|(e, ids)| ids.iter().map(move |&id| (id, e)))
            .collect();
        Ok(ItemCatalogue {
            trie: std::sync::Arc::new(trie),
            titles: entries.titles,
            item_ids: entries.item_ids,
            by_title,
            by_item,
            end_token,
        })
    }

    /// The trie; its entry `e` is this catalogue's entry `e`.
    pub fn trie(&self) -> &Catalogue {
        &self.trie
    }

    /// The trie, shared: what a search the scheduler runs holds while it runs.
    pub fn shared_trie(&self) -> std::sync::Arc<Catalogue> {
        self.trie.clone()
    }

    /// Number of entries (distinct titles).
    pub fn len(&self) -> usize {
        self.titles.len()
    }

    /// Whether the catalogue has no entry.
    pub fn is_empty(&self) -> bool {
        self.titles.is_empty()
    }

    /// Entry `e`'s identifier, e.g. `Toy Story (1995)`. Panics when `e` is out of range.
    pub fn title(&self, e: usize) -> &str {
        &self.titles[e]
    }

    /// The item ids entry `e` names (two for the 18 shared MovieLens strings; none for a
    /// catalogue made from titles).
    pub fn item_ids(&self, e: usize) -> &[u32] {
        &self.item_ids[e]
    }

    /// The entry whose identifier is `title`, if any.
    pub fn entry_of_title(&self, title: &str) -> Option<usize> {
        self.by_title.get(title).copied()
    }

    /// The entry naming MovieLens item `item_id`, if any.
    pub fn entry_of_item(&self, item_id: u32) -> Option<usize> {
        self.by_item.get(&item_id).copied()
    }

    /// The token of `"\n"`, last in every entry.
    pub fn end_token(&self) -> u32 {
        self.end_token
    }
}

/// A titles file's lines, as [`ItemCatalogue::from_titles`] takes them.
pub fn read_titles(path: &Path) -> Result<Vec<String>, RecError> {
    let text = std::fs::read_to_string(path).map_err(io("cannot read", path))?;
    Ok(text.lines().map(str::to_string).collect())
}

/// The newline's token, which must be a single one.
fn end_token(tok: &Tokenizer) -> Result<u32, RecError> {
    match tok.encode("\n", false)?[..] {
        [t] => Ok(t),
        ref other => Err(RecError::Invalid(format!(
            "the tokenizer writes a newline as {} tokens {other:?}, not one: it cannot end catalogue entries",
            other.len()
        ))),
    }
}

fn tokenize(entries: &Entries, tok: &Tokenizer, end: u32) -> Result<Vec<Vec<u32>>, RecError> {
    (entries.titles.iter())
        .map(|t| {
            let mut ids = tok.encode(&format!(" {t}"), false)?;
            ids.push(end);
            Ok(ids)
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::movielens::Item;
    use specdec_gguf::write::Builder;
    use specdec_gguf::{GgufFile, Value};
    use std::path::PathBuf;

    /// A byte-level tokenizer (`<unk>`, `<s>`, `</s>`, then the 256 byte tokens): every
    /// byte is one token, so a newline is too.
    pub(crate) fn bytes_tokenizer() -> Tokenizer {
        let mut tokens = vec!["<unk>".to_string(), "<s>".into(), "</s>".into()];
        tokens.extend((0..=255).map(|b| format!("<0x{b:02X}>")));
        let mut types = vec![2, 3, 3];
        types.extend([6; 256]);
        let s = |v: &str| Value::String(v.into());
        let bytes = Builder::default()
            .kv("general.architecture", s("llama"))
            .kv("tokenizer.ggml.model", s("llama"))
            .kv("tokenizer.ggml.add_space_prefix", Value::Bool(false))
            .kv(
                "tokenizer.ggml.tokens",
                Value::Array(tokens.iter().map(|t| s(t)).collect()),
            )
            .kv(
                "tokenizer.ggml.scores",
                Value::Array(vec![Value::F32(0.0); tokens.len()]),
            )
            .kv(
                "tokenizer.ggml.token_type",
                Value::Array(types.into_iter().map(Value::I32).collect()),
            )
            .kv("tokenizer.ggml.bos_token_id", Value::U32(1))
            .kv("tokenizer.ggml.eos_token_id", Value::U32(2))
            .kv("tokenizer.ggml.unknown_token_id", Value::U32(0))
            .build();
        Tokenizer::from_gguf(&GgufFile::from_bytes(bytes).unwrap()).unwrap()
    }

    pub(crate) fn item(id: u32, title: &str, year: Option<u32>) -> Item {
        Item {
            id,
            title: title.into(),
            year,
            genres: vec!["Drama".into()],
        }
    }

    pub(crate) fn tiny_dataset() -> Dataset {
        let items = vec![
            item(1, "Toy Story", Some(1995)),
            item(2, "Ice Storm, The", Some(1997)),
            item(3, "unkonwn", None),
            item(4, "Chasing Amy", Some(1997)),
            item(5, "Toy Story", Some(1995)),
        ];
        Dataset::from_parts(vec![], items, vec![]).unwrap()
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("specdec-rec-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn shared_titles_are_one_entry_naming_all_their_ids() {
        let tok = bytes_tokenizer();
        let cat = ItemCatalogue::from_dataset(&tiny_dataset(), &tok).unwrap();
        assert_eq!(cat.len(), 4);
        assert_eq!(cat.title(0), "Toy Story (1995)");
        assert_eq!(cat.title(1), "Ice Storm, The (1997)");
        assert_eq!(cat.title(2), "unkonwn");
        assert_eq!(cat.item_ids(0), [1, 5]);
        assert_eq!(cat.entry_of_item(5), Some(0));
        assert_eq!(cat.entry_of_item(4), Some(3));
        assert_eq!(cat.entry_of_item(6), None);
        assert_eq!(cat.entry_of_title("Chasing Amy (1997)"), Some(3));
        assert_eq!(cat.entry_of_title("Chasing Amy"), None);
    }

    #[test]
    fn entries_are_the_spaced_title_then_the_newline() {
        let tok = bytes_tokenizer();
        let cat = ItemCatalogue::from_dataset(&tiny_dataset(), &tok).unwrap();
        let nl = cat.end_token();
        assert_eq!(tok.encode("\n", false).unwrap(), [nl]);
        for e in 0..cat.len() {
            let mut want = tok.encode(&format!(" {}", cat.title(e)), false).unwrap();
            want.push(nl);
            assert_eq!(cat.trie().entry(e), want);
            assert_eq!(
                cat.trie()
                    .walk(&want)
                    .and_then(|n| cat.trie().ends_entry(n)),
                Some(e)
            );
        }
    }

    #[test]
    fn title_lists_skip_blanks_and_merge_duplicates() {
        let tok = bytes_tokenizer();
        let titles = ["A (1990)", "", "  B  ", "A (1990)", "\t", "C"];
        let cat = ItemCatalogue::from_titles(titles.map(String::from).to_vec(), &tok).unwrap();
        assert_eq!(
            (0..cat.len()).map(|e| cat.title(e)).collect::<Vec<_>>(),
            ["A (1990)", "B", "C"]
        );
        assert!(cat.item_ids(0).is_empty() && cat.entry_of_item(1).is_none());
        let dir = temp_dir("titles-file");
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("titles.txt");
        std::fs::write(&file, "B\r\n\nA (1990)\nB\n").unwrap();
        let cat = ItemCatalogue::from_file(&file, &tok).unwrap();
        assert_eq!(
            (cat.len(), cat.title(0), cat.title(1)),
            (2, "B", "A (1990)")
        );
        let empty = ItemCatalogue::from_titles(vec![" ".into()], &tok).unwrap_err();
        assert!(empty.to_string().contains("no titles"), "{empty}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_cache_round_trips_and_a_corrupt_one_is_rebuilt() {
        let tok = bytes_tokenizer();
        let data = tiny_dataset();
        let dir = temp_dir("cache");
        let fresh = ItemCatalogue::from_dataset(&data, &tok).unwrap();
        let written = ItemCatalogue::from_dataset_cached(&data, &tok, &dir).unwrap();
        let files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(files.len(), 1, "{files:?}");
        let read = ItemCatalogue::from_dataset_cached(&data, &tok, &dir).unwrap();
        for cat in [&written, &read] {
            assert_eq!(cat.len(), fresh.len());
            for e in 0..cat.len() {
                assert_eq!(cat.trie().entry(e), fresh.trie().entry(e));
                assert_eq!(cat.item_ids(e), fresh.item_ids(e));
            }
        }
        // A cache whose sequences were tampered with is used only if it has the right
        // shape; broken files are rebuilt and rewritten.
        for junk in [
            "not json",
            "{\"version\":1}",
            "{\"version\":99,\"titles\":[],\"item_ids\":[],\"tokens\":[]}",
        ] {
            std::fs::write(&files[0], junk).unwrap();
            let cat = ItemCatalogue::from_dataset_cached(&data, &tok, &dir).unwrap();
            assert_eq!(cat.trie().entry(2), fresh.trie().entry(2));
            let text = std::fs::read_to_string(&files[0]).unwrap();
            assert!(text.contains("\"tokens\""), "rewritten: {text}");
        }
        // Other titles, another file.
        let other = ItemCatalogue::from_titles_cached(vec!["X".into()], &tok, &dir).unwrap();
        assert_eq!(other.len(), 1);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
