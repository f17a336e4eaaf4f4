//! Verifying one round of one search: beam steps on the target's logits, taken as long as
//! every beam they keep has its logits in the forward (drafted, forced or known ahead).
//!
//! Each step is the plain beam step (`specdec_verify::beam::top_k` on the target's own
//! scores), so a strict round takes exactly plain beam search's steps; the draft only
//! decides how many of them one forward covers. A relaxed round takes AtSpeed's relaxed
//! sampling step instead.

use specdec_verify::beam::{log_normaliser, log_sum_exp, relaxed_step, top_k, Candidate};

use super::draft::DraftTree;
use super::search::{Beam, Search};
use super::side::{Row, Side};
use super::tree::{BeamTree, Kind};
use super::{Catalogue, Ranked, TrieNode};
use crate::EngineError;

/// Where a beam being verified stands in its origin beam's share of the forward.
#[derive(Clone, Copy, Debug)]
enum Pos {
    /// On the origin's known-ahead logits `ahead[j]` (after `extra[..j]`).
    Ahead(usize),
    /// On node `i` of the origin's tree.
    Node(usize),
}

/// Where the same beam stands on the draft: a base state and the tokens after it.
#[derive(Clone, Debug)]
enum DraftBase {
    /// The origin beam's own draft state.
    Origin,
    /// The origin's draft root (after its forced extra tokens).
    Root,
    Node(usize),
}

#[derive(Clone)]
struct Cursor {
    origin: usize,
    pos: Pos,
    tokens: Vec<u32>,
    trie: TrieNode,
    score: f64,
    draft: (DraftBase, Vec<u32>),
}

/// A round's inputs for one search: its beams' trees (forwarded) and what it drafted.
pub(crate) struct RoundInput<'a> {
    pub trees: &'a [BeamTree],
    pub drafted: Option<&'a DraftTree>,
    pub cat: &'a Catalogue,
}

/// Runs the round's steps and replaces the search's live beams with the ones it ends on.
/// Returns the steps taken.
pub(crate) fn verify_round(
    search: &mut Search,
    input: &RoundInput<'_>,
) -> Result<usize, EngineError> {
    let cat = input.cat;
    let mut cursors: Vec<Cursor> = search
        .live
        .iter()
        .enumerate()
        .map(|(b, beam)| start(b, beam))
        .collect();
    let mut steps = 0;
    let next = loop {
        let cands = candidates(search, input, &cursors);
        let picks = pick(search, input, &cursors, &cands);
        steps += 1;
        let mut next: Vec<Cursor> = Vec::new();
        let mut bonus: Vec<(usize, u32, f64)> = Vec::new();
        for i in picks {
            let c = cands[i];
            let cur = &cursors[c.parent];
            let child = cat
                .child(cur.trie, c.token)
                .expect("candidates follow the trie");
            let mut tokens = cur.tokens.clone();
            tokens.push(c.token);
            if let Some(entry) = cat.ends_entry(child) {
                search.finished.push(Ranked {
                    entry,
                    tokens,
                    score: c.score,
                });
                continue;
            }
            match child_pos(search, input, cur, c.token) {
                Some((pos, draft)) => next.push(Cursor {
                    origin: cur.origin,
                    pos,
                    tokens,
                    trie: child,
                    score: c.score,
                    draft,
                }),
                None => bonus.push((c.parent, c.token, c.score)),
            }
        }
        let scores = next
            .iter()
            .map(|c| c.score)
            .chain(bonus.iter().map(|b| b.2));
        let done = search.beats_every(scores);
        if !bonus.is_empty() || next.is_empty() || done {
            let mut live = Vec::with_capacity(next.len() + bonus.len());
            for c in &next {
                live.push(materialize(search, input, c)?);
            }
            for &(p, t, score) in &bonus {
                live.push(materialize_bonus(search, input, &cursors[p], t, score)?);
            }
            break live;
        }
        cursors = next;
    };
    search.live = next;
    Ok(steps)
}

fn start(origin: usize, beam: &Beam) -> Cursor {
    let (pos, draft) = if beam.target.pending.is_empty() {
        let last = beam.target.ahead.len() - 1;
        if last == 0 {
            (Pos::Ahead(0), (DraftBase::Root, Vec::new()))
        } else {
            (Pos::Ahead(0), (DraftBase::Origin, Vec::new()))
        }
    } else {
        (
            Pos::Node(beam.target.pending.len() - 1),
            (DraftBase::Root, Vec::new()),
        )
    };
    Cursor {
        origin,
        pos,
        tokens: beam.tokens.clone(),
        trie: beam.trie,
        score: beam.score,
        draft,
    }
}

fn row<'a>(search: &'a Search, input: &'a RoundInput<'_>, c: &Cursor) -> &'a [f32] {
    match c.pos {
        Pos::Ahead(j) => search.live[c.origin].target.ahead[j].get(),
        Pos::Node(i) => input.trees[c.origin].row(i),
    }
}

/// Every (cursor, allowed token) pair with its cumulative target log-probability.
fn candidates(search: &Search, input: &RoundInput<'_>, cursors: &[Cursor]) -> Vec<Candidate> {
    let mut cands = Vec::new();
    for (ci, c) in cursors.iter().enumerate() {
        let row = row(search, input, c);
        let lse = log_normaliser(row);
        for &(t, _) in input.cat.children(c.trie) {
            cands.push(Candidate {
                parent: ci,
                token: t,
                score: c.score + (row[t as usize] as f64 - lse),
            });
        }
    }
    cands
}

fn pick(
    search: &mut Search,
    input: &RoundInput<'_>,
    cursors: &[Cursor],
    cands: &[Candidate],
) -> Vec<usize> {
    let k = search.opts.k;
    if search.rng.is_none() {
        return top_k(cands, k, |p| &cursors[p].tokens);
    }
    // Relaxed: the draft's pairs (and the forced ones, which the constrained draft gives
    // probability 1 under their beam) are the proposals, weighted by the beam's share of
    // the target's mass times the draft's constrained probability.
    let lse_beams = log_sum_exp(cursors.iter().map(|c| c.score));
    let mut proposals: Vec<(usize, f64)> = Vec::new();
    // `candidates` lists each cursor's pairs together, in cursor order.
    let mut first = 0;
    for (ci, c) in cursors.iter().enumerate() {
        let end = first + cands[first..].iter().take_while(|x| x.parent == ci).count();
        let mine = first..end;
        first = end;
        let lw = c.score - lse_beams;
        let q_row = draft_row(search, input, c);
        let q_norm = q_row.map(|r| {
            log_sum_exp(
                input
                    .cat
                    .children(c.trie)
                    .iter()
                    .map(|&(t, _)| r[t as usize] as f64),
            )
        });
        for (i, cand) in mine.map(|i| (i, &cands[i])) {
            let drafted = match child_pos(search, input, c, cand.token) {
                Some((Pos::Node(n), _)) => {
                    matches!(input.trees[c.origin].kind(n), Kind::Drafted(_))
                }
                // Forced, or known ahead: the only allowed token.
                Some(_) => false,
                // An end token is in no tree (nothing follows it) but may have been drafted.
                None if drafted_end(input, c, cand.token) => true,
                None => continue,
            };
            let lq = match (drafted, q_row, q_norm) {
                (true, Some(r), Some(z)) => r[cand.token as usize] as f64 - z,
                _ => 0.0,
            };
            proposals.push((i, lw + lq));
        }
    }
    proposals.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let rng = search.rng.as_mut().expect("relaxed searches have an rng");
    relaxed_step(cands, &proposals, k, rng).picks
}

/// Whether the draft proposed ending an entry with `token` right at the cursor.
fn drafted_end(input: &RoundInput<'_>, c: &Cursor, token: u32) -> bool {
    let Some(d) = input.drafted else {
        return false;
    };
    if !c.draft.1.is_empty()
        || input
            .cat
            .child(c.trie, token)
            .and_then(|n| input.cat.ends_entry(n))
            .is_none()
    {
        return false;
    }
    let parent = match c.draft.0 {
        DraftBase::Root => None,
        DraftBase::Node(i) => Some(i),
        DraftBase::Origin => return false,
    };
    (0..d.nodes.len())
        .any(|i| d.nodes[i].beam == c.origin && d.parent(i) == parent && d.token(i) == token)
}

/// The draft's logits at the cursor's position, when the draft computed them.
fn draft_row<'a>(search: &'a Search, input: &'a RoundInput<'_>, c: &Cursor) -> Option<&'a [f32]> {
    if !c.draft.1.is_empty() {
        return None;
    }
    let d = input.drafted?;
    let side = match c.draft.0 {
        DraftBase::Origin => search.live[c.origin].draft.as_ref()?,
        DraftBase::Root => &d.roots[c.origin],
        DraftBase::Node(i) => d.nodes[i].side.as_ref()?,
    };
    side.ahead.front().map(Row::get)
}

/// Where `token` leads from `c` when its logits are in hand, and the draft position there.
fn child_pos(
    search: &Search,
    input: &RoundInput<'_>,
    c: &Cursor,
    token: u32,
) -> Option<(Pos, (DraftBase, Vec<u32>))> {
    let origin = &search.live[c.origin];
    let tree = &input.trees[c.origin];
    let draft_after = |base: DraftBase| {
        let mut extra = c.draft.1.clone();
        extra.push(token);
        (base, extra)
    };
    match c.pos {
        Pos::Ahead(j) if j + 1 < origin.target.ahead.len() => (origin.target.extra[j] == token)
            .then(|| {
                let last = j + 1 == origin.target.ahead.len() - 1;
                let d = if last {
                    (DraftBase::Root, Vec::new())
                } else {
                    draft_after(c.draft.0.clone())
                };
                (Pos::Ahead(j + 1), d)
            }),
        Pos::Ahead(_) => tree
            .child(None, token)
            .map(|n| (Pos::Node(n), node_draft(tree, n, c, token))),
        Pos::Node(i) => tree
            .child(Some(i), token)
            .map(|n| (Pos::Node(n), node_draft(tree, n, c, token))),
    }
}

fn node_draft(tree: &BeamTree, n: usize, c: &Cursor, token: u32) -> (DraftBase, Vec<u32>) {
    match tree.kind(n) {
        Kind::Drafted(d) => (DraftBase::Node(d), Vec::new()),
        _ => {
            let mut extra = c.draft.1.clone();
            extra.push(token);
            (c.draft.0.clone(), extra)
        }
    }
}

fn draft_side(search: &Search, input: &RoundInput<'_>, c: &Cursor, more: &[u32]) -> Option<Side> {
    let origin = search.live[c.origin].draft.as_ref()?;
    let base = match (&c.draft.0, input.drafted) {
        (DraftBase::Origin, _) => origin.clone(),
        (DraftBase::Root, Some(d)) => d.roots[c.origin].clone(),
        (DraftBase::Root, None) => origin.advanced(&search.live[c.origin].target.extra),
        (DraftBase::Node(i), Some(d)) => d.nodes[*i]
            .side
            .clone()
            .expect("live draft nodes have sides"),
        (DraftBase::Node(_), None) => unreachable!("draft nodes come from a draft tree"),
    };
    let mut tokens = c.draft.1.clone();
    tokens.extend_from_slice(more);
    Some(base.advanced(&tokens))
}

/// A beam on a position whose logits are known: the cache takes the path to it and the
/// forced nodes below it, whose logits stay known ahead.
fn materialize(search: &Search, input: &RoundInput<'_>, c: &Cursor) -> Result<Beam, EngineError> {
    let origin = &search.live[c.origin];
    let target = match c.pos {
        Pos::Ahead(j) => Side {
            seq: origin.target.seq.fork(),
            pending: Vec::new(),
            ahead: origin.target.ahead.iter().skip(j).cloned().collect(),
            extra: origin.target.extra[j..].to_vec(),
        },
        Pos::Node(i) => {
            let tree = &input.trees[c.origin];
            let mut path = tree.chain(i);
            while let Some(f) = tree.forced_kid(*path.last().expect("non-empty")) {
                path.push(f);
            }
            let at = path.iter().position(|&n| n == i).expect("on the path");
            let logits = tree.logits.as_ref().expect("forwarded");
            Side {
                seq: origin.target.seq.branch(&path)?,
                pending: Vec::new(),
                ahead: path[at..].iter().map(|&n| Row::new(logits, n)).collect(),
                extra: path[at + 1..].iter().map(|&n| tree.token(n)).collect(),
            }
        }
    };
    Ok(Beam {
        tokens: c.tokens.clone(),
        trie: c.trie,
        score: c.score,
        target,
        draft: draft_side(search, input, c, &[]),
    })
}

/// A beam the target chose where nothing was drafted: the token waits for the next
/// forward.
fn materialize_bonus(
    search: &Search,
    input: &RoundInput<'_>,
    c: &Cursor,
    token: u32,
    score: f64,
) -> Result<Beam, EngineError> {
    let origin = &search.live[c.origin];
    let seq = match c.pos {
        Pos::Ahead(j) => {
            debug_assert_eq!(
                j + 1,
                origin.target.ahead.len(),
                "forced positions have logits"
            );
            origin.target.seq.fork()
        }
        Pos::Node(i) => origin.target.seq.branch(&input.trees[c.origin].chain(i))?,
    };
    let mut tokens = c.tokens.clone();
    tokens.push(token);
    Ok(Beam {
        trie: input
            .cat
            .child(c.trie, token)
            .expect("picks follow the trie"),
        tokens,
        score,
        target: Side::new(seq, vec![token]),
        draft: draft_side(search, input, c, &[token]),
    })
}
