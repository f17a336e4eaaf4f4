//! What every forward does around its arithmetic, shared by [`crate::Model`] and
//! [`crate::FakeTarget`] so that both accept, reject and commit exactly alike: input
//! validation, the context check, the pending nodes a commit checks, and assembling the
//! requested logits.

use std::ops::Range;
use std::sync::Arc;

use crate::{tree, Logits, RuntimeError, SeqInput, Want};

/// Per-row bookkeeping of one forward: row `r` is node `node` of input `item`, evaluated
/// at position `pos`.
pub(crate) struct RowInfo {
    pub item: usize,
    pub node: usize,
    pub pos: usize,
}

/// A validated forward: one row per node of every input, inputs' rows contiguous.
pub(crate) struct Batch {
    pub rows: Vec<RowInfo>,
    /// Per row, the flat indices of its node's chain from its root down to itself.
    pub paths: Vec<Vec<usize>>,
    /// Input i's node j is row `input_rows[i].start + j`.
    pub input_rows: Vec<Range<usize>>,
}

impl Batch {
    /// Checks every input (tokens below `vocab`, parents first, room in the context), in
    /// input order; the first failure is the error.
    pub fn plan(inputs: &mut [SeqInput<'_>], vocab: usize) -> Result<Batch, RuntimeError> {
        let mut rows = Vec::new();
        let mut paths = Vec::new();
        let mut input_rows = Vec::with_capacity(inputs.len());
        for (item, input) in inputs.iter_mut().enumerate() {
            if let Some(&c) = input
                .want
                .columns()
                .and_then(|cs| cs.iter().find(|&&c| c as usize >= vocab))
            {
                return Err(RuntimeError::BadToken(c));
            }
            input_rows.push(rows.len()..rows.len() + input.nodes.len());
            let node_paths = tree::paths(input.nodes, vocab)?;
            input.seq.check_room(input.nodes.len())?;
            let base = input.seq.len();
            for (node, p) in node_paths.into_iter().enumerate() {
                rows.push(RowInfo {
                    item,
                    node,
                    pos: base + p.len() - 1,
                });
                paths.push(p);
            }
        }
        Ok(Batch {
            rows,
            paths,
            input_rows,
        })
    }

    /// The rows whose logits are requested, per input, as node ranges.
    pub fn wanted(inputs: &[SeqInput<'_>]) -> Vec<Range<usize>> {
        inputs
            .iter()
            .map(|input| {
                let n = input.nodes.len();
                match input.want {
                    Want::All | Want::Argmax => 0..n,
                    Want::Last | Want::LastColumns(_) => n.saturating_sub(1)..n,
                    Want::None => n..n,
                }
            })
            .collect()
    }

    /// Records each input's nodes as its sequence's last forward, for `commit`.
    pub fn finish(inputs: &mut [SeqInput<'_>]) {
        for input in inputs.iter_mut() {
            input.seq.set_pending(input.nodes);
        }
    }
}

/// Keeps `row`'s `cols` and sets every other column to `-inf` (a `Want::LastColumns` row).
pub(crate) fn keep_columns(row: &mut [f32], cols: &[u32]) {
    let kept: Vec<(usize, f32)> = cols
        .iter()
        .map(|&c| (c as usize, row[c as usize]))
        .collect();
    row.fill(f32::NEG_INFINITY);
    for (c, v) in kept {
        row[c] = v;
    }
}

/// Splits one forward's logits (the `wanted` rows of every input, in order, `vocab` floats
/// each) into per-input views sharing the buffer.
pub(crate) fn split_logits(wanted: Vec<Range<usize>>, all: Vec<f32>, vocab: usize) -> Vec<Logits> {
    let data = Arc::new(all);
    let mut first = 0;
    wanted
        .into_iter()
        .map(|nodes| {
            let logits = Logits {
                vocab,
                first,
                data: Arc::clone(&data),
                nodes,
                argmax: None,
            };
            first += logits.nodes.len();
            logits
        })
        .collect()
}
