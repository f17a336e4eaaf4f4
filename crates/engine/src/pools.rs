//! Drafting state that outlives requests: the global pool and named pools, each a trie and
//! a history index loaded lazily from their files (`NAME.trie`, `NAME.history`) and saved
//! atomically when they learned something.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use specdec_drafters::{DraftError, FileStamp, HistoryConfig, HistoryIndex, Trie, TrieConfig};

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
fn read_history(
    path: Option<&Path>,
    cfg: &HistoryConfig,
    vocab: usize,
) -> Result<HistoryIndex, DraftError> {
    match path {
        Some(p) if p.exists() => HistoryIndex::load(p, cfg.clone(), vocab),
        _ => Ok(HistoryIndex::new(cfg.clone())),
    }
}

/// What a pool's requests draft from and feed: the trie of token windows (Lookahead) and
/// the history index of past prompts and outputs (SuffixDecoding). Cloning shares them.
#[derive(Clone, Debug)]
pub struct Pool {
    pub trie: Arc<Mutex<Trie>>,
    pub history: Arc<Mutex<HistoryIndex>>,
}

impl Default for Pool {
    /// An empty pool with default limits.
    fn default() -> Self {
        Pool::new(Trie::new(TrieConfig::default()), HistoryIndex::default())
    }
}

impl Pool {
    pub fn new(trie: Trie, history: HistoryIndex) -> Self {
        Pool {
            trie: Arc::new(Mutex::new(trie)),
            history: Arc::new(Mutex::new(history)),
        }
    }

    /// Saves the trie to `trie_file` and the history index beside it ([`history_file`]),
    /// each atomically, waiting for drafters using them.
    pub fn save(&self, trie_file: &Path) -> Result<(), DraftError> {
        self.trie
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .save(trie_file)?;
        self.history
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .save(history_file(trie_file))
    }

    /// A copy that shares nothing with this pool (a snapshot to restore later).
    pub fn deep_clone(&self) -> Pool {
        let trie = self.trie.lock().unwrap_or_else(PoisonError::into_inner);
        let history = self.history.lock().unwrap_or_else(PoisonError::into_inner);
        Pool::new(trie.clone(), history.clone())
    }
}

/// One persisted drafting state.
struct Store {
    pool: Pool,
    /// Where its trie is saved (none: kept in memory only); the history index beside it
    /// ([`history_file`]).
    file: Option<PathBuf>,
    /// It learned from a request since it was loaded or saved.
    dirty: bool,
    /// The file as this state last read or wrote it: a different one on disk at the next
    /// save means another process saved there, and its paths are merged in first.
    stamp: Option<FileStamp>,
}

impl Store {
    fn new(pool: Pool, file: Option<PathBuf>, dirty: bool) -> Self {
        // Read before anything learns, so the stamp is the file the trie came from.
        let stamp = file.as_deref().and_then(FileStamp::of);
        Store {
            pool,
            file,
            dirty,
            stamp,
        }
    }

    /// Saves the trie (merged with what other processes saved there) and the history index
    /// (last save wins); both must succeed for the state to count as saved.
    fn save(&mut self) -> Option<(PathBuf, Result<(), DraftError>)> {
        let file = self.file.as_ref().filter(|_| self.dirty)?;
        let trie = self
            .pool
            .trie
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .save_shared(file, self.stamp);
        let result = trie.and_then(|stamp| {
            self.stamp = Some(stamp);
            self.pool
                .history
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .save(history_file(file))
        });
        if result.is_ok() {
            self.dirty = false;
        }
        Some((file.clone(), result))
    }
}

/// The global pool and the named pools.
pub struct Pools {
    global: Store,
    /// Where pool `name` is kept, as `name.trie` and `name.history` (none: pools live in
    /// memory only).
    dir: Option<PathBuf>,
    named: HashMap<PoolName, Store>,
    /// The model's vocabulary size: pool files are checked against it when loaded.
    vocab: Option<usize>,
    /// Limits of the history indexes loaded or created from now on.
    history: HistoryConfig,
}

/// One save attempt: the file and its outcome.
pub type SaveResult = (PathBuf, Result<(), DraftError>);

impl Pools {
    /// `global` is saved to `global_file` (if any; its history index beside it); named
    /// pools live in `dir` (if any).
    pub fn new(global: Pool, global_file: Option<PathBuf>, dir: Option<PathBuf>) -> Self {
        Pools {
            global: Store::new(global, global_file, false),
            dir,
            named: HashMap::new(),
            vocab: None,
            history: HistoryConfig::default(),
        }
    }

    /// The global pool from `trie` and its history file (each when it exists, else
    /// empty), saved back there, and the named pools of `dir`; files are checked against a
    /// vocabulary of `vocab`, history indexes hold at most `history.max_tokens` each.
    pub fn open(
        trie: Option<&Path>,
        dir: Option<PathBuf>,
        vocab: usize,
        history: HistoryConfig,
    ) -> Result<Self, EngineError> {
        let failed = |path: &Path| {
            let path = path.to_path_buf();
            move |source| EngineError::Trie { path, source }
        };
        let global_trie = read_trie(trie, vocab).map_err(failed(trie.unwrap_or(Path::new(""))))?;
        let history_path = trie.map(history_file);
        let global_history = read_history(history_path.as_deref(), &history, vocab)
            .map_err(failed(history_path.as_deref().unwrap_or(Path::new(""))))?;
        let global = Pool::new(global_trie, global_history);
        let mut pools = Pools::new(global, trie.map(Path::to_path_buf), dir);
        pools.set_vocab(vocab);
        pools.history = history;
        Ok(pools)
    }

    /// Checks pools loaded from now on against a vocabulary of `vocab` ids (the engine sets
    /// its target's).
    pub fn set_vocab(&mut self, vocab: usize) {
        self.vocab = Some(vocab);
    }

    /// Pools kept in memory only, with an empty global pool.
    pub fn in_memory() -> Self {
        Pools::new(Pool::default(), None, None)
    }

    pub fn global(&self) -> &Pool {
        &self.global.pool
    }

    /// Pool `pool` (the global one for `None`), loading a named pool from its files on first
    /// use; a pool with no files starts empty.
    pub fn pool(&mut self, pool: Option<&PoolName>) -> Result<Pool, EngineError> {
        let Some(name) = pool else {
            return Ok(self.global.pool.clone());
        };
        if let Some(s) = self.named.get(name) {
            return Ok(s.pool.clone());
        }
        let file = self.pool_file(name);
        let vocab = self.vocab.unwrap_or(usize::MAX);
        let failed = |source| EngineError::Pool {
            pool: name.to_string(),
            source,
        };
        let history_path = file.as_deref().map(history_file);
        let loaded = read_trie(file.as_deref(), vocab).and_then(|trie| {
            let history = read_history(history_path.as_deref(), &self.history, vocab)?;
            Ok(Pool::new(trie, history))
        });
        let pool = loaded.map_err(failed)?;
        let store = Store::new(pool.clone(), file, false);
        if store.stamp.is_some() {
            tracing::info!("loaded drafting pool `{name}`");
        }
        self.named.insert(name.clone(), store);
        Ok(pool)
    }

    /// The trie of `pool` (see [`Pools::pool`]).
    pub fn trie(&mut self, pool: Option<&PoolName>) -> Result<Arc<Mutex<Trie>>, EngineError> {
        self.pool(pool).map(|p| p.trie)
    }

    fn pool_file(&self, name: &PoolName) -> Option<PathBuf> {
        self.dir.as_ref().map(|d| d.join(format!("{name}.trie")))
    }

    /// Puts `pool` in place as pool `name` (replacing what it held), unsaved.
    pub fn insert(&mut self, name: PoolName, pool: Pool) {
        let file = self.pool_file(&name);
        self.named.insert(name, Store::new(pool, file, true));
    }

    /// Records that a request fed `pool` (the global one for `None`).
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
        let mut pools = Pools::new(Pool::default(), None, Some(dir.clone()));
        assert!(pools.save_dirty().is_empty());
        let t = pools.trie(Some(&name)).unwrap();
        t.lock().unwrap().insert(&[1, 2, 3, 4]);
        assert!(pools.save_dirty().is_empty(), "not marked dirty yet");
        pools.mark_dirty(Some(&name));
        let saved = pools.save_dirty();
        assert_eq!(saved.len(), 1);
        assert!(saved[0].1.is_ok());
        assert!(pools.save_dirty().is_empty(), "clean after saving");
        let mut again = Pools::new(Pool::default(), None, Some(dir.clone()));
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
        let mut pools = Pools::new(Pool::default(), None, Some(dir.clone()));
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
            let trie = read_trie(Some(&file), 1000).unwrap();
            Pools::new(
                Pool::new(trie, HistoryIndex::default()),
                Some(file.clone()),
                None,
            )
        };
        let (mut a, mut b) = (open(), open());
        for i in 0..100u32 {
            a.global().trie.lock().unwrap().insert(&[i, i + 1]);
            b.global().trie.lock().unwrap().insert(&[i + 500, i + 1]);
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

    #[test]
    fn a_history_file_never_is_its_trie_file() {
        for (trie, history) in [
            ("g.trie", "g.history"),
            ("/x/trie.bin", "/x/trie.history"),
            ("state", "state.history"),
            ("odd.history", "odd.history.history"),
        ] {
            assert_eq!(history_file(Path::new(trie)), Path::new(history));
        }
    }

    #[test]
    fn a_pool_saves_and_loads_its_history_beside_its_trie() {
        let dir = std::env::temp_dir().join(format!("specdec-pools-hist-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let name = PoolName::parse("g").unwrap();
        let mut pools = Pools::new(Pool::default(), None, Some(dir.clone()));
        let pool = pools.pool(Some(&name)).unwrap();
        pool.history
            .lock()
            .unwrap()
            .add_request(&[1, 2, 3], &[4, 5, 6]);
        pools.mark_dirty(Some(&name));
        assert!(pools.save_dirty().iter().all(|(_, r)| r.is_ok()));
        assert!(dir.join("g.history").is_file());
        let mut again = Pools::new(Pool::default(), None, Some(dir.clone()));
        let back = again.pool(Some(&name)).unwrap();
        assert_eq!(*back.history.lock().unwrap(), *pool.history.lock().unwrap());
        let other = again.pool(Some(&PoolName::parse("h").unwrap())).unwrap();
        assert!(
            other.history.lock().unwrap().is_empty(),
            "pools are separate"
        );
        // A damaged history file is an error naming the pool, not an empty pool.
        std::fs::write(dir.join("g.history"), b"specdHIS garbage").unwrap();
        let mut third = Pools::new(Pool::default(), None, Some(dir.clone()));
        let e = third.pool(Some(&name)).unwrap_err();
        assert!(e.to_string().contains('g'), "{e}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
