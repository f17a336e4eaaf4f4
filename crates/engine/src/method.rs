//! Draft methods by name, as the CLI, benchmarks and server select them. A method's name
//! is its drafter's name, so acceptance learned under one is found under the other.

use std::sync::{Arc, Mutex};

use specdec_drafters::{
    Drafter, MixDrafter, ReferenceDrafter, SuffixDrafter, Trie, TrieDrafter, TrieDrafterConfig,
};

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
    /// All of the above merged into one tree.
    Auto,
}

impl DraftMethod {
    pub const ALL: [DraftMethod; 6] = [
        DraftMethod::None,
        DraftMethod::Reference,
        DraftMethod::Prompt,
        DraftMethod::Trie,
        DraftMethod::Suffix,
        DraftMethod::Auto,
    ];

    pub fn name(self) -> &'static str {
        match self {
            DraftMethod::None => "none",
            DraftMethod::Reference => "reference",
            DraftMethod::Prompt => "prompt",
            DraftMethod::Trie => "trie",
            DraftMethod::Suffix => "suffix",
            DraftMethod::Auto => "auto",
        }
    }

    pub fn parse(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|m| m.name()).collect();
                format!("unknown draft method `{s}` (known: {})", names.join(", "))
            })
    }

    /// A drafter for one request; `trie` is the trie (global or a pool's) the trie-based
    /// methods read and feed.
    pub fn drafter(self, trie: &Arc<Mutex<Trie>>) -> Option<Box<dyn Drafter>> {
        match self {
            DraftMethod::None => None,
            DraftMethod::Reference => Some(Box::new(ReferenceDrafter::default())),
            DraftMethod::Prompt => Some(Box::new(ReferenceDrafter::prompt_only())),
            DraftMethod::Trie => Some(Box::new(TrieDrafter::new(
                trie.clone(),
                TrieDrafterConfig::default(),
            ))),
            DraftMethod::Suffix => Some(Box::new(SuffixDrafter::default())),
            DraftMethod::Auto => Some(Box::new(MixDrafter::auto(Some(trie.clone())))),
        }
    }

    /// Whether the method's drafter reads and feeds a trie.
    pub fn uses_trie(self) -> bool {
        matches!(self, DraftMethod::Trie | DraftMethod::Auto)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_method_and_its_drafter_carry_one_name() {
        let trie = crate::pools::new_trie();
        for m in DraftMethod::ALL {
            let name = m.drafter(&trie).map_or("none", |d| d.name());
            assert_eq!(name, m.name());
            assert_eq!(DraftMethod::parse(m.name()), Ok(m));
        }
    }
}
