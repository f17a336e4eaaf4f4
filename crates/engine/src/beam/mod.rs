//! Catalogue-constrained beam search for generative recommendation: plain, with
//! jump-forward over forced tokens, and speculative with a draft model (strict top-K or
//! relaxed sampling verification).

mod catalogue;

pub use catalogue::{Catalogue, TrieNode};
