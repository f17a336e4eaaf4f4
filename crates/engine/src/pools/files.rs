//! Where drafting state lives on disk: a pool's trie file and the history file beside it,
//! tenants' folders, and reading a pool (on any thread).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use specdec_drafters::{DraftError, HistoryConfig, HistoryIndex, Trie, TrieConfig};

use super::store::Store;
use super::{Key, Pool, PoolName};
use crate::scope::Tenant;
use crate::EngineError;

/// The trie saved at `path` if that file exists, else an empty one (a process's first run).
/// A file with a token id outside a vocabulary of `vocab` ids (a trie learned on another
/// model) or that is not a regular file is an error.
pub fn load_trie(path: Option<&Path>, vocab: usize) -> Result<Arc<Mutex<Trie>>, DraftError> {
    Ok(Arc::new(Mutex::new(read_trie(path, vocab)?)))
}

pub(super) fn read_trie(path: Option<&Path>, vocab: usize) -> Result<Trie, DraftError> {
    match path {
        // Anything that exists but is not a regular file is refused by `Trie::load`.
        Some(p) if p.exists() => Trie::load_for_vocab(p, vocab),
        _ => Ok(Trie::new(TrieConfig::default())),
    }
}

/// An empty trie with default limits.
pub fn new_trie() -> Arc<Mutex<Trie>> {
    Arc::new(Mutex::new(Trie::new(TrieConfig::default())))
}

/// Where the history index of a pool whose trie is saved at `trie_file` is saved: the same
/// name with the extension `history` (appended when the trie file already has that
/// extension, so the two never share a file).
pub fn history_file(trie_file: &Path) -> PathBuf {
    if trie_file.extension().is_some_and(|e| e == "history") {
        let mut name = trie_file.as_os_str().to_owned();
        name.push(".history");
        PathBuf::from(name)
    } else {
        trie_file.with_extension("history")
    }
}

/// The history index saved at `path` if that file exists, else an empty one.
pub(super) fn read_history(
    path: Option<&Path>,
    cfg: &HistoryConfig,
    vocab: usize,
) -> Result<HistoryIndex, DraftError> {
    match path {
        Some(p) if p.exists() => HistoryIndex::load(p, cfg.clone(), vocab),
        _ => Ok(HistoryIndex::new(cfg.clone())),
    }
}

/// The file name of a tenant's default pool: not a [`PoolName`] (those never hold `@`).
pub(super) const TENANT_DEFAULT: &str = "@default";

/// Where tenants' pools are kept inside the pools folder, one folder per tenant.
pub(super) const TENANTS_DIR: &str = "tenants";

/// A tenant's folder name: a digest of its identity, so that no identity reaches a path.
pub(super) fn tenant_folder(t: &Tenant) -> String {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(t.id().as_bytes());
    d[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// Refuses a folder or file that drafting state could not be saved to, before anything
/// learns: a missing folder is created, and a file is written and removed to prove it.
pub(super) fn check_writable(dir: &Path) -> Result<(), EngineError> {
    let failed = |source| EngineError::StateFolder {
        path: dir.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(failed)?;
    let probe = dir.join(format!(".specdec-write-check-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(failed)?;
    std::fs::remove_file(&probe).map_err(failed)
}

/// A pool read by a background thread.
pub(super) type Loaded = (Key, Result<Store, EngineError>);

/// Pool `key` from its trie file `file` and the history beside it (each empty when
/// missing), checked against a vocabulary of `vocab`.
pub(super) fn read_store(
    key: &Key,
    file: Option<PathBuf>,
    vocab: usize,
    history: &HistoryConfig,
) -> Result<Store, EngineError> {
    let shown = key.name.as_ref().map_or(TENANT_DEFAULT, PoolName::as_str);
    let failed = |source| EngineError::Pool {
        pool: shown.to_string(),
        source,
    };
    let history_path = file.as_deref().map(history_file);
    let loaded = read_trie(file.as_deref(), vocab).and_then(|trie| {
        let history = read_history(history_path.as_deref(), history, vocab)?;
        Ok(Pool::new(trie, history))
    });
    let store = Store::new(loaded.map_err(failed)?, file, false);
    if store.was_on_disk() {
        tracing::info!("loaded drafting pool `{shown}`");
    }
    Ok(store)
}

/// Removes the folder of `dir` modified longest ago; which, if any.
pub(super) fn remove_oldest_folder(dir: &Path) -> Option<PathBuf> {
    let oldest = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter_map(|e| {
            let m = e.metadata().ok().filter(|m| m.is_dir())?;
            Some((m.modified().ok()?, e.path()))
        })
        .min()?
        .1;
    match std::fs::remove_dir_all(&oldest) {
        Ok(()) => Some(oldest),
        Err(e) => {
            tracing::error!("could not remove {} ({e})", oldest.display());
            None
        }
    }
}

/// The pool names saved in `folder` (their `NAME.trie` files).
pub(super) fn saved_pool_names(folder: &Path) -> Vec<PoolName> {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name();
            let stem = name.to_str()?.strip_suffix(".trie")?.to_string();
            PoolName::parse(&stem).ok()
        })
        .collect()
}
