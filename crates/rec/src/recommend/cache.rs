//! The catalogue's cache file: the token sequences of one list of entries under one
//! tokenizer, so that each entry is tokenized once ("built once and cached"). A file that
//! cannot be read or does not fit is logged and rebuilt, never an error.

use std::path::Path;

use serde::{Deserialize, Serialize};
use specdec_tokenizer::Tokenizer;

use super::entries::Entries;
use crate::hash::fnv1a64;

/// Bump when the cache file's layout or the tokenization rule changes.
const CACHE_VERSION: u32 = 1;

/// The cache file's name: a hash of the entries and of the tokenizer (its model and
/// pre-tokenizer kinds and every token's bytes). Merges are not visible through
/// `Tokenizer`, so two tokenizers with one vocabulary and different merges would share a
/// file; the loaded sequences are checked only for their shape.
pub(super) fn cache_name(entries: &Entries, tok: &Tokenizer) -> String {
    let mut bytes = format!(
        "specdec-rec catalogue v{CACHE_VERSION}\0{:?}\0{:?}\0",
        tok.model_kind(),
        tok.pre_tokenizer()
    )
    .into_bytes();
    for id in 0..tok.vocab_size() as u32 {
        let piece = tok.token_bytes(id).unwrap_or_default();
        bytes.extend((piece.len() as u32).to_le_bytes());
        bytes.extend(piece);
        bytes.push(tok.is_special(id) as u8);
    }
    for (title, ids) in entries.titles.iter().zip(&entries.item_ids) {
        bytes.extend(title.as_bytes());
        bytes.push(0);
        ids.iter().for_each(|id| bytes.extend(id.to_le_bytes()));
        bytes.push(0xff);
    }
    format!("items-{:016x}.json", fnv1a64(&bytes))
}

#[derive(Serialize, Deserialize)]
struct CacheFile {
    version: u32,
    titles: Vec<String>,
    item_ids: Vec<Vec<u32>>,
    tokens: Vec<Vec<u32>>,
}

/// The cached sequences, if the file exists and fits `entries`; anything else is logged
/// and ignored (the caller rebuilds and rewrites it).
pub(super) fn read_cache(path: &Path, entries: &Entries, end: u32) -> Option<Vec<Vec<u32>>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::warn!(
                "cannot read catalogue cache {}: {e}; rebuilding",
                path.display()
            );
            return None;
        }
    };
    let problem = match serde_json::from_str::<CacheFile>(&text) {
        Err(e) => e.to_string(),
        Ok(c) if c.version != CACHE_VERSION => format!("version {}", c.version),
        Ok(c) if c.titles != entries.titles || c.item_ids != entries.item_ids => {
            "other titles".into()
        }
        Ok(c) if c.tokens.len() != entries.titles.len() => "wrong entry count".into(),
        Ok(c)
            if c.tokens
                .iter()
                .any(|t| t.len() < 2 || t.last() != Some(&end)) =>
        {
            "an entry without its end token".into()
        }
        Ok(c) => return Some(c.tokens),
    };
    tracing::warn!(
        "catalogue cache {} is unusable ({problem}); rebuilding",
        path.display()
    );
    None
}

/// Writes the cache atomically; a failure only costs the next run a rebuild, so it is
/// logged, not returned.
pub(super) fn write_cache(path: &Path, entries: &Entries, tokens: &[Vec<u32>]) {
    let file = CacheFile {
        version: CACHE_VERSION,
        titles: entries.titles.clone(),
        item_ids: entries.item_ids.clone(),
        tokens: tokens.to_vec(),
    };
    let result = specdec_fs::write_atomic_with(path, |w| Ok(serde_json::to_writer(w, &file)?));
    if let Err(e) = result {
        tracing::warn!("cannot write catalogue cache {}: {e}", path.display());
    }
}
