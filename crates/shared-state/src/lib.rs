//! Drafting state shared between replicas of one model through Redis.
//!
//! Each replica's engine learns from the requests it finishes (its pools' tries and history
//! indexes). With shared state, it also publishes each lesson ([`Learned`]: the end of the
//! prompt and the output, with the pool's owner and name) to a Redis stream, and folds
//! every other replica's lessons into its own pools: a repeat that lands on another replica
//! drafts from the first answer. A stream (not pub/sub) keeps the last entries, so a replica
//! that starts late catches up, and one that lost Redis for a while resumes where it was.
//!
//! Redis is a helper, never a dependency of a request: publishing never blocks the engine,
//! an outage is logged once and retried in the background, and drafting goes on from what
//! the replica learns itself. Tenants stay apart: a lesson names its owner, and is folded
//! into that owner's pool only. The stream holds tenants' identities and texts: keep the
//! Redis instance as private to the operator as the pools folder.

mod fold;
mod link;
pub mod wire;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Duration;

pub use fold::{Folding, Folds, MAX_PENDING_LESSONS};
pub use link::MAX_HELD;
use specdec_engine::Learned;

/// Why shared state could not start.
#[derive(Debug, thiserror::Error)]
pub enum SharedStateError {
    /// Not a Redis URL this build can use.
    #[error("--shared-state `{url}` is not a Redis URL (redis://HOST[:PORT][/DB]): {reason}")]
    Url {
        /// The URL as given, credentials hidden.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A thread could not be started.
    #[error("could not start the shared-state threads: {0}")]
    Spawn(#[from] std::io::Error),
}

/// Where and what to share.
#[derive(Clone, Debug)]
pub struct SharedConfig {
    /// `redis://HOST[:PORT][/DB]` (credentials as `redis://:PASSWORD@HOST`).
    pub url: String,
    /// Replicas of one namespace share: the vocabulary's fingerprint, so that only models
    /// whose ids mean the same text do.
    pub namespace: String,
    /// Entries the stream keeps (older ones are trimmed): what a late replica catches up on.
    pub max_entries: usize,
}

impl SharedConfig {
    /// Entries kept by default: a few hours of a busy replica's requests, tens of MB.
    pub const DEFAULT_MAX_ENTRIES: usize = 10_000;

    /// Sharing through `url` with every engine whose model has `tokenizer`'s vocabulary.
    pub fn for_vocabulary(url: &str, tokenizer: &specdec_engine::Tokenizer) -> SharedConfig {
        SharedConfig {
            url: url.to_string(),
            namespace: format!("{:016x}", tokenizer.vocab_fingerprint()),
            max_entries: SharedConfig::DEFAULT_MAX_ENTRIES,
        }
    }

    /// The Redis key of the namespace's stream.
    pub fn key(&self) -> String {
        format!("specdec:{}:learned", self.namespace)
    }
}

/// Counters for `/metrics` and logs.
#[derive(Debug, Default)]
pub struct Stats {
    /// Lessons appended to the stream.
    pub published: AtomicU64,
    /// Other replicas' lessons read.
    pub received: AtomicU64,
    /// Lessons dropped unpublished (the outbox full, or too many held through an outage).
    pub dropped: AtomicU64,
    /// Entries that were not lessons (skipped).
    pub malformed: AtomicU64,
    /// Entries read twice because their publisher sent them again after a lost reply
    /// (skipped).
    pub repeated: AtomicU64,
    /// Lessons waiting for Redis to come back.
    pub held: AtomicUsize,
    /// Whether the publisher's connection is up (after its last attempt).
    pub publisher_up: AtomicBool,
    /// Whether the subscriber's connection is up.
    pub subscriber_up: AtomicBool,
}

/// Lessons the engine may hand over before the publisher takes them; past it they are
/// dropped (counted) rather than block the engine.
const OUTBOX: usize = 1024;

/// A replica's link to the shared state; dropping it stops both threads (the publisher
/// first sends what it holds, if Redis is there).
pub struct SharedState {
    /// `None` once closed.
    outbox: Option<SyncSender<Learned>>,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
    shown: String,
    /// Hears the publisher end (see [`SharedState::close`]).
    published_all: Receiver<()>,
}

impl SharedState {
    /// Starts publishing this replica's lessons and handing every other replica's to
    /// `deliver` (in batches, on the subscriber's thread; it returns false to stop). Redis
    /// need not be up: both sides connect in the background and retry.
    pub fn start(
        cfg: SharedConfig,
        deliver: impl FnMut(Vec<Learned>) -> bool + Send + 'static,
    ) -> Result<SharedState, SharedStateError> {
        let shown = without_credentials(&cfg.url);
        let refused = |reason: String| SharedStateError::Url {
            url: shown.clone(),
            reason,
        };
        if !cfg.url.starts_with("redis://") {
            return Err(refused("only redis:// is supported".into()));
        }
        let client = redis::Client::open(cfg.url.as_str()).map_err(|e| refused(e.to_string()))?;
        let origin = origin();
        let stats = Arc::new(Stats::default());
        let stop = Arc::new(AtomicBool::new(false));
        let (outbox, rx) = sync_channel(OUTBOX);
        let (key, max) = (cfg.key(), cfg.max_entries.max(1));
        let (c, s, k, o, st) = (
            client.clone(),
            shown.clone(),
            key.clone(),
            origin.clone(),
            stats.clone(),
        );
        let (ended, published_all) = channel();
        std::thread::Builder::new()
            .name("specdec-shared-publish".into())
            .spawn(move || {
                link::publish(c, s, k, max, o, rx, st);
                let _ = ended.send(());
            })?;
        let (s, st, sp) = (shown.clone(), stats.clone(), stop.clone());
        std::thread::Builder::new()
            .name("specdec-shared-subscribe".into())
            .spawn(move || link::subscribe(client, s, key, origin, sp, st, deliver))?;
        tracing::info!(
            "sharing drafting state through {shown} (stream {})",
            cfg.key()
        );
        Ok(SharedState {
            outbox: Some(outbox),
            stats,
            stop,
            shown,
            published_all,
        })
    }

    /// Hands a lesson to the publisher; never blocks (a full outbox drops it, counted).
    pub fn publish(&self, learned: Learned) {
        let Some(outbox) = &self.outbox else { return };
        match outbox.try_send(learned) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Stops, giving the publisher up to `wait` to send what it holds (a process about to
    /// exit calls this, or its last lessons would be lost); says whether it did.
    pub fn close(mut self, wait: Duration) -> bool {
        drop(self.outbox.take());
        self.published_all.recv_timeout(wait).is_ok()
    }

    /// The counters.
    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// The Redis URL without credentials.
    pub fn url(&self) -> &str {
        &self.shown
    }
}

impl Drop for SharedState {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// `url` with any password replaced, for logs and errors.
fn without_credentials(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}***{}", &url[..s + 3], &url[at..]),
        _ => url.to_string(),
    }
}

/// This process's name on the stream: its own lessons are not folded back.
fn origin() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("{}-{nanos:x}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_never_reach_logs() {
        assert_eq!(
            without_credentials("redis://:s3cret@h:6379/0"),
            "redis://***@h:6379/0"
        );
        assert_eq!(without_credentials("redis://h:6379"), "redis://h:6379");
    }

    #[test]
    fn a_url_of_another_scheme_is_refused_clearly() {
        let cfg = |url: &str| SharedConfig {
            url: url.into(),
            namespace: "n".into(),
            max_entries: 10,
        };
        let e = SharedState::start(cfg("http://h:6379"), |_| true)
            .err()
            .unwrap();
        assert!(e.to_string().contains("redis://HOST"), "{e}");
        let e = SharedState::start(cfg("redis://h:notaport"), |_| true)
            .err()
            .unwrap();
        assert!(e.to_string().contains("not a Redis URL"), "{e}");
    }
}
