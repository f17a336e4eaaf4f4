//! Reuse of finished requests' KV caches by later requests that share a prefix: a chat's
//! next turn (its prompt holds the previous prompt and answer), requests sharing a system
//! prompt or retrieved documents, a client retrying. A position's keys and values depend
//! only on the tokens up to it (the runtime is batch-invariant), so a reused prefix gives
//! exactly the tokens a fresh prefill would.
//!
//! Entries are kept per [`CacheScope`]: a request reuses only prefixes of requests of its
//! own scope, since a hit's length (reported as cached tokens, and visible in latency)
//! tells what the prompt shares with an earlier one.

use specdec_runtime::Sequence;

use crate::scope::CacheScope;

/// Shared prefixes shorter than this are prefilled afresh (reuse would not pay).
const MIN_REUSE: usize = 16;

struct Entry {
    scope: CacheScope,
    seq: Sequence,
    last_used: u64,
}

/// Finished sequences, least recently used evicted first, bounded by memory.
pub struct PrefixCache {
    entries: Vec<Entry>,
    max_bytes: usize,
    clock: u64,
    hits: u64,
    reused_tokens: u64,
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl PrefixCache {
    /// An empty cache holding at most `max_bytes` of KV cache.
    pub fn new(max_bytes: usize) -> Self {
        PrefixCache {
            entries: Vec::new(),
            max_bytes,
            clock: 0,
            hits: 0,
            reused_tokens: 0,
        }
    }

    /// A sequence holding the longest prefix of `tokens` cached by a request of `scope`, if
    /// one is worth reusing: a fork that shares the cached blocks (copy-on-write), so a hit
    /// copies at most one partial block.
    pub fn lookup(&mut self, scope: &CacheScope, tokens: &[u32]) -> Option<Sequence> {
        self.clock += 1;
        if *scope == CacheScope::Private {
            return None;
        }
        let (best, len) = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.scope == *scope)
            .map(|(i, e)| (i, common_prefix(e.seq.tokens(), tokens)))
            .max_by_key(|&(_, n)| n)?;
        if len < MIN_REUSE {
            return None;
        }
        let e = &mut self.entries[best];
        e.last_used = self.clock;
        self.hits += 1;
        self.reused_tokens += len as u64;
        Some(e.seq.prefix(len))
    }

    /// Keeps a finished sequence for later requests of `scope` (none for a private one).
    pub fn insert(&mut self, scope: &CacheScope, mut seq: Sequence) {
        self.clock += 1;
        if *scope == CacheScope::Private {
            return;
        }
        // Drop the growth headroom first, so the entry is measured at what it keeps.
        seq.shrink_to_fit();
        let bytes = seq.memory_bytes();
        if seq.len() < MIN_REUSE || bytes > self.max_bytes {
            return;
        }
        // An entry this one extends (or equals) is superseded; one that extends this one
        // already holds everything it could offer.
        let new = seq.tokens();
        let same = |e: &Entry| e.scope == *scope;
        if self
            .entries
            .iter()
            .any(|e| same(e) && e.seq.tokens().starts_with(new))
        {
            return;
        }
        self.entries
            .retain(|e| !(same(e) && new.starts_with(e.seq.tokens())));
        while self.used() + bytes > self.max_bytes {
            let Some(oldest) = self
                .entries
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| e.last_used)
                .map(|(i, _)| i)
            else {
                break;
            };
            self.entries.swap_remove(oldest);
        }
        let last_used = self.clock;
        self.entries.push(Entry {
            scope: scope.clone(),
            seq,
            last_used,
        });
    }

    fn used(&self) -> usize {
        self.entries.iter().map(|e| e.seq.memory_bytes()).sum()
    }

    /// (lookups that reused a prefix, tokens reused).
    pub fn stats(&self) -> (u64, u64) {
        (self.hits, self.reused_tokens)
    }
}
