//! The draft tree every drafter returns.

/// Where a draft node came from (acceptance is tracked per source).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
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
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::Reference => "reference",
            Source::Prompt => "prompt",
            Source::Output => "output",
            Source::Trie => "trie",
            Source::Suffix => "suffix",
        }
    }
}

/// One proposed token. `parent` indexes an earlier node; `None` means the node directly
/// continues the context.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DraftNode {
    pub token: u32,
    pub parent: Option<u32>,
    pub source: Source,
    /// The drafter's confidence, higher is better (used to rank and trim).
    pub score: f32,
}

/// Nodes in depth-first order: a node's subtree is contiguous and parents precede children.
/// Siblings carry distinct tokens.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DraftTree {
    pub nodes: Vec<DraftNode>,
}

impl DraftTree {
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// The children of `parent` (`None`: the roots).
    pub fn children(&self, parent: Option<u32>) -> impl Iterator<Item = usize> + '_ {
        self.nodes
            .iter()
            .enumerate()
            .filter(move |(_, n)| n.parent == parent)
            .map(|(i, _)| i)
    }

    /// Depth of every node (roots have depth 1: one token past the context).
    pub fn depths(&self) -> Vec<usize> {
        let mut d = Vec::with_capacity(self.nodes.len());
        for n in &self.nodes {
            d.push(n.parent.map_or(1, |p| d[p as usize] + 1));
        }
        d
    }
}
