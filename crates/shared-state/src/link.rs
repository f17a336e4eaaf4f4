//! The two connections to Redis, each on its own thread: the publisher appends this
//! replica's lessons to the stream, the subscriber reads everyone's. Either one rides out
//! an outage on its own: it logs the first failure, retries with a growing pause, and
//! says when it is connected again; nothing waits for it meanwhile.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::streams::StreamReadReply;
use redis::{Client, Connection};
use specdec_engine::Learned;

use crate::wire::{decode, encode};
use crate::Stats;

/// A connection attempt gives up after this.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// A reply slower than this counts as an outage (a blocking read waits `READ_BLOCK` on top).
const IO_TIMEOUT: Duration = Duration::from_secs(3);
/// How long one read waits for new entries: also how soon the subscriber hears of a stop.
const READ_BLOCK: Duration = Duration::from_secs(1);
/// Entries one read takes at most.
const READ_COUNT: usize = 256;
/// The longest pause between reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// Lessons held while Redis is unreachable; past it the oldest are dropped (counted).
pub const MAX_HELD: usize = 1024;

/// One connection that reconnects by itself.
struct Link {
    client: Client,
    /// The URL without credentials, for logs.
    shown: String,
    role: &'static str,
    con: Option<Connection>,
    down_since: Option<Instant>,
    retry_at: Instant,
    backoff: Duration,
}

impl Link {
    fn new(client: Client, shown: String, role: &'static str) -> Link {
        Link {
            client,
            shown,
            role,
            con: None,
            down_since: None,
            retry_at: Instant::now(),
            backoff: Duration::from_millis(250),
        }
    }

    /// The connection, made now if it is time to try again.
    fn connection(&mut self) -> Option<&mut Connection> {
        if self.con.is_none() && Instant::now() >= self.retry_at {
            let made = self
                .client
                .get_connection_with_timeout(CONNECT_TIMEOUT)
                .and_then(|c| {
                    c.set_read_timeout(Some(IO_TIMEOUT + READ_BLOCK))?;
                    c.set_write_timeout(Some(IO_TIMEOUT))?;
                    Ok(c)
                });
            match made {
                Ok(c) => {
                    if let Some(since) = self.down_since.take() {
                        tracing::info!(
                            "shared state at {}: {} connected again after {:.1}s",
                            self.shown,
                            self.role,
                            since.elapsed().as_secs_f64()
                        );
                    }
                    self.backoff = Duration::from_millis(250);
                    self.con = Some(c);
                }
                Err(e) => self.failed(&e),
            }
        }
        self.con.as_mut()
    }

    /// Drops the connection after `e`; the first failure of an outage is logged.
    fn failed(&mut self, e: &redis::RedisError) {
        self.con = None;
        if self.down_since.is_none() {
            self.down_since = Some(Instant::now());
            tracing::warn!(
                "shared state at {} unreachable ({}: {e}); drafting goes on with this replica's own learning while it retries",
                self.shown,
                self.role
            );
        }
        self.retry_at = Instant::now() + self.backoff;
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
    }

    fn is_up(&self) -> bool {
        self.con.is_some()
    }
}

/// Appends lessons from `outbox` to `key` until the outbox's sender is dropped; what an
/// outage holds back goes out when Redis is back.
pub(crate) fn publish(
    client: Client,
    shown: String,
    key: String,
    max_entries: usize,
    origin: String,
    outbox: Receiver<Learned>,
    stats: Arc<Stats>,
) {
    let mut link = Link::new(client, shown, "publisher");
    // Numbered as they come, so a lesson sent again after a lost reply is known for one.
    let mut held: VecDeque<(u64, Learned)> = VecDeque::new();
    let mut next_seq = 0u64;
    let mut hold = |l: Learned, held: &mut VecDeque<(u64, Learned)>| {
        if held.len() >= MAX_HELD {
            held.pop_front();
            stats.dropped.fetch_add(1, Ordering::Relaxed);
        }
        held.push_back((next_seq, l));
        next_seq += 1;
    };
    let mut open = true;
    while open || !held.is_empty() {
        match outbox.recv_timeout(Duration::from_secs(1)) {
            Ok(l) => hold(l, &mut held),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => open = false,
        }
        while let Ok(l) = outbox.try_recv() {
            hold(l, &mut held);
        }
        if held.is_empty() {
            continue;
        }
        let Some(con) = link.connection() else {
            if !open {
                // Shutting down with Redis away: what is held is lost, and said so.
                tracing::warn!(
                    "shared state: {} lessons were not published (Redis unreachable at exit)",
                    held.len()
                );
                break;
            }
            stats.held.store(held.len(), Ordering::Relaxed);
            stats.publisher_up.store(false, Ordering::Relaxed);
            continue;
        };
        let mut pipe = redis::pipe();
        for (seq, l) in &held {
            let cmd = pipe
                .cmd("XADD")
                .arg(&key)
                .arg("MAXLEN")
                .arg("~")
                .arg(max_entries)
                .arg("*");
            for (field, value) in encode(l, &origin, *seq) {
                cmd.arg(field).arg(value);
            }
            cmd.ignore();
        }
        match pipe.query::<()>(con) {
            Ok(()) => {
                stats
                    .published
                    .fetch_add(held.len() as u64, Ordering::Relaxed);
                held.clear();
            }
            Err(e) => link.failed(&e),
        }
        stats.held.store(held.len(), Ordering::Relaxed);
        stats.publisher_up.store(link.is_up(), Ordering::Relaxed);
    }
}

/// Reads `key` from its start (what a late replica catches up on) and hands every other
/// replica's lessons to `deliver`, in order, until `stop` or `deliver` says no more.
pub(crate) fn subscribe(
    client: Client,
    shown: String,
    key: String,
    origin: String,
    stop: Arc<AtomicBool>,
    stats: Arc<Stats>,
    mut deliver: impl FnMut(Vec<Learned>) -> bool,
) {
    let mut link = Link::new(client, shown, "subscriber");
    let mut last = "0-0".to_string();
    // The next sequence number expected from each origin: a publish retried after a lost
    // reply lands twice, and the second copy is skipped here.
    let mut next_from: HashMap<String, u64> = HashMap::new();
    while !stop.load(Ordering::Relaxed) {
        let Some(con) = link.connection() else {
            stats.subscriber_up.store(false, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        stats.subscriber_up.store(true, Ordering::Relaxed);
        let read = redis::cmd("XREAD")
            .arg("COUNT")
            .arg(READ_COUNT)
            .arg("BLOCK")
            .arg(READ_BLOCK.as_millis() as u64)
            .arg("STREAMS")
            .arg(&key)
            .arg(&last)
            .query::<Option<StreamReadReply>>(con);
        let reply = match read {
            Ok(Some(r)) => r,
            Ok(None) => continue,
            Err(e) => {
                link.failed(&e);
                continue;
            }
        };
        let mut batch = Vec::new();
        for entry in reply.keys.into_iter().flat_map(|k| k.ids) {
            match decode(&entry.map) {
                Ok(e) if e.origin == origin => {}
                Ok(e) => {
                    let next = next_from.entry(e.origin).or_insert(0);
                    if e.seq >= *next {
                        *next = e.seq + 1;
                        batch.push(e.learned);
                    } else {
                        stats.repeated.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Err(err) => {
                    stats.malformed.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!("shared state: skipped entry {} of {key}: {err}", entry.id);
                }
            }
            last = entry.id;
        }
        if batch.is_empty() {
            continue;
        }
        stats
            .received
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        if !deliver(batch) {
            break;
        }
    }
    stats.subscriber_up.store(false, Ordering::Relaxed);
}
