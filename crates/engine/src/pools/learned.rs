//! What a finished request taught its pool, as a value: replicas of one model publish it
//! (shared drafting state) and every other replica folds it into its own pool of the same
//! owner and name, as if the request had run there.

use std::sync::PoisonError;

use specdec_drafters::TrieDrafterConfig;

use super::{Pool, PoolName, Pools};
use crate::scope::CacheScope;

/// One finished request's lesson for the pool it drafted from: the end of its prompt and
/// its output, exactly what its own engine's trie and history index learned from it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Learned {
    /// Whose pool: the operator's ([`CacheScope::Shared`]) or a tenant's, never a private
    /// request's (those share nothing, so they are never published).
    pub scope: CacheScope,
    /// The pool's name (none: the owner's default pool).
    pub pool: Option<PoolName>,
    /// The prompt's last tokens (as many as a history index keeps before an output).
    pub prompt: Vec<u32>,
    /// The output, every token, and its stop token where it stopped on one.
    pub output: Vec<u32>,
}

/// What [`Pools::fold`] did with a lesson.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Folded {
    /// The pool learned it.
    Applied,
    /// The pool is being read from its files: fold it again once that is done.
    Waiting,
    /// Not for any pool here: a private scope, an empty output, a token outside the
    /// model's vocabulary, or a pool its owner may not create (over its named-pool limit).
    Skipped,
}

impl Pool {
    /// Learns a finished request as its drafters would have: the output's windows into
    /// the trie (from the prompt's last 2 tokens) and prompt tail + output into the history
    /// index. Drafters of the method's default settings read these pools, so the lesson is
    /// the one they teach.
    pub fn learn(&self, prompt: &[u32], output: &[u32]) {
        let mut trie = self.trie.lock().unwrap_or_else(PoisonError::into_inner);
        TrieDrafterConfig::default().learn(&mut trie, prompt, output);
        drop(trie);
        self.history
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .add_request(prompt, output);
    }
}

impl Pools {
    /// Folds a lesson another engine published into this engine's pool of the same owner
    /// and name (loading or creating it as a request would), and marks that pool for
    /// saving. Never reads files on this thread: a pool still on disk is read in the
    /// background and this says [`Folded::Waiting`].
    pub fn fold(&mut self, learned: &Learned) -> Folded {
        let vocab = self.vocab.unwrap_or(usize::MAX);
        let outside = |t: &u32| *t as usize >= vocab;
        if learned.scope == CacheScope::Private
            || learned.output.is_empty()
            || learned.prompt.iter().chain(&learned.output).any(outside)
        {
            return Folded::Skipped;
        }
        let (scope, name) = (&learned.scope, learned.pool.as_ref());
        if !self.prepare(scope, name) {
            return Folded::Waiting;
        }
        match self.pool_in(scope, name) {
            Ok(pool) => {
                pool.learn(&learned.prompt, &learned.output);
                self.mark_dirty_in(scope, name);
                Folded::Applied
            }
            Err(e) => {
                tracing::debug!("a shared lesson for pool {name:?} was not folded: {e}");
                Folded::Skipped
            }
        }
    }

    /// How many prompt tokens a lesson keeps: what a history index keeps before an output,
    /// and at least the trie's 2.
    pub fn lesson_prompt_tokens(&self) -> usize {
        self.history.prompt_tail.max(2)
    }
}
