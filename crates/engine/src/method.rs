//! Draft methods by name, as the CLI, benchmarks and server select them.

use std::sync::{Arc, Mutex};

use specdec_drafters::{
    DraftError, Drafter, MixDrafter, ReferenceDrafter, SuffixDrafter, Trie, TrieConfig,
    TrieDrafter, TrieDrafterConfig,
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

    /// A drafter for one request; `trie` is the process-wide trie the trie-based methods
    /// read and feed.
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
}

/// The trie saved at `path` if that file exists, else an empty one (a process's first run).
pub fn load_trie(path: Option<&std::path::Path>) -> Result<Arc<Mutex<Trie>>, DraftError> {
    match path {
        Some(p) if p.exists() => Ok(Arc::new(Mutex::new(Trie::load(p)?))),
        _ => Ok(new_trie()),
    }
}

/// Saves `trie` to `path` (atomically; see `Trie::save`), waiting for drafters using it.
pub fn save_trie(trie: &Mutex<Trie>, path: &std::path::Path) -> Result<(), DraftError> {
    trie.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .save(path)
}

/// An empty trie with default limits.
pub fn new_trie() -> Arc<Mutex<Trie>> {
    Arc::new(Mutex::new(Trie::new(TrieConfig::default())))
}
