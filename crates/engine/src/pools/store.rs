//! One persisted drafting state and how it is saved: on the caller's thread (at exit), or
//! by a background saver so that the engine thread never writes files while requests wait.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, PoisonError};

use specdec_drafters::{DraftError, FileStamp};

use super::{history_file, Pool};

/// What a save shares between the engine thread and the saver: the version of the file
/// this state last read or wrote, and whether a save is queued or failed.
#[derive(Debug, Default)]
pub(super) struct Persist {
    /// The file as this state last read or wrote it: a different one on disk at the next
    /// save means another process saved there, and its paths are merged in first. Held
    /// for the whole of a save, so two saves of one state never interleave.
    stamp: Mutex<Option<FileStamp>>,
    /// A background save is queued or running.
    busy: AtomicBool,
    /// A background save failed: the state is dirty again.
    failed: AtomicBool,
}

/// One drafting state: its pool, where it is saved and whether it learned since.
pub(super) struct Store {
    pub(super) pool: Pool,
    /// Where its trie is saved (none: kept in memory only); the history index beside it
    /// ([`history_file`]).
    pub(super) file: Option<PathBuf>,
    /// It learned from a request since it was loaded or last handed to a save.
    pub(super) dirty: bool,
    /// When it was last used (the pools' clock): the least recently used is unloaded first.
    pub(super) last_used: u64,
    persist: Arc<Persist>,
}

impl Store {
    pub(super) fn new(pool: Pool, file: Option<PathBuf>, dirty: bool) -> Self {
        // Read before anything learns, so the stamp is the file the trie came from.
        let stamp = file.as_deref().and_then(FileStamp::of);
        Store {
            pool,
            file,
            dirty,
            last_used: 0,
            persist: Arc::new(Persist {
                stamp: Mutex::new(stamp),
                ..Persist::default()
            }),
        }
    }

    /// Whether it came from a file (rather than starting empty).
    pub(super) fn was_on_disk(&self) -> bool {
        self.persist
            .stamp
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }

    /// Takes back a failed background save's learning as unsaved.
    pub(super) fn absorb_failure(&mut self) {
        if self.persist.failed.swap(false, Ordering::AcqRel) {
            self.dirty = true;
        }
    }

    /// Learning that no save has been handed (or a handed one failed).
    pub(super) fn needs_save(&self) -> bool {
        self.file.is_some() && (self.dirty || self.persist.failed.load(Ordering::Acquire))
    }

    /// A background save of it is queued or running.
    pub(super) fn is_saving(&self) -> bool {
        self.persist.busy.load(Ordering::Acquire)
    }

    /// Unsaved learning, queued or not.
    pub(super) fn has_unsaved(&self) -> bool {
        self.file.is_some()
            && (self.dirty
                || self.persist.busy.load(Ordering::Acquire)
                || self.persist.failed.load(Ordering::Acquire))
    }

    /// No request holds its pool (only this store does).
    pub(super) fn is_unused(&self) -> bool {
        Arc::strong_count(&self.pool.trie) == 1 && Arc::strong_count(&self.pool.history) == 1
    }

    /// Saves now, on this thread, if anything is unsaved (a queued background save of it
    /// may still write again afterwards: the same state, harmlessly).
    pub(super) fn save_now(&mut self) -> Option<(PathBuf, Result<(), DraftError>)> {
        self.absorb_failure();
        if !self.has_unsaved() {
            return None;
        }
        let file = self.file.clone()?;
        let result = write(&self.pool, &file, &self.persist);
        if result.is_ok() {
            self.dirty = false;
        }
        Some((file, result))
    }

    /// Hands a dirty state to `saver` unless a save of it is already queued.
    pub(super) fn save_later(&mut self, saver: &Saver) {
        self.absorb_failure();
        let Some(file) = self.file.clone().filter(|_| self.dirty) else {
            return;
        };
        if self.persist.busy.swap(true, Ordering::AcqRel) {
            return;
        }
        self.dirty = false;
        saver.send(SaveJob {
            pool: self.pool.clone(),
            file,
            persist: self.persist.clone(),
        });
    }
}

/// Saves the trie (merged with what other processes saved there) and the history index
/// (last save wins); both must succeed for the state to count as saved. The pool's locks
/// are held only to copy it: requests drafting from it never wait for files, file locks
/// or other processes.
fn write(pool: &Pool, file: &Path, persist: &Persist) -> Result<(), DraftError> {
    let mut stamp = persist.stamp.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
        // A tenant's folder is made when it first has something to save.
        std::fs::create_dir_all(dir).map_err(|source| DraftError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    let mut trie = pool
        .trie
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    // Another process saved here since: its paths are merged into the copy written, and
    // then into the pool, so the next save keeps them too.
    let merges = FileStamp::of(file).is_some_and(|now| Some(now) != *stamp);
    let saved = trie.save_shared(file, *stamp)?;
    *stamp = Some(saved);
    if merges {
        lock(&pool.trie).merge_max(&trie);
    }
    let history = lock(&pool.history).clone();
    history.save(history_file(file))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

struct SaveJob {
    pool: Pool,
    file: PathBuf,
    persist: Arc<Persist>,
}

/// Clears a save's `busy` flag however it ends; a save that panicked counts as failed (its
/// state is saved again next time).
struct SaveGuard<'a>(&'a Persist);

impl Drop for SaveGuard<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.failed.store(true, Ordering::Release);
        }
        self.0.busy.store(false, Ordering::Release);
    }
}

impl SaveJob {
    fn run(self) {
        let _guard = SaveGuard(&self.persist);
        match write(&self.pool, &self.file, &self.persist) {
            Ok(()) => tracing::info!("saved drafting state to {}", self.file.display()),
            Err(e) => {
                tracing::error!(
                    "could not save drafting state to {}: {e} (kept, retried at the next save)",
                    self.file.display()
                );
                self.persist.failed.store(true, Ordering::Release);
            }
        }
    }
}

/// A thread that saves drafting states handed to it, one after another, so that file
/// writes (and merging what other processes saved) never hold up the engine's loop.
/// Requests drafting from a state wait only while that one state is written.
#[derive(Default)]
pub(super) struct Saver {
    tx: Mutex<Option<Sender<SaveJob>>>,
}

impl Saver {
    fn send(&self, job: SaveJob) {
        let mut tx = self.tx.lock().unwrap_or_else(PoisonError::into_inner);
        let job = match tx.as_ref() {
            Some(t) => match t.send(job) {
                Ok(()) => return,
                // The thread is gone (it panicked): start another.
                Err(mpsc::SendError(job)) => job,
            },
            None => job,
        };
        let (t, rx) = mpsc::channel::<SaveJob>();
        let spawned = std::thread::Builder::new()
            .name("specdec-pool-saver".into())
            .spawn(move || rx.into_iter().for_each(SaveJob::run));
        match spawned {
            Ok(_) => {
                t.send(job).expect("the saver was just started");
                *tx = Some(t);
            }
            Err(e) => {
                // Without a thread the save still happens, on this one.
                tracing::warn!("could not start the pool saver thread ({e}); saving inline");
                job.run();
            }
        }
    }
}
