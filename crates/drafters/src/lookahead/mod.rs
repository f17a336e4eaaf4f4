//! Lookahead's n-gram pool (docs/methods/lookahead.md) as a trie of token windows with counts,
//! shared by all requests and persisted, and the drafter that reads it best-first.

pub(crate) mod drafter;
pub(crate) mod trie;
pub(crate) mod trie_file;
