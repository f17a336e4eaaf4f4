//! A sequence as the engine sees it, whatever keeps its cache.
//!
//! The engine, the drafters and the server hold [`Sequence`]s: handles with the committed
//! tokens, commit, fork, prefix and memory accounting. What stands behind a handle belongs
//! to the [`Target`](crate::Target) that made it: the CPU runtime's keys and values
//! (`kv::KvCache`), nothing at all for targets that recompute from the tokens
//! ([`FakeTarget`](crate::FakeTarget), [`ReplayTarget`](crate::ReplayTarget)), and a GPU
//! or remote backend's own blocks. A backend implements [`SequenceState`] and reads its
//! own state back in its forward with [`Sequence::state_mut`]; a handle made by another
//! target is refused there with [`RuntimeError::ForeignSequence`], never misread.
//!
//! Every backend keeps its tokens in a [`TokenLog`], so a commit is checked, and a context
//! overflow refused, by the same code whatever computes the logits.

use std::any::Any;

use crate::{Node, RuntimeError};

/// The committed tokens of a sequence and the nodes of its last forward.
#[derive(Clone, Debug)]
pub struct TokenLog {
    tokens: Vec<u32>,
    pending: Vec<Node>,
    max_len: usize,
}

impl TokenLog {
    /// An empty log of a sequence that may hold `max_len` positions.
    pub fn new(max_len: usize) -> Self {
        TokenLog {
            tokens: Vec::new(),
            pending: Vec::new(),
            max_len,
        }
    }

    /// The committed tokens.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Number of committed tokens.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether no token is committed yet.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The context length of the model the sequence belongs to.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// The last forward's nodes (empty once committed).
    pub fn pending(&self) -> &[Node] {
        &self.pending
    }

    /// Records `nodes` as the last forward's, for the next commit.
    pub(crate) fn set_pending(&mut self, nodes: &[Node]) {
        self.pending.clear();
        self.pending.extend_from_slice(nodes);
    }

    /// Refuses a forward of `extra` more nodes past the context length.
    pub(crate) fn check_room(&self, extra: usize) -> Result<(), RuntimeError> {
        let needed = self.len() + extra;
        if needed > self.max_len {
            return Err(RuntimeError::ContextOverflow {
                needed,
                limit: self.max_len,
            });
        }
        Ok(())
    }

    /// Refuses a `path` that is not a chain of the last forward's nodes, the first a root
    /// and each next one a child of the previous.
    pub(crate) fn check_commit(&self, path: &[usize]) -> Result<(), RuntimeError> {
        match specdec_tree::chain_break(&self.pending, path) {
            Some(k) => {
                let prev = k.checked_sub(1).map(|i| path[i]);
                Err(RuntimeError::BadCommit(format!(
                    "node {} is not a child of {prev:?} in the last forward",
                    path[k]
                )))
            }
            None => Ok(()),
        }
    }

    /// Appends the tokens of `path` (checked by [`check_commit`](Self::check_commit)) and
    /// forgets the last forward.
    pub(crate) fn accept(&mut self, path: &[usize]) {
        for &j in path {
            self.tokens.push(self.pending[j].token);
        }
        self.pending.clear();
    }

    /// Keeps the first `len` committed tokens and forgets the last forward.
    pub(crate) fn truncate(&mut self, len: usize) {
        self.tokens.truncate(len);
        self.pending.clear();
    }
}

/// What a backend keeps per sequence behind a [`Sequence`] handle. The handle does the
/// token bookkeeping through [`log`](Self::log) (a commit's path is checked there, once,
/// for every backend); a backend moves its cache along in [`keep`](Self::keep) and
/// [`truncated`](Self::truncated).
pub trait SequenceState: Any + Send + Sync {
    /// The sequence's tokens and last forward.
    fn log(&self) -> &TokenLog;

    /// The same, to record a forward's nodes.
    fn log_mut(&mut self) -> &mut TokenLog;

    /// A sequence that continues exactly as this one would; writing to either never
    /// changes the other. It keeps the last forward's nodes, so either may commit them.
    fn fork(&self) -> Box<dyn SequenceState>;

    /// Moves the cache of the last forward's nodes `path` (a checked root-to-node chain)
    /// to the positions after the committed ones; the handle then commits their tokens.
    fn keep(&mut self, path: &[usize]) {
        let _ = path;
    }

    /// Releases what the cache holds past the committed tokens, which the handle has just
    /// truncated.
    fn truncated(&mut self) {}

    /// Bytes of cache attributed to this sequence (see [`Sequence::memory_bytes`]).
    fn memory_bytes(&self) -> usize {
        0
    }

    /// Calls `each(id, bytes)` for every allocation this sequence reads, `id` the same for
    /// an allocation shared by several sequences (see [`Sequence::memory_bytes_of`]).
    fn allocations(&self, each: &mut dyn FnMut(usize, usize)) {
        let _ = each;
    }

    /// Frees growth headroom the sequence holds alone.
    fn shrink_to_fit(&mut self) {}
}

/// A sequence with no cache: for targets that compute each node from its token path.
impl SequenceState for TokenLog {
    fn log(&self) -> &TokenLog {
        self
    }

    fn log_mut(&mut self) -> &mut TokenLog {
        self
    }

    fn fork(&self) -> Box<dyn SequenceState> {
        Box::new(self.clone())
    }
}

/// One sequence of a [`Target`](crate::Target): the committed tokens and whatever the
/// target keeps for them.
///
/// `Clone` is a [`fork`](Sequence::fork).
pub struct Sequence(Box<dyn SequenceState>);

impl Clone for Sequence {
    fn clone(&self) -> Self {
        self.fork()
    }
}

impl Sequence {
    /// A handle over a backend's own state.
    pub fn new(state: impl SequenceState) -> Self {
        Sequence(Box::new(state))
    }

    /// A sequence that keeps only its tokens, of a target with a context of `max_len`.
    pub fn without_cache(max_len: usize) -> Self {
        Sequence::new(TokenLog::new(max_len))
    }

    /// The backend state behind this handle, if it is a `T`.
    pub fn state<T: SequenceState>(&self) -> Option<&T> {
        let any: &dyn Any = &*self.0;
        any.downcast_ref()
    }

    /// The same, mutable: a backend's forward reads and writes its cache through it.
    pub fn state_mut<T: SequenceState>(&mut self) -> Option<&mut T> {
        let any: &mut dyn Any = &mut *self.0;
        any.downcast_mut()
    }

    /// Number of committed tokens.
    pub fn len(&self) -> usize {
        self.0.log().len()
    }

    /// Whether no token is committed yet.
    pub fn is_empty(&self) -> bool {
        self.0.log().is_empty()
    }

    /// The committed tokens.
    pub fn tokens(&self) -> &[u32] {
        self.0.log().tokens()
    }

    /// The context length of the model this sequence belongs to.
    pub fn max_len(&self) -> usize {
        self.0.log().max_len()
    }

    /// The last forward's nodes, until a commit.
    pub(crate) fn pending(&self) -> &[Node] {
        self.0.log().pending()
    }

    /// Refuses a forward of `extra` more nodes past the context length.
    pub(crate) fn check_room(&self, extra: usize) -> Result<(), RuntimeError> {
        self.0.log().check_room(extra)
    }

    /// Records `nodes` as the last forward's.
    pub(crate) fn set_pending(&mut self, nodes: &[Node]) {
        self.0.log_mut().set_pending(nodes);
    }

    /// Keeps the last forward's nodes `path` (a chain: the first a root, each next one a
    /// child of the previous) as committed tokens and drops every other node.
    pub fn commit(&mut self, path: &[usize]) -> Result<(), RuntimeError> {
        self.0.log().check_commit(path)?;
        self.0.keep(path);
        self.0.log_mut().accept(path);
        Ok(())
    }

    /// Commits every node of the last forward, which must have been a single chain.
    pub fn commit_all(&mut self) -> Result<(), RuntimeError> {
        let path: Vec<usize> = (0..self.pending().len()).collect();
        self.commit(&path)
    }

    /// A sequence sharing this one's cache (copy-on-write where the backend can): it
    /// continues exactly as this one would, and writing to either never changes the other.
    /// The fork keeps the last forward's nodes, so either side may commit any path of it.
    pub fn fork(&self) -> Sequence {
        Sequence(self.0.fork())
    }

    /// A fork that commits the last forward's nodes `path` (a root-to-node chain, as for
    /// [`commit`](Sequence::commit)). Call it before committing this sequence, once per
    /// branch to keep: beam search continues several children of one forward this way.
    pub fn branch(&self, path: &[usize]) -> Result<Sequence, RuntimeError> {
        let mut b = self.fork();
        b.commit(path)?;
        Ok(b)
    }

    /// A fork holding only the first `len` committed tokens, for a request that shares
    /// that prefix: it continues exactly as this sequence would have from there.
    pub fn prefix(&self, len: usize) -> Sequence {
        let mut s = self.fork();
        s.truncate(len);
        s
    }

    /// Drops committed tokens after `len` (rollback to an earlier state).
    pub fn truncate(&mut self, len: usize) {
        self.0.log_mut().truncate(len);
        self.0.truncated();
    }

    /// Bytes of cache memory attributed to this sequence: what it holds alone counts
    /// whole, what it shares counts as far as this sequence reads it. So forks of one
    /// sequence each count the shared part: the memory several sequences take together is
    /// [`Sequence::memory_bytes_of`].
    pub fn memory_bytes(&self) -> usize {
        self.0.memory_bytes()
    }

    /// Bytes of cache memory `seqs` take together: every allocation any of them reads,
    /// counted once, whole.
    pub fn memory_bytes_of<'a>(seqs: impl IntoIterator<Item = &'a Sequence>) -> usize {
        let mut seen = std::collections::HashSet::new();
        let mut bytes = 0;
        for s in seqs {
            s.0.allocations(&mut |id, n| {
                if seen.insert(id) {
                    bytes += n;
                }
            });
        }
        bytes
    }

    /// Frees the growth headroom of what this sequence holds alone.
    pub fn shrink_to_fit(&mut self) {
        self.0.shrink_to_fit();
    }
}
