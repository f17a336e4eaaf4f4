//! Draft methods by name, as the CLI, benchmarks and server select them. A method's name
//! is its drafter's name, so acceptance learned under one is found under the other. Names
//! are parsed with the rest of a speculation, in [`spec`](crate::spec) (`DraftMethod::parse`).

use specdec_drafters::{
    Drafter, HistoryDrafter, HistoryDrafterConfig, MixDrafter, ModelDrafter, ReferenceDrafter,
    SuffixDrafter, TrieDrafter, TrieDrafterConfig,
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
    /// A draft model of the target's vocabulary (the engine's, see
    /// [`Engine::with_draft_model`](crate::Engine::with_draft_model)).
    Model,
    /// All of the above merged into one tree (the draft model where the engine has one).
    Auto,
}

impl DraftMethod {
    /// Every method, plain decoding first.
    pub const ALL: [DraftMethod; 8] = [
        DraftMethod::None,
        DraftMethod::Reference,
        DraftMethod::Prompt,
        DraftMethod::Trie,
        DraftMethod::Suffix,
        DraftMethod::History,
        DraftMethod::Model,
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
            DraftMethod::Model => "model",
            DraftMethod::Auto => "auto",
        }
    }

    /// A drafter for one request; `pool` (the global one or a named one) is what the
    /// trie and history methods read and feed, `model` the request's draft-model drafter
    /// (the `model` method's, and one more part of `auto`'s mix). Without a draft model,
    /// `model` gives no drafter (plain decoding): the engine refuses such a request first.
    pub fn drafter(self, pool: &Pool, model: Option<ModelDrafter>) -> Option<Box<dyn Drafter>> {
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
            DraftMethod::Model => model.map(|m| Box::new(m) as Box<dyn Drafter>),
            DraftMethod::Auto => {
                let mut mix = MixDrafter::auto(Some(trie.clone()), Some(history.clone()));
                if let Some(m) = model {
                    mix = mix.with_part(Box::new(m), 1.0);
                }
                Some(Box::new(mix))
            }
        }
    }

    /// Whether the method drafts with the engine's draft model when it has one.
    pub fn uses_model(self) -> bool {
        matches!(self, DraftMethod::Model | DraftMethod::Auto)
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
        let draft = crate::DraftModel::new(
            std::sync::Arc::new(specdec_runtime::FakeTarget::new(16, 64)),
            0.5,
        );
        for m in DraftMethod::ALL {
            let name = m
                .drafter(&pool, Some(draft.drafter(16, &[], true)))
                .map_or("none", |d| d.name());
            assert_eq!(name, m.name());
            assert_eq!(DraftMethod::parse(m.name()), Ok(m));
        }
    }
}
