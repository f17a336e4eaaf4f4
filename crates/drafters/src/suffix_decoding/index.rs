//! The history index: a suffix automaton over past requests' prompts and outputs, shared by
//! every request of a pool (SuffixDecoding's global tree, as an automaton).
//!
//! Each finished request adds one document: the tail of its prompt followed by its output,
//! so a later request whose prompt repeats an earlier one matches into the earlier output
//! from its first token, and one whose output repeats a stretch of an earlier output
//! matches there. The automaton gives the longest match of any length in O(1) amortized per
//! token and counts how often each continuation followed it.
//!
//! Memory is bounded by a token cap without ever rebuilding an automaton (a rebuild of a
//! million tokens takes about a second, a stall no request should see): the index keeps
//! two generations, each an automaton of at most half the cap. Requests go into the newer
//! one; when it is full, the older one is dropped whole (its requests are the oldest) and
//! the newer one becomes the older. So the index holds the newest requests, between half
//! the cap and the cap once it has filled, and a match is looked up in both. Exact
//! duplicates of a document already held are not added again.
//!
//! File format, version 1, little-endian:
//! ```text
//! magic    8 bytes  "specdHIS"
//! version  u32      1
//! reserved u32      0
//! docs     u64      documents, oldest first
//! tokens   u64      tokens of all documents
//! lengths  docs × u32
//! text     tokens × u32
//! checksum u64      FNV-1a of every byte before it
//! ```

use std::collections::HashSet;
use std::path::Path;

use crate::error::DraftError;
use crate::file_io::{check_vocab, read_file, u32_at, u64_at, write_atomic, Frame};
use crate::hash::fnv1a64;
use crate::sam::{Matcher, StateId, SuffixAutomaton};

const MAGIC: [u8; 8] = *b"specdHIS";
const FRAME: Frame = Frame {
    magic: MAGIC,
    version: 1,
    header: HEADER,
};
const HEADER: usize = 32;

/// Settings of a [`HistoryIndex`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistoryConfig {
    /// The most tokens held (all documents together).
    pub max_tokens: usize,
    /// Prompt tokens kept before each output: enough to recognise a repeated request by
    /// the end of its prompt (the question, the template's assistant header).
    pub prompt_tail: usize,
}

impl HistoryConfig {
    /// The document a finished request becomes: the last `prompt_tail` tokens of its
    /// prompt, then its output.
    pub fn document(&self, prompt: &[u32], output: &[u32]) -> Vec<u32> {
        let tail = &prompt[prompt.len().saturating_sub(self.prompt_tail)..];
        let mut doc = Vec::with_capacity(tail.len() + output.len());
        doc.extend_from_slice(tail);
        doc.extend_from_slice(output);
        doc
    }
}

impl Default for HistoryConfig {
    fn default() -> Self {
        HistoryConfig {
            max_tokens: 1 << 20,
            prompt_tail: 256,
        }
    }
}

/// One generation: an automaton over whole documents, and what it holds.
#[derive(Clone, Debug)]
struct Generation {
    sam: SuffixAutomaton,
    /// The hash of every document (to skip exact duplicates; the documents themselves are
    /// the automaton's). A set, not a list: a lookup per insert must not scan every held
    /// document, or filling a pool (or loading it) takes time quadratic in its documents.
    /// It lives and dies with its generation, so eviction keeps it in step for free.
    hashes: HashSet<u64>,
}

impl Generation {
    fn new() -> Self {
        Generation {
            sam: SuffixAutomaton::counting(),
            hashes: HashSet::new(),
        }
    }

    /// Bytes of the hash set: a slot (hash and control byte) per bucket of its capacity;
    /// a hash table's empty slots are spread through it, so they count.
    fn hash_bytes(&self) -> usize {
        self.hashes.capacity() * (std::mem::size_of::<u64>() + 1)
    }
}

/// Generations of an index: the older first.
const OLDER: usize = 0;
const NEWER: usize = 1;

/// A suffix index of past requests (see the module docs).
#[derive(Clone, Debug)]
pub struct HistoryIndex {
    cfg: HistoryConfig,
    gens: [Generation; 2],
    /// Changes whenever an automaton does: a matcher made before a change must start over.
    epoch: u64,
}

impl Default for HistoryIndex {
    fn default() -> Self {
        Self::new(HistoryConfig::default())
    }
}

impl PartialEq for HistoryIndex {
    /// Same documents in the same order (the automata follow from them).
    fn eq(&self, other: &Self) -> bool {
        self.documents_held().eq(other.documents_held())
    }
}

fn doc_hash(doc: &[u32]) -> u64 {
    let bytes: Vec<u8> = doc.iter().flat_map(|t| t.to_le_bytes()).collect();
    fnv1a64(&bytes) ^ (doc.len() as u64).rotate_left(32)
}

/// Matches of one context in each generation of an index (see
/// [`HistoryIndex::matchers_at`]).
pub type Matchers = [Matcher; 2];

impl HistoryIndex {
    /// An empty index bounded by `cfg`.
    pub fn new(cfg: HistoryConfig) -> Self {
        HistoryIndex {
            cfg,
            gens: [Generation::new(), Generation::new()],
            epoch: 0,
        }
    }

    /// The bounds the index was made with.
    pub fn config(&self) -> &HistoryConfig {
        &self.cfg
    }

    /// The most tokens one generation holds.
    fn generation_cap(&self) -> usize {
        (self.cfg.max_tokens / 2).max(1)
    }

    /// Tokens held.
    pub fn tokens(&self) -> usize {
        self.gens.iter().map(|g| g.sam.text().len()).sum()
    }

    /// Documents held.
    pub fn documents(&self) -> usize {
        self.gens.iter().map(|g| g.hashes.len()).sum()
    }

    /// The documents held, oldest first.
    pub fn documents_held(&self) -> impl Iterator<Item = &[u32]> {
        self.gens.iter().flat_map(|g| g.sam.documents())
    }

    /// Whether no document is held.
    pub fn is_empty(&self) -> bool {
        self.documents() == 0
    }

    /// Changes with every change of the index (see [`HistoryIndex::matchers_at`]).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The automaton of generation `g` (0: the older).
    pub fn automaton(&self, g: usize) -> &SuffixAutomaton {
        &self.gens[g].sam
    }

    /// Bytes the index holds in use (automata, text and bookkeeping).
    pub fn memory_bytes(&self) -> usize {
        self.gens
            .iter()
            .map(|g| g.sam.memory_bytes() + g.hash_bytes())
            .sum()
    }

    /// Adds a finished request: the last `prompt_tail` tokens of `prompt`, then `output`.
    /// Returns whether anything was added (an empty output or an exact repeat is not).
    pub fn add_request(&mut self, prompt: &[u32], output: &[u32]) -> bool {
        if output.is_empty() {
            return false;
        }
        let doc = self.cfg.document(prompt, output);
        self.insert(&doc)
    }

    /// Adds one document (its last half-cap tokens if longer), dropping the older
    /// generation first if the newer one is full; an exact duplicate of a held document is
    /// skipped.
    pub fn insert(&mut self, doc: &[u32]) -> bool {
        let doc = &doc[doc.len().saturating_sub(self.generation_cap())..];
        if doc.is_empty() {
            return false;
        }
        let hash = doc_hash(doc);
        if self.gens.iter().any(|g| g.hashes.contains(&hash)) {
            return false;
        }
        if self.gens[NEWER].sam.text().len() + doc.len() > self.generation_cap() {
            let newer = std::mem::replace(&mut self.gens[NEWER], Generation::new());
            self.gens[OLDER] = newer;
        }
        let g = &mut self.gens[NEWER];
        g.sam.start_document();
        for &t in doc {
            g.sam.push(t);
        }
        g.hashes.insert(hash);
        self.epoch += 1;
        true
    }

    /// The longest suffix of `context` that occurs in each generation (looking at most
    /// `window` tokens back), as matchers positioned there.
    pub fn matchers_at(&self, context: &[u32], window: usize) -> Matchers {
        let tail = &context[context.len().saturating_sub(window)..];
        self.gens.each_ref().map(|g| {
            let mut m = Matcher::new();
            for &t in tail {
                m.advance(&g.sam, t);
            }
            m
        })
    }

    /// Advances matchers made by [`HistoryIndex::matchers_at`] (under the same epoch) by
    /// one context token.
    pub fn advance(&self, matchers: &mut Matchers, token: u32) {
        for (m, g) in matchers.iter_mut().zip(&self.gens) {
            m.advance(&g.sam, token);
        }
    }

    /// Length of the longest suffix of `context` that occurs in a document.
    pub fn longest_match(&self, context: &[u32]) -> usize {
        let m = self.matchers_at(context, context.len());
        m.iter().map(|m| m.len).max().unwrap_or(0)
    }

    /// Continuations of state `s` of generation `g`: (token, next state, how often it
    /// followed), most frequent first (ties: smaller token first).
    pub fn continuations(&self, g: usize, s: StateId, out: &mut Vec<(u32, StateId, u32)>) {
        let sam = &self.gens[g].sam;
        out.clear();
        out.extend(
            sam.transitions(s)
                .iter()
                .map(|&(t, n)| (t, n, sam.count(n))),
        );
        out.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
    }

    /// The file image of the index (see the module docs).
    pub fn to_bytes(&self) -> Vec<u8> {
        let lens: Vec<usize> = self.documents_held().map(<[u32]>::len).collect();
        let tokens = self.tokens();
        let mut b = FRAME.start(4 * (lens.len() + tokens));
        b.extend_from_slice(&(lens.len() as u64).to_le_bytes());
        b.extend_from_slice(&(tokens as u64).to_le_bytes());
        for len in lens {
            b.extend_from_slice(&(len as u32).to_le_bytes());
        }
        for g in &self.gens {
            for &t in g.sam.text() {
                b.extend_from_slice(&t.to_le_bytes());
            }
        }
        Frame::seal(&mut b);
        b
    }

    /// Parses a file image into an index with settings `cfg` (the documents are inserted
    /// one by one, oldest first, so a smaller cap keeps the newest).
    pub fn from_bytes(b: &[u8], cfg: HistoryConfig) -> Result<HistoryIndex, DraftError> {
        let b = FRAME.open(b, |b| {
            u64_at(b, 16)
                .checked_add(u64_at(b, 24))
                .and_then(|n| n.checked_mul(4))
        })?;
        let (docs, tokens) = (u64_at(b, 16), u64_at(b, 24));
        let lens: Vec<usize> = (0..docs as usize)
            .map(|i| u32_at(b, HEADER + 4 * i) as usize)
            .collect();
        if lens.iter().sum::<usize>() as u64 != tokens || lens.contains(&0) {
            return Err(DraftError::Malformed(
                "document lengths do not add up to the token count (or one is empty)".into(),
            ));
        }
        let text_at = HEADER + 4 * docs as usize;
        let text: Vec<u32> = b[text_at..]
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect();
        let mut index = HistoryIndex::new(cfg);
        let mut at = 0;
        for len in lens {
            index.insert(&text[at..at + len]);
            at += len;
        }
        Ok(index)
    }

    /// The largest token id held, if any.
    pub fn max_token(&self) -> Option<u32> {
        self.gens
            .iter()
            .flat_map(|g| g.sam.text().iter().copied())
            .max()
    }

    /// An error if a token id is outside a vocabulary of `vocab` ids.
    pub fn check_vocab(&self, vocab: usize) -> Result<(), DraftError> {
        check_vocab(self.max_token(), vocab)
    }

    /// Writes the index atomically (temporary file, fsync, rename, under the file's lock).
    /// Two processes saving one file do not merge: the last save wins.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), DraftError> {
        write_atomic(path.as_ref(), &self.to_bytes())
    }

    /// Reads an index written by [`HistoryIndex::save`], checking its token ids against a
    /// vocabulary of `vocab`.
    pub fn load(
        path: impl AsRef<Path>,
        cfg: HistoryConfig,
        vocab: usize,
    ) -> Result<HistoryIndex, DraftError> {
        let index = HistoryIndex::from_bytes(&read_file(path.as_ref(), &MAGIC)?, cfg)?;
        index.check_vocab(vocab)?;
        Ok(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small(max_tokens: usize) -> HistoryIndex {
        HistoryIndex::new(HistoryConfig {
            max_tokens,
            prompt_tail: 4,
        })
    }

    #[test]
    fn a_request_adds_its_prompt_tail_and_output() {
        let mut h = small(100);
        assert!(h.add_request(&[1, 2, 3, 4, 5, 6], &[7, 8]));
        assert_eq!(h.automaton(NEWER).text(), &[3, 4, 5, 6, 7, 8]);
        assert!(!h.add_request(&[9, 3, 4, 5, 6], &[7, 8]), "exact repeat");
        assert!(!h.add_request(&[1], &[]), "nothing generated");
        assert_eq!(h.longest_match(&[0, 4, 5, 6]), 3);
    }

    #[test]
    fn continuations_are_counted_most_frequent_first() {
        let mut h = small(100);
        h.insert(&[1, 2, 3]);
        h.insert(&[1, 2, 4]);
        h.insert(&[5, 1, 2, 4]);
        let m = h.matchers_at(&[1, 2], 8)[NEWER];
        assert_eq!(m.len, 2);
        let mut c = Vec::new();
        h.continuations(NEWER, m.state, &mut c);
        let got: Vec<(u32, u32)> = c.iter().map(|&(t, _, n)| (t, n)).collect();
        assert_eq!(got, [(4, 2), (3, 1)]);
    }

    #[test]
    fn eviction_drops_the_oldest_and_keeps_the_cap() {
        let mut h = small(40);
        for i in 0..30u32 {
            h.insert(&[i, i + 100, i + 200, i + 300, i + 400]);
            assert!(h.tokens() <= 40);
        }
        assert_eq!(h.longest_match(&[0, 100]), 0, "the oldest is gone");
        assert_eq!(h.longest_match(&[29, 129, 229]), 3, "the newest is there");
        assert!(h.tokens() >= 20, "at least half the cap once full");
        let held: usize = h.documents_held().map(<[u32]>::len).sum();
        assert_eq!(h.tokens(), held);
    }

    #[test]
    fn files_round_trip_and_damage_is_an_error() {
        let mut h = small(1000);
        h.insert(&[1, 2, 3, 4]);
        h.insert(&[5, 6]);
        let b = h.to_bytes();
        let back = HistoryIndex::from_bytes(&b, h.config().clone()).unwrap();
        assert_eq!(back, h);
        assert_eq!(back.longest_match(&[9, 2, 3]), 2);
        let mut bad = b.clone();
        bad[HEADER + 10] ^= 1;
        assert!(matches!(
            HistoryIndex::from_bytes(&bad, h.config().clone()),
            Err(DraftError::Checksum { .. })
        ));
        assert!(matches!(
            HistoryIndex::from_bytes(&b[..b.len() - 1], h.config().clone()),
            Err(DraftError::Truncated { .. })
        ));
        assert!(matches!(
            HistoryIndex::from_bytes(b"specdTRI........", h.config().clone()),
            Err(DraftError::BadMagic)
        ));
        assert!(h.check_vocab(7).is_ok());
        assert!(matches!(
            h.check_vocab(6),
            Err(DraftError::TokenOutOfVocabulary { token: 6, .. })
        ));
    }
}
