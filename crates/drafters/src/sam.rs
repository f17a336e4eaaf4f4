//! A generalized suffix automaton over several documents, built online.
//!
//! Documents are kept apart by restarting from the root (the generalized construction),
//! so no recognized string spans two documents. Each state records its first end position
//! (exact) and a recent end position (the newest position, maintained along at most
//! `recent_depth` suffix links per token so appends stay O(1); states further up keep an
//! older, still valid, end position). An automaton made by [`SuffixAutomaton::counting`]
//! also counts each state's end positions (how often its strings occur), maintained along
//! at most [`COUNT_DEPTH`] suffix links per token: exact for ordinary text, a lower bound
//! for states further up a longer chain (only near-periodic text such as a run of one
//! token builds such chains). Each user pays only for what it reads.

use crate::hash::FastMap;

/// A state of the automaton; 0 is the root (the empty string).
pub type StateId = u32;

const NONE: u32 = u32::MAX;

/// Suffix links walked per appended token to keep occurrence counts (see the module docs).
pub const COUNT_DEPTH: usize = 64;

#[derive(Clone, Debug)]
struct State {
    len: u32,
    link: u32,
    first_end: u32,
    recent_end: u32,
    /// End positions counted (occurrences of the state's strings).
    count: u32,
    /// Transitions (the root has one per distinct token).
    next: Edges,
}

/// A state's transitions. Most states have at most one, kept inline: a heap allocation
/// per state would double the automaton's memory.
#[derive(Clone, Debug, Default)]
enum Edges {
    #[default]
    None,
    One([(u32, u32); 1]),
    /// Sorted by token (binary search), at most [`LARGE_EDGES`] of them.
    Many(Vec<(u32, u32)>),
    /// More than [`LARGE_EDGES`]: kept in the order they were added, with an index.
    Large(Box<LargeEdges>),
}

/// Out-degree past which a state's transitions stop being one sorted list: an insert into
/// a sorted list moves every later transition, so filling a state of out-degree `k` took
/// time quadratic in `k`, and the root's out-degree is the vocabulary (a 1M-token history
/// of a 151k-token vocabulary took seconds to build). Below this, a sorted list is smaller
/// and as fast.
const LARGE_EDGES: usize = 64;

/// The transitions of a state of large out-degree: appended in O(1), looked up by hash.
#[derive(Clone, Debug, Default)]
struct LargeEdges {
    edges: Vec<(u32, u32)>,
    /// Token to its index in `edges`.
    at: FastMap<u32, u32>,
}

impl Edges {
    /// The transitions, sorted by token while they are few, in the order they were added
    /// once many.
    fn as_slice(&self) -> &[(u32, u32)] {
        match self {
            Edges::None => &[],
            Edges::One(e) => e,
            Edges::Many(v) => v,
            Edges::Large(l) => &l.edges,
        }
    }

    fn get(&self, token: u32) -> Option<u32> {
        match self {
            Edges::Large(l) => l.at.get(&token).map(|&i| l.edges[i as usize].1),
            _ => {
                let e = self.as_slice();
                e.binary_search_by_key(&token, |&(t, _)| t)
                    .ok()
                    .map(|i| e[i].1)
            }
        }
    }

    /// Points `token` at `to`, adding the transition if it is new.
    fn set(&mut self, token: u32, to: u32) {
        if let Edges::Large(l) = self {
            match l.at.get(&token) {
                Some(&i) => l.edges[i as usize].1 = to,
                None => {
                    l.at.insert(token, l.edges.len() as u32);
                    l.edges.push((token, to));
                }
            }
            return;
        }
        match self.as_slice().binary_search_by_key(&token, |&(t, _)| t) {
            Ok(i) => match self {
                Edges::One(e) => e[i].1 = to,
                Edges::Many(v) => v[i].1 = to,
                Edges::None | Edges::Large(_) => unreachable!("found in an empty list"),
            },
            Err(i) => match self {
                Edges::None => *self = Edges::One([(token, to)]),
                Edges::One([e]) => {
                    let mut v = vec![*e];
                    v.insert(i, (token, to));
                    *self = Edges::Many(v);
                }
                Edges::Many(v) if v.len() < LARGE_EDGES => v.insert(i, (token, to)),
                Edges::Many(v) => {
                    let mut edges = std::mem::take(v);
                    edges.push((token, to));
                    let at = edges
                        .iter()
                        .enumerate()
                        .map(|(i, &(t, _))| (t, i as u32))
                        .collect();
                    *self = Edges::Large(Box::new(LargeEdges { edges, at }));
                }
                Edges::Large(_) => unreachable!("handled above"),
            },
        }
    }

    fn heap_bytes(&self) -> usize {
        match self {
            Edges::Many(v) => v.capacity() * std::mem::size_of::<(u32, u32)>(),
            Edges::Large(l) => {
                std::mem::size_of::<LargeEdges>()
                    + l.edges.capacity() * std::mem::size_of::<(u32, u32)>()
                    // A slot per bucket (key, value and a control byte).
                    + l.at.capacity() * (2 * std::mem::size_of::<u32>() + 1)
            }
            _ => 0,
        }
    }
}

/// Suffix automaton over the concatenated documents; positions are global indices into
/// [`SuffixAutomaton::text`].
#[derive(Clone, Debug)]
pub struct SuffixAutomaton {
    states: Vec<State>,
    last: u32,
    text: Vec<u32>,
    doc_starts: Vec<u32>,
    recent_depth: usize,
    /// Suffix links walked per token to count occurrences (`None`: not counted).
    count_depth: Option<usize>,
}

/// A clone made while appending: strings of `from` up to `len` tokens now live in `clone`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Split {
    /// The state that was split.
    pub from: StateId,
    /// The new state holding `from`'s shorter strings.
    pub clone: StateId,
    /// Length of the longest string now in `clone`.
    pub len: u32,
}

impl SuffixAutomaton {
    /// An empty automaton that updates recent end positions along at most `recent_depth`
    /// suffix links per appended token (see the module docs); occurrences are not counted.
    pub fn new(recent_depth: usize) -> Self {
        SuffixAutomaton {
            states: vec![State {
                len: 0,
                link: NONE,
                first_end: NONE,
                recent_end: NONE,
                count: 0,
                next: Edges::None,
            }],
            last: 0,
            text: Vec::new(),
            doc_starts: vec![0],
            recent_depth,
            count_depth: None,
        }
    }

    /// An automaton that counts occurrences (see the module docs) and keeps recent end
    /// positions only for the newest state.
    pub fn counting() -> Self {
        SuffixAutomaton {
            count_depth: Some(COUNT_DEPTH),
            ..Self::new(0)
        }
    }

    /// Tokens appended from now on form a new document.
    pub fn start_document(&mut self) {
        self.last = 0;
        if self.doc_starts.last() != Some(&(self.text.len() as u32)) {
            self.doc_starts.push(self.text.len() as u32);
        }
    }

    /// Every token appended, documents concatenated.
    pub fn text(&self) -> &[u32] {
        &self.text
    }

    /// States, the root included.
    pub fn num_states(&self) -> usize {
        self.states.len()
    }

    /// `[start, end)` of the document holding position `pos`.
    pub fn document_of(&self, pos: usize) -> (usize, usize) {
        let i = self.doc_starts.partition_point(|&s| s as usize <= pos) - 1;
        let end = self
            .doc_starts
            .get(i + 1)
            .map_or(self.text.len(), |&e| e as usize);
        (self.doc_starts[i] as usize, end)
    }

    /// The documents, oldest first (empty ones skipped).
    pub fn documents(&self) -> impl Iterator<Item = &[u32]> {
        let ends = self.doc_starts[1..]
            .iter()
            .map(|&e| e as usize)
            .chain(std::iter::once(self.text.len()));
        self.doc_starts
            .iter()
            .zip(ends)
            .map(|(&s, e)| &self.text[s as usize..e])
            .filter(|d| !d.is_empty())
    }

    /// Length of the longest string state `s` recognizes.
    pub fn len(&self, s: StateId) -> usize {
        self.states[s as usize].len as usize
    }

    /// Whether no token has been appended.
    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    /// Suffix link (`None` for the root).
    pub fn link(&self, s: StateId) -> Option<StateId> {
        let l = self.states[s as usize].link;
        (l != NONE).then_some(l)
    }

    /// The first position where the strings of `s` end (`None` for the root).
    pub fn first_end(&self, s: StateId) -> Option<usize> {
        let e = self.states[s as usize].first_end;
        (e != NONE).then_some(e as usize)
    }

    /// A recent position where the strings of `s` end (the newest one for states near
    /// the end of the text; see the module docs).
    pub fn recent_end(&self, s: StateId) -> Option<usize> {
        let e = self.states[s as usize].recent_end;
        (e != NONE).then_some(e as usize)
    }

    /// How often the strings of `s` occur (see the module docs for when this is a lower
    /// bound); 0 in an automaton that does not count.
    pub fn count(&self, s: StateId) -> u32 {
        self.states[s as usize].count
    }

    /// The transitions of `s`: (token, state), sorted by token for a state with at most 64
    /// of them, in no particular order for one with more (the root, mostly).
    pub fn transitions(&self, s: StateId) -> &[(u32, StateId)] {
        self.states[s as usize].next.as_slice()
    }

    /// Bytes of the automaton and its text in use (a vector's spare capacity beyond its
    /// length is address space that is never touched, not memory).
    pub fn memory_bytes(&self) -> usize {
        let edges: usize = self.states.iter().map(|s| s.next.heap_bytes()).sum();
        self.states.len() * std::mem::size_of::<State>()
            + edges
            + self.text.len() * 4
            + self.doc_starts.len() * 4
    }

    /// The transition from `s` on `token`, if any.
    pub fn next(&self, s: StateId, token: u32) -> Option<StateId> {
        self.states[s as usize].next.get(token)
    }

    fn set_next(&mut self, s: u32, token: u32, to: u32) {
        self.states[s as usize].next.set(token, to);
    }

    /// Splits `q` so that its strings up to `len` tokens move to a new state.
    fn clone_state(&mut self, q: u32, len: u32) -> u32 {
        let mut st = self.states[q as usize].clone();
        st.len = len;
        let clone = self.states.len() as u32;
        self.states.push(st);
        self.states[q as usize].link = clone;
        clone
    }

    /// Points `p` and its suffix-link ancestors that go to `q` on `c` to `clone` instead.
    fn redirect(&mut self, mut p: u32, c: u32, q: u32, clone: u32) {
        while p != NONE && self.next(p, c) == Some(q) {
            self.set_next(p, c, clone);
            p = self.states[p as usize].link;
        }
    }

    /// Records `pos` as an end of `s` and its suffix-link ancestors: the recent end of the
    /// first `recent_depth` of them, the count of the first `count_depth`.
    fn touch(&mut self, mut s: u32, pos: u32) {
        let counts = self.count_depth;
        for depth in 0..=self.recent_depth.max(counts.unwrap_or(0)) {
            if s == 0 || s == NONE {
                break;
            }
            let st = &mut self.states[s as usize];
            if depth <= self.recent_depth {
                st.recent_end = pos;
            }
            if counts.is_some_and(|c| depth <= c) {
                st.count = st.count.saturating_add(1);
            }
            s = st.link;
        }
    }

    /// Appends a token to the current document (amortized O(1) states and transitions).
    /// Returns the split made, if any, so that matchers can follow their strings.
    pub fn push(&mut self, c: u32) -> Option<Split> {
        let pos = self.text.len() as u32;
        self.text.push(c);
        let last = self.last;
        let last_len = self.states[last as usize].len;
        let mut split = None;
        if let Some(q) = self.next(last, c) {
            // A new document repeating a string already present: no new end state.
            if self.states[q as usize].len == last_len + 1 {
                self.last = q;
            } else {
                let clone = self.clone_state(q, last_len + 1);
                self.redirect(last, c, q, clone);
                split = Some(Split {
                    from: q,
                    clone,
                    len: last_len + 1,
                });
                self.last = clone;
            }
            self.touch(self.last, pos);
            return split;
        }
        let cur = self.states.len() as u32;
        self.states.push(State {
            len: last_len + 1,
            link: 0,
            first_end: pos,
            recent_end: pos,
            count: 0,
            next: Edges::None,
        });
        let mut p = last;
        while p != NONE && self.next(p, c).is_none() {
            self.set_next(p, c, cur);
            p = self.states[p as usize].link;
        }
        if p != NONE {
            let q = self.next(p, c).expect("loop stopped at a transition");
            let p_len = self.states[p as usize].len;
            if self.states[q as usize].len == p_len + 1 {
                self.states[cur as usize].link = q;
            } else {
                let clone = self.clone_state(q, p_len + 1);
                self.redirect(p, c, q, clone);
                self.states[cur as usize].link = clone;
                split = Some(Split {
                    from: q,
                    clone,
                    len: p_len + 1,
                });
            }
        }
        self.last = cur;
        self.touch(cur, pos);
        split
    }
}

/// The longest suffix of a token stream that the automaton recognizes, kept up to date
/// token by token (amortized O(1) per token).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Matcher {
    /// The state recognizing the matched suffix.
    pub state: StateId,
    /// The matched suffix's length in tokens.
    pub len: usize,
}

impl Matcher {
    /// A matcher at the root: nothing matched yet.
    pub fn new() -> Self {
        Matcher::default()
    }

    /// The stream grew by `token`.
    pub fn advance(&mut self, sam: &SuffixAutomaton, token: u32) {
        loop {
            if let Some(n) = sam.next(self.state, token) {
                self.state = n;
                self.len += 1;
                return;
            }
            match sam.link(self.state) {
                Some(l) => {
                    self.state = l;
                    self.len = sam.len(l);
                }
                None => {
                    self.len = 0;
                    return;
                }
            }
        }
    }

    /// The automaton grew and split a state: move to the clone if our string went there.
    pub fn follow(&mut self, split: Option<Split>) {
        if let Some(s) = split {
            if self.state == s.from && self.len <= s.len as usize {
                self.state = s.clone;
            }
        }
    }
}
