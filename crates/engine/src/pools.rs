//! Drafting state that outlives requests: the global trie and named pools, each a trie
//! loaded lazily from its file and saved atomically when it learned something.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use specdec_drafters::{DraftError, FileStamp, Trie, TrieConfig};

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
/// A file with a token id outside a vocabulary of `vocab` ids (a trie learned on another
/// model) or that is not a regular file is an error.
pub fn load_trie(path: Option<&Path>, vocab: usize) -> Result<Arc<Mutex<Trie>>, DraftError> {
    Ok(Arc::new(Mutex::new(read_trie(path, vocab)?)))
}

fn read_trie(path: Option<&Path>, vocab: usize) -> Result<Trie, DraftError> {
    match path {
        // Anything that exists but is not a regular file is refused by `Trie::load`.
        Some(p) if p.exists() => Trie::load_for_vocab(p, vocab),
        _ => Ok(Trie::new(TrieConfig::default())),
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
    /// The file as this state last read or wrote it: a different one on disk at the next
    /// save means another process saved there, and its paths are merged in first.
    stamp: Option<FileStamp>,
}

impl Store {
    fn new(trie: Arc<Mutex<Trie>>, file: Option<PathBuf>, dirty: bool) -> Self {
        // Read before anything learns, so the stamp is the file the trie came from.
        let stamp = file.as_deref().and_then(FileStamp::of);
        Store {
            trie,
            file,
            dirty,
            stamp,
        }
    }

    fn save(&mut self) -> Option<(PathBuf, Result<(), DraftError>)> {
        let file = self.file.as_ref().filter(|_| self.dirty)?;
        let result = self
            .trie
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .save_shared(file, self.stamp);
        let result = result.map(|stamp| {
            self.stamp = Some(stamp);
            self.dirty = false;
        });
        Some((file.clone(), result))
    }
}

/// The global trie and the named pools.
pub struct Pools {
    global: Store,
    /// Where pool `name` is kept, as `name.trie` (none: pools live in memory only).
    dir: Option<PathBuf>,
    named: HashMap<PoolName, Store>,
    /// The model's vocabulary size: pool files are checked against it when loaded.
    vocab: Option<usize>,
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
            global: Store::new(global, global_file, false),
            dir,
            named: HashMap::new(),
            vocab: None,
        }
    }

    /// The global trie from `trie` (when the file exists, else empty), saved back there, and
    /// the named pools of `dir`; trie files are checked against a vocabulary of `vocab`.
    pub fn open(
        trie: Option<&Path>,
        dir: Option<PathBuf>,
        vocab: usize,
    ) -> Result<Self, EngineError> {
        let global = load_trie(trie, vocab).map_err(|source| EngineError::Trie {
            path: trie.map(Path::to_path_buf).unwrap_or_default(),
            source,
        })?;
        let mut pools = Pools::new(global, trie.map(Path::to_path_buf), dir);
        pools.set_vocab(vocab);
        Ok(pools)
    }

    /// Checks pools loaded from now on against a vocabulary of `vocab` ids (the engine sets
    /// its target's).
    pub fn set_vocab(&mut self, vocab: usize) {
        self.vocab = Some(vocab);
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
        let stamp = file.as_deref().and_then(FileStamp::of);
        let trie =
            read_trie(file.as_deref(), self.vocab.unwrap_or(usize::MAX)).map_err(|source| {
                EngineError::Pool {
                    pool: name.to_string(),
                    source,
                }
            })?;
        if stamp.is_some() {
            tracing::info!("loaded drafting pool `{name}`");
        }
        let trie = Arc::new(Mutex::new(trie));
        self.named.insert(
            name.clone(),
            Store {
                trie: trie.clone(),
                file,
                dirty: false,
                stamp,
            },
        );
        Ok(trie)
    }

    /// Puts `trie` in place as pool `name` (replacing what it held), unsaved.
    pub fn insert(&mut self, name: PoolName, trie: Trie) {
        let file = self.dir.as_ref().map(|d| d.join(format!("{name}.trie")));
        self.named
            .insert(name, Store::new(Arc::new(Mutex::new(trie)), file, true));
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

    #[test]
    fn pool_file_with_out_of_vocabulary_token_ids_is_refused_when_loaded() {
        let dir = std::env::temp_dir().join(format!("specdec-pools-oov-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut t = Trie::default();
        t.insert(&[1, 2, 60_000]);
        t.save(dir.join("g.trie")).unwrap();
        let mut pools = Pools::new(new_trie(), None, Some(dir.clone()));
        pools.set_vocab(49_152);
        let e = pools
            .trie(Some(&PoolName::parse("g").unwrap()))
            .err()
            .unwrap();
        assert!(e.to_string().contains("60000"), "{e}");
        // The global trie, as `--trie` loads it.
        let e = load_trie(Some(&dir.join("g.trie")), 49_152).unwrap_err();
        assert!(
            matches!(e, DraftError::TokenOutOfVocabulary { token: 60_000, .. }),
            "{e}"
        );
        assert!(load_trie(Some(&dir.join("g.trie")), 60_001).is_ok());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn two_servers_sharing_one_trie_file_keep_both_learnings() {
        let dir = std::env::temp_dir().join(format!("specdec-pools-two-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("global.trie");
        let open = || {
            let trie = load_trie(Some(&file), 1000).unwrap();
            Pools::new(trie, Some(file.clone()), None)
        };
        let (mut a, mut b) = (open(), open());
        for i in 0..100u32 {
            a.global().lock().unwrap().insert(&[i, i + 1]);
            b.global().lock().unwrap().insert(&[i + 500, i + 1]);
            a.mark_dirty(None);
            b.mark_dirty(None);
            assert!(a.save_dirty()[0].1.is_ok());
            assert!(b.save_dirty()[0].1.is_ok());
        }
        let disk = Trie::load(&file).unwrap();
        for i in 0..100u32 {
            assert!(disk.count(&[i, i + 1]) >= 1, "a's path {i} lost");
            assert!(disk.count(&[i + 500, i + 1]) >= 1, "b's path {i} lost");
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
