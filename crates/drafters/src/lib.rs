//! Draft sources for speculative decoding.
//!
//! A drafter proposes a tree of likely continuations of the current context; the engine
//! verifies the whole tree in one forward of the target model. Drafters never see logits
//! and never touch the KV cache: they only read token ids.

mod tree;

pub use tree::{DraftNode, DraftTree, Source};

/// One draft source. A drafter serves one request at a time, between `begin` and `end`.
pub trait Drafter: Send {
    /// A short stable name (`reference`, `trie`, ...).
    fn name(&self) -> &'static str;

    /// A request starts: its prompt and the reference documents it carries, tokenized.
    fn begin(&mut self, prompt: &[u32], references: &[Vec<u32>]);

    /// Tokens were committed to the output, in order (called after every step).
    fn observe(&mut self, committed: &[u32]);

    /// Proposes continuations of `context` (prompt followed by the output so far; its
    /// last token is the one the next forward evaluates first) with at most `budget` nodes.
    /// Roots of the returned tree continue `context` directly.
    fn draft(&mut self, context: &[u32], budget: usize) -> DraftTree;

    /// The request ended with this output (the drafter may learn from it).
    fn end(&mut self, output: &[u32]);
}
