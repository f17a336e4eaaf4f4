//! Draft sources for speculative decoding.
//!
//! A drafter proposes a tree of likely continuations of the current context; the engine
//! verifies the whole tree in one forward of the target model. Drafters never see logits
//! and never touch the KV cache: they only read token ids.
//!
//! The tree is the shared [`TokenTree`], numbered as every part of specdec numbers it:
//! node 0 is the context's last token (the pending one, [`Meta::root`]), drafted nodes hang
//! below it in depth-first order ([`TokenTree::check_dfs`]).
//!
//! One module per method:
//!
//! - `llma` — [`ReferenceDrafter`]: LLMA copying from references, prompt and output via an
//!   n-gram index, several occurrences merged into one tree
//!   ([`ReferenceDrafter::prompt_only`]: prompt lookup).
//! - `lookahead` — [`TrieDrafter`]: Lookahead's token-window trie; output counts in a
//!   [`Trie`] shared by all requests (persistable, `lookahead::trie_file`), prompt counts
//!   private to the request.
//! - `automaton_copy` — [`SuffixDrafter`]: copying via a suffix automaton over references,
//!   prompt and output, extended online; draft length grows with the match length.
//! - `suffix_decoding` — [`HistoryDrafter`]: SuffixDecoding's global index: a suffix
//!   automaton over past requests' prompts and outputs ([`HistoryIndex`], shared per pool,
//!   bounded, persisted); the tree of what followed the longest match, scored by
//!   frequency, as deep as the match is long.
//! - `draft_model` — [`ModelDrafter`]: a smaller model of the same vocabulary drafts a
//!   chain of its likeliest tokens with the next likeliest beside it, its own KV cache
//!   kept in step with what the target accepted; depth set by measured cost.
//! - `mix` — [`MixDrafter`]: several drafters merged into one tree; the `auto` method is
//!   [`MixDrafter::auto`] (copying, suffix automaton, and the pool's trie and history).
//!
//! Shared pieces: `sam` (the [`SuffixAutomaton`] and its [`Matcher`]), `ngram` (the n-gram
//! index), `build` ([`TreeBuilder`]), `context` (keeping an index in step with the live
//! context), `file_io` (locked atomic saves and checked loads of drafting state).
//!
//! Scores are rough acceptance probabilities in `[0, 1]`: evidence for the same node from
//! several occurrences or sources is combined by noisy-or (see [`TreeBuilder`]), so trees
//! from different drafters can be merged and trimmed on one scale.

mod automaton_copy;
mod build;
mod context;
mod draft_model;
mod error;
mod file_io;
mod hash;
mod llma;
mod lookahead;
mod mix;
mod ngram;
mod sam;
mod suffix_decoding;

pub use automaton_copy::{SuffixConfig, SuffixDrafter};
pub use build::TreeBuilder;
pub use draft_model::{ModelDrafter, ModelDrafterConfig, TargetClock};
pub use error::DraftError;
pub use llma::{ReferenceConfig, ReferenceDrafter};
pub use lookahead::drafter::{CanStart, TrieDrafter, TrieDrafterConfig, PRIVATE_TRIE_MAX_NODES};
pub use lookahead::trie::{NodeId, Trie, TrieConfig};
pub use lookahead::trie_file::FileStamp;
pub use mix::MixDrafter;
pub use sam::{Matcher, Split, StateId, SuffixAutomaton};
pub use specdec_tree::{Meta, Source, TokenTree};
pub use suffix_decoding::drafter::{HistoryDrafter, HistoryDrafterConfig};
pub use suffix_decoding::index::{HistoryConfig, HistoryIndex};

/// The most reference tokens (all of one request's references together) a drafter
/// indexes; the rest is ignored. Indexes grow linearly with what they hold, and a request
/// builds them on the engine thread, so this bounds one request's memory and the time it
/// holds up everyone else's steps. The server refuses larger references at the edge.
pub const MAX_REFERENCE_TOKENS: usize = 1 << 18;

/// `references` cut to [`MAX_REFERENCE_TOKENS`] in all (the first ones first).
pub fn bounded_references(references: &[Vec<u32>]) -> Vec<&[u32]> {
    let mut left = MAX_REFERENCE_TOKENS;
    let mut out = Vec::new();
    for r in references {
        if left == 0 {
            break;
        }
        let take = r.len().min(left);
        out.push(&r[..take]);
        left -= take;
    }
    out
}

/// One draft source. A drafter serves one request at a time, between `begin` and `end`.
pub trait Drafter: Send {
    /// A short stable name (`reference`, `trie`, ...).
    fn name(&self) -> &'static str;

    /// A request starts: its prompt and the reference documents it carries, tokenized.
    fn begin(&mut self, prompt: &[u32], references: &[Vec<u32>]);

    /// Tokens were committed to the output, in order (called after every step).
    fn observe(&mut self, committed: &[u32]);

    /// Proposes continuations of `context` (prompt followed by the output so far; its
    /// last token is the one the next forward evaluates first). The tree is rooted: node 0
    /// is `context`'s last token ([`Meta::root`]), then at most `budget` drafted nodes below
    /// it in depth-first order, siblings with distinct tokens. An empty `context` gives an
    /// empty tree.
    fn draft(&mut self, context: &[u32], budget: usize) -> TokenTree;

    /// [`Drafter::draft`] without running a model, for a step where a model's forwards
    /// would cost more than they save: in a batch, one member's draft forwards run on the
    /// cores every member's step waits for. A cheap drafter drafts as usual, a costly one
    /// not at all; a mix drafts with its cheap parts.
    fn draft_cheaply(&mut self, context: &[u32], budget: usize) -> TokenTree {
        if self.is_costly() {
            build::undrafted(context)
        } else {
            self.draft(context, budget)
        }
    }

    /// Reads `prompt` ahead of the first draft where that is worth doing now (a draft
    /// model's prefill, while the request is alone); otherwise the first draft catches up.
    /// Cheap drafters index their text in `begin` and do nothing here.
    fn read_ahead(&mut self, _prompt: &[u32]) {}

    /// The request ended with this output (the drafter may learn from it): every token
    /// the model wrote, its stop token last where it stopped on one (so what is learned
    /// knows where an answer ends).
    fn end(&mut self, output: &[u32]);

    /// Whether drafting runs a model (a mix drafts such a part only where its cheap parts
    /// found no sure path).
    fn is_costly(&self) -> bool {
        false
    }
}

/// A borrowed drafter is a drafter, so callers can lend theirs to an owning API.
impl<D: Drafter + ?Sized> Drafter for &mut D {
    fn name(&self) -> &'static str {
        (**self).name()
    }
    fn begin(&mut self, prompt: &[u32], references: &[Vec<u32>]) {
        (**self).begin(prompt, references)
    }
    fn observe(&mut self, committed: &[u32]) {
        (**self).observe(committed)
    }
    fn draft(&mut self, context: &[u32], budget: usize) -> TokenTree {
        (**self).draft(context, budget)
    }
    fn draft_cheaply(&mut self, context: &[u32], budget: usize) -> TokenTree {
        (**self).draft_cheaply(context, budget)
    }
    fn read_ahead(&mut self, prompt: &[u32]) {
        (**self).read_ahead(prompt)
    }
    fn end(&mut self, output: &[u32]) {
        (**self).end(output)
    }
    fn is_costly(&self) -> bool {
        (**self).is_costly()
    }
}
