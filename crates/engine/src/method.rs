//! Draft methods by name, as the CLI, benchmarks and server select them. A method's name
//! is its drafter's name, so acceptance learned under one is found under the other. Names
//! are parsed with the rest of a speculation, in [`spec`](crate::spec) (`DraftMethod::parse`).

use specdec_drafters::{
    Drafter, HistoryDrafter, HistoryDrafterConfig, MixDrafter, ReferenceDrafter, SuffixDrafter,
    TrieDrafter, TrieDrafterConfig,
};

use crate::pools::Pool;

/// Where a request's drafts come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DraftMethod {
    /// Plain decoding.
    None,
    /// Copy from the request's references, prompt and output (LLMA).
    Reference,
    /// Copy from the prompt and output only (prompt lookup).
    Prompt,
    /// The global trie of past prompts and outputs (Lookahead).
    Trie,
    /// A suffix automaton over prompt, references and output.
    Suffix,
    /// The pool's suffix index of past requests' prompts and outputs (SuffixDecoding).
    History,
    /// All of the above merged into one tree.
    Auto,
}

impl DraftMethod {
    /// Every method, plain decoding first.
    pub const ALL: [DraftMethod; 7] = [
        DraftMethod::None,
        DraftMethod::Reference,
        DraftMethod::Prompt,
        DraftMethod::Trie,
        DraftMethod::Suffix,
        DraftMethod::History,
        DraftMethod::Auto,
    ];

    /// The method's name, as requests and flags give it (its drafter's name).
    pub fn name(self) -> &'static str {
        match self {
            DraftMethod::None => "none",
            DraftMethod::Reference => "reference",
            DraftMethod::Prompt => "prompt",
            DraftMethod::Trie => "trie",
            DraftMethod::Suffix => "suffix",
            DraftMethod::History => "history",
            DraftMethod::Auto => "auto",
        }
    }

    /// A drafter for one request; `pool` (the global one or a named one) is what the
    /// trie and history methods read and feed.
    pub fn drafter(self, pool: &Pool) -> Option<Box<dyn Drafter>> {
        let Pool { trie, history } = pool;
        match self {
            DraftMethod::None => None,
            DraftMethod::Reference => Some(Box::new(ReferenceDrafter::default())),
            DraftMethod::Prompt => Some(Box::new(ReferenceDrafter::prompt_only())),
            DraftMethod::Trie => Some(Box::new(TrieDrafter::new(
                trie.clone(),
                TrieDrafterConfig::default(),
            ))),
            DraftMethod::Suffix => Some(Box::new(SuffixDrafter::default())),
            DraftMethod::History => Some(Box::new(HistoryDrafter::new(
                history.clone(),
                HistoryDrafterConfig::default(),
            ))),
            DraftMethod::Auto => Some(Box::new(MixDrafter::auto(
                Some(trie.clone()),
                Some(history.clone()),
            ))),
        }
    }

    /// Whether the method's drafter reads and feeds its pool (trie or history index).
    pub fn uses_pool(self) -> bool {
        matches!(
            self,
            DraftMethod::Trie | DraftMethod::History | DraftMethod::Auto
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_method_and_its_drafter_carry_one_name() {
        let pool = Pool::default();
        for m in DraftMethod::ALL {
            let name = m.drafter(&pool).map_or("none", |d| d.name());
            assert_eq!(name, m.name());
            assert_eq!(DraftMethod::parse(m.name()), Ok(m));
        }
    }
}
