//! The catalogue trie: the token sequences a constrained beam search may write, each
//! ending in an end token (for titles, the newline that follows them).

use std::collections::HashMap;

use crate::EngineError;

/// A node of the catalogue trie: the tokens written so far lead here.
pub type TrieNode = u32;

/// The catalogue's valid item identifiers as a prefix trie over token ids.
///
/// Entry `i` is the `i`-th distinct sequence given to [`Catalogue::new`]; its last token
/// is its end token, and no entry is a prefix of another, so a beam whose last token is
/// an end token has written exactly one entry.
#[derive(Clone, Debug)]
pub struct Catalogue {
    /// Per node, its children `(token, child)` sorted by token.
    children: Vec<Vec<(u32, TrieNode)>>,
    /// Per node, the entry it ends (only for nodes reached by an entry's last token).
    ends: Vec<Option<u32>>,
    entries: Vec<Vec<u32>>,
    /// For each sequence given to `new`, the entry it became (duplicates share one).
    given: Vec<u32>,
}

impl Catalogue {
    /// The trie's root: no token yet.
    pub const ROOT: TrieNode = 0;

    /// Builds the trie. Exact duplicate sequences become one entry; an empty sequence, or
    /// one that is a proper prefix of another (its end token would not end it), is an
    /// error naming the entry.
    pub fn new(sequences: Vec<Vec<u32>>) -> Result<Self, EngineError> {
        let mut cat = Catalogue {
            children: vec![Vec::new()],
            ends: vec![None],
            entries: Vec::new(),
            given: Vec::with_capacity(sequences.len()),
        };
        let mut index: HashMap<Vec<u32>, u32> = HashMap::new();
        for (i, seq) in sequences.into_iter().enumerate() {
            if seq.is_empty() {
                return Err(EngineError::InvalidRequest(format!(
                    "catalogue entry {i} has no tokens"
                )));
            }
            if let Some(&e) = index.get(&seq) {
                cat.given.push(e);
                continue;
            }
            let mut node = Self::ROOT;
            for &t in &seq {
                if cat.ends[node as usize].is_some() {
                    return Err(prefix_error(i));
                }
                node = cat.child_or_insert(node, t);
            }
            if !cat.children[node as usize].is_empty() {
                return Err(prefix_error(i));
            }
            let e = cat.entries.len() as u32;
            cat.ends[node as usize] = Some(e);
            index.insert(seq.clone(), e);
            cat.entries.push(seq);
            cat.given.push(e);
        }
        Ok(cat)
    }

    fn child_or_insert(&mut self, node: TrieNode, token: u32) -> TrieNode {
        let kids = &self.children[node as usize];
        match kids.binary_search_by_key(&token, |&(t, _)| t) {
            Ok(at) => kids[at].1,
            Err(at) => {
                let child = self.children.len() as TrieNode;
                self.children.push(Vec::new());
                self.ends.push(None);
                self.children[node as usize].insert(at, (token, child));
                child
            }
        }
    }

    /// Number of distinct entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the catalogue has no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entry `e`'s tokens, its end token last.
    pub fn entry(&self, e: usize) -> &[u32] {
        &self.entries[e]
    }

    /// The entry that the `i`-th sequence given to [`Catalogue::new`] became.
    pub fn entry_of_given(&self, i: usize) -> usize {
        self.given[i] as usize
    }

    /// Number of trie nodes (the root included).
    pub fn nodes(&self) -> usize {
        self.children.len()
    }

    /// The tokens allowed after `node`, with the node each leads to, by token id.
    pub fn children(&self, node: TrieNode) -> &[(u32, TrieNode)] {
        &self.children[node as usize]
    }

    /// The node `token` leads to from `node`, if the catalogue allows it.
    pub fn child(&self, node: TrieNode, token: u32) -> Option<TrieNode> {
        let kids = &self.children[node as usize];
        kids.binary_search_by_key(&token, |&(t, _)| t)
            .ok()
            .map(|at| kids[at].1)
    }

    /// The entry `node` completes, if it is reached by an entry's end token.
    pub fn ends_entry(&self, node: TrieNode) -> Option<usize> {
        self.ends[node as usize].map(|e| e as usize)
    }

    /// The node reached by writing `tokens` from the root, if every step is allowed.
    pub fn walk(&self, tokens: &[u32]) -> Option<TrieNode> {
        tokens
            .iter()
            .try_fold(Self::ROOT, |node, &t| self.child(node, t))
    }

    /// The tokens forced after `node`: while exactly one token is allowed and it does not
    /// end an entry, the catalogue leaves no choice.
    pub fn forced(&self, mut node: TrieNode) -> Vec<u32> {
        let mut out = Vec::new();
        while let [(t, child)] = self.children(node)[..] {
            if self.ends[child as usize].is_some() {
                break;
            }
            out.push(t);
            node = child;
        }
        out
    }
}

fn prefix_error(i: usize) -> EngineError {
    EngineError::InvalidRequest(format!(
        "catalogue entry {i} is a prefix of another entry or has one as its prefix: every entry must end in its end token"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_prefixes_and_duplicates() {
        let c = Catalogue::new(vec![
            vec![1, 2, 9],
            vec![1, 3, 9],
            vec![1, 2, 9],
            vec![4, 5, 6, 9],
        ])
        .unwrap();
        assert_eq!(c.len(), 3);
        assert_eq!(c.entry_of_given(2), 0);
        assert_eq!(c.entry_of_given(3), 2);
        assert_eq!(c.children(Catalogue::ROOT).len(), 2);
        let n = c.walk(&[1, 2, 9]).unwrap();
        assert_eq!(c.ends_entry(n), Some(0));
        assert_eq!(c.forced(c.walk(&[4]).unwrap()), vec![5, 6]);
        assert_eq!(c.forced(c.walk(&[1]).unwrap()), Vec::<u32>::new());
        assert!(c.walk(&[2]).is_none());
    }

    #[test]
    fn an_entry_that_prefixes_another_is_refused() {
        assert!(Catalogue::new(vec![vec![1, 2], vec![1, 2, 3]]).is_err());
        assert!(Catalogue::new(vec![vec![1, 2, 3], vec![1, 2]]).is_err());
        assert!(Catalogue::new(vec![vec![]]).is_err());
    }
}
