//! Helpers shared by the drafters that index the live context (prompt + output).

/// How far the tokens a drafter has indexed agree with the `context` it is asked about.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum IndexSync {
    /// `context` extends what was indexed: index `context[from..]` and go on.
    Extend(usize),
    /// `context` is not an extension (the drafter was driven inconsistently): re-index.
    Reset,
}

/// Tokens compared at the end of the indexed prefix: an O(1) consistency check, so a
/// drafter used without `begin`/`observe` (or out of order) re-indexes instead of drafting
/// from the wrong text. Drafts only cost time, never correctness, so a check that could in
/// principle miss an edit far back is acceptable.
const CHECK: usize = 32;

pub(crate) fn sync(indexed: &[u32], context: &[u32]) -> IndexSync {
    let n = indexed.len();
    if context.len() < n {
        return IndexSync::Reset;
    }
    let from = n.saturating_sub(CHECK);
    if indexed[from..] == context[from..n] && indexed.first() == context.first() {
        IndexSync::Extend(n)
    } else {
        IndexSync::Reset
    }
}

/// Copies up to `max` tokens of `doc` from `start` into `out` (cleared first). With
/// `periodic`, a copy that runs past the end of `doc` goes on with the tokens it has just
/// copied: a match inside the live context predicts that the text repeats with the period
/// `doc.len() - start`, which is what a looping output does.
pub(crate) fn copy_continuation(
    doc: &[u32],
    start: usize,
    max: usize,
    periodic: bool,
    out: &mut Vec<u32>,
) {
    out.clear();
    if start >= doc.len() {
        return;
    }
    let direct = (doc.len() - start).min(max);
    out.extend_from_slice(&doc[start..start + direct]);
    if periodic {
        while out.len() < max {
            // Position start + k past the end is the draft's own token k - (len - start).
            let t = out[out.len() - (doc.len() - start)];
            out.push(t);
        }
    }
}

/// Confidence that a continuation after a match of `len` tokens is right: grows with the
/// match length and saturates below 1 (a longer shared history predicts a longer copy).
pub(crate) fn match_confidence(len: usize, half: f32) -> f32 {
    let l = len as f32;
    l / (l + half)
}
