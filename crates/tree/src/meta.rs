//! What a node carries besides its token.

/// Where a node came from (acceptance is learned per source).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    /// Not drafted: the pending token at a tree's root, or a prefill chunk's tokens.
    Root,
    /// The request's reference documents (LLMA).
    Reference,
    /// The request's own prompt (prompt lookup).
    Prompt,
    /// The output generated so far in this request.
    Output,
    /// The global trie of past prompts and outputs (Lookahead).
    Trie,
    /// A suffix structure over prompt, references and output.
    Suffix,
    /// The suffix index of past requests' prompts and outputs (SuffixDecoding).
    History,
    /// A draft model.
    Model,
    /// The only continuation a catalogue allows (beam search's jump-forward).
    Catalogue,
}

impl Source {
    /// The source's lowercase name, as statistics and logs report it.
    pub fn name(self) -> &'static str {
        match self {
            Source::Root => "root",
            Source::Reference => "reference",
            Source::Prompt => "prompt",
            Source::Output => "output",
            Source::Trie => "trie",
            Source::Suffix => "suffix",
            Source::History => "history",
            Source::Model => "model",
            Source::Catalogue => "catalogue",
        }
    }
}

/// Per-node metadata.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Meta {
    /// Which draft source proposed the node.
    pub source: Source,
    /// The drafter's confidence in `[0, 1]`, higher is better (used to rank and trim).
    pub score: f32,
    /// The draft model's log-probability of the token, where a draft model proposed it
    /// (relaxed and beam verification read it); `None` for draft-free sources.
    pub logprob: Option<f32>,
    /// For a copy, how many tokens of context the copied occurrence matched (a long match
    /// predicts a long copy, and acceptance is learned per match length); 0 when the
    /// source does not copy after a match.
    pub match_len: u32,
    /// For a copy: every indexed occurrence of the context it matched continues with the
    /// same next tokens (its match is not ambiguous; set on a branch's first node). A
    /// short match is usually a common token found in many places that continue
    /// differently, and its copy is rarely accepted; one whose every occurrence agrees is
    /// a quote in progress, accepted far deeper. Acceptance is learned apart for these
    /// copies.
    pub unambiguous: bool,
}

impl Meta {
    /// A drafted node from a draft-free source.
    pub fn drafted(source: Source, score: f32) -> Self {
        Meta {
            source,
            score,
            logprob: None,
            match_len: 0,
            unambiguous: false,
        }
    }

    /// A drafted copy of what followed an earlier occurrence matching `match_len` tokens
    /// of context.
    pub fn copied(source: Source, score: f32, match_len: u32) -> Self {
        Meta {
            match_len,
            ..Meta::drafted(source, score)
        }
    }

    /// The root (pending token) or a prefill token: certain, not drafted.
    pub fn root() -> Self {
        Meta::drafted(Source::Root, 1.0)
    }
}
