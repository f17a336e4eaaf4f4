//! Lookahead-style drafting from a trie shared by all requests.
//!
//! Output windows go into the shared trie as tokens stream (global counts, so later
//! requests benefit at once); prompt (and reference) windows go into a trie private to the
//! request, dropped at `end`: prompt counts are never visible to other requests, and
//! releasing them restores the shared pool exactly, with no per-node bookkeeping (or
//! pruning interplay) under the shared lock.
//! Drafts pick nodes best-first by count, half the budget reserved for output-seen nodes.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use specdec_tree::{Source, TokenTree};

use crate::build::TreeBuilder;
use crate::lookahead::trie::{NodeId, Trie, TrieConfig};
use crate::Drafter;

/// "May this token start a window?" (false for punctuation and whitespace tokens, which
/// the trie cannot recognize from ids alone).
pub type CanStart = Arc<dyn Fn(u32) -> bool + Send + Sync>;

/// Settings of [`TrieDrafter`].
#[derive(Clone)]
pub struct TrieDrafterConfig {
    /// Window length minus one (Lookahead: 12): drafts reach `branch_length - 1` tokens
    /// past a 2-token query.
    pub branch_length: usize,
    /// Which tokens start windows (`None`: all).
    pub can_start: Option<CanStart>,
    /// Insert output windows as tokens are observed (else only at `end`).
    pub stream_output: bool,
}

impl Default for TrieDrafterConfig {
    fn default() -> Self {
        TrieDrafterConfig {
            branch_length: 12,
            can_start: None,
            stream_output: true,
        }
    }
}

impl TrieDrafterConfig {
    /// Whether token `t` may start a window.
    fn can_start(&self, t: u32) -> bool {
        self.can_start.as_ref().is_none_or(|f| f(t))
    }

    /// Teaches `trie` a finished request at once: every window from the prompt's last 2
    /// tokens into `output`, as a drafter of this configuration streams them. A drafter that
    /// did not stream learns its output this way at its end, and a replica folds in what
    /// another replica's requests produced (shared drafting state) the same way.
    pub fn learn(&self, trie: &mut Trie, prompt: &[u32], output: &[u32]) {
        if output.is_empty() {
            return;
        }
        let tail = &prompt[prompt.len().saturating_sub(2)..];
        let tokens: Vec<u32> = tail.iter().chain(output).copied().collect();
        trie.insert_windows(&tokens, self.branch_length + 1, &|t| self.can_start(t));
        trie.maybe_decay();
    }
}

impl fmt::Debug for TrieDrafterConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TrieDrafterConfig")
            .field("branch_length", &self.branch_length)
            .field("can_start", &self.can_start.as_ref().map(|_| "fn"))
            .field("stream_output", &self.stream_output)
            .finish()
    }
}

/// Heap entry for best-first enumeration: highest count first, then lowest node id.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Entry {
    count: u32,
    node: NodeId,
    /// The builder node of the parent (`usize::MAX`: a root of the draft).
    parent: usize,
}

impl Ord for Entry {
    fn cmp(&self, o: &Self) -> Ordering {
        self.count.cmp(&o.count).then(o.node.cmp(&self.node))
    }
}

impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

/// Lazy best-first walk of the sub-trie under a query node: children are sorted by count,
/// so only each expanded node's best child and next sibling enter the heap.
struct BestFirst {
    heap: BinaryHeap<Entry>,
    total: f32,
}

impl BestFirst {
    fn new(trie: &Trie, query: Option<NodeId>) -> Self {
        let mut heap = BinaryHeap::new();
        let mut total = 0.0;
        if let Some(q) = query {
            total = trie.node_count(q) as f32;
            if let Some(&c) = trie.children(q).first() {
                heap.push(Entry {
                    count: trie.node_count(c),
                    node: c,
                    parent: usize::MAX,
                });
            }
        }
        BestFirst { heap, total }
    }

    /// Adds nodes to `b` until it holds `limit` nodes or the sub-trie is exhausted.
    fn fill(&mut self, trie: &Trie, b: &mut TreeBuilder, limit: usize) {
        while b.len() < limit {
            let Some(e) = self.heap.pop() else { return };
            let parent = (e.parent != usize::MAX).then_some(e.parent);
            // Conditional frequency, smoothed: one sighting is not certainty.
            let score = e.count as f32 / (self.total + 1.0);
            let id = b.add(parent, trie.node_token(e.node), Source::Trie, score);
            let siblings = trie.children(trie_parent(trie, e.node));
            if let Some(&s) = siblings.get(slot_of(trie, e.node) + 1) {
                self.heap.push(Entry {
                    count: trie.node_count(s),
                    node: s,
                    parent: e.parent,
                });
            }
            if let Some(&c) = trie.children(e.node).first() {
                self.heap.push(Entry {
                    count: trie.node_count(c),
                    node: c,
                    parent: id,
                });
            }
        }
    }
}

fn trie_parent(trie: &Trie, n: NodeId) -> NodeId {
    trie.nodes[n as usize].parent
}

fn slot_of(trie: &Trie, n: NodeId) -> usize {
    trie.nodes[n as usize].slot as usize
}

/// The deepest query node with children: the last 2 context tokens, else the last one.
fn query(trie: &Trie, context: &[u32]) -> Option<NodeId> {
    let n = context.len();
    [2, 1].into_iter().filter(|&k| n >= k).find_map(|k| {
        trie.find(&context[n - k..])
            .filter(|&q| !trie.children(q).is_empty())
    })
}

/// One request's view of a shared [`Trie`].
pub struct TrieDrafter {
    cfg: TrieDrafterConfig,
    shared: Arc<Mutex<Trie>>,
    prompt: Trie,
    /// Output tokens observed (and, when streaming, inserted).
    output: Vec<u32>,
    /// The prompt's last 2 tokens (see `open_tail`).
    tail: Vec<u32>,
    /// Open output windows: (node in the shared trie, tokens so far).
    open: Vec<(NodeId, usize)>,
    epoch: u64,
    builder: TreeBuilder,
}

impl TrieDrafter {
    /// A drafter for one request over the pool's `shared` trie, with an empty private trie for
    /// the request's prompt.
    pub fn new(shared: Arc<Mutex<Trie>>, cfg: TrieDrafterConfig) -> Self {
        let epoch = lock(&shared).epoch();
        TrieDrafter {
            cfg,
            shared,
            prompt: private_trie(),
            output: Vec::new(),
            tail: Vec::new(),
            open: Vec::new(),
            epoch,
            builder: TreeBuilder::new(),
        }
    }

    /// This request's private prompt trie.
    pub fn prompt_trie(&self) -> &Trie {
        &self.prompt
    }

    fn window(&self) -> usize {
        self.cfg.branch_length + 1
    }

    /// Windows from the prompt's last 2 tokens run on into the output and count as
    /// output: the pool learns how answers begin after a chat template. Opened with the
    /// first output token, so an empty output leaves the pool untouched.
    fn open_tail(&mut self) {
        self.open.clear();
        let tail = std::mem::take(&mut self.tail);
        self.stream(&tail);
        self.tail = tail;
    }

    /// Feeds tokens into the shared trie's open windows (one lock for the batch).
    fn stream(&mut self, tokens: &[u32]) {
        if tokens.is_empty() {
            return;
        }
        let shared = Arc::clone(&self.shared);
        let mut trie = lock(&shared);
        if trie.epoch() != self.epoch {
            // Node ids moved (a decay): close the open windows rather than guess.
            self.open.clear();
            self.epoch = trie.epoch();
        }
        let window = self.window();
        for &t in tokens {
            self.open.retain_mut(|(node, len)| {
                *node = trie.increment(*node, t);
                *len += 1;
                *len < window
            });
            if self.cfg.can_start(t) {
                let node = trie.increment(Trie::ROOT, t);
                if window > 1 {
                    self.open.push((node, 1));
                }
            }
        }
        if trie.maybe_decay() {
            self.open.clear();
        }
        self.epoch = trie.epoch();
    }
}

/// The most nodes a request's private trie holds: windows past it (the end of a long
/// prompt, or of large references) are not indexed. A window adds up to `branch_length + 1`
/// nodes a token, so without a bound one request's references could take gigabytes and
/// stall the engine thread while they are indexed. Half a million nodes (tens of MB) hold
/// every window of a 38k-token text at the default window.
pub const PRIVATE_TRIE_MAX_NODES: usize = 500_000;

/// A request's own trie: never pruned (it lives for one request), but filled only up to
/// [`PRIVATE_TRIE_MAX_NODES`] (see [`insert_bounded`]).
fn private_trie() -> Trie {
    Trie::new(TrieConfig {
        max_nodes: usize::MAX,
    })
}

fn lock(m: &Mutex<Trie>) -> std::sync::MutexGuard<'_, Trie> {
    // A panic elsewhere while holding the lock leaves counts usable: drafts are hints.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Drafter for TrieDrafter {
    fn name(&self) -> &'static str {
        "trie"
    }

    fn begin(&mut self, prompt: &[u32], references: &[Vec<u32>]) {
        self.prompt = private_trie();
        let window = self.window();
        let cfg = &self.cfg;
        let can_start = |t| cfg.can_start(t);
        let cap = PRIVATE_TRIE_MAX_NODES;
        // References are request-private text too (Lookahead saw them inside the prompt).
        // The prompt goes first: it is what the output most often repeats.
        let all = std::iter::once(prompt).chain(crate::bounded_references(references));
        for text in all {
            if !self
                .prompt
                .insert_windows_up_to(text, window, &can_start, cap)
            {
                break;
            }
        }
        self.output.clear();
        self.open.clear();
        self.tail = prompt[prompt.len().saturating_sub(2)..].to_vec();
    }

    fn observe(&mut self, committed: &[u32]) {
        if self.cfg.stream_output && self.output.is_empty() && !committed.is_empty() {
            self.open_tail();
        }
        self.output.extend_from_slice(committed);
        if self.cfg.stream_output {
            self.stream(committed);
        }
    }

    fn draft(&mut self, context: &[u32], budget: usize) -> TokenTree {
        let Some(&root) = context.last() else {
            return TokenTree::new();
        };
        if budget == 0 {
            return TokenTree::rooted(root);
        }
        self.builder.clear();
        let shared = Arc::clone(&self.shared);
        let trie = lock(&shared);
        let mut out = BestFirst::new(&trie, query(&trie, context));
        let mut own = BestFirst::new(&self.prompt, query(&self.prompt, context));
        out.fill(&trie, &mut self.builder, budget - budget / 2);
        own.fill(&self.prompt, &mut self.builder, budget);
        out.fill(&trie, &mut self.builder, budget);
        drop(trie);
        self.builder.build(root, budget)
    }

    fn end(&mut self, output: &[u32]) {
        // Learn whatever was not streamed (no streaming, or tokens never observed).
        if output.starts_with(&self.output) {
            let rest = &output[self.output.len()..];
            let streamed = self.cfg.stream_output && !self.output.is_empty();
            if !streamed {
                // Nothing went in yet: the whole output, from the prompt's tail.
                self.cfg.learn(&mut lock(&self.shared), &self.tail, output);
            } else {
                self.stream(rest);
            }
        }
        self.open.clear();
        self.output = Vec::new();
        self.prompt = private_trie();
    }
}
