//! Drafting state that outlives requests: the global trie and named pools, each a trie
//! loaded lazily from its file and saved atomically when it learned something.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use specdec_drafters::{DraftError, Trie, TrieConfig};

use crate::EngineError;

/// A pool's name: 1 to 64 of `A-Z a-z 0-9 . _ -`, not starting with a dot, so it is also a
/// safe file name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PoolName(String);

impl PoolName {
    pub fn parse(s: &str) -> Result<Self, EngineError> {
        let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
        if s.is_empty() || s.len() > 64 || s.starts_with('.') || !s.chars().all(ok_char) {
            let shown: String = s.chars().take(64).collect();
            return Err(EngineError::InvalidRequest(format!(
                "pool name `{shown}` is not 1 to 64 of A-Z a-z 0-9 . _ - (not starting with a dot)"
            )));
        }
        Ok(PoolName(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for PoolName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The trie saved at `path` if that file exists, else an empty one (a process's first run).
pub fn load_trie(path: Option<&Path>) -> Result<Arc<Mutex<Trie>>, DraftError> {
    match path {
        Some(p) if p.exists() => Ok(Arc::new(Mutex::new(Trie::load(p)?))),
        _ => Ok(new_trie()),
    }
}

/// Saves `trie` to `path` (atomically; see `Trie::save`), waiting for drafters using it.
pub fn save_trie(trie: &Mutex<Trie>, path: &Path) -> Result<(), DraftError> {
    trie.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .save(path)
}

/// An empty trie with default limits.
pub fn new_trie() -> Arc<Mutex<Trie>> {
    Arc::new(Mutex::new(Trie::new(TrieConfig::default())))
}

/// One persisted drafting state.
struct Store {
    trie: Arc<Mutex<Trie>>,
    /// Where it is saved (none: kept in memory only).
    file: Option<PathBuf>,
    /// It learned from a request since it was loaded or saved.
    dirty: bool,
}

impl Store {
    fn save(&mut self) -> Option<(PathBuf, Result<(), DraftError>)> {
        let file = self.file.as_ref().filter(|_| self.dirty)?;
        let result = save_trie(&self.trie, file);
        if result.is_ok() {
            self.dirty = false;
        }
        Some((file.clone(), result))
    }
}

/// The global trie and the named pools.
pub struct Pools {
    global: Store,
    /// Where pool `name` is kept, as `name.trie` (none: pools live in memory only).
    dir: Option<PathBuf>,
    named: HashMap<PoolName, Store>,
}

/// One save attempt: the file and its outcome.
pub type SaveResult = (PathBuf, Result<(), DraftError>);

impl Pools {
    /// `global` is saved to `global_file` (if any); named pools live in `dir` (if any).
    pub fn new(
        global: Arc<Mutex<Trie>>,
        global_file: Option<PathBuf>,
        dir: Option<PathBuf>,
    ) -> Self {
        Pools {
            global: Store {
                trie: global,
                file: global_file,
                dirty: false,
            },
            dir,
            named: HashMap::new(),
        }
    }

    /// Pools kept in memory only, with an empty global trie.
    pub fn in_memory() -> Self {
        Pools::new(new_trie(), None, None)
    }

    pub fn global(&self) -> &Arc<Mutex<Trie>> {
        &self.global.trie
    }

    /// The trie of `pool` (the global one for `None`), loading a named pool from its file
    /// on first use; a pool with no file starts empty.
    pub fn trie(&mut self, pool: Option<&PoolName>) -> Result<Arc<Mutex<Trie>>, EngineError> {
        let Some(name) = pool else {
            return Ok(self.global.trie.clone());
        };
        if let Some(s) = self.named.get(name) {
            return Ok(s.trie.clone());
        }
        let file = self.dir.as_ref().map(|d| d.join(format!("{name}.trie")));
        let trie = load_trie(file.as_deref()).map_err(|source| EngineError::Pool {
            pool: name.to_string(),
            source,
        })?;
        if file.as_ref().is_some_and(|f| f.exists()) {
            tracing::info!("loaded drafting pool `{name}`");
        }
        self.named.insert(
            name.clone(),
            Store {
                trie: trie.clone(),
                file,
                dirty: false,
            },
        );
        Ok(trie)
    }

    /// Puts `trie` in place as pool `name` (replacing what it held), unsaved.
    pub fn insert(&mut self, name: PoolName, trie: Trie) {
        let file = self.dir.as_ref().map(|d| d.join(format!("{name}.trie")));
        self.named.insert(
            name,
            Store {
                trie: Arc::new(Mutex::new(trie)),
                file,
                dirty: true,
            },
        );
    }

    /// Records that a request fed `pool` (the global trie for `None`).
    pub fn mark_dirty(&mut self, pool: Option<&PoolName>) {
        let store = match pool {
            None => Some(&mut self.global),
            Some(name) => self.named.get_mut(name),
        };
        if let Some(s) = store {
            s.dirty = true;
        }
    }

    /// Whether anything learned since it was last saved.
    pub fn is_dirty(&self) -> bool {
        self.global.dirty || self.named.values().any(|s| s.dirty)
    }

    /// Saves every state that learned since its last save, each atomically; a failed save
    /// stays dirty and is retried next time.
    pub fn save_dirty(&mut self) -> Vec<SaveResult> {
        let mut out: Vec<SaveResult> = self.global.save().into_iter().collect();
        let mut names: Vec<&PoolName> = self.named.keys().collect();
        names.sort();
        let names: Vec<PoolName> = names.into_iter().cloned().collect();
        for n in names {
            out.extend(self.named.get_mut(&n).and_then(Store::save));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_names_are_safe_file_names() {
        for ok in ["a", "group-7", "users.cluster_12", &"x".repeat(64)] {
            assert!(PoolName::parse(ok).is_ok(), "{ok}");
        }
        for bad in ["", ".hidden", "a/b", "..", "a b", "é", &"x".repeat(65)] {
            assert!(PoolName::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn pools_load_lazily_and_save_only_when_dirty() {
        let dir = std::env::temp_dir().join(format!("specdec-pools-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let name = PoolName::parse("g1").unwrap();
        let mut pools = Pools::new(new_trie(), None, Some(dir.clone()));
        assert!(pools.save_dirty().is_empty());
        let t = pools.trie(Some(&name)).unwrap();
        t.lock().unwrap().insert(&[1, 2, 3, 4]);
        assert!(pools.save_dirty().is_empty(), "not marked dirty yet");
        pools.mark_dirty(Some(&name));
        let saved = pools.save_dirty();
        assert_eq!(saved.len(), 1);
        assert!(saved[0].1.is_ok());
        assert!(pools.save_dirty().is_empty(), "clean after saving");
        let mut again = Pools::new(new_trie(), None, Some(dir.clone()));
        let t2 = again.trie(Some(&name)).unwrap();
        assert_eq!(*t2.lock().unwrap(), *t.lock().unwrap());
        let other = again.trie(Some(&PoolName::parse("g2").unwrap())).unwrap();
        assert_ne!(
            *other.lock().unwrap(),
            *t.lock().unwrap(),
            "pools are separate"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
