//! Drafting state that outlives requests: the global pool and named pools, each a trie and
//! a history index loaded lazily from their files (`NAME.trie`, `NAME.history`) and saved
//! atomically when they learned something. Pools are owned like cached prefixes are
//! scoped: each tenant has its own, the operator names the ones every tenant shares, and
//! a private request shares none (see [`Pools::pool_in`]).

mod files;
mod learned;
mod sizes;
mod store;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError};

use specdec_drafters::{DraftError, HistoryConfig, HistoryIndex, Trie, TrieConfig};

use crate::scope::{CacheScope, Tenant};
use crate::EngineError;
use files::{
    check_writable, read_history, read_store, read_trie, remove_oldest_folder, saved_pool_names,
    tenant_folder, Loaded, TENANTS_DIR, TENANT_DEFAULT,
};
pub use files::{history_file, load_trie, new_trie};
pub use learned::{Folded, Learned};
pub use sizes::{PoolSize, GLOBAL_LABEL, TENANTS_LABEL};
use store::{Saver, Store};

/// A pool's name: 1 to 64 of `A-Z a-z 0-9 . _ -`, not starting with a dot, so it is also a
/// safe file name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PoolName(String);

impl PoolName {
    /// `s` as a pool name, or an invalid-request error saying what a name may be.
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

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for PoolName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a pool's requests draft from and feed: the trie of token windows (Lookahead) and
/// the history index of past prompts and outputs (SuffixDecoding). Cloning shares them.
#[derive(Clone, Debug)]
pub struct Pool {
    /// Lookahead's trie of token windows.
    pub trie: Arc<Mutex<Trie>>,
    /// SuffixDecoding's index of past prompts and outputs.
    pub history: Arc<Mutex<HistoryIndex>>,
}

impl Default for Pool {
    /// An empty pool with default limits.
    fn default() -> Self {
        Pool::new(Trie::new(TrieConfig::default()), HistoryIndex::default())
    }
}

impl Pool {
    /// A pool holding `trie` and `history`.
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

/// Whose drafting state a pool is. Drafts reveal what a pool learned (a drafted token
/// accepted is a token someone else wrote, and acceptance is reported), so a tenant's
/// requests read and feed only that tenant's pools and the pools the operator shares.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Owner {
    /// The server's own: the global pool, named pools of a single-user server, and the
    /// named pools the operator shares with every tenant.
    Operator,
    Tenant(Tenant),
}

/// A pool: its owner's default one (`name` none) or a named one. The operator's default is
/// the global pool, which is never unloaded.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    owner: Owner,
    name: Option<PoolName>,
}

/// Bounds on the pools requests can create, so that no client grows memory, disk or the
/// time of a save without limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolLimits {
    /// Pools held in memory besides the global one. To load another, the least recently
    /// used one that no request is using is unloaded (saved first when it has a file;
    /// without a folder its learning is forgotten).
    pub max_loaded: usize,
    /// Named pools one owner (the operator, or one tenant) may have, in memory or saved: a
    /// request naming a new pool beyond it is refused.
    pub max_named: usize,
    /// Tenants whose pools are saved in the pools folder; the pools of tenants beyond it
    /// live in memory only.
    pub max_saved_tenants: usize,
}

impl PoolLimits {
    /// No bounds: one caller's own engine (the command line, benchmarks, jobs).
    pub const UNBOUNDED: PoolLimits = PoolLimits {
        max_loaded: usize::MAX,
        max_named: usize::MAX,
        max_saved_tenants: usize::MAX,
    };
}

impl Default for PoolLimits {
    fn default() -> Self {
        PoolLimits::UNBOUNDED
    }
}

/// The global pool and the named pools, the operator's and each tenant's.
pub struct Pools {
    global: Store,
    /// Where pool `name` is kept, as `name.trie` and `name.history`, and each tenant's
    /// pools under `tenants/` (none: pools live in memory only).
    dir: Option<PathBuf>,
    loaded: HashMap<Key, Store>,
    /// Unloaded states whose save is queued or failed, until it succeeds; loading one of
    /// them takes it back instead of reading an older file.
    retiring: HashMap<Key, Store>,
    /// Named pools the operator shares with every tenant.
    shared: HashSet<PoolName>,
    limits: PoolLimits,
    /// Tenant folders in `dir`, counted when first needed.
    tenant_folders: Option<usize>,
    /// Advances at every use, for unloading the least recently used.
    clock: u64,
    saver: Saver,
    /// Pools being read by background threads, and where they report.
    loading: HashSet<Key>,
    /// Pools whose background read failed, with the error the next `pool_in` of each
    /// reports (without reading again on the caller's thread).
    failed_loads: HashMap<Key, EngineError>,
    loads: (Sender<Loaded>, Receiver<Loaded>),
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
            loaded: HashMap::new(),
            retiring: HashMap::new(),
            shared: HashSet::new(),
            limits: PoolLimits::UNBOUNDED,
            tenant_folders: None,
            clock: 0,
            saver: Saver::default(),
            loading: HashSet::new(),
            failed_loads: HashMap::new(),
            loads: mpsc::channel(),
            vocab: None,
            history: HistoryConfig::default(),
        }
    }

    /// The global pool from `trie` and its history file (each when it exists, else
    /// empty), saved back there, and the named pools of `dir`; files are checked against a
    /// vocabulary of `vocab`, history indexes hold at most `history.max_tokens` each.
    /// A folder that could not be saved to (`dir`, or the one `trie` is in) is refused
    /// now rather than at every save.
    pub fn open(
        trie: Option<&Path>,
        dir: Option<PathBuf>,
        vocab: usize,
        history: HistoryConfig,
    ) -> Result<Self, EngineError> {
        if let Some(d) = &dir {
            check_writable(d)?;
        }
        if let Some(t) = trie {
            let parent = t.parent().filter(|p| !p.as_os_str().is_empty());
            check_writable(parent.unwrap_or(Path::new(".")))?;
        }
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

    /// Bounds the pools requests can create (see [`PoolLimits`]).
    pub fn with_limits(mut self, limits: PoolLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Names pools every tenant reads and feeds (the operator's choice: what one tenant's
    /// requests teach them, another's drafts can show).
    pub fn with_shared(mut self, names: impl IntoIterator<Item = PoolName>) -> Self {
        self.shared.extend(names);
        self
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

    /// The global pool: what requests naming no pool draft from and feed.
    pub fn global(&self) -> &Pool {
        &self.global.pool
    }

    /// Pools held in memory besides the global one.
    pub fn loaded(&self) -> usize {
        self.loaded.len()
    }

    /// Whose pool a request of `scope` naming `name` uses; none: a private request, which
    /// reads and feeds an empty pool of its own.
    fn key(&self, scope: &CacheScope, name: Option<&PoolName>) -> Option<Key> {
        let owner = match scope {
            _ if name.is_some_and(|n| self.shared.contains(n)) => Owner::Operator,
            CacheScope::Shared => Owner::Operator,
            CacheScope::Tenant(t) => Owner::Tenant(t.clone()),
            CacheScope::Private => return None,
        };
        Some(Key {
            owner,
            name: name.cloned(),
        })
    }

    /// Pool `pool` of the operator (the global one for `None`); see [`Pools::pool_in`].
    pub fn pool(&mut self, pool: Option<&PoolName>) -> Result<Pool, EngineError> {
        self.pool_in(&CacheScope::Shared, pool)
    }

    /// The pool a request of `scope` naming `name` drafts from and feeds: the owner's
    /// default pool for `None` (the global one for the operator), loaded from its files on
    /// first use (a pool with no files starts empty). A private request gets an empty
    /// pool that nothing else sees.
    pub fn pool_in(
        &mut self,
        scope: &CacheScope,
        name: Option<&PoolName>,
    ) -> Result<Pool, EngineError> {
        let Some(key) = self.key(scope, name) else {
            return Ok(Pool::default());
        };
        if key.owner == Owner::Operator && key.name.is_none() {
            return Ok(self.global.pool.clone());
        }
        self.clock += 1;
        if let Some(s) = self.loaded.get_mut(&key) {
            s.last_used = self.clock;
            return Ok(s.pool.clone());
        }
        if let Some(e) = self.failed_loads.remove(&key) {
            return Err(e);
        }
        if let Some(name) = &key.name {
            self.check_room_for(&key.owner, name)?;
        }
        self.make_room();
        let store = match self.retiring.remove(&key) {
            Some(s) => s,
            None => self.load(&key)?,
        };
        let pool = store.pool.clone();
        self.loaded.insert(key.clone(), store);
        self.loaded.get_mut(&key).expect("just inserted").last_used = self.clock;
        Ok(pool)
    }

    /// Reads pool `key` from its files, or starts it empty.
    fn load(&mut self, key: &Key) -> Result<Store, EngineError> {
        let file = self.file_of(key);
        let vocab = self.vocab.unwrap_or(usize::MAX);
        read_store(key, file, vocab, &self.history)
    }

    /// Starts reading the pool a request of `scope` naming `name` would use on a
    /// background thread, unless nothing needs reading; whether [`Pools::pool_in`] can
    /// now answer without reading files. A large history takes a while to index, and the
    /// engine's loop must not stop for it: a caller holds the request back until this
    /// says ready, calling [`Pools::poll_loads`] meanwhile.
    pub fn prepare(&mut self, scope: &CacheScope, name: Option<&PoolName>) -> bool {
        self.poll_loads();
        let Some(key) = self.key(scope, name) else {
            return true;
        };
        if (key.owner == Owner::Operator && key.name.is_none())
            || self.loaded.contains_key(&key)
            || self.retiring.contains_key(&key)
        {
            return true;
        }
        if self.loading.contains(&key) {
            return false;
        }
        if self.failed_loads.contains_key(&key) {
            return true;
        }
        if let Some(n) = &key.name {
            if self.check_room_for(&key.owner, n).is_err() {
                return true; // refused at once by `pool_in`
            }
        }
        let file = self.file_of(&key);
        if file.as_deref().is_none_or(|f| !f.exists()) {
            return true; // starts empty: nothing to read
        }
        let (vocab, history, tx) = (
            self.vocab.unwrap_or(usize::MAX),
            self.history.clone(),
            self.loads.0.clone(),
        );
        let k = key.clone();
        let spawned = std::thread::Builder::new()
            .name("specdec-pool-loader".into())
            .spawn(move || {
                let read = || read_store(&k, file, vocab, &history);
                // A read that panics still answers, or its request would wait for ever.
                let store = std::panic::catch_unwind(std::panic::AssertUnwindSafe(read))
                    .unwrap_or_else(|_| {
                        Err(EngineError::Panicked(format!(
                            "reading drafting pool {k:?}"
                        )))
                    });
                let _ = tx.send((k, store));
            });
        match spawned {
            Ok(_) => {
                self.loading.insert(key);
                false
            }
            Err(e) => {
                tracing::warn!("could not start a pool loader thread ({e}); loading inline");
                true
            }
        }
    }

    /// Puts in place the pools background threads finished reading (after a failed read,
    /// `prepare` says ready and the next `pool_in` reports the error).
    pub fn poll_loads(&mut self) {
        while let Ok((key, store)) = self.loads.1.try_recv() {
            self.loading.remove(&key);
            let mut store = match store {
                Ok(s) => s,
                Err(e) => {
                    self.failed_loads.insert(key, e);
                    continue;
                }
            };
            if self.loaded.contains_key(&key) || self.retiring.contains_key(&key) {
                continue;
            }
            self.make_room();
            // Just read for a waiting request: the last to be unloaded.
            self.clock += 1;
            store.last_used = self.clock;
            self.loaded.insert(key, store);
        }
    }

    /// Whether background reads are under way.
    pub fn is_loading(&self) -> bool {
        !self.loading.is_empty()
    }

    /// Refuses a new named pool beyond the owner's limit (shared pools are the operator's
    /// own choice and always allowed).
    fn check_room_for(&mut self, owner: &Owner, name: &PoolName) -> Result<(), EngineError> {
        if self.limits.max_named == usize::MAX
            || (*owner == Owner::Operator && self.shared.contains(name))
        {
            return Ok(());
        }
        let mut names: HashSet<PoolName> = self
            .loaded
            .keys()
            .chain(self.retiring.keys())
            .filter(|k| k.owner == *owner)
            .filter_map(|k| k.name.clone())
            .collect();
        if names.contains(name) {
            return Ok(());
        }
        if let Some(folder) = self.folder_of(owner, false) {
            names.extend(saved_pool_names(&folder));
        }
        if names.contains(name) || names.len() < self.limits.max_named {
            return Ok(());
        }
        Err(EngineError::PoolLimit {
            limit: self.limits.max_named,
        })
    }

    /// Unloads the least recently used pools that no request holds until there is room for
    /// one more; a pool with unsaved learning is saved in the background first.
    fn make_room(&mut self) {
        // Unloaded pools whose saves keep failing (a full disk) count too; past the limit
        // the oldest is given up, loudly, rather than memory growing without bound.
        while self.loaded.len() + self.retiring.len() >= self.limits.max_loaded {
            let stuck = self
                .retiring
                .iter()
                .filter(|(_, s)| !s.is_saving())
                .min_by_key(|(_, s)| s.last_used)
                .map(|(k, _)| k.clone());
            let Some(key) = stuck else { break };
            let s = self.retiring.remove(&key).expect("found above");
            tracing::error!(
                "gave up saving drafting pool {}: its last saves failed and memory is full",
                s.file.as_deref().unwrap_or(Path::new("?")).display()
            );
        }
        while self.loaded.len() >= self.limits.max_loaded {
            let lru = self
                .loaded
                .iter()
                .filter(|(_, s)| s.is_unused())
                .min_by_key(|(_, s)| s.last_used)
                .map(|(k, _)| k.clone());
            let Some(key) = lru else {
                tracing::warn!(
                    "{} drafting pools are in use at once, over the limit of {}",
                    self.loaded.len(),
                    self.limits.max_loaded
                );
                return;
            };
            let mut store = self.loaded.remove(&key).expect("found above");
            store.save_later(&self.saver);
            if store.has_unsaved() {
                self.retiring.insert(key, store);
            }
        }
    }

    /// The folder of `owner`'s named pools; for a tenant, created when `create` (and not
    /// over the limit of saved tenants). None: its pools live in memory.
    fn folder_of(&mut self, owner: &Owner, create: bool) -> Option<PathBuf> {
        let dir = self.dir.as_ref()?;
        let Owner::Tenant(t) = owner else {
            return Some(dir.clone());
        };
        let tenants = dir.join(TENANTS_DIR);
        let folder = tenants.join(tenant_folder(t));
        if folder.is_dir() || !create {
            return Some(folder);
        }
        // The folder itself is made by the first save. Past the limit the tenant whose
        // pools were saved longest ago makes room, so that no client can fill the disk
        // with tenants nor keep new tenants from saving.
        let count = *self
            .tenant_folders
            .get_or_insert_with(|| std::fs::read_dir(&tenants).map_or(0, |d| d.count()));
        if count >= self.limits.max_saved_tenants {
            match remove_oldest_folder(&tenants) {
                Some(old) => tracing::warn!(
                    "{count} tenants have saved pools, the limit: removed the least recently \
                     saved ({})",
                    old.display()
                ),
                None => return None,
            }
        } else {
            self.tenant_folders = Some(count + 1);
        }
        Some(folder)
    }

    /// Where pool `key`'s trie is saved (its history index beside it).
    fn file_of(&mut self, key: &Key) -> Option<PathBuf> {
        let folder = self.folder_of(&key.owner, true)?;
        let name = key.name.as_ref().map_or(TENANT_DEFAULT, PoolName::as_str);
        Some(folder.join(format!("{name}.trie")))
    }

    /// The trie of `pool` (see [`Pools::pool`]).
    pub fn trie(&mut self, pool: Option<&PoolName>) -> Result<Arc<Mutex<Trie>>, EngineError> {
        self.pool(pool).map(|p| p.trie)
    }

    /// Puts `pool` in place as the operator's pool `name` (replacing what it held),
    /// unsaved.
    pub fn insert(&mut self, name: PoolName, pool: Pool) {
        let key = Key {
            owner: Owner::Operator,
            name: Some(name),
        };
        let file = self.file_of(&key);
        self.retiring.remove(&key);
        self.loaded.insert(key, Store::new(pool, file, true));
    }

    /// Records that a request fed the operator's pool `pool` (the global one for `None`).
    pub fn mark_dirty(&mut self, pool: Option<&PoolName>) {
        self.mark_dirty_in(&CacheScope::Shared, pool);
    }

    /// Records that a request of `scope` fed the pool it named ([`Pools::pool_in`]).
    pub fn mark_dirty_in(&mut self, scope: &CacheScope, pool: Option<&PoolName>) {
        let Some(key) = self.key(scope, pool) else {
            return;
        };
        let store = if key.owner == Owner::Operator && key.name.is_none() {
            Some(&mut self.global)
        } else {
            self.loaded.get_mut(&key)
        };
        if let Some(s) = store {
            s.dirty = true;
        }
    }

    fn stores_mut(&mut self) -> impl Iterator<Item = &mut Store> {
        std::iter::once(&mut self.global)
            .chain(self.loaded.values_mut())
            .chain(self.retiring.values_mut())
    }

    fn stores(&self) -> impl Iterator<Item = &Store> {
        std::iter::once(&self.global)
            .chain(self.loaded.values())
            .chain(self.retiring.values())
    }

    /// Whether anything learned that no save has been handed yet (or a save failed).
    pub fn is_dirty(&self) -> bool {
        self.stores().any(|s| s.dirty || s.needs_save())
    }

    /// Whether background saves are queued or running.
    pub fn is_saving(&self) -> bool {
        self.stores().any(Store::is_saving)
    }

    /// Saves every state that learned since its last save, each atomically, on this
    /// thread, once the background saves under way are done (at exit, so none is cut off
    /// mid-write); a failed save stays dirty and is retried next time.
    pub fn save_dirty(&mut self) -> Vec<SaveResult> {
        self.wait_for_background_saves();
        let mut stores: Vec<&mut Store> = self.stores_mut().collect();
        stores.sort_by(|a, b| a.file.cmp(&b.file));
        let out: Vec<SaveResult> = stores.into_iter().filter_map(Store::save_now).collect();
        self.retiring.retain(|_, s| s.has_unsaved());
        out
    }

    /// Waits (a minute at most) until the background saver is idle.
    fn wait_for_background_saves(&self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while self.is_saving() {
            if std::time::Instant::now() >= deadline {
                tracing::warn!("background saves still running after a minute; saving anyway");
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// Hands every state that learned since its last save to the background saver (which
    /// logs each outcome; a failed save is retried at the next call).
    pub fn save_in_background(&mut self) {
        let mut stores: Vec<&mut Store> = std::iter::once(&mut self.global)
            .chain(self.loaded.values_mut())
            .chain(self.retiring.values_mut())
            .collect();
        for s in &mut stores {
            s.save_later(&self.saver);
        }
        self.retiring.retain(|_, s| s.has_unsaved());
    }
}

#[cfg(test)]
mod tests;
