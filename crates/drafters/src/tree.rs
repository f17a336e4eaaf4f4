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

    /// Checks the shape every drafter must return: parents before children, each subtree
    /// contiguous (DFS order), siblings with distinct tokens. The error names the first
    /// offending node.
    pub fn validate(&self) -> Result<(), String> {
        // `path`: the current root-to-node chain; a DFS-ordered node's parent is on it.
        let mut path: Vec<u32> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (i, n) in self.nodes.iter().enumerate() {
            match n.parent {
                None => path.clear(),
                Some(p) => {
                    if p as usize >= i {
                        return Err(format!("node {i}: parent {p} does not precede it"));
                    }
                    while path.last().is_some_and(|&x| x != p) {
                        path.pop();
                    }
                    if path.is_empty() {
                        return Err(format!("node {i}: parent {p}'s subtree is not contiguous"));
                    }
                }
            }
            if !seen.insert((n.parent, n.token)) {
                return Err(format!("node {i}: a sibling already has token {}", n.token));
            }
            path.push(i as u32);
        }
        Ok(())
    }
}
